// LayerNormalization (opset 17) on the CPU and its backward op. X is viewed as (rows, cols) with
// cols = prod(dims[axis:]); statistics are computed in double per row. The backward op recomputes
// mean and 1/stddev from X (one extra pass over a row already in cache) so that the forward node
// needs no extra outputs.
// float32 rows run in functions built three times by target_clones (AVX-512, AVX2, baseline; the
// loader picks one): the double arithmetic of the statistics and the per-element formulas is
// 2 lanes wide in the baseline build, 8 with AVX-512 (a Transformer's [512, 64] LayerNorm, one
// thread: forward 44-50 -> 31-41 us, backward 72-88 -> 54-63 us; at 64 columns the per-row sums'
// horizontal adds and divisions are most of what is left). Per element the formulas are those of
// the double path, so the clones differ only in the order of the row sums.
#include <cmath>
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/checks/layernorm.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

// The sums run as vector reductions (several partial sums in double), not one serial chain.
template <typename T>
[[gnu::always_inline]] inline void row_stats(const T* xr, int64_t cols, double eps, double* mean, double* inv_std) {
  double m = 0;
#pragma omp simd reduction(+ : m)
  for (int64_t j = 0; j < cols; ++j) m += xr[j];
  m /= static_cast<double>(cols);
  double v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t j = 0; j < cols; ++j) {
    const double d = xr[j] - m;
    v += d * d;
  }
  v /= static_cast<double>(cols);
  *mean = m;
  *inv_std = 1.0 / std::sqrt(v + eps);
}

// Rows [r0, r1) of the forward: Y, and mean / inv_std_dev when asked for.
template <typename T>
[[gnu::always_inline]] inline void ln_forward_rows(const T* px, const T* pg, const T* pb, T* py, T* pm, T* pi, int64_t r0, int64_t r1,
                            int64_t cols, double eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = px + r * cols;
    T* yr = py + r * cols;
    double m, inv;
    row_stats(xr, cols, eps, &m, &inv);
    if (pb) {
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>((xr[j] - m) * inv * pg[j] + static_cast<double>(pb[j]));
    } else {
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>((xr[j] - m) * inv * pg[j] + 0.0);
    }
    if (pm) pm[r] = static_cast<T>(m);
    if (pi) pi[r] = static_cast<T>(inv);
  }
}

// Rows [r0, r1) of the backward: dX where asked for, and the rows' dScale and dB added into lds and
// ldb; xhr: scratch for one row's normalised x.
template <typename T>
[[gnu::always_inline]] inline void ln_backward_rows(const T* pdy, const T* px, const T* pg, T* pdx, double* lds, double* ldb, double* xhr,
                             int64_t r0, int64_t r1, int64_t cols, double eps, bool want_ds, bool want_db) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = px + r * cols;
    const T* dyr = pdy + r * cols;
    double m, inv;
    row_stats(xr, cols, eps, &m, &inv);
    double mg = 0, mgx = 0;
#pragma omp simd reduction(+ : mg, mgx)
    for (int64_t j = 0; j < cols; ++j) {
      const double h = (xr[j] - m) * inv, g = static_cast<double>(dyr[j]) * pg[j];
      xhr[j] = h;
      mg += g;
      mgx += g * h;
    }
    if (want_ds) {
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) lds[j] += static_cast<double>(dyr[j]) * xhr[j];
    }
    if (want_db) {
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) ldb[j] += dyr[j];
    }
    mg /= static_cast<double>(cols);
    mgx /= static_cast<double>(cols);
    if (pdx) {
      T* dxr = pdx + r * cols;
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) dxr[j] = static_cast<T>(inv * (static_cast<double>(dyr[j]) * pg[j] - mg - xhr[j] * mgx));
    }
  }
}

PT_CPU_CLONES void ln_forward_rows_f32(const float* px, const float* pg, const float* pb, float* py, float* pm, float* pi,
                                      int64_t r0, int64_t r1, int64_t cols, double eps) {
  ln_forward_rows(px, pg, pb, py, pm, pi, r0, r1, cols, eps);
}
PT_CPU_CLONES void ln_backward_rows_f32(const float* pdy, const float* px, const float* pg, float* pdx, double* lds,
                                       double* ldb, double* xhr, int64_t r0, int64_t r1, int64_t cols, double eps,
                                       bool want_ds, bool want_db) {
  ln_backward_rows(pdy, px, pg, pdx, lds, ldb, xhr, r0, r1, cols, eps, want_ds, want_db);
}

template <typename T>
void forward_rows(const T* px, const T* pg, const T* pb, T* py, T* pm, T* pi, int64_t r0, int64_t r1, int64_t cols,
                  double eps) {
  if constexpr (std::is_same_v<T, float>) ln_forward_rows_f32(px, pg, pb, py, pm, pi, r0, r1, cols, eps);
  else ln_forward_rows(px, pg, pb, py, pm, pi, r0, r1, cols, eps);
}
template <typename T>
void backward_rows(const T* pdy, const T* px, const T* pg, T* pdx, double* lds, double* ldb, double* xhr, int64_t r0,
                   int64_t r1, int64_t cols, double eps, bool want_ds, bool want_db) {
  if constexpr (std::is_same_v<T, float>)
    ln_backward_rows_f32(pdy, px, pg, pdx, lds, ldb, xhr, r0, r1, cols, eps, want_ds, want_db);
  else ln_backward_rows(pdy, px, pg, pdx, lds, ldb, xhr, r0, r1, cols, eps, want_ds, want_db);
}

}  // namespace

