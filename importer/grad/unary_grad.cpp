// Gradient builders of the element-wise unary ops of kernels/unary_ops.h: the dedicated backward
// op NameGrad(dY, X or Y), or, where that costs nothing measurable, existing ops (Neg, Exp, Log,
// Sqrt, Reciprocal, Softplus, Sin, Sinh, Cosh).
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

// dX = NameGrad(dY, Z[, the forward's other inputs]) with the forward node's attributes. The
// other inputs (Clip's bounds) get no gradient: they are constants in exported models.
Status dedicated(GradContext& c, Value* z) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  std::vector<Value*> ins = {c.dy(0), z};
  for (size_t i = 1; i < c.fwd().inputs.size(); ++i) ins.push_back(c.x(i));
  c.set_dx(0, c.emit(c.fwd().op_type + "Grad", ins, c.x(0)->dims, c.fwd().attrs));
  return Status::ok();
}

// dX = dY * Op(X): the derivative is itself an op of the list.
Status times_op_of_x(GradContext& c, const char* op) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Dims& d = c.x(0)->dims;
  c.set_dx(0, c.emit("Mul", {c.dy(0), c.emit(op, {c.x(0)}, d)}, d));
  return Status::ok();
}

}  // namespace

Status unary_from_x(GradContext& c) { return dedicated(c, c.x(0)); }
Status unary_from_y(GradContext& c) { return dedicated(c, c.y(0)); }

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

// d(1/x) = -dY * Y^2
Status reciprocal(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Dims& d = c.x(0)->dims;
  Value* yy = c.emit("Mul", {c.y(0), c.y(0)}, d);
  c.set_dx(0, c.emit("Neg", {c.emit("Mul", {c.dy(0), yy}, d)}, d));
  return Status::ok();
}

Status softplus(GradContext& c) { return times_op_of_x(c, "Sigmoid"); }
Status sin(GradContext& c) { return times_op_of_x(c, "Cos"); }
Status sinh(GradContext& c) { return times_op_of_x(c, "Cosh"); }
Status cosh(GradContext& c) { return times_op_of_x(c, "Sinh"); }

}  // namespace pt::grad
