// Softmax / LogSoftmax in both _coerce2d modes and their backward ops, against a naive reference
// and (for the backward ops, in double) finite differences of the forward op.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class SoftmaxTest : public KernelTest<T> {};
TYPED_TEST_SUITE(SoftmaxTest, FloatTypes);

struct Geometry {
  int64_t outer = 1, n = 1, inner = 1;
};

Geometry geometry(const Dims& d, int64_t axis, bool coerce2d) {
  Geometry g;
  for (int64_t i = 0; i < axis; ++i) g.outer *= d[i];
  if (coerce2d) {
    for (size_t i = axis; i < d.size(); ++i) g.n *= d[i];
  } else {
    g.n = d[axis];
    for (size_t i = axis + 1; i < d.size(); ++i) g.inner *= d[i];
  }
  return g;
}

std::vector<double> softmax_ref(const std::vector<double>& x, const Geometry& g, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < g.inner; ++j) {
      auto at = [&](int64_t c) { return (o * g.n + c) * g.inner + j; };
      double mx = -INFINITY, s = 0;
      for (int64_t c = 0; c < g.n; ++c) mx = std::max(mx, x[at(c)]);
      for (int64_t c = 0; c < g.n; ++c) s += std::exp(x[at(c)] - mx);
      for (int64_t c = 0; c < g.n; ++c)
        y[at(c)] = log ? x[at(c)] - mx - std::log(s) : std::exp(x[at(c)] - mx) / s;
    }
  return y;
}

std::vector<double> softmax_grad_ref(const std::vector<double>& dy, const std::vector<double>& y,
                                     const Geometry& g, bool log) {
  std::vector<double> dx(y.size());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < g.inner; ++j) {
      auto at = [&](int64_t c) { return (o * g.n + c) * g.inner + j; };
      double s = 0;
      for (int64_t c = 0; c < g.n; ++c) s += log ? dy[at(c)] : dy[at(c)] * y[at(c)];
      for (int64_t c = 0; c < g.n; ++c)
        dx[at(c)] = log ? dy[at(c)] - std::exp(y[at(c)]) * s : y[at(c)] * (dy[at(c)] - s);
    }
  return dx;
}

struct SoftmaxCase {
  Dims dims;
  int64_t axis;
  bool coerce2d;
};

const std::vector<SoftmaxCase>& softmax_cases() {
  static const std::vector<SoftmaxCase> c = {
      {{2, 3, 4}, 1, false}, {{2, 3, 4}, 1, true},  {{2, 3, 4}, 0, false}, {{2, 3, 4}, 2, false},
      {{2, 3, 4}, 0, true},  {{3, 5, 130}, 1, false}, {{300, 150}, 1, false}, {{7}, 0, false},
      {{4, 200, 70}, 1, false}, {{2, 1, 3}, 1, false},
  };
  return c;
}

AttrMap softmax_attrs(int64_t axis, bool coerce2d) {
  AttrMap a;
  a.set("axis", axis);
  a.set("_coerce2d", int64_t{coerce2d ? 1 : 0});
  return a;
}

TYPED_TEST(SoftmaxTest, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  uint32_t seed = 500;
  for (const SoftmaxCase& c : softmax_cases()) {
    for (bool log : {false, true}) {
      ++seed;
      SCOPED_TRACE(seed_trace(seed) + " dims=" + dims_str(c.dims) + " axis=" + std::to_string(c.axis) +
                   " coerce2d=" + std::to_string(c.coerce2d) + (log ? " LogSoftmax" : " Softmax"));
      const int64_t n = numel(c.dims);
      const Geometry g = geometry(c.dims, c.axis, c.coerce2d);
      const AttrMap attrs = softmax_attrs(c.axis, c.coerce2d);
      auto x = Buf<T>::from_doubles(c.dims, random_values(n, seed, -4, 4));
      auto y = Buf<T>::output(c.dims);
      PT_ASSERT_OK(run_kernel(log ? "LogSoftmax" : "Softmax", dtype_of<T>(), {x.view()}, {y.view()}, attrs));
      expect_close(y, softmax_ref(x.values(), g, log), "forward");

      auto dy = Buf<T>::from_doubles(c.dims, random_values(n, seed + 1));
      auto dx = Buf<T>::output(c.dims);
      PT_ASSERT_OK(run_kernel(log ? "LogSoftmaxGrad" : "SoftmaxGrad", dtype_of<T>(),
                              {dy.view(), y.view()}, {dx.view()}, attrs));
      expect_close(dx, softmax_grad_ref(dy.values(), y.values(), g, log), "backward");
    }
  }
}

TYPED_TEST(SoftmaxTest, StableForLargeInputs) {
  using T = TypeParam;
  auto x = Buf<T>({2, 3}, {T(1000), T(1001), T(999), T(-1000), T(-1000), T(-2000)});
  for (bool log : {false, true}) {
    auto y = Buf<T>::output({2, 3});
    PT_ASSERT_OK(run_kernel(log ? "LogSoftmax" : "Softmax", dtype_of<T>(), {x.view()}, {y.view()},
                            softmax_attrs(1, false)));
    expect_close(y, softmax_ref(x.values(), {2, 3, 1}, log), log ? "LogSoftmax" : "Softmax");
  }
}

TYPED_TEST(SoftmaxTest, AxisOutOfRange) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({2, 3}, random_values(6, 1));
  auto y = Buf<T>::output({2, 3});
  EXPECT_EQ(run_kernel("Softmax", dtype_of<T>(), {x.view()}, {y.view()}, softmax_attrs(2, false)).code(),
            StatusCode::kInvalidInput);
}

// d/dx sum(dy * f(x)) by central differences, f = Softmax or LogSoftmax, on [2, 3, 4] axis 1.
TEST(SoftmaxGradFD, MatchesFiniteDifferences) {
  const Dims dims{2, 3, 4};
  const int64_t n = numel(dims);
  const uint32_t seed = 550;
  SCOPED_TRACE(seed_trace(seed));
  for (bool coerce2d : {false, true}) {
    for (bool log : {false, true}) {
      const AttrMap attrs = softmax_attrs(1, coerce2d);
      const char* fwd = log ? "LogSoftmax" : "Softmax";
      const std::vector<double> xs = random_values(n, seed, -2, 2);
      const std::vector<double> dys = random_values(n, seed + 1);
      auto objective = [&](const std::vector<double>& xv) {
        auto x = Buf<double>(dims, xv);
        auto y = Buf<double>::output(dims);
        EXPECT_TRUE(run_kernel(fwd, DType::kFloat64, {x.view()}, {y.view()}, attrs).is_ok());
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += dys[i] * y[i];
        return s;
      };
      auto x = Buf<double>(dims, xs);
      auto y = Buf<double>::output(dims);
      PT_ASSERT_OK(run_kernel(fwd, DType::kFloat64, {x.view()}, {y.view()}, attrs));
      auto dy = Buf<double>(dims, dys);
      auto dx = Buf<double>::output(dims);
      PT_ASSERT_OK(run_kernel(log ? "LogSoftmaxGrad" : "SoftmaxGrad", DType::kFloat64,
                              {dy.view(), y.view()}, {dx.view()}, attrs));
      std::vector<double> fd(n);
      const double eps = 1e-6;
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> xp = xs, xm = xs;
        xp[i] += eps;
        xm[i] -= eps;
        fd[i] = (objective(xp) - objective(xm)) / (2 * eps);
      }
      expect_close(dx, fd, std::string(fwd) + "Grad vs FD coerce2d=" + std::to_string(coerce2d),
                   1e-8, 1e-6);
    }
  }
}

}  // namespace
}  // namespace pt::test
