// LRN: LRNGrad (dY, X) -> dX, with the window sums recomputed from X.
#include "importer/grad/builders.h"

namespace pt::grad {

Status lrn(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const AttrMap& f = c.fwd().attrs;
  AttrMap m;
  m.set("size", f.get_int("size", 1));
  m.set("alpha", f.get_float("alpha", 1e-4f));
  m.set("beta", f.get_float("beta", 0.75f));
  m.set("bias", f.get_float("bias", 1.0f));
  c.set_dx(0, c.emit("LRNGrad", {c.dy(0), c.x(0)}, c.x(0)->dims, m));
  return Status::ok();
}

}  // namespace pt::grad
