// The intermediate representation every stage hands over: a Graph of Nodes and Values with static
// shapes. A node knows its Phase and the forward node it serves; nothing is decided from names.
// This header holds no ONNX types, so the runtime and partitioner include it cheaply.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/attribute.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace pt {

enum class Phase { kForward, kLoss, kBackward, kUpdate };
const char* phase_name(Phase p);
// True for the ops whose kernel is a byte copy of input 0 into output 0: the executor's alias
// candidates (runtime/exec/executor.h, plan_memory), free in the calibrated cost model.
bool is_copy_op(const std::string& op_type);

enum class ValueKind {
  kActivation,  // computed by a node
  kInput,       // fed by the data loader (model input)
  kLabel,       // fed by the data loader (targets for the loss)
  kParameter,   // trainable initializer
  kConstant,    // initializer, folded value, or frozen parameter: read-only
  kState,       // optimizer state (momentum), persistent across steps
  kHyper,       // scalar set by the runtime each step (learning rate)
};
const char* value_kind_name(ValueKind k);

struct Node;
enum class DeviceKind;  // kernels/registry.h

struct Value {
  int id = -1;
  std::string name;
  DType dtype = DType::kUndefined;
  Dims dims;
  ValueKind kind = ValueKind::kActivation;
  Node* producer = nullptr;
  std::vector<Node*> consumers;
  // Initial contents for kParameter / kConstant / kState values.
  std::shared_ptr<HostTensor> data;
  bool from_initializer = false;  // an initializer or Constant-node weight of the source model (exported)

  bool is_constant() const { return kind == ValueKind::kConstant; }
  int64_t size() const { return numel(dims); }
  size_t bytes() const { return static_cast<size_t>(size()) * dtype_size(dtype); }
};

struct Node {
  int id = -1;
  std::string name;
  std::string op_type;
  std::string domain;       // "" for ONNX's default domain, "pipetrain" for internal ops
  std::vector<Value*> inputs;   // nullptr for an absent optional input
  std::vector<Value*> outputs;  // nullptr for an unused optional output
  AttrMap attrs;
  Phase phase = Phase::kForward;
  Node* forward = nullptr;  // for backward nodes: the forward node whose gradient this computes
  int since_version = 0;    // opset version of the op definition (forward nodes from ONNX)

  std::string describe() const;  // "node 'fc1' (Gemm)"
  // The dtype its kernel is looked up with (KernelEntry::dtype): its first input's, float32 for a
  // node without inputs.
  DType kernel_dtype() const { return inputs.empty() || !inputs[0] ? DType::kFloat32 : inputs[0]->dtype; }
  // True when this node's kernel on `device` runs the CPU kernel on host copies (the CUDA host
  // fallback, for its op and dtype or for its attributes: kernels/registry.h's runs_on_host).
  bool runs_on_host(DeviceKind device) const;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Creates a value; the name is made unique when already taken.
  Value* add_value(const std::string& name, DType dtype, Dims dims, ValueKind kind);
  Value* find_value(const std::string& name) const;
  // Appends a node (nodes stay in topological order: inputs must already exist).
  Node* add_node(const std::string& op_type, const std::string& name, std::vector<Value*> inputs,
                 std::vector<Value*> outputs, AttrMap attrs = {}, Phase phase = Phase::kForward);
  // Removes nodes whose `remove` flag is set, fixing consumer lists. Values stay.
  void remove_nodes(const std::vector<bool>& remove);
  // "" when every link is consistent: a value's producer is a node of the graph that lists it
  // among its outputs, each of its consumers a node of the graph that lists it among its inputs,
  // and a backward node's `forward` a node of the graph; else the first broken link, described.
  // Passes that rewire nodes check it (a value left pointing at a removed node is a
  // use-after-free for whoever reads it later: the memory planner reads every value's producer).
  std::string broken_link() const;
  // Every node that reads `from` reads `to` instead (consumer lists follow); graph outputs are not
  // touched.
  void replace_uses(Value* from, Value* to);
  std::string unique_name(const std::string& base) const;

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  std::vector<Value*> values_of_kind(ValueKind k) const;

  std::vector<Value*> inputs;   // model inputs (kInput)
  std::vector<Value*> outputs;  // model outputs
  Value* loss = nullptr;        // scalar training loss, once attached
  Value* rng_step = nullptr;    // int64 scalar (kHyper): the step (Dropout masks); -1 = evaluation pass
  int64_t opset = 0;            // default-domain opset of the source model

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::string, Value*> by_name_;
};

}  // namespace pt
