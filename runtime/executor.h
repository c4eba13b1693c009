// Runs a node list of a Graph on one device. Every value gets its storage once, at creation; the
// kernel of every node is resolved once; a step then only calls kernels (no allocation). With a
// memory plan, values whose lifetimes in the node order do not overlap share one arena.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "importer/ir.h"
#include "kernels/registry.h"

namespace pt {

// Where each value of a node list lives under a memory plan. A value is planned (shares the
// arena) when a node of the list computes it, every consumer is in the list, and it is none of:
// a model input or output, the graph's loss, a value with initial data (parameters, constants,
// state), or one of the caller's `keep` values. Its lifetime is [position of its producer,
// position of its last consumer] in the list, both ends included, so a node's output never shares
// storage with its inputs. Two planned values whose lifetimes overlap never overlap in the arena.
struct MemoryPlan {
  static constexpr int64_t kOwn = -1;
  std::vector<int64_t> offset;  // [value id]: byte offset into the arena, or kOwn (own buffer)
  std::vector<int> first, last;  // [value id]: lifetime in list positions (planned values only)
  size_t arena_bytes = 0;       // the planned peak: size of the shared arena
  size_t planned_bytes = 0;     // what the planned values would take without sharing
  size_t planned_values = 0;

  bool planned(const Value* v) const {
    return v && static_cast<size_t>(v->id) < offset.size() && offset[v->id] != kOwn;
  }
};

// Offsets are multiples of kPlanAlignment (bytes), the arena's alignment.
constexpr size_t kPlanAlignment = 64;

// The plan for `nodes` (in run order) of `g`; `keep`: values the caller reads or writes between
// runs (values saved for a later backward pass, sent to another stage, read after the step).
MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& nodes, const std::vector<const Value*>& keep);

struct ExecutorOptions {
  bool plan_memory = false;         // share storage between values with disjoint lifetimes
  std::vector<const Value*> keep;   // never shared (see plan_memory)
};

class Executor {
 public:
  // Prepares `nodes` (a subset of g's nodes, in order; all nodes when empty) on `device`.
  static Expected<std::unique_ptr<Executor>> create(const Graph& g, DeviceKind device,
                                                    std::vector<const Node*> nodes = {},
                                                    const ExecutorOptions& opts = {});

  // The buffer of a value that is not planned (aborts for a planned one: pass it in
  // ExecutorOptions::keep to read it between runs). Parameters, constants and state start from
  // Value::data.
  HostTensor& tensor(const Value* v);
  const HostTensor& tensor(const Value* v) const;
  // The storage of any value (planned ones: valid only until a later node reuses it).
  TensorView view(const Value* v) const;

  // Runs the prepared nodes whose phase passes `filter` (all when null), in order.
  Status run(const std::function<bool(Phase)>& filter = nullptr);
  // Runs every prepared node once, adding each node's wall time (seconds) to seconds[node->id].
  Status run_timed(std::vector<double>* seconds);
  size_t node_count() const { return steps_.size(); }
  // The memory plan (all values kOwn when created without one).
  const MemoryPlan& plan() const { return plan_; }

 private:
  struct Step {
    const Node* node;
    KernelFn fn;
    std::vector<TensorView> inputs;
    std::vector<TensorView> outputs;
  };
  struct FreeArena {
    void operator()(void* p) const;
  };
  Executor() = default;
  std::vector<HostTensor> bufs_;  // [value id]; empty for planned values
  // [value id]: has storage (used by the node list, kept, or asked for through tensor() since).
  std::vector<char> allocated_;
  std::unique_ptr<void, FreeArena> arena_;
  MemoryPlan plan_;
  std::vector<Step> steps_;
};

}  // namespace pt
