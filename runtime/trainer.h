// Single-stage training: batches from a Dataset, forward + loss + backward + update through the
// Executor, as a stage set of one driven by the one training loop (runtime/stage_set.h); the
// training configuration and results every trainer shares; evaluation.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "importer/training.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "runtime/executor.h"
#include "runtime/lr_schedule.h"

namespace pt {

// Checkpoints of a training run (runtime/checkpoint.h). A pipelined run drains its pipeline at
// every checkpoint step (no pass in flight), so the file holds one weight version per parameter.
struct CheckpointOptions {
  std::string dir;         // where step-<k>.ckpt go (RUN/checkpoints); empty: none, not even on stop
  int64_t every = 0;       // write one every N steps and after the last; 0: only when stopped
  int keep = 3;            // the newest K are kept
  std::string resume;      // a .ckpt file, or a folder whose newest intact checkpoint is used; empty: fresh
  std::string model_hash;  // ImportedModel::hash: recorded, and a resume of another model is refused
};

struct TrainConfig {
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

struct EvalResult {
  int64_t samples = 0;
  double loss = 0;
  double accuracy = -1;  // -1 for regression
};

struct TrainResult {
  int64_t steps = 0;
  double first_loss = 0, last_loss = 0;
  double seconds = 0, samples_per_s = 0;
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

struct Curves;
// A resumed run's bookkeeping from its checkpoint: the result so far (step, first and last loss,
// the last scheduled validation), the metrics rows (moved out of c) and the curves drawn from them.
// `rows`: the metrics rows of steps 1..c->step (resume_metrics_rows: from `metrics_path`), which
// the new metrics file starts with; `tail` continues the checkpoint's.
void continue_from(Checkpoint* c, const std::string& metrics_path, TrainResult* r, EvalResult* last_val,
                   MetricsTail* tail, std::vector<std::string>* rows, Curves* curves);

// Forward-only evaluation of every sample of d in batches of x's first dimension (the last batch
// padded by wrapping around, padding not counted): gathers into x and y, calls forward(), scores
// `out` against the labels (cross-entropy: mean loss and accuracy; MSE: mean loss).
// A model with several data inputs: more[k] (null: not read) receives d.more[k] per batch.
Expected<EvalResult> evaluate_dataset(const Dataset& d, const TrainingGraph& tg, HostTensor* x, HostTensor* y,
                                      const HostTensor& out, const std::function<Status()>& forward,
                                      const std::vector<HostTensor*>& more = {});
// The data holds one array per data input of g (x, then d.more in graph order) of its dtype and
// sample size.
Status check_dataset_inputs(const Dataset& d, const Graph& g);

// What a checkpoint holds: every parameter and every piece of state (momentum, BatchNorm running
// statistics) of g, by name; the same for single-stage and pipelined runs of one model.
std::vector<const Value*> checkpoint_values(const Graph& g);
// The flags and data a checkpoint records and a resume must match (pipeline: recorded only).
CheckpointMeta make_checkpoint_meta(const Graph& g, const TrainingGraph& tg, const Dataset& train,
                                    const TrainConfig& cfg, int64_t samples_per_step, int64_t total_steps,
                                    const std::string& pipeline);
// Checks c against this run: flags, data size and order, tensor names, dtypes and dims.
Status check_checkpoint(const Checkpoint& c, const CheckpointMeta& now, const std::vector<const Value*>& values,
                        int64_t n, int64_t per_epoch, const std::string& path);
// ck.resume (a file, or a folder's newest intact checkpoint); skipped damaged files go to notices
// (and are printed unless quiet); *path is the file read.
Expected<Checkpoint> read_resume_checkpoint(const CheckpointOptions& ck, bool quiet, std::vector<std::string>* notices,
                                            std::string* path);

class Trainer {
 public:
  // g must be a training graph built by build_training_graph (tg).
  static Expected<std::unique_ptr<Trainer>> create(const Graph& g, const TrainingGraph& tg, DeviceKind device);
  static Expected<std::unique_ptr<Trainer>> create(const Graph& g, const TrainingGraph& tg, std::shared_ptr<Device> device);
  struct Options {
    // Each update runs right behind its gradient's producer (interleave_updates,
    // runtime/optimizer.h), so the gradients share the memory plan's arena instead of all living
    // to the end; such a trainer refuses TrainConfig::clip_grad_norm (it needs every gradient).
    bool update_in_backward = false;
    // The executor takes the parameters' initial data out of the graph instead of copying it
    // (ExecutorOptions::adopt; the CPU): the caller must not read Value::data of tg.params again.
    bool adopt_initial_values = false;
  };
  static Expected<std::unique_ptr<Trainer>> create(const Graph& g, const TrainingGraph& tg, std::shared_ptr<Device> device,
                                                   const Options& opts);
  bool update_in_backward() const { return update_in_backward_; }

  Expected<TrainResult> train(const Dataset& train, const Dataset* val, const TrainConfig& cfg);
  // Forward only over every sample (the last partial batch padded, padding not counted).
  Expected<EvalResult> evaluate(const Dataset& d);
  // The model output for one batch of inputs (dims of the model input), with the current weights.
  Expected<HostTensor> forward(const HostTensor& x);
  // Current values of the trainable parameters, by initializer name.
  std::map<std::string, HostTensor> parameters() const;
  // What export writes back: the parameters and the model's own state (BatchNorm running stats).
  std::map<std::string, HostTensor> trained_initializers() const;
  // The same, taken at the end of a run: the parameters move out of the executor's buffers (on the
  // CPU; copied from a device), so the export holds them once. The trainer cannot train afterwards.
  std::map<std::string, HostTensor> take_trained_initializers();
  int64_t batch_size() const { return batch_; }
  const Executor& executor() const { return *ex_; }  // memory accounting

 private:
  Trainer(const Graph& g, const TrainingGraph& tg) : g_(g), tg_(tg) {}
  // The step random ops (Dropout) draw their masks for; -1: evaluation (identity).
  Status set_step(int64_t step);
  // The values a checkpoint holds: parameters and state (momentum, BatchNorm running stats).
  std::vector<const Value*> persistent_values() const;
  int64_t total_steps(const Dataset& train, const TrainConfig& cfg) const;
  // The flags and data a checkpoint of this run records and a resume must match.
  CheckpointMeta checkpoint_meta(const Dataset& train, const TrainConfig& cfg) const;
  // Checks c against this run (flags, data size, tensor names, dtypes and dims), then copies its
  // tensors into the executor's buffers; nothing is copied when a check fails.
  Status restore(const Checkpoint& c, const CheckpointMeta& now, int64_t n, int64_t per_epoch, const std::string& path);
  const Graph& g_;
  const TrainingGraph& tg_;
  std::unique_ptr<Executor> ex_;
  Status check_inputs(const Dataset& d) const;
  Value* input_ = nullptr;
  std::vector<Value*> more_inputs_;  // the further data inputs of a model with several
  int64_t batch_ = 0;
  bool update_in_backward_ = false;
};

}  // namespace pt
