// Data movement: Concat (slices of dY), Split (Concat of the dY's, zeros for unused outputs),
// Slice (SliceGrad), Expand (reduce_to), Tile (reshape, reduce_to, reshape), Pad (PadGrad),
// Gather (GatherGrad: scatter-add; indices get none), Where (dY masked per branch), Cast (cast
// back to the input's float type). Squeeze and Unsqueeze reshape back (grad::reshape).
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

Value* zeros(GradContext& c, const Dims& dims, const Value* like) {
  return c.emit("Expand", {c.const_scalar(0.0, like), c.const_ints(std::vector<int64_t>(dims.begin(), dims.end()))},
                dims, {}, like);
}

}  // namespace

Status concat(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  const int64_t axis = c.fwd().attrs.get_int("axis", 0);
  int64_t off = 0;
  for (size_t i = 0; i < c.fwd().inputs.size(); ++i) {
    const Dims& xd = c.x(i)->dims;
    if (c.needs(i)) {
      std::vector<int64_t> starts(xd.size(), 0), steps(xd.size(), 1);
      starts[axis] = off;
      AttrMap m;
      m.set("_starts", starts);
      m.set("_steps", steps);
      c.set_dx(i, c.emit("Slice", {dy}, xd, m, dy));
    }
    off += xd[axis];
  }
  return Status::ok();
}

Status split(GradContext& c) {
  if (!c.needs(0)) return Status::ok();
  bool any = false;
  std::vector<Value*> parts;
  for (size_t i = 0; i < c.fwd().outputs.size(); ++i) {
    Value* y = c.y(i);
    if (c.dy(i)) {
      parts.push_back(c.dy(i));
      any = true;
    } else {
      parts.push_back(zeros(c, y->dims, c.x(0)));
    }
  }
  if (!any) return Status::ok();
  AttrMap m;
  m.set("axis", c.fwd().attrs.get_int("axis", 0));
  c.set_dx(0, c.emit("Concat", parts, c.x(0)->dims, m, c.x(0)));
  return Status::ok();
}

Status slice(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("_starts", c.fwd().attrs.get_ints("_starts"));
  m.set("_steps", c.fwd().attrs.get_ints("_steps"));
  c.set_dx(0, c.emit("SliceGrad", {c.dy(0)}, c.x(0)->dims, m));
  return Status::ok();
}

Status expand(GradContext& c) {
  if (c.dy(0) && c.needs(0)) c.set_dx(0, c.reduce_to(c.dy(0), c.x(0)->dims));
  return Status::ok();
}

Status tile(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  const Dims& xd = c.x(0)->dims;
  const std::vector<int64_t> rep = c.fwd().attrs.get_ints("_repeats");
  Dims split_dims, src;
  for (size_t k = 0; k < xd.size(); ++k) {
    split_dims.push_back(rep[k]);
    split_dims.push_back(xd[k]);
    src.push_back(1);
    src.push_back(xd[k]);
  }
  Value* g = c.reduce_to(c.reshape(c.dy(0), split_dims), src);
  c.set_dx(0, c.reshape(g, xd));
  return Status::ok();
}

// The constant value gets no gradient (a constant in exported models).
Status pad(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("_pads", c.fwd().attrs.get_ints("_pads"));
  m.set("mode", c.fwd().attrs.get_string("mode", "constant"));
  c.set_dx(0, c.emit("PadGrad", {c.dy(0)}, c.x(0)->dims, m));
  return Status::ok();
}

Status gather(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  AttrMap m;
  m.set("axis", c.fwd().attrs.get_int("axis", 0));
  c.set_dx(0, c.emit("GatherGrad", {c.dy(0), c.x(1)}, c.x(0)->dims, m));
  return Status::ok();
}

Status where(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  Value* cond = c.x(0);
  Value* zero = c.const_scalar(0.0, dy);
  if (c.needs(1)) c.set_dx(1, c.reduce_to(c.emit("Where", {cond, dy, zero}, dy->dims, {}, dy), c.x(1)->dims));
  if (c.needs(2)) c.set_dx(2, c.reduce_to(c.emit("Where", {cond, zero, dy}, dy->dims, {}, dy), c.x(2)->dims));
  return Status::ok();
}

Status cast(GradContext& c) {
  if (!c.dy(0) || !c.needs(0) || !is_floating(c.x(0)->dtype)) return Status::ok();
  if (c.dy(0)->dtype == c.x(0)->dtype) {
    c.set_dx(0, c.dy(0));
    return Status::ok();
  }
  AttrMap m;
  m.set("to", static_cast<int64_t>(c.x(0)->dtype));
  c.set_dx(0, c.emit("Cast", {c.dy(0)}, c.x(0)->dims, m, c.x(0)));
  return Status::ok();
}

}  // namespace pt::grad
