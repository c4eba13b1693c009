// The argument checks and shape helpers both backends share (kernels/cpu/cpu_util.h and
// kernels/cuda/ops_util.h bring them into pt::cpu and pt::cuda): one definition, so the CPU
// kernels and the CUDA wrappers refuse the same calls with the same messages. The checks of the
// larger op families have headers of their own: kernels/checks/*.h, kernels/attention_geometry.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/registry.h"

namespace pt::kernels {

inline bool has_input(const KernelCall& call, size_t i) {
  return call.inputs.size() > i && call.inputs[i].data != nullptr;
}

// Input i as T* (TensorView::as checks its dtype), nullptr when it is absent.
template <typename T>
T* optional_input(const KernelCall& call, size_t i) {
  return has_input(call, i) ? call.inputs[i].as<T>() : nullptr;
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

// ---- element-wise ops: one check per call shape, the CPU kernels and the CUDA wrappers alike ----

// y = f(a, b) under numpy broadcasting: two inputs, one output of the broadcast dims (*bd).
inline Status check_broadcast_binary(const KernelCall& call, const char* op, Dims* bd) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const Dims& a = call.inputs[0].dims;
  const Dims& b = call.inputs[1].dims;
  if (!broadcast_dims(a, b, bd))
    return invalid_input(std::string(op) + ": shapes " + dims_str(a) + " and " + dims_str(b) + " do not broadcast");
  return check_same_dims(op, "output", call.outputs[0].dims, *bd);
}

// Sum / Mean: every present input broadcasts to the output; *count of them (at least one unless the
// output is empty). Checked before the kernel writes anything.
inline Status check_variadic(const KernelCall& call, const char* op, size_t* count) {
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  const Dims& y = call.outputs[0].dims;
  *count = 0;
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    const TensorView& x = call.inputs[k];
    if (!x.data) continue;
    Dims bd;
    if (!broadcast_dims(x.dims, y, &bd) || bd != y)
      return invalid_input(std::string(op) + ": input " + std::to_string(k) + " " + dims_str(x.dims) +
                           " does not broadcast to the output " + dims_str(y));
    ++*count;
  }
  if (*count == 0 && call.outputs[0].size() != 0) return invalid_input(std::string(op) + ": no inputs");
  return Status::ok();
}

// Identity, Reshape, Flatten, Squeeze, Unsqueeze: one input, an output of as many elements.
inline Status check_copy(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Identity/Reshape/Flatten", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  if (x.size() != y.size())
    return invalid_input("Identity/Reshape/Flatten: input " + dims_str(x.dims) + " and output " + dims_str(y.dims) +
                         " differ in element count");
  return Status::ok();
}

// Transpose: attribute perm (default: the dims reversed) a permutation of the input's dims, the
// output of the permuted dims. Fills *perm.
inline Status check_transpose(const KernelCall& call, std::vector<int64_t>* perm) {
  RETURN_IF_ERROR(check_arity(call, "Transpose", 1, 1));
  const TensorView& x = call.inputs[0];
  const int r = x.rank();
  *perm = call.attrs.get_ints("perm");
  if (perm->empty() && r > 0)
    for (int i = r - 1; i >= 0; --i) perm->push_back(i);
  if (static_cast<int>(perm->size()) != r)
    return invalid_input("Transpose: perm has " + std::to_string(perm->size()) + " entries for an input of rank " +
                         std::to_string(r));
  std::vector<bool> seen(r, false);
  Dims out(r);
  for (int k = 0; k < r; ++k) {
    const int64_t p = (*perm)[k];
    if (p < 0 || p >= r || seen[p])
      return invalid_input("Transpose: perm is not a permutation of 0.." + std::to_string(r - 1));
    seen[p] = true;
    out[k] = x.dims[p];
  }
  return check_same_dims("Transpose", "output", call.outputs[0].dims, out);
}

// PReluGrad (dY, X, slope) -> dX, dSlope unreduced: X, dX and dSlope of dY's dims, the slope
// broadcasting to them.
inline Status check_prelu_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "PReluGrad", 3, 2));
  const Dims& d = call.inputs[0].dims;
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "X", call.inputs[1].dims, d));
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "dX", call.outputs[0].dims, d));
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "dSlope", call.outputs[1].dims, d));
  const Dims& s = call.inputs[2].dims;
  Dims bd;
  if (!broadcast_dims(s, d, &bd) || bd != d)
    return invalid_input("PReluGrad: slope " + dims_str(s) + " does not broadcast to " + dims_str(d));
  return Status::ok();
}

// ---- Dropout ----

// A pass that drops (training, step >= 0) needs a ratio below 1.
inline Status check_dropout_ratio(float ratio) {
  if (ratio >= 1.0f) return invalid_input("Dropout: ratio " + std::to_string(ratio) + " must be below 1 in training");
  return Status::ok();
}

}  // namespace pt::kernels
