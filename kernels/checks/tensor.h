// The argument checks of the data-movement ops (Concat, Split, Slice, SliceGrad, Expand, Gather,
// GatherGrad), shared by kernels/cpu/tensor_ops.cpp and the CUDA wrappers in
// kernels/cuda/tensor_ops.cpp: one definition, so both backends refuse the same calls alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// [outer, dims[axis], inner] around `axis`.
inline void split_at(const Dims& d, int64_t axis, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int64_t i = 0; i < axis; ++i) *outer *= d[i];
  for (size_t i = axis + 1; i < d.size(); ++i) *inner *= d[i];
}

inline Status check_axis(const char* op, int64_t axis, int rank) {
  if (axis < 0 || axis >= rank)
    return invalid_input(std::string(op) + ": axis " + std::to_string(axis) + " out of range for rank " +
                         std::to_string(rank));
  return Status::ok();
}

// Slice geometry: the first element's offset in the input and the input strides of one step along
// each output dim (negative for negative steps), from the normalised _starts / _steps.
inline Status slice_geometry(const char* op, const Dims& in, const Dims& out, const AttrMap& attrs, int64_t* base,
                             Dims* strides) {
  const std::vector<int64_t> starts = attrs.get_ints("_starts"), steps = attrs.get_ints("_steps");
  if (starts.size() != in.size() || steps.size() != in.size() || out.size() != in.size())
    return invalid_input(std::string(op) + ": normalised starts/steps do not match rank " + std::to_string(in.size()));
  const Dims rs = row_major_strides(in);
  *base = 0;
  strides->assign(in.size(), 0);
  for (size_t k = 0; k < in.size(); ++k) {
    if (out[k] > 0) {
      const int64_t last = starts[k] + (out[k] - 1) * steps[k];
      if (starts[k] < 0 || starts[k] >= in[k] || last < 0 || last >= in[k])
        return invalid_input(std::string(op) + ": slice of dim " + std::to_string(k) + " leaves the input");
    }
    *base += starts[k] * rs[k];
    (*strides)[k] = rs[k] * steps[k];
  }
  return Status::ok();
}

// Concat and Split: the whole tensor (Concat's output, Split's input) as [outer, len, inner] and
// the parts' offsets along the axis.
struct PartsGeometry {
  int64_t axis = 0, outer = 1, len = 0, inner = 1;
  std::vector<int64_t> offset;  // [part]: its first index along the axis
};

// Concat: inputs of the output's rank whose lengths along `axis` add up to the output's.
inline Status check_concat(const KernelCall& call, PartsGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, "Concat", 1, 1));
  const TensorView& y = call.outputs[0];
  g->axis = call.attrs.get_int("axis", 0);
  RETURN_IF_ERROR(check_axis("Concat", g->axis, y.rank()));
  split_at(y.dims, g->axis, &g->outer, &g->inner);
  g->len = y.dims[g->axis];
  g->offset.clear();
  int64_t off = 0;
  for (const TensorView& x : call.inputs) {
    if (x.rank() != y.rank()) return invalid_input("Concat: inputs differ in rank from the output");
    const int64_t len = x.dims[g->axis];
    if (off + len > g->len) return invalid_input("Concat: inputs are longer than the output along the axis");
    g->offset.push_back(off);
    off += len;
  }
  if (off != g->len) return invalid_input("Concat: inputs are shorter than the output along the axis");
  return Status::ok();
}

// Split: outputs of the input's rank that fit in it along `axis`, in order.
inline Status check_split(const KernelCall& call, PartsGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, "Split", 1, 1));
  const TensorView& x = call.inputs[0];
  g->axis = call.attrs.get_int("axis", 0);
  RETURN_IF_ERROR(check_axis("Split", g->axis, x.rank()));
  split_at(x.dims, g->axis, &g->outer, &g->inner);
  g->len = x.dims[g->axis];
  g->offset.clear();
  int64_t off = 0;
  for (const TensorView& y : call.outputs) {
    if (y.rank() != x.rank()) return invalid_input("Split: outputs differ in rank from the input");
    const int64_t len = y.dims[g->axis];
    if (off + len > g->len) return invalid_input("Split: outputs are longer than the input along the axis");
    g->offset.push_back(off);
    off += len;
  }
  return Status::ok();
}

