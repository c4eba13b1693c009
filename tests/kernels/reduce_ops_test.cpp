// ReduceSum / ReduceMean / ReduceMax over every axis subset of a 3-D tensor (row, column and
// general paths, threaded sizes too), ReduceMaxGrad's tie rule, and the variadic Sum / Mean with
// broadcasting: against naive double references with guard elements.
#include <algorithm>
#include <limits>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class ReduceOpsTest : public KernelTest<T> {};
TYPED_TEST_SUITE(ReduceOpsTest, FloatTypes);

// Naive reduction of x (dims d) over `axes` into the keepdims shape.
std::vector<double> reduce_ref(const std::vector<double>& x, const Dims& d, const std::vector<int64_t>& axes,
                               const std::string& op, Dims* kd) {
  *kd = d;
  for (int64_t a : axes) (*kd)[a] = 1;
  const int64_t m = numel(*kd);
  std::vector<double> acc(m, op == "ReduceMax" ? -std::numeric_limits<double>::infinity() : 0.0);
  for (int64_t i = 0; i < numel(d); ++i) {
    const int64_t k = broadcast_source(*kd, d, i);
    acc[k] = op == "ReduceMax" ? std::max(acc[k], x[i]) : acc[k] + x[i];
  }
  if (op == "ReduceMean")
    for (double& v : acc) v /= static_cast<double>(numel(d) / m);
  return acc;
}

TYPED_TEST(ReduceOpsTest, EveryAxisSubset) {
  using T = TypeParam;
  uint32_t seed = 21;
  for (const Dims& d : {Dims{3, 4, 5}, Dims{16, 64, 40}}) {
    const std::vector<double> xv = random_values(numel(d), seed++);
    auto x = Buf<T>::from_doubles(d, xv);
    const std::vector<double> xt = x.values();
    for (int mask = 0; mask < 8; ++mask) {
      std::vector<int64_t> axes;
      for (int a = 0; a < 3; ++a)
        if (mask & (1 << a)) axes.push_back(a);
      for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
        SCOPED_TRACE(std::string(op) + " " + dims_str(d) + " axes " + dims_str(Dims(axes)));
        Dims kd;
        const std::vector<double> ref = reduce_ref(xt, d, axes, op, &kd);
        auto y = Buf<T>::output(kd);
        AttrMap at;
        at.set("_axes", axes);
        PT_ASSERT_OK(run_kernel(op, dtype_of<T>(), {x.view()}, {y.view()}, at));
        expect_close(y, ref, op, Tol<T>::atol * 10, Tol<T>::rtol * 10);
      }
    }
  }
}

TYPED_TEST(ReduceOpsTest, ReduceMaxGradTieGoesToFirst) {
  using T = TypeParam;
  auto x = Buf<T>::from_doubles({2, 3}, {1, 3, 3, 2, 2, 2});
  auto y = Buf<T>::from_doubles({2, 1}, {3, 2});
  auto dy = Buf<T>::from_doubles({2, 1}, {10, 20});
  auto dx = Buf<T>::output({2, 3});
  AttrMap at;
  at.set("_axes", std::vector<int64_t>{1});
  PT_ASSERT_OK(run_kernel("ReduceMaxGrad", dtype_of<T>(), {dy.view(), x.view(), y.view()}, {dx.view()}, at));
  expect_close(dx, {0, 10, 0, 20, 0, 0}, "ReduceMaxGrad");
  // Over axis 0: columns.
  auto y0 = Buf<T>::from_doubles({3}, {2, 3, 3});
  auto dy0 = Buf<T>::from_doubles({3}, {1, 2, 3});
  auto dx0 = Buf<T>::output({2, 3});
  at.set("_axes", std::vector<int64_t>{0});
  PT_ASSERT_OK(run_kernel("ReduceMaxGrad", dtype_of<T>(), {dy0.view(), x.view(), y0.view()}, {dx0.view()}, at));
  expect_close(dx0, {0, 2, 3, 1, 0, 0}, "ReduceMaxGrad axis 0");
}

TYPED_TEST(ReduceOpsTest, SumAndMeanBroadcast) {
  using T = TypeParam;
  const Dims od{2, 3, 4};
  const std::vector<Dims> ins = {{2, 3, 4}, {4}, {3, 1}, {}};
  std::vector<Buf<T>> bufs;
  uint32_t seed = 31;
  for (const Dims& d : ins) bufs.push_back(Buf<T>::from_doubles(d, random_values(numel(d), seed++)));
  std::vector<TensorView> views;
  for (auto& b : bufs) views.push_back(b.view());
  std::vector<double> ref(24, 0.0);
  for (int64_t i = 0; i < 24; ++i)
    for (size_t k = 0; k < ins.size(); ++k) ref[i] += bufs[k][broadcast_source(ins[k], od, i)];
  auto y = Buf<T>::output(od);
  PT_ASSERT_OK(run_kernel("Sum", dtype_of<T>(), views, {y.view()}));
  expect_close(y, ref, "Sum");
  for (double& v : ref) v /= 4;
  auto m = Buf<T>::output(od);
  PT_ASSERT_OK(run_kernel("Mean", dtype_of<T>(), views, {m.view()}));
  expect_close(m, ref, "Mean");
}

TEST(ReduceOpsInt64, SumAndMax) {
  Buf<int64_t> x({2, 3}, {1, -5, 7, 2, 9, -1});
  AttrMap at;
  at.set("_axes", std::vector<int64_t>{1});
  auto s = Buf<int64_t>::output({2});
  PT_ASSERT_OK(run_kernel("ReduceSum", DType::kInt64, {x.view()}, {s.view()}, at));
  expect_close(s, {3, 10}, "ReduceSum int64");
  auto m = Buf<int64_t>::output({2});
  PT_ASSERT_OK(run_kernel("ReduceMax", DType::kInt64, {x.view()}, {m.view()}, at));
  expect_close(m, {7, 9}, "ReduceMax int64");
}

}  // namespace
}  // namespace pt::test
