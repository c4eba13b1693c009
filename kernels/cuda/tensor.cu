// Data movement and LayerNormalization on the device (kernels/cpu/tensor_ops.cpp and
// kernels/cpu/layernorm.cpp are the references): strided scatters (Concat, SliceGrad), Gather and
// its gradient by rows, and LayerNormalization forward and backward with the CPU's double
// statistics. Out-of-range gather indices are recorded in the device's deferred error word
// (launch.h) instead of being checked by the host.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

template <typename T>
__global__ void scatter_copy_kernel(Strided<1> s, T* y, const T* x, int64_t n, bool add) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[1];
    strided_offsets<1>(s, i, off);
    if (add) y[off[0]] += x[i];
    else y[off[0]] = x[i];
  }
}

// The row index j (of ni) of gather position t, wrapped and checked against len: -1 when out of range.
template <typename I>
__device__ __forceinline__ int64_t gather_row(const I* idx, int64_t j, int64_t len, DeferredError* err, int op) {
  int64_t k = static_cast<int64_t>(idx[j]);
  const int64_t given = k;
  if (k < 0) k += len;
  if (k < 0 || k >= len) {
    record_deferred_error(err, kDeferredIndexOutOfRange, op, given, len, j);
    return -1;
  }
  return k;
}

// y (outer, ni, inner) = d (outer, len, inner) at rows idx; rows out of range give zeros.
template <typename T, typename I>
__global__ void gather_rows_kernel(T* y, const T* d, const I* idx, int64_t outer, int64_t len, int64_t ni,
                                   int64_t inner, DeferredError* err) {
  const int64_t n = outer * ni * inner;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t c = i % inner, t = i / inner, j = t % ni, o = t / ni;
    const int64_t k = gather_row(idx, j, len, err, kDeferredOpGather);
    y[i] = k < 0 ? T(0) : d[(o * len + k) * inner + c];
  }
}

// dd (outer, len, inner), zeroed by the launcher, += dy (outer, ni, inner) at rows idx. One thread
// per (o, c) walks j in order, so repeated indices add in the CPU's order without atomics.
template <typename T, typename I>
__global__ void gather_rows_grad_kernel(T* dd, const T* dy, const I* idx, int64_t outer, int64_t len, int64_t ni,
                                        int64_t inner, DeferredError* err) {
  const int64_t n = outer * inner;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t c = i % inner, o = i / inner;
    for (int64_t j = 0; j < ni; ++j) {
      const int64_t k = gather_row(idx, j, len, c == 0 && o == 0 ? err : nullptr, kDeferredOpGatherGrad);
      if (k >= 0) dd[(o * len + k) * inner + c] += dy[(o * ni + j) * inner + c];
    }
  }
}

template <typename T>
__global__ void layer_norm_kernel(T* y, T* mean_out, T* inv_out, double* stats, const T* x, const T* g, const T* b,
                                  int64_t rows, int64_t cols, double eps) {
  __shared__ double shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double m, inv;
    block_mean_rstd(xr, cols, eps, shared, &m, &inv);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      yr[j] = static_cast<T>((static_cast<double>(xr[j]) - m) * inv * static_cast<double>(g[j]) +
                             (b ? static_cast<double>(b[j]) : 0.0));
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = static_cast<T>(m);
      if (inv_out) inv_out[r] = static_cast<T>(inv);
      if (stats) {
        stats[2 * r] = m;
        stats[2 * r + 1] = inv;
      }
    }
    __syncthreads();
  }
}

// dX per row: inv * (dy*g - mean(dy*g) - xhat * mean(dy*g*xhat)); the row's mean and 1/stddev
// go to stats for the column sums.
template <typename T>
__global__ void layer_norm_grad_rows_kernel(T* dx, double* stats, const T* dy, const T* x, const T* g, int64_t rows,
                                            int64_t cols, double eps) {
  __shared__ double shared[32];
  __shared__ double mg_shared, mgx_shared;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    double m, inv;
    block_mean_rstd(xr, cols, eps, shared, &m, &inv);
    double mg = 0, mgx = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double h = (static_cast<double>(xr[j]) - m) * inv, gg = static_cast<double>(dyr[j]) * g[j];
      mg += gg;
      mgx += gg * h;
    }
    mg = block_sum(mg, shared);
    mgx = block_sum(mgx, shared);
    if (threadIdx.x == 0) {
      mg_shared = mg / static_cast<double>(cols);
      mgx_shared = mgx / static_cast<double>(cols);
      stats[2 * r] = m;
      stats[2 * r + 1] = inv;
    }
    __syncthreads();
    if (dx) {
      T* dxr = dx + r * cols;
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        const double h = (static_cast<double>(xr[j]) - m) * inv;
        dxr[j] = static_cast<T>(inv * (static_cast<double>(dyr[j]) * g[j] - mg_shared - h * mgx_shared));
      }
    }
    __syncthreads();
  }
}

