// Activation and pointwise math CPU kernels beyond the basic set: Clip, LeakyRelu, Elu, Selu,
// HardSigmoid, HardSwish, Erf, Softplus, Reciprocal, Abs, and the broadcasting PRelu and Pow; their
// dedicated backward ops take dX = f(dY, X) (the input, not the output: these are not invertible
// at their kinks). Attributes are read as the shape functions left them (defaults filled in).
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/vmath.h"

namespace pt::cpu {
namespace {

template <typename T>
T softplus(T x) {  // log(1 + e^x) without overflow
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
template <typename T>
T sigmoid_of(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// Clip bounds: the optional inputs 1 and 2 (opset 11+), else the attributes (opset 6..10).
template <typename T>
void clip_bounds(const KernelCall& call, size_t first, T* lo, T* hi) {
  *lo = call.attrs.has("min") ? static_cast<T>(call.attrs.get_float("min", 0)) : std::numeric_limits<T>::lowest();
  *hi = call.attrs.has("max") ? static_cast<T>(call.attrs.get_float("max", 0)) : std::numeric_limits<T>::max();
  if (has_input(call, first)) *lo = *call.inputs[first].as<T>();
  if (has_input(call, first + 1)) *hi = *call.inputs[first + 1].as<T>();
}

// y = f(a, b) under numpy broadcasting; b is first converted to T when its dtype differs (Pow's
// exponent may be integral).
template <typename T, typename F>
Status broadcast_binary(const KernelCall& call, const char* op, F f) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  Dims bd;
  if (!broadcast_dims(a.dims, b.dims, &bd))
    return invalid_input(std::string(op) + ": shapes " + dims_str(a.dims) + " and " + dims_str(b.dims) +
                         " do not broadcast");
  RETURN_IF_ERROR(check_same_dims(op, "output", y.dims, bd));
  std::vector<T> conv;
  const T* pb = nullptr;
  if (b.dtype == dtype_of<T>()) {
    pb = b.as<T>();
  } else {
    conv.resize(static_cast<size_t>(b.size()));
    for (int64_t i = 0; i < b.size(); ++i) {
      switch (b.dtype) {
        case DType::kFloat32: conv[i] = static_cast<T>(static_cast<const float*>(b.data)[i]); break;
        case DType::kFloat64: conv[i] = static_cast<T>(static_cast<const double*>(b.data)[i]); break;
        case DType::kInt64: conv[i] = static_cast<T>(static_cast<const int64_t*>(b.data)[i]); break;
        case DType::kInt32: conv[i] = static_cast<T>(static_cast<const int32_t*>(b.data)[i]); break;
        case DType::kUint32: conv[i] = static_cast<T>(static_cast<const uint32_t*>(b.data)[i]); break;
        case DType::kUint64: conv[i] = static_cast<T>(static_cast<const uint64_t*>(b.data)[i]); break;
        default: return unsupported(std::string(op) + ": second input of type " + dtype_name(b.dtype));
      }
    }
    pb = conv.data();
  }
  const T* pa = a.as<T>();
  T* py = y.as<T>();
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  const StridedLoop<2> loop(bd, {broadcast_strides(a.dims, bd), broadcast_strides(b.dims, bd)});
  const int64_t inner = loop.inner(), sa = loop.inner_stride(0), sb = loop.inner_stride(1);
  loop.for_each_row(n > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 2>& o) {
    const T* ar = pa + o[0];
    const T* br = pb + o[1];
    T* yr = py + row * inner;
    for (int64_t j = 0; j < inner; ++j) yr[j] = f(ar[j * sa], br[j * sb]);
  });
  return Status::ok();
}

constexpr double kSeluAlpha = 1.67326319217681884765625;
constexpr double kSeluGamma = 1.05070102214813232421875;

}  // namespace

template <typename T>
Status clip(const KernelCall& call) {
  T lo, hi;
  clip_bounds<T>(call, 1, &lo, &hi);
  return map_unary<T>(call, "Clip", [lo, hi](T x) { return x < lo ? lo : (x > hi ? hi : x); });
}
template <typename T>
Status leaky_relu(const KernelCall& call) {
  const T a = static_cast<T>(call.attrs.get_float("alpha", 0.01f));
  return map_unary<T>(call, "LeakyRelu", [a](T x) { return x >= T(0) ? x : a * x; });
}
template <typename T>
Status elu(const KernelCall& call) {
  const T a = static_cast<T>(call.attrs.get_float("alpha", 1.0f));
  return map_unary<T>(call, "Elu", [a](T x) { return x >= T(0) ? x : a * std::expm1(x); });
}
template <typename T>
Status selu(const KernelCall& call) {
  const T a = call.attrs.has("alpha") ? static_cast<T>(call.attrs.get_float("alpha", 0)) : static_cast<T>(kSeluAlpha);
  const T g = call.attrs.has("gamma") ? static_cast<T>(call.attrs.get_float("gamma", 0)) : static_cast<T>(kSeluGamma);
  return map_unary<T>(call, "Selu", [a, g](T x) { return x > T(0) ? g * x : g * a * std::expm1(x); });
}
template <typename T>
Status hard_sigmoid(const KernelCall& call) {
  const T a = static_cast<T>(call.attrs.get_float("alpha", 0.2f));
  const T b = static_cast<T>(call.attrs.get_float("beta", 0.5f));
  return map_unary<T>(call, "HardSigmoid", [a, b](T x) { return std::max(T(0), std::min(T(1), a * x + b)); });
}
template <typename T>
Status hard_swish(const KernelCall& call) {
  return map_unary<T>(call, "HardSwish",
                  [](T x) { return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5))); });
}
template <typename T>
Status erf_op(const KernelCall& call) {
  if constexpr (std::is_same_v<T, float>) return map_vector(call, "Erf", VFn::kErf);
  return map_unary<T>(call, "Erf", [](T x) { return std::erf(x); });
}
template <typename T>
Status softplus_op(const KernelCall& call) {
  return map_unary<T>(call, "Softplus", [](T x) { return softplus(x); });
}
template <typename T>
Status reciprocal(const KernelCall& call) {
  return map_unary<T>(call, "Reciprocal", [](T x) { return T(1) / x; });
}
template <typename T>
Status abs_op(const KernelCall& call) {
  return map_unary<T>(call, "Abs", [](T x) { return x < T(0) ? -x : x; });
}
template <typename T>
Status prelu(const KernelCall& call) {
  return broadcast_binary<T>(call, "PRelu", [](T x, T s) { return x < T(0) ? s * x : x; });
}
template <typename T>
Status pow_op(const KernelCall& call) {
  if constexpr (std::is_integral_v<T>) {
    // Exponentiation by squaring (at most 64 squarings whatever the exponent: a fuzzed model's
    // folded Pow with e = 2^62 once hung the import), wrapping on overflow as two's complement,
    // as NumPy's integer power does. A negative exponent gives 1/x^|e| truncated toward zero:
    // 1 for x = 1, +-1 for x = -1, 0 otherwise (x = 0 too, rather than a division by zero).
    return broadcast_binary<T>(call, "Pow", [](T x, T e) {
      using U = std::make_unsigned_t<T>;
      if (e < T(0)) {
        if (x == T(1)) return T(1);
        if (x == T(-1)) return (e & T(1)) ? T(-1) : T(1);
        return T(0);
      }
      U r = 1, b = static_cast<U>(x);
      for (U k = static_cast<U>(e); k != 0; k >>= 1) {
        if (k & 1u) r *= b;
        b *= b;
      }
      return static_cast<T>(r);
    });
  } else {
    return broadcast_binary<T>(call, "Pow", [](T x, T e) {
      if (e == T(2)) return x * x;
      return std::pow(x, e);
    });
  }
}

