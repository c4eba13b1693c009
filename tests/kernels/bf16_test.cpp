// --precision bf16's kernels: Cast float32 <-> bfloat16 against hand-worked bit patterns (ties to
// even, NaN, Inf, overflow, denormals), and the bfloat16 Gemm, MatMul, Conv, ConvGradInput and
// ConvGradWeight (float32 outputs) against double references computed on the same bfloat16-rounded
// inputs. A product of two bfloat16 numbers (8-bit significands) is exact in float32 (24 bits), so
// the kernels differ from the reference only by float32 accumulation order. The tolerance is
// 4e-6 * sum|a_i b_i| per output (67 units of 2^-24 of the absolute sum). The worst-case bound of
// a sequential float32 sum of K terms, (K-1) 2^-24 sum|a_i b_i|, is looser above K = 68 (the
// weight gradients here sum up to 6,272 terms), but blocked sums with random signs stay far inside
// it: an empirical bound, with margin (each case prints its worst error as a fraction of it; the
// largest measured is 0.035). It is far below what rounding moves (checked per case: the result on
// the unrounded inputs must be more than 10x the tolerance away; measured 33x to 1,215x), so a
// kernel that rounded anything else, or skipped a rounding, fails.
// Everything runs through the registry (kBFloat16 rows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/attribute.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu_features.h"
#include "kernels/registry.h"

namespace pt::test {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Casts through the registry's Cast kernel (float32 -> bfloat16).
std::vector<uint16_t> cast_to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size(), 0xDEAD);
  const TensorView in{const_cast<float*>(x.data()), DType::kFloat32, Dims{static_cast<int64_t>(x.size())}};
  const TensorView out{y.data(), DType::kBFloat16, Dims{static_cast<int64_t>(x.size())}};
  AttrMap a;
  a.set("to", int64_t{16});
  KernelFn fn = find_kernel("Cast", DeviceKind::kCpu, DType::kFloat32);
  EXPECT_NE(fn, nullptr);
  const TensorView ins[] = {in}, outs[] = {out};
  EXPECT_TRUE(fn(KernelCall{ins, outs, a}).is_ok());
  return y;
}

std::vector<float> cast_to_f32(const std::vector<uint16_t>& x) {
  std::vector<float> y(x.size(), -1.0f);
  const TensorView in{const_cast<uint16_t*>(x.data()), DType::kBFloat16, Dims{static_cast<int64_t>(x.size())}};
  const TensorView out{y.data(), DType::kFloat32, Dims{static_cast<int64_t>(x.size())}};
  AttrMap a;
  a.set("to", int64_t{1});
  KernelFn fn = find_kernel("Cast", DeviceKind::kCpu, DType::kBFloat16);
  EXPECT_NE(fn, nullptr);
  const TensorView ins[] = {in}, outs[] = {out};
  EXPECT_TRUE(fn(KernelCall{ins, outs, a}).is_ok());
  return y;
}

