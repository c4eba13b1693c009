// Gemm and MatMul on cuBLAS, row-major through the transpose trick: a row-major C[M, N] is a
// column-major C^T[N, M] = op(B)^T op(A)^T, so each call swaps the operands and passes (N, M, K).
// The checks and refusals of kernels/cpu/gemm.cpp, from kernels/checks/gemm.h (dims above the BLAS
// int range included).
// MatMul batches go through cublas<t>gemmStridedBatched when one operand's batch dims are full or
// absent (stride 0), one call per batch otherwise (general broadcasting of both, rare). Under
// --precision bf16 the operands are bfloat16 and Y float32: cublasGemmEx with float32 accumulation.
#include <type_traits>

#include "kernels/checks/bf16.h"
#include "kernels/checks/gemm.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/libs.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

namespace {

cublasStatus_t gemm_cm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta,
                       float* c, int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm_cm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const double* alpha, const double* a, int lda, const double* b, int ldb, const double* beta,
                       double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm_cm_batched(cublasHandle_t h, int m, int n, int k, const float* alpha, const float* a, int lda,
                               long long sa, const float* b, int ldb, long long sb, const float* beta, float* c,
                               int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                   sc, count);
}
cublasStatus_t gemm_cm_batched(cublasHandle_t h, int m, int n, int k, const double* alpha, const double* a, int lda,
                               long long sa, const double* b, int ldb, long long sb, const double* beta, double* c,
                               int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                   sc, count);
}

// --precision bf16: bfloat16 operands (their bits as uint16_t), float32 output, float32
// accumulation (CUBLAS_COMPUTE_32F: tensor cores, no further rounding of the operands).
cublasStatus_t gemm_cm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const float* alpha, const uint16_t* a, int lda, const uint16_t* b, int ldb, const float* beta,
                       float* c, int ldc) {
  return cublasGemmEx(h, ta, tb, m, n, k, alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, beta, c, CUDA_R_32F, ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
cublasStatus_t gemm_cm_batched(cublasHandle_t h, int m, int n, int k, const float* alpha, const uint16_t* a, int lda,
                               long long sa, const uint16_t* b, int ldb, long long sb, const float* beta, float* c,
                               int ldc, long long sc, int count) {
  return cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, alpha, a, CUDA_R_16BF, lda, sa, b,
                                    CUDA_R_16BF, ldb, sb, beta, c, CUDA_R_32F, ldc, sc, count, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT);
}

// Row-major C[M, N] = alpha * op(A) @ op(B) + beta * C; lda / ldb / ldc are row-major widths. In
// is the operands' element (T, or uint16_t for bfloat16), T the output's.
template <typename In, typename T>
Status gemm_rm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const In* a, int64_t lda,
               const In* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  PT_CUBLAS_CHECK(gemm_cm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                          static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb), a,
                          static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
  return Status::ok();
}

// The limit check_matrix_dims names, in the words of the CPU kernel of the same precision.
template <typename In>
constexpr const char* kRange = std::is_same_v<In, uint16_t> ? "int range" : "BLAS int range";

// Gemm with operands of element In (T, or uint16_t: bfloat16) and output T.
template <typename In, typename T>
Status gemm_of(const KernelCall& call) {
  kernels::GemmGeometry g;
  RETURN_IF_ERROR(kernels::check_gemm(call, &g));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  const int64_t m = g.m, n = g.n, k = g.k;
  const T alpha = static_cast<T>(call.attrs.get_float("alpha", 1.0f));
  const T beta = static_cast<T>(call.attrs.get_float("beta", 1.0f));
  RETURN_IF_ERROR(kernels::check_matrix_dims("Gemm", {m, n, k}, kRange<In>));
  if (m == 0 || n == 0) return Status::ok();
  const bool with_c = has_input(call, 2) && beta != T(0);
  Strided<1> cwalk;
  if (with_c) {
    const TensorView& c = call.inputs[2];
    if (std::is_same_v<In, uint16_t> && c.dtype != DType::kFloat32)
      return invalid_input(std::string("Gemm (bfloat16): C must be float32, got ") + dtype_name(c.dtype));
    RETURN_IF_ERROR(kernels::check_gemm_c(c, &g));
    const Dims yd{m, n};
    RETURN_IF_ERROR(make_strided<1>("Gemm", yd, {broadcast_strides(c.dims, yd)}, &cwalk));
  }
  const cudaStream_t stream = stream_of(call);
  T* py = y.as<T>();
  // Y starts as beta * C (broadcast), then GEMM accumulates into it with beta 1.
  if (with_c)
    PT_CUDA_CHECK(launch_gather_copy<T>(cwalk, py, call.inputs[2].as<T>(), m * n, static_cast<double>(beta), stream));
  if (k == 0 || alpha == T(0)) {
    if (!with_c) PT_CUDA_CHECK(cudaMemsetAsync(py, 0, y.bytes(), stream));
    return Status::ok();
  }
  cublasHandle_t h;
  RETURN_IF_ERROR(cublas_for(stream, call.tf32, &h));
  return gemm_rm<In, T>(h, g.ta, g.tb, m, n, k, alpha, static_cast<const In*>(a.data), std::max<int64_t>(a.dims[1], 1),
                        static_cast<const In*>(b.data), std::max<int64_t>(b.dims[1], 1), with_c ? T(1) : T(0), py, n);
}

