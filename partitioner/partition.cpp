// The partition algorithm: a dynamic program over (prefix of the node order, stage count), exact
// for the order (see partition.h for the cost it minimises); the branch-keeping order; manual
// plans (--split-at, --balance); and the infeasible-memory error with what would fit.
#include "partitioner/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace pt {

int stage_in_flight(int stage, int num_stages, const PartitionOptions& opts) {
  if (opts.program && opts.program->virtual_stages() == num_stages) return program_in_flight(*opts.program, stage);
  return schedule_in_flight(opts.schedule, opts.weights, num_stages, stage, opts.micro_batches, opts.virtual_stages);
}

int stage_weight_copies(int stage, int num_stages, const PartitionOptions& opts) {
  // One 1F1B stage trains sequentially (the single-stage trainer): no version to predict or stash.
  if (synchronous(opts.schedule, opts.weights) || num_stages == 1) return 0;
  switch (opts.weights) {
    case WeightMode::kSpecTrain: return 1;
    case WeightMode::kStash: return std::max(0, num_stages - stage - 1);
    case WeightMode::kStale:
    case WeightMode::kSync: return 0;
    case WeightMode::k2BW: return 2;  // the master and the previous version
    case WeightMode::k2BWPredict: return 1;  // the predicted copy, as SpecTrain
  }
  return 0;
}

WeightPasses stage_weight_passes(int stage, int num_stages, const PartitionOptions& opts) {
  WeightPasses w;
  if (synchronous(opts.schedule, opts.weights) || num_stages == 1) return w;
  switch (opts.weights) {
    case WeightMode::kSpecTrain:
      w.fwd_predict = spectrain_staleness(stage, num_stages, false, opts.staleness) > 0;
      w.bwd_predict = spectrain_staleness(stage, num_stages, true, opts.staleness) > 0;
      break;
    case WeightMode::kStash:  // a stash per pass in flight; every backward follows updates
      w.fwd_copy = w.bwd_copy = stage_in_flight(stage, num_stages, opts) > 1;
      break;
    case WeightMode::k2BW: w.update_copy = 1; break;
    default: break;  // stale reads the master; 2BW-predict's predictions are not priced yet
  }
  return w;
}

int stage_gradient_accumulators(const PartitionOptions& opts) {
  return micro_batched(opts.schedule, opts.weights) && opts.micro_batches > 1 ? 1 : 0;
}

bool stage_update_in_backward(int stage, int num_stages, const PartitionOptions& opts) {
  if (!opts.update_in_backward || opts.replicas > 1 || opts.graph_replicas > 1) return false;
  // W runs apart from I; 2BW's passes read the version before the latest update: no update inside.
  if (opts.schedule == Schedule::kZBH1 || opts.schedule == Schedule::kZBV || two_bw_family(opts.weights)) return false;
  if (synchronous(opts.schedule, opts.weights)) return opts.micro_batches <= 1;
  if (num_stages == 1) return true;  // the single-stage trainer: forward, backward, update in turn
  switch (opts.weights) {
    case WeightMode::kStale:
    case WeightMode::kSync: return true;
    case WeightMode::k2BW:
    case WeightMode::k2BWPredict: return false;
    case WeightMode::kSpecTrain: return spectrain_staleness(stage, num_stages, true, opts.staleness) == 0;
    case WeightMode::kStash: return num_stages - stage == 1;
  }
  return false;
}

double allreduce_ms(double bytes, int replicas, const LinkSpec& link) {
  if (replicas <= 1 || !(bytes > 0)) return 0;
  const double r = replicas;
  const double bw_s = link.bandwidth > 0 ? 2.0 * (r - 1) / r * bytes / link.bandwidth : 0;
  return 1e3 * (bw_s + 2.0 * (r - 1) * std::max(0.0, link.latency_s));
}

namespace {

// Weights and gradients: a parameter-sized copy of gradients, or, with the update in the backward
// (transient_grads >= 0), only the gradients that live at once.
double weights_and_gradients(double param_bytes, double transient_grads) {
  return transient_grads >= 0 ? param_bytes + transient_grads : 2.0 * param_bytes;
}

double memory_of(double param_bytes, double saved, double workspace, int stage, int num_stages,
                 const PartitionOptions& opts, double act_scale, double model_param_bytes, double transient_grads) {
  const double copies = std::max(0, opts.optimizer_state_copies) + stage_weight_copies(stage, num_stages, opts) +
                        stage_gradient_accumulators(opts);
  return weights_and_gradients(param_bytes, transient_grads) + param_bytes * copies +
         act_scale * (saved * stage_saved_copies(stage, num_stages, opts) + workspace) +
         stage_evaluator_param_bytes(stage, num_stages, opts, model_param_bytes);
}

// The same stage recomputing its forward: its inputs per pass, one set of activations.
double recompute_memory_of(double param_bytes, double inputs, double saved, double workspace, int stage, int num_stages,
                           const PartitionOptions& opts, double act_scale, double model_param_bytes, double transient_grads) {
  const double copies = std::max(0, opts.optimizer_state_copies) + stage_weight_copies(stage, num_stages, opts) +
                        stage_recompute_weight_copies(stage, num_stages, opts) + stage_gradient_accumulators(opts);
  return weights_and_gradients(param_bytes, transient_grads) + param_bytes * copies +
         act_scale * (inputs * stage_saved_copies(stage, num_stages, opts) + saved + workspace) +
         stage_evaluator_param_bytes(stage, num_stages, opts, model_param_bytes);
}

}  // namespace

int stage_saved_copies(int stage, int num_stages, const PartitionOptions& opts) {
  const bool pipelined = num_stages > 1 || synchronous(opts.schedule, opts.weights);
  return stage_in_flight(stage, num_stages, opts) + (pipelined ? 1 : 0);
}

double stage_evaluator_param_bytes(int stage, int num_stages, const PartitionOptions& opts, double model_param_bytes) {
  // The pipelined trainer (several stages, GPipe, or replicas) keeps a separate evaluator on stage 0.
  const bool pipelined = num_stages > 1 || synchronous(opts.schedule, opts.weights) || opts.replicas > 1 || opts.graph_replicas > 1;
  return pipelined && stage == 0 ? model_param_bytes : 0.0;
}

int64_t stage_memory_bytes(const StagePlan& s, int num_stages, const PartitionOptions& opts) {
  if (s.recompute)
    return static_cast<int64_t>(recompute_memory_of(static_cast<double>(s.param_bytes),
                                                    static_cast<double>(s.recompute_input_bytes),
                                                    static_cast<double>(s.saved_bytes),
                                                    static_cast<double>(s.workspace_bytes), s.index, num_stages, opts,
                                                    1.0, 0.0, s.update_in_backward ? static_cast<double>(s.transient_gradient_bytes) : -1.0)) +
           s.evaluator_bytes + s.shared_memory_bytes;
  return static_cast<int64_t>(memory_of(static_cast<double>(s.param_bytes), static_cast<double>(s.saved_bytes),
                                        static_cast<double>(s.workspace_bytes), s.index, num_stages, opts, 1.0, 0.0,
                                        s.update_in_backward ? static_cast<double>(s.transient_gradient_bytes) : -1.0)) +
         s.evaluator_bytes + s.shared_memory_bytes;
}

bool stage_may_recompute(int stage, int num_stages, const PartitionOptions& opts) {
  return opts.recompute != Recompute::kNone && stage_in_flight(stage, num_stages, opts) > 1;
}

int stage_recompute_weight_copies(int stage, int num_stages, const PartitionOptions& opts) {
  if (!stage_may_recompute(stage, num_stages, opts) || synchronous(opts.schedule, opts.weights)) return 0;
  const int in_flight = stage_in_flight(stage, num_stages, opts);
  switch (opts.weights) {
    case WeightMode::kSpecTrain: return in_flight;
    case WeightMode::kStale: return in_flight + 1;
    case WeightMode::kStash:
    case WeightMode::kSync:
    case WeightMode::k2BW: return 0;  // its forward's version is still one of the two at the backward
    case WeightMode::k2BWPredict: return in_flight;  // a prediction cannot be redone: kept, as SpecTrain's
  }
  return 0;
}

int shared_link_slots(int reader, int num_stages, bool backward, bool gpipe) {
  if (gpipe) return 2;
  // Stash sends the backward's versions as early as the forward's.
  return backward ? std::max(3, num_stages - reader + 1) : std::max(2, num_stages - reader + 1);
}

