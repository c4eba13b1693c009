// Conv (1-D to 3-D; groups and depthwise, dilations, strides, explicit pads, optional bias) and its
// backward ops: ConvGradInput (dY, W) -> dX, ConvGradWeight (dY, X) -> dW, ConvGradBias (dY) -> dB.
// float32 runs oneDNN primitives, cached per shape; float64 (the gradient tests) and any shape
// oneDNN refuses run im2col + BLAS GEMM per sample and group. With the executor's weight cache
// (kernels/weight_cache.h) the forward and backward-data passes keep W in oneDNN's layout and
// convert it again only when W's version changed.
#include <cblas.h>

#include <dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "kernels/checks/reduce.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/weight_cache.h"
#include "kernels/window.h"

namespace pt::cpu {
namespace {

// ---- im2col + GEMM (float64, and float32 fallback) --------------------------------------------

// float: oneDNN's GEMM, which runs on the calling thread's OpenMP pool like every other kernel of
// a step. OpenBLAS's own thread pool, woken between OpenMP regions, competes with them for the
// cores: measured on 2 cores, a [32, 512] x [512, 512] product took 0.2 to 7.5 ms through
// OpenBLAS between OpenMP loops and 0.6 ms steadily through oneDNN.
void gemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  PT_CHECK(st == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(st);
}
void gemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
             const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n),
              int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Calls fn(row, out_index, in_index or -1 for padding) for every (channel-in-group, kernel offset)
// row of the column matrix [cg * K, OUT] and every output position.
// One row (channel ci, kernel offset kk) of for_each_col.
template <typename Fn>
void col_row(const Window& w, int64_t ci, int64_t kk, Fn& fn) {
  const int64_t K = w.k_size();
  const int64_t kd = kk / (w.k[1] * w.k[2]), kh = (kk / w.k[2]) % w.k[1], kw = kk % w.k[2];
  const int64_t row = ci * K + kk;
  int64_t o = 0;
  for (int64_t od = 0; od < w.out[0]; ++od) {
    const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
    for (int64_t oh = 0; oh < w.out[1]; ++oh) {
      const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
      const bool inside = id >= 0 && id < w.in[0] && ih >= 0 && ih < w.in[1];
      const int64_t base = ci * w.in_size() + (id * w.in[1] + ih) * w.in[2];
      for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
        const int64_t iw = ow * w.s[2] - w.pb[2] + kw * w.d[2];
        fn(row, o, inside && iw >= 0 && iw < w.in[2] ? base + iw : int64_t{-1});
      }
    }
  }
}

template <typename Fn>
void for_each_col(const Window& w, int64_t cg, Fn&& fn) {
  const int64_t K = w.k_size();
#pragma omp parallel for collapse(2) if (cg * K * w.out_size() > kParallelThreshold)
  for (int64_t ci = 0; ci < cg; ++ci)
    for (int64_t kk = 0; kk < K; ++kk) col_row(w, ci, kk, fn);
}

// for_each_col on the calling thread only (inside a parallel region).
template <typename Fn>
void for_each_col_serial(const Window& w, int64_t cg, Fn&& fn) {
  for (int64_t ci = 0; ci < cg; ++ci)
    for (int64_t kk = 0; kk < w.k_size(); ++kk) col_row(w, ci, kk, fn);
}

template <typename T>
void im2col(const Window& w, int64_t cg, const T* x, T* col) {
  const int64_t out = w.out_size();
  for_each_col(w, cg, [&](int64_t row, int64_t o, int64_t i) { col[row * out + o] = i < 0 ? T(0) : x[i]; });
}

// dx += col2im(col). Threads own input channels: kernel offsets of one channel overlap in dx.
template <typename T>
void col2im_add(const Window& w, int64_t cg, const T* col, T* dx) {
  const int64_t out = w.out_size(), K = w.k_size();
#pragma omp parallel for if (cg * K * out > kParallelThreshold)
  for (int64_t ci = 0; ci < cg; ++ci) {
    for (int64_t kk = 0; kk < K; ++kk) {
      const int64_t kd = kk / (w.k[1] * w.k[2]), kh = (kk / w.k[2]) % w.k[1], kw = kk % w.k[2];
      const T* c = col + (ci * K + kk) * out;
      int64_t o = 0;
      for (int64_t od = 0; od < w.out[0]; ++od) {
        const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
        for (int64_t oh = 0; oh < w.out[1]; ++oh) {
          const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
          const bool inside = id >= 0 && id < w.in[0] && ih >= 0 && ih < w.in[1];
          T* base = dx + ci * w.in_size() + (id * w.in[1] + ih) * w.in[2];
          for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
            const int64_t iw = ow * w.s[2] - w.pb[2] + kw * w.d[2];
            if (inside && iw >= 0 && iw < w.in[2]) base[iw] += c[o];
          }
        }
      }
    }
  }
}

