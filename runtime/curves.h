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
  std::vector<CurvePoint> val_loss;
  std::vector<CurvePoint> val_accuracy;  // in [0, 1]

  // Appends the training loss of one step. Memory stays bounded however long the run: past
  // kMaxTrainPoints points, neighbours are averaged in pairs and later steps are averaged in
  // groups of the doubled stride, so every point weighs the same number of steps.
  void add_train_loss(double step, double value);
  static constexpr size_t kMaxTrainPoints = 4096;
  int64_t train_stride = 1;
  double pending_sum = 0, pending_step = 0;  // the steps of a group not yet complete
  int64_t pending_n = 0;
};

std::string curves_svg(const Curves& c);
// Writes curves_svg(c) to `path` through a temporary file and a rename.
Status write_curves_svg(const Curves& c, const std::string& path);

// Appends the curves of metrics.csv rows (step,epoch,loss,lr,samples_per_s,val_loss,val_accuracy;
// no header), as a resumed run finds them in its checkpoint.
void curves_from_metrics_rows(const std::vector<std::string>& rows, Curves* c);

}  // namespace pt
