// Conv: dX = ConvGradInput(dY, W) (the transposed convolution), dW = ConvGradWeight(dY, X) (the
// correlation of X with dY), dB = ConvGradBias(dY) (dY summed over all but the channel dim). The
// backward ops read the forward's normalised window attributes (explicit pads).
#include "importer/grad/builders.h"

namespace pt::grad {

namespace {

AttrMap conv_attrs(const AttrMap& fwd) {
  AttrMap m;
  for (const char* k : {"kernel_shape", "strides", "dilations", "pads"}) m.set(k, fwd.get_ints(k));
  m.set("group", fwd.get_int("group", 1));
  return m;
}

}  // namespace

Status conv(GradContext& c) { return conv_from(c, c.dy(0)); }

Status conv_from(GradContext& c, Value* dy) {
  if (!dy) return Status::ok();
  const AttrMap at = conv_attrs(c.fwd().attrs);
  if (c.needs(0)) c.set_dx(0, c.emit("ConvGradInput", {dy, c.x(1)}, c.x(0)->dims, at));
  if (c.needs(1)) c.set_dx(1, c.emit("ConvGradWeight", {dy, c.x(0)}, c.x(1)->dims, at));
  if (c.fwd().inputs.size() > 2 && c.x(2) && c.needs(2)) c.set_dx(2, c.emit("ConvGradBias", {dy}, c.x(2)->dims));
  return Status::ok();
}

// ConvTranspose Y = ConvGradInput(X, W) (+ B): dX = Conv(dY, W), dW = ConvGradWeight(X, dY) (the
// roles of dY and X swap), dB = ConvGradBias(dY).
Status conv_transpose(GradContext& c) {
  Value* dy = c.dy(0);
  if (!dy) return Status::ok();
  const AttrMap at = conv_attrs(c.fwd().attrs);
  if (c.needs(0)) c.set_dx(0, c.emit("Conv", {dy, c.x(1)}, c.x(0)->dims, at));
  if (c.needs(1)) c.set_dx(1, c.emit("ConvGradWeight", {c.x(0), dy}, c.x(1)->dims, at));
  if (c.fwd().inputs.size() > 2 && c.x(2) && c.needs(2)) c.set_dx(2, c.emit("ConvGradBias", {dy}, c.x(2)->dims));
  return Status::ok();
}

}  // namespace pt::grad
