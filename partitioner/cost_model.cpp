// Analytic per-node costs (roofline) with the backward and update nodes folded into the forward
// node they serve.
#include "partitioner/cost_model.h"

#include <algorithm>
#include <map>

namespace pt {

double node_flops(const Node& n) {
  double out = 0;
  for (const Value* v : n.outputs)
    if (v) out += static_cast<double>(v->size());
  if (n.op_type == "Gemm") {
    const Value* a = n.inputs[0];
    const int64_t k = n.attrs.get_int("transA", 0) ? a->dims[0] : a->dims[1];
    return 2.0 * out * static_cast<double>(k);
  }
  if (n.op_type == "MatMul") return 2.0 * out * static_cast<double>(n.inputs[0]->dims.back());
  if (n.op_type == "Reshape" || n.op_type == "Flatten" || n.op_type == "Identity") return 0;
  if (n.op_type == "SGDMomentum") return 5.0 * static_cast<double>(n.inputs[0]->size());
  return out;
}

double node_bytes(const Node& n) {
  double b = 0;
  for (const Value* v : n.inputs)
    if (v) b += static_cast<double>(v->bytes());
  for (const Value* v : n.outputs)
    if (v) b += static_cast<double>(v->bytes());
  return b;
}

namespace {

double roofline_s(const Node& n, const DeviceSpec& d) {
  const double f = d.peak_flops > 0 ? node_flops(n) / d.peak_flops : 0;
  const double m = d.mem_bandwidth > 0 ? node_bytes(n) / d.mem_bandwidth : 0;
  return std::max(f, m) + d.kernel_overhead_s;
}

}  // namespace

std::vector<std::pair<const Node*, NodeCost>> node_costs(const Graph& g, const DeviceSpec& d, const Profile* profile) {
  std::vector<std::pair<const Node*, NodeCost>> out;
  std::map<const Node*, size_t> index;
  for (auto& n : g.nodes())
    if (n->phase == Phase::kForward || n->phase == Phase::kLoss) {
      index[n.get()] = out.size();
      NodeCost c;
      c.fwd_flops = node_flops(*n);
      c.fwd_s = roofline_s(*n, d);
      if (profile) {
        auto it = profile->fwd_s.find(n->name);
        if (it != profile->fwd_s.end()) c.fwd_s = it->second;
      }
      for (const Value* v : n->outputs)
        if (v) c.saved_bytes += static_cast<int64_t>(v->bytes());
      out.emplace_back(n.get(), c);
    }
  // Parameters are charged to their first forward consumer; so is their update.
  std::map<const Value*, const Node*> first_use;
  for (auto& [n, c] : out)
    for (const Value* v : n->inputs)
      if (v && v->kind == ValueKind::kParameter && !first_use.count(v)) {
        first_use[v] = n;
        c.param_bytes += static_cast<int64_t>(v->bytes());
        c.param_count += v->size();
      }
  for (auto& n : g.nodes()) {
    if (n->phase == Phase::kBackward && n->forward && index.count(n->forward)) {
      NodeCost& c = out[index[n->forward]].second;
      c.bwd_flops += node_flops(*n);
      c.bwd_s += roofline_s(*n, d);
    } else if (n->phase == Phase::kUpdate && !n->inputs.empty() && first_use.count(n->inputs[0])) {
      out[index[first_use[n->inputs[0]]]].second.update_s += roofline_s(*n, d);
    }
  }
  if (profile)
    for (auto& [n, c] : out) {
      auto it = profile->bwd_s.find(n->name);
      if (it != profile->bwd_s.end()) c.bwd_s = it->second;
    }
  return out;
}

}  // namespace pt
