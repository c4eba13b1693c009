// Plan helpers and single-stage plans.
#include "partitioner/plan.h"

#include <algorithm>

#include "partitioner/cost_model.h"

namespace pt {

const char* staleness_name(Staleness s) { return s == Staleness::kExact ? "exact" : "paper"; }

int spectrain_staleness(int stage, int num_stages, bool backward, Staleness mode) {
  const int gap = num_stages - stage - 1;
  if (mode == Staleness::kExact) return backward ? 0 : gap;
  return backward ? stage / 2 : stage / 2 + gap;
}

const char* schedule_name(Schedule s) { return s == Schedule::kGPipe ? "gpipe" : "1f1b"; }

const char* weight_mode_name(WeightMode w) {
  switch (w) {
    case WeightMode::kSpecTrain: return "spectrain";
    case WeightMode::kStash: return "stash";
    case WeightMode::kStale: return "stale";
  }
  return "?";
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kStage: return "stage";
    case Recompute::kAuto: return "auto";
  }
  return "?";
}

Plan plan_single_stage(const Graph& g, const DeviceSpec& device) {
  Plan p;
  StagePlan s;
  s.device = device;
  for (auto& n : g.nodes()) {
    s.nodes.push_back(n.get());
    if (n->phase == Phase::kForward || n->phase == Phase::kLoss) s.forward_nodes.push_back(n.get());
  }
  for (Value* v : g.values_of_kind(ValueKind::kParameter)) {
    s.params.push_back(v);
    s.param_count += v->size();
    s.param_bytes += static_cast<int64_t>(v->bytes());
  }
  for (const auto& [node, c] : node_costs(g, device)) {
    s.fwd_ms += 1e3 * c.fwd_s;
    s.bwd_ms += 1e3 * c.bwd_s;
    s.update_ms += 1e3 * c.update_s;
    s.saved_bytes += c.saved_bytes;
    s.workspace_bytes = std::max(s.workspace_bytes, c.workspace_bytes);
  }
  // One stage, no pipeline: one mini-batch in flight, no weight copies; weights, gradients and momentum.
  s.in_flight = 1;
  s.weight_copies = 0;
  s.memory_bytes = s.param_bytes * 3 + s.saved_bytes + s.workspace_bytes;
  for (const Value* v : g.inputs)
    if (v && !v->dims.empty() && v->dims[0] > 0) {
      p.batch_size = v->dims[0];
      break;
    }
  if (p.batch_size == 0) p.batch_size = 1;
  p.order = "graph";
  p.stages.push_back(std::move(s));
  p.bottleneck_ms = p.stages[0].stage_ms();
  p.imbalance = 1.0;
  // One stage: no flows; a graph whose nodes are in no stage cannot occur (the layout then says so).
  (void)layout_plan(g, &p);
  if (p.bottleneck_ms > 0) p.predicted_samples_per_s = p.single_device_samples_per_s = 1e3 * p.batch_size / p.bottleneck_ms;
  return p;
}

}  // namespace pt
