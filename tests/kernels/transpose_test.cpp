// Transpose against a naive index permutation: 2-D (blocked path), batched 2-D, general N-D,
// size-1 dims, a size above the OpenMP threshold, and int64.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class TransposeTest : public KernelTest<T> {};
TYPED_TEST_SUITE(TransposeTest, FloatTypes);

template <typename T>
std::vector<double> transpose_ref(const Buf<T>& x, const std::vector<int64_t>& perm, Dims* out) {
  const Dims& d = x.dims();
  const int r = static_cast<int>(d.size());
  out->assign(r, 0);
  for (int k = 0; k < r; ++k) (*out)[k] = d[perm[k]];
  const Dims is = row_major_strides(d);
  const int64_t n = x.size();
  std::vector<double> y(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, src = 0;
    for (int k = r - 1; k >= 0; --k) {
      const int64_t idx = rem % (*out)[k];
      rem /= (*out)[k];
      src += idx * is[perm[k]];
    }
    y[i] = static_cast<double>(x[src]);
  }
  return y;
}

struct TransposeCase {
  Dims dims;
  std::vector<int64_t> perm;
};

template <typename T>
void check_transposes(const std::vector<TransposeCase>& cases, uint32_t seed) {
  for (const TransposeCase& c : cases) {
    ++seed;
    SCOPED_TRACE(seed_trace(seed) + " dims=" + dims_str(c.dims) + " perm=" + dims_str(c.perm));
    std::vector<double> v = random_values(numel(c.dims), seed, -100, 100);
    if constexpr (std::is_integral_v<T>)
      for (double& e : v) e = std::round(e);
    auto x = Buf<T>::from_doubles(c.dims, v);
    Dims out;
    const auto ref = transpose_ref(x, c.perm, &out);
    auto y = Buf<T>::output(out);
    AttrMap attrs;
    attrs.set("perm", c.perm);
    PT_ASSERT_OK(run_kernel("Transpose", dtype_of<T>(), {x.view()}, {y.view()}, attrs));
    expect_close(y, ref, "Transpose", 0, 0);
  }
}

const std::vector<TransposeCase>& cases() {
  static const std::vector<TransposeCase> c = {
      {{37, 45}, {1, 0}},          {{300, 200}, {1, 0}},       {{3, 4, 5}, {0, 1, 2}},
      {{3, 4, 5}, {0, 2, 1}},      {{3, 4, 5}, {1, 0, 2}},     {{3, 4, 5}, {1, 2, 0}},
      {{3, 4, 5}, {2, 0, 1}},      {{3, 4, 5}, {2, 1, 0}},     {{2, 3, 4, 5}, {0, 2, 3, 1}},
      {{2, 3, 4, 5}, {3, 1, 0, 2}}, {{1, 5, 1, 7}, {3, 2, 1, 0}}, {{4, 33, 65}, {0, 2, 1}},
      {{64, 48, 40}, {0, 2, 1}},   {{8, 16, 300}, {2, 0, 1}},   {{}, {}},
      {{6}, {0}},
      // A Transformer's attention heads (4 x 4 register tiles and their edges) and its weights.
      {{16, 128, 16}, {1, 2, 0}},  {{16, 128, 16}, {1, 0, 2}}, {{192, 64}, {1, 0}},
      {{7, 130, 5}, {1, 2, 0}},    {{13, 9}, {1, 0}},          {{5, 3, 6}, {2, 1, 0}},
  };
  return c;
}

TYPED_TEST(TransposeTest, MatchesReference) { check_transposes<TypeParam>(cases(), 600); }

TEST(TransposeInt64, MatchesReference) { check_transposes<int64_t>(cases(), 650); }

TYPED_TEST(TransposeTest, BadPerm) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({2, 3}, random_values(6, 1));
  auto y = Buf<T>::output({3, 2});
  AttrMap attrs;
  attrs.set("perm", std::vector<int64_t>{0, 0});
  EXPECT_EQ(run_kernel("Transpose", dtype_of<T>(), {x.view()}, {y.view()}, attrs).code(),
            StatusCode::kInvalidInput);
}

}  // namespace
}  // namespace pt::test
