// Matrix-product CPU kernels: ONNX Gemm (alpha*op(A)@op(B) + beta*C with C broadcast to [M, N])
// and MatMul (numpy matmul: 1-D promotion, broadcast batch dims). A MatMul whose B is a single
// matrix folds A's batch dims into rows and makes one GEMM call; float single products go through
// oneDNN's GEMM, batched MatMul products and double through OpenBLAS (see one_gemm).
#include <cblas.h>

#include <dnnl.h>

#include "kernels/checks/gemm.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {

void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

namespace {

// One whole-kernel product. float: oneDNN's GEMM, on the calling thread's OpenMP pool like the
// step's other kernels; OpenBLAS's own pool, woken between OpenMP regions, competes with them for
// the cores (2 cores, between OpenMP loops: [2048, 64] x [64, 192] took 0.5-3.9 ms through
// OpenBLAS, 0.46-0.50 ms through oneDNN). The batched MatMul's many small products stay with
// OpenBLAS, which runs them on the calling thread and is faster there (64^3: 0.6 vs 1.8 ms for 128).
void one_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  PT_CHECK(st == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(st);
}
void one_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
              const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void fill(T* p, int64_t n, T v) {
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

}  // namespace

template <typename T>
Status gemm(const KernelCall& call) {
  kernels::GemmGeometry g;
  RETURN_IF_ERROR(kernels::check_gemm(call, &g));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  const bool ta = g.ta, tb = g.tb;
  const int64_t m = g.m, n = g.n, k = g.k;
  const T alpha = static_cast<T>(call.attrs.get_float("alpha", 1.0f));
  const T beta = static_cast<T>(call.attrs.get_float("beta", 1.0f));
  RETURN_IF_ERROR(kernels::check_matrix_dims("Gemm", {m, n, k}));
  const T* pa = a.as<T>();  // (M, K) or (K, M)
  const T* pb = b.as<T>();  // (K, N) or (N, K)
  T* py = y.as<T>();        // (M, N)
  if (m == 0 || n == 0) return Status::ok();

  // Y starts as beta * C (broadcast) or 0; GEMM then accumulates into it.
  bool y_set = false;
  if (has_input(call, 2) && beta != T(0)) {
    const TensorView& c = call.inputs[2];
    RETURN_IF_ERROR(kernels::check_gemm_c(c, &g));
    const T* pc = c.as<T>();
    const int64_t rs = g.cm == 1 ? 0 : g.cn, cs = g.cn == 1 ? 0 : 1;
#pragma omp parallel for if (m * n > kParallelThreshold)
    for (int64_t i = 0; i < m; ++i) {
      const T* crow = pc + i * rs;
      T* yrow = py + i * n;
      if (cs == 1) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) yrow[j] = beta * crow[j];
      } else {
        const T v = beta * crow[0];
        for (int64_t j = 0; j < n; ++j) yrow[j] = v;
      }
    }
    y_set = true;
  }
  if (k == 0 || alpha == T(0)) {
    if (!y_set) fill(py, m * n, T(0));
    return Status::ok();
  }
  // BLAS never reads C when beta is 0, so an unset Y (NaN garbage included) is fine.
  one_gemm(ta, tb, m, n, k, alpha, pa, std::max<int64_t>(a.dims[1], 1), pb,
           std::max<int64_t>(b.dims[1], 1), y_set ? T(1) : T(0), py, n);
  return Status::ok();
}

template <typename T>
Status matmul(const KernelCall& call) {
  kernels::MatMulGeometry g;
  RETURN_IF_ERROR(kernels::check_matmul(call, &g));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  const int64_t m = g.m, n = g.n, k = g.k;
  const Dims &abatch = g.abatch, &bbatch = g.bbatch, &batch = g.batch;
  const T* pa = a.as<T>();  // (batchA..., M, K)
  const T* pb = b.as<T>();  // (batchB..., K, N)
  T* py = y.as<T>();        // (batch..., M, N)
  const int64_t nbatch = numel(batch);
  if (y.size() == 0) return Status::ok();
  if (k == 0) {
    fill(py, y.size(), T(0));
    return Status::ok();
  }
  if (numel(bbatch) == 1) {
    // One B matrix: A's batch dims (same count as the output's) become extra rows.
    RETURN_IF_ERROR(kernels::check_matrix_dims("MatMul", {nbatch * m, n, k}));
    one_gemm(false, false, nbatch * m, n, k, T(1), pa, k, pb, n, T(0), py, n);
    return Status::ok();
  }
  RETURN_IF_ERROR(kernels::check_matrix_dims("MatMul", {m, n, k}));
  const Dims sa = broadcast_strides(abatch, batch), sb = broadcast_strides(bbatch, batch);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    blas_gemm(false, false, m, n, k, T(1), pa + oa * m * k, k, pb + ob * k * n, n, T(0),
              py + bi * m * n, n);
  }
  return Status::ok();
}

template Status gemm<float>(const KernelCall& call);
template Status gemm<double>(const KernelCall& call);
template Status matmul<float>(const KernelCall& call);
template Status matmul<double>(const KernelCall& call);

}  // namespace pt::cpu
