// Elementwise unary ops. Activations use dedicated *Grad ops on the output (no extra buffers).
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

Status from_output(GradContext& c, const char* op) {
  if (c.dy(0) && c.needs(0)) c.set_dx(0, c.emit(op, {c.dy(0), c.y(0)}, c.x(0)->dims));
  return Status::ok();
}

}  // namespace

Status relu(GradContext& c) { return from_output(c, "ReluGrad"); }
Status sigmoid(GradContext& c) { return from_output(c, "SigmoidGrad"); }
Status tanh(GradContext& c) { return from_output(c, "TanhGrad"); }

Status neg(GradContext& c) {
  if (c.dy(0) && c.needs(0)) c.set_dx(0, c.emit("Neg", {c.dy(0)}, c.x(0)->dims));
  return Status::ok();
}

Status exp(GradContext& c) {
  if (c.dy(0) && c.needs(0)) c.set_dx(0, c.emit("Mul", {c.dy(0), c.y(0)}, c.x(0)->dims));
  return Status::ok();
}

Status log(GradContext& c) {
  if (c.dy(0) && c.needs(0)) c.set_dx(0, c.emit("Div", {c.dy(0), c.x(0)}, c.x(0)->dims));
  return Status::ok();
}

Status sqrt(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  Value* half = c.emit("Mul", {c.dy(0), c.const_scalar(0.5, c.dy(0))}, c.x(0)->dims);
  c.set_dx(0, c.emit("Div", {half, c.y(0)}, c.x(0)->dims));
  return Status::ok();
}

}  // namespace pt::grad
