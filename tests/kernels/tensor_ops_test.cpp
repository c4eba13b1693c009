// Data-movement CPU kernels against naive references with guard elements: Concat, Split, Slice
// (negative steps) and SliceGrad, Expand, Tile, Pad in its three modes, Gather (int64 and int32
// indices) and GatherGrad, Where, the comparisons, Not and Cast. Backward ops are also checked as
// adjoints of their forward ops: <F(x), dy> == <x, F^T(dy)>.
#include <numeric>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class TensorOpsTest : public KernelTest<T> {};
TYPED_TEST_SUITE(TensorOpsTest, FloatTypes);

std::vector<int64_t> coords(int64_t i, const Dims& d) {
  std::vector<int64_t> c(d.size());
  for (size_t k = d.size(); k-- > 0;) {
    c[k] = i % d[k];
    i /= d[k];
  }
  return c;
}
int64_t linear(const std::vector<int64_t>& c, const Dims& d) {
  int64_t i = 0;
  for (size_t k = 0; k < d.size(); ++k) i = i * d[k] + c[k];
  return i;
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

// Bool tensors (std::vector<bool> has no data()): one byte per element, kGuard guard bytes of 7.
struct Bools {
  Bools(Dims d, const std::vector<int>& vals) : dims(std::move(d)), bytes(vals.size() + kGuard, 7) {
    for (size_t i = 0; i < vals.size(); ++i) bytes[i] = vals[i] != 0;
  }
  static Bools output(Dims d) {
    Bools b(d, {});
    b.bytes.assign(static_cast<size_t>(numel(d)) + kGuard, 7);
    return b;
  }
  TensorView view() { return TensorView{bytes.data(), DType::kBool, dims}; }
  bool operator[](int64_t i) const { return bytes[i] == 1; }
  bool guards_ok() const {
    for (int64_t i = numel(dims); i < numel(dims) + kGuard; ++i)
      if (bytes[i] != 7) return false;
    return true;
  }
  Dims dims;
  std::vector<char> bytes;
};

TYPED_TEST(TensorOpsTest, ConcatAndSplit) {
  using T = TypeParam;
  const Dims ad{2, 1, 3}, bd{2, 4, 3}, od{2, 5, 3};
  auto a = Buf<T>::from_doubles(ad, random_values(6, 1));
  auto b = Buf<T>::from_doubles(bd, random_values(24, 2));
  auto y = Buf<T>::output(od);
  AttrMap at;
  at.set("axis", int64_t{1});
  PT_ASSERT_OK(run_kernel("Concat", dtype_of<T>(), {a.view(), b.view()}, {y.view()}, at));
  std::vector<double> ref(30);
  for (int64_t i = 0; i < 30; ++i) {
    auto c = coords(i, od);
    if (c[1] < 1) ref[i] = a[linear(c, ad)];
    else { c[1] -= 1; ref[i] = b[linear(c, bd)]; }
  }
  expect_close(y, ref, "Concat");
  auto s0 = Buf<T>::output(ad);
  auto s1 = Buf<T>::output(bd);
  PT_ASSERT_OK(run_kernel("Split", dtype_of<T>(), {y.view()}, {s0.view(), s1.view()}, at));
  expect_close(s0, a.values(), "Split 0");
  expect_close(s1, b.values(), "Split 1");
}

TYPED_TEST(TensorOpsTest, SliceNegativeStepsAndGrad) {
  using T = TypeParam;
  const Dims xd{4, 3, 5};
  // x[3:0:-2, :, 4::-3] -> dims [2, 3, 2]
  const Dims od{2, 3, 2};
  const std::vector<int64_t> starts{3, 0, 4}, steps{-2, 1, -3};
  auto x = Buf<T>::from_doubles(xd, random_values(60, 3));
  auto y = Buf<T>::output(od);
  AttrMap at;
  at.set("_starts", starts);
  at.set("_steps", steps);
  PT_ASSERT_OK(run_kernel("Slice", dtype_of<T>(), {x.view()}, {y.view()}, at));
  std::vector<double> ref(12);
  for (int64_t i = 0; i < 12; ++i) {
    auto c = coords(i, od);
    for (size_t k = 0; k < 3; ++k) c[k] = starts[k] + c[k] * steps[k];
    ref[i] = x[linear(c, xd)];
  }
  expect_close(y, ref, "Slice");
  auto dy = Buf<T>::from_doubles(od, random_values(12, 4));
  auto dx = Buf<T>::output(xd);
  PT_ASSERT_OK(run_kernel("SliceGrad", dtype_of<T>(), {dy.view()}, {dx.view()}, at));
  EXPECT_TRUE(dx.guards_ok());
  EXPECT_NEAR(dot(y.values(), dy.values()), dot(x.values(), dx.values()), 1e-5);
  // With the gradient so far as a second input: that gradient plus the same scatter, element by element.
  auto acc = Buf<T>::from_doubles(xd, random_values(60, 5));
  auto dx2 = Buf<T>::output(xd);
  PT_ASSERT_OK(run_kernel("SliceGrad", dtype_of<T>(), {dy.view(), acc.view()}, {dx2.view()}, at));
  std::vector<double> want(60);
  for (int64_t i = 0; i < 60; ++i) want[i] = acc[i] + dx[i];
  expect_close(dx2, want, "SliceGrad with an accumulated gradient");
  auto bad = Buf<T>::from_doubles({4, 3, 4}, random_values(48, 6));
  EXPECT_EQ(run_kernel("SliceGrad", dtype_of<T>(), {dy.view(), bad.view()}, {dx2.view()}, at).code(), StatusCode::kInvalidInput);
}

TYPED_TEST(TensorOpsTest, ExpandAndTile) {
  using T = TypeParam;
  const Dims xd{3, 1}, ed{2, 3, 4};
  auto x = Buf<T>::from_doubles(xd, random_values(3, 5));
  auto y = Buf<T>::output(ed);
  PT_ASSERT_OK(run_kernel("Expand", dtype_of<T>(), {x.view()}, {y.view()}));
  std::vector<double> ref(24);
  for (int64_t i = 0; i < 24; ++i) ref[i] = x[broadcast_source(xd, ed, i)];
  expect_close(y, ref, "Expand");
  const Dims td{2, 3}, tod{4, 9};
  auto t = Buf<T>::from_doubles(td, random_values(6, 6));
  auto ty = Buf<T>::output(tod);
  AttrMap at;
  at.set("_repeats", std::vector<int64_t>{2, 3});
  PT_ASSERT_OK(run_kernel("Tile", dtype_of<T>(), {t.view()}, {ty.view()}, at));
  std::vector<double> tref(36);
  for (int64_t i = 0; i < 36; ++i) {
    auto c = coords(i, tod);
    tref[i] = t[linear({c[0] % 2, c[1] % 3}, td)];
  }
  expect_close(ty, tref, "Tile");
}

TYPED_TEST(TensorOpsTest, PadModesAndGrad) {
  using T = TypeParam;
  const Dims xd{2, 3, 4};
  const std::vector<int64_t> pads{1, 2, 0, 0, 2, 3};  // begins, ends
  const Dims od{3, 7, 7};
  auto x = Buf<T>::from_doubles(xd, random_values(24, 7));
  for (const char* mode : {"constant", "reflect", "edge"}) {
    SCOPED_TRACE(mode);
    AttrMap at;
    at.set("_pads", pads);
    at.set("mode", std::string(mode));
    at.set("_value", 1.25f);
    auto y = Buf<T>::output(od);
    PT_ASSERT_OK(run_kernel("Pad", dtype_of<T>(), {x.view()}, {y.view()}, at));
    std::vector<double> ref(numel(od));
    for (int64_t i = 0; i < numel(od); ++i) {
      auto c = coords(i, od);
      bool outside = false;
      for (size_t k = 0; k < 3; ++k) {
        int64_t s = c[k] - pads[k];
        const int64_t d = xd[k];
        if (std::string(mode) == "constant") outside |= s < 0 || s >= d;
        else if (std::string(mode) == "edge") s = std::clamp<int64_t>(s, 0, d - 1);
        else while (s < 0 || s >= d) s = s < 0 ? -s : 2 * (d - 1) - s;
        c[k] = s;
      }
      ref[i] = outside ? 1.25 : x[linear(c, xd)];
    }
    expect_close(y, ref, std::string("Pad ") + mode);
    auto dy = Buf<T>::from_doubles(od, random_values(numel(od), 8));
    auto dx = Buf<T>::output(xd);
    PT_ASSERT_OK(run_kernel("PadGrad", dtype_of<T>(), {dy.view()}, {dx.view()}, at));
    EXPECT_TRUE(dx.guards_ok());
    // Adjoint of the linear part (value 0).
    std::vector<double> lin = ref;
    for (int64_t i = 0; i < numel(od); ++i)
      if (std::string(mode) == "constant" && ref[i] == 1.25) lin[i] = 0;
    EXPECT_NEAR(dot(lin, dy.values()), dot(x.values(), dx.values()), 1e-4);
  }
}

TYPED_TEST(TensorOpsTest, GatherAndScatterAddGrad) {
  using T = TypeParam;
  const Dims dd{5, 3}, id{2, 3}, od{2, 3, 3};
  auto d = Buf<T>::from_doubles(dd, random_values(15, 9));
  Buf<int64_t> idx(id, {4, 0, 4, -1, 2, 1});
  auto y = Buf<T>::output(od);
  PT_ASSERT_OK(run_kernel("Gather", dtype_of<T>(), {d.view(), idx.view()}, {y.view()}));
  std::vector<double> ref(18);
  for (int64_t i = 0; i < 18; ++i) {
    int64_t k = idx[i / 3];
    if (k < 0) k += 5;
    ref[i] = d[k * 3 + i % 3];
  }
  expect_close(y, ref, "Gather");
  auto dy = Buf<T>::from_doubles(od, random_values(18, 10));
  auto dg = Buf<T>::output(dd);
  PT_ASSERT_OK(run_kernel("GatherGrad", dtype_of<T>(), {dy.view(), idx.view()}, {dg.view()}));
  std::vector<double> gref(15, 0.0);
  for (int64_t i = 0; i < 18; ++i) {
    int64_t k = idx[i / 3];
    if (k < 0) k += 5;
    gref[k * 3 + i % 3] += dy[i];
  }
  expect_close(dg, gref, "GatherGrad (row 4 gathered twice, row 3 never)");
  // int32 indices along axis 1.
  Buf<int32_t> i32({2}, {2, 0});
  auto y1 = Buf<T>::output({5, 2});
  AttrMap at;
  at.set("axis", int64_t{1});
  PT_ASSERT_OK(run_kernel("Gather", dtype_of<T>(), {d.view(), i32.view()}, {y1.view()}, at));
  std::vector<double> r1(10);
  for (int64_t i = 0; i < 10; ++i) r1[i] = d[(i / 2) * 3 + (i % 2 ? 0 : 2)];
  expect_close(y1, r1, "Gather axis 1 int32");
  Buf<int64_t> bad({1}, {5});
  auto yb = Buf<T>::output({1, 3});
  EXPECT_FALSE(run_kernel("Gather", dtype_of<T>(), {d.view(), bad.view()}, {yb.view()}).is_ok());
}

TYPED_TEST(TensorOpsTest, WhereBroadcast) {
  using T = TypeParam;
  const Dims cd{2, 1}, xd{3}, yd{2, 3};
  Bools c(cd, {1, 0});
  auto a = Buf<T>::from_doubles(xd, {1, 2, 3});
  auto b = Buf<T>::from_doubles(yd, {10, 20, 30, 40, 50, 60});
  auto y = Buf<T>::output(yd);
  PT_ASSERT_OK(run_kernel("Where", DType::kBool, {c.view(), a.view(), b.view()}, {y.view()}));
  expect_close(y, {1, 2, 3, 40, 50, 60}, "Where");
}

TYPED_TEST(TensorOpsTest, ComparisonsNotAndCast) {
  using T = TypeParam;
  auto a = Buf<T>::from_doubles({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = Buf<T>::from_doubles({3}, {2, 2, 7});
  const std::vector<std::pair<const char*, std::vector<double>>> cases = {
      {"Equal", {0, 1, 0, 0, 0, 0}}, {"Less", {1, 0, 1, 0, 0, 1}}, {"Greater", {0, 0, 0, 1, 1, 0}}};
  for (const auto& [op, want] : cases) {
    auto y = Bools::output({2, 3});
    PT_ASSERT_OK(run_kernel(op, dtype_of<T>(), {a.view(), b.view()}, {y.view()}));
    EXPECT_TRUE(y.guards_ok()) << op;
    for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], want[i] != 0) << op << " element " << i;
  }
  Bools m({3}, {1, 0, 1});
  auto n = Bools::output({3});
  PT_ASSERT_OK(run_kernel("Not", DType::kBool, {m.view()}, {n.view()}));
  EXPECT_TRUE(!n[0] && n[1] && !n[2] && n.guards_ok());
  auto src = Buf<T>::from_doubles({4}, {-1.75, 0, 2.5, 3});
  auto i64 = Buf<int64_t>::output({4});
  PT_ASSERT_OK(run_kernel("Cast", dtype_of<T>(), {src.view()}, {i64.view()}));
  expect_close(i64, {-1, 0, 2, 3}, "Cast to int64 truncates");
  auto bl = Bools::output({4});
  PT_ASSERT_OK(run_kernel("Cast", dtype_of<T>(), {src.view()}, {bl.view()}));
  EXPECT_TRUE(bl[0] && !bl[1] && bl[2] && bl[3] && bl.guards_ok());
  auto back = Buf<T>::output({4});
  PT_ASSERT_OK(run_kernel("Cast", DType::kInt64, {i64.view()}, {back.view()}));
  expect_close(back, {-1, 0, 2, 3}, "Cast int64 back");
}

TEST(TensorOpsInt, MovesOnInt64AndBool) {
  Buf<int64_t> a({2, 2}, {1, 2, 3, 4});
  auto y = Buf<int64_t>::output({2, 4});
  AttrMap at;
  at.set("_repeats", std::vector<int64_t>{1, 2});
  PT_ASSERT_OK(run_kernel("Tile", DType::kInt64, {a.view()}, {y.view()}, at));
  expect_close(y, {1, 2, 1, 2, 3, 4, 3, 4}, "Tile int64");
  Bools m({1, 2}, {1, 0});
  auto e = Bools::output({3, 2});
  PT_ASSERT_OK(run_kernel("Expand", DType::kBool, {m.view()}, {e.view()}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(e[i], i % 2 == 0);
  EXPECT_TRUE(e.guards_ok());
}

}  // namespace
}  // namespace pt::test
