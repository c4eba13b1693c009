// Softmax and LogSoftmax: dedicated grad ops over the output, same axis semantics as forward.
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

Status over_output(GradContext& c, const char* op) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("axis", c.fwd().attrs.get_int("axis", 1));
  m.set("_coerce2d", c.fwd().attrs.get_int("_coerce2d", 0));
  c.set_dx(0, c.emit(op, {c.dy(0), c.y(0)}, c.x(0)->dims, m));
  return Status::ok();
}

}  // namespace

Status softmax(GradContext& c) { return over_output(c, "SoftmaxGrad"); }
Status log_softmax(GradContext& c) { return over_output(c, "LogSoftmaxGrad"); }

}  // namespace pt::grad
