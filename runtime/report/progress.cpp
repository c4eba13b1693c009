// Metrics rows and progress output of the training loops.
#include "runtime/report/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "runtime/report/tensorboard.h"

namespace pt {

std::string metrics_row(int64_t step, int64_t epoch, double loss, double lr, double samples_per_s,
                        const EvalResult* val) {
  char line[256];
  std::snprintf(line, sizeof line, "%lld,%lld,%.9g,%.9g,%.1f,", static_cast<long long>(step),
                static_cast<long long>(epoch), loss, lr, samples_per_s);
  std::string row = line;
  if (val) {
    std::snprintf(line, sizeof line, "%.9g,%.6g", val->loss, val->accuracy);
    row += line;
  } else {
    row += ",";
  }
  return row;
}

Progress::Progress(bool quiet, int64_t total, int64_t log_every, int64_t samples_per_step)
    : quiet_(quiet),
      tty_(!quiet && isatty(fileno(stdout))),
      total_(total),
      log_every_(std::max<int64_t>(1, log_every)),
      samples_per_step_(samples_per_step),
      window_(clock::now()),
      last_bar_(window_) {}

void Progress::step(int64_t step, int64_t epoch, double loss, double samples_per_s, double eta_s,
                    const EvalResult* val, const std::string& extra) {
  ++window_steps_;
  window_loss_ += loss;
  if (tty_ && !val && step != total_) {
    const auto now = clock::now();
    if (std::chrono::duration<double>(now - last_bar_).count() < 0.1) return;
    last_bar_ = now;
    const double frac = static_cast<double>(step) / static_cast<double>(total_);
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::printf("\r[%.*s%*s] %3.0f%%  epoch %lld  step %lld/%lld  loss %.4f  %.0f samples/s%s  ETA %.0fs\033[K",
                filled, "##############################", kWidth - filled, "", 100 * frac,
                static_cast<long long>(epoch), static_cast<long long>(step), static_cast<long long>(total_), loss,
                samples_per_s, extra.c_str(), eta_s);
    std::fflush(stdout);
    return;
  }
  if (quiet_ || !(step % log_every_ == 0 || step == total_ || val)) return;
  if (tty_) std::printf("\r\033[K");
  const double wsec = std::chrono::duration<double>(clock::now() - window_).count();
  std::printf("step %lld/%lld  epoch %lld  loss %.4f  %.0f samples/s", static_cast<long long>(step),
              static_cast<long long>(total_), static_cast<long long>(epoch), window_loss_ / window_steps_,
              wsec > 0 ? static_cast<double>(window_steps_ * samples_per_step_) / wsec : 0.0);
  std::printf("%s", extra.c_str());
  if (val) {
    std::printf("  val_loss %.4f", val->loss);
    if (val->accuracy >= 0) std::printf("  val_acc %.2f%%", 100 * val->accuracy);
  }
  std::printf("\n");
  std::fflush(stdout);
  window_ = clock::now();
  window_steps_ = 0;
  window_loss_ = 0;
}

Status MetricsFile::open(const std::string& path, const std::vector<std::string>& rows,
                         const std::string& tensorboard_dir) {
  path_ = path;
  if (path.empty()) return Status::ok();
  if (!tensorboard_dir.empty()) {
    ASSIGN_OR_RETURN(tb_, TensorBoardWriter::open(tensorboard_dir));
  }
  partial_ = path + ".partial";
  f_.open(partial_, std::ios::trunc);
  if (!f_) return invalid_input(path + ": cannot be written");
  f_ << "step,epoch,loss,lr,samples_per_s,val_loss,val_accuracy\n";
  for (const std::string& row : rows) f_ << row << "\n";
  last_ = clock::now();
  return Status::ok();
}

MetricsFile::~MetricsFile() { (void)close(); }

namespace {

// The row's fields (metrics_row's format) as TensorBoard scalars; empty fields (no validation at
// this step) and accuracy -1 (regression) are left out.
Status row_to_tensorboard(const std::string& row, TensorBoardWriter* tb) {
  std::vector<std::string> f;
  size_t start = 0;
  for (size_t i = 0; i <= row.size(); ++i)
    if (i == row.size() || row[i] == ',') {
      f.push_back(row.substr(start, i - start));
      start = i + 1;
    }
  if (f.size() < 7) return internal_error("metrics row '" + row + "' has " + std::to_string(f.size()) + " fields");
  const int64_t step = std::stoll(f[0]);
  static const char* const kTags[] = {nullptr, nullptr, "train/loss", "train/lr", "train/samples_per_s", "val/loss",
                                      "val/accuracy"};
  for (size_t k = 2; k < 7; ++k) {
    if (f[k].empty()) continue;
    const double v = std::stod(f[k]);
    if (k == 6 && v < 0) continue;
    RETURN_IF_ERROR(tb->scalar(kTags[k], step, v));
  }
  return tb->flush();
}

}  // namespace

Status MetricsFile::add(const std::string& row, bool publish_now) {
  if (path_.empty()) return Status::ok();
  if (tb_) RETURN_IF_ERROR(row_to_tensorboard(row, tb_.get()));
  f_ << row << "\n";
  // On disk before any checkpoint of this step: a resumed run reads the rows back from the file.
  f_.flush();
  ++since_;
  // At a validation, but not more than once a second (--eval-every 1 would copy the file per step).
  const auto age = clock::now() - last_;
  if ((publish_now && age > std::chrono::seconds(1)) || age > std::chrono::seconds(5)) return publish();
  return Status::ok();
}

Status MetricsFile::add_scalar(const std::string& tag, int64_t step, double value) {
  if (!tb_) return Status::ok();
  RETURN_IF_ERROR(tb_->scalar(tag, step, value));
  return tb_->flush();
}

Status MetricsFile::publish() {
  f_.flush();
  if (!f_) return invalid_input(partial_ + ": write failed (disk full?)");
  last_ = clock::now();
  since_ = 0;
  const std::string tmp = path_ + ".tmp";
  std::error_code ec;
  std::filesystem::copy_file(partial_, tmp, std::filesystem::copy_options::overwrite_existing, ec);
  if (!ec) std::filesystem::rename(tmp, path_, ec);
  if (ec) return invalid_input(path_ + ": cannot be updated: " + ec.message());
  return Status::ok();
}

Status MetricsFile::close() {
  if (path_.empty() || !f_.is_open()) return Status::ok();
  f_.close();
  if (!f_) return invalid_input(partial_ + ": write failed (disk full?)");
  std::error_code ec;
  std::filesystem::rename(partial_, path_, ec);
  if (ec) return invalid_input(path_ + ": rename failed: " + ec.message());
  return Status::ok();
}

}  // namespace pt
