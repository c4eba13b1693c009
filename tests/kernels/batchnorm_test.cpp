// BatchNormalization in inference and training mode and BatchNormalizationGrad against naive
// double-precision formulas: Y, the in-place running-statistics update (unbiased and biased),
// the statistics outputs, and dX, dScale, dB in both modes.
#include <cmath>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class BatchNormTest : public KernelTest<T> {};
TYPED_TEST_SUITE(BatchNormTest, FloatTypes);

struct Ref {
  std::vector<double> y, mean, var, run_mean, run_var, dx, dscale, dbias;
};

Ref reference(const Dims& xd, const std::vector<double>& x, const std::vector<double>& sc,
              const std::vector<double>& b, const std::vector<double>& rm, const std::vector<double>& rv,
              const std::vector<double>& dy, bool training, bool unbiased, double eps, double mom) {
  const int64_t n = xd[0], c = xd[1], s = numel(xd) / (n * c), m = n * s;
  Ref r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.mean.assign(c, 0);
  r.var.assign(c, 0);
  r.dscale.assign(c, 0);
  r.dbias.assign(c, 0);
  auto at = [&](int64_t i, int64_t ch, int64_t j) { return (i * c + ch) * s + j; };
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) r.mean[ch] += x[at(i, ch, j)] / m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) r.var[ch] += std::pow(x[at(i, ch, j)] - r.mean[ch], 2) / m;
    const double mu = training ? r.mean[ch] : rm[ch], v = training ? r.var[ch] : rv[ch];
    const double istd = 1 / std::sqrt(v + eps);
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const int64_t k = at(i, ch, j);
        const double xh = (x[k] - mu) * istd;
        r.y[k] = sc[ch] * xh + b[ch];
        sdy += dy[k];
        sdyx += dy[k] * xh;
      }
    r.dbias[ch] = sdy;
    r.dscale[ch] = sdyx;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const int64_t k = at(i, ch, j);
        const double xh = (x[k] - mu) * istd;
        r.dx[k] = training ? sc[ch] * istd * (dy[k] - sdy / m - xh * sdyx / m) : sc[ch] * istd * dy[k];
      }
  }
  r.run_mean = rm;
  r.run_var = rv;
  if (training)
    for (int64_t ch = 0; ch < c; ++ch) {
      r.run_mean[ch] = mom * rm[ch] + (1 - mom) * r.mean[ch];
      r.run_var[ch] = mom * rv[ch] + (1 - mom) * r.var[ch] * (unbiased ? double(m) / (m - 1) : 1.0);
    }
  return r;
}

TYPED_TEST(BatchNormTest, ForwardAndGradBothModes) {
  using T = TypeParam;
  uint32_t seed = 4500;
  for (const Dims& xd : {Dims{4, 3}, Dims{2, 3, 5}, Dims{2, 4, 3, 5}, Dims{3, 2, 2, 3, 2}, Dims{16, 32, 16, 16},
                         Dims{64, 640, 1, 1}, Dims{32, 96, 2, 2}, Dims{5, 70, 3, 5}, Dims{48, 512, 1}})
    for (int training : {0, 1})
      for (int unbiased : {0, 1}) {
        if (!training && unbiased) continue;
        SCOPED_TRACE(dims_str(xd) + (training ? " training" : " inference") + (unbiased ? " unbiased" : "") + ", " +
                     seed_trace(seed));
        const int64_t c = xd[1];
        const double eps = static_cast<double>(1e-3f), mom = static_cast<double>(0.8f);  // attributes are float
        const auto xv = random_values(numel(xd), seed++, -2, 3), dyv = random_values(numel(xd), seed++);
        const auto sv = random_values(c, seed++, 0.5, 1.5), bv = random_values(c, seed++);
        const auto rmv = random_values(c, seed++), rvv = random_values(c, seed++, 0.5, 2);
        const Ref r = reference(xd, xv, sv, bv, rmv, rvv, dyv, training, unbiased, eps, mom);
        auto x = Buf<T>::from_doubles(xd, xv);
        auto sc = Buf<T>::from_doubles({c}, sv);
        auto b = Buf<T>::from_doubles({c}, bv);
        auto rm = Buf<T>::from_doubles({c}, rmv);
        auto rv = Buf<T>::from_doubles({c}, rvv);
        auto dy = Buf<T>::from_doubles(xd, dyv);
        AttrMap at;
        at.set("epsilon", static_cast<float>(eps));
        at.set("momentum", static_cast<float>(mom));
        at.set("_training", static_cast<int64_t>(training));
        at.set("_unbiased_running_var", static_cast<int64_t>(unbiased));
        auto y = Buf<T>::output(xd);
        auto om = Buf<T>::output({c}), ov = Buf<T>::output({c}), sm = Buf<T>::output({c}), sv2 = Buf<T>::output({c});
        std::vector<TensorView> outs = {y.view(), om.view(), ov.view()};
        if (training) {
          outs.push_back(sm.view());
          outs.push_back(sv2.view());
        }
        PT_ASSERT_OK(run_kernel("BatchNormalization", dtype_of<T>(), {x.view(), sc.view(), b.view(), rm.view(), rv.view()},
                                outs, at));
        const double atol = std::is_same_v<T, float> ? 1e-4 : 1e-11;
        expect_close(y, r.y, "Y", atol, atol);
        expect_close(rm, r.run_mean, "running mean (in place)", atol, atol);
        expect_close(rv, r.run_var, "running var (in place)", atol, atol);
        expect_close(om, r.run_mean, "output mean", atol, atol);
        expect_close(ov, r.run_var, "output var", atol, atol);
        if (training) {
          expect_close(sm, r.mean, "saved mean", atol, atol);
          expect_close(sv2, r.var, "saved var", atol, atol);
        }

        auto dx = Buf<T>::output(xd), ds = Buf<T>::output({c}), db = Buf<T>::output({c});
        std::vector<TensorView> gins = {dy.view(), x.view(), sc.view()};
        auto rm0 = Buf<T>::from_doubles({c}, rmv), rv0 = Buf<T>::from_doubles({c}, rvv);
        if (!training) {
          gins.push_back(rm0.view());
          gins.push_back(rv0.view());
        }
        PT_ASSERT_OK(run_kernel("BatchNormalizationGrad", dtype_of<T>(), gins, {dx.view(), ds.view(), db.view()}, at));
        expect_close(dx, r.dx, "dX", atol, atol * 10);
        expect_close(ds, r.dscale, "dScale", atol * 10, atol * 10);
        expect_close(db, r.dbias, "dBias", atol * 10, atol * 10);
        // Only dX wanted (absent outputs are null views).
        auto dx2 = Buf<T>::output(xd);
        PT_ASSERT_OK(run_kernel("BatchNormalizationGrad", dtype_of<T>(), gins, {dx2.view(), TensorView{}, TensorView{}}, at));
        expect_close(dx2, r.dx, "dX alone", atol, atol * 10);
      }
}

}  // namespace
}  // namespace pt::test
