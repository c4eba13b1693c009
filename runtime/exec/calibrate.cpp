// Calibration of the cost model: see calibrate.h.
#include "runtime/exec/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include <unistd.h>

#include "importer/shape_infer.h"
#include "importer/training.h"
#include "partitioner/cost_model.h"
#include "runtime/exec/executor.h"

namespace pt {

namespace fs = std::filesystem;

namespace {

constexpr int kCacheVersion = 1;

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
  Value* param(Dims d) {
    Value* v = g.add_value("w" + std::to_string(g.values().size()), DType::kFloat32, d, ValueKind::kParameter);
    HostTensor t(DType::kFloat32, d);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (int64_t i = 0; i < t.size(); ++i) t.as<float>()[i] = u(rng);
    v->data = std::make_shared<HostTensor>(std::move(t));
    v->from_initializer = true;
    return v;
  }
  Value* op(const std::string& type, std::vector<Value*> ins, AttrMap attrs = {}, int since = 13) {
    const std::string name = type + "_" + std::to_string(g.nodes().size());
    Value* out = g.add_value(name + "/out", DType::kUndefined, {}, ValueKind::kActivation);
    Node* n = g.add_node(type, name, std::move(ins), {out}, std::move(attrs));
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

// The calibration cases: one graph each, the op of its class on x.
struct Case {
  Dims input;
  std::function<Value*(Builder&)> body;
};

std::vector<Case> cases(bool gpu) {
  const int64_t s = gpu ? 4 : 1;  // GPUs get larger work, where their rates are reached
  std::vector<Case> c;
  auto add = [&](Dims in, std::function<Value*(Builder&)> body) { c.push_back(Case{std::move(in), std::move(body)}); };
  for (auto [m, k, n] : {std::tuple{8, 32, 32}, {32, 128, 128}, {64, 256, 256}, {128, 512, 512}, {256, 1024, 512}})
    add({m * s, k}, [k = int64_t(k), n = int64_t(n)](Builder& b) { return b.op("MatMul", {b.x, b.param({k, n})}); });
  for (auto [n, ch, hw] : {std::tuple{2, 8, 8}, {8, 16, 16}, {8, 32, 16}, {16, 64, 16}, {16, 32, 32}})
    add({n * s, ch, hw, hw}, [ch = int64_t(ch)](Builder& b) {
      return b.op("Conv", {b.x, b.param({ch, ch, 3, 3})}, attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
    });
  for (auto [n, ch, hw] : {std::tuple{4, 16, 16}, {16, 32, 32}, {16, 96, 16}})
    add({n * s, ch, hw, hw}, [ch = int64_t(ch)](Builder& b) {
      return b.op("Conv", {b.x, b.param({ch, 1, 3, 3})},
                  attrs({{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", ch}}));
    });
  for (auto [n, ch, hw] : {std::tuple{4, 8, 8}, {16, 32, 16}, {32, 64, 32}})
    add({n * s, ch, hw, hw}, [ch = int64_t(ch)](Builder& b) {
      return b.op("BatchNormalization", {b.x, b.param({ch}), b.param({ch}), b.param({ch}), b.param({ch})});
    });
  for (auto [n, t, d] : {std::tuple{8, 16, 32}, {32, 64, 256}})
    add({n * s, t, d}, [d = int64_t(d)](Builder& b) {
      return b.op("LayerNormalization", {b.x, b.param({d}), b.param({d})}, attrs({{"axis", int64_t{-1}}}), 17);
    });
  for (auto [n, h, t] : {std::tuple{2, 2, 16}, {8, 4, 64}, {16, 8, 64}})
    add({n * s, h, t, t}, [](Builder& b) { return b.op("Softmax", {b.x}, attrs({{"axis", int64_t{-1}}})); });
  for (auto [n, ch, hw] : {std::tuple{4, 8, 16}, {16, 32, 32}})
    add({n * s, ch, hw, hw}, [](Builder& b) {
      return b.op("MaxPool", {b.x}, attrs({{"kernel_shape", std::vector<int64_t>{2, 2}},
                                             {"strides", std::vector<int64_t>{2, 2}}}));
    });
  add({16 * s, 64, 16, 16}, [](Builder& b) { return b.op("GlobalAveragePool", {b.x}); });
  for (auto [n, ch, hw] : {std::tuple{4, 8, 16}, {16, 32, 32}})
    add({n * s, ch, hw, hw}, [](Builder& b) {
      return b.op("Transpose", {b.x}, attrs({{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
    });
  for (int64_t n : {int64_t{1} << 10, int64_t{1} << 16, int64_t{1} << 20})
    add({n * s}, [n = n * s](Builder& b) { return b.op("Mul", {b.op("Relu", {b.x}), b.param({n})}); });
  return c;
}

struct Point {
  int cls;
  double count, roofline, t;  // nodes, their summed roofline time, their measured time
};

// Every node of the case's training graph timed on the device: the median of 5 runs after one
// warm-up.
Status measure(const Case& c, DeviceSpec* spec, std::vector<Point>* out) {
  Builder b(c.input);
  Value* result = c.body(b);
  RETURN_IF_ERROR(b.st);
  Graph& g = b.g;
  g.outputs = {result};
  SgdOptions sgd;
  ASSIGN_OR_RETURN(TrainingGraph tg, build_training_graph(g, LossKind::kMse, sgd));
  (void)tg;
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::create(g, spec->kind));
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  for (Value* v : g.inputs) {
    HostTensor& t = ex->host(v);
    for (int64_t i = 0; i < t.size(); ++i) t.as<float>()[i] = normal(rng);
    RETURN_IF_ERROR(ex->upload(v));
  }
  for (Value* v : g.values_of_kind(ValueKind::kHyper)) {
    HostTensor& t = ex->host(v);
    if (t.dtype() == DType::kFloat32) t.as<float>()[0] = 1e-6f;
    if (t.dtype() == DType::kInt64) t.as<int64_t>()[0] = 1;
    RETURN_IF_ERROR(ex->upload(v));
  }
  constexpr int kWarmup = 1, kRepeats = 5;
  std::vector<std::vector<double>> runs;
  for (int r = 0; r < kWarmup + kRepeats; ++r) {
    std::vector<double> s(g.nodes().size(), 0.0);
    RETURN_IF_ERROR(ex->run_timed(&s));
    if (r >= kWarmup) runs.push_back(std::move(s));
  }
  for (const auto& n : g.nodes()) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r[n->id]);
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    if (v[v.size() / 2] <= 0) continue;
    out->push_back(Point{static_cast<int>(op_class(*n)), 1, roofline_s(*n, *spec), v[v.size() / 2]});
  }
  return Status::ok();
}

// floor + scale x roofline, least squares in relative error (each point weighs 1 / t^2), both
// non-negative.
ClassCost fit(const std::vector<Point>& pts) {
  double s00 = 0, s01 = 0, s11 = 0, b0 = 0, b1 = 0;
  for (const Point& p : pts) {
    const double w = 1 / (p.t * p.t);
    s00 += w * p.count * p.count;
    s01 += w * p.count * p.roofline;
    s11 += w * p.roofline * p.roofline;
    b0 += w * p.count * p.t;
    b1 += w * p.roofline * p.t;
  }
  ClassCost c;
  c.points = static_cast<int>(pts.size());
  const double det = s00 * s11 - s01 * s01;
  if (det > 1e-12 * s00 * s11) {
    c.floor_s = (b0 * s11 - b1 * s01) / det;
    c.scale = (s00 * b1 - s01 * b0) / det;
  }
  if (!(det > 1e-12 * s00 * s11) || c.floor_s < 0 || c.scale <= 0) {
    // One-parameter fits: the better of a pure scale and a pure floor.
    const double scale = s11 > 0 ? b1 / s11 : 0, floor = s00 > 0 ? b0 / s00 : 0;
    auto err = [&](double f, double k) {
      double e = 0;
      for (const Point& p : pts) e += std::pow((f * p.count + k * p.roofline - p.t) / p.t, 2);
      return e;
    };
    if (scale > 0 && err(0, scale) <= err(floor, 0)) c = ClassCost{0, scale, c.points};
    else c = ClassCost{floor, 0, c.points};
  }
  return c;
}

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

// What a cached calibration must match: the device, the machine, the build, the rates it scales.
nlohmann::json cache_key(const DeviceSpec& spec, int threads) {
  return {{"version", kCacheVersion},
          {"device", device_kind_name(spec.kind)},
          {"model", spec.kind == DeviceKind::kCpu ? cpu_model() : cuda_device_name(0)},
          {"cores", static_cast<int>(std::thread::hardware_concurrency())},
          {"threads", threads},
          {"build", std::string(__DATE__) + " " + __TIME__},
          {"peak_flops", spec.peak_flops},
          {"mem_bandwidth", spec.mem_bandwidth}};
}

bool read_cache(const std::string& path, const nlohmann::json& key, DeviceSpec* spec, bool quiet) {
  std::ifstream in(path);
  if (!in) return false;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("key") != key) return false;  // another machine, build or rate: measured again
    for (int k = 0; k < kOpClasses; ++k) {
      const nlohmann::json& c = j.at("classes").at(op_class_name(static_cast<OpClass>(k)));
      spec->classes[k] = ClassCost{c.at("floor_s").get<double>(), c.at("scale").get<double>(), c.at("points").get<int>()};
      if (!(spec->classes[k].floor_s >= 0) || !(spec->classes[k].scale >= 0) || !std::isfinite(spec->classes[k].scale))
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
    j["classes"][op_class_name(static_cast<OpClass>(k))] = {
        {"floor_s", spec.classes[k].floor_s}, {"scale", spec.classes[k].scale}, {"points", spec.classes[k].points}};
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

Expected<CalibrationResult> calibrate_device(DeviceSpec* spec, const CalibrationOptions& opts) {
  CalibrationResult r;
  const nlohmann::json key = cache_key(*spec, opts.threads);
  if (!opts.cache_dir.empty()) {
    const std::string host = std::to_string(std::hash<std::string>{}(key.dump()) & 0xffffffffu);
    r.cache_path = (fs::path(opts.cache_dir) / ("calibration_" + std::string(device_kind_name(spec->kind)) + "_" +
                                                 std::to_string(opts.threads) + "t_" + host + ".json"))
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
  std::vector<Point> by[kOpClasses];
  for (const Point& p : pts) by[p.cls].push_back(p);
  const ClassCost all = fit(pts);
  for (int k = 0; k < kOpClasses; ++k) spec->classes[k] = by[k].size() >= 2 ? fit(by[k]) : ClassCost{all.floor_s, all.scale, 0};
  spec->calibrated = true;
  std::vector<double> errs;
  for (const Point& p : pts) {
    const ClassCost& c = spec->classes[p.cls];
    errs.push_back(std::abs(c.floor_s * p.count + c.scale * p.roofline - p.t) / p.t);
  }
  std::nth_element(errs.begin(), errs.begin() + errs.size() / 2, errs.end());
  r.points = static_cast<int>(pts.size());
  r.median_error = errs.empty() ? 0 : errs[errs.size() / 2];
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.cache_path.empty()) write_cache(r.cache_path, key, *spec);
  return r;
}

}  // namespace pt
