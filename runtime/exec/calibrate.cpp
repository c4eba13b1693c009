// Calibration of the cost model: see calibrate.h.
#include "runtime/exec/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "importer/fuse.h"
#include "importer/importer.h"
#include "importer/shape_infer.h"
#include "importer/training.h"
#include "partitioner/cost_model.h"
#include "runtime/exec/profiler.h"

namespace pt {

namespace fs = std::filesystem;

namespace {

constexpr int kCacheVersion = 5;
constexpr const char* kPhases[kCostPhases] = {"forward", "backward", "weight_grad"};

// A small graph under construction: float input x, parameters, nodes with inferred shapes.
struct Builder {
  Graph g;
  std::mt19937 rng{7};
  Value* x = nullptr;
  Status st = Status::ok();

  // x is the input scaled by a parameter, so that every case's op has a backward to time.
  explicit Builder(Dims d) {
    Value* in = g.add_value("x", DType::kFloat32, std::move(d), ValueKind::kInput);
    g.inputs.push_back(in);
    x = op("Mul", {in, param({1})});
  }
  // An initializer of kind k holding t.
  Value* initializer(HostTensor t, ValueKind k) {
    Value* v = g.add_value(std::string(k == ValueKind::kParameter ? "w" : "c").append(std::to_string(g.values().size())),
                           DType::kFloat32, t.dims(), k);
    v->data = std::make_shared<HostTensor>(std::move(t));
    v->from_initializer = true;
    return v;
  }
  Value* param(Dims d) {
    HostTensor t(DType::kFloat32, d);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (int64_t i = 0; i < t.size(); ++i) t.as<float>()[i] = u(rng);
    return initializer(std::move(t), ValueKind::kParameter);
  }
  // A read-only scalar (Clip's bounds).
  Value* constant(float value) {
    HostTensor t(DType::kFloat32, {});
    t.as<float>()[0] = value;
    return initializer(std::move(t), ValueKind::kConstant);
  }
  // A node with `outputs` outputs (inferred); its first.
  Value* op(const std::string& type, std::vector<Value*> ins, AttrMap attrs = {}, int since = 13, int outputs = 1) {
    const std::string name = type + "_" + std::to_string(g.nodes().size());
    std::vector<Value*> outs;
    for (int k = 0; k < outputs; ++k)
      outs.push_back(g.add_value(name + "/out" + std::to_string(k), DType::kUndefined, {}, ValueKind::kActivation));
    Value* out = outs[0];
    Node* n = g.add_node(type, name, std::move(ins), std::move(outs), std::move(attrs));
    n->since_version = since;
    if (st.is_ok()) st = infer_node(*n, "calibration");
    return out;
  }
};

AttrMap attrs(std::initializer_list<std::pair<std::string, Attribute>> kv) {
  AttrMap a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

// The calibration cases: blocks of the models people train, so that every op is timed in the
// company it keeps there (its input just written by another op, its output read by the next, at
// the sizes of ResNets, MobileNets and transformers), rather than alone in a warm cache, where it
// runs faster than in a model.
struct Case {
  Dims input;
  std::function<Value*(Builder&)> body;
};

AttrMap pads1() { return attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}); }

// Training BatchNormalization (batch statistics, running statistics out), as PyTorch's training
// exports give it.
Value* batch_norm(Builder& b, Value* x, int64_t ch) {
  return b.op("BatchNormalization", {x, b.param({ch}), b.param({ch}), b.param({ch}), b.param({ch})}, {}, 13, 5);
}

// A ResNet basic block: conv, norm and element-wise in context.
Value* residual_block(Builder& b, int64_t ch) {
  Value* h = b.op("Relu", {batch_norm(b, b.op("Conv", {b.x, b.param({ch, ch, 3, 3})}, pads1()), ch)});
  h = batch_norm(b, b.op("Conv", {h, b.param({ch, ch, 3, 3})}, pads1()), ch);
  return b.op("Relu", {b.op("Add", {h, b.x})});
}

Value* max_pool(Builder& b, Value* x) {
  return b.op("MaxPool", {x}, attrs({{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}}));
}

// ReLU6 as PyTorch exports it: Clip with constant bounds (not fused into the norm before it).
Value* relu6(Builder& b, Value* x) { return b.op("Clip", {x, b.constant(0.0f), b.constant(6.0f)}); }

// A MobileNet-V2 inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project, each with its norm,
// ReLU6 after the first two. With stride 2 the depthwise halves the map and there is no residual.
Value* inverted_block(Builder& b, int64_t ch, int64_t expand, int64_t stride = 1) {
  const int64_t e = ch * expand;
  Value* h = relu6(b, batch_norm(b, b.op("Conv", {b.x, b.param({e, ch, 1, 1})}), e));
  h = relu6(b, batch_norm(b, b.op("Conv", {h, b.param({e, 1, 3, 3})},
                                  attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                         {"strides", std::vector<int64_t>{stride, stride}},
                                         {"group", e}})),
                          e));
  h = batch_norm(b, b.op("Conv", {h, b.param({ch, e, 1, 1})}), ch);
  return stride == 1 ? b.op("Add", {h, b.x}) : h;
}