// y = conv(x, wt) + b (kForward); dx = conv^T(dy, wt) (kGradInput); dw = corr(dy, x) (kGradWeight).
template <typename T>
void conv_gemm(Pass pass, const ConvShape& cs, const T* x, const T* wt, const T* b, const T* dy, T* out) {
  const Window& w = cs.w;
  const int64_t cg = w.c / cs.g, mg = cs.m / cs.g, K = w.k_size(), OUT = w.out_size(), IN = w.in_size();
  const int64_t rows = cg * K;
  std::vector<T> col(static_cast<size_t>(rows * OUT));
  if (pass == Pass::kGradInput)
    for (int64_t i = 0; i < w.n * w.c * IN; ++i) out[i] = T(0);
  if (pass == Pass::kGradWeight)
    for (int64_t i = 0; i < cs.m * rows; ++i) out[i] = T(0);
  for (int64_t n = 0; n < w.n; ++n)
    for (int64_t g = 0; g < cs.g; ++g) {
      const int64_t xoff = (n * w.c + g * cg) * IN, yoff = (n * cs.m + g * mg) * OUT;
      const T* wg = wt ? wt + g * mg * rows : nullptr;  // (mg, cg*K)
      switch (pass) {
        case Pass::kForward: {
          im2col(w, cg, x + xoff, col.data());
          T* y = out + yoff;  // (mg, OUT)
          gemm_rm(false, false, mg, OUT, rows, T(1), wg, rows, col.data(), OUT, T(0), y, OUT);
          if (b)
            for (int64_t mi = 0; mi < mg; ++mi)
              for (int64_t o = 0; o < OUT; ++o) y[mi * OUT + o] += b[g * mg + mi];
          break;
        }
        case Pass::kGradInput:
          gemm_rm(true, false, rows, OUT, mg, T(1), wg, rows, dy + yoff, OUT, T(0), col.data(), OUT);
          col2im_add(w, cg, col.data(), out + xoff);
          break;
        case Pass::kGradWeight:
          im2col(w, cg, x + xoff, col.data());
          gemm_rm(false, true, mg, rows, OUT, T(1), dy + yoff, OUT, col.data(), OUT, T(1), out + g * mg * rows,
                  rows);
          break;
      }
    }
}

// ---- the weight gradient of a convolution with few input taps ----------------------------------
//
// dW (M, C*K) = sum over samples of dY_n (M, OUT) col_n^T (OUT, C*K). When C*K is small (a network's
// first convolution: LeNet's 1 x 5 x 5 over 28 x 28 maps) the result is tiny and the reduction over
// N * OUT long; oneDNN 2.6's backward-weights primitive ran it at 2.7 GFLOP/s (5.5 ms, 46 % of a
// LeNet-5 step). Here each thread takes a fixed share of the samples, makes each sample's columns
// in its own buffer and accumulates its own dW with one small GEMM per sample (oneDNN's sgemm on
// the calling thread inside the parallel region); the threads' sums are then added in thread order,
// so the result is the same every run with the same thread count.

constexpr int64_t kFewRows = 64;  // C * K at most

bool few_rows_grad_weight(const ConvShape& cs) {
  return cs.g == 1 && cs.w.c * cs.w.k_size() <= kFewRows && cs.w.n * cs.w.out_size() >= 4096;
}

void grad_weight_few_rows(const ConvShape& cs, const float* x, const float* dy, float* dw) {
  const Window& w = cs.w;
  const int64_t rows = w.c * w.k_size(), out = w.out_size(), in = w.in_size(), m = cs.m;
  const bool par = w.n > 1 && w.n * rows * out > kParallelThreshold;
  const int threads = par ? std::max(1, omp_get_max_threads()) : 1;
  // Both buffers grow to the largest size seen, per thread (no allocation per step once warm).
  thread_local std::vector<float> part;
  part.assign(static_cast<size_t>(threads * m * rows), 0.0f);
  float* pp = part.data();
#pragma omp parallel num_threads(threads) if (par)
  {
    const int t = omp_get_thread_num();
    float* acc = pp + static_cast<size_t>(t) * m * rows;  // (M, C*K)
    thread_local std::vector<float> col;
    if (col.size() < static_cast<size_t>(rows * out)) col.resize(static_cast<size_t>(rows * out));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < w.n; ++n) {
      const float* xn = x + n * w.c * in;
      for_each_col_serial(w, w.c, [&](int64_t row, int64_t o, int64_t i) { col[row * out + o] = i < 0 ? 0.0f : xn[i]; });
      gemm_rm(false, true, m, rows, out, 1.0f, dy + n * m * out, out, col.data(), out, 1.0f, acc, rows);
    }
  }
  for (int64_t j = 0; j < m * rows; ++j) {
    float s = part[j];
    for (int t = 1; t < threads; ++t) s += part[static_cast<size_t>(t * m * rows + j)];
    dw[j] = s;
  }
}

// ---- the weight gradient over tiny output maps ---------------------------------------------------
//
// Spatial kernels (3x3) over output maps of 2 to 4 positions (ResNet-18's layer3 at 32x32 inputs;
// one position is conv_point's): the same sum as above with the samples as one dimension of a
// single GEMM, dW (M, C*K) = dY' (M, N*OUT) col (N*OUT, C*K), where dY' is dY with its samples moved
// inside its channels and col holds every sample's columns as rows. oneDNN 2.6's backward-weights
// primitive ran these at 2.3x its backward-data time for the same FLOPs at one thread (layer3's
// five, batch 32: 9.1 against 4.3 ms; here 6.7-7.6 ms).

constexpr int64_t kTinyMap = 4;  // output positions at most

bool tiny_map_grad_weight(const ConvShape& cs) {
  return cs.g == 1 && cs.w.out_size() <= kTinyMap && cs.w.k_size() > 1 && cs.w.n * cs.w.out_size() >= 32 &&
         cs.w.c * cs.w.k_size() >= 256;
}

