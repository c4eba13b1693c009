// The element-wise unary ops, one line each: forward y = f(x) and, unless the gradient is composed
// from other ops, backward dX = g(dY, Z) (Z the forward input X or output Y), written once as
// host/device expressions. The CPU kernels (kernels/cpu/unary.cpp), the CUDA kernels
// (kernels/cuda/elementwise.cu and elementwise_ops.cpp), both kernel tables, the shape functions
// and the gradient builders are generated from PT_UNARY_OPS, so adding such an op is one line here
// plus its test cases. Plain C++ and CUDA: included by g++ and by nvcc (no framework headers).
#pragma once

#include <algorithm>
#include <cmath>

#ifdef __CUDACC__
#define PT_HD __host__ __device__ __forceinline__
#else
#define PT_HD inline
#endif

namespace pt::unary {

// How an op's two scalar parameters a and b are read (kernels/unary_args.h reads them, for the CPU
// kernels and the CUDA wrappers alike; the expressions see them as T a, b):
//   kAttrs: float attributes `a_name` / `b_name`, the defaults where absent (nullptr: unused);
//   kClip:  Clip's min / max: the attributes (opset < 11; else T's lowest / max), overridden by the
//           optional scalar inputs 1 and 2 (2 and 3 of ClipGrad), read where the kernel runs;
//   kGelu:  Gelu's `approximate`: a = 0 for "none", 1 for "tanh", anything else refused.
struct ArgSpec {
  enum Kind { kAttrs, kClip, kGelu } kind = kAttrs;
  const char* a_name = nullptr;
  double a_default = 0;
  const char* b_name = nullptr;
  double b_default = 0;
};
constexpr ArgSpec no_args() { return {}; }
constexpr ArgSpec attrs(const char* a, double a_default, const char* b = nullptr, double b_default = 0) {
  return {ArgSpec::kAttrs, a, a_default, b, b_default};
}
constexpr ArgSpec clip_bounds() { return {ArgSpec::kClip, "min", 0, "max", 0}; }
constexpr ArgSpec gelu_mode() { return {ArgSpec::kGelu, "approximate", 0, nullptr, 0}; }

// The parameters as a kernel receives them; lo / hi (Clip's bound inputs, or null) replace a / b
// where the kernel runs (host memory on the CPU, device memory on CUDA).
template <typename T>
struct Args {
  T a = T(0), b = T(0);
  const T* lo = nullptr;
  const T* hi = nullptr;
};

constexpr double kSeluAlpha = 1.67326319217681884765625;
constexpr double kSeluGamma = 1.05070102214813232421875;
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;
constexpr double kTwoOverSqrtPi = 1.12837916709551257389615890312154517;

template <typename T>
PT_HD T sigmoid(T x) {  // no overflow for either sign
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}
template <typename T>
PT_HD T softplus(T x) {  // log(1 + e^x) without overflow
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
// d/dx x tanh(softplus(x)) = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2).
template <typename T>
PT_HD T mish_derivative(T x) {
  const T t = std::tanh(softplus(x));
  return t + x * sigmoid(x) * (T(1) - t * t);
}
template <typename T>
PT_HD T hard_sigmoid_grad(T dy, T x, T a, T b) {
  const T v = a * x + b;
  return v > T(0) && v < T(1) ? a * dy : T(0);
}
template <typename T>
PT_HD T hard_swish_grad(T dy, T x) {
  if (x < T(-3)) return T(0);
  if (x > T(3)) return dy;
  return dy * (x / T(3) + T(0.5));
}
// Gelu: x Phi(x) (tanh = false) or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
PT_HD T gelu_exact(T x) {  // also the fused products' epilogue (kernels/cpu/epilogue.cpp)
  return T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2)));
}
template <typename T>
PT_HD T gelu(T x, bool tanh) {
  if (tanh) return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x)));
  return gelu_exact(x);
}
template <typename T>
PT_HD T gelu_grad(T dy, T x, bool tanh) {
  if (tanh) {
    const T u = T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
    const T t = std::tanh(u);
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * x * x);
    return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
  }
  return dy * (T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2))) + x * T(kInvSqrt2Pi) * std::exp(-T(0.5) * x * x));
}

}  // namespace pt::unary

