// Add, Sub, Mul, Div with numpy broadcasting: elementwise rules, then reduce_to undoes broadcasting.
#include "importer/grad/builders.h"

namespace pt::grad {

Status add(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  for (size_t i = 0; i < 2; ++i)
    if (c.needs(i)) c.set_dx(i, c.reduce_to(dy, c.x(i)->dims));
  return Status::ok();
}

Status sub(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  if (c.needs(0)) c.set_dx(0, c.reduce_to(dy, c.x(0)->dims));
  if (c.needs(1)) c.set_dx(1, c.reduce_to(c.emit("Neg", {dy}, dy->dims), c.x(1)->dims));
  return Status::ok();
}

Status mul(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  if (c.needs(0)) c.set_dx(0, c.reduce_to(c.emit("Mul", {dy, c.x(1)}, dy->dims), c.x(0)->dims));
  if (c.needs(1)) c.set_dx(1, c.reduce_to(c.emit("Mul", {dy, c.x(0)}, dy->dims), c.x(1)->dims));
  return Status::ok();
}

Status div(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  Value* b = c.x(1);
  if (c.needs(0)) c.set_dx(0, c.reduce_to(c.emit("Div", {dy, b}, dy->dims), c.x(0)->dims));
  if (c.needs(1)) {
    // d(A/B)/dB = -A/B^2 = -Y/B
    Value* t = c.emit("Div", {c.emit("Mul", {dy, c.y(0)}, dy->dims), b}, dy->dims);
    c.set_dx(1, c.reduce_to(c.emit("Neg", {t}, dy->dims), b->dims));
  }
  return Status::ok();
}

Status no_gradient(GradContext&) { return Status::ok(); }

}  // namespace pt::grad
