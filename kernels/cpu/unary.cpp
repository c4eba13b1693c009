// CPU kernels of the element-wise unary ops, generated from kernels/unary_ops.h: y = f(x) and
// dX = g(dY, Z) as one OpenMP simd loop over the list's expression, or the faster float path the
// list names (the vector maps of vmath.h, ReluGrad's bfloat16 mask).
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/vmath.h"
#include "kernels/unary_args.h"
#include "kernels/unary_ops.h"

namespace pt::cpu {
namespace {

// The fast paths a list line may name (float only).
enum class Fast { kNone, kExp, kErf, kErfGrad, kGelu, kGeluGrad, kTanh, kSigmoid, kReluGradBf16 };

VFn vector_map(Fast f) {
  switch (f) {
    case Fast::kExp: return VFn::kExp;
    case Fast::kErf: return VFn::kErf;
    case Fast::kErfGrad: return VFn::kErfGrad;
    case Fast::kGelu: return VFn::kGelu;
    case Fast::kGeluGrad: return VFn::kGeluGrad;
    case Fast::kTanh: return VFn::kTanh;
    default: return VFn::kSigmoid;
  }
}

// ReluGrad (dY float32, Y bfloat16): --precision bf16 hands ReluGrad the bfloat16 copy of Y that a
// following GEMM/convolution reads anyway (importer/precision.cpp), so float32 Y need not be kept for
// the backward. The mask is the same: rounding keeps the sign, and a positive float32 rounds to a
// positive bfloat16 (0x0001..0x7F80; NaNs are 0x7F81..0x7FFF) unless it is below 2^-134.
Status relu_grad_bf16_mask(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_unary(call, "ReluGrad", 2));
  const float* pdy = call.inputs[0].as<float>();                         // (n)
  const uint16_t* py = static_cast<const uint16_t*>(call.inputs[1].data);  // (n) bfloat16 Y
  float* pdx = call.outputs[0].as<float>();                              // (n)
  const int64_t n = call.inputs[0].size();
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) pdx[i] = static_cast<uint16_t>(py[i] - 1u) < 0x7F80u ? pdy[i] : 0.0f;
  return Status::ok();
}

// True when `f` applies to this call (then *st is its result). Gelu's vector maps are the exact
// form (a = 0); its tanh form takes the expression.
template <typename T>
bool fast_path(Fast f, const KernelCall& call, const char* op, const unary::Args<T>& p, Status* st) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    switch (f) {
      case Fast::kNone: return false;
      case Fast::kReluGradBf16:
        if (call.inputs.size() != 2 || call.inputs[1].dtype != DType::kBFloat16) return false;
        *st = relu_grad_bf16_mask(call);
        return true;
      case Fast::kGelu:
      case Fast::kGeluGrad:
        if (p.a != 0.0f) return false;
        break;
      default: break;
    }
    *st = map_vector(call, op, vector_map(f));
    return true;
  }
}

template <typename Op, typename T>
Status forward(const KernelCall& call, const char* op, Fast fast) {
  unary::Args<T> p;
  RETURN_IF_ERROR(kernels::read_unary_args<T>(Op::kArgs, call, op, 1, &p));
  if (p.lo) p.a = *p.lo;
  if (p.hi) p.b = *p.hi;
  Status st;
  if (fast_path<T>(fast, call, op, p, &st)) return st;
  const T a = p.a, b = p.b;
  return map_unary<T>(call, op, [=](T x) { return Op::template forward<T>(x, a, b); });
}

template <typename Op, typename T>
Status backward(const KernelCall& call, const char* op, Fast fast) {
  unary::Args<T> p;
  RETURN_IF_ERROR(kernels::read_unary_args<T>(Op::kArgs, call, op, 2, &p));
  if (p.lo) p.a = *p.lo;
  if (p.hi) p.b = *p.hi;
  Status st;
  if (fast_path<T>(fast, call, op, p, &st)) return st;
  const T a = p.a, b = p.b;
  return map_grad<T>(call, op, [=](T dy, T z) { return Op::template backward<T>(dy, z, a, b); });
}

}  // namespace

#define PT_CPU_UNARY(Name, fn, args, fwd, kind, bwd, fast, fast_grad)                           \
  template <typename T>                                                                       \
  Status fn##_op(const KernelCall& call) {                                                    \
    return forward<unary::Name##Op, T>(call, #Name, Fast::fast);                              \
  }                                                                                           \
  template Status fn##_op<float>(const KernelCall&);                                          \
  template Status fn##_op<double>(const KernelCall&);                                         \
  PT_UNARY_IF_GRAD(kind, template <typename T> Status fn##_grad(const KernelCall& call) {      \
    return backward<unary::Name##Op, T>(call, #Name "Grad", Fast::fast_grad);                 \
  } template Status fn##_grad<float>(const KernelCall&);                                      \
  template Status fn##_grad<double>(const KernelCall&);)
PT_UNARY_OPS(PT_CPU_UNARY)
#undef PT_CPU_UNARY

template Status abs_op<int64_t>(const KernelCall&);

}  // namespace pt::cpu
