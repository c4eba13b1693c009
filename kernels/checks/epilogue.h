// The argument checks of the fused products of importer/fuse_epilogue.cpp (FusedMatMul, FusedGemm,
// FusedConv), shared by kernels/cpu/epilogue.cpp and kernels/cuda/epilogue_ops.cpp: one
// definition, so both backends refuse the same calls alike.
#pragma once

#include <string>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

enum class EpilogueAct { kNone, kRelu, kGelu };

struct FusedProduct {
  EpilogueAct act = EpilogueAct::kNone;
  size_t product_inputs = 0;         // inputs of the product's own kernel
  const TensorView* bias = nullptr;  // FusedMatMul's bias along the output's last axis, or null
  const TensorView* z = nullptr;     // where the product writes: output 1 (Z) when present, else Y
  int64_t cols = 1;                  // the output's last dim (the bias's length)
};

inline Expected<EpilogueAct> epilogue_activation(const KernelCall& call, const char* op) {
  const std::string a = call.attrs.get_string("activation", "none");
  if (a == "none") return EpilogueAct::kNone;
  if (a == "Relu") return EpilogueAct::kRelu;
  if (a == "Gelu") return EpilogueAct::kGelu;
  return invalid_input(std::string(op) + ": activation '" + a + "' (none, Relu or Gelu)");
}

// `bias_input`: the op's third input is the epilogue's bias (FusedMatMul), not the product's own
// (Gemm's C, Conv's B).
inline Status check_fused_product(const KernelCall& call, const char* op, bool bias_input, FusedProduct* f) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  ASSIGN_OR_RETURN(f->act, epilogue_activation(call, op));
  f->product_inputs = bias_input ? 2 : call.inputs.size();
  f->bias = bias_input && call.inputs.size() > 2 && call.inputs[2].present() ? &call.inputs[2] : nullptr;
  const TensorView& y = call.outputs[0];
  const bool keeps_z = call.outputs.size() > 1 && call.outputs[1].present();
  if (f->act == EpilogueAct::kGelu && !keeps_z)
    return invalid_input(std::string(op) + ": a Gelu epilogue needs the pre-activation output Z (GeluGrad reads it)");
  f->z = keeps_z ? &call.outputs[1] : &y;
  if (keeps_z) RETURN_IF_ERROR(check_same_dims(op, "Z", f->z->dims, y.dims));
  if (y.dtype != DType::kFloat32 && y.dtype != DType::kFloat64)
    return unsupported(std::string(op) + ": output dtype " + dtype_name(y.dtype) + " (float32 or float64)");
  f->cols = y.dims.empty() ? 1 : y.dims.back();
  if (f->bias) {
    if (f->bias->dtype != y.dtype) return invalid_input(std::string(op) + ": bias dtype differs from the output's");
    if (f->bias->size() != f->cols || f->bias->rank() > std::max<int>(y.rank(), 1))
      return invalid_input(std::string(op) + ": bias " + dims_str(f->bias->dims) + " does not run along the last axis of " +
                           dims_str(y.dims));
  }
  return Status::ok();
}

}  // namespace pt::kernels
