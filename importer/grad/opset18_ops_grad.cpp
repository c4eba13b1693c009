// Gradient builders of the ops added for opsets 18 to 21 and for the zoo's models: the reductions beyond
// Sum/Mean/Max (composed from Reshape, Expand and arithmetic; ReduceMin reuses ReduceMaxGrad, which
// matches Y by equality), Min/Max (Equal + Cast masks: tied inputs each get the full gradient),
// CumSum and Trilu (themselves, transposed), GatherElements (GatherElementsGrad: a scatter-add) and
// Group/InstanceNormalization (GroupNormalizationGrad, which recomputes the statistics from X).
#include "importer/grad/builders.h"
#include "kernels/einsum_equation.h"

namespace pt::grad {

namespace {

// X's dims with the reduced axes set to 1.
Dims keep_dims(const GradContext& c) {
  Dims kd = c.x(0)->dims;
  for (int64_t a : c.fwd().attrs.get_ints("_axes")) kd.at(a) = 1;
  return kd;
}

Value* expand_to_x(GradContext& c, Value* v) {
  const Dims& xd = c.x(0)->dims;
  const Dims kd = keep_dims(c);
  Value* r = c.reshape(v, kd);
  return kd == xd ? r : c.emit("Expand", {r, c.const_ints(std::vector<int64_t>(xd.begin(), xd.end()))}, xd);
}

}  // namespace

Status reduce_min(GradContext& c) { return reduce_max(c); }

Status reduce_sum_square(GradContext& c) {  // 2 X dY
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Dims& xd = c.x(0)->dims;
  Value* g = c.emit("Mul", {c.x(0), c.reshape(c.dy(0), keep_dims(c))}, xd);
  c.set_dx(0, c.emit("Mul", {g, c.const_scalar(2.0, g)}, xd));
  return Status::ok();
}

Status reduce_l2(GradContext& c) {  // X dY / Y
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  Value* q = c.emit("Div", {c.dy(0), c.y(0)}, c.y(0)->dims);
  c.set_dx(0, c.emit("Mul", {c.x(0), c.reshape(q, keep_dims(c))}, c.x(0)->dims));
  return Status::ok();
}

Status reduce_l1(GradContext& c) {  // sign(X) dY
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  c.set_dx(0, c.emit("AbsGrad", {expand_to_x(c, c.dy(0)), c.x(0)}, c.x(0)->dims));
  return Status::ok();
}

Status reduce_log_sum(GradContext& c) {  // dY / sum = dY / exp(Y)
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  Value* q = c.emit("Div", {c.dy(0), c.emit("Exp", {c.y(0)}, c.y(0)->dims)}, c.y(0)->dims);
  c.set_dx(0, expand_to_x(c, q));
  return Status::ok();
}

Status reduce_log_sum_exp(GradContext& c) {  // exp(X - Y) dY
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Dims& xd = c.x(0)->dims;
  const Dims kd = keep_dims(c);
  Value* p = c.emit("Exp", {c.emit("Sub", {c.x(0), c.reshape(c.y(0), kd)}, xd)}, xd);
  c.set_dx(0, c.emit("Mul", {p, c.reshape(c.dy(0), kd)}, xd));
  return Status::ok();
}

Status reduce_prod(GradContext& c) {  // Y dY / X (X must not hold zeros)
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Dims& xd = c.x(0)->dims;
  Value* yd = c.emit("Mul", {c.y(0), c.dy(0)}, c.y(0)->dims);
  c.set_dx(0, c.emit("Div", {c.reshape(yd, keep_dims(c)), c.x(0)}, xd));
  return Status::ok();
}

Status min_max(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  for (size_t i = 0; i < c.fwd().inputs.size(); ++i) {
    if (!c.needs(i)) continue;
    Value* eq = c.emit("Equal", {c.x(i), c.y(0)}, c.y(0)->dims);
    eq->dtype = DType::kBool;
    AttrMap to;
    to.set("to", static_cast<int64_t>(c.x(i)->dtype));
    Value* mask = c.emit("Cast", {eq}, c.y(0)->dims, to, c.x(i));
    c.set_dx(i, c.reduce_to(c.emit("Mul", {dy, mask}, dy->dims), c.x(i)->dims));
  }
  return Status::ok();
}

// Y = A - q B with q = trunc(A / B) (fmod) or floor(A / B), piecewise constant: dA = dY,
// dB = -dY q, where q = (A - Y) / B exactly.
Status mod(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  if (c.needs(0)) c.set_dx(0, c.reduce_to(dy, c.x(0)->dims));
  if (c.needs(1)) {
    const Dims& yd = c.y(0)->dims;
    Value* q = c.emit("Div", {c.emit("Sub", {c.x(0), c.y(0)}, yd), c.x(1)}, yd);
    c.set_dx(1, c.reduce_to(c.emit("Neg", {c.emit("Mul", {dy, q}, yd)}, yd), c.x(1)->dims));
  }
  return Status::ok();
}

Status cum_sum(GradContext& c) {  // the sums run the other way
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("_axis", c.fwd().attrs.get_int("_axis", 0));
  m.set("exclusive", c.fwd().attrs.get_int("exclusive", 0));
  m.set("reverse", static_cast<int64_t>(c.fwd().attrs.get_int("reverse", 0) == 0));
  c.set_dx(0, c.emit("CumSum", {c.dy(0)}, c.x(0)->dims, m));
  return Status::ok();
}

Status trilu(GradContext& c) {  // the same mask
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("_k", c.fwd().attrs.get_int("_k", 0));
  m.set("upper", c.fwd().attrs.get_int("upper", 1));
  c.set_dx(0, c.emit("Trilu", {c.dy(0)}, c.x(0)->dims, m));
  return Status::ok();
}

Status gather_elements(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("_axis", c.fwd().attrs.get_int("_axis", 0));
  c.set_dx(0, c.emit("GatherElementsGrad", {c.dy(0), c.x(1)}, c.x(0)->dims, m));
  return Status::ok();
}

Status resize(GradContext& c) {  // ResizeGrad(dY): dY spread back with the forward's weights
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  for (const char* k : {"mode", "_coord", "_nearest"}) m.set(k, c.fwd().attrs.get_string(k, ""));
  m.set("_scales", c.fwd().attrs.get_floats("_scales"));
  c.set_dx(0, c.emit("ResizeGrad", {c.dy(0)}, c.x(0)->dims, m));
  return Status::ok();
}

// Einsum is linear in each operand: dX_i = Einsum(out, others -> term_i)(dY, others); letters of
// term_i summed out in the forward broadcast back (the kernel sizes them from dX's dims).
Status einsum(GradContext& c) {
  if (!c.dy(0)) return Status::ok();
  auto e = einsum::parse(c.fwd().attrs.get_string("equation", ""));
  if (!e) return e.status();
  for (size_t i = 0; i < c.fwd().inputs.size(); ++i) {
    if (!c.needs(i)) continue;
    std::string eq = e->output;
    std::vector<Value*> ins = {c.dy(0)};
    for (size_t k = 0; k < c.fwd().inputs.size(); ++k)
      if (k != i) {
        eq += "," + e->inputs[k];
        ins.push_back(c.x(k));
      }
    AttrMap m;
    m.set("equation", eq + "->" + e->inputs[i]);
    c.set_dx(i, c.emit("Einsum", ins, c.x(i)->dims, m));
  }
  return Status::ok();
}

Status group_norm(GradContext& c) {
  if (!c.dy(0) || !(c.needs(0) || c.needs(1) || c.needs(2))) return Status::ok();
  AttrMap m;
  m.set("_groups", c.fwd().attrs.get_int("_groups", 1));
  m.set("_per_group", c.fwd().attrs.get_int("_per_group", 0));
  m.set("epsilon", c.fwd().attrs.get_float("epsilon", 1e-5f));
  std::vector<Value*> g = c.emit_multi("GroupNormalizationGrad", {c.dy(0), c.x(0), c.x(1)},
                                       {c.x(0)->dims, c.x(1)->dims, c.x(2)->dims}, m);
  for (size_t i = 0; i < 3; ++i)
    if (c.needs(i)) c.set_dx(i, g[i]);
  return Status::ok();
}

}  // namespace pt::grad