void grad_weight_tiny_map(const ConvShape& cs, const float* x, const float* dy, float* dw) {
  const Window& w = cs.w;
  const int64_t rows = w.c * w.k_size(), out = w.out_size(), in = w.in_size(), m = cs.m, kn = w.n * out;
  thread_local std::vector<float> a, col;  // grow to the largest size seen (no allocation per step once warm)
  if (a.size() < static_cast<size_t>(m * kn)) a.resize(static_cast<size_t>(m * kn));
  if (col.size() < static_cast<size_t>(kn * rows)) col.resize(static_cast<size_t>(kn * rows));
  float* pa = a.data();
  float* pc = col.data();
  const bool par = w.n > 1 && kn * rows > kParallelThreshold;
#pragma omp parallel for if (par)
  for (int64_t n = 0; n < w.n; ++n) {
    const float* xn = x + n * w.c * in;
    float* cn = pc + n * out * rows;
    for_each_col_serial(w, w.c, [&](int64_t row, int64_t o, int64_t i) { cn[o * rows + row] = i < 0 ? 0.0f : xn[i]; });
    for (int64_t j = 0; j < m; ++j)
      for (int64_t o = 0; o < out; ++o) pa[j * kn + n * out + o] = dy[(n * m + j) * out + o];
  }
  gemm_rm(false, false, m, rows, kn, 1.0f, pa, kn, pc, rows, 0.0f, dw, rows);
}

// ---- the weight gradient of a depthwise convolution --------------------------------------------
//
// Depthwise (one input channel per group, MobileNet's 3x3 layers): dW[m, 0, tap] = sum over n and
// the output positions o of dY[n, m, o] * X[n, m / mult, in(o, tap)]. oneDNN 2.6's backward-weights
// primitive took 5.9 ms for a [32, 960, 1x1] map (one live tap of nine: 31k multiply-adds) and
// 2.5-3.8 ms at 2x2, 55 % of a MobileNet-V2 step. Small maps run by channel blocks (below); on larger
// ones each output channel is one thread's: per tap, the output positions whose input lies inside X
// form a box, and its rows are dot products (contiguous for stride 1). Channels are split statically
// and each sum has a fixed order, so the result does not depend on the thread count.

bool depthwise(const ConvShape& cs) { return cs.g > 1 && cs.g == cs.w.c && cs.m % cs.g == 0; }

// The output positions [lo, hi) of one dim whose input (o * s - pb + k * d) lies in [0, in).
inline void valid_outputs(int64_t in, int64_t out, int64_t s, int64_t pb, int64_t off, int64_t* lo, int64_t* hi) {
  const int64_t a = pb - off;  // o * s >= a
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  const int64_t b = in - 1 + pb - off;  // o * s <= b
  *hi = b < 0 ? 0 : std::min(out, b / s + 1);
  if (*hi < *lo) *hi = *lo;
}

// Maps of up to kLaneMapMax output positions: channels in blocks of kDepthwiseLanes, one block per
// task. Per sample, the block's X planes are copied into a zero-bordered plane with the channel
// innermost and dY likewise, and then every (output position, tap) pair is one vector multiply-add
// across the block's channels, without bounds checks. Per row (the path below) a 2x2 map gives dot
// products of 1-2 elements. Alone, 2 threads: [32, 960, 1x1] 100 -> 30 us, [32, 384, 2x2] 135 -> 36
// us, [32, 144, 8x8] 460 -> 180 us, [8, 32, 112x112] 2.2 -> 2.0 ms, [8, 96, 112x112] stride 2 3.3
// -> 2.4 ms. The row path keeps larger maps, where the plane (16 channels of it per thread) would
// pass a few MB.
constexpr int64_t kDepthwiseLanes = 16;
constexpr int64_t kLaneMapMax = 128 * 128;

// The padded extents of the lane plane: every input position and every window position fit.
std::array<int64_t, 3> lane_plane_extents(const Window& w) {
  std::array<int64_t, 3> p{};
  for (int i = 0; i < 3; ++i) p[i] = std::max(w.pb[i] + w.in[i], (w.out[i] - 1) * w.s[i] + (w.k[i] - 1) * w.d[i] + 1);
  return p;
}

// One sample's X and dY for the block's channels (lane j at offsets xoff[j], yoff[j]) into the lane
// layouts, position by position: one (vector gather) load of the 16 channels each; lanes past
// `width` get zeros, the plane's borders stay zero. (Reading each channel's row and storing it with
// a 64-byte stride took 1.3-2x as long from 4x4 maps on, and 2-3x on 28x28 to 112x112.)
// Inlined into each ISA's copy of lanes_block: called out of the AVX-512 copy, its SSE code ran
// with the vector registers' upper halves dirty (GCC put no vzeroupper before the call), and the
// [32, 960, 1x1] gradient took 320 us in a training step against 52 us inlined.
__attribute__((always_inline)) inline void lanes_load(const ConvShape& cs, const float* xn, const float* dyn,
                                                      const int64_t* xoff, const int64_t* yoff, int64_t width,
                                                      const std::array<int64_t, 3>& pext, float* xp, float* dyt) {
  constexpr int64_t L = kDepthwiseLanes;
  const Window& w = cs.w;
  for (int64_t o = 0; o < w.out_size(); ++o) {
    float* d = dyt + o * L;
    const float* src = dyn + o;
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) d[j] = j < width ? src[yoff[j]] : 0.0f;
  }
  int64_t i = 0;
  for (int64_t id = 0; id < w.in[0]; ++id)
    for (int64_t ih = 0; ih < w.in[1]; ++ih) {
      float* row = xp + (((id + w.pb[0]) * pext[1] + ih + w.pb[1]) * pext[2] + w.pb[2]) * L;
      for (int64_t iw = 0; iw < w.in[2]; ++iw, ++i) {
        float* d = row + iw * L;
        const float* src = xn + i;
#pragma omp simd
        for (int64_t j = 0; j < L; ++j) d[j] = j < width ? src[xoff[j]] : 0.0f;
      }
    }
}

