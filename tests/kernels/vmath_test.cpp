// kernels/cpu/vmath: the vectorised exp and erf against the C library in double, over dense
// grids of the float range, the special values, and the properties the kernels rely on (the
// softmax pieces give the same exp values as the map; the scaled form equals those values scaled).
#include "kernels/cpu/vmath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace pt::cpu {
namespace {

// |y - ref| in units of the float spacing at ref (the ulp of the correctly rounded result).
double ulps(float y, double ref) {
  const float r = static_cast<float>(ref);
  const double spacing = std::nextafter(std::fabs(r), std::numeric_limits<float>::infinity()) - std::fabs(r);
  return std::fabs(static_cast<double>(y) - ref) / spacing;
}

std::vector<float> grid(double lo, double hi, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(lo + (hi - lo) * static_cast<double>(i) / (n - 1));
  return x;
}

std::vector<float> map(VFn f, const std::vector<float>& a, const std::vector<float>* b = nullptr) {
  std::vector<float> y(a.size());
  vmap(f, a.data(), b ? b->data() : nullptr, y.data(), static_cast<int64_t>(a.size()));
  return y;
}

TEST(VMath, ExpWithinOnePointFiveUlpOfTheFloatRange) {
  const std::vector<float> x = grid(-104.0, 89.0, 2'000'001);  // > 32768: the threaded path too
  const std::vector<float> y = map(VFn::kExp, x);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    if (ref > std::numeric_limits<float>::max()) {
      EXPECT_EQ(y[i], std::numeric_limits<float>::infinity()) << "exp(" << x[i] << ")";
    } else if (ref >= std::numeric_limits<float>::min()) {
      worst = std::max(worst, ulps(y[i], ref));
    } else {  // subnormal or zero: within one subnormal step
      EXPECT_LE(std::fabs(y[i] - ref), std::numeric_limits<float>::denorm_min()) << "exp(" << x[i] << ")";
    }
  }
  EXPECT_LE(worst, 1.5);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> s = map(VFn::kExp, {0.0f, -0.0f, inf, -inf, NAN, 1e-30f, -1e-30f, 200.0f, -200.0f, 1.0f});
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_EQ(s[2], inf);
  EXPECT_EQ(s[3], 0.0f);
  EXPECT_TRUE(std::isnan(s[4]));
  EXPECT_EQ(s[5], 1.0f);
  EXPECT_EQ(s[6], 1.0f);
  EXPECT_EQ(s[7], inf);
  EXPECT_EQ(s[8], 0.0f);
  EXPECT_LE(ulps(s[9], std::exp(1.0)), 1.0);
}

TEST(VMath, ErfWithinTwoPointFiveUlp) {
  std::vector<float> x = grid(-4.5, 4.5, 1'000'001);
  for (int k = 0; k < 4000; ++k) x.push_back(static_cast<float>(std::pow(10.0, -30.0 + 30.6 * k / 4000)));  // tiny to 4
  const std::vector<float> y = map(VFn::kErf, x);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y[i], std::erf(static_cast<double>(x[i]))));
  EXPECT_LE(worst, 2.5);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> s = map(VFn::kErf, {0.0f, -0.0f, inf, -inf, NAN, 10.0f, -10.0f});
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_TRUE(std::signbit(s[1]));
  EXPECT_EQ(s[2], 1.0f);
  EXPECT_EQ(s[3], -1.0f);
  EXPECT_TRUE(std::isnan(s[4]));
  EXPECT_EQ(s[5], 1.0f);
  EXPECT_EQ(s[6], -1.0f);
}

