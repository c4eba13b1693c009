// What a training loop prints and logs per step, shared by the single-stage and the pipelined
// trainer: the metrics.csv row, and the progress output (one line redrawn in place on a terminal,
// plain periodic lines otherwise and at every validation).
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/report/tensorboard.h"

namespace pt {

// A validation pass: its samples, mean loss and accuracy (the metrics rows' last columns).
struct EvalResult {
  int64_t samples = 0;
  double loss = 0;
  double accuracy = -1;  // -1 for regression
};

// One metrics.csv row without its newline: step,epoch,loss,lr,samples_per_s,val_loss,val_accuracy
// (the validation columns empty when `val` is null).
std::string metrics_row(int64_t step, int64_t epoch, double loss, double lr, double samples_per_s,
                        const EvalResult* val);

class Progress {
 public:
  // total: steps of the run; log_every: plain-line period; samples_per_step: for samples/s.
  Progress(bool quiet, int64_t total, int64_t log_every, int64_t samples_per_step);
  // After every step. `val` is the validation just run, or null; eta_s the remaining seconds.
  // `extra`: more to show after samples/s (the loader's rate), may be empty.
  void step(int64_t step, int64_t epoch, double loss, double samples_per_s, double eta_s, const EvalResult* val,
            const std::string& extra = "");

 private:
  using clock = std::chrono::steady_clock;
  bool quiet_, tty_;
  int64_t total_, log_every_, samples_per_step_;
  clock::time_point window_, last_bar_;
  int64_t window_steps_ = 0;
  double window_loss_ = 0;
};

// metrics.csv as training goes: rows are appended to PATH.partial, and PATH itself is replaced
// (copy to PATH.tmp, rename) at every validation and at least every few seconds, so that a reader
// always finds a whole file; close() renames the finished file into place.
class MetricsFile {
 public:
  MetricsFile() = default;
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  ~MetricsFile();  // a run that fails keeps the rows it wrote: the file is closed as by close()
  // An empty path disables the file. `rows`: those of the steps before a resume.
  // `tensorboard_dir` (with a path): every row added is also written there as TensorBoard scalars
  // (train/loss, train/lr, train/samples_per_s, val/loss, val/accuracy), in a new event file.
  Status open(const std::string& path, const std::vector<std::string>& rows, const std::string& tensorboard_dir = "");
  // Appends one row; publishes PATH when `publish` is set or a few seconds have passed.
  Status add(const std::string& row, bool publish);
  // With --tensorboard: one more scalar (per-stage busy fraction and pass times at the run's end).
  Status add_scalar(const std::string& tag, int64_t step, double value);
  Status close();

 private:
  using clock = std::chrono::steady_clock;
  Status publish();
  std::string path_, partial_;
  std::ofstream f_;
  clock::time_point last_;
  int64_t since_ = 0;  // rows since the last publication
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace pt
