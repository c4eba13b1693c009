// The argument checks of the pooling ops (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool
// and their backward ops), shared by kernels/cpu/pool.cpp and the CUDA wrappers in
// kernels/cuda/nn_ops.cpp and kernels/cuda/reduce_ops.cpp, so both backends refuse alike.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernel_checks.h"
#include "kernels/window.h"

namespace pt::kernels {

// The window of a pooling op over input dims x (attributes, pads explicit), its output y of the
// window's output dims.
inline Status pool_window(const char* op, const KernelCall& call, const Dims& x, const Dims& y, Window* w) {
  RETURN_IF_ERROR(window_from_attrs(op, call.attrs, x, nullptr, call.attrs.get_int("ceil_mode", 0) != 0, w));
  return check_same_dims(op, "output", y, window_output_dims(*w, w->c));
}

// MaxPool (X) -> Y[, Indices]: Indices, when present, of Y's dims.
inline Status check_max_pool(const KernelCall& call, Window* w) {
  RETURN_IF_ERROR(check_arity(call, "MaxPool", 1, 1));
  const Dims& y = call.outputs[0].dims;
  RETURN_IF_ERROR(pool_window("MaxPool", call, call.inputs[0].dims, y, w));
  if (call.outputs.size() > 1 && call.outputs[1].data)
    RETURN_IF_ERROR(check_same_dims("MaxPool", "Indices", call.outputs[1].dims, y));
  return Status::ok();
}

// MaxPoolGrad (dY, X) -> dX: dX of X's dims, dY of the window's output dims.
inline Status check_max_pool_grad(const KernelCall& call, Window* w) {
  RETURN_IF_ERROR(check_arity(call, "MaxPoolGrad", 2, 1));
  const Dims& x = call.inputs[1].dims;
  RETURN_IF_ERROR(check_same_dims("MaxPoolGrad", "output", call.outputs[0].dims, x));
  return pool_window("MaxPoolGrad", call, x, call.inputs[0].dims, w);
}

// AveragePool (X) -> Y.
inline Status check_average_pool(const KernelCall& call, Window* w) {
  RETURN_IF_ERROR(check_arity(call, "AveragePool", 1, 1));
  return pool_window("AveragePool", call, call.inputs[0].dims, call.outputs[0].dims, w);
}

// AveragePoolGrad (dY) -> dX: the window over dX, dY of its output dims.
inline Status check_average_pool_grad(const KernelCall& call, Window* w) {
  RETURN_IF_ERROR(check_arity(call, "AveragePoolGrad", 1, 1));
  return pool_window("AveragePoolGrad", call, call.outputs[0].dims, call.inputs[0].dims, w);
}

// The global pools: x [N, C, spatial...] as *planes (N * C) of *size elements, the pooled y
// [N, C, 1, ...].
inline Status global_pool_geometry(const char* op, const Dims& x, const Dims& y, int64_t* planes, int64_t* size) {
  if (x.size() < 2) return invalid_input(std::string(op) + ": input " + dims_str(x) + " has rank below 2");
  Dims want = {x[0], x[1]};
  want.resize(x.size(), 1);
  RETURN_IF_ERROR(check_same_dims(op, "pooled tensor", y, want));
  *planes = x[0] * x[1];
  *size = *planes ? numel(x) / *planes : 0;
  return Status::ok();
}

// GlobalAveragePool, GlobalMaxPool (X) -> Y.
inline Status check_global_pool(const KernelCall& call, const char* op, int64_t* planes, int64_t* size) {
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  return global_pool_geometry(op, call.inputs[0].dims, call.outputs[0].dims, planes, size);
}

// GlobalAveragePoolGrad (dY) -> dX.
inline Status check_global_average_pool_grad(const KernelCall& call, int64_t* planes, int64_t* size) {
  RETURN_IF_ERROR(check_arity(call, "GlobalAveragePoolGrad", 1, 1));
  return global_pool_geometry("GlobalAveragePoolGrad", call.outputs[0].dims, call.inputs[0].dims, planes, size);
}

}  // namespace pt::kernels
