// The CUDA wrappers of the data-movement ops and LayerNormalization: Slice, SliceGrad, Concat,
// Split, Expand (strided copies, tensor.cu and binary.cu), Gather and GatherGrad (by rows; indices
// checked on the device into the deferred error word, deferred_error.h), LayerNormalization and its
// gradient (statistics in double, as the CPU); Equal, Less, Greater, Not, Where and Cast
// (select.cu). Checks: kernels/checks/tensor.h, layernorm.h.
#include <type_traits>

#include "kernels/checks/layernorm.h"
#include "kernels/checks/tensor.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

namespace {

// The element type the copy kernels move: bool travels as its byte.
template <typename T>
using Elem = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <typename T>
Elem<T>* elems(const TensorView& t) {
  return static_cast<Elem<T>*>(t.data);
}

// y = x walked over `dims` with x's `strides` from element `base` (a strided gather into a
// contiguous y).
template <typename T>
Status gather_into(const char* op, const Dims& dims, const Dims& strides, const TensorView& x, int64_t base,
                   Elem<T>* y, cudaStream_t stream) {
  const int64_t n = numel(dims);
  if (n == 0) return Status::ok();
  Strided<1> s;
  RETURN_IF_ERROR(make_strided<1>(op, dims, {strides}, &s));
  PT_CUDA_CHECK(launch_gather_copy<Elem<T>>(s, y, elems<T>(x) + base, n, 1.0, stream));
  return Status::ok();
}

// y[base + walk offset] (+)= x, x contiguous over `dims` (a strided scatter).
template <typename T>
Status scatter_into(const char* op, const Dims& dims, const Dims& strides, Elem<T>* y, int64_t base,
                    const TensorView& x, bool add, cudaStream_t stream) {
  const int64_t n = numel(dims);
  if (n == 0) return Status::ok();
  Strided<1> s;
  RETURN_IF_ERROR(make_strided<1>(op, dims, {strides}, &s));
  PT_CUDA_CHECK(launch_scatter_copy<Elem<T>>(s, y + base, elems<T>(x), n, add, stream));
  return Status::ok();
}

// The strides of a [outer, len, inner] part of a tensor whose axis has `whole` entries, walked
// over the part's own dims.
Dims part_strides(const Dims& part, int64_t axis, int64_t whole) {
  Dims full = part;
  full[axis] = whole;
  return row_major_strides(full);
}

}  // namespace

template <typename T>
Status slice(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Slice", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  int64_t base;
  Dims st;
  RETURN_IF_ERROR(kernels::slice_geometry("Slice", x.dims, y.dims, call.attrs, &base, &st));
  return gather_into<T>("Slice", y.dims, st, x, base, elems<T>(y), stream_of(call));
}

// (dY[, Acc]) -> dX: Acc or zeros, with dY added (Acc) or written (zeros) where the slice read.
template <typename T>
Status slice_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "SliceGrad", 1, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& dx = call.outputs[0];
  int64_t base;
  Dims st;
  RETURN_IF_ERROR(kernels::slice_geometry("SliceGrad", dx.dims, dy.dims, call.attrs, &base, &st));
  const bool acc = has_input(call, 1);
  if (acc) RETURN_IF_ERROR(check_same_dims("SliceGrad", "the accumulated gradient", call.inputs[1].dims, dx.dims));
  const cudaStream_t stream = stream_of(call);
  if (dx.size() == 0) return Status::ok();
  if (acc) {
    if (call.inputs[1].data != dx.data)
      PT_CUDA_CHECK(cudaMemcpyAsync(dx.data, call.inputs[1].data, dx.bytes(), cudaMemcpyDeviceToDevice, stream));
  } else {
    PT_CUDA_CHECK(cudaMemsetAsync(dx.data, 0, dx.bytes(), stream));
  }
  return scatter_into<T>("SliceGrad", dy.dims, st, elems<T>(dx), base, dy, acc, stream);
}

template <typename T>
Status concat(const KernelCall& call) {
  kernels::PartsGeometry g;
  RETURN_IF_ERROR(kernels::check_concat(call, &g));
  const TensorView& y = call.outputs[0];
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const TensorView& x = call.inputs[i];
    const Dims st = part_strides(x.dims, g.axis, g.len);
    RETURN_IF_ERROR(scatter_into<T>("Concat", x.dims, st, elems<T>(y), g.offset[i] * g.inner, x, false, stream_of(call)));
  }
  return Status::ok();
}