// A transformer's MLP half: LayerNorm, two products around a ReLU (or a GELU), the residual.
Value* mlp_block(Builder& b, int64_t d, bool gelu) {
  Value* h = b.op("LayerNormalization", {b.x, b.param({d}), b.param({d})}, attrs({{"axis", int64_t{-1}}}), 17);
  h = b.op(gelu ? "Gelu" : "Relu", {b.op("Add", {b.op("MatMul", {h, b.param({d, 4 * d})}), b.param({4 * d})})}, {},
           gelu ? 20 : 13);
  h = b.op("Add", {b.op("MatMul", {h, b.param({4 * d, d})}), b.param({d})});
  return b.op("Add", {h, b.x});
}

// Attention's core on [B, H, T, dh]: queries, keys and values from x (each x times a parameter, so
// that all three have gradients), scores, a softmax over keys, the weighted sum (fused into one
// FusedAttention by the import's pass, as in the models); then heads to features (a transpose).
Value* attention_block(Builder& b, int64_t dh) {
  Value* q = b.op("Mul", {b.x, b.param({dh})});
  Value* kt = b.op("Transpose", {b.op("Mul", {b.x, b.param({dh})})}, attrs({{"perm", std::vector<int64_t>{0, 1, 3, 2}}}));
  Value* v = b.op("Mul", {b.x, b.param({dh})});
  Value* s = b.op("MatMul", {q, kt});
  Value* p = b.op("Softmax", {s}, attrs({{"axis", int64_t{-1}}}));
  Value* o = b.op("MatMul", {p, v});
  return b.op("Transpose", {o}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
}

// `times` blocks in a row, each reading the last one's output (as x), so that a node's inputs and
// weights have left the faster caches by the time the backward reads them again, as in a model.
Value* repeat(Builder& b, int times, const std::function<Value*()>& block) {
  Value* out = b.x;
  for (int k = 0; k < times; ++k) {
    out = block();
    b.x = out;
  }
  return out;
}

std::vector<Case> cases(bool gpu) {
  const int64_t s = gpu ? 4 : 1;  // GPUs get larger work, where their rates are reached
  std::vector<Case> c;
  auto add = [&](Dims in, std::function<Value*(Builder&)> body) { c.push_back(Case{std::move(in), std::move(body)}); };
  for (auto [n, ch, hw] : {std::tuple{4, 16, 8}, {16, 32, 16}, {32, 64, 8}, {32, 64, 16}, {32, 128, 8}, {32, 256, 4},
                           {16, 64, 32}})
    add({n * s, ch, hw, hw}, [ch = int64_t(ch)](Builder& b) {
      return max_pool(b, repeat(b, 3, [&] { return residual_block(b, ch); }));
    });
  // Inverted residuals down to MobileNet's last maps (2x2 and 1x1 at 32x32 inputs, where nodes are
  // small enough to pay their fixed costs, some below the kernels' threading threshold).
  for (auto [n, ch, hw] : {std::tuple{8, 16, 16}, {32, 24, 16}, {32, 32, 8}, {32, 64, 4}, {32, 96, 4}, {32, 64, 2},
                           {32, 96, 2}, {32, 160, 1}})
    add({n * s, ch, hw, hw}, [ch = int64_t(ch)](Builder& b) { return repeat(b, 3, [&] { return inverted_block(b, ch, 6); }); });
  // A stride-2 block, as each MobileNet stage starts.
  for (auto [n, ch, hw] : {std::tuple{32, 24, 16}, {32, 32, 8}, {32, 64, 4}, {32, 96, 2}})
    add({n * s, ch, hw, hw}, [ch = int64_t(ch)](Builder& b) { return inverted_block(b, ch, 6, 2); });
  bool gelu = false;
  for (auto [n, t, d] : {std::tuple{8, 16, 32}, {32, 16, 64}, {32, 32, 64}, {32, 32, 128}, {16, 64, 256}, {8, 128, 512}}) {
    add({n * s, t, d}, [d = int64_t(d), gelu](Builder& b) { return repeat(b, 3, [&] { return mlp_block(b, d, gelu); }); });
    gelu = !gelu;
  }
  for (auto [n, h, t, dh] : {std::tuple{8, 2, 16, 16}, {32, 4, 16, 16}, {32, 4, 32, 16}, {32, 4, 32, 32}, {16, 8, 64, 32}})
    add({n * s, h, t, dh}, [dh = int64_t(dh)](Builder& b) { return attention_block(b, dh); });
  for (auto [n, ch] : {std::tuple{32, 64}, {32, 512}})
    add({n * s, ch, 4, 4}, [ch = int64_t(ch)](Builder& b) {
      return b.op("MatMul", {b.op("Flatten", {b.op("GlobalAveragePool", {b.x})}), b.param({ch, 10})});
    });
  for (int64_t n : {int64_t{1} << 12, int64_t{1} << 20, int64_t{1} << 22})
    add({n * s}, [n = n * s](Builder& b) { return b.op("Mul", {b.op("Relu", {b.x}), b.param({n})}); });
  return c;
}

using Point = CalibrationPoint;

// Every node of the case's training graph timed on the device: the median of 3 runs after one
// warm-up.
Status measure(const Case& c, DeviceSpec* spec, std::vector<Point>* out) {
  Builder b(c.input);
  Value* result = c.body(b);
  RETURN_IF_ERROR(b.st);
  Graph& g = b.g;
  g.outputs = {result};
  lower_stateful_ops(g, 0);
  // The import's fusions, as a model gets them (FusedAttention, FusedMatMul with its bias and
  // activation, BatchNormalization + Relu): the classes are timed on the ops that really run.
  FuseOptions fuse;
  fuse.attention_dropout = spec->kind == DeviceKind::kCpu;
  apply_fusions(g, fuse);
  SgdOptions sgd;
  ASSIGN_OR_RETURN(TrainingGraph tg, build_training_graph(g, LossKind::kMse, sgd));
  (void)tg;
  ASSIGN_OR_RETURN(std::vector<double> median, median_node_seconds(g, spec->kind, 1, 3));
  for (const auto& n : g.nodes()) {
    const double t = median[n->id];
    if (t <= 0) continue;
    const RooflineTerms r = roofline_terms(*n, *spec);
    out->push_back(Point{static_cast<int>(op_class(*n)), cost_phase(*n), 1, r.flops_s, r.bytes_s, t});
  }
  return Status::ok();
}

}  // namespace