template <typename T>
Status clip_grad(const KernelCall& call) {
  T lo, hi;
  clip_bounds<T>(call, 2, &lo, &hi);
  // Inside [min, max] (bounds included, as PyTorch's clamp) the gradient passes.
  return map_grad<T>(call, "ClipGrad", [lo, hi](T dy, T x) { return x >= lo && x <= hi ? dy : T(0); });
}
template <typename T>
Status leaky_relu_grad(const KernelCall& call) {
  const T a = static_cast<T>(call.attrs.get_float("alpha", 0.01f));
  return map_grad<T>(call, "LeakyReluGrad", [a](T dy, T x) { return x > T(0) ? dy : a * dy; });
}
template <typename T>
Status elu_grad(const KernelCall& call) {
  const T a = static_cast<T>(call.attrs.get_float("alpha", 1.0f));
  return map_grad<T>(call, "EluGrad", [a](T dy, T x) { return x > T(0) ? dy : dy * a * std::exp(x); });
}
template <typename T>
Status selu_grad(const KernelCall& call) {
  const T a = call.attrs.has("alpha") ? static_cast<T>(call.attrs.get_float("alpha", 0)) : static_cast<T>(kSeluAlpha);
  const T g = call.attrs.has("gamma") ? static_cast<T>(call.attrs.get_float("gamma", 0)) : static_cast<T>(kSeluGamma);
  return map_grad<T>(call, "SeluGrad",
                            [a, g](T dy, T x) { return x > T(0) ? g * dy : dy * g * a * std::exp(x); });
}
template <typename T>
Status hard_sigmoid_grad(const KernelCall& call) {
  const T a = static_cast<T>(call.attrs.get_float("alpha", 0.2f));
  const T b = static_cast<T>(call.attrs.get_float("beta", 0.5f));
  return map_grad<T>(call, "HardSigmoidGrad", [a, b](T dy, T x) {
    const T v = a * x + b;
    return v > T(0) && v < T(1) ? a * dy : T(0);
  });
}
template <typename T>
Status hard_swish_grad(const KernelCall& call) {
  return map_grad<T>(call, "HardSwishGrad", [](T dy, T x) {
    if (x < T(-3)) return T(0);
    if (x > T(3)) return dy;
    return dy * (x / T(3) + T(0.5));
  });
}
template <typename T>
Status erf_grad(const KernelCall& call) {
  const T k = static_cast<T>(1.12837916709551257389615890312154517);  // 2 / sqrt(pi)
  if constexpr (std::is_same_v<T, float>) return map_vector(call, "ErfGrad", VFn::kErfGrad);
  return map_grad<T>(call, "ErfGrad", [k](T dy, T x) { return dy * k * std::exp(-x * x); });
}
template <typename T>
Status softplus_grad(const KernelCall& call) {
  return map_grad<T>(call, "SoftplusGrad", [](T dy, T x) { return dy * sigmoid_of(x); });
}
template <typename T>
Status abs_grad(const KernelCall& call) {
  // Sign(0) = 0: the subgradient PyTorch uses.
  return map_grad<T>(call, "AbsGrad",
                            [](T dy, T x) { return x > T(0) ? dy : (x < T(0) ? -dy : T(0)); });
}

