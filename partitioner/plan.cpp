// Single-stage plans and the analytic FLOP count per node.
#include "partitioner/plan.h"

namespace pt {

double node_flops(const Node& n) {
  auto out_elems = [&]() -> double {
    double s = 0;
    for (const Value* v : n.outputs)
      if (v) s += static_cast<double>(v->size());
    return s;
  };
  if (n.op_type == "Gemm") {
    const Value* a = n.inputs[0];
    const int64_t k = n.attrs.get_int("transA", 0) ? a->dims[0] : a->dims[1];
    return 2.0 * out_elems() * static_cast<double>(k);
  }
  if (n.op_type == "MatMul") {
    const Value* a = n.inputs[0];
    return 2.0 * out_elems() * static_cast<double>(a->dims.back());
  }
  if (n.op_type == "Reshape" || n.op_type == "Flatten" || n.op_type == "Identity") return 0;
  if (n.op_type == "SGDMomentum") return 5.0 * static_cast<double>(n.inputs[0]->size());
  return out_elems();
}

Plan plan_single_stage(const Graph& g, DeviceKind device) {
  Plan p;
  StagePlan s;
  s.device = device;
  for (auto& n : g.nodes()) {
    s.nodes.push_back(n.get());
    const double f = node_flops(*n);
    if (n->phase == Phase::kBackward) s.backward_flops += f;
    else if (n->phase != Phase::kUpdate) s.forward_flops += f;
    for (const Value* v : n->outputs)
      if (v) s.activation_bytes += static_cast<int64_t>(v->bytes());
  }
  for (Value* v : g.values_of_kind(ValueKind::kParameter)) {
    s.params.push_back(v);
    s.param_count += v->size();
    s.param_bytes += static_cast<int64_t>(v->bytes());
  }
  p.stages.push_back(std::move(s));
  return p;
}

}  // namespace pt