TEST(Bf16Cast, RoundsToNearestEvenKeepingNanInfAndDenormals) {
  struct Case {
    uint32_t f32;
    uint16_t bf16;
    const char* why;
  };
  const Case cases[] = {
      {0x3F800000u, 0x3F80, "1.0 exact"},
      {0x3F808000u, 0x3F80, "1 + 2^-8: a tie, to the even 0x3F80 (down)"},
      {0x3F818000u, 0x3F82, "1 + 3*2^-8: a tie, to the even 0x3F82 (up)"},
      {0x3F808001u, 0x3F81, "just above a tie: up"},
      {0x3F807FFFu, 0x3F80, "just below a tie: down"},
      {0xBF818000u, 0xBF82, "negative tie: to even, magnitude up"},
      {0x7F800000u, 0x7F80, "+Inf"},
      {0xFF800000u, 0xFF80, "-Inf"},
      {0x7F7FFFFFu, 0x7F80, "largest float rounds to +Inf"},
      {0x7F7F7FFFu, 0x7F7F, "below the overflow tie: stays finite"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x00010000u, 0x0001, "denormal, exact"},
      {0x00018000u, 0x0002, "denormal tie, odd 1 -> even 2"},
      {0x00008000u, 0x0000, "denormal tie between 0 and the smallest: 0"},
      {0x00008001u, 0x0001, "just above: the smallest denormal"},
      {0x807FFFFFu, 0x8080, "largest negative denormal rounds to the smallest normal"},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(from_bits(c.f32));
  const std::vector<uint16_t> out = cast_to_bf16(in);
  for (size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(out[i], cases[i].bf16) << cases[i].why << ": 0x" << std::hex << cases[i].f32;
    EXPECT_EQ(cpu::f32_to_bf16(in[i]), cases[i].bf16) << cases[i].why;
  }
  // NaNs (quiet, signalling with only low payload bits: truncation would make it Inf) stay NaN.
  const std::vector<uint16_t> nan = cast_to_bf16({from_bits(0x7FC00000u), from_bits(0x7F800001u), from_bits(0xFF800001u)});
  for (uint16_t h : nan) {
    EXPECT_EQ(h & 0x7F80, 0x7F80) << std::hex << h;
    EXPECT_NE(h & 0x007F, 0) << "NaN became Inf: 0x" << std::hex << h;
  }
  // bfloat16 -> float32 is exact: the bits move up.
  const std::vector<float> back = cast_to_f32({0x3F81, 0xFF80, 0x0001, 0x8000});
  EXPECT_EQ(bits(back[0]), 0x3F810000u);
  EXPECT_EQ(bits(back[1]), 0xFF800000u);
  EXPECT_EQ(bits(back[2]), 0x00010000u);
  EXPECT_EQ(bits(back[3]), 0x80000000u);
}

TEST(Bf16Cast, LargeArraysMatchTheScalarFormula) {
  // Above the kernels' parallel threshold, so the threaded vector loop runs.
  std::mt19937 rng(7);
  std::vector<float> x(100003);
  for (float& v : x) {
    uint32_t u = rng();
    if ((u & 0x7F800000u) == 0x7F800000u) u &= ~0x00800000u;  // keep them finite here
    v = from_bits(u);
  }
  const std::vector<uint16_t> y = cast_to_bf16(x);
  for (size_t i = 0; i < x.size(); ++i) {
    // Independent of the formula: the nearest of the two neighbours, ties to the even one.
    const uint32_t u = bits(x[i]);
    const uint16_t lo = static_cast<uint16_t>(u >> 16);
    const uint32_t rem = u & 0xFFFFu;
    const uint16_t want = rem > 0x8000u || (rem == 0x8000u && (lo & 1)) ? static_cast<uint16_t>(lo + 1) : lo;
    ASSERT_EQ(y[i], want) << "element " << i << " 0x" << std::hex << u;
  }
}

// ---- products -----------------------------------------------------------------------------------

struct Rounded {
  std::vector<uint16_t> h;  // bfloat16
  std::vector<float> f;     // the unrounded float32 values
  std::vector<double> r;    // the rounded values, exactly
};

Rounded random_operand(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Rounded o;
  for (int64_t i = 0; i < n; ++i) o.f.push_back(d(rng));
  o.h = cast_to_bf16(o.f);
  for (uint16_t h : o.h) o.r.push_back(cpu::bf16_to_f32(h));
  return o;
}

TensorView view16(Rounded& o, Dims d) { return TensorView{o.h.data(), DType::kBFloat16, std::move(d)}; }

// Compares the kernel's float32 output with ref (double on rounded inputs); abs is sum|a b| per
// output; unrounded is the result on the unrounded inputs, which must be clearly farther away.
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& abs,
                  const std::vector<double>& unrounded, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  double worst = 0, gap = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 4e-6 * abs[i] + 1e-30;
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    EXPECT_LE(std::fabs(got[i] - ref[i]), tol) << what << " element " << i << ": " << got[i] << " vs " << ref[i];
    worst = std::max(worst, std::fabs(got[i] - ref[i]) / tol);
    gap = std::max(gap, std::fabs(unrounded[i] - ref[i]) / tol);
  }
  EXPECT_GT(gap, 10.0) << what << ": rounding to bfloat16 should move the result by far more than the tolerance";
  std::printf("%-32s worst error %.3f of the tolerance; unrounded inputs %.0fx\n", what.c_str(), worst, gap);
}

