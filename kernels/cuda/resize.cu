// Resize and ResizeGrad on the device (kernels/cpu/resize.cpp is the reference): each output
// coordinate maps to at most two input coordinates per dim through kernels/checks/resize_map.h, the
// CPU's own map, computed in the kernel (no index tables). The forward sums an output's sources in
// the CPU's corner order; the backward gives each dX element a thread that walks, in output order,
// the dY elements that read it: the CPU's sums, deterministic, no atomics.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

using resize_map::Tap;

__device__ __forceinline__ Tap tap_of(const ResizeGeom& g, int d, int64_t o) {
  return resize_map::tap(g.linear, g.coord, g.nearest, o, g.in[d], g.out[d], g.scale[d]);
}

__device__ __forceinline__ bool is_identity(const ResizeGeom& g, int d) { return g.in[d] == g.out[d] && g.scale[d] == 1.0f; }

// Each output element: the CPU's walk over the corners of its taps (bit j of a corner picks the
// second tap of the j-th dim that has two, dim 0 lowest, which is the CPU's order), the weight
// multiplied over the dims in order, zero-weight corners left out.
template <typename T>
__global__ void resize_kernel(const ResizeGeom g, T* y, const T* x, int64_t n) {
  for (int64_t o = global_index(); o < n; o += global_stride()) {
    Tap tp[kMaxRank];
    int bit[kMaxRank];
    int64_t rest = o;
    for (int d = g.rank - 1; d >= 0; --d) {
      tp[d] = tap_of(g, d, rest % g.out[d]);
      rest /= g.out[d];
    }
    int two = 0;
    for (int d = 0; d < g.rank; ++d) bit[d] = tp[d].i1 != tp[d].i0 ? two++ : -1;
    double acc = 0;
    for (int corner = 0; corner < (1 << two); ++corner) {
      double w = 1;
      int64_t off = 0;
      for (int d = 0; d < g.rank; ++d) {
        const bool hi = bit[d] >= 0 && ((corner >> bit[d]) & 1);
        w *= hi ? tp[d].w1 : tp[d].w0;
        off += (hi ? tp[d].i1 : tp[d].i0) * g.in_stride[d];
      }
      if (w != 0) acc += resize_map::mul_rn(w, static_cast<double>(x[off]));
    }
    y[o] = static_cast<T>(acc);
  }
}

// The first output coordinate of dim d whose first tap is at least c (the map is monotone there).
__device__ __forceinline__ int64_t first_reading(const ResizeGeom& g, int d, int64_t c) {
  int64_t lo = 0, hi = g.out[d];
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (tap_of(g, d, mid).i0 >= c)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// The weight with which output coordinate o of dim d reads input coordinate c (one it reads).
__device__ __forceinline__ double weight_of(const ResizeGeom& g, int d, int64_t o, int64_t c) {
  if (is_identity(g, d)) return 1.0;
  const Tap t = tap_of(g, d, o);
  return t.i0 == c ? t.w0 : t.w1;
}

// Each dX element: the dY elements that read it are the product of one range per dim (outputs whose
// first tap is c, or, linear, c - 1 with c as the second), walked in row-major order, which is the
// CPU's order of adding them. p[d + 1] is the weight's product over dims 0..d, as the CPU multiplies.
template <typename T>
__global__ void resize_grad_kernel(const ResizeGeom g, T* dx, const T* dy, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t c[kMaxRank], lo[kMaxRank], hi[kMaxRank], o[kMaxRank];
    double p[kMaxRank + 1];
    int64_t rest = i;
    bool empty = false;
    for (int d = g.rank - 1; d >= 0; --d) {
      c[d] = rest % g.in[d];
      rest /= g.in[d];
      if (is_identity(g, d)) {
        lo[d] = c[d];
        hi[d] = c[d] + 1;
      } else {
        lo[d] = first_reading(g, d, g.linear ? c[d] - 1 : c[d]);
        hi[d] = first_reading(g, d, c[d] + 1);
      }
      empty = empty || lo[d] >= hi[d];
    }
    double acc = 0;
    if (!empty) {
      p[0] = 1;
      int64_t off = 0;
      for (int d = 0; d < g.rank; ++d) {
        o[d] = lo[d];
        p[d + 1] = p[d] * weight_of(g, d, o[d], c[d]);
        off += o[d] * g.out_stride[d];
      }
      for (;;) {
        const double w = p[g.rank];
        if (w != 0) acc += resize_map::mul_rn(w, static_cast<double>(dy[off]));
        int d = g.rank - 1;  // the next output in row-major order
        for (; d >= 0 && o[d] + 1 == hi[d]; --d) {
          off -= (o[d] - lo[d]) * g.out_stride[d];
          o[d] = lo[d];
        }
        if (d < 0) break;
        ++o[d];
        off += g.out_stride[d];
        for (int k = d; k < g.rank; ++k) p[k + 1] = p[k] * weight_of(g, k, o[k], c[k]);
      }
    }
    dx[i] = static_cast<T>(acc);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_resize(const ResizeGeom& g, T* y, const T* x, int64_t n_y, cudaStream_t stream) {
  if (n_y <= 0) return cudaSuccess;
  resize_kernel<T><<<grid_for(n_y), kBlock, 0, stream>>>(g, y, x, n_y);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_resize_grad(const ResizeGeom& g, T* dx, const T* dy, int64_t n_dx, cudaStream_t stream) {
  if (n_dx <= 0) return cudaSuccess;
  resize_grad_kernel<T><<<grid_for(n_dx), kBlock, 0, stream>>>(g, dx, dy, n_dx);
  return cudaGetLastError();
}

#define PT_RESIZE(T)                                                                             \
  template cudaError_t launch_resize<T>(const ResizeGeom&, T*, const T*, int64_t, cudaStream_t); \
  template cudaError_t launch_resize_grad<T>(const ResizeGeom&, T*, const T*, int64_t, cudaStream_t);
PT_RESIZE(float)
PT_RESIZE(double)
#undef PT_RESIZE

}  // namespace pt::cuda