TEST(VMath, TanhAndSigmoidWithinThreeUlp) {
  std::vector<float> x = grid(-100.0, 100.0, 2'000'001);
  for (int k = 0; k < 4000; ++k) {
    const float t = static_cast<float>(std::pow(10.0, -30.0 + 30.3 * k / 4000));  // tiny to 2
    x.push_back(t);
    x.push_back(-t);
  }
  const std::vector<float> th = map(VFn::kTanh, x), sg = map(VFn::kSigmoid, x);
  double worst_t = 0, worst_s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    worst_t = std::max(worst_t, ulps(th[i], std::tanh(xi)));
    const double s = 1.0 / (1.0 + std::exp(-xi));
    if (s >= std::numeric_limits<float>::min()) worst_s = std::max(worst_s, ulps(sg[i], s));
    else ASSERT_LE(std::fabs(sg[i] - s), std::numeric_limits<float>::denorm_min()) << "sigmoid(" << xi << ")";
  }
  EXPECT_LE(worst_t, 3.0);
  EXPECT_LE(worst_s, 3.0);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> t = map(VFn::kTanh, {0.0f, -0.0f, inf, -inf, NAN});
  const std::vector<float> s = map(VFn::kSigmoid, {0.0f, inf, -inf, NAN, 200.0f, -200.0f});
  EXPECT_EQ(t[0], 0.0f);
  EXPECT_TRUE(std::signbit(t[1]));
  EXPECT_EQ(t[2], 1.0f);
  EXPECT_EQ(t[3], -1.0f);
  EXPECT_TRUE(std::isnan(t[4]));
  EXPECT_EQ(s[0], 0.5f);
  EXPECT_EQ(s[1], 1.0f);
  EXPECT_EQ(s[2], 0.0f);
  EXPECT_TRUE(std::isnan(s[3]));
  EXPECT_EQ(s[4], 1.0f);
  EXPECT_EQ(s[5], 0.0f);
}

// The gradient and GELU forms against their formulas in double: a few ulps of the parts, plus
// what rounding x * x to float costs exp(-x^2) (x^2 / 2^23 relative), as any float version pays.
TEST(VMath, ErfGradGeluAndGeluGradAgreeWithDouble) {
  const std::vector<float> x = grid(-9.0, 9.0, 200'001);
  std::vector<float> dy(x.size());
  for (size_t i = 0; i < x.size(); ++i) dy[i] = static_cast<float>(0.5 + std::sin(0.37 * i));
  const std::vector<float> eg = map(VFn::kErfGrad, dy, &x), ge = map(VFn::kGelu, x), gg = map(VFn::kGeluGrad, dy, &x);
  const double k = 2.0 / std::sqrt(M_PI);
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i], d = dy[i];
    const double erf_grad = d * k * std::exp(-xi * xi);
    const double gelu = 0.5 * xi * (1.0 + std::erf(xi / std::sqrt(2.0)));
    const double gelu_grad = d * (0.5 * (1.0 + std::erf(xi / std::sqrt(2.0))) + xi * std::exp(-0.5 * xi * xi) / std::sqrt(2.0 * M_PI));
    const double arg = xi * xi * 1.2e-7;  // relative error of exp(-x^2) from x^2 in float
    ASSERT_NEAR(eg[i], erf_grad, (4e-7 + arg) * std::fabs(erf_grad) + 1e-37) << "x " << xi;
    ASSERT_NEAR(ge[i], gelu, 6e-7 * std::fabs(xi) + 1e-37) << "x " << xi;
    ASSERT_NEAR(gg[i], gelu_grad, 6e-7 * std::fabs(d) * (1.0 + std::fabs(xi)) * (1.0 + arg) + 1e-37) << "x " << xi;
  }
}

// What softmax and FusedAttention rely on: exp_shifted_sum writes exactly the map's exp(x - shift)
// and returns their sum (to float accuracy); exp_shifted_scaled gives those values times the
// scale bit for bit (the attention backward's recomputed probabilities equal the forward's).
TEST(VMath, SoftmaxPiecesAgreeBitForBitWithTheMap) {
  for (int64_t n : {1, 7, 16, 17, 100, 1000}) {
    std::vector<float> x(static_cast<size_t>(n)), shifted(x.size());
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(8.0 * std::sin(1.7 * i + 0.3));
    const float shift = 3.25f;
    for (int64_t i = 0; i < n; ++i) shifted[i] = x[i] - shift;
    const std::vector<float> want = map(VFn::kExp, shifted);
    std::vector<float> y(x.size());
    const float s = exp_shifted_sum(x.data(), shift, y.data(), n);
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y[i], want[i]) << "n " << n << " i " << i;
      ref += want[i];
    }
    EXPECT_NEAR(s, ref, 1e-6 * ref) << n;
    EXPECT_EQ(exp_shifted_sum(x.data(), shift, nullptr, n), s) << n;
    const float inv = 1.0f / s;
    std::vector<float> z = x;  // in place, as the kernels call it
    exp_shifted_scaled(z.data(), shift, inv, z.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z[i], want[i] * inv) << "n " << n << " i " << i;
  }
}

}  // namespace
}  // namespace pt::cpu
