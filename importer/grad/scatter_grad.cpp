// Gradients of GatherND, ScatterND and ScatterElements, composed from the ops themselves: a
// scatter's data gradient is dY with the scattered places zeroed (the same scatter of zeros into
// dY), its updates' gradient the matching gather of dY; GatherND's is GatherNDGrad (a scatter-add).
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

// Zeros of `like`'s dims and dY's type (the updates a scatter writes into dY).
Value* zeros_like(GradContext& c, const Value* like) {
  std::vector<int64_t> dims(like->dims.begin(), like->dims.end());
  return c.emit("Expand", {c.const_scalar(0.0, c.dy(0)), c.const_ints(dims)}, like->dims, {}, c.dy(0));
}

}  // namespace

Status gather_nd(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("batch_dims", c.fwd().attrs.get_int("batch_dims", 0));
  c.set_dx(0, c.emit("GatherNDGrad", {c.dy(0), c.x(1)}, c.x(0)->dims, m));
  return Status::ok();
}

Status scatter_nd(GradContext& c) {
  if (!c.dy(0)) return Status::ok();
  if (c.needs(0)) c.set_dx(0, c.emit("ScatterND", {c.dy(0), c.x(1), zeros_like(c, c.x(2))}, c.x(0)->dims));
  if (c.needs(2)) c.set_dx(2, c.emit("GatherND", {c.dy(0), c.x(1)}, c.x(2)->dims));
  return Status::ok();
}

Status scatter_elements(GradContext& c) {
  if (!c.dy(0)) return Status::ok();
  AttrMap m;
  m.set("_axis", c.fwd().attrs.get_int("_axis", 0));
  if (c.needs(0)) c.set_dx(0, c.emit("ScatterElements", {c.dy(0), c.x(1), zeros_like(c, c.x(2))}, c.x(0)->dims, m));
  if (c.needs(2)) c.set_dx(2, c.emit("GatherElements", {c.dy(0), c.x(1)}, c.x(2)->dims, m));
  return Status::ok();
}

}  // namespace pt::grad
