// Relu on CUDA: forward Y = max(X, 0) and ReluGrad dX = dY * (Y > 0), float and double, each
// one grid-stride elementwise kernel launched on the call's stream. CPU versions: kernels/cpu/.
#include <cuda_runtime.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace pt::cuda {

namespace {

template <typename T>
__global__ void relu_forward_kernel(T* out,        // (n)
                                    const T* inp,  // (n); may alias out
                                    int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const T x = inp[i];
    out[i] = x > T(0) ? x : T(0);  // as the CPU kernel: NaN gives 0
  }
}

// Y rather than X decides the mask: Y > 0 exactly where X > 0, and Y is what the forward saved.
// A select, not a multiply: where the unit is off, dX is 0 even if dY is Inf or NaN (as PyTorch).
template <typename T>
__global__ void relu_backward_kernel(T* dinp,        // (n)
                                     const T* dout,  // (n); may alias dinp
                                     const T* out,   // (n) forward output Y
                                     int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dinp[i] = out[i] > T(0) ? dout[i] : T(0);
}

}  // namespace

template <typename T>
Status relu(const KernelCall& call) {
  RETURN_IF_ERROR(check_elementwise(call, "Relu", 1, dtype_of<T>()));
  const int64_t n = call.inputs[0].size();
  if (n == 0) return Status::ok();
  relu_forward_kernel<T><<<elementwise_grid(n), kElementwiseBlock, 0, stream_of(call)>>>(
      call.outputs[0].as<T>(), call.inputs[0].as<T>(), n);
  PT_CUDA_LAUNCH_CHECK();
  return Status::ok();
}

// Inputs: dY, Y (the forward output). Output: dX.
template <typename T>
Status relu_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_elementwise(call, "ReluGrad", 2, dtype_of<T>()));
  const int64_t n = call.inputs[0].size();
  if (n == 0) return Status::ok();
  relu_backward_kernel<T><<<elementwise_grid(n), kElementwiseBlock, 0, stream_of(call)>>>(
      call.outputs[0].as<T>(), call.inputs[0].as<T>(), call.inputs[1].as<T>(), n);
  PT_CUDA_LAUNCH_CHECK();
  return Status::ok();
}

template Status relu<float>(const KernelCall&);
template Status relu<double>(const KernelCall&);
template Status relu_grad<float>(const KernelCall&);
template Status relu_grad<double>(const KernelCall&);

}  // namespace pt::cuda
