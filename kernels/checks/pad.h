// The argument checks of Pad and PadGrad, shared by kernels/cpu/tensor_ops.cpp and the CUDA
// wrappers in kernels/cuda/pad_ops.cpp: one definition, so both backends refuse the same calls alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// The normalised _pads (begins, then ends) and `mode` of a pad from `in` to `out`.
inline Status pad_args(const char* op, const KernelCall& call, const Dims& in, const Dims& out,
                       std::vector<int64_t>* pads, std::string* mode) {
  *pads = call.attrs.get_ints("_pads");
  *mode = call.attrs.get_string("mode", "constant");
  if (pads->size() != 2 * in.size() || out.size() != in.size())
    return invalid_input(std::string(op) + ": normalised pads do not match rank " + std::to_string(in.size()));
  if (*mode != "constant" && *mode != "reflect" && *mode != "edge")
    return invalid_input(std::string(op) + ": unknown mode '" + *mode + "' (constant, reflect, edge)");
  for (size_t k = 0; k < in.size(); ++k)
    if (out[k] != in[k] + (*pads)[k] + (*pads)[k + in.size()])
      return invalid_input(std::string(op) + ": output dim " + std::to_string(k) + " does not match the pads");
  return Status::ok();
}

// Pad: X -> Y; reflect and edge need a non-empty X.
inline Status check_pad(const KernelCall& call, std::vector<int64_t>* pads, std::string* mode) {
  RETURN_IF_ERROR(check_arity(call, "Pad", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(pad_args("Pad", call, x.dims, y.dims, pads, mode));
  if (*mode != "constant" && x.size() == 0 && y.size() > 0)
    return invalid_input("Pad: mode '" + *mode + "' of an empty input");
  return Status::ok();
}

// PadGrad: dY -> dX.
inline Status check_pad_grad(const KernelCall& call, std::vector<int64_t>* pads, std::string* mode) {
  RETURN_IF_ERROR(check_arity(call, "PadGrad", 1, 1));
  return pad_args("PadGrad", call, call.outputs[0].dims, call.inputs[0].dims, pads, mode);
}

}  // namespace pt::kernels
