// Broadcasting elementwise kernels: the binary ops (Add, Sub, Mul, Div, PRelu), strided copies
// (Transpose, Expand, the first operand of Sum), accumulation (Sum, Mean), scaling and PReluGrad.
// Same-shape operands come as a rank-1 walk with unit strides, so the common case costs one
// division-free index per element.
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

template <BinaryOp kOp, typename T>
__device__ __forceinline__ T apply(T a, T b) {
  if constexpr (kOp == BinaryOp::kAdd) return a + b;
  else if constexpr (kOp == BinaryOp::kSub) return a - b;
  else if constexpr (kOp == BinaryOp::kMul) return a * b;
  else if constexpr (kOp == BinaryOp::kDiv) return a / b;
  else return a < T(0) ? b * a : a;  // kPRelu: a = x, b = slope
}

template <BinaryOp kOp, typename T>
__global__ void binary_kernel(Strided<2> s, T* y, const T* a, const T* b, int64_t n) {
  if (s.rank == 1 && s.strides[0][0] == 1 && s.strides[1][0] == 1) {
    for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = apply<kOp>(a[i], b[i]);
    return;
  }
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[2];
    strided_offsets(s, i, off);
    y[i] = apply<kOp>(a[off[0]], b[off[1]]);
  }
}

template <BinaryOp kOp, typename T>
cudaError_t binary_launch(const Strided<2>& s, T* y, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  binary_kernel<kOp, T><<<grid_for(n), kBlock, 0, stream>>>(s, y, a, b, n);
  return cudaGetLastError();
}

template <typename T>
__global__ void gather_copy_kernel(Strided<1> s, T* y, const T* x, int64_t n, T scale, bool scaled) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[1];
    strided_offsets(s, i, off);
    y[i] = scaled ? static_cast<T>(x[off[0]] * scale) : x[off[0]];
  }
}

template <typename T>
__global__ void accumulate_kernel(Strided<1> s, T* y, const T* x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[1];
    strided_offsets(s, i, off);
    y[i] += x[off[0]];
  }
}

template <typename T>
__global__ void scale_kernel(T* y, int64_t n, T scale) {
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] *= scale;
}

template <typename T>
__global__ void prelu_grad_kernel(Strided<1> s, T* dx, T* dslope, const T* dy, const T* x, const T* slope,
                                  int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[1];
    strided_offsets(s, i, off);
    const T xv = x[i], g = dy[i];
    dx[i] = xv < T(0) ? g * slope[off[0]] : g;
    dslope[i] = xv < T(0) ? g * xv : T(0);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_binary(BinaryOp op, const Strided<2>& s, T* y, const T* a, const T* b, int64_t n,
                          cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
    case BinaryOp::kAdd: return binary_launch<BinaryOp::kAdd, T>(s, y, a, b, n, stream);
    case BinaryOp::kSub: return binary_launch<BinaryOp::kSub, T>(s, y, a, b, n, stream);
    case BinaryOp::kMul: return binary_launch<BinaryOp::kMul, T>(s, y, a, b, n, stream);
    case BinaryOp::kDiv:
      if constexpr (std::is_floating_point_v<T>) return binary_launch<BinaryOp::kDiv, T>(s, y, a, b, n, stream);
      break;
    case BinaryOp::kPRelu:
      if constexpr (std::is_floating_point_v<T>) return binary_launch<BinaryOp::kPRelu, T>(s, y, a, b, n, stream);
      break;
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch_gather_copy(const Strided<1>& s, T* y, const T* x, int64_t n, double scale, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const bool scaled = std::is_floating_point_v<T> && scale != 1.0;
  gather_copy_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(s, y, x, n, static_cast<T>(scale), scaled);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_accumulate(const Strided<1>& s, T* y, const T* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  accumulate_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(s, y, x, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_scale(T* y, int64_t n, double scale, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  scale_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(y, n, static_cast<T>(scale));
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_prelu_grad(const Strided<1>& s, T* dx, T* dslope, const T* dy, const T* x, const T* slope,
                              int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  prelu_grad_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(s, dx, dslope, dy, x, slope, n);
  return cudaGetLastError();
}

#define PT_BINARY(T) \
  template cudaError_t launch_binary<T>(BinaryOp, const Strided<2>&, T*, const T*, const T*, int64_t, cudaStream_t);
PT_BINARY(float)
PT_BINARY(double)
PT_BINARY(int64_t)
#undef PT_BINARY
#define PT_COPY(T)                                                                                       \
  template cudaError_t launch_gather_copy<T>(const Strided<1>&, T*, const T*, int64_t, double, cudaStream_t); \
  template cudaError_t launch_accumulate<T>(const Strided<1>&, T*, const T*, int64_t, cudaStream_t);
PT_COPY(float)
PT_COPY(double)
PT_COPY(int64_t)
PT_COPY(int32_t)
PT_COPY(uint8_t)
#undef PT_COPY
template cudaError_t launch_scale<float>(float*, int64_t, double, cudaStream_t);
template cudaError_t launch_scale<double>(double*, int64_t, double, cudaStream_t);
template cudaError_t launch_prelu_grad<float>(const Strided<1>&, float*, float*, const float*, const float*,
                                              const float*, int64_t, cudaStream_t);
template cudaError_t launch_prelu_grad<double>(const Strided<1>&, double*, double*, const double*, const double*,
                                               const double*, int64_t, cudaStream_t);

}  // namespace pt::cuda
