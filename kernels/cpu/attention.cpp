// FusedAttention on the CPU: softmax(scale * Q @ Kt (+ mask)) @ V per head, the scores held in one
// [T, S] scratch block at a time, each row's softmax normaliser 1 / sum_j exp(s_ij - max_i) kept as
// the op's second output (InvSum). FusedAttentionGrad recomputes each head's probabilities from Q,
// Kt and InvSum (FlashAttention's backward, per head), so the training step saves one number per
// row instead of the [T, S] probabilities the spelled-out Softmax and MatMul backward keep (nor Y:
// rowsum(dY * Y) is rowsum(P * dP), from the recomputed P and the dP it needs anyway). The row
// max is recomputed too, so the recomputed probabilities are bit-identical to the forward's (a saved
// log-sum-exp max + log(sum) would lose them to rounding: at |max| = 1e9, a masked_fill row, all of
// log(sum)). Heads are split over the OpenMP threads, each with its own [T, S] scratch; the GEMMs go
// through OpenBLAS on the calling thread, as the batched MatMul runs its small products
// (kernels/cpu/gemm.cpp; the pthread build of OpenBLAS 0.3.21 may be called from several threads).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention_geometry.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/cpu/vmath.h"
#include "kernels/dropout_rng.h"

namespace pt::cpu {
namespace {

using kernels::AttentionGeometry;
using kernels::kMaskAdd;
using kernels::kMaskFill;

// Row i of head h's scores (s[S] = scale * q_i . Kt[:, j], already in `row`): the mask applied.
template <typename T>
void apply_mask(const AttentionGeometry& g, const void* mask, int64_t moff, int64_t i, T* row) {
  if (g.mask_kind == kMaskAdd) {
    const T* m = static_cast<const T*>(mask) + moff + i * g.mask_row_stride;
    for (int64_t j = 0; j < g.s; ++j) row[j] += m[j * g.mask_col_stride];
  } else if (g.mask_kind == kMaskFill) {
    const bool* m = static_cast<const bool*>(mask) + moff + i * g.mask_row_stride;
    const T fill = static_cast<T>(g.fill);
    for (int64_t j = 0; j < g.s; ++j)
      if (m[j * g.mask_col_stride]) row[j] = fill;
  }
}

// C = alpha * op(A) @ op(B), C overwritten: one head's product.
template <typename T>
void head_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
               int64_t ldb, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (small_sgemm_fits(m, n, k)) {
      small_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc);
      return;
    }
  }
  blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, T(0), c, ldc);
}

// Whether score (i, j) of the head at mask offset moff was replaced by the fill (carries no gradient).
inline bool filled(const AttentionGeometry& g, const void* mask, int64_t moff, int64_t i, int64_t j) {
  return g.mask_kind == kMaskFill && static_cast<const bool*>(mask)[moff + i * g.mask_row_stride + j * g.mask_col_stride];
}

// Attention dropout (importer/fuse_attention.cpp fused a training-mode Dropout on the probabilities):
// element (h, i, j) of P is kept when dropout_keep(key, (h * T + i) * S + j) holds and then scaled by
// 1 / (1 - ratio), which is the unfused Dropout's draw for that element of [B..., T, S] (its ratio,
// seed and step), so the fused graph drops what the unfused one drops. Inactive for ratio 0, no step
// input, or step < 0 (an evaluation pass).
template <typename T>
struct AttnDropout {
  bool active = false;
  uint64_t key = 0;
  float ratio = 0;
  T scale = T(1);
  bool keep(const AttentionGeometry& g, int64_t h, int64_t i, int64_t j) const {
    return dropout_keep(key, static_cast<uint64_t>((h * g.t + i) * g.s + j), ratio);
  }
  // row[j] of head h, row i: kept and scaled, or 0 (in place).
  void apply(const AttentionGeometry& g, int64_t h, int64_t i, T* row) const {
    for (int64_t j = 0; j < g.s; ++j) row[j] = keep(g, h, i, j) ? row[j] * scale : T(0);
  }
};

template <typename T>
Expected<AttnDropout<T>> attention_dropout(const KernelCall& call, size_t step_at, const char* op) {
  AttnDropout<T> d;
  d.ratio = call.attrs.get_float("dropout_ratio", 0.0f);
  if (d.ratio == 0.0f) return d;
  if (!(d.ratio > 0.0f && d.ratio < 1.0f))
    return invalid_input(std::string(op) + ": dropout_ratio " + std::to_string(d.ratio) + " must be in [0, 1)");
  if (!has_input(call, step_at)) return d;
  const TensorView& st = call.inputs[step_at];
  if (st.dtype != DType::kInt64 || st.size() != 1)
    return invalid_input(std::string(op) + ": the step input must be an int64 scalar");
  const int64_t step = st.as<int64_t>()[0];
  if (step < 0) return d;
  d.active = true;
  d.key = dropout_key(static_cast<uint64_t>(call.attrs.get_int("dropout_seed", 0)), static_cast<uint64_t>(step));
  d.scale = static_cast<T>(1.0 / (1.0 - static_cast<double>(d.ratio)));
  return d;
}

}  // namespace

