// CPU kernels of the one-formula elementwise ops of kernels/unary_math_ops.h (forward over X,
// backward dX = g(dY, X)), and Gelu (opset 20) with its two forms: exact (erf) and tanh.
#include <cmath>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/vmath.h"
#include "kernels/unary_math_ops.h"

namespace pt::cpu {
namespace detail {

template <typename T>
T softplus(T x) {  // log(1 + e^x) without overflow
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
template <typename T>
T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}
// d/dx x tanh(softplus(x)) = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2).
template <typename T>
T mish_derivative(T x) {
  const T t = std::tanh(softplus(x));
  return t + x * sigmoid(x) * (T(1) - t * t);
}

}  // namespace detail

#define PT_UNARY_MATH_DEFINE(Name, fn, fwd, bwd)                                             \
  template <typename T>                                                                      \
  Status fn##_math(const KernelCall& call) {                                                 \
    return map_unary<T>(call, #Name, [](T x) { return fwd; });                               \
  }                                                                                          \
  template <typename T>                                                                      \
  Status fn##_math_grad(const KernelCall& call) {                                            \
    return map_grad<T>(call, #Name "Grad", [](T dy, T x) { return bwd; });                   \
  }                                                                                          \
  template Status fn##_math<float>(const KernelCall&);                                       \
  template Status fn##_math<double>(const KernelCall&);                                      \
  template Status fn##_math_grad<float>(const KernelCall&);                                  \
  template Status fn##_math_grad<double>(const KernelCall&);
PT_UNARY_MATH_OPS(PT_UNARY_MATH_DEFINE)
#undef PT_UNARY_MATH_DEFINE

namespace {

// approximate = "none": x Phi(x); "tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Expected<bool> gelu_tanh(const KernelCall& call, const char* op) {
  const std::string a = call.attrs.get_string("approximate", "none");
  if (a != "none" && a != "tanh") return invalid_input(std::string(op) + ": approximate '" + a + "' (none or tanh)");
  return a == "tanh";
}
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

}  // namespace

template <typename T>
Status gelu(const KernelCall& call) {
  ASSIGN_OR_RETURN(const bool approx, gelu_tanh(call, "Gelu"));
  if (approx)
    return map_unary<T>(call, "Gelu", [](T x) {
      return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x)));
    });
  if constexpr (std::is_same_v<T, float>) return map_vector(call, "Gelu", VFn::kGelu);
  return map_unary<T>(call, "Gelu", [](T x) { return gelu_exact(x); });
}

template <typename T>
Status gelu_grad(const KernelCall& call) {
  ASSIGN_OR_RETURN(const bool approx, gelu_tanh(call, "GeluGrad"));
  if (approx)
    return map_grad<T>(call, "GeluGrad", [](T dy, T x) {
      const T u = T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
      const T t = std::tanh(u);
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * x * x);
      return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
    });
  if constexpr (std::is_same_v<T, float>) return map_vector(call, "GeluGrad", VFn::kGeluGrad);
  return map_grad<T>(call, "GeluGrad", [](T dy, T x) {
    return dy * (T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2))) + x * T(kInvSqrt2Pi) * std::exp(-T(0.5) * x * x));
  });
}

template Status gelu<float>(const KernelCall&);
template Status gelu<double>(const KernelCall&);
template Status gelu_grad<float>(const KernelCall&);
template Status gelu_grad<double>(const KernelCall&);

}  // namespace pt::cpu