// X(Name, fn, args, forward of x, grad, backward of dy and z, cpu_fast, cpu_fast_grad)
//   Name:  the ONNX op; its backward op (domain "pipetrain") is NameGrad.
//   fn:    the C++ stem: kernels cpu::fn_op / cpu::fn_grad, cuda::fn_op / cuda::fn_grad.
//   args:  an ArgSpec (above); the expressions see T a, b.
//   grad:  from_x: NameGrad(dY, X) -> dX, z = X;  from_y: NameGrad(dY, Y) -> dX, z = Y;
//          composed: no NameGrad, the builder grad::fn (importer/grad/unary_grad.cpp) emits
//          existing ops (backward left empty).
//   cpu_fast, cpu_fast_grad: kNone, or the CPU's faster float path (kernels/cpu/unary.cpp: the
//          vector maps of kernels/cpu/vmath.h, ReluGrad's bfloat16 mask); double and CUDA always
//          run the expression. A fast path must compute what it computed before: tests compare
//          training bit for bit.
// The expressions are evaluated in T (float or double) with pt::unary's helpers in scope; std::min /
// std::max are constexpr, so the device calls them too (--expt-relaxed-constexpr).
#define PT_UNARY_OPS(X)                                                                                  \
  X(Relu, relu, no_args(), x > T(0) ? x : T(0), from_y, z > T(0) ? dy : T(0), kNone, kReluGradBf16)       \
  X(Sigmoid, sigmoid, no_args(), sigmoid(x), from_y, dy * z * (T(1) - z), kSigmoid, kNone)                \
  X(Tanh, tanh, no_args(), std::tanh(x), from_y, dy * (T(1) - z * z), kTanh, kNone)                       \
  X(Neg, neg, no_args(), -x, composed, , kNone, kNone)                                                    \
  X(Exp, exp, no_args(), std::exp(x), composed, , kExp, kNone)                                            \
  X(Log, log, no_args(), std::log(x), composed, , kNone, kNone)                                           \
  X(Sqrt, sqrt, no_args(), std::sqrt(x), composed, , kNone, kNone)                                        \
  X(Reciprocal, reciprocal, no_args(), T(1) / x, composed, , kNone, kNone)                                \
  X(Clip, clip, clip_bounds(), x < a ? a : (x > b ? b : x), from_x, z >= a && z <= b ? dy : T(0), kNone,  \
    kNone)                                                                                                \
  X(LeakyRelu, leaky_relu, attrs("alpha", 0.01f), x >= T(0) ? x : a * x, from_x, z > T(0) ? dy : a * dy,  \
    kNone, kNone)                                                                                         \
  X(Elu, elu, attrs("alpha", 1.0f), x >= T(0) ? x : a * std::expm1(x), from_x,                            \
    z > T(0) ? dy : dy * a * std::exp(z), kNone, kNone)                                                   \
  X(Selu, selu, attrs("alpha", kSeluAlpha, "gamma", kSeluGamma), x > T(0) ? b * x : b * a * std::expm1(x), \
    from_x, z > T(0) ? b * dy : dy * b * a * std::exp(z), kNone, kNone)                                   \
  X(HardSigmoid, hard_sigmoid, attrs("alpha", 0.2f, "beta", 0.5f), std::max(T(0), std::min(T(1), a * x + b)), \
    from_x, hard_sigmoid_grad(dy, z, a, b), kNone, kNone)                                                 \
  X(HardSwish, hard_swish, no_args(), x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5))), from_x,          \
    hard_swish_grad(dy, z), kNone, kNone)                                                                 \
  X(Erf, erf, no_args(), std::erf(x), from_x, dy * T(kTwoOverSqrtPi) * std::exp(-z * z), kErf, kErfGrad)  \
  X(Softplus, softplus, no_args(), softplus(x), composed, , kNone, kNone)                                 \
  X(Abs, abs, no_args(), x < T(0) ? -x : x, from_x, z > T(0) ? dy : (z < T(0) ? -dy : T(0)), kNone,       \
    kNone)                                                                                                \
  X(Sin, sin, no_args(), std::sin(x), composed, , kNone, kNone)                                           \
  X(Cos, cos, no_args(), std::cos(x), from_x, -dy * std::sin(z), kNone, kNone)                            \
  X(Tan, tan, no_args(), std::tan(x), from_x, dy / (std::cos(z) * std::cos(z)), kNone, kNone)             \
  X(Sinh, sinh, no_args(), std::sinh(x), composed, , kNone, kNone)                                        \
  X(Cosh, cosh, no_args(), std::cosh(x), composed, , kNone, kNone)                                       \
  X(Atan, atan, no_args(), std::atan(x), from_x, dy / (T(1) + z * z), kNone, kNone)                       \
  X(Softsign, softsign, no_args(), x / (T(1) + std::abs(x)),                                              \
    from_x, dy / ((T(1) + std::abs(z)) * (T(1) + std::abs(z))), kNone, kNone)                             \
  X(Mish, mish, no_args(), x * std::tanh(softplus(x)), from_x, dy * mish_derivative(z), kNone, kNone)     \
  X(Gelu, gelu, gelu_mode(), gelu(x, a != T(0)), from_x, gelu_grad(dy, z, a != T(0)), kGelu, kGeluGrad)

namespace pt::unary {

// One functor per op: NameOp::kArgs, NameOp::forward<T>(x, a, b) and, for a dedicated backward
// op, NameOp::backward<T>(dy, z, a, b). Every generator goes through these.
#define PT_UNARY_BACKWARD_from_x(bwd) \
  template <typename T>               \
  PT_HD static T backward(T dy, T z, [[maybe_unused]] T a, [[maybe_unused]] T b) { return bwd; }
#define PT_UNARY_BACKWARD_from_y(bwd) PT_UNARY_BACKWARD_from_x(bwd)
#define PT_UNARY_BACKWARD_composed(bwd)
#define PT_UNARY_FUNCTOR(Name, fn, args, fwd, kind, bwd, fast, fast_grad)                          \
  struct Name##Op {                                                                              \
    static constexpr ArgSpec kArgs = args;                                                       \
    template <typename T>                                                                        \
    PT_HD static T forward(T x, [[maybe_unused]] T a, [[maybe_unused]] T b) { return fwd; }      \
    PT_UNARY_BACKWARD_##kind(bwd)                                                                \
  };
PT_UNARY_OPS(PT_UNARY_FUNCTOR)
#undef PT_UNARY_FUNCTOR
#undef PT_UNARY_BACKWARD_from_x
#undef PT_UNARY_BACKWARD_from_y
#undef PT_UNARY_BACKWARD_composed

}  // namespace pt::unary

// PT_UNARY_IF_GRAD(kind, text): text for the ops with a dedicated backward op, nothing otherwise.
#define PT_UNARY_IF_GRAD(kind, ...) PT_UNARY_IF_GRAD_##kind(__VA_ARGS__)
#define PT_UNARY_IF_GRAD_from_x(...) __VA_ARGS__
#define PT_UNARY_IF_GRAD_from_y(...) __VA_ARGS__
#define PT_UNARY_IF_GRAD_composed(...)
