// The CUDA kernels of the fused products (importer/fuse_epilogue.cpp): FusedMatMul (A, B[, bias]),
// FusedGemm (A, B[, C]), FusedConv (X, W[, B]) -> Y[, Z]. The product is the op's own CUDA kernel
// for the operands' dtype (cuBLAS, cuDNN; bfloat16 operands under --precision bf16, float32 out),
// written to Z when the node outputs it and to Y otherwise; then one pass adds the bias and applies
// the activation (epilogue_launch.h). Checks: kernels/checks/epilogue.h, the CPU's.
#pragma once

#include "kernels/registry.h"

namespace pt::cuda {

Status fused_matmul(const KernelCall& call);
Status fused_gemm(const KernelCall& call);
Status fused_conv(const KernelCall& call);

}  // namespace pt::cuda
