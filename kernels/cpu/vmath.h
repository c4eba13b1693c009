// Branch-free float exp and erf that the compiler vectorises inside `#pragma omp simd` loops
// (glibc's expf/erff are scalar calls there: 5-7 ns per element, the largest cost of softmax,
// attention, Erf and GELU on the CPU). Double keeps the C library's functions.
//
// vexp: e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2 (ln 2 split in two constants
// so n * hi is exact), e^r = 1 + r + r^2 Q(r) with Q of degree 4 fitted for this file (least
// squares with Lawson reweighting over Chebyshev nodes), and 2^n applied as two power-of-two
// factors so that results in the subnormal range round once and overflow gives +inf.
// Measured against exp in double over 4 million points of [-104, 89]: at most 1.32 ulp for normal
// results; +inf above ln(FLT_MAX), 0 or a subnormal below; NaN stays NaN (vmath_test).
//
// verf: |x| < 0.9375: x P(x^2), P of degree 5; 0.9375 <= |x| < 3.9375: 1 - e^{-x^2} G(|x|) with
// G(a) = erfc(a) e^{a^2} a polynomial of degree 10 in (a - 2.4375) / 1.5; beyond, +-1 (erfc(3.94)
// is below half an ulp of 1). Both fitted for this file as above; at most 2.5 ulp against erf in
// double over 2 million points of [-4.5, 4.5] and 1e-30..4 (vmath_test). Both branches are
// computed and one is selected, so the loop has no branch.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/status.h"
#include "kernels/registry.h"
#include "kernels/unary_ops.h"

namespace pt::cpu {

inline float vexp(float x) {
  float xc = x > -104.0f ? x : -104.0f;  // NaN -> -104 here (no float-to-int of NaN below), restored at the end
  xc = xc < 88.8f ? xc : 88.8f;
  const float t = xc * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest: 1.5 * 2^23 shifts the fraction out
  float r = xc - n * 0.693359375f;                  // ln 2 = 0.693359375 - 2.12194440e-4 (+ tiny)
  r = r - n * -2.12194440054690583e-4f;
  float q = 0.0013941143406555057f;
  q = q * r + 0.008363205008208752f;
  q = q * r + 0.04166637361049652f;
  q = q * r + 0.16666576266288757f;
  q = q * r + 0.5f;
  const float p = 1.0f + r + r * r * q;
  const int32_t ni = static_cast<int32_t>(n);  // in [-150, 128]
  const int32_t n1 = ni >> 1, n2 = ni - n1;     // each in [-75, 64]: normal powers of two
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  const float y = (p * s1) * s2;
  return x == x ? y : x;
}

inline float verf(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float ps = -0.0005919264513067901f;
  ps = ps * z + 0.004979096818715334f;
  ps = ps * z + -0.02675700932741165f;
  ps = ps * z + 0.11281551420688629f;
  ps = ps * z + -0.37612468004226685f;
  ps = ps * z + 1.1283791065216064f;
  const float small = x * ps;
  const float u = (a - 2.4375f) * (1.0f / 1.5f);
  float g = 0.00010738450509961694f;
  g = g * u + -0.000290181691525504f;
  g = g * u + 0.0004455145972315222f;
  g = g * u + -0.0010465334635227919f;
  g = g * u + 0.0027270459104329348f;
  g = g * u + -0.006257525645196438f;
  g = g * u + 0.013714994303882122f;
  g = g * u + -0.0291786789894104f;
  g = g * u + 0.05962018668651581f;
  g = g * u + -0.11634166538715363f;
  g = g * u + 0.21555247902870178f;
  float big = 1.0f - vexp(-z) * g;
  big = a < 3.9375f ? big : 1.0f;
  big = std::copysign(big, x);
  const float y = a < 0.9375f ? small : big;
  return x == x ? y : x;
}

// tanh: |x| < 0.625: x P(x^2), P of degree 5 (fitted as above); beyond, 1 - 2 / (e^{2|x|} + 1)
// with the sign of x (e^{2|x|} = inf gives 1).
inline float vtanh(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -0.005659965332597494f;
  p = p * z + 0.020590966567397118f;
  p = p * z + -0.05372106283903122f;
  p = p * z + 0.13331127166748047f;
  p = p * z + -0.3333325982093811f;
  p = p * z + 1.0f;
  const float small = x * p;
  const float big = std::copysign(1.0f - 2.0f / (vexp(2.0f * a) + 1.0f), x);
  const float y = a < 0.625f ? small : big;
  return x == x ? y : x;
}

// sigmoid: 1 / (1 + e^{-|x|}), and e^{-|x|} / (1 + e^{-|x|}) for x < 0 (no overflow, no cancellation).
inline float vsigmoid(float x) {
  const float e = vexp(-std::fabs(x));
  const float s = 1.0f / (1.0f + e);
  const float y = x >= 0.0f ? s : e * s;
  return x == x ? y : x;
}

// Exact GELU, x Phi(x), with the C library's erf: the Gelu kernel's double path and the fused
// products' epilogue (kernels/cpu/epilogue.cpp) share it, so both compute the same bits.
using unary::gelu_exact;

// Whole-array maps and the softmax row pieces, in kernels/cpu/vmath.cpp. Each is compiled three
// times (AVX-512, AVX2, baseline x86-64; the loader picks one for the CPU) without contracting
// multiply-adds, so every build computes the same bits on every x86-64 CPU. Sums run in 16 fixed
// partial sums, the same order whichever version runs.
enum class VFn {
  kExp,       // y = exp(a)
  kErf,       // y = erf(a)
  kErfGrad,   // y = a * (2 / sqrt(pi)) * exp(-b * b)          (a = dY, b = X)
  kGelu,      // y = 0.5 * a * (1 + erf(a / sqrt(2)))
  kGeluGrad,  // y = a * (0.5 * (1 + erf(b / sqrt(2))) + b * exp(-b^2 / 2) / sqrt(2 pi))  (a = dY, b = X)
  kTanh,      // y = tanh(a)
  kSigmoid,   // y = 1 / (1 + exp(-a))
};
// y[i] = f(a[i] (, b[i])) for i < n, split over the OpenMP threads when n is large.
void vmap(VFn f, const float* a, const float* b, float* y, int64_t n);
// y[i] = exp(x[i] - shift) (y may be null, or alias x); returns the sum of those values.
float exp_shifted_sum(const float* x, float shift, float* y, int64_t n);
// y[i] = exp(x[i] - shift) * scale (y may alias x); the same values exp_shifted_sum wrote, scaled.
void exp_shifted_scaled(const float* x, float shift, float scale, float* y, int64_t n);

// A float kernel as vmap: one input (y = f(x)) or two (dX = f(dY, Z)), all the same shape.
Status map_vector(const KernelCall& call, const char* op, VFn f);

}  // namespace pt::cpu
