// GatherND, GatherNDGrad, ScatterND and ScatterElements (kernels/cpu/scatter_ops.cpp) against naive
// double-precision loops written out per case, with guard elements after every output; indices out
// of range are errors, not writes.
#include <gtest/gtest.h>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class ScatterOpsTest : public KernelTest<T> {};
TYPED_TEST_SUITE(ScatterOpsTest, FloatTypes);

Buf<int64_t> ints(Dims d, std::vector<int64_t> v) { return Buf<int64_t>(std::move(d), v); }

TYPED_TEST(ScatterOpsTest, GatherNDBatchDims1) {
  using T = TypeParam;
  const auto xv = random_values(2 * 3 * 4, 81);
  auto x = Buf<T>::from_doubles({2, 3, 4}, xv);
  auto idx = ints({2, 2, 1}, {2, -3, 1, 1});  // batch 0: rows 2, 0; batch 1: rows 1, 1
  auto y = Buf<T>::output({2, 2, 4});
  AttrMap a;
  a.set("batch_dims", int64_t{1});
  PT_ASSERT_OK(run_kernel("GatherND", dtype_of<T>(), {x.view(), idx.view()}, {y.view()}, a));
  const int64_t rows[2][2] = {{2, 0}, {1, 1}};
  std::vector<double> ref;
  for (int b = 0; b < 2; ++b)
    for (int q = 0; q < 2; ++q)
      for (int e = 0; e < 4; ++e) ref.push_back(static_cast<double>(static_cast<T>(xv[(b * 3 + rows[b][q]) * 4 + e])));
  expect_close(y, ref, "GatherND");

  // Its backward: the same slices receive dY, the repeated row twice.
  const auto dyv = random_values(16, 82);
  auto dy = Buf<T>::from_doubles({2, 2, 4}, dyv);
  auto dx = Buf<T>::output({2, 3, 4});
  PT_ASSERT_OK(run_kernel("GatherNDGrad", dtype_of<T>(), {dy.view(), idx.view()}, {dx.view()}, a));
  std::vector<double> dref(24, 0.0);
  for (int b = 0; b < 2; ++b)
    for (int q = 0; q < 2; ++q)
      for (int e = 0; e < 4; ++e)
        dref[(b * 3 + rows[b][q]) * 4 + e] += static_cast<double>(static_cast<T>(dyv[(b * 2 + q) * 4 + e]));
  expect_close(dx, dref, "GatherNDGrad", 1e-6, 1e-6);
}

TYPED_TEST(ScatterOpsTest, ScatterNDTuplesOfTwo) {
  using T = TypeParam;
  const auto xv = random_values(2 * 3 * 4, 83), uv = random_values(2 * 4, 84);
  auto x = Buf<T>::from_doubles({2, 3, 4}, xv);
  auto u = Buf<T>::from_doubles({2, 4}, uv);
  auto idx = ints({2, 2}, {1, 2, 0, -1});  // (1, 2) and (0, 2)
  auto y = Buf<T>::output({2, 3, 4});
  PT_ASSERT_OK(run_kernel("ScatterND", dtype_of<T>(), {x.view(), idx.view(), u.view()}, {y.view()}));
  std::vector<double> ref;
  for (double v : xv) ref.push_back(static_cast<double>(static_cast<T>(v)));
  for (int e = 0; e < 4; ++e) {
    ref[(1 * 3 + 2) * 4 + e] = static_cast<double>(static_cast<T>(uv[e]));
    ref[(0 * 3 + 2) * 4 + e] = static_cast<double>(static_cast<T>(uv[4 + e]));
  }
  expect_close(y, ref, "ScatterND");
}

TYPED_TEST(ScatterOpsTest, ScatterElementsAxis0) {
  using T = TypeParam;
  const auto xv = random_values(3 * 2, 85), uv = random_values(2 * 2, 86);
  auto x = Buf<T>::from_doubles({3, 2}, xv);
  auto u = Buf<T>::from_doubles({2, 2}, uv);
  auto idx = ints({2, 2}, {2, 0, 1, 2});
  auto y = Buf<T>::output({3, 2});
  AttrMap a;
  a.set("_axis", int64_t{0});
  PT_ASSERT_OK(run_kernel("ScatterElements", dtype_of<T>(), {x.view(), idx.view(), u.view()}, {y.view()}, a));
  std::vector<double> ref;
  for (double v : xv) ref.push_back(static_cast<double>(static_cast<T>(v)));
  const int64_t iv[4] = {2, 0, 1, 2};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) ref[iv[i * 2 + j] * 2 + j] = static_cast<double>(static_cast<T>(uv[i * 2 + j]));
  expect_close(y, ref, "ScatterElements");
}

TYPED_TEST(ScatterOpsTest, IndicesOutOfRangeAreErrors) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({4, 2}, random_values(8, 87));
  auto u = Buf<T>::from_doubles({1, 2}, random_values(2, 88));
  auto idx = ints({1, 1}, {4});
  auto y = Buf<T>::output({4, 2});
  Status st = run_kernel("ScatterND", dtype_of<T>(), {x.view(), idx.view(), u.view()}, {y.view()});
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.message();
  EXPECT_TRUE(y.guards_ok());
  auto g = Buf<T>::output({1, 2});
  auto bad = ints({1, 1}, {-5});
  EXPECT_FALSE(run_kernel("GatherND", dtype_of<T>(), {x.view(), bad.view()}, {g.view()}).is_ok());
  EXPECT_TRUE(g.guards_ok());
}

}  // namespace
}  // namespace pt::test
