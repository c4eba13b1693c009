// Dropout: identity when inactive, the kept fraction matches the ratio, masks are a function of
// (seed, step, element) only (thread count and call order do not matter), and DropoutGrad scales
// like the forward.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "kernels/registry.h"

namespace pt {
namespace {

struct DropoutRun {
  std::vector<float> y;
  std::vector<uint8_t> mask;
};

DropoutRun run_dropout(const std::vector<float>& x, int64_t step, float ratio, int64_t training, int64_t seed) {
  const Dims d = {static_cast<int64_t>(x.size())};
  DropoutRun r;
  r.y.assign(x.size(), -1.0f);
  std::vector<char> mask(x.size() + 8, 7);
  int64_t st = step;
  TensorView in[] = {{const_cast<float*>(x.data()), DType::kFloat32, d}, {&st, DType::kInt64, {}}};
  TensorView out[] = {{r.y.data(), DType::kFloat32, d}, {mask.data(), DType::kBool, d}};
  AttrMap a;
  a.set("ratio", ratio);
  a.set("_training", training);
  a.set("seed", seed);
  KernelFn fn = find_kernel("Dropout", DeviceKind::kCpu, DType::kFloat32);
  EXPECT_NE(fn, nullptr);
  EXPECT_TRUE(fn(KernelCall{in, out, a}).is_ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(mask[x.size() + i], 7) << "guard byte " << i << " overwritten";
  r.mask.assign(mask.begin(), mask.begin() + static_cast<long>(x.size()));
  return r;
}

std::vector<float> ramp(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.001f * static_cast<float>(i) - 3.0f;
  return x;
}

TEST(Dropout, IdentityWhenInactive) {
  const auto x = ramp(1000);
  for (auto [step, training] : {std::pair<int64_t, int64_t>{-1, 1}, {5, 0}}) {
    DropoutRun r = run_dropout(x, step, 0.5f, training, 3);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(r.y[i], x[i]);
      ASSERT_EQ(r.mask[i], 1);
    }
  }
}

TEST(Dropout, KeptFractionAndScaling) {
  const auto x = ramp(200000);
  for (float ratio : {0.1f, 0.3f, 0.5f, 0.9f}) {
    DropoutRun r = run_dropout(x, 1, ratio, 1, 42);
    int64_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (r.mask[i]) {
        ++kept;
        ASSERT_FLOAT_EQ(r.y[i], x[i] * (1.0f / (1.0f - ratio))) << i;
      } else {
        ASSERT_EQ(r.y[i], 0.0f) << i;
      }
    }
    const double frac = static_cast<double>(kept) / static_cast<double>(x.size());
    EXPECT_NEAR(frac, 1.0 - ratio, 0.005) << "ratio " << ratio;  // ~5 standard deviations
  }
}

TEST(Dropout, MasksDependOnSeedAndStepOnly) {
  const auto x = ramp(100000);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  DropoutRun a = run_dropout(x, 7, 0.5f, 1, 11);
  omp_set_num_threads(std::max(2, threads));
  DropoutRun b = run_dropout(x, 7, 0.5f, 1, 11);
  omp_set_num_threads(threads);
  EXPECT_EQ(a.mask, b.mask) << "masks depend on the thread count";
  DropoutRun c = run_dropout(x, 8, 0.5f, 1, 11);
  DropoutRun d = run_dropout(x, 7, 0.5f, 1, 12);
  EXPECT_NE(a.mask, c.mask) << "the step does not change the mask";
  EXPECT_NE(a.mask, d.mask) << "the seed does not change the mask";
  int64_t same = 0;
  for (size_t i = 0; i < x.size(); ++i) same += a.mask[i] == c.mask[i];
  EXPECT_NEAR(static_cast<double>(same) / x.size(), 0.5, 0.01) << "masks of two steps are correlated";
}

TEST(Dropout, GradScalesLikeForward) {
  const Dims d = {6};
  std::vector<double> dy = {1, 2, 3, 4, 5, 6}, dx(6, -1);
  bool mask[6] = {true, false, true, true, false, true};
  TensorView in[] = {{dy.data(), DType::kFloat64, d}, {mask, DType::kBool, d}};
  TensorView out[] = {{dx.data(), DType::kFloat64, d}};
  AttrMap a;
  a.set("ratio", 0.25f);
  ASSERT_TRUE(find_kernel("DropoutGrad", DeviceKind::kCpu, DType::kFloat64)(KernelCall{in, out, a}).is_ok());
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(dx[i], mask[i] ? dy[i] / 0.75 : 0.0);
}

}  // namespace
}  // namespace pt
