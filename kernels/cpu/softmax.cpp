// Softmax and LogSoftmax CPU kernels with their backward ops (SoftmaxGrad, LogSoftmaxGrad from dY
// and the forward output Y). Attributes: axis (non-negative) and _coerce2d (1: opset < 13, the
// input viewed as 2-D at axis; 0: along the single dim axis).
#include <string>

#include "kernels/checks/softmax.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/softmax_impl.h"

namespace pt::cpu {
namespace {

template <typename T, bool kLog>
Status forward(const KernelCall& call, const char* op) {
  AxisGeometry g;
  RETURN_IF_ERROR(kernels::check_softmax(call, op, &g));
  softmax_forward<T, kLog>(call.inputs[0].as<T>(), call.outputs[0].as<T>(), g);
  return Status::ok();
}

template <typename T, bool kLog>
Status backward(const KernelCall& call, const char* op) {
  AxisGeometry g;
  RETURN_IF_ERROR(kernels::check_softmax_grad(call, op, &g));
  softmax_backward<T, kLog>(call.inputs[0].as<T>(), call.inputs[1].as<T>(), call.outputs[0].as<T>(), g);
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
