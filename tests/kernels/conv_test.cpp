// Conv, ConvGradInput, ConvGradWeight and ConvGradBias against naive double-precision loops, in
// float (oneDNN) and double (im2col + GEMM): 1-D, 2-D and 3-D windows, groups and depthwise,
// strides, dilations, asymmetric pads, with and without bias; guard elements after every output.
#include <array>
#include <chrono>
#include <iostream>
#include <thread>
#include <vector>

#include <omp.h>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

struct ConvCase {
  const char* label;
  Dims x, w;
  int64_t group;
  std::vector<int64_t> strides, dilations, pads;
  bool bias;
};

// Spatial dims right-aligned into 3 slots, as the kernels do.
struct Geo {
  int64_t n, c, m, g, cg, mg;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1}, pb{0, 0, 0}, pe{0, 0, 0};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};

Geo geo(const ConvCase& cc) {
  Geo g{};
  const size_t nd = cc.x.size() - 2, off = 3 - nd;
  g.n = cc.x[0];
  g.c = cc.x[1];
  g.m = cc.w[0];
  g.g = cc.group;
  g.cg = g.c / g.g;
  g.mg = g.m / g.g;
  for (size_t i = 0; i < nd; ++i) {
    g.in[off + i] = cc.x[2 + i];
    g.k[off + i] = cc.w[2 + i];
    g.s[off + i] = cc.strides[i];
    g.d[off + i] = cc.dilations[i];
    g.pb[off + i] = cc.pads[i];
    g.pe[off + i] = cc.pads[nd + i];
    g.out[off + i] = (g.in[off + i] + g.pb[off + i] + g.pe[off + i] - g.d[off + i] * (g.k[off + i] - 1) - 1) /
                         g.s[off + i] + 1;
  }
  return g;
}

Dims out_dims(const ConvCase& cc, const Geo& g) {
  Dims y = {g.n, g.m};
  for (size_t i = 3 - (cc.x.size() - 2); i < 3; ++i) y.push_back(g.out[i]);
  return y;
}

// fn(x_index, w_index, y_index) for every term of the convolution sum.
template <typename Fn>
void for_each_term(const Geo& g, Fn&& fn) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t m = 0; m < g.m; ++m) {
      const int64_t grp = m / g.mg;
      for (int64_t o = 0; o < g.out_size(); ++o) {
        const int64_t od = o / (g.out[1] * g.out[2]), oh = (o / g.out[2]) % g.out[1], ow = o % g.out[2];
        for (int64_t ci = 0; ci < g.cg; ++ci)
          for (int64_t kk = 0; kk < g.k_size(); ++kk) {
            const int64_t kd = kk / (g.k[1] * g.k[2]), kh = (kk / g.k[2]) % g.k[1], kw = kk % g.k[2];
            const int64_t id = od * g.s[0] - g.pb[0] + kd * g.d[0];
            const int64_t ih = oh * g.s[1] - g.pb[1] + kh * g.d[1];
            const int64_t iw = ow * g.s[2] - g.pb[2] + kw * g.d[2];
            if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || iw < 0 || iw >= g.in[2]) continue;
            const int64_t xi = ((n * g.c + grp * g.cg + ci) * g.in[0] + id) * g.in[1] * g.in[2] + ih * g.in[2] + iw;
            const int64_t wi = (m * g.cg + ci) * g.k_size() + kk;
            fn(xi, wi, (n * g.m + m) * g.out_size() + o);
          }
      }
    }
}

AttrMap conv_attrs(const ConvCase& cc) {
  AttrMap a;
  a.set("kernel_shape", std::vector<int64_t>(cc.w.begin() + 2, cc.w.end()));
  a.set("strides", cc.strides);
  a.set("dilations", cc.dilations);
  a.set("pads", cc.pads);
  a.set("group", cc.group);
  return a;
}

