// Training-step benchmark of one ONNX model on a CPU stage: import, training graph (softmax
// cross-entropy, SGD momentum 0.9, lr 0.01), then median / p10 / p90 milliseconds per step and the
// peak resident memory. Validates before it times: the first loss is finite and the loss falls over
// 20 steps on one fixed batch. tools/bench/step_vs_torch.py runs it beside PyTorch for the ratio.
//
// A step is the library's own (Trainer::step, what Trainer::train runs per batch: copy the batch
// in, set the Dropout step and the rate, run every node: forward, loss, backward, update).
#include <cblas.h>  // OpenBLAS: openblas_set_num_threads, openblas_get_num_threads
#include <dnnl.h>   // dnnl_sgemm: the GEMM peak (--gemm-peak)
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tools/omp_env.h"
#include "importer/importer.h"
#include "importer/precision.h"
#include "importer/training.h"
#include "partitioner/cost_model.h"
#include "partitioner/device_spec.h"
#include "runtime/exec/calibrate.h"
#include "runtime/data/data.h"
#include "runtime/exec/executor.h"
#include "runtime/single/trainer.h"

namespace pt {
namespace {

struct Options {
  std::string model;
  int64_t batch_size = 32;
  int64_t steps = 20;
  int64_t warmup = 3;
  int threads = 0;  // 0: leave OpenMP's and OpenBLAS's defaults
  int64_t vocab = 100;  // int64 model inputs: tokens drawn from [0, vocab)
  bool per_node = false;
  int64_t top = 15;  // --top: nodes listed by --per-node
  bool json = false;
  bool memory_plan = true;
  std::vector<std::string> no_fusion;  // fusion passes turned off (importer/fuse.h)
  bool gemm_peak = false;  // measure the machine's float GEMM rate and set the convolutions against it
  Precision precision = Precision::kFp32;  // --precision (importer/precision.h)
  std::string cost_csv;  // --cost-csv: every node's measured time beside the calibrated cost model's
};

constexpr float kLr = 0.01f;
constexpr float kMomentum = 0.9f;
constexpr int kValidationSteps = 20;
constexpr size_t kTopOps = 40;  // op types listed (a model has a few dozen)

// The machine's float GEMM rate: the best of 5 square products through oneDNN (the library the
// convolutions use) and through OpenBLAS, each validated against a few dot products first.
constexpr int64_t kPeakN = 1024;
struct GemmPeak {
  double dnnl = 0, blas = 0;  // FLOP/s
};
GemmPeak measure_gemm_peak() {
  const int64_t n = kPeakN;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto* v : {&a, &b})
    for (float& x : *v) x = u(rng);
  auto check = [&](const char* what) {
    for (int64_t i : {int64_t{0}, n / 3, n - 1}) {
      double want = 0;
      for (int64_t k = 0; k < n; ++k) want += static_cast<double>(a[i * n + k]) * b[k * n + (n - 1 - i)];
      if (std::fabs(c[i * n + (n - 1 - i)] - want) > 1e-3 * (1 + std::fabs(want))) {
        std::fprintf(stderr, "step_bench: %s GEMM gave a wrong product\n", what);
        std::exit(1);
      }
    }
  };
  auto best = [&](auto&& run) {
    double t = 1e30;
    for (int r = 0; r < 6; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) t = std::min(t, s);  // the first call warms up
    }
    return 2.0 * n * n * n / t;
  };
  GemmPeak p;
  p.dnnl = best([&] { dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
  check("oneDNN");
  p.blas = best([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n), static_cast<int>(n),
                1.0f, a.data(), static_cast<int>(n), b.data(), static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
  });
  check("OpenBLAS");
  return p;
}

int usage(const std::string& why) {
  std::fprintf(stderr,
               "step_bench: error: %s\n"
               "usage: step_bench MODEL.onnx --batch-size B [--steps N] [--warmup W] [--threads T]\n"
               "                  [--vocab V] [--per-node] [--top N] [--json] [--no-memory-plan]\n"
               "                  [--no-fusion PASS]... [--gemm-peak] [--precision fp32|bf16]\n"
               "                  [--cost-csv FILE]\n",
               why.c_str());
  return 2;
}

// Parses the flags; returns 0 when fine, else the exit code (after printing why).
int parse(int argc, char** argv, Options* o) {
  auto int_flag = [&](int& i, const std::string& name, int64_t min, int64_t* out) -> bool {
    if (i + 1 >= argc) return false;
    char* end = nullptr;
    const long long v = std::strtoll(argv[++i], &end, 10);
    if (!end || *end || v < min) {
      std::fprintf(stderr, "step_bench: error: %s %s: must be an integer >= %lld\n", name.c_str(), argv[i],
                   static_cast<long long>(min));
      return false;
    }
    *out = v;
    return true;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    int64_t v = 0;
    if (a == "--batch-size") {
      if (!int_flag(i, a, 1, &o->batch_size)) return 2;
    } else if (a == "--steps") {
      if (!int_flag(i, a, 1, &o->steps)) return 2;
    } else if (a == "--warmup") {
      if (!int_flag(i, a, 0, &o->warmup)) return 2;
    } else if (a == "--threads") {
      if (!int_flag(i, a, 1, &v)) return 2;
      o->threads = static_cast<int>(v);
    } else if (a == "--vocab") {
      if (!int_flag(i, a, 1, &o->vocab)) return 2;
    } else if (a == "--per-node") {
      o->per_node = true;
    } else if (a == "--top") {
      if (!int_flag(i, a, 1, &o->top)) return 2;
      o->per_node = true;
    } else if (a == "--json") {
      o->json = true;
    } else if (a == "--no-memory-plan") {
      o->memory_plan = false;
    } else if (a == "--gemm-peak") {
      o->gemm_peak = true;
      o->per_node = true;
    } else if (a == "--cost-csv") {
      if (i + 1 >= argc) return usage("--cost-csv needs a file");
      o->cost_csv = argv[++i];
      o->per_node = true;
    } else if (a == "--no-fusion") {
      if (i + 1 >= argc) return usage("--no-fusion needs a pass name");
      o->no_fusion.push_back(argv[++i]);
    } else if (a == "--precision") {
      if (i + 1 >= argc) return usage("--precision needs fp32 or bf16");
      auto p = parse_precision(argv[++i]);
      if (!p) return usage(p.status().message());
      o->precision = *p;
    } else if (a == "-h" || a == "--help") {
      return usage("help requested");
    } else if (!a.empty() && a[0] == '-') {
      return usage("unknown flag " + a);
    } else if (o->model.empty()) {
      o->model = a;
    } else {
      return usage("more than one model given (" + o->model + ", " + a + ")");
    }
  }
  if (o->model.empty()) return usage("no model given");
  return 0;
}

// Peak resident set of this process in KiB (VmHWM of /proc/self/status); -1 when unreadable.
long peak_rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

// Nearest-rank percentile of sorted values, q in [0, 1].
double percentile(const std::vector<double>& sorted, double q) {
  const size_t n = sorted.size();
  size_t k = static_cast<size_t>(std::ceil(q * n));
  k = std::clamp<size_t>(k, 1, n);
  return sorted[k - 1];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out;
}

// Samples for the model input: synthetic_dataset's N(0,1) floats and valid class labels, or, for
// an int64 input (token ids), tokens uniform in [0, vocab) with synthetic_dataset's labels.
Dataset make_data(const Value* in, const TrainingGraph& tg, int64_t n, int64_t vocab, uint64_t seed) {
  DataSpec spec;
  spec.sample_dims.assign(in->dims.begin() + 1, in->dims.end());
  spec.label_dtype = tg.loss.labels->dtype;
  spec.label_sample_dims.assign(tg.loss.labels->dims.begin() + 1, tg.loss.labels->dims.end());
  spec.num_classes = tg.loss.num_classes;
  Dataset d = synthetic_dataset(spec, n, seed);
  if (in->dtype == DType::kInt64) {
    Dims xd = spec.sample_dims;
    xd.insert(xd.begin(), n);
    d.x = HostTensor(DType::kInt64, xd);
    std::mt19937_64 rng(seed + 1);
    std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
    for (int64_t i = 0; i < d.x.size(); ++i) d.x.as<int64_t>()[i] = tok(rng);
    d.source = "synthetic (int64 tokens in [0, " + std::to_string(vocab) + "))";
  }
  return d;
}

// "[32, 64, 64] x [64, 128]": the dims of a node's inputs, so that a slow node can be reproduced.
std::string input_dims(const Node* n) {
  std::string out;
  for (const Value* v : n->inputs) {
    if (!out.empty()) out += " x ";
    out += v ? dims_str(v->dims) : "-";
  }
  return out;
}

struct NodeTime {
  const Node* node;
  double seconds;  // mean per step
};

struct Measured {
  std::vector<double> val_losses;  // the validation steps' losses
  double first5 = 0, last5 = 0;    // their first and last five's means
  std::vector<double> ms;          // the timed steps, in order
  double med = 0, p10 = 0, p90 = 0;
  // --per-node: the slowest nodes, the op types (with phase) by time, their sum, the cost model's
  // FLOPs (partitioner/cost_model.h) by op type, and the convolutions' (forward and backward).
  std::vector<NodeTime> top;
  std::vector<std::pair<std::string, double>> by_op;
  double node_total = 0;
  std::map<std::string, double> op_flops;
  double conv_s = 0, conv_flops = 0;
  std::vector<double> node_s;  // every node's mean seconds (by node id)
  long rss = 0;          // peak resident KiB
  size_t own_bytes = 0;  // every value's own (unplanned) buffer
};

using StepFn = std::function<Expected<double>(std::vector<double>*)>;
using BatchFn = std::function<void(int64_t)>;  // copies batch k of the eight into the input buffers

// Validation before timing: a finite first loss, and a loss that falls over 20 steps on one
// repeated batch. 0, or the exit code.
int validate(const StepFn& step, Measured* m) {
  std::vector<double>& val_losses = m->val_losses;
  for (int i = 0; i < kValidationSteps; ++i) {
    Expected<double> l = step(nullptr);
    if (!l) {
      std::printf("FAIL: training step %d: %s\n", i + 1, l.status().message().c_str());
      return 1;
    }
    val_losses.push_back(*l);
    if (!std::isfinite(val_losses.back())) {
      std::printf("FAIL: loss at validation step %d is %g (not finite)\n", i + 1, val_losses.back());
      return 1;
    }
  }
  // Dropout makes single steps noisy: compare the means of the first and last five steps.
  const double first5 = m->first5 = std::accumulate(val_losses.begin(), val_losses.begin() + 5, 0.0) / 5;
  const double last5 = m->last5 = std::accumulate(val_losses.end() - 5, val_losses.end(), 0.0) / 5;
  if (!(last5 < first5)) {
    std::printf("FAIL: the loss does not fall over %d steps on one batch: mean of steps 1-5 %.5f, of steps 16-20 "
                "%.5f (first %.5f, last %.5f)\n",
                kValidationSteps, first5, last5, val_losses.front(), val_losses.back());
    return 1;
  }

  return 0;
}

// Warm-up, then timed steps over the eight batches (each step's batch copied in, timed with it).
// 0, or the exit code.
int time_steps(const Options& o, const StepFn& step, const BatchFn& batch_in, Measured* m) {
  using clock = std::chrono::steady_clock;
  std::vector<double>& ms = m->ms;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    const auto t0 = clock::now();
    batch_in(i % 8);
    Expected<double> l = step(nullptr);
    const double dt = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (!l) {
      std::printf("FAIL: timed step %lld: %s\n", static_cast<long long>(i + 1), l.status().message().c_str());
      return 1;
    }
    if (!std::isfinite(*l)) {
      std::printf("FAIL: loss at timed step %lld is not finite\n", static_cast<long long>(i + 1));
      return 1;
    }
    if (i >= o.warmup) ms.push_back(dt);
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  m->med = median(ms);
  m->p10 = percentile(sorted, 0.10);
  m->p90 = percentile(sorted, 0.90);

  return 0;
}

// Per-node times: mean over a few more steps, each node timed on its own. 0, or the exit code.
int time_nodes(const Options& o, const Graph& g, const StepFn& step, const BatchFn& batch_in, Measured* m) {
  std::vector<NodeTime>& top = m->top;
  std::vector<std::pair<std::string, double>>& by_op = m->by_op;
  double& node_total = m->node_total;
  std::map<std::string, double>& op_flops = m->op_flops;
  double &conv_s = m->conv_s, &conv_flops = m->conv_flops;
  if (o.per_node) {
    const int reps = static_cast<int>(std::clamp<int64_t>(o.steps / 2, 1, 5));
    std::vector<double> sec(g.nodes().size(), 0.0);
    for (int r = 0; r < reps; ++r) {
      batch_in(r % 8);
      Expected<double> l = step(&sec);
      if (!l) {
        std::printf("FAIL: timed per-node step: %s\n", l.status().message().c_str());
        return 1;
      }
    }
    std::map<std::string, double> ops;
    m->node_s.assign(g.nodes().size(), 0.0);
    for (const auto& n : g.nodes()) {
      const double s = static_cast<size_t>(n->id) < sec.size() ? sec[n->id] / reps : 0.0;
      m->node_s[static_cast<size_t>(n->id)] = s;
      node_total += s;
      top.push_back({n.get(), s});
      const std::string key = n->op_type + " (" + phase_name(n->phase) + ")";
      ops[key] += s;
      op_flops[key] += node_flops(*n);
      if (n->op_type == "Conv" || n->op_type == "FusedConv" || n->op_type == "ConvGradInput" ||
          n->op_type == "ConvGradWeight") {
        conv_s += s;
        conv_flops += node_flops(*n);
      }
    }
    std::sort(top.begin(), top.end(), [](const NodeTime& a, const NodeTime& b) { return a.seconds > b.seconds; });
    if (top.size() > static_cast<size_t>(o.top)) top.resize(static_cast<size_t>(o.top));
    by_op.assign(ops.begin(), ops.end());
    std::sort(by_op.begin(), by_op.end(), [](auto& a, auto& b) { return a.second > b.second; });
    if (by_op.size() > kTopOps) by_op.resize(kTopOps);
  }
  return 0;
}

// The results as one JSON object on one line.
void print_json(const Options& o, const Graph& g, const Value* in, int64_t batch, size_t forward_nodes, const Dataset& data, const MemoryPlan& plan, const Measured& m) {
  const std::vector<double>& ms = m.ms;
  const std::vector<double>& val_losses = m.val_losses;
  const std::vector<NodeTime>& top = m.top;
  const auto& by_op = m.by_op;
  const double med = m.med, p10 = m.p10, p90 = m.p90, first5 = m.first5, last5 = m.last5;
  const double node_total = m.node_total;
  const long rss = m.rss;
  const size_t own_bytes = m.own_bytes;
  const double mib = 1024.0 * 1024.0;
  const int omp_threads = omp_get_max_threads(), blas_threads = openblas_get_num_threads();
  std::printf("{\"model\": \"%s\", \"batch\": %lld, \"nodes\": %zu, \"forward_nodes\": %zu, \"steps\": %zu, "
              "\"warmup\": %lld, \"omp_threads\": %d, \"blas_threads\": %d, \"median_ms\": %.4f, \"p10_ms\": %.4f, "
              "\"p90_ms\": %.4f, \"steps_per_s\": %.4f, \"peak_rss_kib\": %ld, \"loss_first\": %.6f, "
              "\"loss_step20\": %.6f, \"loss_first5_mean\": %.6f, \"loss_last5_mean\": %.6f, "
              "\"plan_values\": %zu, \"plan_arena_mib\": %.3f, \"plan_unshared_mib\": %.3f, \"own_buffers_mib\": %.3f, "
              "\"plan_aliased\": %zu, \"plan_aliased_mib\": %.3f",
              json_escape(o.model).c_str(), static_cast<long long>(batch), g.nodes().size(), forward_nodes,
              ms.size(), static_cast<long long>(o.warmup), omp_threads, blas_threads, med, p10, p90, 1e3 / med,
              rss, val_losses.front(), val_losses.back(), first5, last5, plan.planned_values, plan.arena_bytes / mib,
              plan.planned_bytes / mib, own_bytes / mib, plan.aliased_values, plan.aliased_bytes / mib);
  if (o.per_node) {
    std::printf(", \"per_node_total_ms\": %.4f, \"top_nodes\": [", 1e3 * node_total);
    for (size_t i = 0; i < top.size(); ++i)
      std::printf("%s{\"name\": \"%s\", \"op\": \"%s\", \"phase\": \"%s\", \"inputs\": \"%s\", \"ms\": %.4f, \"share\": %.4f}",
                  i ? ", " : "", json_escape(top[i].node->name).c_str(), top[i].node->op_type.c_str(),
                  phase_name(top[i].node->phase), input_dims(top[i].node).c_str(), 1e3 * top[i].seconds,
                  node_total > 0 ? top[i].seconds / node_total : 0.0);
    std::printf("], \"top_ops\": [");
    for (size_t i = 0; i < by_op.size(); ++i)
      std::printf("%s{\"op\": \"%s\", \"ms\": %.4f, \"share\": %.4f}", i ? ", " : "", by_op[i].first.c_str(),
                  1e3 * by_op[i].second, node_total > 0 ? by_op[i].second / node_total : 0.0);
    std::printf("]");
  }
  std::printf("}\n");
}

// The results as text.
void print_text(const Options& o, const Graph& g, const Value* in, int64_t batch, size_t forward_nodes, const Dataset& data, const MemoryPlan& plan, const Measured& m) {
  const std::vector<double>& ms = m.ms;
  const std::vector<double>& val_losses = m.val_losses;
  const double med = m.med, p10 = m.p10, p90 = m.p90, first5 = m.first5, last5 = m.last5;
  const double node_total = m.node_total, conv_s = m.conv_s, conv_flops = m.conv_flops;
  const long rss = m.rss;
  const std::vector<NodeTime>& top = m.top;
  const auto& by_op = m.by_op;
  std::map<std::string, double> op_flops = m.op_flops;
  const size_t own_bytes = m.own_bytes;
  const double mib = 1024.0 * 1024.0;
  const int omp_threads = omp_get_max_threads(), blas_threads = openblas_get_num_threads();
  std::printf("model: %s (%zu forward nodes, %zu in the training graph), batch %lld, input %s %s\n", o.model.c_str(),
              forward_nodes, g.nodes().size(), static_cast<long long>(batch), dims_str(in->dims).c_str(),
              dtype_name(in->dtype));
  std::printf("data: %s\n", data.source.c_str());
  std::printf("threads: OpenMP %d, OpenBLAS %d; idle OpenMP threads: %s\n", omp_threads, blas_threads,
              omp_wait_description().c_str());
  std::printf("validation: ok (loss %.4f at step 1, %.4f at step %d; mean of steps 1-5 %.4f > 16-20 %.4f)\n",
              val_losses.front(), val_losses.back(), kValidationSteps, first5, last5);
  std::printf("step: median %.3f ms, p10 %.3f ms, p90 %.3f ms over %zu steps (after %lld warm-up); %.2f steps/s\n",
              med, p10, p90, ms.size(), static_cast<long long>(o.warmup), 1e3 / med);
  std::printf("peak resident memory: %.1f MiB (VmHWM)\n", rss / 1024.0);
  if (o.memory_plan)
    std::printf("memory plan: %zu values share a %.1f MiB arena (%.1f MiB without sharing); other buffers %.1f MiB; "
                "%zu copies aliased (%.1f MiB, reshape aliases %s)\n",
                plan.planned_values, plan.arena_bytes / mib, plan.planned_bytes / mib, own_bytes / mib,
                plan.aliased_values, plan.aliased_bytes / mib, ExecSettings{}.reshape_alias ? "on" : "off");
  else
    std::printf("memory plan: off (--no-memory-plan); buffers %.1f MiB\n", own_bytes / mib);
  if (o.per_node) {
    std::printf("\nper node (mean of timed steps; sum %.3f ms):\n", 1e3 * node_total);
    std::printf("  %-24s %-9s %9s %7s  %s\n", "op", "phase", "ms", "share", "node");
    for (const NodeTime& t : top)
      std::printf("  %-24s %-9s %9.3f %6.1f%%  %s %s\n", t.node->op_type.c_str(), phase_name(t.node->phase),
                  1e3 * t.seconds, node_total > 0 ? 100 * t.seconds / node_total : 0.0, t.node->name.c_str(),
                  input_dims(t.node).c_str());
    std::printf("\nper op type and phase (GFLOP/s: the cost model's FLOPs over the measured time):\n");
    for (const auto& [k, s] : by_op)
      std::printf("  %-36s %9.3f %6.1f%% %9.2f GFLOP/s\n", k.c_str(), 1e3 * s, node_total > 0 ? 100 * s / node_total : 0.0,
                  s > 0 ? op_flops[k] / s / 1e9 : 0.0);
  }
  if (o.gemm_peak) {
    const GemmPeak peak = measure_gemm_peak();
    std::printf("\nGEMM peak (float, %d OpenMP threads, best of 5 %lldx%lldx%lld products): oneDNN %.2f GFLOP/s, "
                "OpenBLAS %.2f GFLOP/s\n",
                omp_get_max_threads(), static_cast<long long>(kPeakN), static_cast<long long>(kPeakN),
                static_cast<long long>(kPeakN), peak.dnnl / 1e9, peak.blas / 1e9);
    const double best = std::max(peak.dnnl, peak.blas);
    if (conv_s > 0)
      std::printf("convolutions (Conv, ConvGradInput, ConvGradWeight): %.3f GFLOP in %.3f ms per step = %.2f GFLOP/s, "
                  "%.1f %% of the GEMM peak\n",
                  conv_flops / 1e9, 1e3 * conv_s, conv_flops / conv_s / 1e9, 100.0 * conv_flops / conv_s / best);
    else
      std::printf("convolutions: none in this model\n");
  }
}

// --cost-csv: every node's measured time beside the calibrated cost model's (the CLI's cached
// calibration for this thread count, measured first when there is none), one CSV row per node, and
// a summary by op class and phase.
int write_cost_csv(const Options& o, const Graph& g, const Measured& m) {
  const std::string dir = user_cache_dir();
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  DeviceSpec spec = measure_cpu_spec(dir, threads);
  CalibrationOptions co;
  co.cache_dir = dir;
  co.threads = threads;
  auto cal = calibrate_device(&spec, co);
  if (!cal) {
    std::fprintf(stderr, "FAIL: calibration: %s\n", cal.status().message().c_str());
    return 1;
  }
  std::ofstream out(o.cost_csv);
  out << "node,op,class,phase,flops,bytes,roofline_s,predicted_s,measured_s\n";
  std::map<std::string, std::array<double, 3>> by;  // class/phase: nodes, predicted, measured
  for (const auto& n : g.nodes()) {
    const double t = m.node_s.at(static_cast<size_t>(n->id));
    const double p = node_time_s(*n, spec);
    const char* phase = is_forward_phase(*n) ? "forward" : n->phase == Phase::kUpdate ? "update" : "backward";
    out << '"' << n->name << "\"," << n->op_type << ',' << op_class_name(op_class(*n)) << ',' << phase << ','
        << node_flops(*n) << ',' << node_bytes(*n) << ',' << roofline_s(*n, spec) << ',' << p << ',' << t << '\n';
    auto& b = by[std::string(op_class_name(op_class(*n))) + " " + phase];
    b[0] += 1, b[1] += p, b[2] += t;
  }
  if (!out) {
    std::fprintf(stderr, "FAIL: %s: cannot write\n", o.cost_csv.c_str());
    return 1;
  }
  std::printf("\ncost model (calibrated at %d threads) against the nodes measured here, by class and phase:\n", threads);
  std::printf("%-22s %6s %12s %12s %8s\n", "class phase", "nodes", "predicted ms", "measured ms", "ratio");
  double tp = 0, tm = 0;
  for (const auto& [k, b] : by) {
    std::printf("%-22s %6.0f %12.3f %12.3f %8.2f\n", k.c_str(), b[0], 1e3 * b[1], 1e3 * b[2], b[2] > 0 ? b[1] / b[2] : 0.0);
    tp += b[1], tm += b[2];
  }
  std::printf("%-22s %6zu %12.3f %12.3f %8.2f\n", "all", g.nodes().size(), 1e3 * tp, 1e3 * tm, tm > 0 ? tp / tm : 0.0);
  return 0;
}

int run(const Options& o) {
  if (o.threads > 0) {
    omp_set_num_threads(o.threads);
    openblas_set_num_threads(o.threads);
  }
  ImportOptions io;
  io.batch_size = o.batch_size;
  if (Status fs = disable_fusions(o.no_fusion, &io.fuse); !fs.is_ok()) {
    std::fprintf(stderr, "step_bench: error: %s\n", fs.message().c_str());
    return 2;
  }
  auto imported = import_onnx(o.model, io);
  if (!imported) {
    std::fprintf(stderr, "FAIL: import: %s\n", imported.status().message().c_str());
    return 1;
  }
  Graph& g = *imported->graph;
  const size_t forward_nodes = g.nodes().size();
  auto tg = build_training_graph(g, LossKind::kCrossEntropy, SgdOptions{kMomentum, 0.0f});
  if (!tg) {
    std::fprintf(stderr, "FAIL: training graph: %s\n", tg.status().message().c_str());
    return 1;
  }
  apply_precision(g, o.precision);
  for (const auto& u : tg->unused_params)
    std::fprintf(stderr, "notice: parameter '%s' does not reach the loss; it stays as it is\n", u.c_str());
  if (g.inputs.size() != 1) {
    std::fprintf(stderr, "FAIL: the model has %zu data inputs; step_bench feeds exactly one\n", g.inputs.size());
    return 1;
  }
  Value* in = g.inputs[0];
  const int64_t batch = in->dims.at(0);
  if (batch != o.batch_size)
    std::fprintf(stderr, "notice: the model's batch dimension is fixed at %lld (--batch-size %lld ignored)\n",
                 static_cast<long long>(batch), static_cast<long long>(o.batch_size));
  // The library's own single-stage trainer runs each step (Trainer::step: copy the batch in, set
  // the Dropout step and the rate, run every node: forward, loss, backward, update).
  Trainer::Options to;
  to.memory_plan = o.memory_plan;
  auto cpu = open_device(DeviceKind::kCpu, 0);
  auto created = cpu ? Trainer::create(g, *tg, *cpu, to) : Expected<std::unique_ptr<Trainer>>(cpu.status());
  if (!created) {
    std::fprintf(stderr, "FAIL: trainer: %s\n", created.status().message().c_str());
    return 1;
  }
  Trainer& trainer = **created;
  HostTensor& x = trainer.input_buffer();
  HostTensor& y = trainer.label_buffer();
  int64_t step_no = 0;
  auto step = [&](std::vector<double>* node_seconds = nullptr) { return trainer.step(++step_no, kLr, 0, node_seconds); };

  // Eight distinct batches for the timed steps; the first one is the fixed validation batch.
  const Dataset data = make_data(in, *tg, 8 * batch, o.vocab, /*seed=*/0);
  std::vector<int64_t> order(data.size());
  std::iota(order.begin(), order.end(), 0);

  StepFn step_fn = [&](std::vector<double>* node_seconds) { return step(node_seconds); };
  BatchFn batch_in = [&](int64_t k) { (void)gather_batch(data, order, k * batch, 0, &x, &y); };
  Measured m;
  (void)gather_batch(data, order, 0, 0, &x, &y);
  if (int rc = validate(step_fn, &m)) return rc;
  if (int rc = time_steps(o, step_fn, batch_in, &m)) return rc;
  if (int rc = time_nodes(o, g, step_fn, batch_in, &m)) return rc;
  if (!o.cost_csv.empty())
    if (int rc = write_cost_csv(o, g, m)) return rc;
  m.rss = peak_rss_kib();
  // Bytes of every value's own buffer (unplanned), of the planned values without sharing, and of
  // the arena they share (the planned peak).
  const MemoryPlan& plan = trainer.executor().plan();
  for (const auto& v : g.values())
    // Values no node reads or writes (the intermediates a fusion pass absorbed) get no buffer.
    if (v->dtype != DType::kUndefined && !plan.planned(v.get()) &&
        (v->producer || !v->consumers.empty() || v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel ||
         v->kind == ValueKind::kHyper))
      m.own_bytes += v->bytes();

  if (o.json) print_json(o, g, in, batch, forward_nodes, data, plan, m);
  else print_text(o, g, in, batch, forward_nodes, data, plan, m);
  return 0;
}

}  // namespace
}  // namespace pt

int main(int argc, char** argv) {
  pt::configure_omp_wait(argv);
  pt::Options o;
  if (int rc = pt::parse(argc, argv, &o)) return rc;
  try {
    return pt::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_bench: internal error: %s\n", e.what());
    return 1;
  }
}
