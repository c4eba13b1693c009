// The bookkeeping every training loop shares (one stage and pipelines): the step count, the
// learning-rate schedule, resume, checkpoint cadence and contents, divergence, validation
// cadence, metrics rows, curves, progress lines and stop requests. The trainers drive their
// stages and call this at each step, so that a run gives the same rows, curves and checkpoints
// whatever runs it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/report/curves.h"
#include "runtime/report/progress.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/loop/train_config.h"

namespace pt {

// The steady state of a run of the steps [start, total) (0-based): the steps from this one on, after
// the first fifth (the first never). TrainResult::steady_samples_per_s and the pipeline stages'
// figures (StageStats) both cover it.
inline int64_t steady_state_from(int64_t start, int64_t total) {
  return start + std::max<int64_t>(1, (total - start) / 5);
}

class TrainingLoop {
 public:
  using clock = std::chrono::steady_clock;
  // cfg must outlive the loop.
  explicit TrainingLoop(const TrainConfig& cfg);

  // The run's steps for n samples in mini-batches of `batch` (the last partial batch of an epoch is
  // dropped). Errors: no data, an epoch count that overflows, a schedule that does not fit.
  Status plan(int64_t n, int64_t batch);
  int64_t per_epoch() const { return per_epoch_; }
  int64_t total() const { return total_; }
  int64_t start() const { return start_; }  // steps already done (by the checkpoint resumed from)
  const LrSchedule& schedule() const { return sched_; }

  // Resume (cfg.checkpoint.resume): the checkpoint, refused when past this run's last step.
  Expected<Checkpoint> read_resume(std::string* path);
  // Takes the run so far from c (its step, losses, last validation, metrics rows and curves).
  void continue_from(Checkpoint* c);
  // A process that did not read the checkpoint (an MPI follower) starts at the leader's step.
  void start_at(int64_t step) { start_ = step; }
  // "resumed: PATH (step K of N[; written by a run of A, continuing on B])" unless quiet; the
  // clause when written_by is set and differs from now.
  void announce_resume(const std::string& path, const std::string& written_by, const std::string& now) const;
  // A resumed run with no step left: nothing is trained or written (the finished run's files stand).
  bool nothing_left() const { return start_ == total_ && !cfg_.checkpoint.resume.empty(); }
  // A resume with nothing left to train: the run folder keeps the finished run's metrics.csv and
  // curves.svg, or, resumed into another folder (--resume=PATH --out NEW), gets them from the
  // checkpoint's rows (which leave out the validation after the last step).
  Status finish_without_steps();

  // The end (exclusive, 0-based) of the segment that starts at `first`: the next checkpoint step
  // (cfg.checkpoint.every with a checkpoint folder) or the run's end.
  int64_t segment_end_after(int64_t first) const;
  // Whether a checkpoint is written after `step`: at every cfg.checkpoint.every steps, after the
  // last, and where a stop request ends the run.
  bool checkpoint_due(int64_t step, bool stop_here) const;
  // A checkpoint after `step` with the loop's part filled in (meta, position, losses, the last
  // scheduled validation, metrics rows); the trainer adds the order, RNG, plan and tensors.
  Checkpoint checkpoint_at(int64_t step, const CheckpointMeta& meta) const;
  // Writes c to cfg.checkpoint.dir (keeping the newest cfg.checkpoint.keep).
  Status save(const Checkpoint& c);

  // Opens metrics.csv at `path` (empty: none, as on MPI followers) with the resumed rows, and
  // starts the clock and the progress lines.
  Status begin(const std::string& path);
  clock::time_point t0() const { return t0_; }
  // Validation after `step` (with a validation set): at epoch ends, every cfg.eval_every steps and
  // after the last step.
  bool eval_due(int64_t step) const;
  // The mean loss of `step`: a non-finite one ends the run (kDiverged).
  Status record_loss(int64_t step, double loss);
  // A validation after `step`: the result, the curves (and curves.svg).
  Status record_eval(int64_t step, const EvalResult& ev);
  // The end of `step`: its metrics row (with ev when ev.samples > 0), the checkpoint's rows, the
  // progress line.
  Status end_step(int64_t step, double loss, const EvalResult& ev);
  // A stop request (cfg.stop) before the last step.
  bool stop_requested(int64_t step) const;
  // The time since begin() into result().seconds.
  void stop_clock();
  // At a run's end: the throughput and curves.svg; then add_scalar as needed, then close().
  Status finish();
  Status add_scalar(const std::string& tag, int64_t step, double value) { return csv_.add_scalar(tag, step, value); }
  Status close() { return csv_.close(); }

  TrainResult& result() { return r_; }

 private:
  const TrainConfig& cfg_;
  int64_t batch_ = 0, per_epoch_ = 1, total_ = 0, start_ = 0, log_every_ = 1;
  LrSchedule sched_;
  TrainResult r_;
  // What checkpoints carry: the metrics.csv rows (as a MetricsTail; the rows themselves are in
  // metrics.csv, and in memory only between a resume and the file's opening) and the last
  // validation as a run to any later total would have them (without the extra validation after
  // the last step of this run).
  std::vector<std::string> rows_;
  MetricsTail tail_;
  EvalResult epoch_val_;
  Curves curves_;
  MetricsFile csv_;
  std::optional<Progress> progress_;
  // The loader's rate for the progress line; warns once when the stages wait for data.
  std::string loader_note(int64_t step, double elapsed);
  bool warned_slow_loader_ = false;
  clock::time_point t0_;
  // The steady state's throughput (TrainResult::steady_samples_per_s), summed as the steps end (no
  // per-step record: memory does not grow with --steps): the last step's end (seconds since
  // begin()), the seconds and steps counted.
  double last_end_ = 0, steady_s_ = 0;
  int64_t steady_steps_ = 0;
};

}  // namespace pt