// The block [m0, m0 + width): each channel's sum runs over samples, output positions and taps in
// that order, whatever the thread count.
PT_CPU_CLONES void lanes_block(const ConvShape& cs, const float* x, const float* dy, float* dw, int64_t m0,
                               int64_t width, const std::array<int64_t, 3>& pext, const int64_t* toff, float* xp,
                               float* dyt, float* acc) {
  constexpr int64_t L = kDepthwiseLanes;
  const Window& w = cs.w;
  const int64_t M = cs.m, mult = cs.m / cs.g, K = w.k_size(), OUT = w.out_size(), IN = w.in_size();
  int64_t xoff[L] = {}, yoff[L] = {};  // lane j's channel plane in X and dY, within one sample
  for (int64_t j = 0; j < width; ++j) {
    xoff[j] = (m0 + j) / mult * IN;
    yoff[j] = (m0 + j) * OUT;
  }
  std::fill(acc, acc + K * L, 0.0f);
  for (int64_t n = 0; n < w.n; ++n) {
    lanes_load(cs, x + n * w.c * IN, dy + n * M * OUT, xoff, yoff, width, pext, xp, dyt);
    int64_t o = 0;
    for (int64_t od = 0; od < w.out[0]; ++od)
      for (int64_t oh = 0; oh < w.out[1]; ++oh)
        for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
          const float* g = dyt + o * L;
          const float* at = xp + ((od * w.s[0] * pext[1] + oh * w.s[1]) * pext[2] + ow * w.s[2]) * L;
          for (int64_t t = 0; t < K; ++t) {
            const float* xv = at + toff[t];
            float* a = acc + t * L;
#pragma omp simd
            for (int64_t l = 0; l < L; ++l) a[l] += g[l] * xv[l];
          }
        }
  }
  for (int64_t j = 0; j < width; ++j)
    for (int64_t t = 0; t < K; ++t) dw[(m0 + j) * K + t] = acc[t * L + j];
}

void grad_weight_depthwise_lanes(const ConvShape& cs, const float* x, const float* dy, float* dw) {
  constexpr int64_t L = kDepthwiseLanes;
  const Window& w = cs.w;
  const int64_t M = cs.m, K = w.k_size();
  const std::array<int64_t, 3> pext = lane_plane_extents(w);
  std::vector<int64_t> toff;  // each tap's offset in the lane plane
  for (int64_t kd = 0; kd < w.k[0]; ++kd)
    for (int64_t kh = 0; kh < w.k[1]; ++kh)
      for (int64_t kw = 0; kw < w.k[2]; ++kw)
        toff.push_back(((kd * w.d[0] * pext[1] + kh * w.d[1]) * pext[2] + kw * w.d[2]) * L);
  const int64_t blocks = (M + L - 1) / L, plane = pext[0] * pext[1] * pext[2];
  const bool par = blocks > 1 && M * w.n * w.out_size() * K > kParallelThreshold;
#pragma omp parallel if (par)
  {
    // Each thread's, grown once (no allocation per call once warm); the plane's borders must be zero.
    thread_local std::vector<float> xp, dyt, acc;
    xp.assign(static_cast<size_t>(plane * L), 0.0f);
    dyt.resize(static_cast<size_t>(w.out_size() * L));
    acc.resize(static_cast<size_t>(K * L));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t m0 = b * L, width = std::min(L, M - m0);
      lanes_block(cs, x, dy, dw, m0, width, pext, toff.data(), xp.data(), dyt.data(), acc.data());
    }
  }
}

void grad_weight_depthwise(const ConvShape& cs, const float* x, const float* dy, float* dw) {
  const Window& w = cs.w;
  const int64_t M = cs.m, mult = cs.m / cs.g, K = w.k_size(), OUT = w.out_size(), IN = w.in_size();
  if (OUT <= kLaneMapMax) {
    grad_weight_depthwise_lanes(cs, x, dy, dw);
    return;
  }
  const bool par = M * w.n * OUT * K > kParallelThreshold;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t m = 0; m < M; ++m) {
    const int64_t c = m / mult;
    int64_t tap = 0;
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw, ++tap) {
          int64_t d0, d1, h0, h1, w0, w1;
          valid_outputs(w.in[0], w.out[0], w.s[0], w.pb[0], kd * w.d[0], &d0, &d1);
          valid_outputs(w.in[1], w.out[1], w.s[1], w.pb[1], kh * w.d[1], &h0, &h1);
          valid_outputs(w.in[2], w.out[2], w.s[2], w.pb[2], kw * w.d[2], &w0, &w1);
          const int64_t len = w1 - w0, sw = w.s[2];
          float acc = 0.0f;
          if (len > 0) {
            for (int64_t n = 0; n < w.n; ++n) {
              const float* dyn = dy + (n * M + m) * OUT;
              const float* xn = x + (n * w.c + c) * IN;
              for (int64_t od = d0; od < d1; ++od) {
                const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
                for (int64_t oh = h0; oh < h1; ++oh) {
                  const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
                  const float* dyr = dyn + (od * w.out[1] + oh) * w.out[2] + w0;
                  const float* xr = xn + (id * w.in[1] + ih) * w.in[2] + (w0 * sw - w.pb[2] + kw * w.d[2]);
                  float row = 0.0f;
                  if (sw == 1) {
#pragma omp simd reduction(+ : row)
                    for (int64_t i = 0; i < len; ++i) row += dyr[i] * xr[i];
                  } else {
#pragma omp simd reduction(+ : row)
                    for (int64_t i = 0; i < len; ++i) row += dyr[i] * xr[i * sw];
                  }
                  acc += row;
                }
              }
            }
          }
          dw[m * K + tap] = acc;
        }
  }
}

