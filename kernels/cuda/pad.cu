// Pad and PadGrad on the device (kernels/cpu/tensor_ops.cpp is the reference): each output
// coordinate maps to an input coordinate per dim (constant: -1 outside, edge: clamped, reflect:
// folded), computed in the kernel from PadGeom instead of index tables, so a call copies nothing.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

// The input coordinate that padded coordinate c of dim k reads, -1 for the constant value.
__device__ __forceinline__ int64_t pad_source(const PadGeom& g, int k, int64_t c) {
  const int64_t d = g.in[k];
  int64_t s = c - g.begin[k];
  if (s >= 0 && s < d) return s;
  if (g.mode == PadMode::kEdge) return d == 0 ? -1 : (s < 0 ? 0 : d - 1);
  if (g.mode == PadMode::kReflect) {
    if (d == 1) return 0;
    const int64_t period = 2 * (d - 1);
    s = ((s % period) + period) % period;
    return s >= d ? period - s : s;
  }
  return -1;
}

// The input offset of output element i (walked over g.out), or -1 where it reads the value.
__device__ __forceinline__ int64_t pad_offset(const PadGeom& g, int64_t i) {
  int64_t off = 0;
  for (int k = g.rank - 1; k >= 0; --k) {
    const int64_t c = i % g.out[k];
    i /= g.out[k];
    const int64_t s = pad_source(g, k, c);
    if (s < 0) return -1;
    off += s * g.in_stride[k];
  }
  return off;
}

template <typename T>
__global__ void pad_kernel(PadGeom g, T* y, const T* x, T value, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t off = pad_offset(g, i);
    y[i] = off < 0 ? value : x[off];
  }
}

// Constant mode: each input element is read by exactly one output element, so the scatter writes
// every dX element once (dX zeroed first covers the rest): no atomics, the CPU's values.
template <typename T>
__global__ void pad_grad_constant_kernel(PadGeom g, T* dx, const T* dy, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t off = pad_offset(g, i);
    if (off >= 0) dx[off] = dy[i];
  }
}

}  // namespace

template <typename T>
cudaError_t launch_pad(const PadGeom& g, T* y, const T* x, double value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  pad_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(g, y, x, static_cast<T>(value), n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_pad_grad_constant(const PadGeom& g, T* dx, const T* dy, int64_t n_dx, int64_t n_dy,
                                     cudaStream_t stream) {
  if (n_dx <= 0) return cudaSuccess;
  const cudaError_t e = cudaMemsetAsync(dx, 0, static_cast<size_t>(n_dx) * sizeof(T), stream);
  if (e != cudaSuccess || n_dy <= 0) return e;
  pad_grad_constant_kernel<T><<<grid_for(n_dy), kBlock, 0, stream>>>(g, dx, dy, n_dy);
  return cudaGetLastError();
}

#define PT_PAD(T) \
  template cudaError_t launch_pad<T>(const PadGeom&, T*, const T*, double, int64_t, cudaStream_t);
PT_PAD(float)
PT_PAD(double)
PT_PAD(int64_t)
PT_PAD(int32_t)
#undef PT_PAD
template cudaError_t launch_pad_grad_constant<float>(const PadGeom&, float*, const float*, int64_t, int64_t,
                                                     cudaStream_t);
template cudaError_t launch_pad_grad_constant<double>(const PadGeom&, double*, const double*, int64_t, int64_t,
                                                      cudaStream_t);

}  // namespace pt::cuda