std::vector<const Node*> forward_order(const Graph& g, NodeOrder order) {
  std::vector<const Node*> fwd;
  for (auto& n : g.nodes())
    if (is_forward_phase(*n)) fwd.push_back(n.get());
  if (order == NodeOrder::kGraph) return fwd;
  // Kahn's algorithm with a stack: the most recently readied node runs next, so a branch is
  // followed to its end (or to a join still waiting for a sibling) before a sibling starts.
  std::unordered_map<const Node*, int> index;
  for (size_t i = 0; i < fwd.size(); ++i) index[fwd[i]] = static_cast<int>(i);
  std::vector<std::vector<int>> succ(fwd.size());
  std::vector<int> indeg(fwd.size(), 0);
  for (size_t i = 0; i < fwd.size(); ++i) {
    std::set<int> preds;
    for (const Value* v : fwd[i]->inputs)
      if (v && v->producer && index.count(v->producer)) preds.insert(index[v->producer]);
    indeg[i] = static_cast<int>(preds.size());
    for (int p : preds) succ[p].push_back(static_cast<int>(i));
  }
  std::vector<int> stack;
  for (size_t i = fwd.size(); i-- > 0;)
    if (indeg[i] == 0) stack.push_back(static_cast<int>(i));
  std::vector<const Node*> out;
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    out.push_back(fwd[u]);
    for (auto it = succ[u].rbegin(); it != succ[u].rend(); ++it)
      if (--indeg[*it] == 0) stack.push_back(*it);
  }
  PT_CHECK(out.size() == fwd.size()) << "forward nodes are not a DAG";
  return out;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A forward (or loss) node at a position of the order, with what its stage needs.
struct Pos {
  const Node* node = nullptr;
  std::vector<int> reads;  // activations of forward nodes this node or its backward nodes read
  std::vector<int> kept;   // values its backward nodes read (kept from forward until backward)
  std::vector<int> data;   // data inputs and labels this node or its backward nodes read
  double param_bytes = 0;
  int64_t param_count = 0;
  double workspace = 0;
  int bwd_kernels = 0;     // backward nodes charged here (the forward node is one kernel)
  std::vector<const Value*> params;  // first consumed here
  // Updated parameters this node (false) or its backward nodes (true) read: shared weights when
  // their owner (first consumer) is in an earlier stage.
  std::vector<std::pair<int, bool>> param_reads;
};

struct Val {
  const Value* v = nullptr;
  int producer_pos = -1;  // -1: not produced by a forward node
  double bytes = 0;
  bool has_grad = false;  // its producer has backward nodes, so a gradient flows back
  int owner_pos = -1;     // an updated parameter: the position of its first consumer (its owner)
};

// The partition problem over one order: positions, values, and per-device-class costs.
struct Problem {
  std::vector<Pos> pos;
  std::vector<Val> vals;
  std::vector<DeviceSpec> classes;       // distinct device speeds
  std::vector<int> class_of;             // per given device
  std::vector<std::vector<double>> fwd, bwd, upd, prefix;  // [class][position]
  std::vector<std::vector<double>> prefix_fwd;              // [class][position]: forward only (recompute)
  // Replicas (PartitionOptions::replicas): one replica's compute and activations are `scale`
  // (graph_replicas / replicas) of the graph's; prefix sums of forward + backward and of update.
  double scale = 1;
  int replicas = 1;
  LinkSpec replica_link;
  // prefix_oh: the launch overhead within prefix_fb (one per forward and backward node), which
  // a replica's share does not shrink.
  std::vector<std::vector<double>> prefix_fb, prefix_upd, prefix_oh, prefix_foh;  // foh: forward only
  // Time of `fb` seconds of forward + backward, `oh` of them launch overhead, on 1/scale of the
  // samples: the rest scales with the samples (at least 0 of it: measured profiles may be faster
  // than the overhead).
  double share_s(double fb, double oh) const { return scale * std::max(0.0, fb - oh) + std::min(fb, oh); }
  // Plans with one replica of a whole-batch graph take the original arithmetic, bit for bit.
  bool replicated() const { return replicas != 1 || scale != 1; }
  std::vector<double> prefix_params;
  // [class][position + 1]: one prediction of every parameter of the positions before (reading the
  // master and the optimizer's state, writing the working copy) and one copy of them; [stage]: how
  // many of each its forward and backward make (stage_weight_passes).
  std::vector<std::vector<double>> prefix_predict, prefix_copy;
  std::vector<WeightPasses> weight_passes;
  std::unordered_map<const Node*, int> pos_of;
  LinkSpec link;
  std::vector<LinkSpec> link_into;       // [stage]: the link its received values cross
  int num_stages = 1;
  bool gpipe = false;
  bool two_bw = false;              // PipeDream-2BW: one shared-weight version per mini-batch, two kept
  bool one_weight_version = false;  // gpipe || two_bw
  int micro = 1;
  const LinkSpec& link_of(int stage) const {
    return stage >= 0 && stage < static_cast<int>(link_into.size()) ? link_into[stage] : link;
  }
  int n() const { return static_cast<int>(pos.size()); }
  // [position]: no stage may start here. A backward node charged to position p that reads a value
  // of the forward node at q > p (--precision bf16's ReluGrad reads the bfloat16 copy of Y that a
  // Cast after Y's producer makes) needs both in one stage: no cut in (p, q].
  std::vector<char> no_cut;  // [position]: 1 a backward node before it reads it, 2 an update before it needs it
  bool can_start(int j) const { return j <= 0 || j >= n() || !no_cut[j]; }
};

// Whether the cut in front of `stage` joins two nodes.
bool crosses_nodes(const PartitionOptions& o, int stage) {
  return stage > 0 && stage < static_cast<int>(o.node_of_stage.size()) &&
         o.node_of_stage[stage] != o.node_of_stage[stage - 1];
}

bool same_speed(const DeviceSpec& a, const DeviceSpec& b) {
  if (a.calibrated != b.calibrated || a.share != b.share) return false;
  for (int k = 0; k < kOpClasses && a.calibrated; ++k)
    for (int ph = 0; ph < kCostPhases; ++ph)
      if (a.classes[k][ph].floor_s != b.classes[k][ph].floor_s || a.classes[k][ph].scale != b.classes[k][ph].scale ||
          a.classes[k][ph].byte_scale != b.classes[k][ph].byte_scale)
        return false;
  return a.peak_flops == b.peak_flops && a.mem_bandwidth == b.mem_bandwidth && a.kernel_overhead_s == b.kernel_overhead_s &&
         a.kind == b.kind;
}

// Where a non-forward node runs: the position it is charged to (backward: its forward node's;
// update: its parameter's first consumer's; otherwise the last position).
int owner_position(const Problem& P, const Node& n, const std::unordered_map<const Value*, int>& param_owner) {
  if (n.phase == Phase::kBackward && n.forward) {
    auto it = P.pos_of.find(n.forward);
    if (it != P.pos_of.end()) return it->second;
  }
  if (n.phase == Phase::kUpdate && !n.inputs.empty()) {
    auto it = param_owner.find(n.inputs[0]);
    if (it != param_owner.end()) return it->second;
  }
  return P.n() - 1;
}

