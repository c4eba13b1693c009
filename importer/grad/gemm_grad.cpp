// Gemm: Y = alpha * op(A) op(B) + beta * C. Gradients are Gemms with flipped transposes.
#include "importer/grad/builders.h"

namespace pt::grad {

Status gemm(GradContext& c) { return gemm_from(c, c.dy(0)); }

Status gemm_from(GradContext& c, Value* dy) {
  if (!dy) return Status::ok();
  const AttrMap& at = c.fwd().attrs;
  const int64_t ta = at.get_int("transA", 0), tb = at.get_int("transB", 0);
  const float alpha = at.get_float("alpha", 1.0f), beta = at.get_float("beta", 1.0f);
  Value* a = c.x(0);
  Value* b = c.x(1);
  auto gemm_attrs = [&](int64_t ta2, int64_t tb2) {
    AttrMap m;
    m.set("alpha", alpha);
    m.set("beta", 0.0f);
    m.set("transA", ta2);
    m.set("transB", tb2);
    return m;
  };
  if (c.needs(0)) {
    // dA = alpha dY op(B)^T, or its transpose when A was transposed.
    if (!ta) c.set_dx(0, c.emit("Gemm", {dy, b}, a->dims, gemm_attrs(0, tb ? 0 : 1)));
    else c.set_dx(0, c.emit("Gemm", {b, dy}, a->dims, gemm_attrs(tb, 1)));
  }
  if (c.needs(1)) {
    if (!tb) c.set_dx(1, c.emit("Gemm", {a, dy}, b->dims, gemm_attrs(ta ? 0 : 1, 0)));
    else c.set_dx(1, c.emit("Gemm", {dy, a}, b->dims, gemm_attrs(1, ta)));
  }
  if (c.fwd().inputs.size() > 2 && c.x(2) && c.needs(2)) {
    Value* dc = c.reduce_to(dy, c.x(2)->dims);
    if (beta != 1.0f) dc = c.emit("Mul", {dc, c.const_scalar(beta, dc)}, dc->dims);
    c.set_dx(2, dc);
  }
  return Status::ok();
}

}  // namespace pt::grad
