// Losses: softmax cross-entropy (through its log_prob output) and mean squared error.
#include "importer/grad/builders.h"

namespace pt::grad {

Status softmax_cross_entropy(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Node& f = c.fwd();
  if (f.outputs.size() < 2 || !f.outputs[1])
    return internal_error(f.describe() + ": the gradient needs the log_prob output");
  std::vector<Value*> ins = {c.dy(0), f.outputs[1], c.x(1)};
  if (f.inputs.size() > 2 && f.inputs[2]) ins.push_back(f.inputs[2]);
  AttrMap m;
  m.set("reduction", f.attrs.get_string("reduction", "mean"));
  if (f.attrs.has("ignore_index")) m.set("ignore_index", f.attrs.get_int("ignore_index", -100));
  c.set_dx(0, c.emit("SoftmaxCrossEntropyLossGrad", ins, c.x(0)->dims, m));
  return Status::ok();
}

Status mse_loss(GradContext& c) {
  if (!c.dy(0)) return Status::ok();
  AttrMap m;
  m.set("reduction", c.fwd().attrs.get_string("reduction", "mean"));
  if (c.needs(0)) c.set_dx(0, c.emit("MSELossGrad", {c.dy(0), c.x(0), c.x(1)}, c.x(0)->dims, m));
  return Status::ok();
}

}  // namespace pt::grad