Problem build_problem(const Graph& g, const std::vector<const Node*>& order, const PartitionOptions& opts,
                      std::unordered_map<const Value*, int>* param_owner_out) {
  Problem P;
  P.link = opts.link;
  // Values a stage receives are charged with the link of the cut in front of it (a skip
  // connection from a stage further up is charged the same way).
  for (size_t k = 0; k < opts.devices.size(); ++k)
    P.link_into.push_back(crosses_nodes(opts, static_cast<int>(k)) ? opts.network_link : opts.link);
  for (const DeviceSpec& d : opts.devices) {
    int c = -1;
    for (size_t i = 0; i < P.classes.size(); ++i)
      if (same_speed(P.classes[i], d)) c = static_cast<int>(i);
    if (c < 0) {
      c = static_cast<int>(P.classes.size());
      P.classes.push_back(d);
    }
    P.class_of.push_back(c);
  }
  const int n = static_cast<int>(order.size());
  P.pos.resize(n);
  P.no_cut.assign(n, 0);
  for (int p = 0; p < n; ++p) {
    P.pos[p].node = order[p];
    P.pos_of[order[p]] = p;
  }
  P.vals.resize(g.values().size());
  for (auto& v : g.values()) {
    PT_CHECK(v->id >= 0 && v->id < static_cast<int>(P.vals.size())) << "value id " << v->id;
    Val& x = P.vals[v->id];
    x.v = v.get();
    x.bytes = cost_value_bytes(v.get());
    if (v->kind == ValueKind::kActivation && v->producer) {
      auto it = P.pos_of.find(v->producer);
      if (it != P.pos_of.end()) x.producer_pos = it->second;
    }
  }
  auto add_unique = [](std::vector<int>& list, int id) {
    if (std::find(list.begin(), list.end(), id) == list.end()) list.push_back(id);
  };
  std::unordered_map<const Value*, int>& param_owner = *param_owner_out;
  for (int p = 0; p < n; ++p)
    for (const Value* v : order[p]->inputs) {
      if (!v) continue;
      if (P.vals[v->id].producer_pos >= 0) add_unique(P.pos[p].reads, v->id);
      if (v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel) add_unique(P.pos[p].data, v->id);
      if (v->kind == ValueKind::kParameter && !param_owner.count(v)) {
        param_owner[v] = p;
        P.pos[p].param_bytes += cost_value_bytes(v);
        P.pos[p].param_count += std::max<int64_t>(0, v->size());
        P.pos[p].params.push_back(v);
      }
    }
  // Shared weights: the updated parameters each position's nodes read (owner: first consumer).
  P.num_stages = static_cast<int>(opts.devices.size());
  P.gpipe = synchronous(opts.schedule, opts.weights);
  P.two_bw = opts.weights == WeightMode::k2BW && !P.gpipe;
  P.one_weight_version = P.gpipe || P.two_bw;
  P.micro = std::max(1, opts.micro_batches);
  {
    std::unordered_set<const Value*> updated;
    for (auto& node : g.nodes())
      if (node->phase == Phase::kUpdate && !node->inputs.empty()) updated.insert(node->inputs[0]);
    for (const Value* v : updated)
      if (auto it = param_owner.find(v); it != param_owner.end()) P.vals[v->id].owner_pos = it->second;
    auto add_read = [&](int p, const Value* v, bool bwd) {
      if (!v || v->kind != ValueKind::kParameter || !updated.count(v)) return;
      auto& list = P.pos[p].param_reads;
      if (std::find(list.begin(), list.end(), std::make_pair(v->id, bwd)) == list.end()) list.emplace_back(v->id, bwd);
    };
    for (int p = 0; p < n; ++p)
      for (const Value* v : order[p]->inputs) add_read(p, v, false);
    for (auto& node : g.nodes())
      if (node->phase == Phase::kBackward && node->forward && P.pos_of.count(node->forward))
        for (const Value* v : node->inputs) add_read(P.pos_of.at(node->forward), v, true);
  }
  // Costs per device class: forward and backward from the cost model (profile included), update
  // by parameter ownership in this order; workspace is device-independent.
  const size_t nc = P.classes.size();
  P.fwd.assign(nc, std::vector<double>(n, 0));
  P.bwd = P.fwd;
  P.upd = P.fwd;
  for (size_t c = 0; c < nc; ++c) {
    for (const auto& [node, cost] : node_costs(g, P.classes[c], opts.profile)) {
      const int p = P.pos_of.at(node);
      P.fwd[c][p] = cost.fwd_s;
      P.bwd[c][p] = cost.bwd_s;
      if (c == 0) P.pos[p].workspace = static_cast<double>(cost.workspace_bytes);
    }
  }
  for (auto& node : g.nodes()) {
    if (is_forward_phase(*node)) continue;
    const int p = owner_position(P, *node, param_owner);
    if (node->phase == Phase::kBackward) {
      ++P.pos[p].bwd_kernels;
      const bool charged = node->forward && P.pos_of.count(node->forward);
      for (const Value* v : node->inputs) {
        if (!v) continue;
        if (may_be_kept_for_backward(v)) add_unique(P.pos[p].kept, v->id);
        if (P.vals[v->id].producer_pos >= 0) add_unique(P.pos[p].reads, v->id);
        if (v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel) add_unique(P.pos[p].data, v->id);
      }
      for (const Value* v : node->inputs)
        if (v && P.vals[v->id].producer_pos > p)
          for (int q = p + 1; q <= P.vals[v->id].producer_pos; ++q) P.no_cut[q] = 1;
      if (!charged)  // the cost model charges backward nodes to their forward node only
        for (size_t c = 0; c < nc; ++c) P.bwd[c][p] += node_time_s(*node, P.classes[c]);
    } else if (node->phase == Phase::kUpdate) {
      for (size_t c = 0; c < nc; ++c) P.upd[c][p] += node_time_s(*node, P.classes[c]);
      // An update runs with its parameter's first reader, and no link brings a gradient back to
      // it: no cut between it and its gradient's producer (under --precision bf16 the first reader
      // is the weight's bfloat16 Cast, the producer the backward of the product that reads the copy).
      for (const Value* v : node->inputs) {
        if (!v || !v->producer || is_forward_phase(*v->producer)) continue;
        const int from = owner_position(P, *v->producer, param_owner);  // a backward node's position
        for (int q = p + 1; q <= from && q < P.n(); ++q)
          if (!P.no_cut[q]) P.no_cut[q] = 2;  // 2: for an update (the reason a manual cut is told)
      }
    }
  }
  // A value has a gradient when it depends on a parameter and reaches the loss (what
  // build_gradients differentiates); graph order is topological for forward nodes.
  std::vector<char> depends(P.vals.size(), 0), reaches(P.vals.size(), 0);
  for (auto& v : g.values()) depends[v->id] = v->kind == ValueKind::kParameter;
  for (auto& node : g.nodes()) {
    if (!is_forward_phase(*node)) continue;
    bool any = false;
    for (const Value* v : node->inputs) any |= v && depends[v->id];
    if (any)
      for (const Value* v : node->outputs)
        if (v) depends[v->id] = 1;
  }
  if (g.loss) reaches[g.loss->id] = 1;
  for (size_t k = g.nodes().size(); k-- > 0;) {
    const Node& node = *g.nodes()[k];
    if (!is_forward_phase(node)) continue;
    bool any = false;
    for (const Value* v : node.outputs) any |= v && reaches[v->id];
    if (any)
      for (const Value* v : node.inputs)
        if (v) reaches[v->id] = 1;
  }
  for (Val& x : P.vals)
    if (x.producer_pos >= 0) x.has_grad = depends[x.v->id] && reaches[x.v->id] && is_floating(x.v->dtype);
  P.prefix.assign(nc, std::vector<double>(n + 1, 0));
  P.prefix_fwd = P.prefix;
  for (size_t c = 0; c < nc; ++c)
    for (int p = 0; p < n; ++p) {
      P.prefix[c][p + 1] = P.prefix[c][p] + P.fwd[c][p] + P.bwd[c][p] + P.upd[c][p];
      P.prefix_fwd[c][p + 1] = P.prefix_fwd[c][p] + P.fwd[c][p];
    }
  P.prefix_params.assign(n + 1, 0);
  for (int p = 0; p < n; ++p) P.prefix_params[p + 1] = P.prefix_params[p] + P.pos[p].param_bytes;
  {
    // The optimizer state a prediction reads beside the master: SGD's momentum, Adam's two moments.
    std::unordered_map<const Value*, int> state_reads;
    for (auto& node : g.nodes())
      if (node->phase == Phase::kUpdate && !node->inputs.empty()) state_reads[node->inputs[0]] = node->op_type == "Adam" ? 2 : 1;
    P.prefix_predict.assign(nc, std::vector<double>(n + 1, 0));
    P.prefix_copy = P.prefix_predict;
    for (size_t c = 0; c < nc; ++c)
      for (int p = 0; p < n; ++p) {
        double predict = 0, copy = 0;
        for (const Value* v : P.pos[p].params) {
          const double b = cost_value_bytes(v), elems = static_cast<double>(std::max<int64_t>(0, v->size()));
          auto it = state_reads.find(v);
          predict += weight_pass_s(2 * elems, (2.0 + (it == state_reads.end() ? 1 : it->second)) * b, P.classes[c]);
          copy += weight_pass_s(0, 2 * b, P.classes[c]);
        }
        P.prefix_predict[c][p + 1] = P.prefix_predict[c][p] + predict;
        P.prefix_copy[c][p + 1] = P.prefix_copy[c][p] + copy;
      }
    for (int k = 0; k < P.num_stages; ++k) P.weight_passes.push_back(stage_weight_passes(k, P.num_stages, opts));
  }
  P.replicas = std::max(1, opts.replicas);
  P.scale = static_cast<double>(std::max(1, opts.graph_replicas)) / P.replicas;
  P.replica_link = opts.replica_link.name.empty() ? opts.link : opts.replica_link;
  P.prefix_fb.assign(nc, std::vector<double>(n + 1, 0));
  P.prefix_upd = P.prefix_fb;
  P.prefix_oh = P.prefix_fb;
  P.prefix_foh = P.prefix_fb;
  for (size_t c = 0; c < nc; ++c)
    for (int p = 0; p < n; ++p) {
      P.prefix_fb[c][p + 1] = P.prefix_fb[c][p] + P.fwd[c][p] + P.bwd[c][p];
      P.prefix_upd[c][p + 1] = P.prefix_upd[c][p] + P.upd[c][p];
      P.prefix_oh[c][p + 1] =
          P.prefix_oh[c][p] + (1.0 + P.pos[p].bwd_kernels) * std::max(0.0, P.classes[c].kernel_overhead_s);
      P.prefix_foh[c][p + 1] = P.prefix_foh[c][p] + std::max(0.0, P.classes[c].kernel_overhead_s);
    }
  return P;
}

