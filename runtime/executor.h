// Runs a node list of a Graph on one device. Every value gets its buffer once, at creation; the
// kernel of every node is resolved once; a step then only calls kernels (no allocation).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "importer/ir.h"
#include "kernels/registry.h"

namespace pt {

class Executor {
 public:
  // Prepares `nodes` (a subset of g's nodes, in order; all nodes when empty) on `device`.
  static Expected<std::unique_ptr<Executor>> create(const Graph& g, DeviceKind device,
                                                    std::vector<const Node*> nodes = {});

  // The buffer of a value. Parameters, constants and state start from Value::data.
  HostTensor& tensor(const Value* v) { return bufs_.at(v->id); }
  const HostTensor& tensor(const Value* v) const { return bufs_.at(v->id); }

  // Runs the prepared nodes whose phase passes `filter` (all when null), in order.
  Status run(const std::function<bool(Phase)>& filter = nullptr);
  // Runs every prepared node once, adding each node's wall time (seconds) to seconds[node->id].
  Status run_timed(std::vector<double>* seconds);
  size_t node_count() const { return steps_.size(); }

 private:
  struct Step {
    const Node* node;
    KernelFn fn;
    std::vector<TensorView> inputs;
    std::vector<TensorView> outputs;
  };
  Executor() = default;
  std::vector<HostTensor> bufs_;
  std::vector<Step> steps_;
};

}  // namespace pt
