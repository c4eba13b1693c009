// The shared bookkeeping of a training run (runtime/loop/training_loop.h).
#include "runtime/loop/training_loop.h"

#include "runtime/loop/run_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

namespace pt {

TrainingLoop::TrainingLoop(const TrainConfig& cfg) : cfg_(cfg) { curves_.title = cfg.title; }

Status TrainingLoop::plan(int64_t n, int64_t batch) {
  batch_ = batch;
  per_epoch_ = std::max<int64_t>(1, n / batch);  // the last partial batch is dropped
  if (cfg_.steps <= 0 && cfg_.epochs > std::numeric_limits<int64_t>::max() / per_epoch_)
    return invalid_input("--epochs " + std::to_string(cfg_.epochs) + ": that many epochs of " + std::to_string(per_epoch_) +
                         " steps overflow a 64-bit step count");
  total_ = cfg_.steps > 0 ? cfg_.steps : cfg_.epochs * per_epoch_;
  log_every_ = cfg_.log_every > 0 ? cfg_.log_every : std::max<int64_t>(1, total_ / 10);
  sched_ = schedule_of(cfg_, total_);
  return sched_.validate();
}

Expected<Checkpoint> TrainingLoop::read_resume(std::string* path) {
  ASSIGN_OR_RETURN(Checkpoint c, read_resume_checkpoint(cfg_.checkpoint, cfg_.quiet, &r_.notices, path));
  if (c.step > total_)
    return invalid_input(*path + ": the checkpoint is at step " + std::to_string(c.step) + ", past the " +
                         std::to_string(total_) + " steps of this run (--steps and --epochs are totals)");
  return c;
}

void TrainingLoop::continue_from(Checkpoint* c) {
  start_ = c->step;
  pt::continue_from(c, cfg_.metrics_path, &r_, &epoch_val_, &tail_, &rows_, &curves_);
}

void TrainingLoop::announce_resume(const std::string& path, const std::string& written_by, const std::string& now) const {
  if (cfg_.quiet) return;
  std::printf("resumed: %s (step %lld of %lld", path.c_str(), static_cast<long long>(start_), static_cast<long long>(total_));
  if (!written_by.empty() && written_by != now)
    std::printf("; written by a run of %s, continuing on %s", written_by.c_str(), now.c_str());
  std::printf(")\n");
}

int64_t TrainingLoop::segment_end_after(int64_t first) const {
  const CheckpointOptions& ck = cfg_.checkpoint;
  const bool checkpoints = !ck.dir.empty() && ck.every > 0;
  return checkpoints ? std::min(total_, (first / ck.every + 1) * ck.every) : total_;
}

bool TrainingLoop::checkpoint_due(int64_t step, bool stop_here) const {
  const CheckpointOptions& ck = cfg_.checkpoint;
  return !ck.dir.empty() && (stop_here || (ck.every > 0 && (step % ck.every == 0 || step == total_)));
}

Checkpoint TrainingLoop::checkpoint_at(int64_t step, const CheckpointMeta& meta) const {
  Checkpoint c;
  c.meta = meta;
  c.step = step;
  c.epoch = step / per_epoch_;
  c.position = step % per_epoch_;
  c.first_loss = r_.first_loss;
  c.last_loss = r_.last_loss;
  c.val_samples = epoch_val_.samples;
  c.val_loss = epoch_val_.loss;
  c.val_accuracy = epoch_val_.accuracy;
  c.metrics = tail_;
  return c;
}

Status TrainingLoop::save(const Checkpoint& c) {
  ASSIGN_OR_RETURN(r_.last_checkpoint, save_checkpoint(cfg_.checkpoint.dir, cfg_.checkpoint.keep, c));
  return Status::ok();
}

Status TrainingLoop::finish_without_steps() {
  std::error_code ec;
  if (cfg_.metrics_path.empty() || std::filesystem::exists(cfg_.metrics_path, ec)) return Status::ok();
  RETURN_IF_ERROR(csv_.open(cfg_.metrics_path, rows_, ""));
  std::vector<std::string>().swap(rows_);
  if (!cfg_.curves_path.empty()) RETURN_IF_ERROR(write_curves_svg(curves_, cfg_.curves_path));
  return csv_.close();
}

Status TrainingLoop::begin(const std::string& path) {
  RETURN_IF_ERROR(csv_.open(path, rows_, cfg_.tensorboard_dir));
  std::vector<std::string>().swap(rows_);  // the file holds them now
  t0_ = clock::now();
  progress_.emplace(cfg_.quiet, total_, log_every_, batch_);
  return Status::ok();
}

bool TrainingLoop::eval_due(int64_t step) const {
  const int64_t s0 = step - 1;
  return s0 % per_epoch_ == per_epoch_ - 1 || step == total_ || (cfg_.eval_every > 0 && step % cfg_.eval_every == 0);
}

Status TrainingLoop::record_loss(int64_t step, double l) {
  if (!std::isfinite(l))
    return Status(StatusCode::kDiverged, "training diverged at step " + std::to_string(step) + ": loss is " + std::to_string(l) +
                                             " (try a smaller --lr)");
  if (step == 1) r_.first_loss = l;
  curves_.add_train_loss(static_cast<double>(step), l);
  r_.last_loss = l;
  return Status::ok();
}

Status TrainingLoop::record_eval(int64_t step, const EvalResult& ev) {
  r_.val = ev;
  curves_.add_validation(static_cast<double>(step), ev.loss, ev.accuracy);
  if (!cfg_.curves_path.empty()) RETURN_IF_ERROR(write_curves_svg(curves_, cfg_.curves_path));
  return Status::ok();
}

Status TrainingLoop::end_step(int64_t step, double l, const EvalResult& ev) {
  const int64_t epoch = (step - 1) / per_epoch_;  // 0-based
  const int64_t in_epoch = (step - 1) % per_epoch_;
  const bool scheduled_eval = cfg_.eval_every > 0 && step % cfg_.eval_every == 0;
  const double elapsed = std::chrono::duration<double>(clock::now() - t0_).count();
  // The steady state: the steps after the first fifth of this run's (the first never), those that
  // ended without a validation.
  if (step - 1 >= steady_state_from(start_, total_) && ev.samples == 0) {
    steady_s_ += elapsed - last_end_;
    ++steady_steps_;
  }
  last_end_ = elapsed;
  const double sps = elapsed > 0 ? static_cast<double>((step - start_) * batch_) / elapsed : 0;
  const double lr_now = sched_.at(step);
  const EvalResult* shown = ev.samples ? &ev : nullptr;
  RETURN_IF_ERROR(csv_.add(metrics_row(step, epoch + 1, l, lr_now, sps, shown), ev.samples > 0));
  // The rows a checkpoint keeps leave out the validation of a run's last step when it is not at an
  // epoch end or an --eval-every step, so that a resumed run's rows equal an uninterrupted one's.
  const bool run_end_only = ev.samples && in_epoch != per_epoch_ - 1 && !scheduled_eval;
  if (ev.samples && !run_end_only) epoch_val_ = ev;
  tail_.add(metrics_row(step, epoch + 1, l, lr_now, sps, run_end_only ? nullptr : shown));
  const double eta = elapsed / std::max(static_cast<double>(step - start_) / (total_ - start_), 1e-9) - elapsed;
  progress_->step(step, epoch + 1, l, sps, eta, shown, loader_note(step, elapsed));
  r_.steps = step;
  return Status::ok();
}

std::string TrainingLoop::loader_note(int64_t step, double elapsed) {
  LoaderStats* ls = cfg_.loader;
  if (!ls || elapsed <= 0) return "";
  const double read_s = static_cast<double>(ls->read_ns.load()) * 1e-9;
  const double waited = static_cast<double>(ls->waited_ns.load()) * 1e-9 / elapsed;
  const double rate = read_s > 0 ? static_cast<double>(ls->samples.load()) / read_s : 0;
  // After a few steps (the first batches wait for the pipeline to fill): once, if the stages
  // spent more than 5 % of the run waiting for data.
  if (!warned_slow_loader_ && step - start_ >= 20 && waited > 0.05) {
    warned_slow_loader_ = true;
    std::fprintf(stderr,
                 "warning: the stages waited for data %.0f%% of the time; the loader reads %.0f samples/s "
                 "(more --loader-threads, smaller images or fewer --augment steps would help)\n",
                 100 * waited, rate);
  }
  char b[96];
  std::snprintf(b, sizeof b, "  (loader %.0f/s%s)", rate, waited > 0.05 ? ", stages wait for data" : "");
  return b;
}

bool TrainingLoop::stop_requested(int64_t step) const { return cfg_.stop && cfg_.stop->load() && step < total_; }

void TrainingLoop::stop_clock() { r_.seconds = std::chrono::duration<double>(clock::now() - t0_).count(); }

Status TrainingLoop::finish() {
  r_.samples_per_s = r_.seconds > 0 ? static_cast<double>((r_.steps - start_) * batch_) / r_.seconds : 0;
  if (r_.steps - start_ >= 4 && steady_s_ > 0) r_.steady_samples_per_s = static_cast<double>(steady_steps_ * batch_) / steady_s_;
  if (!cfg_.curves_path.empty()) RETURN_IF_ERROR(write_curves_svg(curves_, cfg_.curves_path));
  return Status::ok();
}

}  // namespace pt
