// The CUDA kernel table: every (op, dtype) the CUDA backend runs, in one explicit list. Adding a
// CUDA op is its .cu file, its declaration in cuda_kernels.h and one line here.
#include "kernels/cuda/cuda_kernels.h"

namespace pt::cuda {

namespace {

#define PT_CUDA_F(op, fn) {op, DeviceKind::kCuda, DType::kFloat32, &cuda::fn<float>}, \
                          {op, DeviceKind::kCuda, DType::kFloat64, &cuda::fn<double>}

// float32 and float64 for every op, like the CPU table (tests compare in double).
const KernelEntry kCudaTable[] = {
    PT_CUDA_F("Relu", relu),
    PT_CUDA_F("ReluGrad", relu_grad),
};

#undef PT_CUDA_F

}  // namespace

std::span<const KernelEntry> kernel_table() { return kCudaTable; }

}  // namespace pt::cuda
