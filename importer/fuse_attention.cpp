// Attention fusion: exporters write scaled dot-product attention as MatMul(Q, Kt), a Mul or Div by a
// constant (on Q or on the scores), an optional mask (Add of a float mask, or masked_fill's Where with
// a constant fill), Softmax over the last axis and MatMul with V. Run as such, a training step keeps
// the [T, S] probabilities of every head for SoftmaxGrad and the second MatMul's gradient; the fused
// FusedAttention (domain "pipetrain") keeps one number per row (the softmax normaliser) and its
// backward recomputes the probabilities (kernels/cpu/attention.cpp). The fused node takes the place of the last MatMul.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "importer/fuse.h"

namespace pt {
namespace {

bool is_graph_output(const Graph& g, const Value* v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

// The producer of v when it is a default-domain `op` and v is read by one node only (the pattern's
// next node) and is no graph output.
Node* sole_use_producer(const Graph& g, const Value* v, std::initializer_list<const char*> ops) {
  if (!v || !v->producer || v->consumers.size() != 1 || is_graph_output(g, v)) return nullptr;
  Node* p = v->producer;
  if (!p->domain.empty() || p->outputs.size() != 1) return nullptr;
  for (const char* op : ops)
    if (p->op_type == op) return p;
  return nullptr;
}

// A float constant with one element: its value.
std::optional<double> scalar_constant(const Value* v) {
  if (!v || v->producer || v->kind != ValueKind::kConstant || !v->data || v->data->size() != 1) return std::nullopt;
  if (!is_floating(v->data->dtype())) return std::nullopt;
  return v->data->get_double(0);
}

// Mul(x, c), Mul(c, x) or Div(x, c) by a finite, non-zero scalar constant c: x and the factor.
std::optional<std::pair<Value*, double>> scaled(const Node& n) {
  if (n.inputs.size() != 2 || !n.inputs[0] || !n.inputs[1]) return std::nullopt;
  std::optional<double> c;
  Value* x = nullptr;
  if ((c = scalar_constant(n.inputs[1])))
    x = n.inputs[0];
  else if (n.op_type == "Mul" && (c = scalar_constant(n.inputs[0])))
    x = n.inputs[1];
  if (!x || !std::isfinite(*c) || *c == 0) return std::nullopt;
  return std::make_pair(x, n.op_type == "Div" ? 1.0 / *c : *c);
}

// Whether v is computed from a trainable parameter (a mask that would need a gradient).
bool depends_on_parameter(const Value* v, std::set<const Value*>& seen) {
  if (!v || !seen.insert(v).second) return false;
  if (v->kind == ValueKind::kParameter) return true;
  if (!v->producer) return false;
  for (const Value* in : v->producer->inputs)
    if (depends_on_parameter(in, seen)) return true;
  return false;
}

}  // namespace

int fuse_attention(Graph& g, bool allow_dropout) {
  std::vector<bool> remove(g.nodes().size(), false);
  int fused = 0;
  for (const auto& up : g.nodes()) {
    Node* softmax = up.get();
    if (softmax->op_type != "Softmax" || !softmax->domain.empty() || remove[softmax->id]) continue;
    if (softmax->inputs.size() != 1 || softmax->outputs.size() != 1 || !softmax->inputs[0] || !softmax->outputs[0]) continue;
    Value* p = softmax->outputs[0];
    const Dims& sd = p->dims;
    const int64_t rank = static_cast<int64_t>(sd.size());
    const int64_t axis = softmax->attrs.get_int("axis", -1);
    if (rank < 2 || (axis != rank - 1 && axis != -1)) continue;
    if (!is_floating(p->dtype)) continue;
    // P -> [Dropout] -> MatMul(P, V), P read by nothing else.
    if (p->consumers.size() != 1 || is_graph_output(g, p)) continue;
    Node* mm2 = p->consumers[0];
    Node* dropout = nullptr;
    if (mm2->op_type == "Dropout" && mm2->domain.empty() && allow_dropout) {
      dropout = mm2;
      const float ratio = dropout->attrs.get_float("ratio", 0.5f);
      // Training mode with 0 < ratio < 1 (identity Dropouts went first), its mask read by nobody,
      // the step counter as its second input (importer/onnx_import.cpp lower_random_ops).
      Value* dp = dropout->outputs.empty() ? nullptr : dropout->outputs[0];
      const bool mask_unread = dropout->outputs.size() < 2 || !dropout->outputs[1] ||
                               (dropout->outputs[1]->consumers.empty() && !is_graph_output(g, dropout->outputs[1]));
      if (dropout->attrs.get_int("_training", 0) == 0 || !(ratio > 0.0f && ratio < 1.0f) || !dp || !mask_unread ||
          dropout->inputs.size() != 2 || dropout->inputs[0] != p || !dropout->inputs[1] ||
          dropout->inputs[1]->dtype != DType::kInt64 || dp->consumers.size() != 1 || is_graph_output(g, dp))
        continue;
      mm2 = dp->consumers[0];
      p = dp;  // the MatMul reads the dropped probabilities
    }
    if (mm2->op_type != "MatMul" || !mm2->domain.empty() || mm2->inputs.size() != 2 || mm2->inputs[0] != p ||
        mm2->inputs[1] == p || mm2->outputs.size() != 1 || !mm2->outputs[0])
      continue;
    p = softmax->outputs[0];
    Value* v = mm2->inputs[1];
    std::vector<Node*> chain = {softmax};
    if (dropout) chain.push_back(dropout);
    // Backwards from the Softmax input: [mask], [scale], MatMul(Q, Kt).
    Value* s = softmax->inputs[0];
    Value* mask = nullptr;
    int64_t mask_kind = 0;
    double fill = 0;
    double scale = 1;
    if (Node* m = sole_use_producer(g, s, {"Add", "Where"})) {
      if (m->op_type == "Add" && m->inputs.size() == 2 && m->inputs[0] && m->inputs[1] && m->inputs[0] != m->inputs[1]) {
        // The scores are the operand with the scores' dims made by a MatMul or a scale.
        for (int side = 0; side < 2 && !mask; ++side) {
          Value* a = m->inputs[side];
          Value* b = m->inputs[1 - side];
          if (a->dims != sd || !sole_use_producer(g, a, {"MatMul", "Mul", "Div"})) continue;
          if (b->dtype != p->dtype) continue;
          s = a;
          mask = b;
          mask_kind = 1;
        }
      } else if (m->op_type == "Where" && m->inputs.size() == 3 && m->inputs[0] && m->inputs[0]->dtype == DType::kBool) {
        const std::optional<double> f = scalar_constant(m->inputs[1]);
        if (f && m->inputs[2] && m->inputs[2]->dims == sd && m->inputs[0] != m->inputs[2]) {
          s = m->inputs[2];
          mask = m->inputs[0];
          mask_kind = 2;
          fill = *f;
        }
      }
      if (!mask) continue;
      Dims b;
      if (mask->dims.size() > sd.size() || !broadcast_dims(mask->dims, sd, &b) || b != sd) continue;
      std::set<const Value*> seen;
      if (depends_on_parameter(mask, seen)) continue;
      chain.push_back(m);
    }
    if (Node* sc = sole_use_producer(g, s, {"Mul", "Div"})) {
      const auto f = scaled(*sc);
      if (!f || f->first->dims != sd) continue;
      scale *= f->second;
      s = f->first;
      chain.push_back(sc);
    }
    Node* mm1 = sole_use_producer(g, s, {"MatMul"});
    if (!mm1 || mm1->inputs.size() != 2 || !mm1->inputs[0] || !mm1->inputs[1]) continue;
    chain.push_back(mm1);
    Value* q = mm1->inputs[0];
    Value* kt = mm1->inputs[1];
    if (Node* sq = sole_use_producer(g, q, {"Mul", "Div"})) {  // the scale on Q (nn.MultiheadAttention)
      const auto f = scaled(*sq);
      if (f && f->first->dims == q->dims && f->first != kt) {
        scale *= f->second;
        q = f->first;
        chain.push_back(sq);
      }
    }
    // Q [B..., T, Dk], Kt [B..., Dk, S], V [B..., S, Dv], one batch shape, one float dtype.
    const Dims &qd = q->dims, &kd = kt->dims, &vd = v->dims;
    if (qd.size() != sd.size() || kd.size() != sd.size() || vd.size() != sd.size()) continue;
    if (!std::equal(qd.begin(), qd.end() - 2, sd.begin()) || !std::equal(kd.begin(), kd.end() - 2, sd.begin()) ||
        !std::equal(vd.begin(), vd.end() - 2, sd.begin()))
      continue;
    if (qd[rank - 2] != sd[rank - 2] || kd[rank - 1] != sd[rank - 1] || kd[rank - 2] != qd[rank - 1] ||
        vd[rank - 2] != sd[rank - 1])
      continue;
    if (q->dtype != p->dtype || kt->dtype != p->dtype || v->dtype != p->dtype) continue;
    if (!std::isfinite(static_cast<float>(scale))) continue;

    // The last MatMul becomes the FusedAttention; the rest of the chain goes.
    for (Node* n : chain) remove[n->id] = true;
    for (Value* in : mm2->inputs) std::erase(in->consumers, mm2);
    mm2->op_type = "FusedAttention";
    mm2->domain = "pipetrain";
    mm2->since_version = 1;
    mm2->inputs = {q, kt, v};
    if (mask || dropout) mm2->inputs.push_back(mask);
    if (dropout) mm2->inputs.push_back(dropout->inputs[1]);  // the step counter
    for (Value* in : mm2->inputs)
      if (in) in->consumers.push_back(mm2);
    const std::string name = g.unique_name(softmax->name + "/fused_attention");
    Dims ld(qd.begin(), qd.end() - 1);
    Value* lse = g.add_value(name + "/inv_sum", p->dtype, ld, ValueKind::kActivation);
    lse->producer = mm2;
    mm2->outputs.push_back(lse);
    mm2->attrs = AttrMap{};
    mm2->attrs.set("scale", static_cast<float>(scale));
    mm2->attrs.set("mask_kind", mask_kind);
    mm2->attrs.set("mask_fill", static_cast<float>(fill));
    if (dropout) {  // the Dropout's own ratio and seed: the same masks as the unfused graph's
      mm2->attrs.set("dropout_ratio", dropout->attrs.get_float("ratio", 0.5f));
      mm2->attrs.set("dropout_seed", dropout->attrs.get_int("seed", 0));
    }
    mm2->name = name;
    ++fused;
  }
  if (fused) g.remove_nodes(remove);
  return fused;
}

}  // namespace pt