// (Q, Kt, V[, mask[, step]]) -> Y, InvSum.
template <typename T>
Status fused_attention(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "FusedAttention", 3, 1));
  AttentionGeometry g;
  RETURN_IF_ERROR(kernels::attention_geometry("FusedAttention", call, 0, &g));
  RETURN_IF_ERROR(kernels::check_attention_outputs(call, g));
  const bool has_inv = call.outputs.size() > 1 && call.outputs[1].data;
  const T* pq = call.inputs[0].as<T>();                                 // (H, T, Dk)
  const T* pk = call.inputs[1].as<T>();                                 // (H, Dk, S)
  const T* pv = call.inputs[2].as<T>();                                 // (H, S, Dv)
  const void* pm = has_input(call, 3) ? call.inputs[3].data : nullptr;  // broadcast to (H, T, S)
  T* py = call.outputs[0].as<T>();                                      // (H, T, Dv)
  T* pl = has_inv ? call.outputs[1].as<T>() : nullptr;                  // (H, T)
  ASSIGN_OR_RETURN(const AttnDropout<T> drop, attention_dropout<T>(call, 4, "FusedAttention"));
  if (call.outputs[0].size() == 0) return Status::ok();
  const bool par = g.heads > 1 && g.heads * g.t * (g.s * (g.dk + g.dv) + g.s) > kParallelThreshold;
#pragma omp parallel if (par)
  {
    std::vector<T> sc(static_cast<size_t>(g.t * g.s));  // one head's scores (T, S)
#pragma omp for schedule(static)
    for (int64_t h = 0; h < g.heads; ++h) {
      const int64_t moff = pm ? g.mask_offset(h) : 0;
      if (g.dk > 0)
        head_gemm(false, false, g.t, g.s, g.dk, static_cast<T>(g.scale), pq + h * g.t * g.dk, g.dk, pk + h * g.dk * g.s, g.s,
                  sc.data(), g.s);
      else
        std::fill(sc.begin(), sc.end(), T(0));
      for (int64_t i = 0; i < g.t; ++i) {
        T* row = sc.data() + i * g.s;
        apply_mask(g, pm, moff, i, row);
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < g.s; ++j) mx = std::max(mx, row[j]);
        T sum = 0;
        if constexpr (std::is_same_v<T, float>) {
          sum = exp_shifted_sum(row, mx, row, g.s);
        } else {
          for (int64_t j = 0; j < g.s; ++j) {
            const T e = std::exp(row[j] - mx);
            row[j] = e;
            sum += e;
          }
        }
        const T inv = T(1) / sum;
#pragma omp simd
        for (int64_t j = 0; j < g.s; ++j) row[j] *= inv;
        if (pl) pl[h * g.t + i] = inv;
        if (drop.active) drop.apply(g, h, i, row);
      }
      head_gemm(false, false, g.t, g.dv, g.s, T(1), sc.data(), g.s, pv + h * g.s * g.dv, g.dv, py + h * g.t * g.dv, g.dv);
    }
  }
  return Status::ok();
}

// (dY, Q, Kt, V, mask or absent, InvSum[, step]) -> dQ, dKt, dV (each optional). With dropout, Y was
// D @ V for the dropped D = P * keep / (1 - ratio): dV = D^T dY, dP = dD * keep / (1 - ratio) for
// dD = dY V^T (the unfused DropoutGrad), then the softmax backward as without.
template <typename T>
Status fused_attention_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "FusedAttentionGrad", 6, 3));
  AttentionGeometry g;
  RETURN_IF_ERROR(kernels::attention_geometry("FusedAttentionGrad", call, 1, &g));
  RETURN_IF_ERROR(kernels::check_attention_grad_io(call, g));
  const T* pdy = call.inputs[0].as<T>();                                // (H, T, Dv)
  const T* pq = call.inputs[1].as<T>();                                 // (H, T, Dk)
  const T* pk = call.inputs[2].as<T>();                                 // (H, Dk, S)
  const T* pv = call.inputs[3].as<T>();                                 // (H, S, Dv)
  const void* pm = has_input(call, 4) ? call.inputs[4].data : nullptr;  // broadcast to (H, T, S)
  const T* pl = call.inputs[5].as<T>();                                 // (H, T)
  T* pdq = call.outputs[0].data ? call.outputs[0].as<T>() : nullptr;    // (H, T, Dk)
  T* pdk = call.outputs[1].data ? call.outputs[1].as<T>() : nullptr;    // (H, Dk, S)
  T* pdv = call.outputs[2].data ? call.outputs[2].as<T>() : nullptr;    // (H, S, Dv)
  ASSIGN_OR_RETURN(const AttnDropout<T> drop, attention_dropout<T>(call, 6, "FusedAttentionGrad"));
  if (g.heads == 0) return Status::ok();
  const size_t block = static_cast<size_t>(g.t * g.s);
  const T scale = static_cast<T>(g.scale);
  const bool par = g.heads > 1 && g.heads * g.t * (g.s * (2 * g.dk + 2 * g.dv) + g.s) > kParallelThreshold;
