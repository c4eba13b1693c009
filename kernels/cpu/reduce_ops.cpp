// ONNX reductions (ReduceSum, ReduceMean, ReduceMax over the normalised attribute `_axes`, which
// the shape function fills from the attribute or the axes input), ReduceMax's backward op, and the
// variadic broadcasting Sum and Mean. Float sums accumulate in double. Reductions over trailing
// dims (LayerNorm statistics, mean pooling) and over leading dims take row / column fast paths.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/checks/reduce.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

template <typename T>
using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, T>;

// y[k] = finish(fold(init, x[i] for every i that reduces to k), count).
template <typename T, typename Fold, typename Finish>
Status reduce(const KernelCall& call, const char* op, AccOf<T> init, Fold fold, Finish finish) {
  using Acc = AccOf<T>;
  Dims kd;
  RETURN_IF_ERROR(kernels::check_reduce(call, op, &kd));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const T* px = x.as<T>();  // (x.dims)
  T* py = y.as<T>();        // (kd)
  const int64_t n = x.size(), m = y.size();
  if (m == 0) return Status::ok();
  const int64_t count = m > 0 ? n / m : 0;
  if (n == 0) {
    for (int64_t k = 0; k < m; ++k) py[k] = finish(init, 0);
    return Status::ok();
  }
  const bool par = n > kParallelThreshold;
  const StridedLoop<1> loop(x.dims, {broadcast_strides(kd, x.dims)});
  const Dims& st = loop.strides[0];
  const int64_t inner = loop.inner();
  if (m == n) {
    for (int64_t k = 0; k < m; ++k) py[k] = finish(fold(init, px[k]), 1);
    return Status::ok();
  }
  if (m == 1 || (loop.rank() == 2 && st[0] == 1 && st[1] == 0)) {
    // Row reductions: x (m, n / m) -> y (m).
    const int64_t len = n / m;
#pragma omp parallel for if (par && m > 1)
    for (int64_t r = 0; r < m; ++r) {
      const T* xr = px + r * len;
      Acc a = init;
      for (int64_t j = 0; j < len; ++j) a = fold(a, xr[j]);
      py[r] = finish(a, count);
    }
    return Status::ok();
  }
  std::vector<Acc> acc(static_cast<size_t>(m), init);
  if (loop.rank() == 2 && st[0] == 0 && st[1] == 1) {
    // Column reductions: x (rows, m) -> y (m); threads own column blocks.
    const int64_t rows = loop.sizes[0];
#pragma omp parallel for if (par && m >= 128)
    for (int64_t j0 = 0; j0 < m; j0 += 64) {
      const int64_t j1 = std::min(j0 + 64, m);
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = px + r * m;
        for (int64_t j = j0; j < j1; ++j) acc[j] = fold(acc[j], xr[j]);
      }
    }
  } else {
    const int64_t si = loop.inner_stride(0);
    loop.for_each_row(false, [&](int64_t row, const std::array<int64_t, 1>& o) {
      const T* xr = px + row * inner;
      Acc* ar = acc.data() + o[0];
      for (int64_t j = 0; j < inner; ++j) ar[j * si] = fold(ar[j * si], xr[j]);
    });
  }
  for (int64_t k = 0; k < m; ++k) py[k] = finish(acc[k], count);
  return Status::ok();
}

// out = sum (or mean) of the inputs broadcast to out's dims.
template <typename T>
Status variadic(const KernelCall& call, const char* op, bool mean) {
  size_t inputs = 0;
  RETURN_IF_ERROR(kernels::check_variadic(call, op, &inputs));
  const TensorView& y = call.outputs[0];
  T* py = y.as<T>();  // (y.dims)
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  const bool par = n > kParallelThreshold;
  size_t count = 0;
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    const TensorView& x = call.inputs[k];
    if (!x.data) continue;
    const T* px = x.as<T>();
    const bool first = count++ == 0;
    if (x.size() == n) {
#pragma omp parallel for simd if (parallel: par)
      for (int64_t i = 0; i < n; ++i) py[i] = first ? px[i] : py[i] + px[i];
      continue;
    }
    const StridedLoop<1> loop(y.dims, {broadcast_strides(x.dims, y.dims)});
    const int64_t inner = loop.inner(), si = loop.inner_stride(0);
    loop.for_each_row(par, [&](int64_t row, const std::array<int64_t, 1>& o) {
      T* yr = py + row * inner;
      const T* xr = px + o[0];
      for (int64_t j = 0; j < inner; ++j) yr[j] = first ? xr[j * si] : yr[j] + xr[j * si];
    });
  }
  if (mean && count > 1) {
    const T s = T(1) / static_cast<T>(count);
#pragma omp parallel for simd if (parallel: par)
    for (int64_t i = 0; i < n; ++i) py[i] *= s;
  }
  return Status::ok();
}

}  // namespace

template <typename T>
Status reduce_sum(const KernelCall& call) {
  using Acc = AccOf<T>;
  return reduce<T>(call, "ReduceSum", Acc(0), [](Acc a, T v) { return a + v; },
                   [](Acc a, int64_t) { return static_cast<T>(a); });
}
template <typename T>
Status reduce_mean(const KernelCall& call) {
  using Acc = AccOf<T>;
  return reduce<T>(call, "ReduceMean", Acc(0), [](Acc a, T v) { return a + v; },
                   [](Acc a, int64_t c) { return static_cast<T>(c ? a / static_cast<Acc>(c) : a); });
}
template <typename T>
Status reduce_max(const KernelCall& call) {
  using Acc = AccOf<T>;
  const Acc lo = std::is_floating_point_v<T> ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::lowest();
  return reduce<T>(call, "ReduceMax", lo, [](Acc a, T v) { return v > a || v != v ? Acc(v) : a; },
                   [](Acc a, int64_t) { return static_cast<T>(a); });
}

