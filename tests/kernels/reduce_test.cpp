// ReduceSumToShape: X summed down to a broadcast-source shape, against a naive reference.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class ReduceTest : public KernelTest<T> {};
TYPED_TEST_SUITE(ReduceTest, FloatTypes);

struct ReduceCase {
  Dims x, y;
};

TYPED_TEST(ReduceTest, MatchesReference) {
  using T = TypeParam;
  const std::vector<ReduceCase> cases = {
      {{4, 5}, {4, 5}},       {{4, 5}, {5}},          {{4, 5}, {1, 5}},
      {{4, 5}, {4, 1}},       {{4, 5}, {}},           {{4, 5}, {1}},
      {{2, 3, 4, 5}, {3, 1, 1}}, {{2, 3, 4, 5}, {1, 3, 1, 5}}, {{2, 3, 4}, {2, 1, 4}},
      {{3, 2, 4}, {1, 1}},    {{500, 130}, {130}},    {{300, 200}, {300, 1}},
      {{2, 3, 4}, {1, 3, 4}}, {{7, 1, 3}, {1, 3}},    {{50, 40, 30}, {40, 1}},
  };
  uint32_t seed = 700;
  for (const ReduceCase& c : cases) {
    ++seed;
    SCOPED_TRACE(seed_trace(seed) + " " + dims_str(c.x) + " -> " + dims_str(c.y));
    auto x = Buf<T>::from_doubles(c.x, random_values(numel(c.x), seed));
    auto y = Buf<T>::output(c.y);
    PT_ASSERT_OK(run_kernel("ReduceSumToShape", dtype_of<T>(), {x.view()}, {y.view()}));
    std::vector<double> ref(numel(c.y), 0.0);
    for (int64_t i = 0; i < x.size(); ++i) ref[broadcast_source(c.y, c.x, i)] += x[i];
    expect_close(y, ref, "ReduceSumToShape");
  }
}

TYPED_TEST(ReduceTest, IncompatibleShape) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({4, 5}, random_values(20, 1));
  auto y = Buf<T>::output({3});
  EXPECT_EQ(run_kernel("ReduceSumToShape", dtype_of<T>(), {x.view()}, {y.view()}).code(),
            StatusCode::kInvalidInput);
}

}  // namespace
}  // namespace pt::test