// A stage [i, j) grown one position at a time; everything it tracks is monotone in j.
class StageSweep {
 public:
  StageSweep(const Problem& P, std::vector<int>* recv_mark, std::vector<int>* kept_mark, int* epoch)
      : P_(P), recv_mark_(*recv_mark), kept_mark_(*kept_mark), epoch_(*epoch) {}

  void start(int i, int stage) {
    i_ = j_ = i;
    stage_ = stage;
    link_ = &P_.link_of(stage);
    ++epoch_;
    recv_bytes_ = grad_bytes_ = saved_ = workspace_ = data_bytes_ = 0;
    recv_count_ = grad_count_ = 0;
    weight_bytes_ = shared_memory_ = shared_grad_bytes_ = 0;
    largest_params_ = 0;
    weight_count_ = 0;
    shared_.clear();
    if (shared_mark_.size() != P_.vals.size()) shared_mark_.assign(P_.vals.size(), {-1, 0});
  }
  void add() {
    const Pos& p = P_.pos[j_];
    for (int id : p.reads) {
      const Val& x = P_.vals[id];
      if (x.producer_pos >= i_ || recv_mark_[id] == epoch_) continue;
      recv_mark_[id] = epoch_;
      recv_bytes_ += x.bytes;
      ++recv_count_;
      if (x.has_grad) {
        grad_bytes_ += x.bytes;
        ++grad_count_;
      }
    }
    for (int id : p.data)
      if (recv_mark_[id] != epoch_) {
        recv_mark_[id] = epoch_;
        data_bytes_ += P_.vals[id].bytes;
      }
    for (int id : p.kept)
      if (kept_mark_[id] != epoch_) {
        kept_mark_[id] = epoch_;
        saved_ += P_.vals[id].bytes;
      }
    workspace_ = std::max(workspace_, p.workspace);
    largest_params_ = std::max(largest_params_, p.param_bytes);
    // A weight owned by an earlier stage: its versions come in (once per mini-batch and pass that
    // reads it; GPipe once per mini-batch, spread over its micro-batches), its gradient goes back
    // (per pass), and the stage holds the received copies.
    for (const auto& [id, bwd] : p.param_reads) {
      const Val& x = P_.vals[id];
      if (x.owner_pos < 0 || x.owner_pos >= i_) continue;
      const int bit = bwd && !P_.one_weight_version ? 2 : 1;
      auto& [mark_epoch, bits] = shared_mark_[id];
      if (mark_epoch != epoch_) mark_epoch = epoch_, bits = 0;
      if (bits & bit) continue;
      if (!bits) {
        shared_.push_back(x.v);
        grad_bytes_ += x.bytes;
        shared_grad_bytes_ += x.bytes;
        ++grad_count_;
        shared_memory_ += x.bytes;  // the stage's own buffer
        if (P_.two_bw) shared_memory_ += 2 * x.bytes;  // 2BW: the versions of two mini-batches kept
      }
      bits |= bit;
      weight_bytes_ += x.bytes;
      ++weight_count_;
      shared_memory_ += x.bytes * shared_link_slots(stage_, P_.num_stages, bit == 2, P_.gpipe);
    }
    ++j_;
  }
  double comm_s() const {
    const LinkSpec& l = *link_;
    const double per_pass = P_.one_weight_version ? 1.0 / P_.micro : 1.0;  // weight versions per micro-batch
    const double count = recv_count_ + grad_count_ + per_pass * weight_count_;
    if (!(l.bandwidth > 0)) return count * l.latency_s;
    if (P_.replicated()) {  // activations and their gradients at one replica's share; weights whole
      const double act = (recv_bytes_ + grad_bytes_ - shared_grad_bytes_) * P_.scale;
      return (act + shared_grad_bytes_ + per_pass * weight_bytes_) / l.bandwidth + count * l.latency_s;
    }
    return (recv_bytes_ + grad_bytes_ + per_pass * weight_bytes_) / l.bandwidth + count * l.latency_s;
  }
  // The all-reduce of the stage's own parameter gradients across its replicas, in seconds.
  double allreduce_s() const { return 1e-3 * allreduce_ms(param_bytes(), P_.replicas, P_.replica_link); }
  double shared_memory() const { return shared_memory_; }
  double weight_bytes() const { return weight_bytes_; }
  const std::vector<const Value*>& shared() const { return shared_; }
  double time_s(int cls) const {
    const double versions = weight_pass_s(cls, true) + weight_pass_s(cls, false) + update_copy_s(cls);
    if (P_.replicated())
      return P_.share_s(P_.prefix_fb[cls][j_] - P_.prefix_fb[cls][i_], P_.prefix_oh[cls][j_] - P_.prefix_oh[cls][i_]) +
             (P_.prefix_upd[cls][j_] - P_.prefix_upd[cls][i_]) + comm_s() + allreduce_s() + versions;
    return P_.prefix[cls][j_] - P_.prefix[cls][i_] + comm_s() + versions;
  }
  // 2BW's copy of the master with each update.
  double update_copy_s(int cls) const {
    if (stage_ >= static_cast<int>(P_.weight_passes.size())) return 0;
    return P_.weight_passes[stage_].update_copy * (P_.prefix_copy[cls][j_] - P_.prefix_copy[cls][i_]);
  }
  // The stage's passes over its weights outside the graph in its forward or backward (whole
  // weights on every replica).
  double weight_pass_s(int cls, bool forward) const {
    if (stage_ >= static_cast<int>(P_.weight_passes.size())) return 0;
    const WeightPasses& w = P_.weight_passes[stage_];
    return (forward ? w.fwd_predict : w.bwd_predict) * (P_.prefix_predict[cls][j_] - P_.prefix_predict[cls][i_]) +
           (forward ? w.fwd_copy : w.bwd_copy) * (P_.prefix_copy[cls][j_] - P_.prefix_copy[cls][i_]);
  }
  double forward_s(int cls) const { return P_.prefix_fwd[cls][j_] - P_.prefix_fwd[cls][i_]; }
  // The forward a recomputing stage reruns: forward_s, one replica's share of it with replicas.
  double rerun_s(int cls) const {
    if (!P_.replicated()) return forward_s(cls);
    return P_.share_s(forward_s(cls), P_.prefix_foh[cls][j_] - P_.prefix_foh[cls][i_]);
  }
  // What the stage keeps per pass when it recomputes: received activations, data inputs, labels.
  double recompute_inputs() const { return recv_bytes_ + data_bytes_; }
  double param_bytes() const { return P_.prefix_params[j_] - P_.prefix_params[i_]; }
  double saved() const { return saved_; }
  double workspace() const { return workspace_; }
  double recv_bytes() const { return recv_bytes_; }
  double grad_bytes() const { return grad_bytes_; }
  double shared_grad_bytes() const { return shared_grad_bytes_; }  // of shared weights (in grad_bytes)
  // The most parameter bytes one position brings (a layer's weight and bias): with the update in
  // the backward, the gradients that live at once.
  double largest_params() const { return largest_params_; }

