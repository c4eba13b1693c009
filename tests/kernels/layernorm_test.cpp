// LayerNormalization and LayerNormalizationGrad against a naive double reference (float and
// double, guard elements), over leading and trailing axes, with and without B and the optional
// Mean / InvStdDev outputs; the threaded path on a larger tensor.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class LayerNormTest : public KernelTest<T> {};
TYPED_TEST_SUITE(LayerNormTest, FloatTypes);

TYPED_TEST(LayerNormTest, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  struct Case {
    Dims d;
    int64_t axis;
    bool bias;
  };
  uint32_t seed = 41;
  for (const Case& c : {Case{{2, 3, 4}, 2, true}, Case{{2, 3, 4}, 1, false}, Case{{5, 7}, 0, true},
                        Case{{64, 32, 64}, 2, true}}) {
    SCOPED_TRACE(dims_str(c.d) + " axis " + std::to_string(c.axis) + " " + seed_trace(seed));
    int64_t rows = 1, cols = 1;
    for (int64_t k = 0; k < static_cast<int64_t>(c.d.size()); ++k) (k < c.axis ? rows : cols) *= c.d[k];
    const double eps = static_cast<double>(1e-3f);  // the attribute is float32
    auto x = Buf<T>::from_doubles(c.d, random_values(rows * cols, seed++, -2, 2));
    auto g = Buf<T>::from_doubles({cols}, random_values(cols, seed++, 0.5, 1.5));
    auto b = Buf<T>::from_doubles({cols}, random_values(cols, seed++));
    auto dy = Buf<T>::from_doubles(c.d, random_values(rows * cols, seed++));
    std::vector<double> yr(rows * cols), mr(rows), ir(rows), dxr(rows * cols), dgr(cols, 0), dbr(cols, 0);
    for (int64_t r = 0; r < rows; ++r) {
      double m = 0, v = 0;
      for (int64_t j = 0; j < cols; ++j) m += x[r * cols + j];
      m /= cols;
      for (int64_t j = 0; j < cols; ++j) v += (x[r * cols + j] - m) * (x[r * cols + j] - m);
      const double inv = 1 / std::sqrt(v / cols + eps);
      mr[r] = m;
      ir[r] = inv;
      double sg = 0, sgx = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double xh = (x[r * cols + j] - m) * inv;
        yr[r * cols + j] = xh * g[j] + (c.bias ? b[j] : 0.0);
        sg += dy[r * cols + j] * g[j];
        sgx += dy[r * cols + j] * g[j] * xh;
        dgr[j] += dy[r * cols + j] * xh;
        dbr[j] += dy[r * cols + j];
      }
      for (int64_t j = 0; j < cols; ++j) {
        const double xh = (x[r * cols + j] - m) * inv;
        dxr[r * cols + j] = inv * (dy[r * cols + j] * g[j] - sg / cols - xh * sgx / cols);
      }
    }
    Dims sd = c.d;
    for (size_t k = c.axis; k < sd.size(); ++k) sd[k] = 1;
    auto y = Buf<T>::output(c.d);
    auto mean = Buf<T>::output(sd);
    auto inv = Buf<T>::output(sd);
    AttrMap at;
    at.set("axis", c.axis);
    at.set("epsilon", static_cast<float>(eps));
    std::vector<TensorView> ins = {x.view(), g.view()};
    if (c.bias) ins.push_back(b.view());
    PT_ASSERT_OK(run_kernel("LayerNormalization", dtype_of<T>(), ins, {y.view(), mean.view(), inv.view()}, at));
    const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
    expect_close(y, yr, "Y", tol, tol);
    expect_close(mean, mr, "Mean", tol, tol);
    expect_close(inv, ir, "InvStdDev", tol, tol);
    auto y1 = Buf<T>::output(c.d);  // without the optional outputs
    PT_ASSERT_OK(run_kernel("LayerNormalization", dtype_of<T>(), ins, {y1.view()}, at));
    expect_close(y1, yr, "Y alone", tol, tol);
    auto dx = Buf<T>::output(c.d);
    auto dg = Buf<T>::output({cols});
    auto db = Buf<T>::output({cols});
    PT_ASSERT_OK(run_kernel("LayerNormalizationGrad", dtype_of<T>(), {dy.view(), x.view(), g.view()},
                            {dx.view(), dg.view(), db.view()}, at));
    expect_close(dx, dxr, "dX", tol, tol);
    expect_close(dg, dgr, "dScale", tol * 10, tol);
    expect_close(db, dbr, "dB", tol * 10, tol);
  }
}

}  // namespace
}  // namespace pt::test
