// FusedAttention (importer/fuse_attention.cpp): one FusedAttentionGrad(dY, Q, Kt, V, mask, InvSum
// [, step]) -> dQ, dKt, dV node (step: with attention dropout). It recomputes the probabilities from Q, Kt and the per-row softmax normaliser,
// so the step saves InvSum ([B..., T]) besides the inputs, never the [B..., T, S] probabilities (nor
// the output Y). The fusion only takes masks that carry no gradient; a gradient through InvSum is
// refused.
#include "importer/grad/builders.h"

namespace pt::grad {

Status fused_attention(GradContext& c) {
  if (c.dy(1)) return unsupported("gradients through FusedAttention's InvSum output are not supported");
  if (!c.dy(0) || !(c.needs(0) || c.needs(1) || c.needs(2))) return Status::ok();
  if (c.fwd().inputs.size() > 3 && c.x(3) && c.needs(3))
    return unsupported(c.fwd().describe() + ": a gradient for the attention mask is not supported");
  if (c.fwd().outputs.size() < 2 || !c.y(1))
    return invalid_input(c.fwd().describe() + ": the InvSum output the backward reads is missing");
  AttrMap m;
  m.set("scale", c.fwd().attrs.get_float("scale", 1.0f));
  m.set("mask_kind", c.fwd().attrs.get_int("mask_kind", 0));
  m.set("mask_fill", c.fwd().attrs.get_float("mask_fill", 0.0f));
  Value* mask = c.fwd().inputs.size() > 3 ? c.x(3) : nullptr;
  std::vector<Value*> ins = {c.dy(0), c.x(0), c.x(1), c.x(2), mask, c.y(1)};
  // Attention dropout: the same ratio, seed and step, so the backward draws the forward's masks.
  if (c.fwd().attrs.get_float("dropout_ratio", 0.0f) != 0.0f) {
    if (c.fwd().inputs.size() < 5 || !c.x(4))
      return invalid_input(c.fwd().describe() + ": attention dropout without the step input");
    m.set("dropout_ratio", c.fwd().attrs.get_float("dropout_ratio", 0.0f));
    m.set("dropout_seed", c.fwd().attrs.get_int("dropout_seed", 0));
    ins.push_back(c.x(4));
  }
  std::vector<Value*> g = c.emit_multi("FusedAttentionGrad", ins, {c.x(0)->dims, c.x(1)->dims, c.x(2)->dims}, m);
  for (size_t i = 0; i < 3; ++i)
    if (c.needs(i)) c.set_dx(i, g[i]);
  return Status::ok();
}

}  // namespace pt::grad
