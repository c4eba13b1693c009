// LRN and LRNGrad against naive double-precision loops (the gradient from the analytic
// Jacobian, summed over the channel windows), for odd and even window sizes.
#include <cmath>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class LrnTest : public KernelTest<T> {};
TYPED_TEST_SUITE(LrnTest, FloatTypes);

TYPED_TEST(LrnTest, ForwardAndGrad) {
  using T = TypeParam;
  struct Case {
    Dims x;
    int64_t size;
    float alpha, beta, bias;
  };
  const Case cases[] = {
      {{2, 5, 3, 4}, 3, 2e-4f, 0.5f, 2.0f}, {{2, 7, 6}, 5, 0.5f, 0.75f, 1.0f}, {{1, 6, 2, 3}, 4, 0.3f, 0.6f, 1.5f},
      {{1, 3, 4, 4}, 7, 1.0f, 1.2f, 0.8f}, {{8, 32, 16, 16}, 5, 1e-3f, 0.75f, 1.0f},
  };
  uint32_t seed = 4600;
  for (const Case& cs : cases) {
    SCOPED_TRACE(dims_str(cs.x) + " size " + std::to_string(cs.size) + ", " + seed_trace(seed));
    const int64_t n = cs.x[0], c = cs.x[1], s = numel(cs.x) / (n * c);
    const int64_t lo = (cs.size - 1) / 2, hi = cs.size - 1 - lo;
    const auto xv = random_values(numel(cs.x), seed++, -2, 2), dyv = random_values(numel(cs.x), seed++);
    std::vector<double> sq(xv.size()), y(xv.size()), dx(xv.size(), 0.0);
    const double a = cs.alpha, b = cs.beta, k = cs.bias;
    auto at = [&](int64_t i, int64_t ch, int64_t j) { return (i * c + ch) * s + j; };
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t j = 0; j < s; ++j) {
          double sum = 0;
          for (int64_t cc = std::max<int64_t>(0, ch - lo); cc <= std::min(c - 1, ch + hi); ++cc)
            sum += xv[at(i, cc, j)] * xv[at(i, cc, j)];
          sq[at(i, ch, j)] = k + a / cs.size * sum;
          y[at(i, ch, j)] = xv[at(i, ch, j)] * std::pow(sq[at(i, ch, j)], -b);
        }
    // dy_i/dx_j = [i==j] s_i^-b - 2 a b / size * x_i x_j s_i^(-b-1) [j in window(i)]
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j)
        for (int64_t ci = 0; ci < c; ++ci) {
          const int64_t yi = at(i, ci, j);
          dx[yi] += dyv[yi] * std::pow(sq[yi], -b);
          for (int64_t cj = std::max<int64_t>(0, ci - lo); cj <= std::min(c - 1, ci + hi); ++cj) {
            const int64_t xj = at(i, cj, j);
            dx[xj] -= dyv[yi] * 2 * a * b / cs.size * xv[yi] * xv[xj] * std::pow(sq[yi], -b - 1);
          }
        }
    AttrMap attrs;
    attrs.set("size", cs.size);
    attrs.set("alpha", cs.alpha);
    attrs.set("beta", cs.beta);
    attrs.set("bias", cs.bias);
    auto x = Buf<T>::from_doubles(cs.x, xv);
    auto dyb = Buf<T>::from_doubles(cs.x, dyv);
    auto yb = Buf<T>::output(cs.x), dxb = Buf<T>::output(cs.x);
    PT_ASSERT_OK(run_kernel("LRN", dtype_of<T>(), {x.view()}, {yb.view()}, attrs));
    PT_ASSERT_OK(run_kernel("LRNGrad", dtype_of<T>(), {dyb.view(), x.view()}, {dxb.view()}, attrs));
    const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
    expect_close(yb, y, "Y", tol, tol * 10);
    expect_close(dxb, dx, "dX", tol * 10, tol * 10);
  }
}

}  // namespace
}  // namespace pt::test
