// LayerNorm fusion: exporters below opset 17 write nn.LayerNorm as nine primitives (mean, centre,
// square, mean, add epsilon, square root, divide, scale, shift). Run as such, a training step pays
// nine forward kernels, their gradients and eight saved intermediates per LayerNorm; the fused
// LayerNormalization is one pass forward and one backward (LayerNormalizationGrad recomputes the row
// statistics). The fused node takes the place of the final Add, so the node order stays topological.
#include <algorithm>
#include <cmath>
#include <optional>

#include "importer/fuse.h"

namespace pt {
namespace {

// The only consumer of v, when v has exactly one and is no graph output.
Node* sole_consumer(const Graph& g, const Value* v, const char* op) {
  if (!v || v->consumers.size() != 1) return nullptr;
  if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return nullptr;
  Node* n = v->consumers[0];
  return n->op_type == op && n->domain.empty() ? n : nullptr;
}

// A float constant with one element (a scalar or [1]): its value.
std::optional<double> scalar_constant(const Value* v) {
  if (!v || v->producer || v->kind != ValueKind::kConstant || !v->data || v->data->size() != 1) return std::nullopt;
  if (!is_floating(v->data->dtype())) return std::nullopt;
  return v->data->get_double(0);
}

// The first axis of a ReduceMean over the trailing axes of its input (keepdims 1), or -1.
int64_t trailing_reduce_axis(const Node& n) {
  if (n.inputs.empty() || !n.inputs[0] || n.outputs.size() != 1 || !n.outputs[0]) return -1;
  if (n.attrs.get_int("keepdims", 1) != 1) return -1;
  std::vector<int64_t> axes = n.attrs.get_ints("axes");
  if (n.inputs.size() > 1 && n.inputs[1]) {  // opset 18: axes as a constant input
    const Value* a = n.inputs[1];
    if (a->producer || !a->data || a->data->dtype() != DType::kInt64) return -1;
    axes.assign(a->data->as<int64_t>(), a->data->as<int64_t>() + a->data->size());
  }
  const int64_t rank = static_cast<int64_t>(n.inputs[0]->dims.size());
  if (axes.empty() || rank == 0) return -1;
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i)) return -1;
  return axes[0];
}

// The input of binary node n that is not v (n reads v exactly once), or nullptr.
Value* other_input(const Node& n, const Value* v) {
  if (n.inputs.size() != 2 || !n.inputs[0] || !n.inputs[1]) return nullptr;
  if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
  if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
  return nullptr;
}

// Whether p (scale or bias) has the normalized dims x.dims[axis:], leading 1s allowed.
bool normalized_dims(const Value* p, const Dims& xd, int64_t axis) {
  if (!p || p->dtype != DType::kFloat32) return false;
  Dims d = p->dims;
  while (!d.empty() && d.front() == 1 && d.size() > xd.size() - axis) d.erase(d.begin());
  return d == Dims(xd.begin() + axis, xd.end());
}

}  // namespace

int fuse_layernorm(Graph& g) {
  std::vector<bool> remove(g.nodes().size(), false);
  int fused = 0;
  for (const auto& up : g.nodes()) {
    Node* mean1 = up.get();
    if (mean1->op_type != "ReduceMean" || !mean1->domain.empty() || remove[mean1->id]) continue;
    const int64_t axis = trailing_reduce_axis(*mean1);
    if (axis < 0) continue;
    Value* x = mean1->inputs[0];
    if (x->dtype != DType::kFloat32) continue;
    Node* sub = sole_consumer(g, mean1->outputs[0], "Sub");
    if (!sub || sub->inputs.size() != 2 || sub->inputs[0] != x || sub->inputs[1] != mean1->outputs[0]) continue;
    Value* d = sub->outputs.at(0);
    if (!d || d->consumers.size() != 2 || std::find(g.outputs.begin(), g.outputs.end(), d) != g.outputs.end()) continue;
    Node* pow = nullptr;
    Node* div = nullptr;
    for (Node* c : d->consumers) {
      if (c->op_type == "Pow" && c->domain.empty() && c->inputs.size() == 2 && c->inputs[0] == d) pow = c;
      if (c->op_type == "Div" && c->domain.empty() && c->inputs.size() == 2 && c->inputs[0] == d) div = c;
    }
    if (!pow || !div || scalar_constant(pow->inputs[1]) != 2.0) continue;
    Node* mean2 = sole_consumer(g, pow->outputs.at(0), "ReduceMean");
    if (!mean2 || trailing_reduce_axis(*mean2) != axis) continue;
    Node* add_eps = sole_consumer(g, mean2->outputs[0], "Add");
    if (!add_eps) continue;
    const std::optional<double> eps = scalar_constant(other_input(*add_eps, mean2->outputs[0]));
    if (!eps || !(*eps >= 0)) continue;
    Node* sqrt = sole_consumer(g, add_eps->outputs.at(0), "Sqrt");
    if (!sqrt || sole_consumer(g, sqrt->outputs.at(0), "Div") != div || div->inputs[1] != sqrt->outputs[0]) continue;
    Node* mul = sole_consumer(g, div->outputs.at(0), "Mul");
    if (!mul) continue;
    Value* scale = other_input(*mul, div->outputs[0]);
    Node* add_b = sole_consumer(g, mul->outputs.at(0), "Add");
    if (!add_b) continue;
    Value* bias = other_input(*add_b, mul->outputs[0]);
    if (!normalized_dims(scale, x->dims, axis) || !normalized_dims(bias, x->dims, axis)) continue;
    if (scale->size() != bias->size() || !add_b->outputs.at(0) || add_b->outputs[0]->dims != x->dims) continue;

    // The final Add becomes the LayerNormalization; the other eight nodes go.
    for (Node* n : {mean1, sub, pow, mean2, add_eps, sqrt, div, mul}) remove[n->id] = true;
    for (Value* in : add_b->inputs) std::erase(in->consumers, add_b);
    add_b->op_type = "LayerNormalization";
    add_b->since_version = 17;
    add_b->inputs = {x, scale, bias};
    for (Value* in : add_b->inputs) in->consumers.push_back(add_b);
    add_b->attrs = AttrMap{};
    add_b->attrs.set("axis", axis);
    add_b->attrs.set("epsilon", static_cast<float>(*eps));
    add_b->attrs.set("stash_type", int64_t{1});
    add_b->name = g.unique_name(mean1->name + "/fused_layernorm");
    ++fused;
  }
  if (fused) g.remove_nodes(remove);
  return fused;
}

}  // namespace pt
