// Elementwise CPU kernels: unary activations and math (Relu ... Sqrt), their dedicated backward
// ops (ReluGrad, SigmoidGrad, TanhGrad: dX from dY and the forward output Y), and the copy ops
// (Identity, Reshape, Flatten) whose output dims the caller has already set.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/vmath.h"

namespace pt::cpu {
namespace {

template <typename T>
T stable_sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

}  // namespace

template <typename T>
Status relu(const KernelCall& call) {
  return map_unary<T>(call, "Relu", [](T x) { return x > T(0) ? x : T(0); });
}
template <typename T>
Status sigmoid(const KernelCall& call) {
  if constexpr (std::is_same_v<T, float>) return map_vector(call, "Sigmoid", VFn::kSigmoid);
  return map_unary<T>(call, "Sigmoid", [](T x) { return stable_sigmoid(x); });
}
template <typename T>
Status tanh_op(const KernelCall& call) {
  if constexpr (std::is_same_v<T, float>) return map_vector(call, "Tanh", VFn::kTanh);
  return map_unary<T>(call, "Tanh", [](T x) { return std::tanh(x); });
}
template <typename T>
Status neg(const KernelCall& call) {
  return map_unary<T>(call, "Neg", [](T x) { return -x; });
}
template <typename T>
Status exp_op(const KernelCall& call) {
  if constexpr (std::is_same_v<T, float>) return map_vector(call, "Exp", VFn::kExp);
  return map_unary<T>(call, "Exp", [](T x) { return std::exp(x); });
}
template <typename T>
Status log_op(const KernelCall& call) {
  return map_unary<T>(call, "Log", [](T x) { return std::log(x); });
}
template <typename T>
Status sqrt_op(const KernelCall& call) {
  return map_unary<T>(call, "Sqrt", [](T x) { return std::sqrt(x); });
}

// ReluGrad (dY float32, Y bfloat16): --precision bf16 hands ReluGrad the bfloat16 copy of Y that a
// following GEMM/convolution reads anyway (importer/precision.cpp), so float32 Y need not be kept for
// the backward. The mask is the same: rounding keeps the sign, and a positive float32 rounds to a
// positive bfloat16 (0x0001..0x7F80; NaNs are 0x7F81..0x7FFF) unless it is below 2^-134.
static Status relu_grad_bf16_mask(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ReluGrad", 2, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& y = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims("ReluGrad", "Y", y.dims, dy.dims));
  RETURN_IF_ERROR(check_same_dims("ReluGrad", "output", dx.dims, dy.dims));
  const float* pdy = dy.as<float>();
  const uint16_t* py = static_cast<const uint16_t*>(y.data);
  float* pdx = dx.as<float>();
  const int64_t n = dy.size();
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) pdx[i] = static_cast<uint16_t>(py[i] - 1u) < 0x7F80u ? pdy[i] : 0.0f;
  return Status::ok();
}

template <typename T>
Status relu_grad(const KernelCall& call) {
  if constexpr (std::is_same_v<T, float>)
    if (call.inputs.size() == 2 && call.inputs[1].dtype == DType::kBFloat16) return relu_grad_bf16_mask(call);
  return map_grad<T>(call, "ReluGrad", [](T dy, T y) { return y > T(0) ? dy : T(0); });
}
template <typename T>
Status sigmoid_grad(const KernelCall& call) {
  return map_grad<T>(call, "SigmoidGrad", [](T dy, T y) { return dy * y * (T(1) - y); });
}
template <typename T>
Status tanh_grad(const KernelCall& call) {
  return map_grad<T>(call, "TanhGrad", [](T dy, T y) { return dy * (T(1) - y * y); });
}

template <typename T>
Status copy_input(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Identity/Reshape/Flatten", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  if (x.size() != y.size())
    return invalid_input("Identity/Reshape/Flatten: input " + dims_str(x.dims) +
                         " and output " + dims_str(y.dims) + " differ in element count");
  const T* px = x.as<T>();
  T* py = y.as<T>();
  if (px != py && x.size() > 0) std::memcpy(py, px, static_cast<size_t>(x.size()) * sizeof(T));
  return Status::ok();
}

#define PT_INSTANTIATE(name)                                   \
  template Status name<float>(const KernelCall& call);          \
  template Status name<double>(const KernelCall& call)

PT_INSTANTIATE(relu);
PT_INSTANTIATE(sigmoid);
PT_INSTANTIATE(tanh_op);
PT_INSTANTIATE(neg);
PT_INSTANTIATE(exp_op);
PT_INSTANTIATE(log_op);
PT_INSTANTIATE(sqrt_op);
PT_INSTANTIATE(relu_grad);
PT_INSTANTIATE(sigmoid_grad);
PT_INSTANTIATE(tanh_grad);
PT_INSTANTIATE(copy_input);
template Status copy_input<int64_t>(const KernelCall& call);
template Status copy_input<int32_t>(const KernelCall& call);
template Status copy_input<bool>(const KernelCall& call);
template Status copy_input<uint8_t>(const KernelCall& call);

#undef PT_INSTANTIATE

}  // namespace pt::cpu
