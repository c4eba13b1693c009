// SGDMomentum: two steps checked against the update written out by hand, in place on W and V.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class OptimizerTest : public KernelTest<T> {};
TYPED_TEST_SUITE(OptimizerTest, FloatTypes);

TYPED_TEST(OptimizerTest, SGDMomentumTwoSteps) {
  using T = TypeParam;
  for (int64_t n : {int64_t{3}, int64_t{40000}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto w0 = random_values(n, 1200), g1 = random_values(n, 1201), g2 = random_values(n, 1202);
    auto w = Buf<T>::from_doubles({n}, w0);
    auto v = Buf<T>::output({n});
    for (int64_t i = 0; i < n; ++i) v[i] = T(0);
    auto lr = Buf<T>({}, {T(0.1)});
    AttrMap attrs;
    attrs.set("momentum", 0.8f);
    attrs.set("weight_decay", 0.01f);
    // Attributes are float: the kernel computes with these values.
    const double gamma = static_cast<double>(static_cast<T>(0.8f));
    const double wd = static_cast<double>(static_cast<T>(0.01f));
    const double rate = static_cast<double>(lr[0]);
    std::vector<double> wr = w.values(), vr(n, 0.0);
    for (const auto* g : {&g1, &g2}) {
      auto gb = Buf<T>::from_doubles({n}, *g);
      PT_ASSERT_OK(run_kernel("SGDMomentum", dtype_of<T>(), {w.view(), gb.view(), v.view(), lr.view()}, {}, attrs));
      for (int64_t i = 0; i < n; ++i) {
        const double gi = static_cast<double>(gb[i]) + wd * wr[i];
        vr[i] = gamma * vr[i] + (1 - gamma) * gi;
        wr[i] = wr[i] - rate * vr[i];
      }
      expect_close(v, vr, "V");
      expect_close(w, wr, "W");
    }
  }
}

TEST(OptimizerHand, SGDMomentumDefaults) {
  // momentum 0.9 (as float), no weight decay, W = [1, -2], G = [0.5, 1], V = [0, 0], lr 0.1.
  auto w = Buf<double>({2}, {1.0, -2.0});
  auto g = Buf<double>({2}, {0.5, 1.0});
  auto v = Buf<double>({2}, {0.0, 0.0});
  auto lr = Buf<double>({}, {0.1});
  const double gm = static_cast<double>(0.9f);
  PT_ASSERT_OK(run_kernel("SGDMomentum", DType::kFloat64, {w.view(), g.view(), v.view(), lr.view()}, {}));
  // step 1: V = (1-gm)*G, W -= 0.1*V
  expect_close(v, {(1 - gm) * 0.5, (1 - gm) * 1.0}, "V1");
  expect_close(w, {1.0 - 0.1 * (1 - gm) * 0.5, -2.0 - 0.1 * (1 - gm) * 1.0}, "W1");
  PT_ASSERT_OK(run_kernel("SGDMomentum", DType::kFloat64, {w.view(), g.view(), v.view(), lr.view()}, {}));
  // step 2: V = gm*V1 + (1-gm)*G
  const double v2a = gm * (1 - gm) * 0.5 + (1 - gm) * 0.5, v2b = gm * (1 - gm) + (1 - gm);
  expect_close(v, {v2a, v2b}, "V2");
  expect_close(w, {1.0 - 0.1 * (1 - gm) * 0.5 - 0.1 * v2a, -2.0 - 0.1 * (1 - gm) - 0.1 * v2b}, "W2");
}

}  // namespace
}  // namespace pt::test