 private:
  const Problem& P_;
  const LinkSpec* link_ = &P_.link;
  std::vector<int>& recv_mark_;
  std::vector<int>& kept_mark_;
  int& epoch_;
  int i_ = 0, j_ = 0, stage_ = 0;
  double recv_bytes_ = 0, grad_bytes_ = 0, saved_ = 0, workspace_ = 0, data_bytes_ = 0;
  int recv_count_ = 0, grad_count_ = 0;
  double weight_bytes_ = 0, shared_memory_ = 0, shared_grad_bytes_ = 0;
  int weight_count_ = 0;
  double largest_params_ = 0;
  std::vector<std::pair<int, int>> shared_mark_;  // [value id]: (epoch, bits: 1 forward weights, 2 backward)
  std::vector<const Value*> shared_;
};

// A stage's predicted memory under opts.recompute, and whether it recomputes: kStage wherever it
// can and that takes less memory (a stage whose inputs are as large as its activations, or whose
// forward weight copies outweigh them, would pay the rerun for nothing), kAuto only where it
// would not fit `cap` otherwise. A stage that reads a weight shared with an earlier stage under
// 1F1B cannot: its forward's version of that weight is not kept.
struct StageMemory {
  double bytes = 0;
  bool recompute = false;
};
StageMemory stage_memory(const StageSweep& sw, int k, int N, const PartitionOptions& opts, double act_scale,
                         double model_param_bytes, double cap) {
  const double transient =
      stage_update_in_backward(k, N, opts) && sw.shared().empty() ? sw.largest_params() : -1.0;
  const double none =
      memory_of(sw.param_bytes(), sw.saved(), sw.workspace(), k, N, opts, act_scale, model_param_bytes, transient) +
      sw.shared_memory();
  const bool can = stage_may_recompute(k, N, opts) && (synchronous(opts.schedule, opts.weights) || sw.shared().empty());
  if (!can || (opts.recompute == Recompute::kAuto && none <= cap)) return {none, false};
  const double rec = recompute_memory_of(sw.param_bytes(), sw.recompute_inputs(), sw.saved(), sw.workspace(), k, N, opts,
                                         act_scale, model_param_bytes, transient) +
                     sw.shared_memory();
  if (rec >= none) return {none, false};
  return {rec, true};
}

enum class Objective { kTime, kOverflow };

struct Solution {
  bool feasible = false;
  double value = kInf;
  std::vector<int> starts;  // first position of every stage (starts[0] == 0)
};

// The largest stage time of one split under kTime rules; kInf when a stage does not fit.
double split_time(const Problem& P, const std::vector<int>& starts, const std::vector<int>& device_index,
                  const PartitionOptions& opts, double act_scale) {
  const int n = P.n(), N = static_cast<int>(starts.size());
  std::vector<int> recv_mark(P.vals.size(), 0), kept_mark(P.vals.size(), 0);
  int epoch = 0;
  StageSweep sw(P, &recv_mark, &kept_mark, &epoch);
  double worst = 0;
  for (int k = 0; k < N; ++k) {
    const int end = k + 1 < N ? starts[k + 1] : n;
    if (end <= starts[k]) return kInf;
    sw.start(starts[k], k);
    for (int p = starts[k]; p < end; ++p) sw.add();
    const int dev = device_index[k];
    const StageMemory m =
        stage_memory(sw, k, N, opts, act_scale * P.scale, P.prefix_params.back(), opts.devices[dev].memory_bytes);
    if (m.bytes > opts.devices[dev].memory_bytes) return kInf;
    worst = std::max(worst, sw.time_s(P.class_of[dev]) + (m.recompute ? sw.rerun_s(P.class_of[dev]) : 0.0));
  }
  return worst;
}

// An upper bound on the optimum for pruning: the split with equal compute per stage (on the
// first device's speeds), when it fits.
double equal_compute_bound(const Problem& P, const std::vector<int>& device_index, const PartitionOptions& opts,
                           double act_scale) {
  const int n = P.n(), N = static_cast<int>(device_index.size());
  if (N == 0 || N > n) return kInf;
  const std::vector<double>& pre = P.prefix[P.class_of[device_index[0]]];
  std::vector<int> starts{0};
  for (int k = 1; k < N; ++k) {
    const double target = pre[n] * k / N;
    int p = static_cast<int>(std::lower_bound(pre.begin(), pre.end(), target) - pre.begin());
    p = std::clamp(p, starts.back() + 1, n - (N - k));
    while (p < n - (N - k) && !P.can_start(p)) ++p;  // the bound's split must be one the DP may take
    if (!P.can_start(p)) return kInf;
    starts.push_back(p);
  }
  return split_time(P, starts, device_index, opts, act_scale);
}

