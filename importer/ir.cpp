// Graph construction and bookkeeping for the IR.
#include "importer/ir.h"

#include <algorithm>
#include <unordered_set>

#include "kernels/registry.h"

namespace pt {

bool is_copy_op(const std::string& op_type) {
  return op_type == "Identity" || op_type == "Reshape" || op_type == "Flatten" || op_type == "Squeeze" ||
         op_type == "Unsqueeze";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kLoss: return "loss";
    case Phase::kBackward: return "backward";
    case Phase::kUpdate: return "update";
  }
  return "?";
}

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::kActivation: return "activation";
    case ValueKind::kInput: return "input";
    case ValueKind::kLabel: return "label";
    case ValueKind::kParameter: return "parameter";
    case ValueKind::kConstant: return "constant";
    case ValueKind::kState: return "state";
    case ValueKind::kHyper: return "hyper";
  }
  return "?";
}

bool Node::runs_on_host(DeviceKind device) const {
  std::vector<Dims> in, out;
  for (const Value* v : inputs) in.push_back(v ? v->dims : Dims{});
  for (const Value* v : outputs) out.push_back(v ? v->dims : Dims{});
  return pt::runs_on_host(op_type, device, kernel_dtype(), attrs, in, out);
}

std::string Node::describe() const {
  return "node '" + name + "' (" + op_type + ")";
}

std::string Graph::unique_name(const std::string& base) const {
  if (!by_name_.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string n = base + "." + std::to_string(i);
    if (!by_name_.count(n)) return n;
  }
}

Value* Graph::add_value(const std::string& name, DType dtype, Dims dims, ValueKind kind) {
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->name = unique_name(name.empty() ? std::string("v").append(std::to_string(v->id)) : name);
  v->dtype = dtype;
  v->dims = std::move(dims);
  v->kind = kind;
  Value* p = v.get();
  by_name_[p->name] = p;
  values_.push_back(std::move(v));
  return p;
}

Value* Graph::find_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Node* Graph::add_node(const std::string& op_type, const std::string& name, std::vector<Value*> inputs,
                      std::vector<Value*> outputs, AttrMap attrs, Phase phase) {
  auto n = std::make_unique<Node>();
  n->id = static_cast<int>(nodes_.size());
  n->name = name.empty() ? op_type + "_" + std::to_string(n->id) : name;
  n->op_type = op_type;
  n->inputs = std::move(inputs);
  n->outputs = std::move(outputs);
  n->attrs = std::move(attrs);
  n->phase = phase;
  Node* p = n.get();
  for (Value* v : p->inputs)
    if (v) v->consumers.push_back(p);
  for (Value* v : p->outputs)
    if (v) {
      PT_CHECK(v->producer == nullptr) << "value '" << v->name << "' already has a producer";
      v->producer = p;
    }
  nodes_.push_back(std::move(n));
  return p;
}

void Graph::remove_nodes(const std::vector<bool>& remove) {
  PT_CHECK(remove.size() == nodes_.size());
  std::vector<std::unique_ptr<Node>> kept;
  for (auto& n : nodes_) {
    if (remove[n->id]) {
      for (Value* v : n->inputs)
        if (v) std::erase(v->consumers, n.get());
      for (Value* v : n->outputs)
        if (v && v->producer == n.get()) v->producer = nullptr;
    } else {
      kept.push_back(std::move(n));
    }
  }
  nodes_ = std::move(kept);
  for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i]->id = static_cast<int>(i);
}

std::string Graph::broken_link() const {
  std::unordered_set<const Node*> live;
  for (const auto& n : nodes_) live.insert(n.get());
  auto has = [](const std::vector<Value*>& vs, const Value* v) { return std::find(vs.begin(), vs.end(), v) != vs.end(); };
  for (const auto& up : values_) {
    const Value* v = up.get();
    if (v->producer && (!live.count(v->producer) || !has(v->producer->outputs, v)))
      return "value '" + v->name + "': its producer " +
             (live.count(v->producer) ? "'" + v->producer->name + "' does not output it" : "is not a node of the graph");
    for (const Node* c : v->consumers)
      if (!live.count(c) || !has(c->inputs, v))
        return "value '" + v->name + "': a consumer " + (live.count(c) ? "'" + c->name + "' does not read it" : "is not a node of the graph");
  }
  for (const auto& n : nodes_)
    if (n->forward && !live.count(n->forward)) return "node '" + n->name + "': its forward node is not a node of the graph";
  return "";
}

void Graph::replace_uses(Value* from, Value* to) {
  for (Node* c : from->consumers) {
    for (Value*& in : c->inputs)
      if (in == from) in = to;
    to->consumers.push_back(c);
  }
  from->consumers.clear();
}

std::vector<Value*> Graph::values_of_kind(ValueKind k) const {
  std::vector<Value*> out;
  for (auto& v : values_)
    if (v->kind == k) out.push_back(v.get());
  return out;
}

}  // namespace pt
