// The fused products' epilogue (launch.h's launch_bias_activation): one grid-stride pass adding the bias along the
// last axis and applying Relu or exact Gelu, in place of the separate Add and activation kernels.
#include "kernels/cuda/device_util.cuh"
#include "kernels/unary_ops.h"

namespace pt::cuda {
namespace {

template <typename T>
__global__ void bias_activation_kernel(T* y, T* z, const T* bias, int64_t cols, int64_t n, int act) {
  for (int64_t e = global_index(); e < n; e += global_stride()) {
    T s = z[e];
    if (bias) {
      s = s + bias[e % cols];
      if (act == 2) z[e] = s;
    }
    if (act == 1) s = s > T(0) ? s : T(0);
    else if (act == 2) s = unary::gelu_exact(s);
    y[e] = s;
  }
}

}  // namespace

template <typename T>
cudaError_t launch_bias_activation(T* y, T* z, const T* bias, int64_t cols, int64_t n, int act, cudaStream_t stream) {
  if (n <= 0 || (!bias && act == 0 && y == z)) return cudaSuccess;
  bias_activation_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(y, z, bias, cols < 1 ? 1 : cols, n, act);
  return cudaGetLastError();
}

template cudaError_t launch_bias_activation<float>(float*, float*, const float*, int64_t, int64_t, int, cudaStream_t);
template cudaError_t launch_bias_activation<double>(double*, double*, const double*, int64_t, int64_t, int, cudaStream_t);

}  // namespace pt::cuda
