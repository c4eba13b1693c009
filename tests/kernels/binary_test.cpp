// Add, Sub, Mul, Div with numpy broadcasting against a naive reference, float/double and int64.
#include <functional>
#include <limits>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class BinaryTest : public KernelTest<T> {};
TYPED_TEST_SUITE(BinaryTest, FloatTypes);

struct BinaryOp {
  const char* op;
  std::function<double(double, double)> ref;
};

const std::vector<BinaryOp>& binary_ops() {
  static const std::vector<BinaryOp> ops = {
      {"Add", [](double a, double b) { return a + b; }},
      {"Sub", [](double a, double b) { return a - b; }},
      {"Mul", [](double a, double b) { return a * b; }},
      {"Div", [](double a, double b) { return a / b; }},
  };
  return ops;
}

struct ShapePair {
  Dims a, b;
};

const std::vector<ShapePair>& shape_pairs() {
  static const std::vector<ShapePair> s = {
      {{2, 3, 4}, {2, 3, 4}},   {{2, 3, 4}, {4}},        {{4}, {2, 3, 4}},
      {{2, 1, 4}, {3, 1}},      {{}, {2, 3}},            {{2, 3}, {}},
      {{1}, {2, 3}},            {{5, 1, 3}, {1, 4, 1}},  {{2, 3, 4}, {2, 1, 4}},
      {{2, 3, 1}, {2, 1, 5}},   {{3, 1}, {1, 1}},        {{300, 200}, {200}},
      {{40, 1, 30}, {1, 50, 30}}, {{2, 3, 4, 5}, {3, 1, 5}}, {{0, 3}, {3}},
  };
  return s;
}

// Divisors away from zero: magnitudes in [0.5, 2] with random signs.
std::vector<double> divisor_values(int64_t n, uint32_t seed) {
  std::vector<double> v = random_values(n, seed, 0.5, 2.0);
  std::vector<double> sign = random_values(n, seed + 99);
  for (int64_t i = 0; i < n; ++i)
    if (sign[i] < 0) v[i] = -v[i];
  return v;
}

TYPED_TEST(BinaryTest, BroadcastingMatchesReference) {
  using T = TypeParam;
  uint32_t seed = 100;
  for (const ShapePair& sp : shape_pairs()) {
    Dims out;
    ASSERT_TRUE(broadcast_dims(sp.a, sp.b, &out));
    for (const BinaryOp& op : binary_ops()) {
      ++seed;
      SCOPED_TRACE(seed_trace(seed));
      auto a = Buf<T>::from_doubles(sp.a, random_values(numel(sp.a), seed));
      auto b = Buf<T>::from_doubles(sp.b, divisor_values(numel(sp.b), seed + 1));
      auto y = Buf<T>::output(out);
      PT_ASSERT_OK(run_kernel(op.op, dtype_of<T>(), {a.view(), b.view()}, {y.view()}));
      const int64_t n = numel(out);
      std::vector<double> ref(n);
      for (int64_t i = 0; i < n; ++i)
        ref[i] = op.ref(static_cast<double>(a[broadcast_source(sp.a, out, i)]),
                        static_cast<double>(b[broadcast_source(sp.b, out, i)]));
      expect_close(y, ref, std::string(op.op) + " " + dims_str(sp.a) + " " + dims_str(sp.b));
    }
  }
}

TYPED_TEST(BinaryTest, BadShapesAreInvalidInput) {
  using T = TypeParam;
  auto a = Buf<T>::from_doubles({2, 3}, random_values(6, 1));
  auto b = Buf<T>::from_doubles({4}, random_values(4, 2));
  auto y = Buf<T>::output({2, 3});
  EXPECT_EQ(run_kernel("Add", dtype_of<T>(), {a.view(), b.view()}, {y.view()}).code(),
            StatusCode::kInvalidInput);
  auto b3 = Buf<T>::from_doubles({3}, random_values(3, 2));
  auto y_wrong = Buf<T>::output({3, 3});
  EXPECT_EQ(run_kernel("Mul", dtype_of<T>(), {a.view(), b3.view()}, {y_wrong.view()}).code(),
            StatusCode::kInvalidInput);
}

TEST(BinaryInt64, BroadcastingAndTruncatingDivision) {
  auto a = Buf<int64_t>({2, 3}, {7, -7, 9, 0, 100, -1});
  auto b = Buf<int64_t>({3}, {2, 2, -4});
  const std::vector<std::pair<const char*, std::vector<double>>> want = {
      {"Add", {9, -5, 5, 2, 102, -5}},
      {"Sub", {5, -9, 13, -2, 98, 3}},
      {"Mul", {14, -14, -36, 0, 200, 4}},
      {"Div", {3, -3, -2, 0, 50, 0}},
  };
  for (const auto& [op, ref] : want) {
    auto y = Buf<int64_t>::output({2, 3});
    PT_ASSERT_OK(run_kernel(op, DType::kInt64, {a.view(), b.view()}, {y.view()}));
    expect_close(y, ref, op);
  }
  auto zero = Buf<int64_t>({1}, {0});
  auto y = Buf<int64_t>::output({2, 3});
  Status s = run_kernel("Div", DType::kInt64, {a.view(), zero.view()}, {y.view()});
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  EXPECT_NE(s.message().find("division by zero"), std::string::npos) << s.message();
}

// Overflowing int64 results wrap as two's complement (NumPy's), min / -1 included (it traps on
// x86 when computed as is); values from Python's exact integers mod 2^64.
TEST(BinaryInt64, OverflowWraps) {
  const int64_t mx = std::numeric_limits<int64_t>::max(), mn = std::numeric_limits<int64_t>::min();
  auto a = Buf<int64_t>({3}, {mx, mn, int64_t{1} << 62});
  auto b = Buf<int64_t>({3}, {1, -1, 4});
  const std::vector<std::pair<const char*, std::vector<int64_t>>> want = {
      {"Add", {mn, mx, (int64_t{1} << 62) + 4}},
      {"Sub", {mx - 1, mn + 1, (int64_t{1} << 62) - 4}},
      {"Mul", {mx, mn, 0}},
      {"Div", {mx, mn, int64_t{1} << 60}},
  };
  for (const auto& [op, ref] : want) {
    auto y = Buf<int64_t>::output({3});
    PT_ASSERT_OK(run_kernel(op, DType::kInt64, {a.view(), b.view()}, {y.view()}));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(y[i], ref[i]) << op << " element " << i;
  }
}

}  // namespace
}  // namespace pt::test
