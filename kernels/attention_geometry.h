// The argument checks and geometry of FusedAttention / FusedAttentionGrad (importer/fuse_attention.cpp),
// shared by the CPU kernel and the CUDA wrapper: Q [B..., T, Dk], Kt [B..., Dk, S] (K already
// transposed, as the exporters' MatMul reads it), V [B..., S, Dv], an optional mask broadcast to the
// scores [B..., T, S] (mask_kind 1: added; 2: bool, the score replaced by mask_fill where true).
#pragma once

#include <string>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

enum AttentionMask : int64_t { kMaskNone = 0, kMaskAdd = 1, kMaskFill = 2 };

struct AttentionGeometry {
  Dims batch;         // B...
  int64_t heads = 1;  // prod(B...)
  int64_t t = 0, s = 0, dk = 0, dv = 0;
  int64_t mask_kind = kMaskNone;
  Dims mask_batch_strides;      // per batch dim (0 where the mask broadcasts)
  int64_t mask_row_stride = 0;  // along T
  int64_t mask_col_stride = 0;  // along S
  float scale = 1.0f;
  float fill = 0.0f;

  // Element offset of head h's mask block.
  int64_t mask_offset(int64_t h) const {
    int64_t off = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      off += (h % batch[d]) * mask_batch_strides[d];
      h /= batch[d];
    }
    return off;
  }
};

// Checks Q, Kt, V (inputs q, q+1, q+2) and the mask (input q+3, when present) and fills `g`.
inline Status attention_geometry(const char* op, const KernelCall& call, size_t q, AttentionGeometry* g) {
  const TensorView& Q = call.inputs[q];
  const TensorView& K = call.inputs[q + 1];
  const TensorView& V = call.inputs[q + 2];
  const std::string o(op);
  if (Q.rank() < 2 || K.rank() != Q.rank() || V.rank() != Q.rank())
    return invalid_input(o + ": Q " + dims_str(Q.dims) + ", Kt " + dims_str(K.dims) + " and V " + dims_str(V.dims) +
                         " must have one rank of at least 2");
  const size_t r = Q.dims.size();
  *g = AttentionGeometry{};
  g->batch.assign(Q.dims.begin(), Q.dims.end() - 2);
  if (Dims(K.dims.begin(), K.dims.end() - 2) != g->batch || Dims(V.dims.begin(), V.dims.end() - 2) != g->batch)
    return invalid_input(o + ": batch dims of Q " + dims_str(Q.dims) + ", Kt " + dims_str(K.dims) + " and V " + dims_str(V.dims) +
                         " differ");
  g->heads = numel(g->batch);
  g->t = Q.dims[r - 2];
  g->dk = Q.dims[r - 1];
  g->s = K.dims[r - 1];
  g->dv = V.dims[r - 1];
  if (K.dims[r - 2] != g->dk || V.dims[r - 2] != g->s)
    return invalid_input(o + ": Q " + dims_str(Q.dims) + ", Kt " + dims_str(K.dims) + " and V " + dims_str(V.dims) +
                         " do not chain (Q @ Kt @ V)");
  g->scale = call.attrs.get_float("scale", 1.0f);
  g->fill = call.attrs.get_float("mask_fill", 0.0f);
  g->mask_kind = call.attrs.get_int("mask_kind", kMaskNone);
  const bool has_mask = call.inputs.size() > q + 3 && call.inputs[q + 3].data != nullptr;
  if (has_mask != (g->mask_kind != kMaskNone) || g->mask_kind < kMaskNone || g->mask_kind > kMaskFill)
    return invalid_input(o + ": mask_kind " + std::to_string(g->mask_kind) + (has_mask ? " with" : " without") + " a mask input");
  if (has_mask) {
    const TensorView& M = call.inputs[q + 3];
    Dims scores = g->batch;
    scores.push_back(g->t);
    scores.push_back(g->s);
    Dims b;
    if (M.dims.size() > scores.size() || !broadcast_dims(M.dims, scores, &b) || b != scores)
      return invalid_input(o + ": mask " + dims_str(M.dims) + " does not broadcast to the scores " + dims_str(scores));
    if ((g->mask_kind == kMaskFill) != (M.dtype == DType::kBool) || (g->mask_kind == kMaskAdd && M.dtype != Q.dtype))
      return invalid_input(o + ": mask of dtype " + dtype_name(M.dtype) + " for mask_kind " + std::to_string(g->mask_kind));
    const Dims st = broadcast_strides(M.dims, scores);
    g->mask_batch_strides.assign(st.begin(), st.end() - 2);
    g->mask_row_stride = st[st.size() - 2];
    g->mask_col_stride = st.back();
  }
  return Status::ok();
}

// FusedAttention's outputs: Y [B..., T, Dv], InvSum [B..., T] when present.
inline Status check_attention_outputs(const KernelCall& call, const AttentionGeometry& g) {
  Dims yd = g.batch, ld = g.batch;
  yd.push_back(g.t);
  yd.push_back(g.dv);
  ld.push_back(g.t);
  RETURN_IF_ERROR(check_same_dims("FusedAttention", "Y", call.outputs[0].dims, yd));
  if (call.outputs.size() > 1 && call.outputs[1].data)
    RETURN_IF_ERROR(check_same_dims("FusedAttention", "InvSum", call.outputs[1].dims, ld));
  return Status::ok();
}

// FusedAttentionGrad's dY [B..., T, Dv] and InvSum [B..., T] inputs, and its outputs dQ, dKt, dV
// (each when present) of Q's, Kt's and V's dims.
inline Status check_attention_grad_io(const KernelCall& call, const AttentionGeometry& g) {
  const char* op = "FusedAttentionGrad";
  Dims yd = g.batch, ld = g.batch;
  yd.push_back(g.t);
  yd.push_back(g.dv);
  ld.push_back(g.t);
  RETURN_IF_ERROR(check_same_dims(op, "dY", call.inputs[0].dims, yd));
  RETURN_IF_ERROR(check_same_dims(op, "InvSum", call.inputs[5].dims, ld));
  const char* names[3] = {"dQ", "dKt", "dV"};
  for (size_t o = 0; o < 3; ++o)
    if (call.outputs[o].data) RETURN_IF_ERROR(check_same_dims(op, names[o], call.outputs[o].dims, call.inputs[o + 1].dims));
  return Status::ok();
}

}  // namespace pt::kernels