template <typename T>
Status split(const KernelCall& call) {
  kernels::PartsGeometry g;
  RETURN_IF_ERROR(kernels::check_split(call, &g));
  const TensorView& x = call.inputs[0];
  for (size_t i = 0; i < call.outputs.size(); ++i) {
    const TensorView& y = call.outputs[i];
    if (!y.data) continue;
    const Dims st = part_strides(y.dims, g.axis, g.len);
    RETURN_IF_ERROR(gather_into<T>("Split", y.dims, st, x, g.offset[i] * g.inner, elems<T>(y), stream_of(call)));
  }
  return Status::ok();
}

template <typename T>
Status expand(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_expand(call));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  return gather_into<T>("Expand", y.dims, broadcast_strides(x.dims, y.dims), x, 0, elems<T>(y), stream_of(call));
}

template <typename T>
Status gather(const KernelCall& call) {
  kernels::GatherGeometry g;
  RETURN_IF_ERROR(kernels::check_gather(call, "Gather", &g));
  const TensorView& idx = call.inputs[1];
  PT_CUDA_CHECK(launch_gather_rows<Elem<T>>(elems<T>(call.outputs[0]), elems<T>(call.inputs[0]), idx.data,
                                            idx.dtype == DType::kInt64, g.outer, g.len, g.ni, g.inner,
                                            deferred_error_word(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status gather_grad(const KernelCall& call) {
  kernels::GatherGeometry g;
  RETURN_IF_ERROR(kernels::check_gather(call, "GatherGrad", &g));
  const TensorView& idx = call.inputs[1];
  PT_CUDA_CHECK(launch_gather_rows_grad<T>(call.outputs[0].as<T>(), call.inputs[0].as<T>(), idx.data,
                                           idx.dtype == DType::kInt64, g.outer, g.len, g.ni, g.inner,
                                           deferred_error_word(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status layer_norm(const KernelCall& call) {
  kernels::LayerNormGeometry s;
  RETURN_IF_ERROR(kernels::check_layer_norm(call, &s));
  auto out = [&](size_t i) { return call.outputs.size() > i && call.outputs[i].data ? call.outputs[i].as<T>() : nullptr; };
  PT_CUDA_CHECK(launch_layer_norm<T>(call.outputs[0].as<T>(), out(1), out(2), call.inputs[0].as<T>(),
                                     call.inputs[1].as<T>(), has_input(call, 2) ? call.inputs[2].as<T>() : nullptr,
                                     s.rows, s.cols, s.eps, stream_of(call)));
  return Status::ok();
}

template <typename T>
Status layer_norm_grad(const KernelCall& call) {
  kernels::LayerNormGeometry s;
  RETURN_IF_ERROR(kernels::check_layer_norm_grad(call, &s));
  auto out = [&](size_t i) { return call.outputs.size() > i && call.outputs[i].data ? call.outputs[i].as<T>() : nullptr; };
  if (s.rows * s.cols == 0) {
    // No rows: dScale and dB are zeros, as the CPU writes them.
    for (size_t i = 1; i < 3; ++i)
      if (T* p = out(i)) PT_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(s.cols) * sizeof(T), stream_of(call)));
    return Status::ok();
  }
  ScratchBuffer stats;  // per row: mean, 1/stddev
  RETURN_IF_ERROR(stats.allocate(static_cast<size_t>(2 * s.rows) * sizeof(double), stream_of(call)));
  PT_CUDA_CHECK(launch_layer_norm_grad<T>(out(0), out(1), out(2), call.inputs[0].as<T>(), call.inputs[1].as<T>(),
                                          call.inputs[2].as<T>(), s.rows, s.cols, s.eps, stats.as<double>(),
                                          stream_of(call)));
  return Status::ok();
}

#define PT_ALL_TYPES(name)                                 \
  template Status name<float>(const KernelCall&);       \
  template Status name<double>(const KernelCall&);      \
  template Status name<int64_t>(const KernelCall&);     \
  template Status name<int32_t>(const KernelCall&);     \
  template Status name<bool>(const KernelCall&);
PT_ALL_TYPES(slice) PT_ALL_TYPES(concat) PT_ALL_TYPES(split) PT_ALL_TYPES(expand) PT_ALL_TYPES(gather)
#define PT_F(name)                                \
  template Status name<float>(const KernelCall&); \
  template Status name<double>(const KernelCall&);
PT_F(slice_grad) PT_F(gather_grad) PT_F(layer_norm) PT_F(layer_norm_grad)
#undef PT_F

// ---- comparisons, Not, Where, Cast (select.cu) ---------------------------------------------------

namespace {

template <typename T>
Status compare_op(const KernelCall& call, const char* op, CompareOp which) {
  Dims bd;
  RETURN_IF_ERROR(kernels::check_compare(call, op, &bd));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const int64_t n = call.outputs[0].size();
  if (n == 0) return Status::ok();
  Strided<2> s;
  RETURN_IF_ERROR(make_strided<2>(op, bd, {broadcast_strides(a.dims, bd), broadcast_strides(b.dims, bd)}, &s));
  PT_CUDA_CHECK(launch_compare<Elem<T>>(which, s, static_cast<uint8_t*>(call.outputs[0].data), elems<T>(a), elems<T>(b),
                                        n, stream_of(call)));
  return Status::ok();
}

template <typename T>
Status where_typed(const KernelCall& call) {
  const TensorView& y = call.outputs[0];
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  Strided<3> s;
  RETURN_IF_ERROR(make_strided<3>("Where", y.dims,
                                  {broadcast_strides(call.inputs[0].dims, y.dims),
                                   broadcast_strides(call.inputs[1].dims, y.dims),
                                   broadcast_strides(call.inputs[2].dims, y.dims)},
                                  &s));
  PT_CUDA_CHECK(launch_where<Elem<T>>(s, elems<T>(y), static_cast<const uint8_t*>(call.inputs[0].data),
                                      elems<T>(call.inputs[1]), elems<T>(call.inputs[2]), n, stream_of(call)));
  return Status::ok();
}

bool cast_type(DType t, CastType* c) {
  switch (t) {
    case DType::kFloat32: *c = CastType::kF32; return true;
    case DType::kFloat64: *c = CastType::kF64; return true;
    case DType::kInt64: *c = CastType::kI64; return true;
    case DType::kInt32: *c = CastType::kI32; return true;
    case DType::kInt8: *c = CastType::kI8; return true;
    case DType::kUint8: *c = CastType::kU8; return true;
    case DType::kBool: *c = CastType::kBool; return true;
    case DType::kBFloat16: *c = CastType::kBf16; return true;
    default: return false;
  }
}

}  // namespace

template <typename T>
Status equal(const KernelCall& call) {
  return compare_op<T>(call, "Equal", CompareOp::kEqual);
}
template <typename T>
Status less(const KernelCall& call) {
  return compare_op<T>(call, "Less", CompareOp::kLess);
}
template <typename T>
Status greater(const KernelCall& call) {
  return compare_op<T>(call, "Greater", CompareOp::kGreater);
}

Status not_op(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_not(call));
  PT_CUDA_CHECK(launch_not(static_cast<uint8_t*>(call.outputs[0].data), static_cast<const uint8_t*>(call.inputs[0].data),
                           call.inputs[0].size(), stream_of(call)));
  return Status::ok();
}

Status where_op(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_where(call));
  switch (call.outputs[0].dtype) {
    case DType::kFloat32: return where_typed<float>(call);
    case DType::kFloat64: return where_typed<double>(call);
    case DType::kInt64: return where_typed<int64_t>(call);
    case DType::kInt32: return where_typed<int32_t>(call);
    case DType::kBool: return where_typed<bool>(call);
    default: return internal_error("Where: check_where let a value type through");
  }
}

Status cast_op(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_cast(call));
  CastType from, to;
  if (!cast_type(call.inputs[0].dtype, &from) || !cast_type(call.outputs[0].dtype, &to))
    return internal_error("Cast (cuda): no device type for a pair check_cast accepts");
  PT_CUDA_CHECK(launch_cast(from, to, call.outputs[0].data, call.inputs[0].data, call.inputs[0].size(), stream_of(call)));
  return Status::ok();
}

PT_ALL_TYPES(equal) PT_ALL_TYPES(less) PT_ALL_TYPES(greater)
#undef PT_ALL_TYPES

}  // namespace pt::cuda