#pragma omp parallel if (par)
  {
    std::vector<T> p(block), ds(block);  // one head's probabilities and score gradients (T, S)
    std::vector<T> dropped(drop.active ? block : 0);  // with dropout: D, what Y was made from
#pragma omp for schedule(static)
    for (int64_t h = 0; h < g.heads; ++h) {
      const T* qh = pq + h * g.t * g.dk;
      const T* kh = pk + h * g.dk * g.s;
      const T* vh = pv + h * g.s * g.dv;
      const T* dyh = pdy + h * g.t * g.dv;
      const int64_t moff = pm ? g.mask_offset(h) : 0;
      if (g.dk > 0)
        head_gemm(false, false, g.t, g.s, g.dk, scale, qh, g.dk, kh, g.s, p.data(), g.s);
      else
        std::fill(p.begin(), p.end(), T(0));
      for (int64_t i = 0; i < g.t; ++i) {
        T* row = p.data() + i * g.s;
        apply_mask(g, pm, moff, i, row);
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < g.s; ++j) mx = std::max(mx, row[j]);
        const T inv = pl[h * g.t + i];
        if constexpr (std::is_same_v<T, float>)
          exp_shifted_scaled(row, mx, inv, row, g.s);  // the forward's exp values, so P is bit-identical
        else
          for (int64_t j = 0; j < g.s; ++j) row[j] = std::exp(row[j] - mx) * inv;
      }
      if (pdv && drop.active) {
        std::copy(p.begin(), p.end(), dropped.begin());
        for (int64_t i = 0; i < g.t; ++i) drop.apply(g, h, i, dropped.data() + i * g.s);
      }
      if (pdv)
        head_gemm(true, false, g.s, g.dv, g.t, T(1), drop.active ? dropped.data() : p.data(), g.s, dyh, g.dv,
                  pdv + h * g.s * g.dv, g.dv);
      if (!pdq && !pdk) continue;
      // dP = dY @ V^T; dS = P * (dP - rowsum(P * dP)), zero where the mask replaced the score.
      if (g.dv > 0)
        head_gemm(false, true, g.t, g.s, g.dv, T(1), dyh, g.dv, vh, g.dv, ds.data(), g.s);
      else
        std::fill(ds.begin(), ds.end(), T(0));
      if (drop.active)  // dD -> dP
        for (int64_t i = 0; i < g.t; ++i) drop.apply(g, h, i, ds.data() + i * g.s);
      for (int64_t i = 0; i < g.t; ++i) {
        const T* pr = p.data() + i * g.s;
        T* dr = ds.data() + i * g.s;
        T d = 0;
        for (int64_t j = 0; j < g.s; ++j) d += pr[j] * dr[j];
        for (int64_t j = 0; j < g.s; ++j) dr[j] = filled(g, pm, moff, i, j) ? T(0) : pr[j] * (dr[j] - d);
      }
      if (pdq) {
        if (g.s > 0)
          head_gemm(false, true, g.t, g.dk, g.s, scale, ds.data(), g.s, kh, g.s, pdq + h * g.t * g.dk, g.dk);
        else
          std::fill(pdq + h * g.t * g.dk, pdq + (h + 1) * g.t * g.dk, T(0));
      }
      if (pdk) {
        if (g.t > 0)
          head_gemm(true, false, g.dk, g.s, g.t, scale, qh, g.dk, ds.data(), g.s, pdk + h * g.dk * g.s, g.s);
        else
          std::fill(pdk + h * g.dk * g.s, pdk + (h + 1) * g.dk * g.s, T(0));
      }
    }
  }
  return Status::ok();
}

template Status fused_attention<float>(const KernelCall& call);
template Status fused_attention<double>(const KernelCall& call);
template Status fused_attention_grad<float>(const KernelCall& call);
template Status fused_attention_grad<double>(const KernelCall& call);

}  // namespace pt::cpu