// Three unknowns: every subset of them is solved by its normal equations and the best fit whose
// coefficients are all non-negative wins (the exact answer of non-negative least squares, at this
// size cheaper than an iterative solver).
ClassCost fit_class_cost(const std::vector<CalibrationPoint>& pts) {
  auto feature = [](const Point& p, int j) { return j == 0 ? p.count : j == 1 ? p.flops_s : p.bytes_s; };
  double ata[3][3] = {}, atb[3] = {};
  for (const Point& p : pts) {
    const double w = 1 / p.t;
    for (int i = 0; i < 3; ++i) {
      atb[i] += w * feature(p, i) * p.t;
      for (int j = 0; j < 3; ++j) ata[i][j] += w * feature(p, i) * feature(p, j);
    }
  }
  auto error = [&](const double x[3]) {
    double e = 0;
    for (const Point& p : pts) {
      const double r = x[0] * p.count + x[1] * p.flops_s + x[2] * p.bytes_s - p.t;
      e += r * r / p.t;
    }
    return e;
  };
  double best[3] = {0, 0, 0}, best_err = error(best);
  for (int mask = 1; mask < 8; ++mask) {
    int idx[3], k = 0;
    for (int j = 0; j < 3; ++j)
      if (mask >> j & 1) idx[k++] = j;
    // Gaussian elimination with partial pivoting on the k x k normal equations.
    double m[3][4];
    for (int r = 0; r < k; ++r) {
      for (int c = 0; c < k; ++c) m[r][c] = ata[idx[r]][idx[c]];
      m[r][k] = atb[idx[r]];
    }
    bool singular = false;
    for (int c = 0; c < k && !singular; ++c) {
      int piv = c;
      for (int r = c + 1; r < k; ++r)
        if (std::abs(m[r][c]) > std::abs(m[piv][c])) piv = r;
      singular = !(std::abs(m[piv][c]) > 1e-12 * std::max(1e-300, std::abs(ata[idx[c]][idx[c]])));
      if (singular) break;
      std::swap(m[c], m[piv]);
      for (int r = 0; r < k; ++r)
        if (r != c) {
          const double f = m[r][c] / m[c][c];
          for (int cc = c; cc <= k; ++cc) m[r][cc] -= f * m[c][cc];
        }
    }
    if (singular) continue;
    double x[3] = {0, 0, 0};
    bool ok = true;
    for (int r = 0; r < k; ++r) {
      x[idx[r]] = m[r][k] / m[r][r];
      if (!(x[idx[r]] >= 0) || !std::isfinite(x[idx[r]])) ok = false;
    }
    if (!ok) continue;
    const double e = error(x);
    if (e < best_err) {
      best_err = e;
      std::copy(x, x + 3, best);
    }
  }
  return ClassCost{best[0], best[1], best[2], static_cast<int>(pts.size())};
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown cpu";
}

