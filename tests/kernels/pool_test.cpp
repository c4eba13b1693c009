// MaxPool (with Indices, both storage orders), AveragePool (count_include_pad), the global pools
// and their backward ops against naive double-precision loops: 1-D, 2-D, 3-D windows, strides,
// dilations, asymmetric pads, ceil_mode; max ties resolved to the first maximum in the window.
#include <array>
#include <limits>

#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

template <typename T>
class PoolTest : public KernelTest<T> {};
TYPED_TEST_SUITE(PoolTest, FloatTypes);

struct PoolCase {
  const char* label;
  Dims x;
  std::vector<int64_t> k, s, d, pads;
  int64_t ceil_mode;
};

struct Geo {
  int64_t planes;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1}, pb{0, 0, 0}, pe{0, 0, 0};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

Geo geo(const PoolCase& pc) {
  Geo g{};
  const size_t nd = pc.x.size() - 2, off = 3 - nd;
  g.planes = pc.x[0] * pc.x[1];
  for (size_t i = 0; i < nd; ++i) {
    const size_t j = off + i;
    g.in[j] = pc.x[2 + i];
    g.k[j] = pc.k[i];
    g.s[j] = pc.s[i];
    g.d[j] = pc.d[i];
    g.pb[j] = pc.pads[i];
    g.pe[j] = pc.pads[nd + i];
    const int64_t span = g.in[j] + g.pb[j] + g.pe[j] - (g.d[j] * (g.k[j] - 1) + 1);
    g.out[j] = (pc.ceil_mode ? (span + g.s[j] - 1) / g.s[j] : span / g.s[j]) + 1;
    if (pc.ceil_mode && (g.out[j] - 1) * g.s[j] >= g.in[j] + g.pb[j]) --g.out[j];
  }
  return g;
}

Dims out_dims(const PoolCase& pc, const Geo& g) {
  Dims y = {pc.x[0], pc.x[1]};
  for (size_t i = 3 - (pc.x.size() - 2); i < 3; ++i) y.push_back(g.out[i]);
  return y;
}

AttrMap pool_attrs(const PoolCase& pc) {
  AttrMap a;
  a.set("kernel_shape", pc.k);
  a.set("strides", pc.s);
  a.set("dilations", pc.d);
  a.set("pads", pc.pads);
  a.set("ceil_mode", pc.ceil_mode);
  return a;
}

// fn(o, list of (plane-relative input index) inside the window, positions inside the padded input)
template <typename Fn>
void for_each_window(const Geo& g, Fn&& fn) {
  for (int64_t o = 0; o < g.out_size(); ++o) {
    const int64_t oc[3] = {o / (g.out[1] * g.out[2]), (o / g.out[2]) % g.out[1], o % g.out[2]};
    std::vector<int64_t> idx;
    int64_t padded = 0;
    for (int64_t a = 0; a < g.k[0]; ++a)
      for (int64_t b = 0; b < g.k[1]; ++b)
        for (int64_t c = 0; c < g.k[2]; ++c) {
          const int64_t p[3] = {oc[0] * g.s[0] - g.pb[0] + a * g.d[0], oc[1] * g.s[1] - g.pb[1] + b * g.d[1],
                                oc[2] * g.s[2] - g.pb[2] + c * g.d[2]};
          bool in = true, inpad = true;
          for (int j = 0; j < 3; ++j) {
            in &= p[j] >= 0 && p[j] < g.in[j];
            inpad &= p[j] >= -g.pb[j] && p[j] < g.in[j] + g.pe[j];
          }
          padded += inpad;
          if (in) idx.push_back((p[0] * g.in[1] + p[1]) * g.in[2] + p[2]);
        }
    fn(o, idx, padded);
  }
}

