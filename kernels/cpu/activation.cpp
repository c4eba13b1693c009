// The broadcasting activation and math CPU kernels: PRelu (and PReluGrad) and Pow. The
// element-wise unary ones are generated from kernels/unary_ops.h (unary.cpp).
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

// y = f(a, b) under numpy broadcasting; b is first converted to T when its dtype differs (Pow's
// exponent may be integral).
template <typename T, typename F>
Status broadcast_binary(const KernelCall& call, const char* op, F f) {
  Dims bd;
  RETURN_IF_ERROR(kernels::check_broadcast_binary(call, op, &bd));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
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

}  // namespace

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

// (dY, X, slope) -> dX (X's dims), dSlope before reduction (dY's dims: the caller sums it down to
// the slope's shape, where broadcasting is undone in one place).
template <typename T>
Status prelu_grad(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_prelu_grad(call));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const TensorView& s = call.inputs[2];
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

PT_INSTANTIATE(prelu);
PT_INSTANTIATE(pow_op);
PT_INSTANTIATE(prelu_grad);
template Status pow_op<int64_t>(const KernelCall& call);

#undef PT_INSTANTIATE

}  // namespace pt::cpu
