// Unary elementwise kernels, their backward ops (against formulas and finite differences) and the
// copy ops (Identity, Reshape, Flatten).
#include <functional>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class ElementwiseTest : public KernelTest<T> {};
TYPED_TEST_SUITE(ElementwiseTest, FloatTypes);

struct UnaryCase {
  const char* op;
  std::function<double(double)> ref;
  double lo, hi;  // input range
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> c = {
      {"Relu", [](double x) { return x > 0 ? x : 0.0; }, -2, 2},
      {"Sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -6, 6},
      {"Tanh", [](double x) { return std::tanh(x); }, -3, 3},
      {"Neg", [](double x) { return -x; }, -2, 2},
      {"Exp", [](double x) { return std::exp(x); }, -3, 3},
      {"Log", [](double x) { return std::log(x); }, 0.05, 5},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0.0, 5},
      {"Identity", [](double x) { return x; }, -2, 2},
  };
  return c;
}

TYPED_TEST(ElementwiseTest, UnaryMatchesReference) {
  using T = TypeParam;
  const uint32_t seed = 11;
  SCOPED_TRACE(seed_trace(seed));
  // A small shape and one above the OpenMP threshold.
  for (const Dims& dims : {Dims{3, 5, 7}, Dims{}, Dims{200, 201}}) {
    for (const UnaryCase& c : unary_cases()) {
      auto x = Buf<T>::from_doubles(dims, random_values(numel(dims), seed, c.lo, c.hi));
      auto y = Buf<T>::output(dims);
      PT_ASSERT_OK(run_kernel(c.op, dtype_of<T>(), {x.view()}, {y.view()}));
      std::vector<double> ref;
      for (double v : x.values()) ref.push_back(c.ref(v));
      expect_close(y, ref, std::string(c.op) + " " + dims_str(dims));
    }
  }
}

TYPED_TEST(ElementwiseTest, SigmoidIsStableForLargeInputs) {
  using T = TypeParam;
  auto x = Buf<T>({6}, {T(-1000), T(-100), T(-40), T(40), T(100), T(1000)});
  auto y = Buf<T>::output({6});
  PT_ASSERT_OK(run_kernel("Sigmoid", dtype_of<T>(), {x.view()}, {y.view()}));
  std::vector<double> ref;
  for (double v : x.values()) ref.push_back(v >= 0 ? 1.0 / (1.0 + std::exp(-v)) : std::exp(v) / (1.0 + std::exp(v)));
  expect_close(y, ref, "Sigmoid large", 1e-30, Tol<T>::rtol);
  for (int64_t i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(static_cast<double>(y[i])));
}

TYPED_TEST(ElementwiseTest, ShapeMismatchIsInvalidInput) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({4}, random_values(4, 1));
  auto y = Buf<T>::output({5});
  Status s = run_kernel("Relu", dtype_of<T>(), {x.view()}, {y.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
}

struct GradCase {
  const char* grad_op;
  const char* fwd_op;
  std::function<double(double, double)> ref;  // (dy, y) -> dx
};

TYPED_TEST(ElementwiseTest, GradOpsMatchFormula) {
  using T = TypeParam;
  const std::vector<GradCase> cases = {
      {"ReluGrad", "Relu", [](double dy, double y) { return y > 0 ? dy : 0.0; }},
      {"SigmoidGrad", "Sigmoid", [](double dy, double y) { return dy * y * (1 - y); }},
      {"TanhGrad", "Tanh", [](double dy, double y) { return dy * (1 - y * y); }},
  };
  const uint32_t seed = 12;
  SCOPED_TRACE(seed_trace(seed));
  for (const Dims& dims : {Dims{4, 9}, Dims{190, 190}}) {
    for (const GradCase& c : cases) {
      const int64_t n = numel(dims);
      auto x = Buf<T>::from_doubles(dims, random_values(n, seed, -2, 2));
      auto y = Buf<T>::output(dims);
      PT_ASSERT_OK(run_kernel(c.fwd_op, dtype_of<T>(), {x.view()}, {y.view()}));
      auto dy = Buf<T>::from_doubles(dims, random_values(n, seed + 1));
      auto dx = Buf<T>::output(dims);
      PT_ASSERT_OK(run_kernel(c.grad_op, dtype_of<T>(), {dy.view(), y.view()}, {dx.view()}));
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = c.ref(static_cast<double>(dy[i]), static_cast<double>(y[i]));
      expect_close(dx, ref, c.grad_op);
    }
  }
}

// d/dx sum(dy * f(x)) by central differences, in double, away from Relu's kink.
TEST(ElementwiseGradFD, MatchesFiniteDifferences) {
  const std::vector<GradCase> cases = {{"ReluGrad", "Relu", nullptr},
                                       {"SigmoidGrad", "Sigmoid", nullptr},
                                       {"TanhGrad", "Tanh", nullptr}};
  const uint32_t seed = 13;
  SCOPED_TRACE(seed_trace(seed));
  const int64_t n = 17;
  std::vector<double> xs = random_values(n, seed, -2, 2);
  for (double& v : xs)
    if (std::fabs(v) < 0.1) v += 0.3;
  const std::vector<double> dys = random_values(n, seed + 1);
  for (const GradCase& c : cases) {
    auto x = Buf<double>({n}, xs);
    auto y = Buf<double>::output({n});
    PT_ASSERT_OK(run_kernel(c.fwd_op, DType::kFloat64, {x.view()}, {y.view()}));
    auto dy = Buf<double>({n}, dys);
    auto dx = Buf<double>::output({n});
    PT_ASSERT_OK(run_kernel(c.grad_op, DType::kFloat64, {dy.view(), y.view()}, {dx.view()}));
    const double eps = 1e-6;
    std::vector<double> fd(n);
    for (int64_t i = 0; i < n; ++i) {
      double f[2];
      for (int s = 0; s < 2; ++s) {
        auto xp = Buf<double>({1}, {xs[i] + (s ? -eps : eps)});
        auto yp = Buf<double>::output({1});
        PT_ASSERT_OK(run_kernel(c.fwd_op, DType::kFloat64, {xp.view()}, {yp.view()}));
        f[s] = dys[i] * yp[0];
      }
      fd[i] = (f[0] - f[1]) / (2 * eps);
    }
    expect_close(dx, fd, std::string(c.grad_op) + " vs finite differences", 1e-8, 1e-6);
  }
}

template <typename T>
void check_copy_ops() {
  const Dims in_dims{2, 3, 4};
  std::vector<T> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<T>(i * 3 - 7);
  for (const char* op : {"Identity", "Reshape", "Flatten"}) {
    const Dims out_dims = std::string(op) == "Identity" ? in_dims : Dims{2, 12};
    auto x = Buf<T>(in_dims, v);
    auto shape = Buf<int64_t>({2}, {2, 12});
    auto y = Buf<T>::output(out_dims);
    std::vector<TensorView> in = {x.view()};
    if (std::string(op) == "Reshape") in.push_back(shape.view());
    PT_ASSERT_OK(run_kernel(op, dtype_of<T>(), in, {y.view()}));
    std::vector<double> ref(v.begin(), v.end());
    expect_close(y, ref, op, 0, 0);
  }
}

TEST(CopyOps, AllDtypes) {
  check_copy_ops<float>();
  check_copy_ops<double>();
  check_copy_ops<int64_t>();
  check_copy_ops<int32_t>();
}

}  // namespace
}  // namespace pt::test
