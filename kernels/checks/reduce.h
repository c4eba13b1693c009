// The argument checks of the reductions (ReduceSum / ReduceMean / ReduceMax and the other ONNX
// reductions, ReduceSumToShape, ConvGradBias), shared by kernels/cpu/reduce_ops.cpp, reduce.cpp,
// conv.cpp and the CUDA wrappers in kernels/cuda/reduce_ops.cpp, so both backends refuse alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// *kd: x's dims with every reduced axis (each in [0, rank)) set to 1, the keep-dims shape.
inline Status reduce_keep_dims(const char* op, const TensorView& x, const std::vector<int64_t>& axes, Dims* kd) {
  *kd = x.dims;
  for (int64_t a : axes) {
    if (a < 0 || a >= x.rank())
      return invalid_input(std::string(op) + ": axis " + std::to_string(a) + " out of range for rank " +
                           std::to_string(x.rank()));
    (*kd)[a] = 1;
  }
  return Status::ok();
}

// An ONNX reduction (X) -> Y over attribute _axes: Y of as many elements as the keep-dims shape *kd.
inline Status check_reduce(const KernelCall& call, const char* op, Dims* kd) {
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(reduce_keep_dims(op, x, call.attrs.get_ints("_axes"), kd));
  if (y.size() != numel(*kd))
    return invalid_input(std::string(op) + ": output " + dims_str(y.dims) + " does not match the reduction of " +
                         dims_str(x.dims));
  return Status::ok();
}

// ReduceSumToShape (X) -> Y: Y a shape that broadcasts to X's.
inline Status check_reduce_sum_to_shape(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ReduceSumToShape", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const size_t rx = x.dims.size(), ry = y.dims.size();
  bool ok = ry <= rx;
  for (size_t i = 0; ok && i < ry; ++i) {
    const int64_t yd = y.dims[i], xd = x.dims[rx - ry + i];
    ok = yd == xd || yd == 1;
  }
  if (!ok)
    return invalid_input("ReduceSumToShape: output " + dims_str(y.dims) + " is not a broadcast source of input " +
                         dims_str(x.dims));
  return Status::ok();
}

// ConvGradBias (dY [N, M, spatial...]) -> dB [M].
inline Status check_conv_grad_bias(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ConvGradBias", 1, 1));
  const TensorView& dy = call.inputs[0];
  if (dy.rank() < 2) return invalid_input("ConvGradBias: dY " + dims_str(dy.dims) + " has rank below 2");
  return check_same_dims("ConvGradBias", "output", call.outputs[0].dims, Dims{dy.dims[1]});
}

}  // namespace pt::kernels
