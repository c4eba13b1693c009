// curves.svg: training loss against steps, with validation loss and accuracy when there are any;
// a self-contained SVG written beside metrics.csv and refreshed as training goes.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace pt {

struct CurvePoint {
  double step = 0;
  double value = 0;
};

struct Curves {
  std::string title;
  std::vector<CurvePoint> train_loss;    // each point the mean of train_stride consecutive steps
  std::vector<CurvePoint> val_loss;      // add_validation's points
  std::vector<CurvePoint> val_accuracy;  // in [0, 1]; empty when the loss has no accuracy

  // Appends the training loss of one step. Memory stays bounded however long the run: past
  // kMaxTrainPoints points, neighbours are averaged in pairs and later steps are averaged in
  // groups of the doubled stride, so every point weighs the same number of steps.
  void add_train_loss(double step, double value);
  static constexpr size_t kMaxTrainPoints = 4096;
  int64_t train_stride = 1;
  double pending_sum = 0, pending_step = 0;  // the steps of a group not yet complete
  int64_t pending_n = 0;

  // Appends a validation (accuracy < 0: none). Bounded too (a run validating at every epoch end
  // of a small data set validates thousands of times): past kMaxValPoints points every other one
  // is dropped and later validations are kept one in val_stride, so the points stay evenly spread
  // and each is a real measurement; the newest validation is always the last point.
  void add_validation(double step, double loss, double accuracy);
  static constexpr size_t kMaxValPoints = 512;
  int64_t val_stride = 1;
  int64_t val_count = 0;         // validations added
  bool val_last_extra = false;   // the last point is the newest validation, off the stride
};

std::string curves_svg(const Curves& c);
// Writes curves_svg(c) to `path` through a temporary file and a rename, streamed: the picture is
// never held in memory whole.
Status write_curves_svg(const Curves& c, const std::string& path);

// Appends the curves of metrics.csv rows (step,epoch,loss,lr,samples_per_s,val_loss,val_accuracy;
// no header), as a resumed run finds them in its checkpoint.
void curves_from_metrics_rows(const std::vector<std::string>& rows, Curves* c);

}  // namespace pt
