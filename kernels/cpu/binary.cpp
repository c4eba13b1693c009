// Binary elementwise CPU kernels (Add, Sub, Mul, Div) with numpy broadcasting. Same-shape and
// scalar operands take flat loops; everything else goes through a coalesced strided loop whose
// inner dim is contiguous or broadcast, which covers the row-vector bias case at full speed.
#include <string>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

// y[i] = f(a[i*sa], b[i*sb]) for i < n, with the common strides of 0 and 1 specialised.
template <typename T, typename F>
inline void binary_row(const T* a, int64_t sa, const T* b, int64_t sb, T* y, int64_t n, F f) {
  if (sa == 1 && sb == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = *b;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = *a;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = f(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i * sa], b[i * sb]);
  }
}

template <typename T, typename F>
Status binary(const KernelCall& call, const char* op, F f) {
  Dims bd;
  RETURN_IF_ERROR(kernels::check_broadcast_binary(call, op, &bd));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  T* py = y.as<T>();
  const int64_t n = y.size();
  if (n == 0) return Status::ok();

  if (a.dims == b.dims) {
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) py[i] = f(pa[i], pb[i]);
  } else if (b.size() == 1 && a.size() == n) {
    const T bv = *pb;
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) py[i] = f(pa[i], bv);
  } else if (a.size() == 1 && b.size() == n) {
    const T av = *pa;
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) py[i] = f(av, pb[i]);
  } else {
    const StridedLoop<2> loop(bd, {broadcast_strides(a.dims, bd), broadcast_strides(b.dims, bd)});
    const int64_t inner = loop.inner();
    const int64_t sa = loop.inner_stride(0), sb = loop.inner_stride(1);
    loop.for_each_row(n > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 2>& o) {
      binary_row(pa + o[0], sa, pb + o[1], sb, py + row * inner, inner, f);
    });
  }
  return Status::ok();
}

}  // namespace

// Integer Add, Sub and Mul wrap on overflow as two's complement (NumPy's and ONNX Runtime's
// int64 results) instead of being undefined behaviour: shape arithmetic folded from a model's
// constants may overflow, and that must not be a sanitizer report or a miscompiled loop.
template <typename T, typename Op>
T wrapping(T x, T y, Op op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(op(static_cast<U>(x), static_cast<U>(y)));
  } else {
    return op(x, y);
  }
}

template <typename T>
Status add(const KernelCall& call) {
  return binary<T>(call, "Add", [](T x, T y) { return wrapping(x, y, [](auto a, auto b) { return a + b; }); });
}
template <typename T>
Status sub(const KernelCall& call) {
  return binary<T>(call, "Sub", [](T x, T y) { return wrapping(x, y, [](auto a, auto b) { return a - b; }); });
}
template <typename T>
Status mul(const KernelCall& call) {
  return binary<T>(call, "Mul", [](T x, T y) { return wrapping(x, y, [](auto a, auto b) { return a * b; }); });
}
template <typename T>
Status div_op(const KernelCall& call) {
  if constexpr (std::is_integral_v<T>) {
    // Integer division by zero is undefined behaviour in C++: report it instead of trapping.
    if (call.inputs.size() >= 2 && call.inputs[1].data) {
      const T* pb = call.inputs[1].as<T>();
      for (int64_t i = 0; i < call.inputs[1].size(); ++i)
        if (pb[i] == 0)
          return invalid_input("Div: integer division by zero (divisor element " +
                               std::to_string(i) + ")");
    }
  }
  return binary<T>(call, "Div", [](T x, T y) {
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      // The one quotient that overflows (min / -1 traps on x86): it wraps to min, as NumPy's.
      if (y == T(-1)) return wrapping(T(0), x, [](auto a, auto b) { return a - b; });
    }
    return x / y;
  });
}

#define PT_INSTANTIATE(name)                             \
  template Status name<float>(const KernelCall& call);    \
  template Status name<double>(const KernelCall& call);   \
  template Status name<int64_t>(const KernelCall& call)

PT_INSTANTIATE(add);
PT_INSTANTIATE(sub);
PT_INSTANTIATE(mul);
PT_INSTANTIATE(div_op);

#undef PT_INSTANTIATE

}  // namespace pt::cpu
