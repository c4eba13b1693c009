// What a training run is configured with and what it gives back, for every stage set the one
// training loop drives (one stage, a pipeline, ranks): the configuration, checkpoint options and
// the result.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/source.h"
#include "runtime/loop/lr_schedule.h"
#include "runtime/report/progress.h"

namespace pt {

// Checkpoints of a training run (runtime/checkpoint/checkpoint.h). A pipelined run drains its pipeline at
// every checkpoint step (no pass in flight), so the file holds one weight version per parameter.
struct CheckpointOptions {
  std::string dir;         // where step-<k>.ckpt go (RUN/checkpoints); empty: none, not even on stop
  int64_t every = 0;       // write one every N steps and after the last; 0: only when stopped
  int keep = 3;            // the newest K are kept
  std::string resume;      // a .ckpt file, or a folder whose newest intact checkpoint is used; empty: fresh
  std::string model_hash;  // ImportedModel::hash: recorded, and a resume of another model is refused
};

// The batch of a step as the run executes it: samples per weight update over every replica, the
// passes each replica splits its share into (GPipe's micro-batches; 1F1B runs one) and the
// replicas. The training graph holds one pass: its batch dimension is pass().
struct StepBatch {
  int64_t mini = 0;  // 0: not given (a library caller's graph decides: its batch x micro x replicas)
  int micro = 1;
  int replicas = 1;
  int64_t pass() const { return mini / (int64_t{micro} * replicas); }
};

struct TrainConfig {
  // The step's batch (the command line always gives it); a trainer refuses one whose pass is not
  // its graph's batch dimension.
  StepBatch batch;
  int64_t epochs = 1;
  int64_t steps = 0;        // total steps; 0: epochs * steps_per_epoch
  float lr = 0.05f;         // the base rate (LrSchedule::base)
  // The schedule's shape (kind, warm-up, decay); its base and total come from lr and the run.
  LrSchedule lr_schedule;
  // --clip-grad-norm: scale the gradients by min(1, X / (norm + 1e-6)) before each update (the
  // global norm over every parameter; one stage and GPipe: of the whole mini-batch; 1F1B: each
  // stage its own, as no update sees every stage's gradient of one mini-batch). 0: off.
  double clip_grad_norm = 0;
  int64_t eval_every = 0;   // also validate every N steps (besides every epoch end); 0: epoch ends only
  uint64_t seed = 0;
  bool shuffle = true;      // reshuffle the training order every epoch (seeded)
  int64_t log_every = 0;    // 0: about 10 lines per run
  bool quiet = false;
  // A streamed training set's loader (runtime/data/source.h): its rate on the progress lines and a
  // warning when the stages wait for it. Null: the data is in memory.
  LoaderStats* loader = nullptr;
  std::string metrics_path;  // metrics.csv; written as <path>.partial, renamed when done
  std::string curves_path;   // curves.svg, refreshed at every validation and at the end
  std::string tensorboard_dir;  // --tensorboard: event files of the metrics rows (empty: none)
  std::string title;         // of the curves
  CheckpointOptions checkpoint;
  // Polled after every mini-batch: when set, the loop writes a checkpoint (if checkpoint.dir is
  // set) and returns early with TrainResult::interrupted (the CLI sets it from SIGINT).
  const std::atomic<bool>* stop = nullptr;
};

// cfg.lr_schedule with its base rate and total steps filled in.
inline LrSchedule schedule_of(const TrainConfig& cfg, int64_t total_steps) {
  LrSchedule s = cfg.lr_schedule;
  s.base = cfg.lr;
  s.total = total_steps;
  return s;
}


struct TrainResult {
  int64_t steps = 0;
  double first_loss = 0, last_loss = 0;
  double seconds = 0, samples_per_s = 0;
  // The steady state: samples/s between the ends of the steps after the first fifth of the run
  // (the warm-up: first kernel calls, the pipeline filling), leaving out the steps that ended with
  // a validation. What the cost model's prediction is set against. 0 with fewer than 4 steps.
  double steady_samples_per_s = 0;
  EvalResult val;  // samples == 0 when there is no validation set
  int64_t resumed_from = 0;     // the step of the checkpoint the run continued from; 0: fresh
  bool interrupted = false;     // stopped by TrainConfig::stop before the last step
  std::string last_checkpoint;  // the newest checkpoint this run wrote; empty: none
  std::vector<std::string> notices;  // damaged checkpoints skipped on resume, ...
  // Measured compute per mini-batch, from the run's own last steps (timed node by node, same
  // kernels and arithmetic): forward and loss nodes, backward nodes, update nodes, in ms. Zero
  // when nothing was timed (pipelined runs report per stage in StageStats instead).
  double fwd_ms = 0, bwd_ms = 0, update_ms = 0;
};

}  // namespace pt
