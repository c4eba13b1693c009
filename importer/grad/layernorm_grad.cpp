// LayerNormalization: one LayerNormalizationGrad(dY, X, scale) -> dX, dScale, dB node; it
// recomputes the row statistics from X, so forward nodes without Mean/InvStdDev outputs need
// nothing extra. Gradients arriving through the Mean/InvStdDev outputs are refused.
#include "importer/grad/builders.h"

namespace pt::grad {

Status layer_norm(GradContext& c) {
  if (c.dy(1) || c.dy(2))
    return unsupported("gradients through LayerNormalization's Mean / InvStdDev outputs are not supported");
  if (!c.dy(0)) return Status::ok();
  const bool has_b = c.fwd().inputs.size() > 2 && c.x(2);
  if (!c.needs(0) && !c.needs(1) && !(has_b && c.needs(2))) return Status::ok();
  AttrMap m;
  m.set("axis", c.fwd().attrs.get_int("axis", -1));
  m.set("epsilon", c.fwd().attrs.get_float("epsilon", 1e-5f));
  const Dims& sd = c.x(1)->dims;
  std::vector<Value*> g = c.emit_multi("LayerNormalizationGrad", {c.dy(0), c.x(0), c.x(1)},
                                       {c.x(0)->dims, sd, has_b ? c.x(2)->dims : sd}, m);
  if (c.needs(0)) c.set_dx(0, g[0]);
  if (c.needs(1)) c.set_dx(1, g[1]);
  if (has_b && c.needs(2)) c.set_dx(2, g[2]);
  return Status::ok();
}

}  // namespace pt::grad
