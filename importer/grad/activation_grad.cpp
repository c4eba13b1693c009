// Activations and pointwise math: dedicated *Grad ops over the input X (ClipGrad, LeakyReluGrad,
// EluGrad, SeluGrad, HardSigmoidGrad, HardSwishGrad, ErfGrad, SoftplusGrad, AbsGrad, PReluGrad);
// Reciprocal and Pow compose existing ops. Gelu as exported (x * 0.5 * (1 + Erf(x / sqrt 2)))
// needs nothing here beyond Erf.
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

// dX = Op(dY, X) with the forward node's attributes.
Status from_input(GradContext& c, const char* op, std::initializer_list<const char*> attrs = {}) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  for (const char* a : attrs)
    if (c.fwd().attrs.has(a)) m.set(a, c.fwd().attrs.get_float(a, 0));
  c.set_dx(0, c.emit(op, {c.dy(0), c.x(0)}, c.x(0)->dims, m));
  return Status::ok();
}

bool has_input(const GradContext& c, size_t i) { return c.fwd().inputs.size() > i && c.x(i); }

}  // namespace

// Bounds given as inputs (opset 11+) get no gradient: they are constants in exported models.
Status clip(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  for (const char* a : {"min", "max"})
    if (c.fwd().attrs.has(a)) m.set(a, c.fwd().attrs.get_float(a, 0));
  std::vector<Value*> ins = {c.dy(0), c.x(0), has_input(c, 1) ? c.x(1) : nullptr};
  if (has_input(c, 2)) ins.push_back(c.x(2));
  c.set_dx(0, c.emit("ClipGrad", ins, c.x(0)->dims, m));
  return Status::ok();
}

Status leaky_relu(GradContext& c) { return from_input(c, "LeakyReluGrad", {"alpha"}); }
Status elu(GradContext& c) { return from_input(c, "EluGrad", {"alpha"}); }
Status selu(GradContext& c) { return from_input(c, "SeluGrad", {"alpha", "gamma"}); }
Status hard_sigmoid(GradContext& c) { return from_input(c, "HardSigmoidGrad", {"alpha", "beta"}); }
Status hard_swish(GradContext& c) { return from_input(c, "HardSwishGrad"); }
Status erf(GradContext& c) { return from_input(c, "ErfGrad"); }
Status softplus(GradContext& c) { return from_input(c, "SoftplusGrad"); }
Status abs(GradContext& c) { return from_input(c, "AbsGrad"); }

// d(1/x) = -dY * Y^2
Status reciprocal(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Dims& d = c.x(0)->dims;
  Value* yy = c.emit("Mul", {c.y(0), c.y(0)}, d);
  c.set_dx(0, c.emit("Neg", {c.emit("Mul", {c.dy(0), yy}, d)}, d));
  return Status::ok();
}

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