// (X, scale[, B]) -> Y[, mean, inv_std_dev]; mean and inv_std_dev shaped dims[:axis] + 1s.
template <typename T>
Status layer_norm(const KernelCall& call) {
  kernels::LayerNormGeometry s;
  RETURN_IF_ERROR(kernels::check_layer_norm(call, &s));
  const TensorView& x = call.inputs[0];
  const TensorView& scale = call.inputs[1];
  const double eps = s.eps;
  const bool has_b = has_input(call, 2);
  const T* px = x.as<T>();                              // (rows, cols)
  const T* pg = scale.as<T>();                          // (cols)
  const T* pb = has_b ? call.inputs[2].as<T>() : nullptr;  // (cols)
  T* py = call.outputs[0].as<T>();                      // (rows, cols)
  T* pm = call.outputs.size() > 1 && call.outputs[1].data ? call.outputs[1].as<T>() : nullptr;  // (rows)
  T* pi = call.outputs.size() > 2 && call.outputs[2].data ? call.outputs[2].as<T>() : nullptr;  // (rows)
  const bool par = x.size() > kParallelThreshold && s.rows > 1;
#pragma omp parallel if (par)
  {
    int64_t r0, r1;
    thread_share(s.rows, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
    forward_rows(px, pg, pb, py, pm, pi, r0, r1, s.cols, eps);
  }
  return Status::ok();
}

// (dY, X, scale) -> dX, dScale, dB. With xhat = (x - mean) * inv and g = dY * scale:
// dX = inv * (g - mean(g) - xhat * mean(g * xhat)), dScale = sum_rows dY * xhat, dB = sum_rows dY.
template <typename T>
Status layer_norm_grad(const KernelCall& call) {
  kernels::LayerNormGeometry s;
  RETURN_IF_ERROR(kernels::check_layer_norm_grad(call, &s));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const TensorView& scale = call.inputs[2];
  const double eps = s.eps;
  const T* pdy = dy.as<T>();     // (rows, cols)
  const T* px = x.as<T>();       // (rows, cols)
  const T* pg = scale.as<T>();   // (cols)
  T* pdx = call.outputs[0].data ? call.outputs[0].as<T>() : nullptr;                           // (rows, cols)
  T* pds = call.outputs.size() > 1 && call.outputs[1].data ? call.outputs[1].as<T>() : nullptr;  // (cols)
  T* pdb = call.outputs.size() > 2 && call.outputs[2].data ? call.outputs[2].as<T>() : nullptr;  // (cols)
  // dScale and dB: each thread sums its rows into its own slice of `part`, then the slices are
  // added in thread order (a fixed order: the same bits every run with the same thread count).
  const bool par = x.size() > kParallelThreshold && s.rows > 1;
  const int threads = par ? omp_get_max_threads() : 1;
  const size_t cols = static_cast<size_t>(s.cols);
  // Grown to the largest size seen, per calling thread (no allocation per step once warm).
  thread_local std::vector<double> part;  // per thread of the region: dScale, dB
  part.assign(static_cast<size_t>(threads) * 2 * cols, 0.0);
  double* pp = part.data();
#pragma omp parallel num_threads(threads) if (par)
  {
    const int t = omp_get_thread_num();
    double* lds = pp + static_cast<size_t>(t) * 2 * cols;
    thread_local std::vector<double> xh;  // the row's normalised x (this thread's)
    if (xh.size() < cols) xh.resize(cols);
    double* xhr = xh.data();
    int64_t r0, r1;
    thread_share(s.rows, t, omp_get_num_threads(), &r0, &r1);
    backward_rows(pdy, px, pg, pdx, lds, lds + cols, xhr, r0, r1, s.cols, eps, pds != nullptr, pdb != nullptr);
  }
  for (int64_t j = 0; j < s.cols; ++j) {
    double sum_s = 0, sum_b = 0;
    for (int t = 0; t < threads; ++t) {
      sum_s += part[static_cast<size_t>(t) * 2 * cols + j];
      sum_b += part[static_cast<size_t>(t) * 2 * cols + cols + j];
    }
    if (pds) pds[j] = static_cast<T>(sum_s);
    if (pdb) pdb[j] = static_cast<T>(sum_b);
  }
  return Status::ok();
}

template Status layer_norm<float>(const KernelCall& call);
template Status layer_norm<double>(const KernelCall& call);
template Status layer_norm_grad<float>(const KernelCall& call);
template Status layer_norm_grad<double>(const KernelCall& call);

}  // namespace pt::cpu
