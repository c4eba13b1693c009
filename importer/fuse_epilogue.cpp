// Bias and activation epilogues: exporters write a Linear layer on [N, T, K] tokens as MatMul + Add
// of the bias, and follow products with an activation (Gemm + Relu, MatMul + Add + Gelu, Conv +
// Relu, BatchNormalization + Relu). Run as such, each of those ops is a pass over the product's
// output with a buffer of its own; fused, the product's kernel adds the bias and applies the
// activation to its output in one pass (kernels/cpu/epilogue.cpp; BatchNormalization's kernel applies
// its Relu as it writes Y), and the intermediate buffers are gone. The fused node takes the place of
// the pattern's last node (so the order stays topological) and the product's name (so --split-at and
// the reports still name it).
#include <algorithm>
#include <string>

#include "importer/fuse.h"

namespace pt {
namespace {

bool is_graph_output(const Graph& g, const Value* v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

// The one reader of v when it is a default-domain node of one of `ops`, and v is no graph output.
Node* sole_reader(const Graph& g, const Value* v, std::initializer_list<const char*> ops) {
  if (!v || v->consumers.size() != 1 || is_graph_output(g, v)) return nullptr;
  Node* n = v->consumers[0];
  if (!n->domain.empty() || n->outputs.empty() || !n->outputs[0]) return nullptr;
  for (const char* op : ops)
    if (n->op_type == op) return n;
  return nullptr;
}

// Add(z, bias) or Add(bias, z) where bias broadcasts along z's last axis only (dims [N] or
// [1, ..., 1, N], no more axes than z) and the sum keeps z's dims: the bias.
Value* bias_of(const Node& add, const Value* z) {
  if (add.inputs.size() != 2 || !add.inputs[0] || !add.inputs[1]) return nullptr;
  Value* b = add.inputs[0] == z ? add.inputs[1] : add.inputs[1] == z ? add.inputs[0] : nullptr;
  if (!b || b == z || b->dtype != z->dtype || z->dims.empty() || b->dims.empty()) return nullptr;
  if (b->dims.size() > z->dims.size() || b->dims.back() != z->dims.back()) return nullptr;
  for (size_t i = 0; i + 1 < b->dims.size(); ++i)
    if (b->dims[i] != 1) return nullptr;
  if (add.outputs[0]->dims != z->dims) return nullptr;
  return b;
}

// The activations an epilogue applies: Relu, and exact Gelu (the GELU pass's output, or opset 20's).
const char* activation_of(const Node& n) {
  if (n.op_type == "Relu" && n.inputs.size() == 1) return "Relu";
  if (n.op_type == "Gelu" && n.inputs.size() == 1 && n.attrs.get_string("approximate", "none") == "none") return "Gelu";
  return nullptr;
}

// BatchNormalization + Relu: the normalisation's own kernel applies the Relu as it writes Y
// (attribute _activation), and its node takes Relu's output in place of its own; it stays where it
// is (its other outputs, the statistics, keep their readers). Its gradient builder emits ReluGrad
// first, as the unfused graph's.
bool fuse_batchnorm_relu(Graph& g, Node* bn, const std::set<std::string>& keep, std::vector<bool>& remove) {
  if (bn->outputs.empty() || !bn->outputs[0] || bn->attrs.get_string("_activation", "none") != "none") return false;
  Value* z = bn->outputs[0];
  if (z->dtype != DType::kFloat32 && z->dtype != DType::kFloat64) return false;
  Node* act = sole_reader(g, z, {"Relu"});
  if (!act || keep.count(act->name) || act->inputs.size() != 1 || act->outputs.size() != 1) return false;
  Value* y = act->outputs[0];
  if (y->dtype != z->dtype || y->dims != z->dims) return false;
  remove[act->id] = true;
  std::erase(z->consumers, act);
  bn->outputs[0] = y;
  y->producer = bn;
  z->producer = nullptr;  // no node computes it any more (it kept pointing at bn, which no longer outputs it)
  bn->attrs.set("_activation", std::string("Relu"));
  return true;
}

}  // namespace

int fuse_epilogues(Graph& g, const std::set<std::string>& keep) {
  std::vector<bool> remove(g.nodes().size(), false);
  int fused = 0;
  for (const auto& up : g.nodes()) {
    Node* p = up.get();
    if (!p->domain.empty() || remove[p->id]) continue;
    if (p->op_type == "BatchNormalization") {
      fused += fuse_batchnorm_relu(g, p, keep, remove);
      continue;
    }
    const bool matmul = p->op_type == "MatMul", gemm = p->op_type == "Gemm", conv = p->op_type == "Conv";
    if (!matmul && !gemm && !conv) continue;
    if (p->outputs.size() != 1 || !p->outputs[0]) continue;
    Value* z = p->outputs[0];
    if (z->dtype != DType::kFloat32 && z->dtype != DType::kFloat64) continue;
    for (Value* in : p->inputs)
      if (in && in->dtype != z->dtype) z = nullptr;  // mixed dtypes: left to the op's own checks
    if (!z) continue;
    // MatMul: an optional bias Add, then an optional activation (one at least). Gemm and Conv have a
    // bias input of their own: an activation.
    Node* add = matmul ? sole_reader(g, z, {"Add"}) : nullptr;
    Value* bias = add ? bias_of(*add, z) : nullptr;
    if (add && (!bias || keep.count(add->name))) add = nullptr, bias = nullptr;
    Value* pre = add ? add->outputs[0] : z;  // the pre-activation value
    Node* act = sole_reader(g, pre, {"Relu", "Gelu"});
    const char* activation = act ? activation_of(*act) : nullptr;
    if (!activation || keep.count(act->name) || act->outputs.size() != 1) act = nullptr, activation = nullptr;
    if (!add && !act) continue;

    Node* last = act ? act : add;
    remove[p->id] = true;
    if (add && add != last) remove[add->id] = true;
    for (Value* in : last->inputs) std::erase(in->consumers, last);
    std::vector<Value*> inputs = p->inputs;
    if (matmul) {
      inputs.resize(2);
      if (bias) inputs.push_back(bias);
    }
    for (Value* in : inputs)
      if (in) in->consumers.push_back(last);
    AttrMap attrs = p->attrs;
    attrs.set("activation", std::string(activation ? activation : "none"));
    last->op_type = matmul ? "FusedMatMul" : gemm ? "FusedGemm" : "FusedConv";
    last->domain = "pipetrain";
    last->since_version = p->since_version;
    last->inputs = std::move(inputs);
    last->attrs = std::move(attrs);
    // Gelu's gradient reads its input: the pre-activation stays as a second output.
    if (act && std::string(activation) == "Gelu") {
      if (pre->producer != last) {
        last->outputs.push_back(pre);
        pre->producer = last;
      }
    }
    last->name = p->name;  // unique once the product is removed below
    ++fused;
  }
  if (fused) g.remove_nodes(remove);
  return fused;
}

}  // namespace pt
