// Helpers shared by the CPU kernels (not a public header): the OpenMP threshold, elementwise maps,
// and strided loop nests for broadcasting / transposing / reducing. The argument checks and the
// outer x n x inner geometry of ops along one axis come from kernels/kernel_checks.h.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_checks.h"
#include "kernels/unary_args.h"
#include "kernels/registry.h"

// A function built once per ISA (AVX-512, AVX2, baseline), the copy picked at load time by an
// ifunc resolver. Not under ThreadSanitizer: clang instruments the resolvers, which the dynamic
// loader runs before TSan is initialised, so the process would crash before main.
#if defined(__SANITIZE_THREAD__)
#define PT_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PT_TSAN_BUILD 1
#endif
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(PT_TSAN_BUILD)
#define PT_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PT_CPU_CLONES
#endif

namespace pt::cpu {

// Below this many elements a loop runs on one thread: forking costs more than it saves.
constexpr int64_t kParallelThreshold = 32768;

// Thread t's share [b, e) of n items over nt threads: contiguous, fixed by (n, nt), so a kernel
// whose threads each sum their own share gives the same bits every run with the same threads.
inline void thread_share(int64_t n, int t, int nt, int64_t* b, int64_t* e) {
  const int64_t q = n / nt, rem = n % nt;
  *b = t * q + (t < rem ? t : rem);
  *e = *b + q + (t < rem ? 1 : 0);
}

// The argument checks and helpers shared with the CUDA wrappers (kernels/kernel_checks.h).
using kernels::AxisGeometry;
using kernels::axis_geometry;
using kernels::broadcast_strides;
using kernels::check_arity;
using kernels::check_same_dims;
using kernels::has_input;

// gemm.cpp: row-major C[M, N] = alpha * op(A) @ op(B) + beta * C through OpenBLAS on the calling
// thread (the batched MatMul's and FusedAttention's many small products).
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// y = f(x) elementwise over same-shape input 0 and output 0 (checked as on CUDA: kernels/unary_args.h).
template <typename T, typename F>
Status map_unary(const KernelCall& call, const char* op, F f) {
  RETURN_IF_ERROR(kernels::check_unary(call, op, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const T* px = x.as<T>();  // (n)
  T* py = y.as<T>();        // (n)
  const int64_t n = x.size();
  // f's copy per thread: its captured parameters stay in registers (the output cannot alias them).
#pragma omp parallel for simd if (parallel: n > kParallelThreshold) firstprivate(f)
  for (int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
  return Status::ok();
}

// dX = f(dY, Z) elementwise; inputs (dY, Z), output dX, all the same shape. Z is the forward
// output Y or input X, as the op's backward needs.
template <typename T, typename F>
Status map_grad(const KernelCall& call, const char* op, F f) {
  RETURN_IF_ERROR(kernels::check_unary(call, op, 2));
  const TensorView& dy = call.inputs[0];
  const TensorView& z = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  const T* pdy = dy.as<T>();  // (n)
  const T* pz = z.as<T>();    // (n)
  T* pdx = dx.as<T>();        // (n)
  const int64_t n = dy.size();
#pragma omp parallel for simd if (parallel: n > kParallelThreshold) firstprivate(f)
  for (int64_t i = 0; i < n; ++i) pdx[i] = f(pdy[i], pz[i]);
  return Status::ok();
}

// A loop nest over a row-major "driver" shape with K operands that each step through memory with
// their own element strides. Size-1 dims are dropped and adjacent dims merged where every operand
// allows it, so the innermost dim is as long as possible (and usually stride 0 or 1).
template <size_t K>
struct StridedLoop {
  Dims sizes;                       // outermost first, at least one entry
  std::array<Dims, K> strides;      // per operand, same length as sizes

  StridedLoop(const Dims& dims, const std::array<Dims, K>& operand_strides) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d] == 1) continue;
      bool merge = !sizes.empty();
      for (size_t k = 0; k < K && merge; ++k)
        merge = strides[k].back() == operand_strides[k][d] * dims[d];
      if (merge) {
        sizes.back() *= dims[d];
        for (size_t k = 0; k < K; ++k) strides[k].back() = operand_strides[k][d];
      } else {
        sizes.push_back(dims[d]);
        for (size_t k = 0; k < K; ++k) strides[k].push_back(operand_strides[k][d]);
      }
    }
    if (sizes.empty()) {
      sizes.push_back(1);
      for (size_t k = 0; k < K; ++k) strides[k].push_back(0);
    }
  }

  int rank() const { return static_cast<int>(sizes.size()); }
  int64_t inner() const { return sizes.back(); }
  int64_t rows() const {
    int64_t r = 1;
    for (size_t d = 0; d + 1 < sizes.size(); ++d) r *= sizes[d];
    return r;
  }
  int64_t inner_stride(size_t k) const { return strides[k].back(); }

  // Calls fn(row, offs) for every row (all dims but the innermost), where offs[k] is operand k's
  // element offset of the row's first element; rows are split over threads when `parallel`.
  template <typename Fn>
  void for_each_row(bool parallel, Fn&& fn) const {
    const int64_t nrows = rows();
    const int outer_rank = rank() - 1;
#pragma omp parallel if (parallel && nrows > 1)
    {
      const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
      const int64_t begin = nrows * tid / nth, end = nrows * (tid + 1) / nth;
      if (begin < end) {
        std::vector<int64_t> idx(std::max(outer_rank, 1), 0);
        std::array<int64_t, K> offs{};
        int64_t rem = begin;
        for (int d = outer_rank - 1; d >= 0; --d) {
          idx[d] = rem % sizes[d];
          rem /= sizes[d];
          for (size_t k = 0; k < K; ++k) offs[k] += idx[d] * strides[k][d];
        }
        for (int64_t r = begin; r < end; ++r) {
          fn(r, offs);
          for (int d = outer_rank - 1; d >= 0; --d) {
            for (size_t k = 0; k < K; ++k) offs[k] += strides[k][d];
            if (++idx[d] < sizes[d]) break;
            for (size_t k = 0; k < K; ++k) offs[k] -= strides[k][d] * sizes[d];
            idx[d] = 0;
          }
        }
      }
    }
  }
};

}  // namespace pt::cpu
