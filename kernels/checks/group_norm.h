// The argument checks of GroupNormalization, InstanceNormalization (its case of one channel per
// group) and GroupNormalizationGrad, shared by kernels/cpu/group_norm.cpp and the CUDA wrappers in
// kernels/cuda/group_norm_ops.cpp: one definition, so both backends refuse the same calls alike.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// X (N, C, spatial...) as N x G blocks of (C/G) * spatial elements; the shape function leaves
// `_groups` (G) and `_per_group` (1: scale and bias have G entries, opset 18's form; else C).
struct GroupNormGeometry {
  int64_t n = 0, c = 0, g = 0, spatial = 1, per_group_channels = 0, block = 0;
  bool per_group = false;
  double epsilon = 1e-5;
  int64_t params() const { return per_group ? g : c; }
  int64_t param_index(int64_t group, int64_t channel) const { return per_group ? group : channel; }
};

inline Status group_norm_geometry(const KernelCall& call, const char* op, const TensorView& x, GroupNormGeometry* geo) {
  if (x.rank() < 2) return invalid_input(std::string(op) + ": X must be (N, C, ...), is " + dims_str(x.dims));
  *geo = GroupNormGeometry{};
  geo->n = x.dims[0];
  geo->c = x.dims[1];
  for (int i = 2; i < x.rank(); ++i) geo->spatial *= x.dims[i];
  geo->g = call.attrs.get_int("_groups", 0);
  if (geo->g <= 0 || geo->c % geo->g)
    return invalid_input(std::string(op) + ": " + std::to_string(geo->c) + " channels do not split into " +
                         std::to_string(geo->g) + " groups");
  geo->per_group_channels = geo->c / geo->g;
  geo->block = geo->per_group_channels * geo->spatial;
  geo->per_group = call.attrs.get_int("_per_group", 0) != 0;
  geo->epsilon = call.attrs.get_float("epsilon", 1e-5f);
  return Status::ok();
}

// (X, scale, bias) -> Y.
inline Status check_group_norm(const KernelCall& call, GroupNormGeometry* geo) {
  RETURN_IF_ERROR(check_arity(call, "GroupNormalization", 3, 1));
  const TensorView& x = call.inputs[0];
  RETURN_IF_ERROR(group_norm_geometry(call, "GroupNormalization", x, geo));
  RETURN_IF_ERROR(check_same_dims("GroupNormalization", "Y", call.outputs[0].dims, x.dims));
  if (call.inputs[1].size() != geo->params() || call.inputs[2].size() != geo->params())
    return invalid_input("GroupNormalization: scale and bias need " + std::to_string(geo->params()) + " elements");
  return Status::ok();
}

// (dY, X, scale) -> (dX, dScale, dBias); any output may be absent.
inline Status check_group_norm_grad(const KernelCall& call, GroupNormGeometry* geo) {
  RETURN_IF_ERROR(check_arity(call, "GroupNormalizationGrad", 3, 3));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  RETURN_IF_ERROR(group_norm_geometry(call, "GroupNormalizationGrad", x, geo));
  RETURN_IF_ERROR(check_same_dims("GroupNormalizationGrad", "dY", dy.dims, x.dims));
  if (call.inputs[2].size() != geo->params())
    return invalid_input("GroupNormalizationGrad: scale needs " + std::to_string(geo->params()) + " elements");
  return Status::ok();
}

}  // namespace pt::kernels