// ---- one output position: the batch as one GEMM ---------------------------------------------
//
// When the output has a single spatial position (ResNet's last stage at small inputs: a 3x3
// convolution over a 1x1 or 2x2 map), only the kernel taps that land inside the input contribute
// (one of nine over a 1x1 map). Then forward, grad-input and grad-weight are each one GEMM over the
// batch with K = C * live taps, on the caller's plain tensors: no layout conversion of the large
// weights (oneDNN's blocked kernels spend most of such a call reordering W and dW) and no
// multiply-adds with padding.

bool single_position(const ConvShape& cs) { return cs.g == 1 && cs.w.out_size() == 1; }

// For the single output position: the live taps (kernel offsets inside the input) and the input
// offset within one (n, c) plane of each.
struct Taps {
  std::vector<int64_t> k, in;
};
Taps live_taps(const Window& w) {
  Taps t;
  int64_t kk = 0;
  for (int64_t kd = 0; kd < w.k[0]; ++kd)
    for (int64_t kh = 0; kh < w.k[1]; ++kh)
      for (int64_t kw = 0; kw < w.k[2]; ++kw, ++kk) {
        const int64_t id = -w.pb[0] + kd * w.d[0], ih = -w.pb[1] + kh * w.d[1], iw = -w.pb[2] + kw * w.d[2];
        if (id >= 0 && id < w.in[0] && ih >= 0 && ih < w.in[1] && iw >= 0 && iw < w.in[2]) {
          t.k.push_back(kk);
          t.in.push_back((id * w.in[1] + ih) * w.in[2] + iw);
        }
      }
  return t;
}

// The calling thread's buffer `slot`, grown to the largest seen (no allocation once warm).
template <typename T>
T* point_buf(int slot, size_t n) {
  thread_local std::array<std::vector<T>, 2> bufs;
  if (bufs[slot].size() < n) bufs[slot].resize(n);
  return bufs[slot].data();
}

template <typename T>
void conv_point(Pass pass, const ConvShape& cs, const T* x, const T* wt, const T* b, const T* dy, T* out) {
  const Window& w = cs.w;
  const int64_t N = w.n, C = w.c, M = cs.m, K = w.k_size(), IN = w.in_size();
  const Taps taps = live_taps(w);
  const int64_t L = static_cast<int64_t>(taps.k.size()), CL = C * L;
  const bool all_live = L == K;
  const bool par_x = N * CL > kParallelThreshold, par_w = M * C * K > kParallelThreshold;
  T* col = point_buf<T>(0, static_cast<size_t>(std::max<int64_t>(N * CL, 1)));  // (N, C*L)
  // The live taps of W as (M, C*L): W itself when every tap is live.
  auto live_w = [&]() -> const T* {
    if (all_live) return wt;
    T* wl = point_buf<T>(1, static_cast<size_t>(std::max<int64_t>(M * CL, 1)));
#pragma omp parallel for collapse(2) if (par_w)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t l = 0; l < L; ++l) wl[(m * C + c) * L + l] = wt[(m * C + c) * K + taps.k[l]];
    return wl;
  };
  if (pass != Pass::kGradInput) {
#pragma omp parallel for collapse(2) if (par_x)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t l = 0; l < L; ++l) col[(n * C + c) * L + l] = x[(n * C + c) * IN + taps.in[l]];
  }
  switch (pass) {
    case Pass::kForward: {  // Y (N, M) = col (N, CL) Wl^T (CL, M) [+ b]
      if (b)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t m = 0; m < M; ++m) out[n * M + m] = b[m];
      else if (L == 0)
        for (int64_t i = 0; i < N * M; ++i) out[i] = T(0);
      if (L > 0) gemm_rm(false, true, N, M, CL, T(1), col, CL, live_w(), CL, b ? T(1) : T(0), out, M);
      break;
    }
    case Pass::kGradWeight: {  // dWl (M, CL) = dY^T (M, N) col (N, CL); dead taps get 0
      T* dwl = all_live ? out : point_buf<T>(1, static_cast<size_t>(std::max<int64_t>(M * CL, 1)));
      if (L > 0) gemm_rm(true, false, M, CL, N, T(1), dy, M, col, CL, T(0), dwl, CL);
      if (!all_live) {
#pragma omp parallel for collapse(2) if (par_w)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t c = 0; c < C; ++c) {
            T* o = out + (m * C + c) * K;
            for (int64_t kk = 0; kk < K; ++kk) o[kk] = T(0);
            for (int64_t l = 0; l < L; ++l) o[taps.k[l]] = dwl[(m * C + c) * L + l];
          }
      }
      break;
    }
    case Pass::kGradInput: {  // dcol (N, CL) = dY (N, M) Wl (M, CL); distinct taps hit distinct inputs
      if (L > 0) gemm_rm(false, false, N, CL, M, T(1), dy, M, live_w(), CL, T(0), col, CL);
#pragma omp parallel for collapse(2) if (par_x)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
          T* dxp = out + (n * C + c) * IN;
          for (int64_t i = 0; i < IN; ++i) dxp[i] = T(0);
          for (int64_t l = 0; l < L; ++l) dxp[taps.in[l]] = col[(n * C + c) * L + l];
        }
      break;
    }
  }
}

// ---- oneDNN (float32) --------------------------------------------------------------------------

