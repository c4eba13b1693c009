// The argument checks of Softmax, LogSoftmax and their backward ops (SoftmaxGrad, LogSoftmaxGrad
// from dY and the forward output Y), shared by kernels/cpu/softmax.cpp and the cuDNN wrappers in
// kernels/cuda/dnn_ops.cpp: one definition, so both backends refuse the same calls alike.
#pragma once

#include <cstdint>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// The data viewed as [outer, n, inner] around `axis` (default: the last), or 2-D at axis with
// _coerce2d (opset < 13).
inline Status softmax_geometry(const KernelCall& call, const char* op, const Dims& dims, AxisGeometry* g) {
  const int64_t axis = call.attrs.get_int("axis", static_cast<int64_t>(dims.size()) - 1);
  const bool coerce2d = call.attrs.get_int("_coerce2d", 0) != 0;
  return axis_geometry(op, dims, axis, coerce2d, g);
}

// X -> Y of X's dims.
inline Status check_softmax(const KernelCall& call, const char* op, AxisGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  RETURN_IF_ERROR(check_same_dims(op, "output", call.outputs[0].dims, call.inputs[0].dims));
  return softmax_geometry(call, op, call.inputs[0].dims, g);
}

// (dY, Y) -> dX, all of dY's dims.
inline Status check_softmax_grad(const KernelCall& call, const char* op, AxisGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const Dims& dy = call.inputs[0].dims;
  RETURN_IF_ERROR(check_same_dims(op, "Y", call.inputs[1].dims, dy));
  RETURN_IF_ERROR(check_same_dims(op, "output", call.outputs[0].dims, dy));
  return softmax_geometry(call, op, dy, g);
}

}  // namespace pt::kernels
