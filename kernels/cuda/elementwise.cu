// The element-wise unary CUDA kernels, generated from kernels/unary_ops.h: one grid-stride kernel
// per op and direction, evaluating the list's host/device expression (the CPU kernels evaluate the
// same one, kernels/cpu/unary.cpp).
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

template <typename Op, typename T>
__global__ void unary_kernel(T* y,        // (n)
                             const T* x,  // (n); may alias y
                             int64_t n, unary::Args<T> p) {
  const T a = p.lo ? *p.lo : p.a, b = p.hi ? *p.hi : p.b;
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = Op::template forward<T>(x[i], a, b);
}

template <typename Op, typename T>
__global__ void grad_kernel(T* dx,        // (n); may alias dy
                            const T* dy,  // (n)
                            const T* z,   // (n) forward input or output
                            int64_t n, unary::Args<T> p) {
  const T a = p.lo ? *p.lo : p.a, b = p.hi ? *p.hi : p.b;
  for (int64_t i = global_index(); i < n; i += global_stride()) dx[i] = Op::template backward<T>(dy[i], z[i], a, b);
}

}  // namespace

template <typename T>
cudaError_t launch_unary(UnaryOp op, unary::Args<T> p, T* y, const T* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
#define PT_CASE(Name, ...)                                                            \
  case UnaryOp::k##Name:                                                              \
    unary_kernel<unary::Name##Op, T><<<grid_for(n), kBlock, 0, stream>>>(y, x, n, p); \
    return cudaGetLastError();
    PT_UNARY_OPS(PT_CASE)
#undef PT_CASE
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch_unary_grad(UnaryOp op, unary::Args<T> p, T* dx, const T* dy, const T* z, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
#define PT_CASE(Name, fn, args, fwd, kind, ...)                                                      \
  PT_UNARY_IF_GRAD(kind, case UnaryOp::k##Name                                                       \
                   : grad_kernel<unary::Name##Op, T><<<grid_for(n), kBlock, 0, stream>>>(dx, dy, z, n, p); \
                   return cudaGetLastError();)
    PT_UNARY_OPS(PT_CASE)
#undef PT_CASE
    default: break;
  }
  return cudaErrorInvalidValue;
}

template cudaError_t launch_unary<float>(UnaryOp, unary::Args<float>, float*, const float*, int64_t, cudaStream_t);
template cudaError_t launch_unary<double>(UnaryOp, unary::Args<double>, double*, const double*, int64_t, cudaStream_t);
template cudaError_t launch_unary_grad<float>(UnaryOp, unary::Args<float>, float*, const float*, const float*,
                                              int64_t, cudaStream_t);
template cudaError_t launch_unary_grad<double>(UnaryOp, unary::Args<double>, double*, const double*, const double*,
                                               int64_t, cudaStream_t);

}  // namespace pt::cuda
