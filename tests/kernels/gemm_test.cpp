// Gemm (every transA/transB combination, every C shape) and MatMul (1-D promotion, 2-D, batched
// with broadcast batch dims) against naive loops in double.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class GemmTest : public KernelTest<T> {};
TYPED_TEST_SUITE(GemmTest, FloatTypes);

// Y = alpha * op(A) @ op(B) + beta * C.
std::vector<double> gemm_ref(const std::vector<double>& a, const std::vector<double>& b,
                             const std::vector<double>* c, const Dims& cdims, bool ta, bool tb,
                             int64_t m, int64_t n, int64_t k, double alpha, double beta) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      y[i * n + j] = alpha * s + (c ? beta * (*c)[broadcast_source(cdims, {m, n}, i * n + j)] : 0.0);
    }
  return y;
}

TYPED_TEST(GemmTest, AllTransposesAndBiasShapes) {
  using T = TypeParam;
  uint32_t seed = 200;
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 7, 3}, {64, 96, 80}}) {
    const std::vector<Dims> c_shapes = {Dims{0} /* no C */, Dims{}, Dims{n}, Dims{1, n},
                                        Dims{m, 1}, Dims{m, n}, Dims{1}};
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const Dims& cd : c_shapes) {
          ++seed;
          SCOPED_TRACE(seed_trace(seed) + " transA=" + std::to_string(ta) + " transB=" +
                       std::to_string(tb) + " C=" + dims_str(cd));
          const bool has_c = cd != Dims{0};
          const Dims ad = ta ? Dims{k, m} : Dims{m, k};
          const Dims bd = tb ? Dims{n, k} : Dims{k, n};
          auto a = Buf<T>::from_doubles(ad, random_values(m * k, seed));
          auto b = Buf<T>::from_doubles(bd, random_values(k * n, seed + 1));
          auto c = Buf<T>::from_doubles(has_c ? cd : Dims{}, random_values(has_c ? numel(cd) : 1, seed + 2));
          auto y = Buf<T>::output({m, n});
          AttrMap attrs;
          attrs.set("alpha", 0.5f);
          attrs.set("beta", -1.5f);
          attrs.set("transA", int64_t{ta});
          attrs.set("transB", int64_t{tb});
          std::vector<TensorView> in = {a.view(), b.view()};
          if (has_c) in.push_back(c.view());
          PT_ASSERT_OK(run_kernel("Gemm", dtype_of<T>(), in, {y.view()}, attrs));
          const std::vector<double> cv = c.values();
          const auto ref = gemm_ref(a.values(), b.values(), has_c ? &cv : nullptr, cd, ta, tb, m,
                                    n, k, 0.5, -1.5);
          expect_close(y, ref, "Gemm");
        }
  }
}

TYPED_TEST(GemmTest, DefaultsAndBetaZero) {
  using T = TypeParam;
  const int64_t m = 4, k = 6, n = 5;
  auto a = Buf<T>::from_doubles({m, k}, random_values(m * k, 301));
  auto b = Buf<T>::from_doubles({k, n}, random_values(k * n, 302));
  auto c = Buf<T>::from_doubles({n}, random_values(n, 303));
  const std::vector<double> cv = c.values();
  for (float beta : {1.0f, 0.0f}) {
    AttrMap attrs;
    if (beta != 1.0f) attrs.set("beta", beta);
    auto y = Buf<T>::output({m, n});
    PT_ASSERT_OK(run_kernel("Gemm", dtype_of<T>(), {a.view(), b.view(), c.view()}, {y.view()}, attrs));
    expect_close(y, gemm_ref(a.values(), b.values(), &cv, {n}, false, false, m, n, k, 1.0, beta),
                 "Gemm beta=" + std::to_string(beta));
  }
}

