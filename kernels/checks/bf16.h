// The argument checks of --precision bf16's products (importer/precision.h: bfloat16 operands,
// float32 bias and outputs), shared by kernels/cpu/gemm_bf16.cpp, kernels/cpu/conv_bf16.cpp and the
// CUDA wrappers in kernels/cuda/gemm_ops.cpp and dnn_ops.cpp: both backends refuse the same calls alike.
#pragma once

#include <string>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// Gemm, MatMul: A and B bfloat16, Y float32.
inline Status check_bf16_operands(const char* op, const TensorView& a, const TensorView& b, const TensorView& y) {
  if (a.dtype != DType::kBFloat16 || b.dtype != DType::kBFloat16 || y.dtype != DType::kFloat32)
    return invalid_input(std::string(op) + " (bfloat16): A, B must be bfloat16 and Y float32; got " +
                         dtype_name(a.dtype) + ", " + dtype_name(b.dtype) + " -> " + dtype_name(y.dtype));
  return Status::ok();
}

// Conv, ConvGradInput, ConvGradWeight: inputs 0 .. n16-1 bfloat16, Conv's bias and the output float32.
inline Status check_bf16_conv_types(const char* op, const KernelCall& call, int n16) {
  for (int i = 0; i < n16; ++i)
    if (call.inputs[i].dtype != DType::kBFloat16)
      return invalid_input(std::string(op) + " (bfloat16): input " + std::to_string(i) + " is " +
                           dtype_name(call.inputs[i].dtype) + ", expected bfloat16");
  if (has_input(call, 2) && call.inputs[2].dtype != DType::kFloat32)
    return invalid_input(std::string(op) + " (bfloat16): the bias must be float32");
  if (call.outputs[0].dtype != DType::kFloat32)
    return invalid_input(std::string(op) + " (bfloat16): the output must be float32");
  return Status::ok();
}

}  // namespace pt::kernels
