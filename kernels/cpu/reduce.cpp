// ReduceSumToShape: the one place where broadcasting is undone in backward. Sums X over the dims
// along which Y (the shape of a broadcast operand) was broadcast. Sums accumulate in double.
// Fast paths: equal element count (copy), scalar, column sums ([N, C] -> [C]), row sums.
#include <cstring>
#include <string>

#include "kernels/checks/reduce.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {

template <typename T>
Status reduce_sum_to_shape(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_reduce_sum_to_shape(call));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const T* px = x.as<T>();  // (x.dims)
  T* py = y.as<T>();        // (y.dims)
  const int64_t n = x.size(), m = y.size();
  const bool par = n > kParallelThreshold;
  if (m == n) {
    if (n > 0 && px != py) std::memcpy(py, px, static_cast<size_t>(n) * sizeof(T));
    return Status::ok();
  }
  if (m == 1) {
    double s = 0;
#pragma omp parallel for simd reduction(+ : s) if (parallel: par)
    for (int64_t i = 0; i < n; ++i) s += px[i];
    py[0] = static_cast<T>(s);
    return Status::ok();
  }
  if (m == 0) return Status::ok();
  if (n == 0) {
    for (int64_t i = 0; i < m; ++i) py[i] = T(0);
    return Status::ok();
  }

  const StridedLoop<1> loop(x.dims, {broadcast_strides(y.dims, x.dims)});
  const Dims& st = loop.strides[0];
  const int64_t inner = loop.inner();
  if (loop.rank() == 2 && st[0] == 0 && st[1] == 1) {
    // Column sums: x (rows, inner) -> y (inner); threads own column blocks.
    const int64_t rows = loop.sizes[0];
    const int64_t nblk = (inner + 63) / 64;
#pragma omp parallel for if (par && nblk > 1)
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t j0 = b * 64, w = std::min<int64_t>(64, inner - j0);
      double acc[64] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = px + r * inner + j0;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) acc[j] += xr[j];
      }
      for (int64_t j = 0; j < w; ++j) py[j0 + j] = static_cast<T>(acc[j]);
    }
    return Status::ok();
  }
  if (loop.rank() == 2 && st[0] == 1 && st[1] == 0) {
    // Row sums: x (rows, inner) -> y (rows).
    const int64_t rows = loop.sizes[0];
#pragma omp parallel for if (par && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * inner;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < inner; ++j) s += xr[j];
      py[r] = static_cast<T>(s);
    }
    return Status::ok();
  }
  // General: walk X row by row, adding into a double accumulator shaped like Y.
  std::vector<double> acc(static_cast<size_t>(m), 0.0);
  const int64_t si = loop.inner_stride(0);
  loop.for_each_row(false, [&](int64_t row, const std::array<int64_t, 1>& o) {
    const T* xr = px + row * inner;
    double* ar = acc.data() + o[0];
    if (si == 0) {
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < inner; ++j) s += xr[j];
      ar[0] += s;
    } else {
#pragma omp simd
      for (int64_t j = 0; j < inner; ++j) ar[j] += xr[j];
    }
  });
  for (int64_t i = 0; i < m; ++i) py[i] = static_cast<T>(acc[i]);
  return Status::ok();
}

template Status reduce_sum_to_shape<float>(const KernelCall& call);
template Status reduce_sum_to_shape<double>(const KernelCall& call);

}  // namespace pt::cpu
