// Plan helpers and single-stage plans.
#include "partitioner/plan.h"

#include "partitioner/cost_model.h"

namespace pt {

const char* schedule_name(Schedule s) { return s == Schedule::kGPipe ? "gpipe" : "1f1b"; }

const char* weight_mode_name(WeightMode w) {
  switch (w) {
    case WeightMode::kSpecTrain: return "spectrain";
    case WeightMode::kStash: return "stash";
    case WeightMode::kStale: return "stale";
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
    s.memory_bytes += c.saved_bytes + c.param_bytes * 3;  // weights, gradients, momentum
  }
  p.stages.push_back(std::move(s));
  p.bottleneck_ms = p.stages[0].stage_ms();
  p.imbalance = 1.0;
  return p;
}

}  // namespace pt