template <typename T>
Status reduce_min(const KernelCall& call) {
  using Acc = AccOf<T>;
  const Acc hi = std::is_floating_point_v<T> ? std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::max();
  return reduce<T>(call, "ReduceMin", hi, [](Acc a, T v) { return v < a || v != v ? Acc(v) : a; },
                   [](Acc a, int64_t) { return static_cast<T>(a); });
}
template <typename T>
Status reduce_prod(const KernelCall& call) {
  using Acc = AccOf<T>;
  return reduce<T>(call, "ReduceProd", Acc(1), [](Acc a, T v) { return a * v; },
                   [](Acc a, int64_t) { return static_cast<T>(a); });
}
template <typename T>
Status reduce_l1(const KernelCall& call) {
  return reduce<T>(call, "ReduceL1", 0.0, [](double a, T v) { return a + std::abs(static_cast<double>(v)); },
                   [](double a, int64_t) { return static_cast<T>(a); });
}
template <typename T>
Status reduce_l2(const KernelCall& call) {
  return reduce<T>(call, "ReduceL2", 0.0, [](double a, T v) { return a + static_cast<double>(v) * v; },
                   [](double a, int64_t) { return static_cast<T>(std::sqrt(a)); });
}
template <typename T>
Status reduce_sum_square(const KernelCall& call) {
  return reduce<T>(call, "ReduceSumSquare", 0.0, [](double a, T v) { return a + static_cast<double>(v) * v; },
                   [](double a, int64_t) { return static_cast<T>(a); });
}
template <typename T>
Status reduce_log_sum(const KernelCall& call) {
  return reduce<T>(call, "ReduceLogSum", 0.0, [](double a, T v) { return a + v; },
                   [](double a, int64_t) { return static_cast<T>(std::log(a)); });
}
// A running log(sum(exp)): log(e^a + e^v) = max + log1p(e^-|a - v|), exact at -inf (empty sums).
template <typename T>
Status reduce_log_sum_exp(const KernelCall& call) {
  return reduce<T>(call, "ReduceLogSumExp", -std::numeric_limits<double>::infinity(),
                   [](double a, T v) {
                     const double b = v;
                     if (a == -std::numeric_limits<double>::infinity()) return b;
                     if (b == -std::numeric_limits<double>::infinity()) return a;
                     return std::max(a, b) + std::log1p(std::exp(-std::abs(a - b)));
                   },
                   [](double a, int64_t) { return static_cast<T>(a); });
}

// (dY, X, Y) -> dX. Each output's gradient goes to the first input element (in row-major order)
// equal to the maximum; tied elements after it get zero.
template <typename T>
Status reduce_max_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ReduceMaxGrad", 3, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const TensorView& y = call.inputs[2];
  const TensorView& dx = call.outputs[0];
  Dims kd;
  RETURN_IF_ERROR(kernels::reduce_keep_dims("ReduceMaxGrad", x, call.attrs.get_ints("_axes"), &kd));
  if (dy.size() != numel(kd) || y.size() != numel(kd))
    return invalid_input("ReduceMaxGrad: dY " + dims_str(dy.dims) + " / Y " + dims_str(y.dims) +
                         " do not match the reduction of " + dims_str(x.dims));
  RETURN_IF_ERROR(check_same_dims("ReduceMaxGrad", "dX", dx.dims, x.dims));
  const T* pdy = dy.as<T>();  // (kd)
  const T* px = x.as<T>();    // (x.dims)
  const T* py = y.as<T>();    // (kd)
  T* pdx = dx.as<T>();        // (x.dims)
  if (x.size() == 0) return Status::ok();
  std::vector<char> taken(static_cast<size_t>(numel(kd)), 0);
  const StridedLoop<1> loop(x.dims, {broadcast_strides(kd, x.dims)});
  const int64_t inner = loop.inner(), si = loop.inner_stride(0);
  loop.for_each_row(false, [&](int64_t row, const std::array<int64_t, 1>& o) {
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t i = row * inner + j, k = o[0] + j * si;
      const bool hit = !taken[k] && px[i] == py[k];
      if (hit) taken[k] = 1;
      pdx[i] = hit ? pdy[k] : T(0);
    }
  });
  return Status::ok();
}

template <typename T>
Status sum_op(const KernelCall& call) {
  return variadic<T>(call, "Sum", false);
}
template <typename T>
Status mean_op(const KernelCall& call) {
  return variadic<T>(call, "Mean", true);
}

#define PT_INSTANTIATE(name)                          \
  template Status name<float>(const KernelCall& call); \
  template Status name<double>(const KernelCall& call)

PT_INSTANTIATE(reduce_sum);
PT_INSTANTIATE(reduce_mean);
PT_INSTANTIATE(reduce_max);
PT_INSTANTIATE(reduce_max_grad);
PT_INSTANTIATE(sum_op);
PT_INSTANTIATE(mean_op);
PT_INSTANTIATE(reduce_min);
PT_INSTANTIATE(reduce_prod);
PT_INSTANTIATE(reduce_l1);
PT_INSTANTIATE(reduce_l2);
PT_INSTANTIATE(reduce_sum_square);
PT_INSTANTIATE(reduce_log_sum);
PT_INSTANTIATE(reduce_log_sum_exp);
template Status reduce_min<int64_t>(const KernelCall& call);
template Status reduce_sum<int64_t>(const KernelCall& call);
template Status reduce_max<int64_t>(const KernelCall& call);
template Status sum_op<int64_t>(const KernelCall& call);

#undef PT_INSTANTIATE

}  // namespace pt::cpu
