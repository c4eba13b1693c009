// Pooling: MaxPoolGrad (dY, X) routes each output gradient to the first maximum of its window
// (recomputed from X with the forward's tie rule); AveragePoolGrad (dY) spreads it over the
// window with the forward's divisor; the global pools have their own *Grad ops. MaxPool's
// Indices output carries no gradient.
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

AttrMap pool_attrs(const AttrMap& fwd) {
  AttrMap m;
  for (const char* k : {"kernel_shape", "strides", "dilations", "pads"})
    if (fwd.has(k)) m.set(k, fwd.get_ints(k));
  m.set("ceil_mode", fwd.get_int("ceil_mode", 0));
  m.set("count_include_pad", fwd.get_int("count_include_pad", 0));
  return m;
}

}  // namespace

Status max_pool(GradContext& c) {
  if (c.dy(0) && c.needs(0))
    c.set_dx(0, c.emit("MaxPoolGrad", {c.dy(0), c.x(0)}, c.x(0)->dims, pool_attrs(c.fwd().attrs)));
  return Status::ok();
}

Status average_pool(GradContext& c) {
  if (c.dy(0) && c.needs(0))
    c.set_dx(0, c.emit("AveragePoolGrad", {c.dy(0)}, c.x(0)->dims, pool_attrs(c.fwd().attrs)));
  return Status::ok();
}

Status global_average_pool(GradContext& c) {
  if (c.dy(0) && c.needs(0)) c.set_dx(0, c.emit("GlobalAveragePoolGrad", {c.dy(0)}, c.x(0)->dims));
  return Status::ok();
}

Status global_max_pool(GradContext& c) {
  if (c.dy(0) && c.needs(0)) c.set_dx(0, c.emit("GlobalMaxPoolGrad", {c.dy(0), c.x(0)}, c.x(0)->dims));
  return Status::ok();
}

}  // namespace pt::grad