// One primitive argument: the caller's plain-layout tensor (`user`, handle set per call) and, when
// oneDNN prefers a blocked layout, its own buffer in that layout with the reorder between them.
struct DnnlArg {
  int arg = 0;
  bool output = false;
  dnnl::memory user, inner;  // inner's buffer is the calling thread's scratch slot `slot`
  dnnl::reorder reorder;
  bool reordered = false;
  int slot = 0;
  std::vector<int64_t> layout;  // weights: the pass, shape and `inner` layout, the cache's key
};

// One cached primitive with its arguments; a call sets the handles. Each thread has its own
// cache (pipeline stages run kernels on several threads at once), so no call waits for another.
struct DnnlConv {
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> exec_args;  // the `inner` handles by argument, built once
  std::vector<DnnlArg> args;  // in the order of the pass's data pointers (see run_dnnl)
};

// Everything a primitive depends on, as a fixed-size key (no allocation per call).
using CacheKey = std::array<int64_t, 7 + 6 * kMaxSpatial>;
CacheKey cache_key(Pass pass, const ConvShape& cs) {
  const Window& w = cs.w;
  CacheKey k{static_cast<int64_t>(pass), w.nd, w.n, w.c, cs.m, cs.g, cs.bias};
  size_t i = 7;
  for (const auto* a : {&w.in, &w.k, &w.s, &w.d, &w.pb, &w.pe})
    for (int64_t v : *a) k[i++] = v;
  return k;
}

// The exact layout of a memory descriptor (dims, padding, strides, inner blocks), as integers.
void append_layout(const dnnl::memory::desc& md, std::vector<int64_t>* out) {
  const dnnl_memory_desc_t& d = md.data;
  out->insert(out->end(), {d.ndims, static_cast<int64_t>(d.data_type), static_cast<int64_t>(d.format_kind), d.offset0,
                           static_cast<int64_t>(d.extra.flags), static_cast<int64_t>(md.get_size())});
  for (int i = 0; i < d.ndims; ++i) out->insert(out->end(), {d.dims[i], d.padded_dims[i], d.padded_offsets[i]});
  if (d.format_kind == dnnl_blocked) {
    const dnnl_blocking_desc_t& b = d.format_desc.blocking;
    for (int i = 0; i < d.ndims; ++i) out->push_back(b.strides[i]);
    out->push_back(b.inner_nblks);
    for (int i = 0; i < b.inner_nblks; ++i) out->insert(out->end(), {b.inner_blks[i], b.inner_idxs[i]});
  }
}

void add_arg(DnnlConv* e, int arg, const dnnl::memory::desc& user_md, const dnnl::memory::desc& prim_md,
             bool output, const CacheKey& key) {
  dnnl::engine& eng = dnnl_engine();
  DnnlArg a;
  a.arg = arg;
  a.output = output;
  a.user = dnnl::memory(user_md, eng, DNNL_MEMORY_NONE);
  if (prim_md == user_md) {
    a.inner = a.user;
  } else {
    a.inner = dnnl::memory(prim_md, eng, DNNL_MEMORY_NONE);
    a.reorder = output ? dnnl::reorder(a.inner, a.user) : dnnl::reorder(a.user, a.inner);
    a.reordered = true;
    for (const DnnlArg& b : e->args) a.slot += b.reordered;
    if (arg == DNNL_ARG_WEIGHTS && !output) {
      a.layout.assign(key.begin(), key.end());
      append_layout(prim_md, &a.layout);
    }
  }
  e->args.push_back(std::move(a));
}