// This binary: its size and modification time (a rebuilt tool, whose kernels may run at other
// speeds, calibrates again).
std::string build_id() {
  struct stat st {};
  if (::stat("/proc/self/exe", &st) != 0) return "unknown";
  return std::to_string(static_cast<long long>(st.st_size)) + "@" + std::to_string(static_cast<long long>(st.st_mtime));
}

// What a cached calibration must match: the device, the machine, the build, the rates it scales.
nlohmann::json cache_key(const DeviceSpec& spec, int threads) {
  return {{"version", kCacheVersion},
          {"device", device_kind_name(spec.kind)},
          {"model", spec.kind == DeviceKind::kCpu ? cpu_model() : cuda_device_name(0)},
          {"cores", static_cast<int>(std::thread::hardware_concurrency())},
          {"threads", threads},
          {"build", build_id()},
          {"peak_flops", spec.peak_flops},
          {"mem_bandwidth", spec.mem_bandwidth}};
}

bool read_cache(const std::string& path, const nlohmann::json& key, DeviceSpec* spec, bool quiet) {
  std::ifstream in(path);
  if (!in) return false;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("key") != key) {
      if (!quiet)
        std::fprintf(stderr, "notice: %s: calibrated on another machine, build or CPU rate; measuring again\n", path.c_str());
      return false;
    }
    for (int k = 0; k < kOpClasses; ++k)
      for (int ph = 0; ph < kCostPhases; ++ph) {
        const nlohmann::json& c = j.at("classes").at(op_class_name(static_cast<OpClass>(k))).at(kPhases[ph]);
        ClassCost& cc = spec->classes[k][ph];
        cc = ClassCost{c.at("floor_s").get<double>(), c.at("scale").get<double>(), c.at("byte_scale").get<double>(),
                       c.at("points").get<int>()};
        if (!(cc.floor_s >= 0) || !(cc.scale >= 0) || !(cc.byte_scale >= 0) || !std::isfinite(cc.scale) ||
            !std::isfinite(cc.floor_s) || !std::isfinite(cc.byte_scale))
          throw std::runtime_error("bad class");
      }
    return true;
  } catch (const std::exception&) {
    if (!quiet) std::fprintf(stderr, "notice: %s: not a calibration this build can read; measuring again\n", path.c_str());
    return false;
  }
}

