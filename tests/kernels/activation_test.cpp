// Activation and pointwise-math CPU kernels against naive double references (float and double,
// guard elements after every output): the forward ops, their *Grad ops against the reference
// derivative, and the broadcasting PRelu / Pow (with an int64 exponent).
#include <cmath>
#include <functional>
#include <limits>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class ActivationTest : public KernelTest<T> {};
TYPED_TEST_SUITE(ActivationTest, FloatTypes);

struct UnaryRef {
  const char* op;
  const char* grad_op;  // nullptr: no dedicated backward op
  AttrMap attrs;
  std::function<double(double)> f, df;
};

double sp(double x) { return std::log1p(std::exp(x)); }

// Attributes are float32 (as in ONNX): references use the float values.
constexpr double f32(float v) { return static_cast<double>(v); }

std::vector<UnaryRef> unary_refs() {
  const double sa = 1.67326319217681884765625, sgm = 1.05070102214813232421875;
  AttrMap lr, el, hs, cl;
  lr.set("alpha", 0.2f);
  el.set("alpha", 0.5f);
  hs.set("alpha", 0.25f);
  hs.set("beta", 0.4f);
  cl.set("min", -0.4f);
  cl.set("max", 0.6f);
  return {
      {"LeakyRelu", "LeakyReluGrad", lr, [](double x) { return x >= 0 ? x : f32(0.2f) * x; },
       [](double x) { return x > 0 ? 1 : f32(0.2f); }},
      {"LeakyRelu", "LeakyReluGrad", {}, [](double x) { return x >= 0 ? x : f32(0.01f) * x; },
       [](double x) { return x > 0 ? 1 : f32(0.01f); }},
      {"Elu", "EluGrad", el, [](double x) { return x >= 0 ? x : f32(0.5f) * std::expm1(x); },
       [](double x) { return x > 0 ? 1 : f32(0.5f) * std::exp(x); }},
      {"Selu", "SeluGrad", {}, [=](double x) { return x > 0 ? sgm * x : sgm * sa * std::expm1(x); },
       [=](double x) { return x > 0 ? sgm : sgm * sa * std::exp(x); }},
      {"HardSigmoid", "HardSigmoidGrad", hs, [](double x) { return std::clamp(f32(0.25f) * x + f32(0.4f), 0.0, 1.0); },
       [](double x) { double v = f32(0.25f) * x + f32(0.4f); return v > 0 && v < 1 ? f32(0.25f) : 0.0; }},
      {"HardSwish", "HardSwishGrad", {}, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); },
       [](double x) { return x < -3 ? 0.0 : x > 3 ? 1.0 : x / 3 + 0.5; }},
      {"Erf", "ErfGrad", {}, [](double x) { return std::erf(x); },
       [](double x) { return 2 / std::sqrt(M_PI) * std::exp(-x * x); }},
      {"Softplus", nullptr, {}, sp, nullptr},  // gradient composed: dY * Sigmoid(X)
      {"Reciprocal", nullptr, {}, [](double x) { return 1 / x; }, nullptr},
      {"Abs", "AbsGrad", {}, [](double x) { return std::fabs(x); },
       [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }},
      {"Clip", "ClipGrad", cl, [](double x) { return std::clamp(x, f32(-0.4f), f32(0.6f)); },
       [](double x) { return x >= f32(-0.4f) && x <= f32(0.6f) ? 1.0 : 0.0; }},
  };
}

TYPED_TEST(ActivationTest, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  uint32_t seed = 11;
  for (const UnaryRef& r : unary_refs()) {
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{70000}}) {  // 70000: the threaded path
      SCOPED_TRACE(std::string(r.op) + " n=" + std::to_string(n) + " " + seed_trace(seed));
      std::vector<double> xv = random_values(n, seed++, -5, 5);
      if (std::string(r.op) == "Reciprocal")
        for (double& v : xv) v = v >= 0 ? v + 0.1 : v - 0.1;
      xv[0] = std::string(r.op) == "Reciprocal" ? 0.5 : 0.0;  // exactly at the kink of several ops
      auto x = Buf<T>::from_doubles({n}, xv);
      std::vector<double> xt = x.values();  // the reference sees the rounded inputs
      auto y = Buf<T>::output({n});
      PT_ASSERT_OK(run_kernel(r.op, dtype_of<T>(), {x.view()}, {y.view()}, r.attrs));
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = r.f(xt[i]);
      expect_close(y, ref, r.op);
      if (!r.grad_op) continue;
      auto dy = Buf<T>::from_doubles({n}, random_values(n, seed++));
      auto dx = Buf<T>::output({n});
      PT_ASSERT_OK(run_kernel(r.grad_op, dtype_of<T>(), {dy.view(), x.view()}, {dx.view()}, r.attrs));
      std::vector<double> dref(n), dyt = dy.values();
      for (int64_t i = 0; i < n; ++i) dref[i] = dyt[i] * r.df(xt[i]);
      expect_close(dx, dref, r.grad_op);
    }
  }
}