// The calling thread's cached primitive for (pass, shape), or nullptr when oneDNN has none
// (remembered too). oneDNN chooses the layouts (format_tag::any): blocked layouts run its fast
// kernels, and the reorders to and from the caller's NCHW tensors cost far less than the
// plain-layout kernels (measured: plain weights fall back to gemm:jit, 1.6x to 4x slower).
// Creating a thread's entry is cheap after the first thread: oneDNN keeps a global primitive cache.
DnnlConv* dnnl_conv(Pass pass, const ConvShape& cs) {
  thread_local std::map<CacheKey, std::unique_ptr<DnnlConv>> cache;
  const CacheKey key = cache_key(pass, cs);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  using md = dnnl::memory::desc;
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const Window& w = cs.w;
  const int off = kMaxSpatial - w.nd;
  dnnl::memory::dims xd = {w.n, w.c}, yd = {w.n, cs.m}, wd, strides, dil, pl, pr;
  if (cs.g > 1) wd = {cs.g, cs.m / cs.g, w.c / cs.g};
  else wd = {cs.m, w.c};
  for (int i = off; i < kMaxSpatial; ++i) {
    xd.push_back(w.in[i]);
    yd.push_back(w.out[i]);
    wd.push_back(w.k[i]);
    strides.push_back(w.s[i]);
    dil.push_back(w.d[i] - 1);
    pl.push_back(w.pb[i]);
    pr.push_back(w.pe[i]);
  }
  const tag act = w.nd == 1 ? tag::ncw : w.nd == 2 ? tag::nchw : tag::ncdhw;
  const tag wtag = cs.g > 1 ? (w.nd == 1 ? tag::goiw : w.nd == 2 ? tag::goihw : tag::goidhw)
                            : (w.nd == 1 ? tag::oiw : w.nd == 2 ? tag::oihw : tag::oidhw);
  const md x_md(xd, dt::f32, act), y_md(yd, dt::f32, act), w_md(wd, dt::f32, wtag), b_md({cs.m}, dt::f32, tag::x);
  const md x_any(xd, dt::f32, tag::any), y_any(yd, dt::f32, tag::any), w_any(wd, dt::f32, tag::any);
  auto entry = std::make_unique<DnnlConv>();
  dnnl::engine& eng = dnnl_engine();
  try {
    const auto algo = dnnl::algorithm::convolution_direct;
    const auto prop = dnnl::prop_kind::forward_training;
    auto fwd_d = cs.bias && pass == Pass::kForward
                     ? dnnl::convolution_forward::desc(prop, algo, x_any, w_any, b_md, y_any, strides, dil, pl, pr)
                     : dnnl::convolution_forward::desc(prop, algo, x_any, w_any, y_any, strides, dil, pl, pr);
    dnnl::convolution_forward::primitive_desc fwd_pd(fwd_d, eng);
    switch (pass) {
      case Pass::kForward:
        entry->prim = dnnl::convolution_forward(fwd_pd);
        add_arg(entry.get(), DNNL_ARG_SRC, x_md, fwd_pd.src_desc(), false, key);
        add_arg(entry.get(), DNNL_ARG_WEIGHTS, w_md, fwd_pd.weights_desc(), false, key);
        if (cs.bias) add_arg(entry.get(), DNNL_ARG_BIAS, b_md, b_md, false, key);
        add_arg(entry.get(), DNNL_ARG_DST, y_md, fwd_pd.dst_desc(), true, key);
        break;
      case Pass::kGradInput: {
        dnnl::convolution_backward_data::desc d(algo, x_any, w_any, y_any, strides, dil, pl, pr);
        dnnl::convolution_backward_data::primitive_desc pd(d, eng, fwd_pd);
        entry->prim = dnnl::convolution_backward_data(pd);
        add_arg(entry.get(), DNNL_ARG_DIFF_DST, y_md, pd.diff_dst_desc(), false, key);
        add_arg(entry.get(), DNNL_ARG_WEIGHTS, w_md, pd.weights_desc(), false, key);
        add_arg(entry.get(), DNNL_ARG_DIFF_SRC, x_md, pd.diff_src_desc(), true, key);
        break;
      }
      case Pass::kGradWeight: {
        dnnl::convolution_backward_weights::desc d(algo, x_any, w_any, y_any, strides, dil, pl, pr);
        dnnl::convolution_backward_weights::primitive_desc pd(d, eng, fwd_pd);
        entry->prim = dnnl::convolution_backward_weights(pd);
        add_arg(entry.get(), DNNL_ARG_DIFF_DST, y_md, pd.diff_dst_desc(), false, key);
        add_arg(entry.get(), DNNL_ARG_SRC, x_md, pd.src_desc(), false, key);
        add_arg(entry.get(), DNNL_ARG_DIFF_WEIGHTS, w_md, pd.diff_weights_desc(), true, key);
        break;
      }
    }
  } catch (const dnnl::error&) {
    entry.reset();
  }
  DnnlConv* p = entry.get();
  cache.emplace(key, std::move(entry));
  return p;
}

// W in the primitive's layout: the cache's copy when its version is `version`, else converted
// into the cache (and its version recorded).
void cached_weights(DnnlArg& a, const float* w, size_t bytes, WeightCache& cache, uint64_t version,
                    dnnl::stream& stream, Scratch& scratch) {
  WeightCache::Entry* c = cache.entry(w, a.layout, bytes);
  a.inner.set_data_handle(c->data);
  const bool hit = c->version == version || (c->version != 0 && cache.checks().ignore_versions);
  if (!hit) {
    a.reorder.execute(stream, a.user, a.inner);
    c->version = version;
    cache.reordered();
    return;
  }
  cache.hit();
  if (!cache.checks().verify) return;
  a.inner.set_data_handle(scratch.get(a.slot, bytes));
  a.reorder.execute(stream, a.user, a.inner);
  stream.wait();
  PT_CHECK(std::memcmp(a.inner.get_data_handle(), c->data, bytes) == 0)
      << "weight cache: the copy of the weight at " << static_cast<const void*>(w) << " (version " << version
      << ") differs from the weight: something wrote it without a new version";
  a.inner.set_data_handle(c->data);
}

// Runs a cached primitive; false (and nothing written) when oneDNN has none for this shape.
// `ptrs` follow the argument order of dnnl_conv: forward (x, w, [b], y); grad input (dy, w, dx);
// grad weight (dy, x, dw). With `cache` and a non-zero `w_version`, W's converted copy is kept.
Expected<bool> run_dnnl(Pass pass, const ConvShape& cs, std::initializer_list<const float*> ptrs,
                        WeightCache* cache = nullptr, uint64_t w_version = 0) {
  DnnlConv* prim = dnnl_conv(pass, cs);
  if (!prim) return false;
  DnnlConv& e = *prim;
  thread_local dnnl::stream stream(dnnl_engine());
  thread_local Scratch scratch;
  PT_CHECK(ptrs.size() == e.args.size()) << "oneDNN convolution: " << ptrs.size() << " tensors for "
                                         << e.args.size() << " arguments";
  try {
    if (e.exec_args.empty())
      for (const DnnlArg& a : e.args) e.exec_args[a.arg] = a.inner;
    size_t i = 0;
    for (const float* p : ptrs) {
      DnnlArg& a = e.args[i++];
      a.user.set_data_handle(const_cast<float*>(p));
      if (!a.reordered) continue;
      const size_t bytes = a.inner.get_desc().get_size();
      if (cache && w_version && !a.layout.empty()) {
        cached_weights(a, p, bytes, *cache, w_version, stream, scratch);
        continue;
      }
      a.inner.set_data_handle(scratch.get(a.slot, bytes));
      if (!a.output) a.reorder.execute(stream, a.user, a.inner);
    }
    e.prim.execute(stream, e.exec_args);
    for (DnnlArg& a : e.args)
      if (a.reordered && a.output) a.reorder.execute(stream, a.inner, a.user);
    stream.wait();
  } catch (const dnnl::error& err) {
    return internal_error(std::string("oneDNN convolution failed: ") + err.what());
  }
  return true;
}

