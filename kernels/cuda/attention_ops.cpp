// FusedAttention and FusedAttentionGrad on CUDA: cuBLAS strided-batched GEMMs over the heads for the
// products, kernels/cuda/attention.cu for the masked softmax and the score gradient. The [heads, T, S]
// scores live in call-scoped scratch from the caching allocator (not saved for the backward, which
// recomputes them from Q, Kt and InvSum, as kernels/cpu/attention.cpp does). Same checks and
// refusals as the CPU kernels (kernels/attention_geometry.h).
#include <climits>
#include <string>

#include "kernels/attention_geometry.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/libs.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

namespace {

using kernels::AttentionGeometry;

cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                            const float* a, int lda, long long sa, const float* b, int ldb, long long sb, const float* beta,
                            float* c, int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const double* alpha, const double* a, int lda, long long sa, const double* b, int ldb, long long sb,
                            const double* beta, double* c, int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count);
}

// Per head h < count: row-major C_h[M, N] = alpha * op(A_h) @ op(B_h) (beta 0); lda / ldb / ldc are
// row-major widths, sa / sb / sc the element strides between heads. Row-major through the transpose
// trick of kernels/cuda/gemm_ops.cpp: C^T = op(B)^T op(A)^T in column-major.
template <typename T>
Status batched_rm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                  int64_t sa, const T* b, int64_t ldb, int64_t sb, T* c, int64_t ldc, int64_t sc, int64_t count) {
  const T zero = T(0);
  PT_CUBLAS_CHECK(gemm_batched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                               static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb), sb, a,
                               static_cast<int>(lda), sa, &zero, c, static_cast<int>(ldc), sc, static_cast<int>(count)));
  return Status::ok();
}

Status check_sizes(const char* op, const AttentionGeometry& g) {
  for (int64_t v : {g.heads, g.t, g.s, g.dk, g.dv})
    if (v > INT_MAX)
      return unsupported(std::string(op) + " (cuda): dimension " + std::to_string(v) + " exceeds the BLAS int range");
  if (g.heads * g.t > INT_MAX)
    return unsupported(std::string(op) + " (cuda): " + std::to_string(g.heads * g.t) + " score rows exceed the grid");
  if (g.batch.size() > static_cast<size_t>(kMaxRank))
    return unsupported(std::string(op) + " (cuda): more than " + std::to_string(kMaxRank) + " batch dims");
  return Status::ok();
}

AttnMask mask_of(const AttentionGeometry& g, const KernelCall& call, size_t i) {
  AttnMask m;
  m.kind = static_cast<int>(g.mask_kind);
  if (!m.kind) return m;
  m.data = call.inputs[i].data;
  m.rank = static_cast<int>(g.batch.size());
  for (int d = 0; d < m.rank; ++d) {
    m.batch[d] = g.batch[d];
    m.batch_strides[d] = g.mask_batch_strides[d];
  }
  m.row_stride = g.mask_row_stride;
  m.col_stride = g.mask_col_stride;
  m.fill = g.fill;
  return m;
}

// Attention dropout (dropout_ratio, importer/fuse_attention.cpp) has no CUDA kernel: CUDA imports do
// not fuse it (ImportOptions::fuse), and a node that has it is refused here rather than run without it.
Status no_dropout(const KernelCall& call, const char* op) {
  if (call.attrs.get_float("dropout_ratio", 0.0f) != 0.0f)
    return unsupported(std::string(op) + ": attention dropout (dropout_ratio) has no CUDA kernel; import for the "
                       "CUDA device leaves such attention unfused");
  return Status::ok();
}

}  // namespace

template <typename T>
Status fused_attention(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "FusedAttention", 3, 1));
  RETURN_IF_ERROR(no_dropout(call, "FusedAttention"));
  AttentionGeometry g;
  RETURN_IF_ERROR(kernels::attention_geometry("FusedAttention", call, 0, &g));
  RETURN_IF_ERROR(check_sizes("FusedAttention", g));
  RETURN_IF_ERROR(kernels::check_attention_outputs(call, g));
  const bool has_inv = call.outputs.size() > 1 && call.outputs[1].data;
  if (call.outputs[0].size() == 0) return Status::ok();
  const cudaStream_t stream = stream_of(call);
  ScratchBuffer scores, inv_scratch;
  RETURN_IF_ERROR(scores.allocate(static_cast<size_t>(g.heads * g.t * g.s) * sizeof(T), stream));
  T* inv = has_inv ? call.outputs[1].as<T>() : nullptr;
  if (!inv) {
    RETURN_IF_ERROR(inv_scratch.allocate(static_cast<size_t>(g.heads * g.t) * sizeof(T), stream));
    inv = inv_scratch.as<T>();
  }
  T* p = scores.as<T>();  // (heads, T, S)
  cublasHandle_t h;
  RETURN_IF_ERROR(cublas_for(stream, call.tf32, &h));
  if (g.dk == 0)
    PT_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(g.heads * g.t * g.s) * sizeof(T), stream));
  else
    RETURN_IF_ERROR(batched_rm<T>(h, false, false, g.t, g.s, g.dk, static_cast<T>(g.scale), call.inputs[0].as<T>(), g.dk,
                                  g.t * g.dk, call.inputs[1].as<T>(), g.s, g.dk * g.s, p, g.s, g.t * g.s, g.heads));
  PT_CUDA_CHECK(launch_attention_softmax<T>(p, inv, mask_of(g, call, 3), g.heads, g.t, g.s, false, stream));
  if (g.s == 0) {
    PT_CUDA_CHECK(cudaMemsetAsync(call.outputs[0].data, 0, call.outputs[0].bytes(), stream));
    return Status::ok();
  }
  return batched_rm<T>(h, false, false, g.t, g.dv, g.s, T(1), p, g.s, g.t * g.s, call.inputs[2].as<T>(), g.dv, g.s * g.dv,
                       call.outputs[0].as<T>(), g.dv, g.t * g.dv, g.heads);
}

