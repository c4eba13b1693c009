// The Plan handed from the partitioner to the runtime: contiguous stages of the training graph,
// each with its nodes (forward, loss, backward, update), parameters, boundary tensors and the cost
// model's prediction; plus the pipeline-level prediction.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "importer/ir.h"
#include "partitioner/device_spec.h"
#include "partitioner/schedule.h"
#include "partitioner/stage_layout.h"

namespace pt {

// SpecTrain's version differences: kPaper s_fwd(k) = floor(k/2) + N-k-1, s_bwd(k) = floor(k/2)
// (the official implementation); kExact the 1F1B gaps s_fwd(k) = N-k-1, s_bwd(k) = 0.
enum class Staleness { kPaper, kExact };
const char* staleness_name(Staleness s);
// The version difference SpecTrain predicts over for `stage` of `num_stages` in one pass.
int spectrain_staleness(int stage, int num_stages, bool backward, Staleness mode);
// --recompute: activation recomputation. kStage: every stage that keeps more than one pass in
// flight, and would take less memory so, keeps only its inputs per pass and reruns its forward
// before each backward; kAuto: only the stages that would not fit their device's memory otherwise. A stage with one pass in flight
// (a single 1F1B stage, the last 1F1B stage, GPipe with one micro-batch) is never recomputed: its
// backward follows its forward with the activations still in the executor, nothing to save.
enum class Recompute { kNone, kStage, kAuto };
const char* recompute_name(Recompute r);

struct StagePlan {
  int index = 0;
  DeviceSpec device;
  std::vector<const Node*> nodes;        // every node of the stage, in execution order
  std::vector<const Node*> forward_nodes;  // the forward (and loss) nodes that define the stage
  std::vector<const Value*> params;
  // From the plan's StageLayout (layout_plan): activations from earlier stages (gradients go back
  // up) and to later stages, each value once, ascending value id.
  std::vector<const Value*> recv;
  std::vector<const Value*> send;
  // Nodes whose kernel on this stage's device is the CPU's through the host fallback
  // (runs_on_host, kernels/registry.h): each call copies to the host and back and synchronises.
  std::vector<const Node*> host_fallback;
  int64_t param_count = 0;
  int64_t param_bytes = 0;
  double fwd_ms = 0, bwd_ms = 0, update_ms = 0;
  // The parts of fwd_ms and bwd_ms that write weight versions outside the graph (SpecTrain's
  // predictions, stash copies: stage_weight_passes), on the whole weights also with replicas.
  double fwd_weights_ms = 0, bwd_weights_ms = 0;
  // The part of bwd_ms in the backward's weight-gradient part W (importer/training.h,
  // weight_gradient_nodes), by the cost model's share of those nodes: what a zero-bubble schedule
  // can defer (layout_plan sets it).
  double wgrad_ms = 0;
  // The runtime's own time on the stage's device after each of its actions (claims, slot
  // selections, bookkeeping between passes): not work, the device idles. 0 in a plan; the run's
  // re-simulation sets what it measured (tools/run_training.cpp), on devices that are the stage's own.
  double pass_gap_ms = 0;
  // Transfers are charged to the receiving stage: receiving its `recv` activations and sending
  // their gradients back, one message each, once per receiving stage (see partition.h).
  double comm_ms = 0;
  int64_t send_bytes = 0, recv_bytes = 0;  // per mini-batch, activations only; send_bytes counts
                                           // a value once per stage that receives it
  int64_t grad_send_bytes = 0;           // gradients of `recv` sent back per mini-batch
  int64_t memory_bytes = 0;              // predicted peak
  // The parts of memory_bytes: param_bytes * (2 + optimizer copies + weight_copies)
  // + saved_bytes * (in_flight + 1 when pipelined) + workspace_bytes + evaluator_bytes
  // + shared_memory_bytes (partition.h, stage_memory_bytes).
  int64_t saved_bytes = 0;               // activations kept for backward, per mini-batch
  int64_t workspace_bytes = 0;           // largest transient need of one node
  int64_t evaluator_bytes = 0;           // pipelined stage 0: the evaluator's copy of every parameter
  // Weights shared with an earlier stage (their owner; from the layout): the versions received per mini-batch (one
  // per pass that reads them: 1F1B forward and backward, GPipe once), and the memory of the
  // received copies (the stage's own buffer plus its weight link's slots); in memory_bytes too.
  // Their gradients go back with grad_send_bytes.
  std::vector<const Value*> shared_params;
  int64_t shared_recv_bytes = 0;
  int64_t shared_memory_bytes = 0;
  int in_flight = 1;                     // mini-batches (GPipe: micro-batches) whose activations are kept
  int weight_copies = 0;                 // SpecTrain's predicted copy, or stashed versions
  int gradient_accumulators = 0;  // parameter-sized gradient sums (GPipe with several micro-batches)
  // The update runs inside the backward, each right behind its gradient's producer
  // (partition.h, stage_update_in_backward): the gradients are transient values, not a
  // parameter-sized copy (memory_bytes counts transient_gradient_bytes instead of param_bytes).
  bool update_in_backward = false;
  int64_t transient_gradient_bytes = 0;  // the gradients that live at once then (a layer's)
  // Activation recomputation (--recompute): the stage keeps per pass in flight only its inputs
  // (recompute_input_bytes: activations received, data input and labels) plus one set of its
  // activations (saved_bytes) in the executor; the forward reruns before each backward (its time,
  // recompute_ms, is part of bwd_ms). 1F1B SpecTrain and stale also keep the forward's weights per
  // pass in flight (recompute_weight_copies, counted in weight_copies too).
  bool recompute = false;
  int64_t recompute_input_bytes = 0;
  int recompute_weight_copies = 0;
  double recompute_ms = 0;
  // With replicas (Plan::replicas > 1): the ring all-reduce of the gradients of this stage's own
  // parameters (param_bytes) across its replicas, per mini-batch (partition.h, allreduce_ms); 0
  // with one replica. fwd_ms, bwd_ms, comm_ms and the activation bytes above are then one
  // replica's, on its share of the mini-batch.
  double allreduce_ms = 0;
  double stage_ms() const { return fwd_ms + bwd_ms + update_ms + comm_ms + allreduce_ms; }
  int node = 0;                          // the node (machine) this stage runs on
  bool cut_crosses_nodes = false;        // the cut in front of this stage joins two nodes
  LinkSpec link_in;                      // the link of that cut (what comm_ms was charged with)
  // Measured after training (ms per pass, as fwd_ms and bwd_ms: a mini-batch's M micro-batches
  // take M of them); < 0 when not measured. With update_in_backward the backward includes the
  // updates (they run inside it).
  double measured_fwd_ms = -1, measured_bwd_ms = -1;
  // Measured updates per mini-batch where they run after the backward (0 where the stage updates
  // in its backward: measured_bwd_ms holds them then).
  double measured_update_ms = 0;
  // Stages sharing their cores (Plan::device_share > 1): the same sum as measured_fwd_ms +
  // measured_bwd_ms + measured_update_ms in the stage thread's CPU time, what the stage computed
  // without the time its core served the others (< 0: not measured; a stage of several threads).
  double measured_cpu_ms = -1;
  // Measured after training where the cut in front of this stage crosses nodes (cut_crosses_nodes):
  // the mean time of one message across it, from its sending to the receiver holding it, over the
  // messages their receiver was already waiting for: activations (this stage received them) and
  // their gradients (the stage before received them); < 0: none such; measured_cut_messages:
  // how many were timed, both ways together.
  double measured_cut_fwd_us = -1, measured_cut_bwd_us = -1;
  double measured_cut_fwd_median_us = -1, measured_cut_bwd_median_us = -1;  // their medians (within 10 %)
  int64_t measured_cut_messages = 0;
  // Measured after training: the bytes the stage's buffers took (executor buffers and arena,
  // master / saved / stashed copies); < 0 when not measured.
  int64_t measured_memory_bytes = -1;
};

// One way to use a device count: `stages` pipeline stages times `replicas` data-parallel copies
// (partitioner/layout.h), as the cost model and the simulator predict it.
struct LayoutOption {
  int stages = 1, replicas = 1;
  bool fits = false;                     // a plan exists (the model splits that far, memory fits)
  std::string why_not;                   // when it does not: why (one line)
  double samples_per_s = 0;              // simulated steady state, all replicas together
  double bubble_fraction = 0;
  int64_t peak_memory_bytes = 0;         // the largest device's
  double allreduce_ms = 0;               // the slowest stage's all-reduce per mini-batch
  bool chosen = false;                   // the fastest that fits
};

struct Plan {
  std::string model;
  Schedule schedule = Schedule::k1F1B;
  WeightMode weights = WeightMode::kSpecTrain;
  Recompute recompute = Recompute::kNone;  // what was asked (StagePlan::recompute: what each stage does)
  int micro_batches = 1;
  // Interleaved stages (Schedule::kInterleaved): virtual stages per device; stages holds
  // devices x virtual_stages of them, stage k on device k % devices (partition.h). 1 otherwise.
  int virtual_stages = 1;
  // A schedule file's program (--schedule-file); null: make_schedule(schedule, weights, ...).
  std::shared_ptr<const ScheduleIR> program;
  int64_t batch_size = 0;                // the graph's batch (one replica's share when graph_replicas > 1)
  // Data-parallel copies of the pipeline (--replicas): each runs every stage on its share of the
  // mini-batch and each stage all-reduces its gradients over replica_link before its update.
  // graph_replicas: the graph holds 1/graph_replicas of the mini-batch (partition.h).
  int replicas = 1;
  int graph_replicas = 1;
  LinkSpec replica_link;                 // the link the replicas of a stage all-reduce over
  // The device count's layouts the plan was chosen from (--replicas auto, --whatif); empty when
  // none was evaluated. Reports show them and mark the chosen one.
  std::vector<LayoutOption> layouts;
  LinkSpec link;                         // between stages on one node
  int num_nodes = 1;                     // nodes the stages run on (see StagePlan::node)
  std::vector<StagePlan> stages;
  // Who owns, keeps, reads and sends what (stage_layout.h): made by partition(),
  // remade by layout_plan() after a hand edit of the stages' node lists. The
  // runtime trains from it; layout_status is why a plan has none (a plan training would refuse).
  StageLayout layout;
  Status layout_status;
  bool manual = false;                   // from --split-at / --balance
  std::string order;                     // node order the stages cut: "graph" or "branch"
                                         // (partition.h); "graph" for single-stage plans
  double bottleneck_ms = 0;
  double imbalance = 0;                  // max stage time / mean stage time
  double predicted_samples_per_s = 0;
  double single_device_samples_per_s = 0;  // the whole model on stage 0's device (alone on it)
  // Stages sharing their device's cores (DeviceSpec::share of stage 0's device): each stage's times
  // are this many times its times alone. 1: every stage has its device to itself.
  double device_share = 1;
  // How the dry run takes shared cores (device_share > 1). false (the plan's): each stage a device
  // of its own, share times slower than alone; its idle time is then the cores'. true (the
  // re-simulation with the CPU times a run measured): a node's stages share its cores (processor
  // sharing). Sharing predicted the plans' throughput worse (docs/performance.md 2026-12-07): the
  // cost model's times alone are low for stages running beside others, and short passes lose time
  // to waking on busy cores, which `share` times slower happens to cover.
  bool processor_sharing = false;
  bool calibrated = false;               // stage times from a calibrated cost model
  double measured_samples_per_s = 0;     // after training: the run's throughput (0: not trained)
  double measured_steady_samples_per_s = 0;  // ... in its steady state (TrainResult::steady_samples_per_s)
  // Memory of the process beside the stages (set by the CLI): its resident set before import
  // (binary, libraries) and the data sets it holds; after training, its peak resident set.
  int64_t baseline_bytes = 0, data_bytes = 0;
  int64_t measured_peak_rss_bytes = -1;
};

}  // namespace pt