// (dY, X, slope) -> dX (X's dims), dSlope before reduction (dY's dims: the caller sums it down to
// the slope's shape, where broadcasting is undone in one place).
template <typename T>
Status prelu_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "PReluGrad", 3, 2));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const TensorView& s = call.inputs[2];
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "X", x.dims, dy.dims));
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "dX", call.outputs[0].dims, dy.dims));
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "dSlope", call.outputs[1].dims, dy.dims));
  const Dims& od = dy.dims;
  const T* pdy = dy.as<T>();                 // (od)
  const T* px = x.as<T>();                   // (od)
  const T* ps = s.as<T>();                   // (s.dims), broadcast to od
  T* pdx = call.outputs[0].as<T>();          // (od)
  T* pds = call.outputs[1].as<T>();          // (od)
  const int64_t n = dy.size();
  if (n == 0) return Status::ok();
  const StridedLoop<1> loop(od, {broadcast_strides(s.dims, od)});
  const int64_t inner = loop.inner(), ss = loop.inner_stride(0);
  loop.for_each_row(n > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 1>& o) {
    const int64_t base = row * inner;
    for (int64_t j = 0; j < inner; ++j) {
      const T xv = px[base + j], g = pdy[base + j];
      pdx[base + j] = xv < T(0) ? g * ps[o[0] + j * ss] : g;
      pds[base + j] = xv < T(0) ? g * xv : T(0);
    }
  });
  return Status::ok();
}

#define PT_INSTANTIATE(name)                          \
  template Status name<float>(const KernelCall& call); \
  template Status name<double>(const KernelCall& call)

PT_INSTANTIATE(clip);
PT_INSTANTIATE(leaky_relu);
PT_INSTANTIATE(elu);
PT_INSTANTIATE(selu);
PT_INSTANTIATE(hard_sigmoid);
PT_INSTANTIATE(hard_swish);
PT_INSTANTIATE(erf_op);
PT_INSTANTIATE(softplus_op);
PT_INSTANTIATE(reciprocal);
PT_INSTANTIATE(abs_op);
PT_INSTANTIATE(prelu);
PT_INSTANTIATE(pow_op);
PT_INSTANTIATE(clip_grad);
PT_INSTANTIATE(leaky_relu_grad);
PT_INSTANTIATE(elu_grad);
PT_INSTANTIATE(selu_grad);
PT_INSTANTIATE(hard_sigmoid_grad);
PT_INSTANTIATE(hard_swish_grad);
PT_INSTANTIATE(erf_grad);
PT_INSTANTIATE(softplus_grad);
PT_INSTANTIATE(abs_grad);
PT_INSTANTIATE(prelu_grad);
template Status abs_op<int64_t>(const KernelCall& call);
template Status pow_op<int64_t>(const KernelCall& call);

#undef PT_INSTANTIATE

}  // namespace pt::cpu
