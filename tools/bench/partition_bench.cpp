// Partitioner benchmark: a ~2,000-node training graph (a deep residual MLP built in code) split
// into 4 and 8 stages. Validates each plan (every node in exactly one stage, backward nodes with
// their forward node) before timing; the DP must finish in under a second. Reference: the
// equal-node-count split (torchgpipe's default balance), timed and costed in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "importer/training.h"
#include "partitioner/partition.h"

namespace pt {
namespace {

// x -> [h = relu(fc_a(x)); x = x + fc_b(h)] x blocks -> head -> loss; the hidden width cycles
// through 1x..4x so that stages of equal node counts are not equal in cost.
std::unique_ptr<Graph> residual_mlp(int blocks, int64_t batch, int64_t width) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_value("x", DType::kFloat32, {batch, width}, ValueKind::kInput);
  g->inputs = {x};
  auto gemm = [&](Value* in, int64_t out, const std::string& name) {
    Value* w = g->add_value(name + ".W", DType::kFloat32, {in->dims[1], out}, ValueKind::kParameter);
    Value* b = g->add_value(name + ".b", DType::kFloat32, {out}, ValueKind::kParameter);
    Value* y = g->add_value(name + ".y", DType::kFloat32, {batch, out}, ValueKind::kActivation);
    g->add_node("Gemm", name, {in, w, b}, {y});
    return y;
  };
  for (int i = 0; i < blocks; ++i) {
    const std::string p = "block" + std::to_string(i);
    const int64_t hidden = width * (1 + (i * 7 / 5) % 4);
    Value* h = g->add_value(p + ".h", DType::kFloat32, {batch, hidden}, ValueKind::kActivation);
    g->add_node("Relu", p + "/relu", {gemm(x, hidden, p + "/fc_a")}, {h});
    Value* y = g->add_value(p + ".out", DType::kFloat32, {batch, width}, ValueKind::kActivation);
    g->add_node("Add", p + "/add", {x, gemm(h, width, p + "/fc_b")}, {y});
    x = y;
  }
  g->outputs = {gemm(x, 10, "head")};
  return g;
}

bool validate(const Graph& g, const Plan& plan, std::string* why) {
  std::map<const Node*, int> stage;
  for (const StagePlan& s : plan.stages)
    for (const Node* n : s.nodes)
      if (!stage.emplace(n, s.index).second) {
        *why = n->describe() + " is in two stages";
        return false;
      }
  for (auto& n : g.nodes()) {
    if (!stage.count(n.get())) {
      *why = n->describe() + " is in no stage";
      return false;
    }
    if (n->phase == Phase::kBackward && n->forward && stage[n.get()] != stage[n->forward]) {
      *why = n->describe() + " is not in the stage of " + n->forward->describe();
      return false;
    }
  }
  return true;
}

template <typename F>
double best_seconds(int repeats, F f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int run() {
  const int blocks = 126;
  auto g = residual_mlp(blocks, 64, 1024);
  auto tg = build_training_graph(*g, LossKind::kCrossEntropy, SgdOptions{});
  if (!tg.has_value()) {
    std::fprintf(stderr, "training graph: %s\n", tg.status().message().c_str());
    return 1;
  }
  int n_fwd = 0;
  for (auto& n : g->nodes()) n_fwd += is_forward_phase(*n);
  std::printf("graph: %zu nodes (%d forward), %d residual blocks\n", g->nodes().size(), n_fwd, blocks);
  auto device = builtin_device_spec("H100");
  auto link = builtin_link_spec("pcie4");
  int failures = 0;
  for (int stages : {4, 8}) {
    PartitionOptions opts;
    opts.devices.assign(stages, *device);
    opts.link = *link;
    auto plan = partition(*g, opts);
    std::string why;
    if (!plan.has_value() || !validate(*g, *plan, &why)) {
      std::fprintf(stderr, "%d stages: invalid plan: %s\n", stages, plan.has_value() ? why.c_str() : plan.status().message().c_str());
      return 1;
    }
    // Reference: equal forward-node counts per stage.
    PartitionOptions even = opts;
    for (int k = 0; k < stages; ++k) even.balance.push_back(n_fwd / stages + (k < n_fwd % stages));
    auto even_plan = partition(*g, even);
    if (!even_plan.has_value() || !validate(*g, *even_plan, &why)) {
      std::fprintf(stderr, "%d stages: invalid even plan\n", stages);
      return 1;
    }
    const double t_auto = best_seconds(3, [&] { (void)partition(*g, opts); });
    opts.order = NodeOrder::kGraph;
    const double t_one = best_seconds(3, [&] { (void)partition(*g, opts); });
    const double t_even = best_seconds(3, [&] { (void)partition(*g, even); });
    std::printf("%d stages: partition %.3f s (both orders; one order %.3f s; evaluating one fixed split %.3f s)\n", stages,
                t_auto, t_one, t_even);
    std::printf("  bottleneck %.3f ms (order %s), imbalance %.3f, %.0f samples/s, %.2fx one device\n", plan->bottleneck_ms,
                plan->order.c_str(), plan->imbalance, plan->predicted_samples_per_s,
                plan->predicted_samples_per_s / plan->single_device_samples_per_s);
    std::printf("  equal-count split: bottleneck %.3f ms; DP is %.2fx faster per mini-batch\n", even_plan->bottleneck_ms,
                even_plan->bottleneck_ms / plan->bottleneck_ms);
    if (t_auto >= 1.0) {
      std::printf("  FAIL: %d stages took %.3f s (limit 1 s)\n", stages, t_auto);
      ++failures;
    }
  }
  // Headroom: 2,000 forward nodes (~8,000 in the training graph), for information.
  auto big = residual_mlp(500, 64, 256);
  if (!build_training_graph(*big, LossKind::kCrossEntropy, SgdOptions{}).has_value()) return 1;
  PartitionOptions opts;
  opts.devices.assign(8, *device);
  opts.link = *link;
  std::string why;
  auto plan = partition(*big, opts);
  if (!plan.has_value() || !validate(*big, *plan, &why)) return 1;
  std::printf("headroom: %zu nodes, 8 stages: partition %.3f s\n", big->nodes().size(),
              best_seconds(1, [&] { (void)partition(*big, opts); }));
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace pt

int main() { return pt::run(); }
