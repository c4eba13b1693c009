// Reductions and the variadic Sum/Mean. ReduceSum/ReduceMean spread dY back with Reshape + Expand
// (times 1/count); ReduceMax sends it to the first maximal element (ReduceMaxGrad); Sum and Mean
// undo broadcasting with reduce_to.
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

// X's dims with the reduced axes set to 1.
Dims keep_dims(const GradContext& c) {
  Dims kd = c.x(0)->dims;
  for (int64_t a : c.fwd().attrs.get_ints("_axes")) kd.at(a) = 1;
  return kd;
}

Status spread(GradContext& c, bool mean) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Dims& xd = c.x(0)->dims;
  const Dims kd = keep_dims(c);
  Value* g = c.reshape(c.dy(0), kd);
  if (mean && numel(kd) != numel(xd) && numel(xd) > 0)
    g = c.emit("Mul", {g, c.const_scalar(static_cast<double>(numel(kd)) / static_cast<double>(numel(xd)), g)}, kd);
  if (kd != xd) g = c.emit("Expand", {g, c.const_ints(std::vector<int64_t>(xd.begin(), xd.end()))}, xd);
  c.set_dx(0, g);
  return Status::ok();
}

Status variadic(GradContext& c, bool mean) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  const size_t n = c.fwd().inputs.size();
  if (mean && n > 1) dy = c.emit("Mul", {dy, c.const_scalar(1.0 / static_cast<double>(n), dy)}, dy->dims);
  for (size_t i = 0; i < n; ++i)
    if (c.needs(i)) c.set_dx(i, c.reduce_to(dy, c.x(i)->dims));
  return Status::ok();
}

}  // namespace

Status reduce_sum(GradContext& c) { return spread(c, false); }
Status reduce_mean(GradContext& c) { return spread(c, true); }

Status reduce_max(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("_axes", c.fwd().attrs.get_ints("_axes"));
  c.set_dx(0, c.emit("ReduceMaxGrad", {c.dy(0), c.x(0), c.y(0)}, c.x(0)->dims, m));
  return Status::ok();
}

Status sum(GradContext& c) { return variadic(c, false); }
Status mean(GradContext& c) { return variadic(c, true); }

}  // namespace pt::grad
