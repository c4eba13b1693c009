// The argument checks of BatchNormalization and BatchNormalizationGrad, shared by
// kernels/cpu/batchnorm.cpp and the CUDA wrappers in kernels/cuda/nn_ops.cpp: one definition, so
// both backends refuse the same calls with the same messages.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// X [N, C, spatial...] as N x C planes of s elements.
struct BatchNormGeometry {
  int64_t n = 0, c = 0, s = 1;         // batch, channels, spatial size
  int64_t m() const { return n * s; }  // elements per channel
};

// X (input first_param - 1) of rank >= 2; the per-channel inputs first_param .. first_param + 3
// that are present of dims [C].
inline Status batch_norm_geometry(const char* op, const KernelCall& call, size_t first_param, BatchNormGeometry* g) {
  const Dims& x = call.inputs[first_param - 1].dims;
  if (x.size() < 2) return invalid_input(std::string(op) + ": X " + dims_str(x) + " has rank below 2");
  *g = BatchNormGeometry{};
  g->n = x[0];
  g->c = x[1];
  for (size_t i = 2; i < x.size(); ++i) g->s *= x[i];
  for (size_t i = first_param; i < call.inputs.size() && i < first_param + 4; ++i)
    if (has_input(call, i)) RETURN_IF_ERROR(check_same_dims(op, "a per-channel input", call.inputs[i].dims, Dims{g->c}));
  return Status::ok();
}

// BatchNormalization (X, scale, B, mean, var[, step]) -> Y[, mean, var, saved mean, saved var]:
// the inputs and Y of X's dims. The statistics outputs: check_batch_norm_stats.
inline Status check_batch_norm(const KernelCall& call, BatchNormGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, "BatchNormalization", 5, 1));
  RETURN_IF_ERROR(batch_norm_geometry("BatchNormalization", call, 1, g));
  return check_same_dims("BatchNormalization", "Y", call.outputs[0].dims, call.inputs[0].dims);
}

// BatchNormalization's outputs 1-4, each when present: [C].
inline Status check_batch_norm_stats(const KernelCall& call, const BatchNormGeometry& g) {
  for (size_t i = 1; i < call.outputs.size() && i < 5; ++i)
    if (call.outputs[i].data)
      RETURN_IF_ERROR(check_same_dims("BatchNormalization", "a statistics output", call.outputs[i].dims, Dims{g.c}));
  return Status::ok();
}

// BatchNormalizationGrad (dY, X, scale[, mean, var]) -> dX, dScale, dBias (each optional): dY and
// dX of X's dims, dScale and dBias [C]; not _training (inference mode), the running mean and var.
inline Status check_batch_norm_grad(const KernelCall& call, BatchNormGeometry* g) {
  const char* op = "BatchNormalizationGrad";
  RETURN_IF_ERROR(check_arity(call, op, 3, 1));
  RETURN_IF_ERROR(batch_norm_geometry(op, call, 2, g));
  const Dims& x = call.inputs[1].dims;
  RETURN_IF_ERROR(check_same_dims(op, "dY", call.inputs[0].dims, x));
  auto present = [&](size_t i) { return call.outputs.size() > i && call.outputs[i].data; };
  if (present(0)) RETURN_IF_ERROR(check_same_dims(op, "dX", call.outputs[0].dims, x));
  for (size_t i = 1; i < 3; ++i)
    if (present(i)) RETURN_IF_ERROR(check_same_dims(op, "a parameter gradient", call.outputs[i].dims, Dims{g->c}));
  if (call.attrs.get_int("_training", 0) == 0 && (!has_input(call, 3) || !has_input(call, 4)))
    return invalid_input("BatchNormalizationGrad: inference mode needs the running mean and variance inputs");
  return Status::ok();
}

// _activation "Relu": the epilogue pass (importer/fuse_epilogue.cpp) fused the Relu that read Y;
// the kernel applies it as it writes Y (*relu).
inline Status check_batch_norm_activation(const KernelCall& call, bool* relu) {
  const std::string act = call.attrs.get_string("_activation", "none");
  if (act != "none" && act != "Relu") return invalid_input("BatchNormalization: _activation '" + act + "' (none or Relu)");
  *relu = act == "Relu";
  return Status::ok();
}

}  // namespace pt::kernels
