// curves.svg's series stay bounded over long runs: past Curves::kMaxTrainPoints points the
// training loss halves, every point the mean of the same number of steps, the overall mean kept;
// past kMaxValPoints the validations thin out evenly, the newest always drawn.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/report/curves.h"

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

TEST(Curves, ValidationsStayBoundedEvenlySpreadWithTheNewestLast) {
  Curves c;
  const int64_t n = 200'000;  // a validation at every epoch end of a small data set, for a long run
  for (int64_t k = 0; k < n; ++k) {
    const double step = static_cast<double>(10 * (k + 1));
    c.add_validation(step, 1.0 / static_cast<double>(k + 1), static_cast<double>(k) / static_cast<double>(n));
    ASSERT_LE(c.val_loss.size(), Curves::kMaxValPoints + 1) << k;
  }
  EXPECT_GE(c.val_loss.size(), Curves::kMaxValPoints / 2);
  ASSERT_EQ(c.val_accuracy.size(), c.val_loss.size());
  const int64_t stride = c.val_stride;
  EXPECT_EQ(stride, 512);  // 200,000 validations in at most 512 points
  // Validations 0, stride, 2 stride, ... (each a real one: its own loss and accuracy), then the newest.
  for (size_t i = 0; i + 1 < c.val_loss.size(); ++i) {
    const int64_t k = static_cast<int64_t>(i) * stride;
    ASSERT_EQ(c.val_loss[i].step, static_cast<double>(10 * (k + 1))) << i;
    ASSERT_EQ(c.val_loss[i].value, 1.0 / static_cast<double>(k + 1)) << i;
    ASSERT_EQ(c.val_accuracy[i].step, c.val_loss[i].step) << i;
  }
  EXPECT_EQ(c.val_loss.back().step, static_cast<double>(10 * n));
  EXPECT_EQ(c.val_accuracy.back().value, static_cast<double>(n - 1) / static_cast<double>(n));
  EXPECT_LT(curves_svg(c).size(), 160u * 1024u);  // before the bound: 200,000 markers, ~30 MB
}

TEST(Curves, FewValidationsAreAllKept) {
  Curves c;
  for (int k = 1; k <= 30; ++k) c.add_validation(k, 1.0 / k, -1);
  ASSERT_EQ(c.val_loss.size(), 30u);
  EXPECT_TRUE(c.val_accuracy.empty());
  EXPECT_EQ(c.val_loss[11].step, 12.0);
}

TEST(Curves, TheFileIsTheStringStreamed) {
  Curves c;
  c.title = "a <b> & c";
  for (int s = 1; s <= 5000; ++s) c.add_train_loss(s, 1.0 / s);
  for (int k = 1; k <= 700; ++k) c.add_validation(7 * k, 2.0 / k, 0.001 * k);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pipetrain-curves-" + std::to_string(::getpid()) + ".svg")).string();
  ASSERT_TRUE(write_curves_svg(c, path).is_ok());
  std::ifstream in(path);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), curves_svg(c));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace pt