std::vector<PoolCase> cases() {
  return {
      {"1-D", {2, 3, 10}, {3}, {2}, {1}, {0, 0}, 0},
      {"1-D pads ceil", {1, 2, 10}, {3}, {3}, {1}, {1, 1}, 1},
      {"2-D 2x2 s2", {2, 3, 8, 8}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 0},
      {"2-D 3x3 s2 pads 1", {2, 2, 9, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 0},
      {"2-D asymmetric pads", {1, 2, 7, 6}, {3, 2}, {1, 2}, {1, 1}, {0, 1, 2, 0}, 0},
      {"2-D ceil_mode", {1, 2, 8, 7}, {3, 3}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 1},
      {"2-D ceil_mode pads", {1, 1, 6, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 1},
      {"2-D dilations", {1, 2, 9, 9}, {2, 3}, {1, 2}, {2, 2}, {1, 0, 1, 2}, 0},
      {"3-D", {1, 2, 5, 6, 4}, {2, 3, 2}, {2, 1, 2}, {1, 1, 1}, {0, 1, 0, 1, 1, 1}, 1},
      {"2-D larger (threaded)", {8, 16, 32, 32}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 0},
  };
}

TYPED_TEST(PoolTest, MaxPoolForwardIndicesAndGrad) {
  using T = TypeParam;
  uint32_t seed = 4200;
  for (const PoolCase& pc : cases())
    for (int64_t order : {0, 1}) {
      SCOPED_TRACE(std::string(pc.label) + " storage_order " + std::to_string(order) + ", " + seed_trace(seed));
      const Geo g = geo(pc);
      const Dims yd = out_dims(pc, g);
      auto xv = random_values(numel(pc.x), seed++);
      for (auto& v : xv) v = std::round(v * 4) / 4;  // many ties
      const auto dyv = random_values(numel(yd), seed++);
      std::vector<double> y_ref(numel(yd)), i_ref(numel(yd)), dx_ref(numel(pc.x), 0.0);
      for (int64_t p = 0; p < g.planes; ++p)
        for_each_window(g, [&](int64_t o, const std::vector<int64_t>& idx, int64_t) {
          int64_t best = idx.empty() ? -1 : idx[0];
          for (int64_t i : idx)
            if (xv[p * g.in_size() + i] > xv[p * g.in_size() + best]) best = i;
          const int64_t yi = p * g.out_size() + o;
          y_ref[yi] = best < 0 ? -std::numeric_limits<double>::infinity() : xv[p * g.in_size() + best];
          int64_t flat = best;
          if (order == 1 && best >= 0) {
            const int64_t a = best / (g.in[1] * g.in[2]), b = (best / g.in[2]) % g.in[1], c = best % g.in[2];
            flat = a + g.in[0] * (b + g.in[1] * c);
          }
          i_ref[yi] = best < 0 ? -1 : p * g.in_size() + flat;
          if (best >= 0) dx_ref[p * g.in_size() + best] += dyv[yi];
        });
      auto x = Buf<T>::from_doubles(pc.x, xv);
      auto dy = Buf<T>::from_doubles(yd, dyv);
      AttrMap at = pool_attrs(pc);
      at.set("storage_order", order);
      auto y = Buf<T>::output(yd);
      auto ind = Buf<int64_t>::output(yd);
      PT_ASSERT_OK(run_kernel("MaxPool", dtype_of<T>(), {x.view()}, {y.view(), ind.view()}, at));
      expect_close(y, y_ref, "Y");
      expect_close(ind, i_ref, "Indices");
      auto y1 = Buf<T>::output(yd);  // without the optional Indices output
      PT_ASSERT_OK(run_kernel("MaxPool", dtype_of<T>(), {x.view()}, {y1.view()}, at));
      expect_close(y1, y_ref, "Y without Indices");
      auto dx = Buf<T>::output(pc.x);
      PT_ASSERT_OK(run_kernel("MaxPoolGrad", dtype_of<T>(), {dy.view(), x.view()}, {dx.view()}, at));
      expect_close(dx, dx_ref, "dX", Tol<T>::atol * 10, Tol<T>::rtol);
    }
}

TYPED_TEST(PoolTest, MaxPoolGradTiesGoToFirstMaximum) {
  using T = TypeParam;
  // One 2x2 window of equal values, then overlapping 3x3/1 windows over a constant plane: every
  // output's gradient lands on its window's first (top-left) element.
  PoolCase pc{"ties", {1, 1, 4, 4}, {3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 0};
  auto x = Buf<T>::from_doubles(pc.x, std::vector<double>(16, 0.5));
  auto dy = Buf<T>::from_doubles({1, 1, 2, 2}, {1, 2, 3, 4});
  auto dx = Buf<T>::output(pc.x);
  PT_ASSERT_OK(run_kernel("MaxPoolGrad", dtype_of<T>(), {dy.view(), x.view()}, {dx.view()}, pool_attrs(pc)));
  std::vector<double> want(16, 0.0);
  want[0] = 1;
  want[1] = 2;
  want[4] = 3;
  want[5] = 4;
  expect_close(dx, want, "dX");
}

TYPED_TEST(PoolTest, AveragePoolForwardAndGrad) {
  using T = TypeParam;
  uint32_t seed = 4300;
  for (const PoolCase& pc : cases())
    for (int64_t include : {0, 1}) {
      SCOPED_TRACE(std::string(pc.label) + " count_include_pad " + std::to_string(include) + ", " + seed_trace(seed));
      const Geo g = geo(pc);
      const Dims yd = out_dims(pc, g);
      const auto xv = random_values(numel(pc.x), seed++), dyv = random_values(numel(yd), seed++);
      std::vector<double> y_ref(numel(yd)), dx_ref(numel(pc.x), 0.0);
      for (int64_t p = 0; p < g.planes; ++p)
        for_each_window(g, [&](int64_t o, const std::vector<int64_t>& idx, int64_t padded) {
          const double cnt = include ? padded : static_cast<double>(idx.size());
          double s = 0;
          for (int64_t i : idx) s += xv[p * g.in_size() + i];
          const int64_t yi = p * g.out_size() + o;
          y_ref[yi] = cnt ? s / cnt : 0;
          for (int64_t i : idx) dx_ref[p * g.in_size() + i] += cnt ? dyv[yi] / cnt : 0;
        });
      auto x = Buf<T>::from_doubles(pc.x, xv);
      auto dy = Buf<T>::from_doubles(yd, dyv);
      AttrMap at = pool_attrs(pc);
      at.set("count_include_pad", include);
      auto y = Buf<T>::output(yd);
      PT_ASSERT_OK(run_kernel("AveragePool", dtype_of<T>(), {x.view()}, {y.view()}, at));
      expect_close(y, y_ref, "Y");
      auto dx = Buf<T>::output(pc.x);
      PT_ASSERT_OK(run_kernel("AveragePoolGrad", dtype_of<T>(), {dy.view()}, {dx.view()}, at));
      expect_close(dx, dx_ref, "dX");
    }
}

TYPED_TEST(PoolTest, GlobalPoolsAndGrads) {
  using T = TypeParam;
  uint32_t seed = 4400;
  for (const Dims& xd : {Dims{2, 3, 7}, Dims{2, 3, 5, 4}, Dims{1, 2, 3, 4, 2}, Dims{16, 64, 16, 16}}) {
    SCOPED_TRACE(dims_str(xd) + ", " + seed_trace(seed));
    Dims yd = {xd[0], xd[1]};
    yd.resize(xd.size(), 1);
    const int64_t planes = xd[0] * xd[1], size = numel(xd) / planes;
    auto xv = random_values(numel(xd), seed++);
    xv[1] = xv[0] = 2.0;  // a tie at the plane's maximum: the first wins
    const auto dyv = random_values(planes, seed++);
    std::vector<double> avg(planes), mx(planes), davg(numel(xd)), dmax(numel(xd), 0.0);
    for (int64_t p = 0; p < planes; ++p) {
      double s = 0;
      int64_t best = 0;
      for (int64_t i = 0; i < size; ++i) {
        s += xv[p * size + i];
        if (xv[p * size + i] > xv[p * size + best]) best = i;
      }
      avg[p] = s / size;
      mx[p] = xv[p * size + best];
      for (int64_t i = 0; i < size; ++i) davg[p * size + i] = dyv[p] / size;
      dmax[p * size + best] = dyv[p];
    }
    auto x = Buf<T>::from_doubles(xd, xv);
    auto dy = Buf<T>::from_doubles(yd, dyv);
    auto ya = Buf<T>::output(yd), ym = Buf<T>::output(yd);
    PT_ASSERT_OK(run_kernel("GlobalAveragePool", dtype_of<T>(), {x.view()}, {ya.view()}));
    PT_ASSERT_OK(run_kernel("GlobalMaxPool", dtype_of<T>(), {x.view()}, {ym.view()}));
    expect_close(ya, avg, "GlobalAveragePool", Tol<T>::atol * 10, Tol<T>::rtol * 10);
    expect_close(ym, mx, "GlobalMaxPool");
    auto dxa = Buf<T>::output(xd), dxm = Buf<T>::output(xd);
    PT_ASSERT_OK(run_kernel("GlobalAveragePoolGrad", dtype_of<T>(), {dy.view()}, {dxa.view()}));
    PT_ASSERT_OK(run_kernel("GlobalMaxPoolGrad", dtype_of<T>(), {dy.view(), x.view()}, {dxm.view()}));
    expect_close(dxa, davg, "GlobalAveragePoolGrad");
    expect_close(dxm, dmax, "GlobalMaxPoolGrad");
  }
}

}  // namespace
}  // namespace pt::test