std::vector<ConvCase> cases() {
  return {
      {"1-D", {2, 3, 11}, {4, 3, 3}, 1, {1}, {1}, {0, 0}, true},
      {"1-D stride 2 dilation 2 pads", {2, 4, 13}, {6, 2, 3}, 2, {2}, {2}, {1, 2}, false},
      {"2-D plain", {2, 3, 7, 6}, {5, 3, 3, 3}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, true},
      {"2-D pads 1", {2, 3, 7, 6}, {4, 3, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, false},
      {"2-D asymmetric pads, strides", {1, 2, 9, 8}, {3, 2, 3, 2}, 1, {2, 3}, {1, 1}, {0, 2, 1, 1}, true},
      {"2-D dilations", {2, 2, 9, 9}, {3, 2, 3, 3}, 1, {1, 1}, {2, 3}, {2, 1, 0, 3}, true},
      {"2-D groups 2", {2, 4, 6, 6}, {6, 2, 3, 3}, 2, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      {"2-D depthwise", {2, 6, 7, 7}, {6, 1, 3, 3}, 6, {2, 2}, {1, 1}, {1, 1, 1, 1}, true},
      {"2-D depthwise multiplier 2", {1, 3, 6, 5}, {6, 1, 3, 3}, 3, {1, 1}, {1, 1}, {1, 0, 1, 2}, false},
      {"2-D 1x1", {3, 8, 5, 5}, {4, 8, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, true},
      {"2-D kernel larger than stride, pads > kernel/2", {1, 1, 5, 5}, {2, 1, 2, 2}, 1, {3, 3}, {1, 1}, {1, 1, 1, 1}, true},
      {"3-D", {1, 2, 5, 4, 6}, {3, 2, 2, 3, 2}, 1, {1, 2, 1}, {1, 1, 2}, {1, 0, 0, 0, 1, 1}, true},
      {"2-D one output position, 3x3 over 1x1 (ResNet layer4)", {3, 8, 1, 1}, {5, 8, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      {"2-D one output position, stride 2 over 2x2", {2, 6, 2, 2}, {4, 6, 3, 3}, 1, {2, 2}, {1, 1}, {1, 1, 1, 1}, false},
      {"2-D one output position, no padding", {2, 3, 3, 3}, {4, 3, 3, 3}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, true},
      {"1-D one output position, dilation 2", {2, 3, 3}, {2, 3, 3}, 1, {1}, {2}, {1, 1}, false},
      {"2-D one output position (threaded)", {32, 128, 1, 1}, {96, 128, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, false},
      {"2-D larger (threaded)", {4, 16, 16, 16}, {32, 16, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      // 2 to 4 output positions, a spatial kernel, N * OUT >= 32 and C * K >= 256: float's dW is one
      // GEMM over the samples (grad_weight_tiny_map; one position is conv_point's).
      {"2-D 2x2 maps, 3x3 pads 1 (tiny-map dW, threaded)", {32, 32, 2, 2}, {24, 32, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      {"2-D 2x2 kernel over 3x3, no pads (tiny-map dW)", {32, 64, 3, 3}, {16, 64, 2, 2}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, false},
      {"2-D dilation 2 onto 1x2, six taps all padding (tiny-map dW)", {32, 32, 1, 4}, {4, 32, 3, 3}, 1, {1, 1}, {1, 2}, {1, 1, 1, 1}, true},
      // Few input taps over many output positions: float's dW takes grad_weight_few_rows.
      {"2-D few taps (LeNet's first layer, threaded)", {8, 1, 28, 28}, {6, 1, 5, 5}, 1, {1, 1}, {1, 1}, {2, 2, 2, 2}, true},
      {"2-D few taps, RGB 3x3 stride 2", {12, 3, 40, 40}, {8, 3, 3, 3}, 1, {2, 2}, {1, 1}, {1, 1, 0, 1}, false},
      {"1-D few taps, dilation 2", {16, 2, 300}, {4, 2, 5}, 1, {1}, {2}, {2, 1}, true},
      // Depthwise: float's dW takes grad_weight_depthwise, by channel blocks up to 128 x 128 output
      // positions (a last block with unused lanes, multipliers 2 and 3) and by rows above.
      {"2-D depthwise over 1x1 (one live tap, threaded)", {32, 96, 1, 1}, {96, 1, 3, 3}, 96, {1, 1}, {1, 1}, {1, 1, 1, 1}, false},
      {"2-D depthwise stride 2 over 2x2", {4, 8, 2, 2}, {8, 1, 3, 3}, 8, {2, 2}, {1, 1}, {1, 1, 1, 1}, true},
      {"2-D depthwise stride 2, odd map, asymmetric pads", {3, 5, 9, 7}, {10, 1, 3, 3}, 5, {2, 2}, {1, 1}, {1, 0, 2, 1}, false},
      {"2-D depthwise 8x8 (threaded)", {16, 64, 8, 8}, {64, 1, 3, 3}, 64, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      {"2-D depthwise 5x5 dilation 2", {2, 4, 11, 10}, {4, 1, 5, 5}, 4, {1, 1}, {2, 2}, {4, 4, 3, 4}, false},
      {"1-D depthwise stride 3", {2, 3, 20}, {6, 1, 4}, 3, {3}, {1}, {2, 1}, true},
      {"3-D depthwise", {2, 3, 4, 5, 6}, {3, 1, 3, 3, 3}, 3, {1, 2, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, false},
      {"2-D depthwise 16x16, 20 channels (blocks of 16 and 4)", {3, 20, 16, 16}, {20, 1, 3, 3}, 20, {1, 1}, {1, 1}, {1, 1, 1, 1}, false},
      {"2-D depthwise multiplier 3, stride 2 (threaded)", {8, 12, 10, 10}, {36, 1, 3, 3}, 12, {2, 2}, {1, 1}, {1, 1, 1, 1}, true},
      {"2-D depthwise 20x18 (threaded)", {6, 24, 20, 18}, {24, 1, 3, 3}, 24, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      {"3-D depthwise, dilation 2", {2, 3, 6, 8, 9}, {3, 1, 3, 3, 3}, 3, {1, 1, 1}, {2, 1, 2}, {2, 1, 2, 2, 1, 2}, false},
      {"2-D depthwise 130x130, by rows (threaded)", {1, 4, 130, 130}, {4, 1, 3, 3}, 4, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      {"3-D depthwise by rows, dilation 2", {1, 2, 6, 60, 64}, {2, 1, 3, 3, 3}, 2, {1, 1, 1}, {2, 1, 2}, {2, 1, 2, 2, 1, 2}, false},
  };
}

template <typename T>
double tol() {
  return std::is_same_v<T, float> ? 2e-4 : 1e-11;
}

template <typename T>
class ConvTest : public KernelTest<T> {};
TYPED_TEST_SUITE(ConvTest, FloatTypes);

TYPED_TEST(ConvTest, ConvForwardAndBackward) {
  using T = TypeParam;
  uint32_t seed = 4100;
  for (const ConvCase& cc : cases()) {
    SCOPED_TRACE(std::string(cc.label) + ", " + seed_trace(seed));
    const Geo g = geo(cc);
    const Dims yd = out_dims(cc, g);
    const auto xv = random_values(numel(cc.x), seed++), wv = random_values(numel(cc.w), seed++);
    const auto bv = random_values(g.m, seed++), dyv = random_values(numel(yd), seed++);
    auto x = Buf<T>::from_doubles(cc.x, xv);
    auto w = Buf<T>::from_doubles(cc.w, wv);
    auto b = Buf<T>::from_doubles({g.m}, bv);
    auto dy = Buf<T>::from_doubles(yd, dyv);
    const AttrMap at = conv_attrs(cc);

    std::vector<double> y_ref(numel(yd), 0.0), dx_ref(numel(cc.x), 0.0), dw_ref(numel(cc.w), 0.0), db_ref(g.m, 0.0);
    if (cc.bias)
      for (int64_t i = 0; i < numel(yd); ++i) y_ref[i] = bv[(i / g.out_size()) % g.m];
    for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) {
      y_ref[yi] += xv[xi] * wv[wi];
      dx_ref[xi] += dyv[yi] * wv[wi];
      dw_ref[wi] += dyv[yi] * xv[xi];
    });
    for (int64_t i = 0; i < numel(yd); ++i) db_ref[(i / g.out_size()) % g.m] += dyv[i];

    auto y = Buf<T>::output(yd);
    std::vector<TensorView> ins = {x.view(), w.view()};
    if (cc.bias) ins.push_back(b.view());
    PT_ASSERT_OK(run_kernel("Conv", dtype_of<T>(), ins, {y.view()}, at));
    expect_close(y, y_ref, "Y", tol<T>(), tol<T>());

    auto dx = Buf<T>::output(cc.x);
    PT_ASSERT_OK(run_kernel("ConvGradInput", dtype_of<T>(), {dy.view(), w.view()}, {dx.view()}, at));
    expect_close(dx, dx_ref, "dX", tol<T>(), tol<T>());

    auto dw = Buf<T>::output(cc.w);
    PT_ASSERT_OK(run_kernel("ConvGradWeight", dtype_of<T>(), {dy.view(), x.view()}, {dw.view()}, at));
    expect_close(dw, dw_ref, "dW", tol<T>() * 5, tol<T>());

    auto db = Buf<T>::output({g.m});
    PT_ASSERT_OK(run_kernel("ConvGradBias", dtype_of<T>(), {dy.view()}, {db.view()}));
    expect_close(db, db_ref, "dB", tol<T>() * 5, tol<T>());

    // A second call hits oneDNN's primitive cache (float) and must give the same result.
    auto y2 = Buf<T>::output(yd);
    PT_ASSERT_OK(run_kernel("Conv", dtype_of<T>(), ins, {y2.view()}, at));
    expect_close(y2, y_ref, "Y (cached primitive)", tol<T>(), tol<T>());
  }
}

TYPED_TEST(ConvTest, ConvRejectsMismatchedShapes) {
  using T = TypeParam;
  ConvCase cc{"bad", {1, 4, 5, 5}, {2, 3, 3, 3}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, false};
  auto x = Buf<T>::from_doubles(cc.x, random_values(numel(cc.x), 1));
  auto w = Buf<T>::from_doubles(cc.w, random_values(numel(cc.w), 2));
  auto y = Buf<T>::output({1, 2, 3, 3});
  Status st = run_kernel("Conv", dtype_of<T>(), {x.view(), w.view()}, {y.view()}, conv_attrs(cc));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("group"), std::string::npos) << st.message();
  cc.w = {2, 4, 3, 3};
  auto w2 = Buf<T>::from_doubles(cc.w, random_values(numel(cc.w), 2));
  auto ybad = Buf<T>::output({1, 2, 4, 4});
  st = run_kernel("Conv", dtype_of<T>(), {x.view(), w2.view()}, {ybad.view()}, conv_attrs(cc));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("output"), std::string::npos) << st.message();
}

// float ConvGradWeight of case cc on random X and dY (of seeds x_seed, dy_seed) with `threads`
// OpenMP threads.
std::vector<float> grad_weight_on(const ConvCase& cc, const Dims& yd, int x_seed, int dy_seed, int threads) {
  auto x = Buf<float>::from_doubles(cc.x, random_values(numel(cc.x), x_seed));
  auto dy = Buf<float>::from_doubles(yd, random_values(numel(yd), dy_seed));
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto dw = Buf<float>::output(cc.w);
  const Status st = run_kernel("ConvGradWeight", DType::kFloat32, {dy.view(), x.view()}, {dw.view()}, conv_attrs(cc));
  omp_set_num_threads(before);
  EXPECT_TRUE(st.is_ok()) << st.message();
  const float* p = dw.view().as<float>();
  return std::vector<float>(p, p + numel(cc.w));
}

// The few-taps weight gradient sums each thread's samples apart and adds the threads' sums in
// thread order: repeated calls give the same bits, and one thread agrees with two to rounding.
TEST(ConvThreads, FewTapsWeightGradientIsRepeatable) {
  ConvCase cc{"few taps", {16, 1, 28, 28}, {6, 1, 5, 5}, 1, {1, 1}, {1, 1}, {2, 2, 2, 2}, false};
  const Dims yd = {16, 6, 28, 28};
  auto grad = [&](int threads) { return grad_weight_on(cc, yd, 31, 32, threads); };
  const std::vector<float> a = grad(2), b = grad(2), one = grad(1);
  EXPECT_EQ(a, b);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], one[i], 1e-4 * (1 + std::fabs(one[i]))) << i;
}

// Depthwise dW sums each channel in a fixed order (channel blocks, or whole channels, per thread):
// the same bits on 1, 2 and 3 threads, on both paths (a 4x4 map by blocks, 130x130 by rows).
TEST(ConvThreads, DepthwiseWeightGradientIsTheSameOnAnyThreadCount) {
  for (const int64_t hw : {int64_t{4}, int64_t{130}}) {
    const int64_t n = hw > 100 ? 2 : 16;
    ConvCase cc{"depthwise", {n, 40, hw, hw}, {40, 1, 3, 3}, 40, {1, 1}, {1, 1}, {1, 1, 1, 1}, false};
    const Dims yd = {n, 40, hw, hw};
    auto grad = [&](int threads) { return grad_weight_on(cc, yd, 33, 34, threads); };
    const std::vector<float> one = grad(1);
    EXPECT_EQ(grad(2), one) << hw << "x" << hw;
    EXPECT_EQ(grad(3), one) << hw << "x" << hw;
  }
}

// Pipeline stages run kernels on several threads at once: the same shapes from four threads
// (each with its own primitive cache and scratch), every result equal to the one-thread result.
TEST(ConvThreads, ConcurrentCallsAgree) {
  ConvCase cc{"threads", {4, 16, 8, 8}, {16, 16, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, true};
  const Dims yd = {4, 16, 8, 8};
  auto x = Buf<float>::from_doubles(cc.x, random_values(numel(cc.x), 21));
  auto w = Buf<float>::from_doubles(cc.w, random_values(numel(cc.w), 22));
  auto b = Buf<float>::from_doubles({16}, random_values(16, 23));
  auto dy = Buf<float>::from_doubles(yd, random_values(numel(yd), 24));
  const AttrMap at = conv_attrs(cc);
  auto run_all = [&](Buf<float>& y, Buf<float>& dx, Buf<float>& dw) {
    for (int rep = 0; rep < 20; ++rep) {
      if (!run_kernel("Conv", DType::kFloat32, {x.view(), w.view(), b.view()}, {y.view()}, at).is_ok()) return false;
      if (!run_kernel("ConvGradInput", DType::kFloat32, {dy.view(), w.view()}, {dx.view()}, at).is_ok()) return false;
      if (!run_kernel("ConvGradWeight", DType::kFloat32, {dy.view(), x.view()}, {dw.view()}, at).is_ok()) return false;
    }
    return true;
  };
  auto y0 = Buf<float>::output(yd), dx0 = Buf<float>::output(cc.x), dw0 = Buf<float>::output(cc.w);
  ASSERT_TRUE(run_all(y0, dx0, dw0));
  std::vector<Buf<float>> ys, dxs, dws;
  for (int t = 0; t < 4; ++t) {
    ys.push_back(Buf<float>::output(yd));
    dxs.push_back(Buf<float>::output(cc.x));
    dws.push_back(Buf<float>::output(cc.w));
  }
  std::array<bool, 4> ok{};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { ok[t] = run_all(ys[t], dxs[t], dws[t]); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    ASSERT_TRUE(ok[t]) << "thread " << t;
    expect_close(ys[t], y0.values(), "Y", 1e-6, 1e-6);
    expect_close(dxs[t], dx0.values(), "dX", 1e-6, 1e-6);
    expect_close(dws[t], dw0.values(), "dW", 1e-6, 1e-6);
  }
}

// Speed sanity, not run by default (--gtest_also_run_disabled_tests): a ResNet-18 3x3 layer at
// 32x32, batch 32, 64 -> 64 channels, forward + both backward passes in float32.
TEST(ConvSpeed, DISABLED_ResNetLike3x3) {
  const Dims xd = {32, 64, 32, 32}, wd = {64, 64, 3, 3};
  auto x = Buf<float>::from_doubles(xd, random_values(numel(xd), 1));
  auto w = Buf<float>::from_doubles(wd, random_values(numel(wd), 2));
  auto y = Buf<float>::output(xd), dy = Buf<float>::from_doubles(xd, random_values(numel(xd), 3));
  auto dx = Buf<float>::output(xd), dw = Buf<float>::output(wd);
  AttrMap at;
  at.set("kernel_shape", std::vector<int64_t>{3, 3});
  at.set("strides", std::vector<int64_t>{1, 1});
  at.set("dilations", std::vector<int64_t>{1, 1});
  at.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  auto step = [&](double* f, double* bd, double* bw) {
    using clk = std::chrono::steady_clock;
    auto t0 = clk::now();
    PT_ASSERT_OK(run_kernel("Conv", DType::kFloat32, {x.view(), w.view()}, {y.view()}, at));
    auto t1 = clk::now();
    PT_ASSERT_OK(run_kernel("ConvGradInput", DType::kFloat32, {dy.view(), w.view()}, {dx.view()}, at));
    auto t2 = clk::now();
    PT_ASSERT_OK(run_kernel("ConvGradWeight", DType::kFloat32, {dy.view(), x.view()}, {dw.view()}, at));
    auto t3 = clk::now();
    *f += std::chrono::duration<double, std::milli>(t1 - t0).count();
    *bd += std::chrono::duration<double, std::milli>(t2 - t1).count();
    *bw += std::chrono::duration<double, std::milli>(t3 - t2).count();
  };
  double f = 0, bd = 0, bw = 0;
  step(&f, &bd, &bw);  // primitive creation
  f = bd = bw = 0;
  const int iters = 5;
  for (int i = 0; i < iters; ++i) step(&f, &bd, &bw);
  const double gflop = 2.0 * 32 * 64 * 32 * 32 * 64 * 9 / 1e9;
  std::cout << "conv 3x3 [32, 64, 32, 32] -> 64, threads " << omp_get_max_threads() << ": forward " << f / iters
            << " ms, backward data " << bd / iters << " ms, backward weights " << bw / iters << " ms, total "
            << (f + bd + bw) / iters << " ms (" << 3 * gflop / ((f + bd + bw) / iters / 1e3) << " GFLOP/s)\n";
}

}  // namespace
}  // namespace pt::test
