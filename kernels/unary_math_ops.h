// Elementwise ops that are one formula each: forward y = f(x) and backward dX = g(dY, X). This list
// is their one home: the CPU kernels (kernels/cpu/unary_math.cpp), the kernel table rows (CPU and
// the CUDA host fallback), the shape functions and the gradient builders (which emit `<Op>Grad`)
// are generated from it, so adding such an op is one line here plus its test cases.
#pragma once

#include "kernels/registry.h"

// X(OnnxName, c_name, forward expression of x, backward expression of dy and x). The expressions
// are evaluated in the kernel's type T; `detail` holds the shared helpers of unary_math.cpp.
#define PT_UNARY_MATH_OPS(X)                                                                  \
  X(Sin, sin, std::sin(x), dy * std::cos(x))                                                  \
  X(Cos, cos, std::cos(x), -dy * std::sin(x))                                                 \
  X(Tan, tan, std::tan(x), dy / (std::cos(x) * std::cos(x)))                                  \
  X(Sinh, sinh, std::sinh(x), dy * std::cosh(x))                                              \
  X(Cosh, cosh, std::cosh(x), dy * std::sinh(x))                                              \
  X(Atan, atan, std::atan(x), dy / (T(1) + x * x))                                            \
  X(Softsign, softsign, x / (T(1) + std::abs(x)),                                             \
    dy / ((T(1) + std::abs(x)) * (T(1) + std::abs(x))))                                       \
  X(Mish, mish, x * std::tanh(detail::softplus(x)), dy * detail::mish_derivative(x))

namespace pt::cpu {
#define PT_UNARY_MATH_DECLARE(Name, fn, fwd, bwd)  \
  template <typename T>                            \
  Status fn##_math(const KernelCall& call);        \
  template <typename T>                            \
  Status fn##_math_grad(const KernelCall& call);
PT_UNARY_MATH_OPS(PT_UNARY_MATH_DECLARE)
#undef PT_UNARY_MATH_DECLARE
}  // namespace pt::cpu
