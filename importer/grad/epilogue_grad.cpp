// The fused products of importer/fuse_epilogue.cpp: the activation's gradient (ReluGrad from Y,
// GeluGrad from the pre-activation Z, the node's second output), then the product's own gradients
// of that, and FusedMatMul's bias gradient as the separate Add's: dY summed down to the bias's dims.
// The same backward nodes the unfused graph gets, so both compute the same bits.
#include "importer/grad/builders.h"

namespace pt::grad {

Status fused_product(GradContext& c) {
  const std::string& op = c.fwd().op_type;
  const std::string act = c.fwd().attrs.get_string("activation", "none");
  Value* dz = c.dy(0);
  if (dz && act == "Relu") {
    dz = c.emit("ReluGrad", {dz, c.y(0)}, c.y(0)->dims);
  } else if (dz && act == "Gelu") {
    if (c.fwd().outputs.size() < 2 || !c.y(1))
      return internal_error(c.fwd().describe() + ": a Gelu epilogue without its pre-activation output");
    AttrMap m;
    m.set("approximate", std::string("none"));
    dz = c.emit("GeluGrad", {dz, c.y(1)}, c.y(1)->dims, m);
  } else if (act != "none") {
    return internal_error(c.fwd().describe() + ": unknown activation '" + act + "'");
  }
  // A reader of Z itself (none, as the pass builds them) adds its gradient.
  if (c.dy(1)) dz = dz ? c.emit("Add", {dz, c.dy(1)}, dz->dims) : c.dy(1);
  if (!dz) return Status::ok();
  if (op == "FusedMatMul") {
    RETURN_IF_ERROR(matmul_from(c, dz));
    if (c.fwd().inputs.size() > 2 && c.x(2) && c.needs(2)) c.set_dx(2, c.reduce_to(dz, c.x(2)->dims));
    return Status::ok();
  }
  if (op == "FusedGemm") return gemm_from(c, dz);
  if (op == "FusedConv") return conv_from(c, dz);
  return internal_error("no fused product '" + op + "'");
}

}  // namespace pt::grad
