// The partition algorithm: contiguous stages of a topological order of the forward nodes (each
// backward and update node goes with its forward node), minimising the bottleneck stage time
// (compute + boundary transfers) subject to each device's memory. Exact for the chosen order
// (dynamic programming); the order keeps branches together.
#pragma once

#include <string>
#include <vector>

#include "partitioner/cost_model.h"
#include "partitioner/plan.h"

namespace pt {

// Which topological order of the forward nodes the stages are contiguous ranges of.
//   kGraph:  the graph's own order (ONNX order, what the user sees).
//   kBranch: a depth-first topological order that finishes a branch before starting a sibling.
//   kAuto:   automatic plans try both and keep the better (the DP is exact for each order, so the
//            result is optimal over both orders' contiguous splits); manual plans use kGraph.
enum class NodeOrder { kAuto, kGraph, kBranch };

struct PartitionOptions {
  std::vector<DeviceSpec> devices;     // one per stage, in pipeline order (heterogeneous allowed)
  LinkSpec link;                       // between adjacent stages
  // Multi-node jobs: the node each stage runs on (empty: one node). A cut between stages on two
  // nodes is charged with `network_link` instead of `link`.
  std::vector<int> node_of_stage;
  LinkSpec network_link;
  Schedule schedule = Schedule::k1F1B;
  WeightMode weights = WeightMode::kSpecTrain;
  Recompute recompute = Recompute::kNone;  // --recompute (plan.h): which stages rerun their forward
  int micro_batches = 1;               // synchronous schedules
  // Interleaved stages (Schedule::kInterleaved): V virtual stages per device. `devices` then lists
  // every virtual stage's (devices.size() = D x V), virtual stage k on device k % D: the caller
  // repeats the D devices' specs V times, each with 1/V of its device's memory.
  int virtual_stages = 1;
  std::shared_ptr<const ScheduleIR> program;  // a schedule file's (null: the schedule's own)
  int optimizer_state_copies = 1;      // momentum: 1; Adam: 2
  const Profile* profile = nullptr;
  std::vector<std::string> split_at;   // manual: first node name of stages 1..N-1
  std::vector<int> balance;            // manual: forward nodes per stage
  NodeOrder order = NodeOrder::kAuto;
  // Hybrid parallelism (--replicas): `replicas` data-parallel copies of the pipeline, each on
  // 1/replicas of the mini-batch. The graph holds 1/graph_replicas of it (1: the whole
  // mini-batch; the runtime, which trains each replica on its share, imports at batch / R and
  // passes R), so compute, activations, workspace and activation transfers are scaled by
  // graph_replicas / replicas: forward and backward times linearly but for their per-kernel launch
  // overhead (one per forward and backward node), which a share keeps whole (the roofline's
  // parameter bytes are scaled with the rest: an approximation). Each stage then all-reduces its
  // own parameters' gradients across its replicas
  // over `replica_link` (empty name: `link`, i.e. the replicas of a stage are as far apart as two
  // adjacent stages are) before its update, on its critical path (allreduce_ms).
  int replicas = 1;
  int graph_replicas = 1;
  LinkSpec replica_link;
  // SpecTrain's staleness rule (which stages' backward runs on predicted weights).
  Staleness staleness = Staleness::kPaper;
  // The update fused into the backward where it can be (stage_update_in_backward); the caller
  // turns it off for --no-fusion update and for --clip-grad-norm (clipping needs every gradient).
  bool update_in_backward = false;
};

// A bandwidth-optimal ring all-reduce of `bytes` across `replicas` over `link`, in ms:
// 2 (R-1)/R x bytes / bandwidth + 2 x latency (2 steps, each moving bytes / R); 0 for
// one replica or nothing to send; a bandwidth <= 0 counts as infinite.
double allreduce_ms(double bytes, int replicas, const LinkSpec& link);

// The automatic (or, with split_at / balance, the manual) plan. An infeasible memory budget is an
// error naming the stage, how far over it is, and what would fit.
//
// Cost of stage k (devices[k]): forward + backward + update of its nodes on devices[k], plus
// comm: for every activation it receives (once per receiving stage, skip connections included)
// bytes / bandwidth + latency for the activation and again for its gradient sent back (when it
// has one). Charging both directions of a transfer to the receiving stage makes a stage's cost a
// function of its own node range, so the dynamic program over (prefix, stage count) is exact:
// it returns the minimum bottleneck over all contiguous splits of the order, subject to memory.
// Predicted throughput: 1F1B batch / bottleneck; GPipe (the graph's batch is one micro-batch)
// M * batch / ((M + N - 1) * max_k(fwd_k + bwd_k + comm_k) + max_k update_k).
// With replicas (PartitionOptions::replicas = R > 1) a stage's cost is one replica's: compute and
// activation transfers on its share of the mini-batch, the update, plus allreduce_ms of the
// stage's param_bytes (the GPipe update term becomes max_k (update_k + allreduce_k)); batch is the
// whole mini-batch, so throughput counts every replica; memory is one device's, with the
// activations and workspace of the share.
Expected<Plan> partition(const Graph& g, const PartitionOptions& opts);

// The forward (and loss) nodes in the order `order` names (kAuto: kBranch).
std::vector<const Node*> forward_order(const Graph& g, NodeOrder order);

// Predicted memory of a stage for the schedule and weight mode, from its
// param_bytes, saved_bytes and workspace_bytes:
//   param_bytes * (2 [weights, gradients] + optimizer_state_copies + copies)
//   + saved_bytes * saved_copies + workspace_bytes + evaluator_bytes + shared_memory_bytes,
// saved_copies = in_flight (+ 1 when pipelined: N > 1 or GPipe), in_flight = N - k (1F1B) or M
// (GPipe); copies = 1 (SpecTrain's predicted weights), N - k - 1 (stash: one version per other
// mini-batch in flight), 0 (stale, GPipe, and a single 1F1B stage, which trains sequentially).
// With the update in the backward (s.update_in_backward) the gradients are transient: the
// "gradients" copy becomes transient_gradient_bytes (the most parameter bytes one position of the
// order brings: a layer's gradients, which live until its update right behind them).
//
// A stage that recomputes (s.recompute) keeps per pass only its inputs and one set of activations:
//   param_bytes * (2 + optimizer_state_copies + copies + recompute_weight_copies)
//   + recompute_input_bytes * saved_copies + saved_bytes + workspace_bytes + evaluator_bytes
//   + shared_memory_bytes.
int64_t stage_memory_bytes(const StagePlan& s, int num_stages, const PartitionOptions& opts);
// Whether stage k can recompute at all: --recompute is not none and it keeps more than one pass
// in flight (with one, its backward follows its forward and the activations are still there).
bool stage_may_recompute(int stage, int num_stages, const PartitionOptions& opts);
// The forward's weights a recomputing stage keeps per pass in flight: 1F1B SpecTrain predicts
// the forward's weights from master weights that have moved on by its backward, and stale reads
// master weights that have moved on too, so both keep the forward's version for each pass in
// flight (stale: plus the master copy beside the executor's buffers); stash already keeps it,
// GPipe's weights do not change within a mini-batch.
int stage_recompute_weight_copies(int stage, int num_stages, const PartitionOptions& opts);

// Messages the link that brings a shared weight to reader stage `reader` holds (the runtime sizes
// its weight links with it; the memory model charges the reader these slots plus its own buffer):
// GPipe 2 (one version per mini-batch); 1F1B forward N - reader + 1 (the owner serves the reader's
// warm-up forwards before it runs one), backward that or 3, whichever is more.
int shared_link_slots(int reader, int num_stages, bool backward, bool gpipe);
int stage_in_flight(int stage, int num_stages, const PartitionOptions& opts);
int stage_weight_copies(int stage, int num_stages, const PartitionOptions& opts);
// The passes over its parameters outside the graph that a stage makes for one mini-batch's
// forward and backward (runtime/pipeline/stage.cpp): predictions (SpecTrain: from the master and
// the optimizer's state into the working copy) and copies (weight stashing: the forward's weights
// out, then back in for the backward, after updates have moved the master on), and with its update
// (2BW: the master into the working copy, the version the next mini-batch's passes read beside the
// master). The master is updated in place and read where it is, so returning to it costs nothing.
// Not counted: 2BW-predict's predictions (some forwards of a mini-batch, by the schedule).
struct WeightPasses {
  int fwd_predict = 0, fwd_copy = 0, bwd_predict = 0, bwd_copy = 0, update_copy = 0;
};
WeightPasses stage_weight_passes(int stage, int num_stages, const PartitionOptions& opts);
// Parameter-sized gradient accumulators a stage holds: GPipe with several micro-batches sums their
// gradients into one buffer per parameter (runtime/pipeline/stage.cpp grad_acc_) beside the
// executor's own gradients; 0 otherwise.
int stage_gradient_accumulators(const PartitionOptions& opts);
// Whether stage k runs each update inside its backward, right behind its gradient's producer
// (runtime/exec/optimizer.h, interleave_updates), so that its gradients are transient values instead of
// a parameter-sized copy: opts.update_in_backward, one replica, no accumulation over micro-batches
// (GPipe with one), and a backward on the master weights: GPipe, stale weights, SpecTrain where the
// backward's staleness is 0, stash on the last stage (no pass in flight to stash for). A stage that
// owns or reads a weight shared across stages does not (layout_plan turns it off).
bool stage_update_in_backward(int stage, int num_stages, const PartitionOptions& opts);
// Copies of a stage's saved activations: one per mini-batch in flight, plus (pipelined runs,
// where the saved values wait in slots) the executor's own working copy.
int stage_saved_copies(int stage, int num_stages, const PartitionOptions& opts);
// Pipelined runs evaluate on stage 0's device with an evaluator that holds every parameter of
// the model: those bytes are charged to stage 0 (0 elsewhere, and for single-stage runs).
double stage_evaluator_param_bytes(int stage, int num_stages, const PartitionOptions& opts, double model_param_bytes);

}  // namespace pt