// MatMul with operands of element In and output T.
template <typename In, typename T>
Status matmul_of(const KernelCall& call) {
  kernels::MatMulGeometry g;
  RETURN_IF_ERROR(kernels::check_matmul(call, &g));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  const int64_t m = g.m, n = g.n, k = g.k;
  const Dims &abatch = g.abatch, &bbatch = g.bbatch, &batch = g.batch;
  const int64_t nbatch = numel(batch);
  if (y.size() == 0) return Status::ok();
  const cudaStream_t stream = stream_of(call);
  const In* pa = static_cast<const In*>(a.data);
  const In* pb = static_cast<const In*>(b.data);
  T* py = y.as<T>();
  if (k == 0) {
    PT_CUDA_CHECK(cudaMemsetAsync(py, 0, y.bytes(), stream));
    return Status::ok();
  }
  cublasHandle_t h;
  if (numel(bbatch) == 1) {
    // One B matrix: A's batch dims (as many as the output's) become extra rows.
    RETURN_IF_ERROR(kernels::check_matrix_dims("MatMul", {nbatch * m, n, k}, kRange<In>));
    RETURN_IF_ERROR(cublas_for(stream, call.tf32, &h));
    return gemm_rm<In, T>(h, false, false, nbatch * m, n, k, T(1), pa, k, pb, n, T(0), py, n);
  }
  RETURN_IF_ERROR(kernels::check_matrix_dims("MatMul", {m, n, k, nbatch}, kRange<In>));
  RETURN_IF_ERROR(cublas_for(stream, call.tf32, &h));
  const T one = T(1), zero = T(0);
  const bool a_full = abatch == batch, a_single = numel(abatch) == 1;
  const bool b_full = bbatch == batch;
  if ((a_full || a_single) && b_full) {
    // Column-major view: C^T (n x m) = B^T (n x k) A^T (k x m), per batch.
    PT_CUBLAS_CHECK(gemm_cm_batched(h, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, pb,
                                    static_cast<int>(n), static_cast<long long>(k * n), pa, static_cast<int>(k),
                                    a_single ? 0LL : static_cast<long long>(m * k), &zero, py, static_cast<int>(n),
                                    static_cast<long long>(m * n), static_cast<int>(nbatch)));
    return Status::ok();
  }
  const Dims sa = broadcast_strides(abatch, batch), sb = broadcast_strides(bbatch, batch);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    const Status st = gemm_rm<In, T>(h, false, false, m, n, k, one, pa + oa * m * k, k, pb + ob * k * n, n, zero,
                                     py + bi * m * n, n);
    RETURN_IF_ERROR(st);
  }
  return Status::ok();
}

}  // namespace

template <typename T>
Status gemm(const KernelCall& call) {
  return gemm_of<T, T>(call);
}
template <typename T>
Status matmul(const KernelCall& call) {
  return matmul_of<T, T>(call);
}

// --precision bf16 (importer/precision.h): bfloat16 A and B, float32 Y, as kernels/cpu/gemm_bf16.cpp.
Status gemm_bf16(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Gemm", 2, 1));
  RETURN_IF_ERROR(kernels::check_bf16_operands("Gemm", call.inputs[0], call.inputs[1], call.outputs[0]));
  return gemm_of<uint16_t, float>(call);
}
Status matmul_bf16(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "MatMul", 2, 1));
  RETURN_IF_ERROR(kernels::check_bf16_operands("MatMul", call.inputs[0], call.inputs[1], call.outputs[0]));
  return matmul_of<uint16_t, float>(call);
}

template Status gemm<float>(const KernelCall&);
template Status gemm<double>(const KernelCall&);
template Status matmul<float>(const KernelCall&);
template Status matmul<double>(const KernelCall&);

}  // namespace pt::cuda
