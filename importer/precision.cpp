// The bf16 pass of importer/precision.h.
#include "importer/precision.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace pt {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kTf32: return "tf32";
  }
  return "?";
}

Expected<Precision> parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "tf32") return Precision::kTf32;
  return invalid_input("--precision " + name + ": unknown precision (valid: fp32, bf16, tf32)");
}

bool is_precision_cast(const Node& n) {
  return n.op_type == "Cast" && n.attrs.get_int("_precision_cast", 0) != 0;
}

const Value* precision_source(const Value* v) {
  return v && v->producer && is_precision_cast(*v->producer) ? v->producer->inputs[0] : v;
}

namespace {

bool is_product(const Node& n) {
  // The fused products of importer/fuse_epilogue.cpp too: their operands are inputs 0 and 1 as well.
  return n.op_type == "Gemm" || n.op_type == "MatMul" || n.op_type == "Conv" || n.op_type == "FusedGemm" ||
         n.op_type == "FusedMatMul" || n.op_type == "FusedConv" || n.op_type == "ConvGradInput" ||
         n.op_type == "ConvGradWeight";
}

bool is_backward_side(const Node& n) { return n.phase == Phase::kBackward || n.phase == Phase::kUpdate; }

struct CastSpec {
  Value* src = nullptr;
  Value* dst = nullptr;
};

}  // namespace

PrecisionStats apply_precision(Graph& g, Precision p) {
  PrecisionStats stats;
  if (p != Precision::kBf16) return stats;  // fp32 and tf32 keep every tensor float32
  std::vector<Node*> old;
  for (const auto& n : g.nodes()) old.push_back(n.get());
  // (source, side) -> index in casts; side is 0 for values computed by nodes and data inputs (one
  // copy for every reader) and 1 + backward for weights (a forward copy and a backward copy).
  std::map<std::pair<Value*, int>, size_t> copy_of;
  std::vector<CastSpec> casts;
  std::map<Node*, std::vector<size_t>> casts_before;
  std::vector<std::pair<Node*, Value*>> replaced;  // (reader, the float32 value it read)
  std::vector<bool> forward_copy;                   // per cast: made in the forward
  for (Node* n : old) {
    if (!is_product(*n)) continue;
    bool any = false;
    for (size_t i = 0; i < 2 && i < n->inputs.size(); ++i) {
      Value* v = n->inputs[i];
      if (!v || v->dtype != DType::kFloat32) continue;
      const bool weight_like = !v->producer && v->kind != ValueKind::kInput && v->kind != ValueKind::kLabel;
      const int side = weight_like ? 1 + static_cast<int>(is_backward_side(*n)) : 0;
      auto [it, fresh] = copy_of.emplace(std::make_pair(v, side), casts.size());
      if (fresh) {
        CastSpec c;
        c.src = v;
        c.dst = g.add_value(v->name + (side == 2 ? "/bf16_bwd" : "/bf16"), DType::kBFloat16, v->dims,
                            ValueKind::kActivation);
        casts.push_back(c);
        casts_before[n].push_back(it->second);
        forward_copy.push_back(n->phase == Phase::kForward || n->phase == Phase::kLoss);
      }
      n->inputs[i] = casts[it->second].dst;
      replaced.emplace_back(n, v);
      any = true;
    }
    if (any) ++stats.products;
  }
  if (casts.empty()) return stats;
  // ReluGrad(dY, Y) only needs Y's sign, which the bfloat16 copy keeps: where a copy of Y exists
  // and is made in the forward (so before the backward), ReluGrad reads it, and float32 Y need not
  // be kept for the backward (kernels/cpu/elementwise.cpp's bfloat16 mask).
  for (Node* n : old)
    if (n->op_type == "ReluGrad" && n->inputs.size() == 2 && n->inputs[1]) {
      auto it = copy_of.find({n->inputs[1], 0});
      if (it == copy_of.end() || !forward_copy[it->second]) continue;
      replaced.emplace_back(n, n->inputs[1]);
      n->inputs[1] = casts[it->second].dst;
      ++stats.relu_grads;
    }
  // The readers now read the copies: consumer lists follow (remove_nodes below reads them).
  for (auto& [n, v] : replaced) {
    if (std::find(n->inputs.begin(), n->inputs.end(), v) == n->inputs.end()) std::erase(v->consumers, n);
    for (Value* in : n->inputs)
      if (in && in->dtype == DType::kBFloat16 && std::find(in->consumers.begin(), in->consumers.end(), n) == in->consumers.end())
        in->consumers.push_back(n);
  }
  // Every node is appended again in order with the casts in front of their first readers, then the
  // originals are removed: the graph stays topological without an insert operation (as in
  // importer/rnn_expand.cpp). Backward nodes' `forward` pointers follow their node.
  std::map<Node*, Node*> moved;
  AttrMap to;
  to.set("to", static_cast<int64_t>(DType::kBFloat16));
  to.set("_precision_cast", int64_t{1});  // is_precision_cast: the stage export looks through it
  for (Node* n : old) {
    if (auto it = casts_before.find(n); it != casts_before.end())
      for (size_t ci : it->second) {
        const CastSpec& c = casts[ci];
        const Phase ph = n->phase == Phase::kForward || n->phase == Phase::kLoss ? Phase::kForward : Phase::kBackward;
        Node* cn = g.add_node("Cast", c.dst->name + "/Cast", {c.src}, {c.dst}, to, ph);
        cn->forward = ph == Phase::kBackward ? n->forward : nullptr;
        cn->since_version = 13;
        ++stats.casts;
      }
    for (Value* v : n->outputs)
      if (v) v->producer = nullptr;
    Node* c = g.add_node(n->op_type, n->name, n->inputs, n->outputs, n->attrs, n->phase);
    c->domain = n->domain;
    c->forward = n->forward;
    c->since_version = n->since_version;
    moved[n] = c;
  }
  for (const auto& n : g.nodes())
    if (n->forward)
      if (auto it = moved.find(n->forward); it != moved.end()) n->forward = it->second;
  std::vector<bool> remove(g.nodes().size(), false);
  for (size_t i = 0; i < old.size(); ++i) remove[i] = true;
  g.remove_nodes(remove);
  const std::string broken = g.broken_link();
  PT_CHECK(broken.empty()) << "--precision left a broken link: " << broken;
  return stats;
}

}  // namespace pt