// Y (M, N) = alpha op(A) op(B) + beta C in double.
std::vector<double> gemm_ref(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const std::vector<double>& a,
                             const std::vector<double>& b, double beta, const std::vector<double>* c, int64_t cm,
                             int64_t cn, bool absolute) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p], bv = tb ? b[j * k + p] : b[p * n + j];
        s += absolute ? std::fabs(av * bv) : av * bv;
      }
      s *= absolute ? std::fabs(alpha) : alpha;
      if (c) {
        const double cv = (*c)[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
        s += absolute ? std::fabs(beta * cv) : beta * cv;
      }
      y[i * n + j] = s;
    }
  return y;
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST(Bf16Gemm, MatchesDoubleOnRoundedInputs) {
  ASSERT_TRUE(has_kernel("Gemm", DeviceKind::kCpu, DType::kBFloat16));
  struct G {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    int64_t cm, cn;  // C's dims; 0: no C
  };
  const G cases[] = {{false, false, 64, 48, 80, 1.0f, 1.0f, 1, 48},  {false, true, 33, 17, 29, 1.0f, 1.0f, 0, 0},
                     {true, false, 20, 70, 64, 0.5f, 2.0f, 20, 70},  {true, true, 7, 9, 130, 1.0f, 0.0f, 1, 9},
                     {false, true, 128, 10, 256, 1.0f, 1.0f, 1, 10}, {false, false, 5, 3, 1, 1.0f, 1.0f, 5, 1}};
  uint32_t seed = 1;
  for (const G& g : cases) {
    const std::string what = "Gemm ta=" + std::to_string(g.ta) + " tb=" + std::to_string(g.tb) + " [" +
                             std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) + "]";
    Rounded a = random_operand(g.m * g.k, seed++), b = random_operand(g.k * g.n, seed++);
    std::vector<float> c;
    std::mt19937 rng(seed++);
    std::normal_distribution<float> d;
    for (int64_t i = 0; i < g.cm * g.cn; ++i) c.push_back(d(rng));
    std::vector<float> y(static_cast<size_t>(g.m * g.n), std::nanf(""));
    AttrMap at;
    at.set("transA", int64_t{g.ta});
    at.set("transB", int64_t{g.tb});
    at.set("alpha", g.alpha);
    at.set("beta", g.beta);
    std::vector<TensorView> ins = {view16(a, g.ta ? Dims{g.k, g.m} : Dims{g.m, g.k}),
                                   view16(b, g.tb ? Dims{g.n, g.k} : Dims{g.k, g.n})};
    if (g.cm) ins.push_back(TensorView{c.data(), DType::kFloat32, g.cm == 1 && g.cn == g.n ? Dims{g.n} : Dims{g.cm, g.cn}});
    const TensorView outs[] = {TensorView{y.data(), DType::kFloat32, Dims{g.m, g.n}}};
    ASSERT_TRUE(find_kernel("Gemm", DeviceKind::kCpu, DType::kBFloat16)(KernelCall{ins, outs, at}).is_ok()) << what;
    const std::vector<double> cd = to_double(c);
    const std::vector<double>* cp = g.cm ? &cd : nullptr;
    expect_close(y, gemm_ref(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.r, b.r, g.beta, cp, g.cm, g.cn, false),
                 gemm_ref(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.r, b.r, g.beta, cp, g.cm, g.cn, true),
                 gemm_ref(g.ta, g.tb, g.m, g.n, g.k, g.alpha, to_double(a.f), to_double(b.f), g.beta, cp, g.cm, g.cn, false),
                 what);
  }
}

TEST(Bf16MatMul, TwoDBatchedAndBroadcast) {
  struct M {
    Dims a, b;
  };
  const M cases[] = {{{40, 24}, {24, 30}}, {{3, 16, 24}, {24, 20}}, {{2, 3, 8, 16}, {2, 3, 16, 12}}, {{4, 8, 16}, {1, 16, 5}}};
  uint32_t seed = 100;
  for (const M& mc : cases) {
    const std::string what = "MatMul " + dims_str(mc.a) + " x " + dims_str(mc.b);
    Rounded a = random_operand(numel(mc.a), seed++), b = random_operand(numel(mc.b), seed++);
    const int64_t m = mc.a[mc.a.size() - 2], k = mc.a.back(), n = mc.b.back();
    const Dims abatch(mc.a.begin(), mc.a.end() - 2), bbatch(mc.b.begin(), mc.b.end() - 2);
    Dims batch;
    ASSERT_TRUE(broadcast_dims(abatch, bbatch, &batch));
    Dims out = batch;
    out.push_back(m);
    out.push_back(n);
    std::vector<float> y(static_cast<size_t>(numel(out)), std::nanf(""));
    const TensorView ins[] = {view16(a, mc.a), view16(b, mc.b)};
    const TensorView outs[] = {TensorView{y.data(), DType::kFloat32, out}};
    ASSERT_TRUE(find_kernel("MatMul", DeviceKind::kCpu, DType::kBFloat16)(KernelCall{ins, outs, AttrMap{}}).is_ok()) << what;
    std::vector<double> ref, abs, unr;
    const int64_t nb = numel(batch), na = numel(abatch), nbb = numel(bbatch);
    for (int64_t bi = 0; bi < nb; ++bi) {
      // Batches here broadcast only a leading 1 or match: index modulo the operand's batch count.
      const int64_t ia = bi % na, ib = bi % nbb;
      auto slice = [](const std::vector<double>& v, int64_t off, int64_t len) {
        return std::vector<double>(v.begin() + off, v.begin() + off + len);
      };
      const auto ar = slice(a.r, ia * m * k, m * k), br = slice(b.r, ib * k * n, k * n);
      const auto af = slice(to_double(a.f), ia * m * k, m * k), bf = slice(to_double(b.f), ib * k * n, k * n);
      for (double v : gemm_ref(false, false, m, n, k, 1, ar, br, 0, nullptr, 0, 0, false)) ref.push_back(v);
      for (double v : gemm_ref(false, false, m, n, k, 1, ar, br, 0, nullptr, 0, 0, true)) abs.push_back(v);
      for (double v : gemm_ref(false, false, m, n, k, 1, af, bf, 0, nullptr, 0, 0, false)) unr.push_back(v);
    }
    expect_close(y, ref, abs, unr, what);
  }
}