// Minimises the largest stage value over all splits of the order into devices.size() non-empty
// contiguous stages. kTime: stage time, subject to memory <= the stage device's memory.
// kOverflow: memory - device memory (no constraint): the split closest to fitting.
// `device_index` maps stage k to the given device it runs on.
Solution solve(const Problem& P, const std::vector<int>& device_index, const PartitionOptions& opts, double act_scale,
               Objective obj) {
  const int n = P.n(), N = static_cast<int>(device_index.size());
  Solution sol;
  if (N == 0 || N > n) return sol;
  std::vector<std::vector<double>> dp(N + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> arg(N + 1, std::vector<int>(n + 1, -1));
  dp[0][0] = -kInf;
  std::vector<int> recv_mark(P.vals.size(), 0), kept_mark(P.vals.size(), 0);
  int epoch = 0;
  StageSweep sw(P, &recv_mark, &kept_mark, &epoch);
  // Stage times only grow with j, so a sweep stops once it passes a known feasible bottleneck;
  // the slack keeps the bound's own split reachable.
  const double bound = obj == Objective::kTime ? equal_compute_bound(P, device_index, opts, act_scale) * (1 + 1e-9) : kInf;
  for (int k = 0; k < N; ++k) {
    const int dev = device_index[k];
    const int cls = P.class_of[dev];
    const double cap = opts.devices[dev].memory_bytes;
    const int last_end = n - (N - k - 1);  // leave one position for each later stage
    for (int i = k; i < last_end; ++i) {
      if (dp[k][i] == kInf || dp[k][i] > bound) continue;
      sw.start(i, k);
      for (int j = i + 1; j <= last_end; ++j) {
        sw.add();
        if (!P.can_start(j)) continue;  // the next stage cannot start at j; a longer stage may end later
        const StageMemory m = stage_memory(sw, k, N, opts, act_scale * P.scale, P.prefix_params.back(), cap);
        const double mem = m.bytes;
        double value;
        if (obj == Objective::kTime) {
          if (mem > cap) break;  // memory only grows with j
          value = sw.time_s(cls) + (m.recompute ? sw.rerun_s(cls) : 0.0);
          if (value > bound) break;
        } else {
          value = mem - cap;
        }
        const double cand = std::max(dp[k][i], value);
        if (cand < dp[k + 1][j]) {
          dp[k + 1][j] = cand;
          arg[k + 1][j] = i;
        }
      }
    }
  }
  if (dp[N][n] == kInf) return sol;
  sol.feasible = obj == Objective::kTime || dp[N][n] <= 0;
  sol.value = dp[N][n];
  sol.starts.assign(N, 0);
  for (int k = N, j = n; k > 0; --k) {
    sol.starts[k - 1] = arg[k][j];
    j = arg[k][j];
  }
  return sol;
}

std::vector<int> identity_devices(size_t n) {
  std::vector<int> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<int>(i);
  return d;
}

int64_t graph_batch(const Graph& g) {
  for (const Value* v : g.inputs)
    if (v && !v->dims.empty() && v->dims[0] > 0) return v->dims[0];
  return 1;
}

// The Plan for a split of the order: every field, from the same per-position numbers the DP used.
Plan build_plan(const Graph& g, const Problem& P, const std::vector<int>& starts, const PartitionOptions& opts,
                const std::unordered_map<const Value*, int>& param_owner) {
  const int n = P.n(), N = static_cast<int>(starts.size());
  std::vector<int> stage_of_pos(n);
  for (int k = 0; k < N; ++k) {
    const int end = k + 1 < N ? starts[k + 1] : n;
    for (int p = starts[k]; p < end; ++p) stage_of_pos[p] = k;
  }
  Plan plan;
  plan.schedule = opts.schedule;
  plan.weights = opts.weights;
  plan.recompute = opts.recompute;
  plan.micro_batches = std::max(1, opts.micro_batches);
  plan.virtual_stages = std::max(1, opts.virtual_stages);
  plan.program = opts.program;
  plan.batch_size = graph_batch(g);
  plan.link = opts.link;
  plan.replicas = P.replicas;
  plan.graph_replicas = std::max(1, opts.graph_replicas);
  plan.replica_link = P.replica_link;
  plan.stages.resize(N);
  {
    std::set<int> nodes(opts.node_of_stage.begin(), opts.node_of_stage.end());
    plan.num_nodes = std::max<int>(1, static_cast<int>(nodes.size()));
  }
  for (int k = 0; k < N; ++k) {
    StagePlan& s = plan.stages[k];
    s.index = k;
    s.device = opts.devices[k];
    const int end = k + 1 < N ? starts[k + 1] : n;
    const int cls = P.class_of[k];
    std::vector<int> recv_mark(P.vals.size(), 0), kept_mark(P.vals.size(), 0);
    int epoch = 0;
    StageSweep sw(P, &recv_mark, &kept_mark, &epoch);
    sw.start(starts[k], k);
    std::set<int> recv_seen;
    s.node = k < static_cast<int>(opts.node_of_stage.size()) ? opts.node_of_stage[k] : 0;
    s.cut_crosses_nodes = crosses_nodes(opts, k);
    s.link_in = P.link_of(k);
    int fwd_kernels = 0, bwd_kernels = 0;
    for (int p = starts[k]; p < end; ++p) {
      const Pos& x = P.pos[p];
      ++fwd_kernels;
      bwd_kernels += x.bwd_kernels;
      sw.add();
      s.forward_nodes.push_back(x.node);
      s.nodes.push_back(x.node);
      s.fwd_ms += 1e3 * P.fwd[cls][p];
      s.bwd_ms += 1e3 * P.bwd[cls][p];
      s.update_ms += 1e3 * P.upd[cls][p];
      for (const Value* v : x.params) s.params.push_back(v);
      s.param_count += x.param_count;
      for (int id : x.reads)
        if (P.vals[id].producer_pos < starts[k] && recv_seen.insert(id).second) s.recv.push_back(P.vals[id].v);
    }
    s.comm_ms = 1e3 * sw.comm_s();
    s.param_bytes = static_cast<int64_t>(sw.param_bytes());
    const double fwd_weights_ms = 1e3 * sw.weight_pass_s(cls, true), bwd_weights_ms = 1e3 * sw.weight_pass_s(cls, false);
    s.recv_bytes = static_cast<int64_t>(sw.recv_bytes());
    s.grad_send_bytes = static_cast<int64_t>(sw.grad_bytes());
    s.saved_bytes = static_cast<int64_t>(sw.saved());
    s.workspace_bytes = static_cast<int64_t>(sw.workspace());
    if (P.replicated()) {  // one replica's share of the mini-batch; its stage all-reduces
      const double a = P.scale;
      const double oh_ms = 1e3 * std::max(0.0, s.device.kernel_overhead_s);
      s.fwd_ms = P.share_s(s.fwd_ms, oh_ms * fwd_kernels);
      s.bwd_ms = P.share_s(s.bwd_ms, oh_ms * bwd_kernels);
      s.recv_bytes = static_cast<int64_t>(sw.recv_bytes() * a);
      s.grad_send_bytes = static_cast<int64_t>((sw.grad_bytes() - sw.shared_grad_bytes()) * a + sw.shared_grad_bytes());
      s.saved_bytes = static_cast<int64_t>(sw.saved() * a);
      s.workspace_bytes = static_cast<int64_t>(sw.workspace() * a);
      s.allreduce_ms = 1e3 * sw.allreduce_s();
    }
    s.shared_params = sw.shared();
    s.shared_recv_bytes = static_cast<int64_t>(sw.weight_bytes());
    s.shared_memory_bytes = static_cast<int64_t>(sw.shared_memory());
    s.in_flight = stage_in_flight(k, N, opts);
    s.weight_copies = stage_weight_copies(k, N, opts);
    s.gradient_accumulators = stage_gradient_accumulators(opts);
    // A stage that reads a weight of an earlier stage keeps its gradients to the end (the owner's
    // side is known once the layout is: layout_plan); one without parameters has no update.
    s.update_in_backward = stage_update_in_backward(k, N, opts) && sw.shared().empty() && s.param_bytes > 0;
    if (s.update_in_backward) s.transient_gradient_bytes = static_cast<int64_t>(sw.largest_params());
    s.evaluator_bytes = static_cast<int64_t>(stage_evaluator_param_bytes(k, N, opts, P.prefix_params.back()));
    s.recompute = stage_memory(sw, k, N, opts, P.scale, P.prefix_params.back(), s.device.memory_bytes).recompute;
    if (s.recompute) {
      // With replicas the inputs kept are the share's; the rerun forward is the share's (fwd_ms).
      s.recompute_input_bytes = static_cast<int64_t>(P.replicated() ? sw.recompute_inputs() * P.scale : sw.recompute_inputs());
      s.recompute_weight_copies = stage_recompute_weight_copies(k, N, opts);
      s.weight_copies += s.recompute_weight_copies;
      s.recompute_ms = P.replicated() ? s.fwd_ms : 1e3 * sw.forward_s(cls);
      s.bwd_ms += s.recompute_ms;
    }
    s.update_ms += 1e3 * sw.update_copy_s(cls);
    s.fwd_weights_ms = fwd_weights_ms;  // the runtime times them inside the passes
    s.bwd_weights_ms = bwd_weights_ms;
    s.fwd_ms += fwd_weights_ms;
    s.bwd_ms += bwd_weights_ms;
    s.memory_bytes = stage_memory_bytes(s, N, opts);
  }
  // Sends: each value once in the list, its bytes once per stage that receives it.
  for (int k = 0; k < N; ++k)
    for (const Value* v : plan.stages[k].recv) {
      StagePlan& src = plan.stages[stage_of_pos[P.vals[v->id].producer_pos]];
      if (std::find(src.send.begin(), src.send.end(), v) == src.send.end()) src.send.push_back(v);
      src.send_bytes += static_cast<int64_t>(P.replicated() ? P.vals[v->id].bytes * P.scale : P.vals[v->id].bytes);
    }
  // Backward, update and other nodes follow their position's stage, in graph order.
  std::vector<std::vector<const Node*>> tail(N);
  for (auto& node : g.nodes())
    if (!is_forward_phase(*node)) tail[stage_of_pos[owner_position(P, *node, param_owner)]].push_back(node.get());
  for (int k = 0; k < N; ++k) {
    auto& nodes = plan.stages[k].nodes;
    for (const Node* x : tail[k])
      if (x->phase != Phase::kUpdate) nodes.push_back(x);
    for (const Node* x : tail[k])
      if (x->phase == Phase::kUpdate) nodes.push_back(x);
  }
  double sum = 0, worst = 0, worst_no_update = 0, worst_update = 0;
  for (const StagePlan& s : plan.stages) {
    sum += s.stage_ms();
    worst = std::max(worst, s.stage_ms());
    worst_no_update = std::max(worst_no_update, s.fwd_ms + s.bwd_ms + s.comm_ms);
    worst_update = std::max(worst_update, s.update_ms + s.allreduce_ms);
  }
  plan.bottleneck_ms = worst;
  plan.imbalance = sum > 0 ? worst / (sum / N) : 1.0;
  // The whole mini-batch: every replica's share.
  const double b = static_cast<double>(plan.batch_size) * plan.graph_replicas;
  const double M = plan.micro_batches;
  const int c0 = P.class_of[0];
  // The whole mini-batch on one device: graph_replicas shares' worth of compute, one set of launches.
  const double whole_fb = plan.graph_replicas * std::max(0.0, P.prefix_fb[c0][n] - P.prefix_oh[c0][n]) +
                          std::min(P.prefix_fb[c0][n], P.prefix_oh[c0][n]);
  double whole_ms = P.replicated() ? 1e3 * (whole_fb + P.prefix_upd[c0][n]) : 1e3 * P.prefix[c0][n];
  double upd_ms = 0;
  for (int p = 0; p < n; ++p) upd_ms += 1e3 * P.upd[c0][p];
  // The whole model alone on stage 0's device: no other stage shares its cores.
  plan.device_share = opts.devices.empty() ? 1.0 : opts.devices[0].share;
  plan.calibrated = !opts.devices.empty() && opts.devices[0].calibrated;
  whole_ms /= plan.device_share;
  upd_ms /= plan.device_share;
  if (synchronous(opts.schedule, opts.weights)) {  // GPipe's bubble; zb-h1's is simulated (layout_plan)
    const double step_ms = (M + N - 1) * worst_no_update + worst_update;
    plan.predicted_samples_per_s = step_ms > 0 ? 1e3 * M * b / step_ms : 0;
    const double single_ms = M * (whole_ms - upd_ms) + upd_ms;
    plan.single_device_samples_per_s = single_ms > 0 ? 1e3 * M * b / single_ms : 0;
  } else {
    plan.predicted_samples_per_s = worst > 0 ? 1e3 * b / worst : 0;
    plan.single_device_samples_per_s = whole_ms > 0 ? 1e3 * b / whole_ms : 0;
  }
  return plan;
}

// A stage's backward may not wait on the backward of an earlier stage (gradients flow from later
// stages to earlier ones only). The graph order always satisfies this; a reordering may not,
// when a value read by two nodes sees their gradients summed in the wrong stage.
bool backward_flows_backwards(const Plan& plan) {
  std::unordered_map<const Node*, int> stage;
  for (const StagePlan& s : plan.stages)
    for (const Node* n : s.nodes) stage[n] = s.index;
  for (const StagePlan& s : plan.stages)
    for (const Node* n : s.nodes) {
      if (n->phase != Phase::kBackward) continue;
      for (const Value* v : n->inputs)
        if (v && v->producer && v->producer->phase == Phase::kBackward && stage.count(v->producer) &&
            stage[v->producer] < s.index)
          return false;
    }
  return true;
}

std::string plural(int64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string mb(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f MB", bytes / 1e6);
  if (bytes > 0 && bytes < 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  return buf;
}

std::string stage_span(const StagePlan& s) {
  if (s.forward_nodes.empty()) return "no nodes";
  if (s.forward_nodes.size() == 1) return "node '" + s.forward_nodes.front()->name + "'";
  return "nodes '" + s.forward_nodes.front()->name + "' .. '" + s.forward_nodes.back()->name + "', " +
         std::to_string(s.forward_nodes.size()) + " forward nodes";
}

// The infeasible-memory error: the worst stage of `shown` (a plan that does not fit), how far over
// it is, what its memory is made of, and what would fit.
Status memory_error(const Graph& g, const Problem& P, const Plan& shown, const PartitionOptions& opts,
                    const std::string& what, bool automatic_fits) {
  const int N = static_cast<int>(shown.stages.size());
  const StagePlan* worst = nullptr;
  double worst_over = -kInf;
  for (const StagePlan& s : shown.stages) {
    const double over = static_cast<double>(s.memory_bytes) - s.device.memory_bytes;
    if (over > worst_over) {
      worst_over = over;
      worst = &s;
    }
  }
  PT_CHECK(worst) << "empty plan";
  const StagePlan& s = *worst;
  const int accumulators = stage_gradient_accumulators(opts);
  const double fixed = static_cast<double>(s.param_bytes) *
                       (2.0 + std::max(0, opts.optimizer_state_copies) + s.weight_copies + accumulators);
  std::string msg = "out of memory: " + what + " stage " + std::to_string(s.index) + " of stages 0.." +
                    std::to_string(N - 1) + " (" + s.device.name + ", " + stage_span(s) + ") needs " +
                    mb(static_cast<double>(s.memory_bytes)) + ", " + mb(worst_over) + " over its " +
                    mb(s.device.memory_bytes) + " (weights, gradients, optimizer state" +
                    (s.weight_copies ? " and " + std::to_string(s.weight_copies) + " weight cop" + (s.weight_copies == 1 ? "y" : "ies") : std::string()) +
                    (accumulators ? " and the micro-batches' gradient sums" : "") +
                    " " + mb(fixed) + "; " +
                    (s.recompute ? "recomputed: inputs " + mb(static_cast<double>(s.recompute_input_bytes)) + " x "
                                 : "activations " + mb(static_cast<double>(s.saved_bytes)) + " x ") +
                    (micro_batched(opts.schedule, opts.weights) ? plural(s.in_flight, "micro-batch", "micro-batches")
                                                       : plural(s.in_flight, "mini-batch", "mini-batches")) +
                    " in flight" +
                    (s.recompute ? " and one set of activations " + mb(static_cast<double>(s.saved_bytes)) : "") +
                    "; workspace " + mb(static_cast<double>(s.workspace_bytes)) + ").";
  if (automatic_fits) return invalid_input(msg + " The automatic partition (no --split-at / --balance) fits.");
  // More devices like these (the list repeated), same batch.
  std::vector<std::string> fits;
  const int n = P.n();
  const int max_devices = std::min(n, std::max(4 * N, N + 32));
  for (int m = N + 1; m <= max_devices; ++m) {
    std::vector<int> dev(m);
    for (int k = 0; k < m; ++k) dev[k] = k % N;
    if (solve(P, dev, opts, 1.0, Objective::kTime).feasible) {
      fits.push_back(std::to_string(m) + " devices like these" + (N > 1 ? " (the list repeated)" : "") +
                     " at this batch size");
      break;
    }
  }
  // Activation recomputation on the stages that do not fit.
  if (opts.recompute == Recompute::kNone) {
    PartitionOptions rec = opts;
    rec.recompute = Recompute::kAuto;
    if (solve(P, identity_devices(N), rec, 1.0, Objective::kTime).feasible)
      fits.push_back("--recompute auto (the stages that do not fit rerun their forward in the backward)");
  }
  // A smaller batch on these devices: activations and workspace scale linearly with the batch.
  const int64_t batch = graph_batch(g);
  int64_t lo = 0, hi = batch - 1;  // largest feasible batch in [1, batch - 1]; 0: none
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (solve(P, identity_devices(N), opts, static_cast<double>(mid) / static_cast<double>(batch), Objective::kTime).feasible)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo > 0)
    fits.push_back("a batch size of " + std::to_string(lo) + " or less (now " + std::to_string(batch) + ") on " + (N == 1 ? std::string("this device") : "these " + std::to_string(N) + " devices"));
  if (fits.empty())
    return invalid_input(msg + " Neither more devices like these (up to " + std::to_string(std::max(max_devices, N)) +
                         ") nor a smaller batch fits: use devices with more memory.");
  std::string tail;
  for (const std::string& f : fits) tail += (tail.empty() ? "" : "; or ") + f;
  return invalid_input(msg + " What would fit: " + tail + ".");
}

// A manual start where no stage may start (Problem::no_cut): refused, naming the node.
Status check_manual_start(const Problem& P, int start, const char* flag) {
  if (P.can_start(start)) return Status::ok();
  const std::string at = std::string(flag) + ": a stage cannot start at '" + P.pos[start].node->name + "' (" +
                         P.pos[start].node->op_type + "): ";
  if (P.no_cut[start] == 2)
    return invalid_input(at + "the update of a parameter read first before it (with --precision bf16, by its bfloat16 "
                              "Cast) needs the weight gradient computed from here on, so both must be on one stage; move the cut");
  return invalid_input(at + "the backward of a node before it reads what it computes, so both must be on one stage; move the cut");
}

Expected<std::vector<int>> manual_starts(const Problem& P, const PartitionOptions& opts) {
  const int n = P.n(), N = static_cast<int>(opts.devices.size());
  if (!opts.split_at.empty() && !opts.balance.empty()) return invalid_input("--split-at and --balance cannot be combined; give one");
  std::vector<int> starts{0};
  if (!opts.balance.empty()) {
    if (static_cast<int>(opts.balance.size()) != N)
      return invalid_input("--balance has " + std::to_string(opts.balance.size()) + " entries for " + std::to_string(N) +
                           " stages; give one count of forward nodes per stage");
    int64_t sum = 0;
    for (size_t k = 0; k < opts.balance.size(); ++k) {
      if (opts.balance[k] < 1) return invalid_input("--balance entry " + std::to_string(k) + " is " + std::to_string(opts.balance[k]) + "; every stage needs at least one forward node");
      sum += opts.balance[k];
    }
    if (sum != n)
      return invalid_input("--balance sums to " + std::to_string(sum) + " but the model has " + std::to_string(n) +
                           " forward nodes (loss included); the counts must add up to " + std::to_string(n));
    for (size_t k = 0; k + 1 < opts.balance.size(); ++k) {
      starts.push_back(starts.back() + opts.balance[k]);
      RETURN_IF_ERROR(check_manual_start(P, starts.back(), "--balance"));
    }
    return starts;
  }
  if (static_cast<int>(opts.split_at.size()) != N - 1)
    return invalid_input("--split-at names " + std::to_string(opts.split_at.size()) + " nodes for " + std::to_string(N) +
                         " stages; name the first node of each stage but the first (" + std::to_string(N - 1) + " names)");
  std::unordered_map<std::string, int> by_name;
  for (int p = 0; p < n; ++p) by_name.emplace(P.pos[p].node->name, p);
  for (const std::string& name : opts.split_at) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      std::string known;
      for (int p = 0; p < n && p < 8; ++p) known += (p ? ", " : "") + P.pos[p].node->name;
      return invalid_input("--split-at: no forward node named '" + name + "' (the forward nodes are " + known +
                           (n > 8 ? ", ... (" + std::to_string(n) + " in all)" : "") + ")");
    }
    if (it->second == 0) return invalid_input("--split-at: '" + name + "' is the first forward node; it already starts stage 0");
    if (it->second <= starts.back())
      return invalid_input("--split-at: '" + name + "' comes before (or is) '" + P.pos[starts.back()].node->name +
                           "' in the model's order; name the nodes in order");
    RETURN_IF_ERROR(check_manual_start(P, it->second, "--split-at"));
    starts.push_back(it->second);
  }
  return starts;
}

