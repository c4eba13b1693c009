// The what-if simulator: an event simulation of pipeline schedules over a Plan's stage times
// (asynchronous 1F1B, GPipe with M micro-batches) and of data parallelism with a ring all-reduce.
#pragma once

#include <string>
#include <vector>

#include "partitioner/plan.h"
#include "partitioner/schedule.h"

namespace pt {

// One busy interval. Compute events (kForward, kBackward, kUpdate) run on `stage`; kSend is the
// activation transfer from `stage` to stage + 1, kRecv the gradient transfer from stage + 1 back
// to `stage` (both on the link between them); in data parallelism kSend is `stage`'s share of the
// ring all-reduce; kAllReduce is a replicated stage's all-reduce of its gradients across its
// replicas (Plan::replicas > 1), on the link the replicas share. micro_batch is 0 except under
// GPipe.
struct SimEvent {
  int stage = 0;
  int mini_batch = 0;
  int micro_batch = 0;
  // kInputGrad, kWeightGrad: the two parts of a split backward (zero-bubble schedules).
  // kGap: the runtime's own time after a pass (StagePlan::pass_gap_ms), idle for the bubble.
  enum Kind { kForward, kBackward, kUpdate, kSend, kRecv, kAllReduce, kInputGrad, kWeightGrad, kGap } kind = kForward;
  double start_ms = 0, end_ms = 0;
  double work_ms = 0;  // compute: its time alone (end - start, unless it shared cores with others)
};

struct SimResult {
  std::vector<SimEvent> events;
  double makespan_ms = 0;
  double samples_per_s = 0;       // steady state
  // Idle / total across stages; stages sharing their cores: the cores' idle time / their time (a
  // stage's idle time there is not lost: the others run faster meanwhile).
  double bubble_fraction = 0;
  std::vector<int64_t> peak_memory_bytes;  // per stage
};

// Simulates `mini_batches` mini-batches of the plan's schedule. Compute times are the stages'
// fwd_ms and bwd_ms per pass (one run of the graph: a micro-batch of plan.batch_size samples) and
// update_ms per mini-batch of M passes; transfers take bytes / link.bandwidth + link.latency_s
// (per pass) on their own link (overlapping compute; a link bandwidth <= 0 counts as infinite).
// Stages sharing their node's cores (plan.device_share > 1) run as devices of their own, `share`
// times slower than alone (the plan's times include it), or with plan.processor_sharing share them:
// while r of a node's D devices compute, each runs at min(1, (D / share) / r) of its speed alone.
// Either way the bubble is then the cores' idle time. Asynchronous 1F1B: stage k runs
// N - k forwards before its first backward, then alternates, updating after every backward. GPipe: all M micro-batch
// forwards, all backwards, then the update (a flush). samples_per_s is measured over the later
// half of the mini-batches; peak memory is the plan's memory_bytes corrected by the simulated
// in-flight activations (saved_bytes each).
// Replicas (plan.replicas > 1): the replicas run alike, so one replica's pipeline is simulated
// (the stages' times are already one replica's) with each stage's all-reduce (allreduce_ms, on a
// link of its own) between its last backward of a mini-batch and its update; samples_per_s counts
// the whole mini-batch (batch_size x graph_replicas), bubble and memory are per device.
// The schedule runs as the plan's program (plan_schedule): each stage's actions in its program's
// order, I taking bwd_ms - wgrad_ms and W wgrad_ms.
SimResult simulate(const Plan& plan, int mini_batches);
// The program the plan's stages run: plan.program, or make_schedule of its schedule and weights.
ScheduleIR plan_schedule(const Plan& plan);
// The built-in program for the plan's schedule, fitted to its stage times: ZB-H1's order for the
// stages' F, I and W times or for unit times, whichever the dry run finds faster (other schedules
// have one order). layout_plan stores it as the plan's program.
ScheduleIR fitted_schedule(const Plan& plan);
// The dry run before launch: simulate() of program `ir` over the plan's times, or an
// invalid-input error when it deadlocks, naming each stage's blocked action and what it waits
// for, with every stage's actions up to there.
Expected<SimResult> dry_run(const Plan& plan, const ScheduleIR& ir, int mini_batches);

// Data parallelism: each of `devices` replicas runs the whole single-stage plan on batch/devices
// samples (compute scales by 1/devices), then a ring all-reduce of the gradients taking
// 2 (N-1)/N param_bytes / bandwidth + 2 (N-1) latency, then the update. Simulates 8 mini-batches.
// (The what-if's data-parallel rows are 1 x D layouts through partition() and simulate() instead,
// partitioner/layout.h, which keep each kernel's launch overhead whole on every replica; this
// model divides all of the compute by D and equals them for devices without launch overhead.)
SimResult simulate_data_parallel(const Plan& single_stage_plan, int devices, const LinkSpec& link);

struct WhatIfRow {
  std::string scheme;             // "1f1b", "gpipe (M=4)", "hybrid 2x2", "data-parallel 1x4"
  int devices = 0;
  double samples_per_s = 0;
  double bubble_fraction = 0;
  int64_t peak_memory_bytes = 0;
  bool chosen = false;            // marked "<- chosen" (the layout --replicas auto picks)
};

// The what-if table (--whatif): one line per row, with the speedup over the first one-device row.
std::string what_if_table(const std::vector<WhatIfRow>& rows);

// Chrome trace event format (Perfetto, chrome://tracing) of a simulated or measured schedule.
std::string trace_json(const std::vector<SimEvent>& events, const Plan& plan);

}  // namespace pt
