// Ops that only move data: Reshape, Flatten, Identity (gradient reshaped back), Transpose
// (gradient transposed by the inverse permutation).
#include "importer/grad/builders.h"

namespace pt::grad {

Status reshape(GradContext& c) {
  if (c.dy(0) && c.needs(0)) c.set_dx(0, c.reshape(c.dy(0), c.x(0)->dims));
  return Status::ok();
}

Status transpose(GradContext& c) {
  if (!c.dy(0) || !c.needs(0)) return Status::ok();
  std::vector<int64_t> perm = c.fwd().attrs.get_ints("perm"), inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  AttrMap m;
  m.set("perm", inv);
  c.set_dx(0, c.emit("Transpose", {c.dy(0)}, c.x(0)->dims, m));
  return Status::ok();
}

}  // namespace pt::grad
