// BatchNormalization: one BatchNormalizationGrad node -> dX, dScale, dB. In training mode
// (_training = 1) it differentiates through the batch statistics, which it recomputes from X
// (so the forward node needs no extra saved-statistics outputs); in inference mode it reads the
// running mean and variance. The running statistics get no gradient (they are state, updated by
// the forward in training mode), nor do the statistics outputs pass one on.
#include "importer/grad/builders.h"

namespace pt::grad {

Status batch_norm(GradContext& c) {
  for (size_t i = 1; i < c.fwd().outputs.size(); ++i)
    if (c.dy(i))
      return unsupported("a gradient reaches BatchNormalization's statistics output '" + c.y(i)->name +
                         "'; only Y is differentiable here");
  Value* dy = c.dy(0);
  if (!dy || !(c.needs(0) || c.needs(1) || c.needs(2))) return Status::ok();
  const AttrMap& f = c.fwd().attrs;
  // The epilogue pass's fused Relu (importer/fuse_epilogue.cpp): its gradient first, from Y, as the
  // separate Relu's.
  const std::string act = f.get_string("_activation", "none");
  if (act == "Relu") dy = c.emit("ReluGrad", {dy, c.y(0)}, c.y(0)->dims);
  else if (act != "none") return internal_error(c.fwd().describe() + ": unknown _activation '" + act + "'");
  const bool training = f.get_int("_training", 0) != 0;
  AttrMap m;
  m.set("epsilon", f.get_float("epsilon", 1e-5f));
  m.set("_training", static_cast<int64_t>(training));
  std::vector<Value*> ins = {dy, c.x(0), c.x(1)};
  if (!training) {
    ins.push_back(c.x(3));
    ins.push_back(c.x(4));
  }
  std::vector<Value*> outs =
      c.emit_multi("BatchNormalizationGrad", ins, {c.x(0)->dims, c.x(1)->dims, c.x(2)->dims}, m);
  for (size_t i = 0; i < 3; ++i)
    if (c.needs(i)) c.set_dx(i, outs[i]);
  return Status::ok();
}

}  // namespace pt::grad
