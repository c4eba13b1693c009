// Comparisons, Not, Where and Cast on the device (kernels/cpu/tensor_ops.cpp is the reference):
// broadcasting walks as binary.cu's, bool stored as bytes, bfloat16 rounding bit-identical to
// kernels/cpu/bf16.h's.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

template <typename T>
__global__ void compare_kernel(CompareOp op, Strided<2> s, uint8_t* y, const T* a, const T* b, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[2];
    strided_offsets<2>(s, i, off);
    const T x = a[off[0]], z = b[off[1]];
    y[i] = op == CompareOp::kEqual ? x == z : op == CompareOp::kLess ? x < z : x > z;
  }
}

__global__ void not_kernel(uint8_t* y, const uint8_t* x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = !x[i];
}

template <typename T>
__global__ void where_kernel(Strided<3> s, T* y, const uint8_t* c, const T* a, const T* b, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[3];
    strided_offsets<3>(s, i, off);
    y[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  }
}

__device__ __forceinline__ uint16_t to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even (may carry into Inf)
  return static_cast<uint16_t>(u >> 16);
}

template <typename In, typename Out>
__global__ void cast_kernel(Out* y, const In* x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    if constexpr (std::is_same_v<Out, bool>) y[i] = x[i] != In(0);
    else y[i] = static_cast<Out>(x[i]);
  }
}

__global__ void f32_to_bf16_kernel(uint16_t* y, const float* x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = to_bf16(x[i]);
}

// ReluGrad with the bfloat16 copy of Y: kernels/cpu/unary.cpp's mask (a positive bfloat16 is
// 0x0001..0x7F80; 0 and the negatives and NaNs are not).
__global__ void relu_grad_bf16_kernel(float* dx, const float* dy, const uint16_t* y, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    dx[i] = static_cast<uint16_t>(y[i] - 1u) < 0x7F80u ? dy[i] : 0.0f;
}

__global__ void bf16_to_f32_kernel(float* y, const uint16_t* x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}

template <typename In, typename Out>
cudaError_t cast_as(void* y, const void* x, int64_t n, cudaStream_t stream) {
  cast_kernel<In, Out><<<grid_for(n), kBlock, 0, stream>>>(static_cast<Out*>(y), static_cast<const In*>(x), n);
  return cudaGetLastError();
}

template <typename In>
cudaError_t cast_from(CastType to, void* y, const void* x, int64_t n, cudaStream_t stream) {
  switch (to) {
    case CastType::kF32: return cast_as<In, float>(y, x, n, stream);
    case CastType::kF64: return cast_as<In, double>(y, x, n, stream);
    case CastType::kI64: return cast_as<In, int64_t>(y, x, n, stream);
    case CastType::kI32: return cast_as<In, int32_t>(y, x, n, stream);
    case CastType::kI8: return cast_as<In, int8_t>(y, x, n, stream);
    case CastType::kU8: return cast_as<In, uint8_t>(y, x, n, stream);
    case CastType::kBool: return cast_as<In, bool>(y, x, n, stream);
    case CastType::kBf16:
      if constexpr (!std::is_same_v<In, float>) return cudaErrorInvalidValue;
      else {
        f32_to_bf16_kernel<<<grid_for(n), kBlock, 0, stream>>>(static_cast<uint16_t*>(y), static_cast<const float*>(x), n);
        return cudaGetLastError();
      }
  }
  return cudaErrorInvalidValue;
}

}  // namespace

template <typename T>
cudaError_t launch_compare(CompareOp op, const Strided<2>& s, uint8_t* y, const T* a, const T* b, int64_t n,
                           cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  compare_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(op, s, y, a, b, n);
  return cudaGetLastError();
}

cudaError_t launch_not(uint8_t* y, const uint8_t* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  not_kernel<<<grid_for(n), kBlock, 0, stream>>>(y, x, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_where(const Strided<3>& s, T* y, const uint8_t* c, const T* a, const T* b, int64_t n,
                         cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  where_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(s, y, c, a, b, n);
  return cudaGetLastError();
}

cudaError_t launch_cast(CastType from, CastType to, void* y, const void* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (from) {
    case CastType::kF32: return cast_from<float>(to, y, x, n, stream);
    case CastType::kF64: return cast_from<double>(to, y, x, n, stream);
    case CastType::kI64: return cast_from<int64_t>(to, y, x, n, stream);
    case CastType::kI32: return cast_from<int32_t>(to, y, x, n, stream);
    case CastType::kI8: return cast_from<int8_t>(to, y, x, n, stream);
    case CastType::kU8: return cast_from<uint8_t>(to, y, x, n, stream);
    case CastType::kBool: return cast_from<bool>(to, y, x, n, stream);
    case CastType::kBf16:
      if (to != CastType::kF32) return cudaErrorInvalidValue;
      bf16_to_f32_kernel<<<grid_for(n), kBlock, 0, stream>>>(static_cast<float*>(y), static_cast<const uint16_t*>(x), n);
      return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_relu_grad_bf16(float* dx, const float* dy, const uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  relu_grad_bf16_kernel<<<grid_for(n), kBlock, 0, stream>>>(dx, dy, y, n);
  return cudaGetLastError();
}

#define PT_SELECT(T)                                                                                            \
  template cudaError_t launch_compare<T>(CompareOp, const Strided<2>&, uint8_t*, const T*, const T*, int64_t,   \
                                         cudaStream_t);                                                         \
  template cudaError_t launch_where<T>(const Strided<3>&, T*, const uint8_t*, const T*, const T*, int64_t,      \
                                       cudaStream_t);
PT_SELECT(float)
PT_SELECT(double)
PT_SELECT(int64_t)
PT_SELECT(int32_t)
PT_SELECT(uint8_t)
#undef PT_SELECT

}  // namespace pt::cuda
