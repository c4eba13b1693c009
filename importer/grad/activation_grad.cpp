// The broadcasting activation and math ops: Pow (composed from existing ops) and PRelu
// (PReluGrad). The element-wise unary ops are in unary_grad.cpp.
#include "importer/grad/builders.h"

namespace pt::grad {

// Y = A^B: dA = dY * B * A^(B-1), dB = dY * Y * log(A); both reduced for broadcasting.
Status pow(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  Value* a = c.x(0);
  Value* b = c.x(1);
  const Dims& yd = c.y(0)->dims;
  if (c.needs(0)) {
    Value* bf = b;
    if (b->dtype != a->dtype) {
      AttrMap m;
      m.set("to", static_cast<int64_t>(a->dtype));
      bf = c.emit("Cast", {b}, b->dims, m, a);
    }
    Value* g;
    if (b->is_constant() && b->data && b->size() == 1 && b->data->get_double(0) == 2.0) {
      g = c.emit("Mul", {dy, c.emit("Mul", {a, c.const_scalar(2.0, a)}, a->dims)}, yd);
    } else {
      Value* bm1 = c.emit("Sub", {bf, c.const_scalar(1.0, a)}, bf->dims, {}, a);
      Value* p = c.emit("Pow", {a, bm1}, yd);
      g = c.emit("Mul", {dy, c.emit("Mul", {p, bf}, yd)}, yd);
    }
    c.set_dx(0, c.reduce_to(g, a->dims));
  }
  if (c.needs(1)) {
    Value* t = c.emit("Mul", {c.y(0), c.emit("Log", {a}, a->dims)}, yd);
    c.set_dx(1, c.reduce_to(c.emit("Mul", {dy, t}, yd, {}, b), b->dims));
  }
  return Status::ok();
}

Status prelu(GradContext& c) {
  if (!c.dy(0) || (!c.needs(0) && !c.needs(1))) return Status::ok();
  std::vector<Value*> g = c.emit_multi("PReluGrad", {c.dy(0), c.x(0), c.x(1)}, {c.x(0)->dims, c.dy(0)->dims});
  if (c.needs(0)) c.set_dx(0, g[0]);
  if (c.needs(1)) c.set_dx(1, c.reduce_to(g[1], c.x(1)->dims));
  return Status::ok();
}

}  // namespace pt::grad
