// Softmax / LogSoftmax along one axis of a [outer, n, inner] view, forward and backward; shared
// by softmax.cpp and the cross-entropy loss. inner == 1 runs row by row; otherwise blocks of up
// to kColBlock columns keep the inner loops contiguous.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/vmath.h"

namespace pt::cpu {

constexpr int64_t kColBlock = 64;

// y = softmax(x) (or log_softmax when kLog) along n. y may alias x.
template <typename T, bool kLog>
void softmax_forward(const T* x, T* y, const AxisGeometry& g) {
  const int64_t outer = g.outer, n = g.n, inner = g.inner;
  if (n == 0 || outer == 0 || inner == 0) return;
  const bool par = outer * n * inner > kParallelThreshold;
  if (inner == 1) {
#pragma omp parallel for if (par && outer > 1)
    for (int64_t o = 0; o < outer; ++o) {
      const T* xr = x + o * n;  // (n)
      T* yr = y + o * n;        // (n)
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, xr[i]);
      T s = 0;
      if constexpr (kLog) {
        if constexpr (std::is_same_v<T, float>)
          s = exp_shifted_sum(xr, mx, nullptr, n);
        else
          for (int64_t i = 0; i < n; ++i) s += std::exp(xr[i] - mx);
        // (x - max) - log(sum), not x - (max + log(sum)): keeps precision when |max| is large.
        const T ls = std::log(s);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - mx) - ls;
      } else {
        if constexpr (std::is_same_v<T, float>) {
          s = exp_shifted_sum(xr, mx, yr, n);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            const T e = std::exp(xr[i] - mx);
            yr[i] = e;
            s += e;
          }
        }
        const T inv = T(1) / s;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] *= inv;
      }
    }
    return;
  }
  const int64_t nblk = (inner + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (par && outer * nblk > 1)
  for (int64_t t = 0; t < outer * nblk; ++t) {
    const int64_t o = t / nblk, j0 = (t % nblk) * kColBlock;
    const int64_t w = std::min(kColBlock, inner - j0);
    const T* xb = x + o * n * inner + j0;  // (n, inner) from column j0
    T* yb = y + o * n * inner + j0;
    T mx[kColBlock], s[kColBlock];
    for (int64_t j = 0; j < w; ++j) {
      mx[j] = -std::numeric_limits<T>::infinity();
      s[j] = 0;
    }
    for (int64_t c = 0; c < n; ++c)
      for (int64_t j = 0; j < w; ++j) mx[j] = std::max(mx[j], xb[c * inner + j]);
    if constexpr (kLog) {
      for (int64_t c = 0; c < n; ++c)
        for (int64_t j = 0; j < w; ++j) s[j] += std::exp(xb[c * inner + j] - mx[j]);
      for (int64_t j = 0; j < w; ++j) s[j] = std::log(s[j]);
      for (int64_t c = 0; c < n; ++c)
        for (int64_t j = 0; j < w; ++j) yb[c * inner + j] = (xb[c * inner + j] - mx[j]) - s[j];
    } else {
      for (int64_t c = 0; c < n; ++c)
        for (int64_t j = 0; j < w; ++j) {
          const T e = std::exp(xb[c * inner + j] - mx[j]);
          yb[c * inner + j] = e;
          s[j] += e;
        }
      for (int64_t j = 0; j < w; ++j) s[j] = T(1) / s[j];
      for (int64_t c = 0; c < n; ++c)
        for (int64_t j = 0; j < w; ++j) yb[c * inner + j] *= s[j];
    }
  }
}

// Softmax: dx = y * (dy - sum_n(dy * y)). LogSoftmax (kLog): dx = dy - exp(y) * sum_n(dy).
template <typename T, bool kLog>
void softmax_backward(const T* dy, const T* y, T* dx, const AxisGeometry& g) {
  const int64_t outer = g.outer, n = g.n, inner = g.inner;
  if (n == 0 || outer == 0 || inner == 0) return;
  const bool par = outer * n * inner > kParallelThreshold;
  if (inner == 1) {
#pragma omp parallel for if (par && outer > 1)
    for (int64_t o = 0; o < outer; ++o) {
      const T* dyr = dy + o * n;
      const T* yr = y + o * n;
      T* dxr = dx + o * n;
      T s = 0;
      if constexpr (kLog) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += dyr[i];
        if constexpr (std::is_same_v<T, float>) {
          float e[256];  // exp(y) a block at a time (dx may alias dy or y)
          for (int64_t i0 = 0; i0 < n; i0 += 256) {
            const int64_t w = std::min<int64_t>(256, n - i0);
            vmap(VFn::kExp, yr + i0, nullptr, e, w);
            for (int64_t i = 0; i < w; ++i) dxr[i0 + i] = dyr[i0 + i] - e[i] * s;
          }
        } else {
          for (int64_t i = 0; i < n; ++i) dxr[i] = dyr[i] - std::exp(yr[i]) * s;
        }
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += dyr[i] * yr[i];
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dxr[i] = yr[i] * (dyr[i] - s);
      }
    }
    return;
  }
  const int64_t nblk = (inner + kColBlock - 1) / kColBlock;
#pragma omp parallel for if (par && outer * nblk > 1)
  for (int64_t t = 0; t < outer * nblk; ++t) {
    const int64_t o = t / nblk, j0 = (t % nblk) * kColBlock;
    const int64_t w = std::min(kColBlock, inner - j0);
    const int64_t base = o * n * inner + j0;
    T s[kColBlock];
    for (int64_t j = 0; j < w; ++j) s[j] = 0;
    for (int64_t c = 0; c < n; ++c) {
      const int64_t r = base + c * inner;
      if constexpr (kLog) {
        for (int64_t j = 0; j < w; ++j) s[j] += dy[r + j];
      } else {
        for (int64_t j = 0; j < w; ++j) s[j] += dy[r + j] * y[r + j];
      }
    }
    for (int64_t c = 0; c < n; ++c) {
      const int64_t r = base + c * inner;
      if constexpr (kLog) {
        for (int64_t j = 0; j < w; ++j) dx[r + j] = dy[r + j] - std::exp(y[r + j]) * s[j];
      } else {
        for (int64_t j = 0; j < w; ++j) dx[r + j] = y[r + j] * (dy[r + j] - s[j]);
      }
    }
  }
}

}  // namespace pt::cpu
