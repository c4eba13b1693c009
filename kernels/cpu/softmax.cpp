// Softmax and LogSoftmax CPU kernels with their backward ops (SoftmaxGrad, LogSoftmaxGrad from dY
// and the forward output Y). Attributes: axis (non-negative) and _coerce2d (1: opset < 13, the
// input viewed as 2-D at axis; 0: along the single dim axis).
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/softmax_impl.h"

namespace pt::cpu {
namespace {

Status geometry_from_attrs(const KernelCall& call, const char* op, const Dims& dims,
                           AxisGeometry* g) {
  const int64_t axis = call.attrs.get_int("axis", static_cast<int64_t>(dims.size()) - 1);
  const bool coerce2d = call.attrs.get_int("_coerce2d", 0) != 0;
  return axis_geometry(op, dims, axis, coerce2d, g);
}

template <typename T, bool kLog>
Status forward(const KernelCall& call, const char* op) {
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims(op, "output", y.dims, x.dims));
  AxisGeometry g;
  RETURN_IF_ERROR(geometry_from_attrs(call, op, x.dims, &g));
  softmax_forward<T, kLog>(x.as<T>(), y.as<T>(), g);
  return Status::ok();
}

template <typename T, bool kLog>
Status backward(const KernelCall& call, const char* op) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& y = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims(op, "Y", y.dims, dy.dims));
  RETURN_IF_ERROR(check_same_dims(op, "output", dx.dims, dy.dims));
  AxisGeometry g;
  RETURN_IF_ERROR(geometry_from_attrs(call, op, dy.dims, &g));
  softmax_backward<T, kLog>(dy.as<T>(), y.as<T>(), dx.as<T>(), g);
  return Status::ok();
}

}  // namespace

template <typename T>
Status softmax(const KernelCall& call) {
  return forward<T, false>(call, "Softmax");
}
template <typename T>
Status log_softmax(const KernelCall& call) {
  return forward<T, true>(call, "LogSoftmax");
}
template <typename T>
Status softmax_grad(const KernelCall& call) {
  return backward<T, false>(call, "SoftmaxGrad");
}
template <typename T>
Status log_softmax_grad(const KernelCall& call) {
  return backward<T, true>(call, "LogSoftmaxGrad");
}

#define PT_INSTANTIATE(name)                             \
  template Status name<float>(const KernelCall& call);    \
  template Status name<double>(const KernelCall& call)

PT_INSTANTIATE(softmax);
PT_INSTANTIATE(log_softmax);
PT_INSTANTIATE(softmax_grad);
PT_INSTANTIATE(log_softmax_grad);

#undef PT_INSTANTIATE

}  // namespace pt::cpu
