// small_sgemm (kernels/cpu/small_gemm.h) against a double reference: every transpose combination,
// sizes with and without 4-row and 16-column remainders, strided leading dimensions, alpha, k = 0,
// and the same bits from two calls (FusedAttentionGrad relies on it to recompute the forward's
// probabilities).
#include <cstring>

#include "kernels/cpu/small_gemm.h"
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

TEST(SmallSgemm, MatchesDoubleReference) {
  struct Case {
    int64_t m, n, k;
  };
  const Case cases[] = {{1, 1, 1}, {4, 16, 16}, {32, 32, 16}, {16, 16, 16}, {5, 17, 3}, {7, 35, 20},
                        {33, 48, 64}, {3, 5, 0}, {64, 128, 128}, {2, 31, 1}};
  uint32_t seed = 4100;
  for (const Case& c : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) + " ta " +
                     std::to_string(ta) + " tb " + std::to_string(tb) + " " + seed_trace(seed));
        ASSERT_EQ(pt::cpu::small_sgemm_fits(c.m, c.n, c.k), c.k > 0);
        // Leading dimensions larger than the rows, as a head inside a wider tensor would have.
        const int64_t ar = ta ? c.k : c.m, ac = ta ? c.m : c.k, lda = ac + 3;
        const int64_t br = tb ? c.n : c.k, bc = tb ? c.k : c.n, ldb = bc + 5, ldc = c.n + 2;
        const std::vector<double> a = random_values(std::max<int64_t>(ar * lda, 1), seed++, -2, 2);
        const std::vector<double> b = random_values(std::max<int64_t>(br * ldb, 1), seed++, -2, 2);
        std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
        const float alpha = 0.375f;
        std::vector<float> cf(static_cast<size_t>(c.m * ldc + 1), std::numeric_limits<float>::quiet_NaN());
        const float guard = -31337.0f;
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j = c.n; j < ldc; ++j) cf[i * ldc + j] = guard;  // the gap between rows stays untouched
        pt::cpu::small_sgemm(ta, tb, c.m, c.n, c.k, alpha, af.data(), lda, bf.data(), ldb, cf.data(), ldc);
        double worst = 0;
        for (int64_t i = 0; i < c.m; ++i) {
          for (int64_t j = 0; j < c.n; ++j) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < c.k; ++p) {
              const double x = ta ? af[p * lda + i] : af[i * lda + p];
              const double y = tb ? bf[j * ldb + p] : bf[p * ldb + j];
              s += x * y;
              mag += std::fabs(x * y);
            }
            const double got = cf[i * ldc + j], want = alpha * s;
            ASSERT_TRUE(std::fabs(got - want) <= 1e-6 * alpha * (mag + 1)) << i << "," << j << ": " << got << " vs " << want;
            worst = std::max(worst, std::fabs(got - want));
          }
          for (int64_t j = c.n; j < ldc; ++j) ASSERT_EQ(cf[i * ldc + j], guard) << "wrote between rows";
        }
        std::vector<float> again(cf.size(), 0.0f);
        pt::cpu::small_sgemm(ta, tb, c.m, c.n, c.k, alpha, af.data(), lda, bf.data(), ldb, again.data(), ldc);
        for (int64_t i = 0; i < c.m; ++i)
          EXPECT_EQ(std::memcmp(&again[i * ldc], &cf[i * ldc], c.n * sizeof(float)), 0) << "row " << i << " differs";
      }
}

}  // namespace
}  // namespace pt::test
