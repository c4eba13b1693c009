// GELU fusion: below opset 20 exporters write nn.GELU() as x * (1 + Erf(x / sqrt 2)) * 0.5 (PyTorch:
// Div, Erf, Add, Mul, Mul). Run as such, a step pays five forward passes over the activation and the
// gradients of each; the fused Gelu (exact form) is one pass forward and one GeluGrad backward. The
// fused node takes the place of the final Mul, so the node order stays topological.
#include <algorithm>
#include <cmath>
#include <optional>

#include "importer/fuse.h"

namespace pt {
namespace {

Node* only_consumer(const Graph& g, const Value* v, const char* op) {
  if (!v || v->consumers.size() != 1) return nullptr;
  if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return nullptr;
  Node* n = v->consumers[0];
  return n->op_type == op && n->domain.empty() ? n : nullptr;
}

std::optional<double> scalar_of(const Value* v) {
  if (!v || v->producer || v->kind != ValueKind::kConstant || !v->data || v->data->size() != 1) return std::nullopt;
  if (!is_floating(v->data->dtype())) return std::nullopt;
  return v->data->get_double(0);
}

// The operand of binary node n that is not v, when n reads v once.
Value* other_of(const Node& n, const Value* v) {
  if (n.inputs.size() != 2 || !n.inputs[0] || !n.inputs[1]) return nullptr;
  if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
  if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
  return nullptr;
}

bool near(std::optional<double> v, double want) { return v && std::fabs(*v - want) <= 1e-6 * want; }

}  // namespace

int fuse_gelu(Graph& g) {
  std::vector<bool> remove(g.nodes().size(), false);
  int fused = 0;
  for (const auto& up : g.nodes()) {
    Node* erf = up.get();
    if (erf->op_type != "Erf" || !erf->domain.empty() || erf->inputs.size() != 1 || !erf->inputs[0]) continue;
    Node* scale = erf->inputs[0]->producer;  // x / sqrt 2 (Div) or x * (1 / sqrt 2) (Mul)
    if (!scale || remove[scale->id] || only_consumer(g, erf->inputs[0], "Erf") != erf) continue;
    if (scale->inputs.size() != 2 || !scale->inputs[0] || !scale->inputs[1]) continue;
    Value* x = nullptr;
    if (scale->op_type == "Div" && near(scalar_of(scale->inputs[1]), std::sqrt(2.0))) {
      x = scale->inputs[0];
    } else if (scale->op_type == "Mul") {
      for (int i = 0; i < 2; ++i)
        if (near(scalar_of(scale->inputs[1 - i]), std::sqrt(0.5))) x = scale->inputs[i];
    }
    if (!x || x->dtype != DType::kFloat32) continue;
    Node* add1 = only_consumer(g, erf->outputs.at(0), "Add");
    if (!add1 || !near(scalar_of(other_of(*add1, erf->outputs[0])), 1.0)) continue;
    Node* mul_x = only_consumer(g, add1->outputs.at(0), "Mul");
    if (!mul_x || other_of(*mul_x, add1->outputs[0]) != x) continue;
    Node* half = only_consumer(g, mul_x->outputs.at(0), "Mul");
    if (!half || !near(scalar_of(other_of(*half, mul_x->outputs[0])), 0.5)) continue;
    if (!half->outputs.at(0) || half->outputs[0]->dims != x->dims) continue;

    for (Node* n : {scale, erf, add1, mul_x}) remove[n->id] = true;
    for (Value* in : half->inputs) std::erase(in->consumers, half);
    half->op_type = "Gelu";
    half->since_version = 20;
    half->inputs = {x};
    x->consumers.push_back(half);
    half->attrs = AttrMap{};
    half->attrs.set("approximate", std::string("none"));
    half->name = erf->name + "/fused_gelu";
    ++fused;
  }
  if (fused) g.remove_nodes(remove);
  return fused;
}

}  // namespace pt
