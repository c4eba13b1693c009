// Dropout: the gradient passes where the forward kept an element, scaled like the forward.
#include "importer/grad/builders.h"

namespace pt::grad {

Status dropout(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Node& f = c.fwd();
  if (!f.attrs.get_int("_training", 0)) {
    c.set_dx(0, c.dy(0));
    return Status::ok();
  }
  if (f.outputs.size() < 2 || !f.outputs[1]) return internal_error(f.describe() + ": the gradient needs the mask output");
  AttrMap m;
  m.set("ratio", f.attrs.get_float("ratio", 0.5f));
  c.set_dx(0, c.emit("DropoutGrad", {c.dy(0), f.outputs[1]}, c.x(0)->dims, m));
  return Status::ok();
}

}  // namespace pt::grad