TEST(Bf16Gemm, RefusesFloat32Operands) {
  std::vector<float> a(4), b(4), y(4);
  const TensorView ins[] = {TensorView{a.data(), DType::kFloat32, Dims{2, 2}}, TensorView{b.data(), DType::kFloat32, Dims{2, 2}}};
  const TensorView outs[] = {TensorView{y.data(), DType::kFloat32, Dims{2, 2}}};
  EXPECT_FALSE(find_kernel("Gemm", DeviceKind::kCpu, DType::kBFloat16)(KernelCall{ins, outs, AttrMap{}}).is_ok());
}

// ---- convolutions: the double kernel (itself checked against naive loops in conv_test.cpp) on
// the rounded inputs is the reference; on |inputs| it gives sum|x w| per output.

struct ConvCase {
  const char* label;
  Dims x, w;
  int64_t group;
  std::vector<int64_t> strides, pads;
  bool bias;
};

Dims conv_out(const ConvCase& c) {
  Dims y = {c.x[0], c.w[0]};
  const size_t nd = c.x.size() - 2;
  for (size_t i = 0; i < nd; ++i) y.push_back((c.x[2 + i] + c.pads[i] + c.pads[nd + i] - c.w[2 + i]) / c.strides[i] + 1);
  return y;
}

AttrMap conv_attrs(const ConvCase& c) {
  AttrMap a;
  a.set("kernel_shape", Dims(c.w.begin() + 2, c.w.end()));
  a.set("strides", c.strides);
  a.set("pads", c.pads);
  a.set("dilations", std::vector<int64_t>(c.x.size() - 2, 1));
  a.set("group", c.group);
  return a;
}

std::vector<double> run_double(const char* op, const AttrMap& at, std::vector<std::pair<std::vector<double>, Dims>> in, Dims out) {
  std::vector<TensorView> ins;
  for (auto& [v, d] : in) ins.push_back(TensorView{v.data(), DType::kFloat64, d});
  std::vector<double> y(static_cast<size_t>(numel(out)));
  const TensorView outs[] = {TensorView{y.data(), DType::kFloat64, out}};
  EXPECT_TRUE(find_kernel(op, DeviceKind::kCpu, DType::kFloat64)(KernelCall{ins, outs, at}).is_ok()) << op;
  return y;
}

std::vector<double> absv(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  return v;
}