// --recompute stage asks every stage that keeps several passes in flight to recompute where that
// saves memory: one that cannot (it reads a weight shared under 1F1B, whose forward version is
// not kept) is refused.
Status check_recompute(const Plan& plan, const PartitionOptions& opts) {
  if (opts.recompute != Recompute::kStage) return Status::ok();
  const int N = static_cast<int>(plan.stages.size());
  for (const StagePlan& s : plan.stages)
    if (stage_may_recompute(s.index, N, opts) && !s.recompute && !s.shared_params.empty() &&
        !synchronous(opts.schedule, opts.weights))
      return invalid_input("--recompute stage: stage " + std::to_string(s.index) + " reads weight '" +
                           (s.shared_params.empty() ? std::string("?") : s.shared_params.front()->name) +
                           "' shared with an earlier stage; under 1F1B the version its forward read is not kept, so "
                           "its forward cannot be rerun exactly (use --recompute auto or --schedule gpipe)");
  return Status::ok();
}

bool fits(const Plan& p) {
  for (const StagePlan& s : p.stages)
    if (static_cast<double>(s.memory_bytes) > s.device.memory_bytes) return false;
  return true;
}

}  // namespace

Expected<Plan> partition(const Graph& g, const PartitionOptions& opts) {
  const int N = static_cast<int>(opts.devices.size());
  if (N == 0) return invalid_input("partition: no devices given");
  if (chunked_schedule(opts.schedule)) {  // a program must exist for the stages and micro-batches
    const int V = std::max(1, opts.virtual_stages);
    if (N % V != 0 || (opts.schedule == Schedule::kZBV && V != 2))
      return invalid_input(std::string("--schedule ") + schedule_name(opts.schedule) + ": " + std::to_string(N) +
                           " stages are not devices x " + std::to_string(V) + " virtual stages");
    if (opts.schedule == Schedule::kZBV && N < 4) return invalid_input("--schedule zbv needs at least 2 stages (--gpus)");
    if (const std::string why = interleaved_error(N / V, V, opts.micro_batches);
        opts.schedule == Schedule::kInterleaved && !why.empty())
      return invalid_input(why);
  }
  const bool manual = !opts.split_at.empty() || !opts.balance.empty();
  std::vector<NodeOrder> orders;
  if (opts.order != NodeOrder::kAuto) orders = {opts.order};
  else if (manual) orders = {NodeOrder::kGraph};
  else orders = {NodeOrder::kGraph, NodeOrder::kBranch};
  const char* const names[] = {"auto", "graph", "branch"};

  Expected<Plan> best = internal_error("no plan");
  Status refused = Status::ok();  // the first plan the trainer could not run, and why
  for (NodeOrder order : orders) {
    std::unordered_map<const Value*, int> param_owner;
    const std::vector<const Node*> ord = forward_order(g, order);
    if (static_cast<int>(ord.size()) < N)
      return invalid_input((opts.virtual_stages > 1 ? "--gpus " + std::to_string(N / opts.virtual_stages) +
                                                          (opts.schedule == Schedule::kZBV
                                                               ? " under --schedule zbv (2 chunks per GPU)"
                                                               : " x --virtual-stages " + std::to_string(opts.virtual_stages))
                                                    : "--gpus " + std::to_string(N)) +
                           ": " + std::to_string(N) + " stages need at least " +
                           std::to_string(N) + " forward nodes; the model has " +
                           std::to_string(ord.size()));
    const Problem P = build_problem(g, ord, opts, &param_owner);
    if (manual) {
      ASSIGN_OR_RETURN(std::vector<int> starts, manual_starts(P, opts));
      Plan plan = build_plan(g, P, starts, opts, param_owner);
      plan.manual = true;
      plan.order = names[static_cast<int>(order)];
      if (!fits(plan)) {
        const bool auto_fits = solve(P, identity_devices(N), opts, 1.0, Objective::kTime).feasible;
        return memory_error(g, P, plan, opts, "the manual partition does not fit:", auto_fits);
      }
      RETURN_IF_ERROR(check_recompute(plan, opts));
      RETURN_IF_ERROR(layout_plan(g, &plan));
      return plan;
    }
    const Solution sol = solve(P, identity_devices(N), opts, 1.0, Objective::kTime);
    if (!sol.feasible) continue;
    Plan plan = build_plan(g, P, sol.starts, opts, param_owner);
    plan.order = names[static_cast<int>(order)];
    if (opts.order == NodeOrder::kAuto && !backward_flows_backwards(plan)) continue;
    if (Status st = layout_plan(g, &plan); !st.is_ok()) {
      if (refused.is_ok()) refused = st;
      continue;
    }
    if (!best.has_value() || plan.bottleneck_ms < best->bottleneck_ms * (1 - 1e-12)) best = std::move(plan);
  }
  if (best.has_value()) RETURN_IF_ERROR(check_recompute(*best, opts));
  if (!best.has_value() && !refused.is_ok()) return refused;
  if (!best.has_value()) {
    // Explained in the first order tried (the graph's own, unless one was asked for).
    std::unordered_map<const Value*, int> param_owner;
    const Problem P = build_problem(g, forward_order(g, orders.front()), opts, &param_owner);
    const Solution closest = solve(P, identity_devices(N), opts, 1.0, Objective::kOverflow);
    if (closest.starts.size() != static_cast<size_t>(N)) {  // fewer places to cut than stages
      int starts = 1;
      for (int j = 1; j < P.n(); ++j) starts += P.can_start(j) ? 1 : 0;
      return invalid_input(plural(N, "stage", "stages") + ": this model can be cut into at most " + std::to_string(starts) +
                           " (of its " + plural(P.n(), "forward node", "forward nodes") +
                           ", some must share a stage: a node and the backward or update that reads what it computes, "
                           "such as a weight's bfloat16 Cast and its product under --precision bf16); use fewer stages");
    }
    const Plan shown = build_plan(g, P, closest.starts, opts, param_owner);
    return memory_error(g, P, shown, opts,
                        "no split of the " + plural(P.n(), "forward node", "forward nodes") + " into " +
                            plural(N, "stage", "stages") + " fits the devices' memory; in the closest one,",
                        false);
  }
  return best;
}

}  // namespace pt