template <typename T>
Status fused_attention_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "FusedAttentionGrad", 6, 3));
  RETURN_IF_ERROR(no_dropout(call, "FusedAttentionGrad"));
  AttentionGeometry g;
  RETURN_IF_ERROR(kernels::attention_geometry("FusedAttentionGrad", call, 1, &g));
  RETURN_IF_ERROR(check_sizes("FusedAttentionGrad", g));
  RETURN_IF_ERROR(kernels::check_attention_grad_io(call, g));
  if (g.heads * g.t == 0 || g.s == 0) {  // nothing flows: the wanted gradients are zero
    for (size_t o = 0; o < 3; ++o)
      if (call.outputs[o].data) PT_CUDA_CHECK(cudaMemsetAsync(call.outputs[o].data, 0, call.outputs[o].bytes(), stream_of(call)));
    return Status::ok();
  }
  const cudaStream_t stream = stream_of(call);
  const size_t block = static_cast<size_t>(g.heads * g.t * g.s) * sizeof(T);
  ScratchBuffer pbuf, dsbuf;
  RETURN_IF_ERROR(pbuf.allocate(block, stream));
  RETURN_IF_ERROR(dsbuf.allocate(block, stream));
  T* p = pbuf.as<T>();    // (heads, T, S)
  T* ds = dsbuf.as<T>();  // (heads, T, S)
  const T* dy = call.inputs[0].as<T>();
  const T* q = call.inputs[1].as<T>();
  const T* kt = call.inputs[2].as<T>();
  const T* v = call.inputs[3].as<T>();
  const AttnMask m = mask_of(g, call, 4);
  cublasHandle_t h;
  RETURN_IF_ERROR(cublas_for(stream, call.tf32, &h));
  if (g.dk == 0)
    PT_CUDA_CHECK(cudaMemsetAsync(p, 0, block, stream));
  else
    RETURN_IF_ERROR(batched_rm<T>(h, false, false, g.t, g.s, g.dk, static_cast<T>(g.scale), q, g.dk, g.t * g.dk, kt, g.s,
                                  g.dk * g.s, p, g.s, g.t * g.s, g.heads));
  PT_CUDA_CHECK(launch_attention_softmax<T>(p, const_cast<T*>(call.inputs[5].as<T>()), m, g.heads, g.t, g.s, true, stream));
  if (call.outputs[2].data)  // dV = P^T @ dY
    RETURN_IF_ERROR(batched_rm<T>(h, true, false, g.s, g.dv, g.t, T(1), p, g.s, g.t * g.s, dy, g.dv, g.t * g.dv,
                                  call.outputs[2].as<T>(), g.dv, g.s * g.dv, g.heads));
  if (!call.outputs[0].data && !call.outputs[1].data) return Status::ok();
  if (g.dv == 0)
    PT_CUDA_CHECK(cudaMemsetAsync(ds, 0, block, stream));
  else  // dP = dY @ V^T
    RETURN_IF_ERROR(batched_rm<T>(h, false, true, g.t, g.s, g.dv, T(1), dy, g.dv, g.t * g.dv, v, g.dv, g.s * g.dv, ds, g.s,
                                  g.t * g.s, g.heads));
  PT_CUDA_CHECK(launch_attention_dscores<T>(ds, p, m, g.heads, g.t, g.s, g.scale, stream));
  if (call.outputs[0].data)  // dQ = dS @ Kt^T (the scale is in dS)
    RETURN_IF_ERROR(batched_rm<T>(h, false, true, g.t, g.dk, g.s, T(1), ds, g.s, g.t * g.s, kt, g.s, g.dk * g.s,
                                  call.outputs[0].as<T>(), g.dk, g.t * g.dk, g.heads));
  if (call.outputs[1].data)  // dKt = Q^T @ dS
    RETURN_IF_ERROR(batched_rm<T>(h, true, false, g.dk, g.s, g.t, T(1), q, g.dk, g.t * g.dk, ds, g.s, g.t * g.s,
                                  call.outputs[1].as<T>(), g.s, g.dk * g.s, g.heads));
  return Status::ok();
}

template Status fused_attention<float>(const KernelCall&);
template Status fused_attention<double>(const KernelCall&);
template Status fused_attention_grad<float>(const KernelCall&);
template Status fused_attention_grad<double>(const KernelCall&);

}  // namespace pt::cuda
