// The launcher of the fused products' epilogue (kernels/cuda/epilogue.cu), as launch.h's: plain
// pointers, queued on `stream`, cudaGetLastError() of the launch. T is float or double.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pt::cuda {

// act: 0 none, 1 Relu, 2 Gelu (exact). Over n elements of the product's output z, rows of `cols`:
// s = z + bias[i % cols] (bias may be null); with Gelu and a bias, z = s (kept for GeluGrad);
// y = act(s). y may be z. The arithmetic of the separate Add, Relu and Gelu kernels.
template <typename T>
cudaError_t launch_bias_activation(T* y, T* z, const T* bias, int64_t cols, int64_t n, int act, cudaStream_t stream);

}  // namespace pt::cuda