TYPED_TEST(ActivationTest, ClipBoundsFromInputs) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({5}, {-2, -0.5, 0, 0.5, 2});
  auto lo = Buf<T>::from_doubles({}, {-1.0});
  auto hi = Buf<T>::from_doubles({}, {0.25});
  auto y = Buf<T>::output({5});
  PT_ASSERT_OK(run_kernel("Clip", dtype_of<T>(), {x.view(), lo.view(), hi.view()}, {y.view()}));
  expect_close(y, {-1, -0.5, 0, 0.25, 0.25}, "Clip min+max");
  auto y2 = Buf<T>::output({5});
  PT_ASSERT_OK(run_kernel("Clip", dtype_of<T>(), {x.view(), TensorView{}, hi.view()}, {y2.view()}));
  expect_close(y2, {-2, -0.5, 0, 0.25, 0.25}, "Clip max only");
  auto y3 = Buf<T>::output({5});
  PT_ASSERT_OK(run_kernel("Clip", dtype_of<T>(), {x.view()}, {y3.view()}));
  expect_close(y3, {-2, -0.5, 0, 0.5, 2}, "Clip without bounds");
}

TYPED_TEST(ActivationTest, PReluBroadcastAndGrad) {
  using T = TypeParam;
  const Dims xd{2, 3, 4}, sd{3, 1};
  auto x = Buf<T>::from_doubles(xd, random_values(24, 5));
  auto s = Buf<T>::from_doubles(sd, random_values(3, 6, 0, 0.5));
  auto y = Buf<T>::output(xd);
  PT_ASSERT_OK(run_kernel("PRelu", dtype_of<T>(), {x.view(), s.view()}, {y.view()}));
  std::vector<double> ref(24), dxr(24), dsr(24);
  auto dy = Buf<T>::from_doubles(xd, random_values(24, 7));
  for (int64_t i = 0; i < 24; ++i) {
    const double xv = x[i], sv = s[broadcast_source(sd, xd, i)], g = dy[i];
    ref[i] = xv < 0 ? sv * xv : xv;
    dxr[i] = xv < 0 ? sv * g : g;
    dsr[i] = xv < 0 ? xv * g : 0;
  }
  expect_close(y, ref, "PRelu");
  auto dx = Buf<T>::output(xd);
  auto ds = Buf<T>::output(xd);
  PT_ASSERT_OK(run_kernel("PReluGrad", dtype_of<T>(), {dy.view(), x.view(), s.view()}, {dx.view(), ds.view()}));
  expect_close(dx, dxr, "PReluGrad dX");
  expect_close(ds, dsr, "PReluGrad dSlope (unreduced)");
}

TYPED_TEST(ActivationTest, PowBroadcastAndIntegerExponent) {
  using T = TypeParam;
  const Dims ad{3, 4}, bd{4};
  auto a = Buf<T>::from_doubles(ad, random_values(12, 8, 0.5, 2));
  auto b = Buf<T>::from_doubles(bd, {2, -1, 0.5, 3});  // exact in float
  auto y = Buf<T>::output(ad);
  PT_ASSERT_OK(run_kernel("Pow", dtype_of<T>(), {a.view(), b.view()}, {y.view()}));
  std::vector<double> ref(12);
  for (int64_t i = 0; i < 12; ++i) ref[i] = std::pow(a[i], b[broadcast_source(bd, ad, i)]);
  expect_close(y, ref, "Pow", 1e-6, 1e-6);
  auto e = Buf<int64_t>({}, {3});
  auto y2 = Buf<T>::output(ad);
  PT_ASSERT_OK(run_kernel("Pow", dtype_of<T>(), {a.view(), e.view()}, {y2.view()}));
  for (int64_t i = 0; i < 12; ++i) ref[i] = std::pow(a[i], 3.0);
  expect_close(y2, ref, "Pow int64 exponent", 1e-6, 1e-6);
}

TEST(ActivationInt64, AbsAndPow) {
  Buf<int64_t> x({4}, {-3, 0, 2, -7});
  Buf<int64_t> y = Buf<int64_t>::output({4});
  PT_ASSERT_OK(run_kernel("Abs", DType::kInt64, {x.view()}, {y.view()}));
  expect_close(y, {3, 0, 2, 7}, "Abs int64");
  Buf<int64_t> e({}, {2});
  Buf<int64_t> p = Buf<int64_t>::output({4});
  PT_ASSERT_OK(run_kernel("Pow", DType::kInt64, {x.view(), e.view()}, {p.view()}));
  expect_close(p, {9, 0, 4, 49}, "Pow int64");
}

// Integer Pow by squaring: any exponent costs at most 64 squarings (a folded Pow with
// e = 2^62 once hung the import of a fuzzed model), overflow wraps as two's complement (NumPy's
// int64 power; values from Python's exact integers mod 2^64), and a negative exponent truncates
// 1/x^|e| toward zero.
TEST(ActivationInt64, PowLargeAndNegativeExponents) {
  const int64_t big = int64_t{1} << 62;
  Buf<int64_t> x({10}, {3, -3, 2, 5, -1, 7, 3, 1, -1, 0});
  Buf<int64_t> e({10}, {40, 41, 63, 27, big + 1, 0, -2, -5, -3, -1});
  Buf<int64_t> p = Buf<int64_t>::output({10});
  PT_ASSERT_OK(run_kernel("Pow", DType::kInt64, {x.view(), e.view()}, {p.view()}));
  const int64_t want[10] = {-6289078614652622815LL, 420491770248316829LL,
                            std::numeric_limits<int64_t>::min(), 7450580596923828125LL, -1, 1, 0, 1, -1, 0};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(p[i], want[i]) << "Pow(" << x[i] << ", " << e[i] << ")";
}

}  // namespace
}  // namespace pt::test