TYPED_TEST(GemmTest, GemmBadShapes) {
  using T = TypeParam;
  auto a = Buf<T>::from_doubles({3, 4}, random_values(12, 1));
  auto b = Buf<T>::from_doubles({5, 2}, random_values(10, 2));
  auto y = Buf<T>::output({3, 2});
  EXPECT_EQ(run_kernel("Gemm", dtype_of<T>(), {a.view(), b.view()}, {y.view()}).code(),
            StatusCode::kInvalidInput);
  auto b2 = Buf<T>::from_doubles({4, 2}, random_values(8, 2));
  auto c = Buf<T>::from_doubles({3, 3}, random_values(9, 3));
  EXPECT_EQ(run_kernel("Gemm", dtype_of<T>(), {a.view(), b2.view(), c.view()}, {y.view()}).code(),
            StatusCode::kInvalidInput);
}

struct MatMulCase {
  Dims a, b, y;
};

// Naive numpy matmul.
std::vector<double> matmul_ref(const std::vector<double>& av, const Dims& a_in,
                               const std::vector<double>& bv, const Dims& b_in) {
  Dims a = a_in.size() == 1 ? Dims{1, a_in[0]} : a_in;
  Dims b = b_in.size() == 1 ? Dims{b_in[0], 1} : b_in;
  const int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  Dims ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2), batch;
  EXPECT_TRUE(broadcast_dims(ab, bb, &batch));
  const int64_t nb = numel(batch);
  std::vector<double> y(nb * m * n);
  for (int64_t q = 0; q < nb; ++q) {
    const int64_t oa = broadcast_source(ab, batch, q) * m * k;
    const int64_t ob = broadcast_source(bb, batch, q) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[oa + i * k + p] * bv[ob + p * n + j];
        y[(q * m + i) * n + j] = s;
      }
  }
  return y;
}

TYPED_TEST(GemmTest, MatMulShapes) {
  using T = TypeParam;
  const std::vector<MatMulCase> cases = {
      {{6}, {6}, {}},
      {{6}, {6, 4}, {4}},
      {{3, 6}, {6}, {3}},
      {{3, 6}, {6, 4}, {3, 4}},
      {{2, 3, 5, 6}, {6, 4}, {2, 3, 5, 4}},
      {{2, 1, 5, 6}, {3, 6, 4}, {2, 3, 5, 4}},
      {{5, 6}, {2, 6, 4}, {2, 5, 4}},
      {{6}, {2, 6, 4}, {2, 4}},
      {{2, 5, 6}, {6}, {2, 5}},
      {{2, 5, 6}, {2, 6, 4}, {2, 5, 4}},
      {{1, 5, 6}, {1, 6, 4}, {1, 5, 4}},
      {{64, 70}, {70, 90}, {64, 90}},
  };
  uint32_t seed = 400;
  for (const MatMulCase& c : cases) {
    ++seed;
    SCOPED_TRACE(seed_trace(seed) + " A=" + dims_str(c.a) + " B=" + dims_str(c.b));
    auto a = Buf<T>::from_doubles(c.a, random_values(numel(c.a), seed));
    auto b = Buf<T>::from_doubles(c.b, random_values(numel(c.b), seed + 1));
    auto y = Buf<T>::output(c.y);
    PT_ASSERT_OK(run_kernel("MatMul", dtype_of<T>(), {a.view(), b.view()}, {y.view()}));
    expect_close(y, matmul_ref(a.values(), c.a, b.values(), c.b), "MatMul");
  }
}

TYPED_TEST(GemmTest, MatMulBadShapes) {
  using T = TypeParam;
  auto a = Buf<T>::from_doubles({3, 4}, random_values(12, 1));
  auto b = Buf<T>::from_doubles({5, 2}, random_values(10, 2));
  auto y = Buf<T>::output({3, 2});
  EXPECT_EQ(run_kernel("MatMul", dtype_of<T>(), {a.view(), b.view()}, {y.view()}).code(),
            StatusCode::kInvalidInput);
  auto a3 = Buf<T>::from_doubles({2, 3, 4}, random_values(24, 1));
  auto b3 = Buf<T>::from_doubles({3, 4, 2}, random_values(24, 2));
  auto y3 = Buf<T>::output({3, 3, 2});
  EXPECT_EQ(run_kernel("MatMul", dtype_of<T>(), {a3.view(), b3.view()}, {y3.view()}).code(),
            StatusCode::kInvalidInput);
}

}  // namespace
}  // namespace pt::test
