// The stage layout of a plan (stage_layout.h): one walk over every stage's nodes that finds the
// owners, the values kept between passes and every value crossing a cut.
#include "partitioner/stage_layout.h"

#include "importer/training.h"
#include "kernels/registry.h"
#include "partitioner/simulator.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "partitioner/cost_model.h"
#include "partitioner/partition.h"
#include "partitioner/plan.h"

namespace pt {

namespace {

struct ById {
  bool operator()(const Value* a, const Value* b) const { return a->id < b->id; }
};
using ValueSet = std::set<const Value*, ById>;

std::vector<const Value*> list_of(const ValueSet& s) { return {s.begin(), s.end()}; }

// The plan checks that --plan-only and training share: the reasons a plan cannot be trained.
Status check_flows(const Plan& plan) {
  std::unordered_map<const Node*, int> stage_of;
  std::unordered_map<const Value*, int> param_stage, state_stage;
  for (const StagePlan& s : plan.stages)
    for (const Node* n : s.nodes) {
      stage_of[n] = s.index;
      if (n->phase == Phase::kUpdate && !n->inputs.empty()) param_stage[n->inputs[0]] = s.index;
    }
  for (const StagePlan& s : plan.stages)
    for (const Node* n : s.nodes) {
      if (n->phase == Phase::kUpdate) {
        // No link brings a gradient to an update: it must be computed in the update's stage (the
        // stage of the parameter's first reader; under --precision bf16 its bfloat16 Cast).
        for (const Value* v : n->inputs) {
          if (!v || !v->producer || n->inputs.empty() || !n->inputs[0]) continue;
          auto it = stage_of.find(v->producer);
          if (it == stage_of.end() || it->second == s.index) continue;
          return unsupported("the update of parameter '" + n->inputs[0]->name + "' runs in stage " + std::to_string(s.index) +
                             " (with its first reader) but its gradient '" + v->name + "' is computed by " +
                             v->producer->describe() + " in stage " + std::to_string(it->second) +
                             "; keep the parameter's first reader and that node in one stage (under --precision bf16 "
                             "the first reader is the weight's bfloat16 Cast): move the cut");
        }
        continue;
      }
      for (const Value* v : n->inputs) {
        if (!v) continue;
        if (v->kind == ValueKind::kParameter)
          if (auto it = param_stage.find(v); it != param_stage.end() && it->second > s.index)
            return unsupported("parameter '" + v->name + "' is read by " + n->describe() + " in stage " +
                               std::to_string(s.index) + " and updated in later stage " + std::to_string(it->second) +
                               ": a shared weight must be updated by the first stage that reads it");
        if (v->kind == ValueKind::kState && v->from_initializer) {
          auto [it, fresh] = state_stage.emplace(v, s.index);
          if (!fresh && it->second != s.index)
            return unsupported("model state '" + v->name + "' is used in stages " + std::to_string(it->second) + " and " +
                               std::to_string(s.index) + "; keep its readers in one stage");
        }
        if (!v->producer) continue;
        auto it = stage_of.find(v->producer);
        if (it == stage_of.end() || it->second == s.index) continue;
        const int from = it->second;
        if (is_forward_phase(*v->producer)) {
          if (from > s.index)
            return unsupported(n->describe() + " in stage " + std::to_string(s.index) + " reads '" + v->name +
                               "' computed by the forward of later stage " + std::to_string(from));
        } else if (from < s.index) {
          return unsupported(n->describe() + " in stage " + std::to_string(s.index) + " reads gradient '" + v->name +
                             "' computed by earlier stage " + std::to_string(from) + "; gradients must flow upstream");
        }
      }
    }
  return Status::ok();
}

}  // namespace

bool StageLayout::describes(const Plan& plan) const {
  if (stages.size() != plan.stages.size()) return false;
  for (size_t k = 0; k < stages.size(); ++k)
    if (stages[k].nodes != plan.stages[k].nodes) return false;
  return true;
}

Expected<StageLayout> build_stage_layout(const Graph& g, const Plan& plan) {
  RETURN_IF_ERROR(check_flows(plan));
  const int N = static_cast<int>(plan.stages.size());
  std::unordered_map<const Node*, int> stage_of;
  for (const StagePlan& s : plan.stages)
    for (const Node* n : s.nodes)
      if (!stage_of.emplace(n, s.index).second) return internal_error(n->describe() + " is in two stages of the plan");
  for (auto& n : g.nodes())
    if (!stage_of.count(n.get()))
      return internal_error(n->describe() + " is in no stage of the plan");

  // Owners: the stage with a parameter's update node.
  std::unordered_map<const Value*, int> owner;
  for (const StagePlan& s : plan.stages)
    for (const Node* n : s.nodes)
      if (n->phase == Phase::kUpdate) owner[n->inputs.at(0)] = s.index;

  const bool gpipe = synchronous(plan.schedule, plan.weights);
  // One version of a shared weight per mini-batch for both passes: the synchronous schedules, and
  // 2BW (every pass of mini-batch i reads version i-1; the reader keeps the two in use), and
  // 2BW-predict (the owner sends each mini-batch's prediction and version over one flow; the
  // reader keeps the two in use).
  const bool one_version = gpipe || plan.weights == WeightMode::k2BW || plan.weights == WeightMode::k2BWPredict;
  const Value* input = g.inputs.empty() ? nullptr : g.inputs[0];
  StageLayout L;
  std::map<std::pair<int, int>, ValueSet> fwd_flow, bwd_flow;
  std::map<std::tuple<int, int, bool>, ValueSet> weight_flow;  // (owner, reader, backward)
  for (const StagePlan& sp : plan.stages) {
    StageLayoutStage st;
    st.index = sp.index;
    st.nodes = sp.nodes;
    ValueSet saved, recompute_saved, state, shared;
    for (const Node* n : sp.nodes) {
      if (n->phase == Phase::kUpdate) {
        st.params.push_back(n->inputs.at(0));
        st.grads.push_back(n->inputs.at(1));
        st.updates.push_back(n);
        st.opt_state.emplace_back();
        for (size_t j = 2; j < n->inputs.size(); ++j)
          if (n->inputs[j]->kind == ValueKind::kState) st.opt_state.back().push_back(n->inputs[j]);
        continue;
      }
      for (const Value* v : n->inputs) {
        if (!v) continue;
        if (v == input) st.reads_input = true;
        for (size_t k = 1; k < g.inputs.size(); ++k)
          if (v == g.inputs[k] && std::none_of(st.more_inputs.begin(), st.more_inputs.end(),
                                               [&](const auto& e) { return e.second == v; }))
            st.more_inputs.emplace_back(k - 1, v);
        if (v->kind == ValueKind::kLabel) st.reads_labels = true;
        if (v->kind == ValueKind::kParameter)
          if (auto it = owner.find(v); it != owner.end() && it->second != sp.index) {
            // An earlier owner (check_flows refused a later one) serves every pass that reads it.
            const bool bwd_read = n->phase == Phase::kBackward && !one_version;
            weight_flow[{it->second, sp.index, bwd_read}].insert(v);
            shared.insert(v);
          }
        if (v->kind == ValueKind::kState && v->from_initializer) state.insert(v);
        if (n->phase == Phase::kBackward) {
          const bool fwd_act = v->kind == ValueKind::kActivation && v->producer && is_forward_phase(*v->producer);
          if (fwd_act || v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel) saved.insert(v);
        }
        if (v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel) recompute_saved.insert(v);
        if (!v->producer) continue;
        const int from = stage_of.at(v->producer);
        if (from == sp.index) continue;
        if (v->kind == ValueKind::kActivation && is_forward_phase(*v->producer)) recompute_saved.insert(v);
        (is_forward_phase(*v->producer) ? fwd_flow : bwd_flow)[{from, sp.index}].insert(v);
      }
    }
    st.saved = list_of(saved);
    st.recompute_saved = list_of(recompute_saved);
    st.state = list_of(state);
    st.shared = list_of(shared);
    L.stages.push_back(std::move(st));
  }
  for (const auto& [ends, values] : fwd_flow) L.activations.push_back({ends.first, ends.second, list_of(values)});
  for (const auto& [ends, values] : bwd_flow) L.gradients.push_back({ends.first, ends.second, list_of(values)});
  for (const auto& [key, values] : weight_flow) {
    const auto [o, r, backward] = key;
    L.weights.push_back({o, r, backward, list_of(values), shared_link_slots(r, N, backward, gpipe)});
  }
  // Each stage's boundary: what it receives from and sends to every other stage, each value once.
  std::vector<ValueSet> recv(N), send(N);
  for (const ValueFlow& f : L.activations) {
    recv[f.to].insert(f.values.begin(), f.values.end());
    send[f.from].insert(f.values.begin(), f.values.end());
  }
  for (int k = 0; k < N; ++k) {
    L.stages[k].recv = list_of(recv[k]);
    L.stages[k].send = list_of(send[k]);
  }
  return L;
}

Status layout_plan(const Graph& g, Plan* plan) {
  Expected<StageLayout> L = build_stage_layout(g, *plan);
  if (!L) {
    plan->layout = StageLayout{};
    plan->layout_status = L.status();
    return L.status();
  }
  plan->layout = std::move(*L);
  plan->layout_status = Status::ok();
  for (StagePlan& s : plan->stages) {
    const StageLayoutStage& ls = plan->layout.stages.at(s.index);
    s.recv = ls.recv;
    s.send = ls.send;
    s.shared_params = ls.shared;
    s.host_fallback.clear();
    for (const Node* n : s.nodes)
      if (n->runs_on_host(s.device.kind)) s.host_fallback.push_back(n);
  }
  // A weight shared across stages: its owner serves versions of it from its buffers and sums the
  // readers' gradients into its own, so neither side runs its updates inside the backward; their
  // gradients are a parameter-sized copy again (StagePlan::update_in_backward).
  for (const WeightFlow& f : plan->layout.weights)
    for (int k : {f.owner, f.reader}) {
      StagePlan& s = plan->stages.at(k);
      if (!s.update_in_backward) continue;
      s.update_in_backward = false;
      s.memory_bytes += s.param_bytes - s.transient_gradient_bytes;
      s.transient_gradient_bytes = 0;
    }
  // The weight-gradient part of each stage's backward: bwd_ms (less a recomputed forward, which
  // runs before I) shared by the cost model's times of the nodes of each part.
  for (StagePlan& s : plan->stages) {
    std::vector<const Value*> sent;
    for (const ValueFlow& f : plan->layout.gradients)
      if (f.from == s.index) sent.insert(sent.end(), f.values.begin(), f.values.end());
    double all = 0, w = 0;
    for (const Node* n : weight_gradient_nodes(s.nodes, sent)) w += node_time_s(*n, s.device);
    for (const Node* n : s.nodes)
      if (n->phase == Phase::kBackward) all += node_time_s(*n, s.device);
    s.wgrad_ms = all > 0 ? std::max(0.0, s.bwd_ms - s.recompute_ms) * w / all : 0;
  }
  // ZB-H1's and ZB-V's orders fit the stages' times (make_schedule); their throughput, like interleaved
  // stages' and a schedule file's, is its simulated program's (no closed form).
  if ((plan->schedule == Schedule::kZBH1 || plan->schedule == Schedule::kZBV) &&
      (!plan->program || plan->program->name == schedule_name(plan->schedule)))
    plan->program = std::make_shared<const ScheduleIR>(fitted_schedule(*plan));
  if (plan->schedule == Schedule::kZBH1 || plan->schedule == Schedule::kInterleaved || plan->schedule == Schedule::kZBV ||
      plan->program) {
    const int n = static_cast<int>(plan->stages.size());
    Expected<SimResult> sim = dry_run(*plan, plan_schedule(*plan), std::max(4, 2 * n));
    if (!sim) return sim.status();
    plan->predicted_samples_per_s = sim->samples_per_s;
  }
  return Status::ok();
}

}  // namespace pt
