// SGDMomentum: two steps checked against the update written out by hand, in place on W and V.
// SGD (torch.optim.SGD) and Adam / AdamW: three steps against the update formulas in double,
// including the step count (SGD's first step sets buf = d_p; Adam's bias corrections).
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

TYPED_TEST(OptimizerTest, SGDTorchThreeSteps) {
  using T = TypeParam;
  for (int nesterov : {0, 1})
    for (int64_t n : {int64_t{5}, int64_t{40000}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " nesterov=" + std::to_string(nesterov));
      const double mom = static_cast<T>(0.8f), damp = nesterov ? 0.0 : 0.25, wd = static_cast<T>(0.01f);
      auto w = Buf<T>::from_doubles({n}, random_values(n, 1300));
      auto b = Buf<T>::output({n});
      auto d = Buf<T>::output({n});
      auto lr = Buf<T>({}, {T(0.1)});
      auto step = Buf<int64_t>({}, {int64_t{0}});
      AttrMap attrs;
      attrs.set("momentum", 0.8f);
      attrs.set("dampening", static_cast<float>(damp));
      attrs.set("weight_decay", 0.01f);
      attrs.set("nesterov", static_cast<int64_t>(nesterov));
      std::vector<double> wr = w.values(), br(n, 0.0);
      for (int s = 0; s < 3; ++s) {
        auto gb = Buf<T>::from_doubles({n}, random_values(n, 1301 + s));
        std::vector<TensorView> in{w.view(), gb.view(), b.view(), lr.view(), step.view()};
        if (nesterov) in.push_back(d.view());
        PT_ASSERT_OK(run_kernel("SGD", dtype_of<T>(), in, {}, attrs));
        for (int64_t i = 0; i < n; ++i) {
          const double di = static_cast<double>(gb[i]) + wd * wr[i];
          br[i] = s == 0 ? di : mom * br[i] + (1 - damp) * di;
          wr[i] -= static_cast<double>(lr[0]) * (nesterov ? di + mom * br[i] : br[i]);
        }
        EXPECT_EQ(step[0], s + 1);
        expect_close(b, br, "B");
        expect_close(w, wr, "W");
      }
    }
}

TYPED_TEST(OptimizerTest, AdamThreeSteps) {
  using T = TypeParam;
  for (int decoupled : {0, 1})
    for (int64_t n : {int64_t{5}, int64_t{40000}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " decoupled=" + std::to_string(decoupled));
      const double b1 = 0.85f, b2 = 0.99f, eps = 1e-6f, wd = 0.05f;
      auto w = Buf<T>::from_doubles({n}, random_values(n, 1400));
      auto m = Buf<T>::output({n});
      auto v = Buf<T>::output({n});
      for (int64_t i = 0; i < n; ++i) m[i] = v[i] = T(0);
      auto lr = Buf<T>({}, {T(0.01)});
      auto step = Buf<int64_t>({}, {int64_t{0}});
      AttrMap attrs;
      attrs.set("beta1", 0.85f);
      attrs.set("beta2", 0.99f);
      attrs.set("epsilon", 1e-6f);
      attrs.set("weight_decay", 0.05f);
      attrs.set("decoupled", static_cast<int64_t>(decoupled));
      const double rate = static_cast<double>(lr[0]);
      std::vector<double> wr = w.values(), mr(n, 0.0), vr(n, 0.0);
      for (int s = 0; s < 3; ++s) {
        auto gb = Buf<T>::from_doubles({n}, random_values(n, 1401 + s));
        PT_ASSERT_OK(run_kernel("Adam", dtype_of<T>(), {w.view(), gb.view(), m.view(), v.view(), lr.view(), step.view()},
                                {}, attrs));
        const int t = s + 1;
        for (int64_t i = 0; i < n; ++i) {
          double g = static_cast<double>(gb[i]);
          if (decoupled) wr[i] *= 1 - rate * wd;
          else g += wd * wr[i];
          mr[i] = b1 * mr[i] + (1 - b1) * g;
          vr[i] = b2 * vr[i] + (1 - b2) * g * g;
          wr[i] -= rate / (1 - std::pow(b1, t)) * mr[i] / (std::sqrt(vr[i]) / std::sqrt(1 - std::pow(b2, t)) + eps);
        }
        EXPECT_EQ(step[0], t);
        expect_close(m, mr, "M");
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
