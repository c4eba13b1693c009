// curves.svg's training-loss series stays bounded over long runs: past Curves::kMaxTrainPoints
// points it halves, every point the mean of the same number of steps, the overall mean kept.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/curves.h"

namespace pt {
namespace {

TEST(Curves, TrainingLossStaysBoundedAndKeepsTheMeans) {
  Curves c;
  const int64_t steps = 1'000'000;
  double sum = 0;
  for (int64_t s = 1; s <= steps; ++s) {
    const double v = std::sin(0.001 * static_cast<double>(s)) + 2.0;
    sum += v;
    c.add_train_loss(static_cast<double>(s), v);
  }
  EXPECT_LT(c.train_loss.size(), Curves::kMaxTrainPoints);
  EXPECT_GE(c.train_loss.size(), Curves::kMaxTrainPoints / 4);
  // Every point covers train_stride steps and ends at its last one.
  const int64_t stride = c.train_stride;
  EXPECT_EQ(stride, 256);  // halved at 4096 points of stride 1, 2, ..., 128 (the next at 4096 * 256 steps)
  for (size_t i = 0; i < c.train_loss.size(); ++i)
    ASSERT_EQ(c.train_loss[i].step, static_cast<double>((i + 1) * stride)) << i;
  // Point k is the mean of its steps (checked against the direct mean for a few).
  for (size_t i : {size_t{0}, size_t{17}, c.train_loss.size() - 1}) {
    double m = 0;
    for (int64_t s = static_cast<int64_t>(i) * stride + 1; s <= static_cast<int64_t>(i + 1) * stride; ++s)
      m += std::sin(0.001 * static_cast<double>(s)) + 2.0;
    EXPECT_NEAR(c.train_loss[i].value, m / static_cast<double>(stride), 1e-9) << i;
  }
  // The steps of an incomplete group are pending, and the total is preserved.
  double total = c.pending_sum;
  for (const CurvePoint& p : c.train_loss) total += p.value * static_cast<double>(stride);
  EXPECT_NEAR(total, sum, 1e-6 * sum);
  EXPECT_EQ(c.pending_n, steps - static_cast<int64_t>(c.train_loss.size()) * stride);
  // The picture is still drawn, with the pending steps, and stays small.
  const std::string svg = curves_svg(c);
  EXPECT_LT(svg.size(), 64u * 1024u);
  EXPECT_NE(svg.find("polyline"), std::string::npos);
}

TEST(Curves, ShortRunsKeepEveryStep) {
  Curves c;
  for (int s = 1; s <= 100; ++s) c.add_train_loss(s, 1.0 / s);
  ASSERT_EQ(c.train_loss.size(), 100u);
  EXPECT_EQ(c.train_loss[41].step, 42.0);
  EXPECT_DOUBLE_EQ(c.train_loss[41].value, 1.0 / 42);
}

}  // namespace
}  // namespace pt