// Expand: X broadcasts to the output's dims.
inline Status check_expand(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Expand", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  Dims bd;
  if (!broadcast_dims(x.dims, y.dims, &bd) || bd != y.dims)
    return invalid_input("Expand: " + dims_str(x.dims) + " does not broadcast to " + dims_str(y.dims));
  return Status::ok();
}

// Gather (data, indices) -> Y and GatherGrad (dY, indices) -> dData: the data tensor (`data`:
// Gather's input 0, GatherGrad's output) as [outer, len, inner], ni indices.
struct GatherGeometry {
  int64_t outer = 1, len = 0, ni = 0, inner = 1;
};

inline Status check_gather(const KernelCall& call, const char* op, GatherGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const bool grad = std::string(op) == "GatherGrad";
  const TensorView& data = grad ? call.outputs[0] : call.inputs[0];
  const TensorView& idx = call.inputs[1];
  const TensorView& rows = grad ? call.inputs[0] : call.outputs[0];  // Y, or dY
  const int64_t axis = call.attrs.get_int("axis", 0);
  RETURN_IF_ERROR(check_axis(op, axis, data.rank()));
  split_at(data.dims, axis, &g->outer, &g->inner);
  g->len = data.dims[axis];
  g->ni = idx.size();
  if (rows.size() != g->outer * g->ni * g->inner)
    return invalid_input(std::string(op) + (grad ? ": dY " : ": output ") + dims_str(rows.dims) + " does not match");
  if (g->ni > 0 && idx.dtype != DType::kInt64 && idx.dtype != DType::kInt32)
    return invalid_input(std::string(op) + ": indices must be int64 or int32, are " + dtype_name(idx.dtype));
  return Status::ok();
}

// Equal, Less, Greater: two inputs that broadcast to the (bool) output's dims (*bd).
inline Status check_compare(const KernelCall& call, const char* op, Dims* bd) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  if (!broadcast_dims(a.dims, b.dims, bd) || *bd != y.dims)
    return invalid_input(std::string(op) + ": shapes " + dims_str(a.dims) + " and " + dims_str(b.dims) +
                         " do not broadcast to the output " + dims_str(y.dims));
  return Status::ok();
}

inline Status check_not(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Not", 1, 1));
  return check_same_dims("Not", "output", call.outputs[0].dims, call.inputs[0].dims);
}

// Where (condition, X, Y): the three broadcast to the output, X and Y of the output's type.
inline Status check_where(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Where", 3, 1));
  Dims a, b;
  if (!broadcast_dims(call.inputs[0].dims, call.inputs[1].dims, &a) || !broadcast_dims(a, call.inputs[2].dims, &b) ||
      b != call.outputs[0].dims)
    return invalid_input("Where: inputs do not broadcast to the output " + dims_str(call.outputs[0].dims));
  if (call.inputs[1].dtype != call.outputs[0].dtype || call.inputs[2].dtype != call.outputs[0].dtype)
    return invalid_input("Where: X and Y must have the output's type");
  const DType t = call.outputs[0].dtype;
  if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt64 && t != DType::kInt32 && t != DType::kBool)
    return unsupported(std::string("Where: values of type ") + dtype_name(t));
  return Status::ok();
}

// Cast: the output of the input's dims, and a pair of types Cast has: any two of float32,
// float64, int64, int32, int8, uint8 and bool, float32 -> bfloat16 and bfloat16 -> float32.
inline bool cast_numeric(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt64 || t == DType::kInt32 ||
         t == DType::kInt8 || t == DType::kUint8 || t == DType::kBool;
}
inline Status check_cast(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Cast", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims("Cast", "output", y.dims, x.dims));
  const bool ok = (cast_numeric(x.dtype) && cast_numeric(y.dtype)) ||
                  (x.dtype == DType::kFloat32 && y.dtype == DType::kBFloat16) ||
                  (x.dtype == DType::kBFloat16 && y.dtype == DType::kFloat32);
  if (!ok)
    return unsupported(std::string("Cast: ") + dtype_name(x.dtype) + " to " + dtype_name(y.dtype) + " is not supported");
  return Status::ok();
}

}  // namespace pt::kernels
