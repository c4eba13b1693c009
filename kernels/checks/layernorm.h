// The argument checks of LayerNormalization and LayerNormalizationGrad, shared by
// kernels/cpu/layernorm.cpp and the CUDA wrappers in kernels/cuda/tensor_ops.cpp: one definition,
// so both backends refuse the same calls alike.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// X viewed as (rows, cols), cols = prod(dims[axis:]).
struct LayerNormGeometry {
  int64_t rows = 1, cols = 1;
  double eps = 1e-5;
};

inline Status layer_norm_shape(const char* op, const TensorView& x, const TensorView& scale, int64_t axis,
                               LayerNormGeometry* s) {
  if (axis < 0 || axis > x.rank() || (x.rank() > 0 && axis == x.rank()))
    return invalid_input(std::string(op) + ": axis " + std::to_string(axis) + " out of range for rank " +
                         std::to_string(x.rank()));
  s->rows = 1;
  s->cols = 1;
  for (int64_t d = 0; d < x.rank(); ++d) (d < axis ? s->rows : s->cols) *= x.dims[d];
  if (scale.size() != s->cols)
    return invalid_input(std::string(op) + ": scale has " + std::to_string(scale.size()) + " elements, the " +
                         "normalized dims " + std::to_string(s->cols));
  return Status::ok();
}

// (X, scale[, B]) -> Y[, mean, inv_std_dev].
inline Status check_layer_norm(const KernelCall& call, LayerNormGeometry* s) {
  RETURN_IF_ERROR(check_arity(call, "LayerNormalization", 2, 1));
  const TensorView& x = call.inputs[0];
  s->eps = call.attrs.get_float("epsilon", 1e-5f);
  RETURN_IF_ERROR(layer_norm_shape("LayerNormalization", x, call.inputs[1], call.attrs.get_int("axis", -1), s));
  RETURN_IF_ERROR(check_same_dims("LayerNormalization", "Y", call.outputs[0].dims, x.dims));
  if (has_input(call, 2) && call.inputs[2].size() != s->cols)
    return invalid_input("LayerNormalization: B has " + std::to_string(call.inputs[2].size()) + " elements, the " +
                         "normalized dims " + std::to_string(s->cols));
  return Status::ok();
}

// (dY, X, scale) -> dX, dScale, dB (each output may be absent).
inline Status check_layer_norm_grad(const KernelCall& call, LayerNormGeometry* s) {
  RETURN_IF_ERROR(check_arity(call, "LayerNormalizationGrad", 3, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  s->eps = call.attrs.get_float("epsilon", 1e-5f);
  RETURN_IF_ERROR(layer_norm_shape("LayerNormalizationGrad", x, call.inputs[2], call.attrs.get_int("axis", -1), s));
  RETURN_IF_ERROR(check_same_dims("LayerNormalizationGrad", "dY", dy.dims, x.dims));
  RETURN_IF_ERROR(check_same_dims("LayerNormalizationGrad", "dX", call.outputs[0].dims, x.dims));
  const bool ds = call.outputs.size() > 1 && call.outputs[1].data, db = call.outputs.size() > 2 && call.outputs[2].data;
  if ((ds && call.outputs[1].size() != s->cols) || (db && call.outputs[2].size() != s->cols))
    return invalid_input("LayerNormalizationGrad: dScale / dB do not have the normalized size");
  return Status::ok();
}

}  // namespace pt::kernels