template <typename T>
Status run_conv(Pass pass, const ConvShape& cs, const T* x, const T* wt, const T* b, const T* dy, T* out,
                WeightCache* cache = nullptr, uint64_t w_version = 0) {
  if (cs.w.n == 0) return Status::ok();
  if (single_position(cs)) {
    conv_point(pass, cs, x, wt, b, dy, out);
    return Status::ok();
  }
  if constexpr (std::is_same_v<T, float>) {
    Expected<bool> done = false;
    switch (pass) {
      case Pass::kForward:
        done = b ? run_dnnl(pass, cs, {x, wt, b, out}, cache, w_version)
                 : run_dnnl(pass, cs, {x, wt, out}, cache, w_version);
        break;
      case Pass::kGradInput: done = run_dnnl(pass, cs, {dy, wt, out}, cache, w_version); break;
      case Pass::kGradWeight:
        if (depthwise(cs)) {
          grad_weight_depthwise(cs, x, dy, out);
          return Status::ok();
        }
        if (few_rows_grad_weight(cs)) {
          grad_weight_few_rows(cs, x, dy, out);
          return Status::ok();
        }
        if (tiny_map_grad_weight(cs)) {
          grad_weight_tiny_map(cs, x, dy, out);
          return Status::ok();
        }
        done = run_dnnl(pass, cs, {dy, x, out});
        break;
    }
    if (!done) return done.status();
    if (*done) return Status::ok();
  }
  conv_gemm(pass, cs, x, wt, b, dy, out);
  return Status::ok();
}

}  // namespace

template <typename T>
Status conv(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Conv", 2, 1));
  const TensorView& x = call.inputs[0];  // (N, C, in...)
  const TensorView& w = call.inputs[1];  // (M, C/g, k...)
  const TensorView& y = call.outputs[0];  // (N, M, out...)
  ConvShape cs;
  RETURN_IF_ERROR(conv_shape("Conv", call.attrs, x.dims, w.dims, y.dims, &cs));
  const T* b = nullptr;
  if (has_input(call, 2)) {
    RETURN_IF_ERROR(check_same_dims("Conv", "B", call.inputs[2].dims, Dims{cs.m}));
    b = call.inputs[2].as<T>();
    cs.bias = true;
  }
  return run_conv<T>(Pass::kForward, cs, x.as<T>(), w.as<T>(), b, nullptr, y.as<T>(), call.weight_cache,
                     call.version(1));
}

template <typename T>
Status conv_grad_input(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ConvGradInput", 2, 1));
  const TensorView& dy = call.inputs[0];  // (N, M, out...)
  const TensorView& w = call.inputs[1];   // (M, C/g, k...)
  const TensorView& dx = call.outputs[0];  // (N, C, in...)
  ConvShape cs;
  RETURN_IF_ERROR(conv_shape("ConvGradInput", call.attrs, dx.dims, w.dims, dy.dims, &cs));
  return run_conv<T>(Pass::kGradInput, cs, nullptr, w.as<T>(), nullptr, dy.as<T>(), dx.as<T>(), call.weight_cache,
                     call.version(1));
}

template <typename T>
Status conv_grad_weight(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ConvGradWeight", 2, 1));
  const TensorView& dy = call.inputs[0];  // (N, M, out...)
  const TensorView& x = call.inputs[1];   // (N, C, in...)
  const TensorView& dw = call.outputs[0];  // (M, C/g, k...)
  ConvShape cs;
  RETURN_IF_ERROR(conv_shape("ConvGradWeight", call.attrs, x.dims, dw.dims, dy.dims, &cs));
  if (cs.w.n == 0) {
    for (int64_t i = 0; i < dw.size(); ++i) dw.as<T>()[i] = T(0);
    return Status::ok();
  }
  return run_conv<T>(Pass::kGradWeight, cs, x.as<T>(), nullptr, nullptr, dy.as<T>(), dw.as<T>());
}

template <typename T>
Status conv_grad_bias(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_conv_grad_bias(call));
  const TensorView& dy = call.inputs[0];  // (N, M, spatial...)
  const TensorView& db = call.outputs[0];  // (M)
  const int64_t n = dy.dims[0], m = dy.dims[1], sp = m ? dy.size() / std::max<int64_t>(n * m, 1) : 0;
  const T* pdy = dy.as<T>();
  T* pdb = db.as<T>();
#pragma omp parallel for if (dy.size() > kParallelThreshold)
  for (int64_t c = 0; c < m; ++c) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T* p = pdy + (i * m + c) * sp;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < sp; ++j) s += p[j];
    }
    pdb[c] = static_cast<T>(s);
  }
  return Status::ok();
}

template Status conv<float>(const KernelCall&);
template Status conv<double>(const KernelCall&);
template Status conv_grad_input<float>(const KernelCall&);
template Status conv_grad_input<double>(const KernelCall&);
template Status conv_grad_weight<float>(const KernelCall&);
template Status conv_grad_weight<double>(const KernelCall&);
template Status conv_grad_bias<float>(const KernelCall&);
template Status conv_grad_bias<double>(const KernelCall&);

}  // namespace pt::cpu
