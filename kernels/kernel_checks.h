// The argument checks and shape helpers both backends share (kernels/cpu/cpu_util.h and
// kernels/cuda/ops_util.h bring them into pt::cpu and pt::cuda): one definition, so the CPU
// kernels and the CUDA wrappers refuse the same calls with the same messages.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/registry.h"

namespace pt::kernels {

inline bool has_input(const KernelCall& call, size_t i) {
  return call.inputs.size() > i && call.inputs[i].data != nullptr;
}

// invalid_input unless the call has at least `n_in` inputs and `n_out` outputs.
inline Status check_arity(const KernelCall& call, const char* op, size_t n_in, size_t n_out) {
  if (call.inputs.size() < n_in || call.outputs.size() < n_out)
    return invalid_input(std::string(op) + ": expected at least " + std::to_string(n_in) +
                         " inputs and " + std::to_string(n_out) + " outputs, got " +
                         std::to_string(call.inputs.size()) + " and " +
                         std::to_string(call.outputs.size()));
  return Status::ok();
}

// invalid_input naming `op` and `what` unless got == want.
inline Status check_same_dims(const char* op, const char* what, const Dims& got, const Dims& want) {
  if (got != want)
    return invalid_input(std::string(op) + ": " + what + " has dims " + dims_str(got) +
                         ", expected " + dims_str(want));
  return Status::ok();
}

// Element strides of `in` broadcast (right-aligned) to `out`: 0 on broadcast dims. `in` must be
// broadcast-compatible with `out`.
inline Dims broadcast_strides(const Dims& in, const Dims& out) {
  Dims s(out.size(), 0);
  const Dims rs = row_major_strides(in);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    s[off + i] = (in[i] == 1 && out[off + i] != 1) ? 0 : rs[i];
  return s;
}

// An op along one axis: data viewed as [outer, n, inner].
struct AxisGeometry {
  int64_t outer = 1, n = 1, inner = 1;
};

// coerce2d (opset < 13): [prod(dims[:axis]), prod(dims[axis:])], inner = 1. Otherwise the single
// dim `axis`. A scalar is one row of one element.
inline Status axis_geometry(const char* op, const Dims& dims, int64_t axis, bool coerce2d,
                            AxisGeometry* g) {
  const int64_t r = static_cast<int64_t>(dims.size());
  *g = AxisGeometry{};
  if (r == 0) return Status::ok();
  if (axis < 0 || axis >= r)
    return invalid_input(std::string(op) + ": axis " + std::to_string(axis) +
                         " out of range for input of rank " + std::to_string(r));
  for (int64_t d = 0; d < axis; ++d) g->outer *= dims[d];
  if (coerce2d) {
    for (int64_t d = axis; d < r; ++d) g->n *= dims[d];
  } else {
    g->n = dims[axis];
    for (int64_t d = axis + 1; d < r; ++d) g->inner *= dims[d];
  }
  return Status::ok();
}

}  // namespace pt::kernels
