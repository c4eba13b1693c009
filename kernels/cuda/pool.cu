// Pooling kernels with the semantics of kernels/cpu/pool.cpp: explicit (possibly asymmetric) pads,
// dilations, 1 to 3 spatial dims right-aligned into (D, H, W); MaxPool's first maximum in the
// window's row-major scan wins, padding never wins, NaN never replaces a number (the CPU's `x > best`
// scan), optional int64 Indices (storage_order 1: column-major within the plane). cuDNN's pooling
// has none of asymmetric pads, dilations, these tie rules or Indices, hence custom kernels. One
// thread per output element; the backward ops scatter with atomicAdd into a zeroed dX.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

// Valid kernel offsets [lo, hi) of output coordinate o along dim j (as the CPU's k_range).
__device__ __forceinline__ void k_range(const PoolGeom& g, int j, int64_t o, int64_t* lo, int64_t* hi) {
  const int64_t start = o * g.s[j] - g.pb[j];
  const int64_t d = g.d[j];
  const int64_t a = start >= 0 ? 0 : (-start + d - 1) / d;
  const int64_t b = g.in[j] - start <= 0 ? 0 : (g.in[j] - start + d - 1) / d;
  *lo = a < g.k[j] ? a : g.k[j];
  *hi = b < g.k[j] ? b : g.k[j];
  if (*hi < *lo) *hi = *lo;
}

struct WindowAt {
  int64_t plane, o;          // plane p and output index within it
  int64_t first;             // input index (within the plane) of kernel offset (0, 0, 0); may be < 0
  int64_t lo[3], hi[3];
};

__device__ __forceinline__ WindowAt window_at(const PoolGeom& g, int64_t e) {
  WindowAt w;
  const int64_t out = g.out[0] * g.out[1] * g.out[2];
  w.plane = e / out;
  w.o = e % out;
  const int64_t od = w.o / (g.out[1] * g.out[2]), oh = (w.o / g.out[2]) % g.out[1], ow = w.o % g.out[2];
  k_range(g, 0, od, &w.lo[0], &w.hi[0]);
  k_range(g, 1, oh, &w.lo[1], &w.hi[1]);
  k_range(g, 2, ow, &w.lo[2], &w.hi[2]);
  w.first = ((od * g.s[0] - g.pb[0]) * g.in[1] + (oh * g.s[1] - g.pb[1])) * g.in[2] + (ow * g.s[2] - g.pb[2]);
  return w;
}

template <typename T>
__device__ __forceinline__ int64_t window_argmax(const PoolGeom& g, const WindowAt& w, const T* xp) {
  int64_t arg = -1;
  T best = -static_cast<T>(INFINITY);
  for (int64_t kd = w.lo[0]; kd < w.hi[0]; ++kd)
    for (int64_t kh = w.lo[1]; kh < w.hi[1]; ++kh) {
      const int64_t row = w.first + (kd * g.d[0] * g.in[1] + kh * g.d[1]) * g.in[2];
      for (int64_t kw = w.lo[2]; kw < w.hi[2]; ++kw) {
        const int64_t i = row + kw * g.d[2];
        const T v = xp[i];
        if (arg < 0 || v > best) {
          best = v;
          arg = i;
        }
      }
    }
  return arg;
}

__device__ __forceinline__ int64_t avg_count(const PoolGeom& g, const WindowAt& w, bool include_pad) {
  if (!include_pad) return (w.hi[0] - w.lo[0]) * (w.hi[1] - w.lo[1]) * (w.hi[2] - w.lo[2]);
  const int64_t oc[3] = {w.o / (g.out[1] * g.out[2]), (w.o / g.out[2]) % g.out[1], w.o % g.out[2]};
  int64_t cnt = 1;
  for (int j = 0; j < 3; ++j) {
    const int64_t start = oc[j] * g.s[j] - g.pb[j];
    int64_t c = 0;
    for (int64_t k = 0; k < g.k[j]; ++k) {
      const int64_t i = start + k * g.d[j];
      c += i >= -g.pb[j] && i < g.in[j] + g.pe[j];
    }
    cnt *= c;
  }
  return cnt;
}

template <typename T>
__global__ void max_pool_kernel(PoolGeom g, T* y, int64_t* indices, bool col_major, const T* x, int64_t total) {
  const int64_t in = g.in[0] * g.in[1] * g.in[2];
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const WindowAt w = window_at(g, e);
    const T* xp = x + w.plane * in;
    const int64_t a = window_argmax(g, w, xp);
    y[e] = a < 0 ? -static_cast<T>(INFINITY) : xp[a];
    if (indices) {
      int64_t flat = a;
      if (col_major && a >= 0) {
        const int64_t id = a / (g.in[1] * g.in[2]), ih = (a / g.in[2]) % g.in[1], iw = a % g.in[2];
        flat = id + g.in[0] * (ih + g.in[1] * iw);
      }
      indices[e] = a < 0 ? -1 : w.plane * in + flat;
    }
  }
}

template <typename T>
__global__ void max_pool_grad_kernel(PoolGeom g, T* dx, const T* dy, const T* x, int64_t total) {
  const int64_t in = g.in[0] * g.in[1] * g.in[2];
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const WindowAt w = window_at(g, e);
    const int64_t a = window_argmax(g, w, x + w.plane * in);
    if (a >= 0) atomicAdd(dx + w.plane * in + a, dy[e]);
  }
}