// dScale[c] = sum_r dy[r, c] * xhat[r, c], dB[c] = sum_r dy[r, c]: one thread per column, rows in
// order (deterministic), accumulated in double.
template <typename T>
__global__ void layer_norm_grad_cols_kernel(T* dscale, T* dbias, const double* stats, const T* dy, const T* x,
                                            int64_t rows, int64_t cols) {
  for (int64_t c = global_index(); c < cols; c += global_stride()) {
    double ds = 0, db = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double d = static_cast<double>(dy[r * cols + c]);
      ds += d * ((static_cast<double>(x[r * cols + c]) - stats[2 * r]) * stats[2 * r + 1]);
      db += d;
    }
    if (dscale) dscale[c] = static_cast<T>(ds);
    if (dbias) dbias[c] = static_cast<T>(db);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_scatter_copy(const Strided<1>& s, T* y, const T* x, int64_t n, bool add, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  scatter_copy_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(s, y, x, n, add);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_gather_rows(T* y, const T* d, const void* idx, bool idx_i64, int64_t outer, int64_t len, int64_t ni,
                               int64_t inner, DeferredError* err, cudaStream_t stream) {
  const int64_t n = outer * ni * inner;
  if (n <= 0) return cudaSuccess;
  if (idx_i64)
    gather_rows_kernel<T, int64_t><<<grid_for(n), kBlock, 0, stream>>>(y, d, static_cast<const int64_t*>(idx), outer,
                                                                       len, ni, inner, err);
  else
    gather_rows_kernel<T, int32_t><<<grid_for(n), kBlock, 0, stream>>>(y, d, static_cast<const int32_t*>(idx), outer,
                                                                       len, ni, inner, err);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_gather_rows_grad(T* dd, const T* dy, const void* idx, bool idx_i64, int64_t outer, int64_t len,
                                    int64_t ni, int64_t inner, DeferredError* err, cudaStream_t stream) {
  const int64_t total = outer * len * inner;
  if (total <= 0) return cudaSuccess;
  const cudaError_t e = cudaMemsetAsync(dd, 0, static_cast<size_t>(total) * sizeof(T), stream);
  if (e != cudaSuccess) return e;
  const int64_t n = outer * inner;
  if (n <= 0 || ni <= 0) return cudaSuccess;
  if (idx_i64)
    gather_rows_grad_kernel<T, int64_t><<<grid_for(n), kBlock, 0, stream>>>(
        dd, dy, static_cast<const int64_t*>(idx), outer, len, ni, inner, err);
  else
    gather_rows_grad_kernel<T, int32_t><<<grid_for(n), kBlock, 0, stream>>>(
        dd, dy, static_cast<const int32_t*>(idx), outer, len, ni, inner, err);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_layer_norm(T* y, T* mean, T* inv_std, const T* x, const T* scale, const T* bias, int64_t rows,
                              int64_t cols, double eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  layer_norm_kernel<T><<<row_grid(rows), kBlock, 0, stream>>>(y, mean, inv_std, nullptr, x, scale, bias, rows, cols,
                                                              eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_layer_norm_grad(T* dx, T* dscale, T* dbias, const T* dy, const T* x, const T* scale, int64_t rows,
                                   int64_t cols, double eps, double* stats, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  layer_norm_grad_rows_kernel<T><<<row_grid(rows), kBlock, 0, stream>>>(dx, stats, dy, x, scale, rows, cols, eps);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || (!dscale && !dbias)) return e;
  layer_norm_grad_cols_kernel<T><<<grid_for(cols), kBlock, 0, stream>>>(dscale, dbias, stats, dy, x, rows, cols);
  return cudaGetLastError();
}

#define PT_SCATTER(T) \
  template cudaError_t launch_scatter_copy<T>(const Strided<1>&, T*, const T*, int64_t, bool, cudaStream_t);
PT_SCATTER(float)
PT_SCATTER(double)
PT_SCATTER(int64_t)
PT_SCATTER(int32_t)
PT_SCATTER(uint8_t)
#undef PT_SCATTER
#define PT_ROWS(T)                                                                                                  \
  template cudaError_t launch_gather_rows<T>(T*, const T*, const void*, bool, int64_t, int64_t, int64_t, int64_t, \
                                             DeferredError*, cudaStream_t);
PT_ROWS(float)
PT_ROWS(double)
PT_ROWS(int64_t)
PT_ROWS(int32_t)
PT_ROWS(uint8_t)
#undef PT_ROWS
#define PT_FLOAT(T)                                                                                                    \
  template cudaError_t launch_gather_rows_grad<T>(T*, const T*, const void*, bool, int64_t, int64_t, int64_t, int64_t, \
                                                  DeferredError*, cudaStream_t);                                       \
  template cudaError_t launch_layer_norm<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double,       \
                                            cudaStream_t);                                                             \
  template cudaError_t launch_layer_norm_grad<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double,  \
                                                 double*, cudaStream_t);
PT_FLOAT(float)
PT_FLOAT(double)
#undef PT_FLOAT

}  // namespace pt::cuda