TEST(Bf16Conv, AllThreePassesMatchDoubleOnRoundedInputs) {
  const ConvCase cases[] = {
      {"lenet conv1", {8, 1, 28, 28}, {6, 1, 5, 5}, 1, {1, 1}, {2, 2, 2, 2}, true},
      {"lenet conv2", {8, 6, 14, 14}, {16, 6, 5, 5}, 1, {1, 1}, {0, 0, 0, 0}, true},
      {"resnet 3x3 stride 2", {4, 16, 15, 15}, {32, 16, 3, 3}, 1, {2, 2}, {1, 1, 1, 1}, false},
      {"grouped", {2, 8, 9, 9}, {8, 2, 3, 3}, 4, {1, 1}, {1, 0, 1, 0}, true},
      {"one output position", {4, 16, 1, 1}, {8, 16, 3, 3}, 1, {1, 1}, {1, 1, 1, 1}, false},
      {"1-D", {3, 4, 20}, {6, 4, 3}, 1, {1}, {1, 1}, true},
  };
  uint32_t seed = 200;
  for (const ConvCase& c : cases) {
    const Dims yd = conv_out(c);
    const AttrMap at = conv_attrs(c);
    Rounded x = random_operand(numel(c.x), seed++), w = random_operand(numel(c.w), seed++, 0.3f),
            dy = random_operand(numel(yd), seed++);
    std::vector<float> b;
    for (int64_t i = 0; i < c.w[0]; ++i) b.push_back(0.1f * static_cast<float>(i) - 0.3f);
    const std::vector<double> bd = to_double(b), zb(b.size(), 0.0);
    // Forward.
    {
      std::vector<float> y(static_cast<size_t>(numel(yd)), std::nanf(""));
      std::vector<TensorView> ins = {view16(x, c.x), view16(w, c.w)};
      if (c.bias) ins.push_back(TensorView{b.data(), DType::kFloat32, Dims{c.w[0]}});
      const TensorView outs[] = {TensorView{y.data(), DType::kFloat32, yd}};
      ASSERT_TRUE(find_kernel("Conv", DeviceKind::kCpu, DType::kBFloat16)(KernelCall{ins, outs, at}).is_ok()) << c.label;
      auto args = [&](const std::vector<double>& xv, const std::vector<double>& wv, const std::vector<double>& bv) {
        std::vector<std::pair<std::vector<double>, Dims>> a = {{xv, c.x}, {wv, c.w}};
        if (c.bias) a.push_back({bv, Dims{c.w[0]}});
        return a;
      };
      expect_close(y, run_double("Conv", at, args(x.r, w.r, bd), yd), run_double("Conv", at, args(absv(x.r), absv(w.r), absv(bd)), yd),
                   run_double("Conv", at, args(to_double(x.f), to_double(w.f), bd), yd), std::string(c.label) + " forward");
    }
    // Grad input: dX = conv^T(dY, W).
    {
      std::vector<float> dx(static_cast<size_t>(numel(c.x)), std::nanf(""));
      const TensorView ins[] = {view16(dy, yd), view16(w, c.w)};
      const TensorView outs[] = {TensorView{dx.data(), DType::kFloat32, c.x}};
      ASSERT_TRUE(find_kernel("ConvGradInput", DeviceKind::kCpu, DType::kBFloat16)(KernelCall{ins, outs, at}).is_ok()) << c.label;
      expect_close(dx, run_double("ConvGradInput", at, {{dy.r, yd}, {w.r, c.w}}, c.x),
                   run_double("ConvGradInput", at, {{absv(dy.r), yd}, {absv(w.r), c.w}}, c.x),
                   run_double("ConvGradInput", at, {{to_double(dy.f), yd}, {to_double(w.f), c.w}}, c.x),
                   std::string(c.label) + " grad input");
    }
    // Grad weight: dW = corr(dY, X).
    {
      std::vector<float> dw(static_cast<size_t>(numel(c.w)), std::nanf(""));
      const TensorView ins[] = {view16(dy, yd), view16(x, c.x)};
      const TensorView outs[] = {TensorView{dw.data(), DType::kFloat32, c.w}};
      ASSERT_TRUE(find_kernel("ConvGradWeight", DeviceKind::kCpu, DType::kBFloat16)(KernelCall{ins, outs, at}).is_ok()) << c.label;
      expect_close(dw, run_double("ConvGradWeight", at, {{dy.r, yd}, {x.r, c.x}}, c.w),
                   run_double("ConvGradWeight", at, {{absv(dy.r), yd}, {absv(x.r), c.x}}, c.w),
                   run_double("ConvGradWeight", at, {{to_double(dy.f), yd}, {to_double(x.f), c.x}}, c.w),
                   std::string(c.label) + " grad weight");
    }
  }
}

TEST(Bf16Cpu, FeatureQueryNamesTheIsa) {
  // This machine's answer is whatever oneDNN says; the query must agree with the ISA name.
  const std::string isa = cpu_isa_name();
  EXPECT_EQ(cpu_has_bf16(), isa == "avx512_core_bf16" || isa == "avx512_core_amx") << isa;
  EXPECT_FALSE(cpu_model_name().empty());
}

}  // namespace
}  // namespace pt::test