template <typename T>
__global__ void avg_pool_kernel(PoolGeom g, T* y, const T* x, bool include_pad, int64_t total) {
  const int64_t in = g.in[0] * g.in[1] * g.in[2];
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const WindowAt w = window_at(g, e);
    const T* xp = x + w.plane * in;
    T s = 0;
    for (int64_t kd = w.lo[0]; kd < w.hi[0]; ++kd)
      for (int64_t kh = w.lo[1]; kh < w.hi[1]; ++kh) {
        const int64_t row = w.first + (kd * g.d[0] * g.in[1] + kh * g.d[1]) * g.in[2];
        for (int64_t kw = w.lo[2]; kw < w.hi[2]; ++kw) s += xp[row + kw * g.d[2]];
      }
    const int64_t cnt = avg_count(g, w, include_pad);
    y[e] = cnt > 0 ? s / static_cast<T>(cnt) : T(0);
  }
}

template <typename T>
__global__ void avg_pool_grad_kernel(PoolGeom g, T* dx, const T* dy, bool include_pad, int64_t total) {
  const int64_t in = g.in[0] * g.in[1] * g.in[2];
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const WindowAt w = window_at(g, e);
    const int64_t cnt = avg_count(g, w, include_pad);
    if (cnt == 0) continue;
    const T v = dy[e] / static_cast<T>(cnt);
    T* dxp = dx + w.plane * in;
    for (int64_t kd = w.lo[0]; kd < w.hi[0]; ++kd)
      for (int64_t kh = w.lo[1]; kh < w.hi[1]; ++kh) {
        const int64_t row = w.first + (kd * g.d[0] * g.in[1] + kh * g.d[1]) * g.in[2];
        for (int64_t kw = w.lo[2]; kw < w.hi[2]; ++kw) atomicAdd(dxp + row + kw * g.d[2], v);
      }
  }
}

template <typename T>
__global__ void global_avg_grad_kernel(T* dx, const T* dy, int64_t planes, int64_t size) {
  const int64_t total = planes * size;
  for (int64_t e = global_index(); e < total; e += global_stride()) dx[e] = dy[e / size] / static_cast<T>(size);
}

int64_t outputs(const PoolGeom& g) { return g.planes * g.out[0] * g.out[1] * g.out[2]; }
int64_t inputs(const PoolGeom& g) { return g.planes * g.in[0] * g.in[1] * g.in[2]; }

}  // namespace

template <typename T>
cudaError_t launch_max_pool(const PoolGeom& g, T* y, int64_t* indices, bool col_major, const T* x,
                            cudaStream_t stream) {
  const int64_t total = outputs(g);
  if (total <= 0) return cudaSuccess;
  max_pool_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(g, y, indices, col_major, x, total);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_max_pool_grad(const PoolGeom& g, T* dx, const T* dy, const T* x, cudaStream_t stream) {
  const int64_t n_in = inputs(g), total = outputs(g);
  if (n_in <= 0) return cudaSuccess;
  const cudaError_t err = cudaMemsetAsync(dx, 0, static_cast<size_t>(n_in) * sizeof(T), stream);
  if (err != cudaSuccess || total <= 0) return err;
  max_pool_grad_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(g, dx, dy, x, total);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_avg_pool(const PoolGeom& g, T* y, const T* x, bool include_pad, cudaStream_t stream) {
  const int64_t total = outputs(g);
  if (total <= 0) return cudaSuccess;
  avg_pool_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(g, y, x, include_pad, total);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_avg_pool_grad(const PoolGeom& g, T* dx, const T* dy, bool include_pad, cudaStream_t stream) {
  const int64_t n_in = inputs(g), total = outputs(g);
  if (n_in <= 0) return cudaSuccess;
  const cudaError_t err = cudaMemsetAsync(dx, 0, static_cast<size_t>(n_in) * sizeof(T), stream);
  if (err != cudaSuccess || total <= 0) return err;
  avg_pool_grad_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(g, dx, dy, include_pad, total);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_global_avg_pool_grad(T* dx, const T* dy, int64_t planes, int64_t size, cudaStream_t stream) {
  if (planes * size <= 0) return cudaSuccess;
  global_avg_grad_kernel<T><<<grid_for(planes * size), kBlock, 0, stream>>>(dx, dy, planes, size);
  return cudaGetLastError();
}

#define PT_POOL(T)                                                                                          \
  template cudaError_t launch_max_pool<T>(const PoolGeom&, T*, int64_t*, bool, const T*, cudaStream_t);     \
  template cudaError_t launch_max_pool_grad<T>(const PoolGeom&, T*, const T*, const T*, cudaStream_t);      \
  template cudaError_t launch_avg_pool<T>(const PoolGeom&, T*, const T*, bool, cudaStream_t);               \
  template cudaError_t launch_avg_pool_grad<T>(const PoolGeom&, T*, const T*, bool, cudaStream_t);          \
  template cudaError_t launch_global_avg_pool_grad<T>(T*, const T*, int64_t, int64_t, cudaStream_t);
PT_POOL(float)
PT_POOL(double)
#undef PT_POOL

}  // namespace pt::cuda