void write_cache(const std::string& path, const nlohmann::json& key, const DeviceSpec& spec) {
  nlohmann::json j;
  j["key"] = key;
  for (int k = 0; k < kOpClasses; ++k)
    for (int ph = 0; ph < kCostPhases; ++ph) {
      const ClassCost& c = spec.classes[k][ph];
      j["classes"][op_class_name(static_cast<OpClass>(k))][kPhases[ph]] = {
          {"floor_s", c.floor_s}, {"scale", c.scale}, {"byte_scale", c.byte_scale}, {"points", c.points}};
    }
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) return;  // a cache that cannot be written only costs the next start a calibration
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

std::string user_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path d = xdg && *xdg ? fs::path(xdg) : home && *home ? fs::path(home) / ".cache" : fs::temp_directory_path();
  d /= "onnx-pipetrain";
  std::error_code ec;
  fs::create_directories(d, ec);
  return ec ? std::string() : d.string();
}

Expected<CalibrationResult> calibrate_device(DeviceSpec* spec, const CalibrationOptions& opts) {
  CalibrationResult r;
  const nlohmann::json key = cache_key(*spec, opts.threads);
  if (!opts.cache_dir.empty()) {
    // One file per host, device kind, thread count and program (hosts sharing a home folder keep
    // their own; so do the tool and a test or benchmark binary of the same build, whose different
    // build keys would otherwise make each measure again over the other's file, in parallel tests
    // in the middle of a run whose memory a test checks); a new build overwrites it.
    char host[256] = "unknown";
    ::gethostname(host, sizeof host - 1);
    std::error_code ec;
    std::string program = fs::read_symlink("/proc/self/exe", ec).filename().string();
    if (ec || program.empty()) program = "unknown";
    r.cache_path = (fs::path(opts.cache_dir) / std::string("calibration_")
                                                   .append(host)
                                                   .append("_")
                                                   .append(device_kind_name(spec->kind))
                                                   .append("_")
                                                   .append(std::to_string(opts.threads))
                                                   .append("t")
                                                   .append(program == "onnx-pipetrain" ? "" : "_" + program)
                                                   .append(".json"))
                       .string();
    if (!opts.refresh && read_cache(r.cache_path, key, spec, opts.quiet)) {
      spec->calibrated = true;
      r.from_cache = true;
      return r;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int saved_threads = cpu_kernel_threads();
  if (spec->kind == DeviceKind::kCpu) set_cpu_kernel_threads(opts.threads);
  std::vector<Point> pts;
  Status st = Status::ok();
  for (const Case& c : cases(spec->kind != DeviceKind::kCpu)) {
    st = measure(c, spec, &pts);
    if (!st.is_ok()) break;
  }
  if (spec->kind == DeviceKind::kCpu) set_cpu_kernel_threads(saved_threads);
  RETURN_IF_ERROR(st.with_context("calibration: "));
  // Each class and phase its own fit; one with fewer than 2 points takes its class's, or all points'.
  std::vector<Point> by[kOpClasses][kCostPhases], cls[kOpClasses];
  for (const Point& p : pts) {
    by[p.cls][p.phase].push_back(p);
    cls[p.cls].push_back(p);
  }
  const ClassCost all = fit_class_cost(pts);
  for (int k = 0; k < kOpClasses; ++k)
    for (int ph = 0; ph < kCostPhases; ++ph)
      spec->classes[k][ph] = by[k][ph].size() >= 2 ? fit_class_cost(by[k][ph])
                             : cls[k].size() >= 2  ? fit_class_cost(cls[k])
                                                   : ClassCost{all.floor_s, all.scale, all.byte_scale, 0};
  spec->calibrated = true;
  std::vector<double> errs;
  for (const Point& p : pts) {
    const ClassCost& c = spec->classes[p.cls][p.phase];
    errs.push_back(std::abs(c.floor_s * p.count + c.scale * p.flops_s + c.byte_scale * p.bytes_s - p.t) / p.t);
  }
  std::nth_element(errs.begin(), errs.begin() + errs.size() / 2, errs.end());
  r.points = static_cast<int>(pts.size());
  r.median_error = errs.empty() ? 0 : errs[errs.size() / 2];
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.cache_path.empty()) write_cache(r.cache_path, key, *spec);
  return r;
}

}  // namespace pt
