// The stage layout of a plan: for every stage what it owns (parameters and their update nodes,
// optimizer state, model state), what it keeps between passes, what it reads from the data, and
// every value that crosses a cut (activations downstream, gradients upstream, shared weights from
// their owner). Computed once from the plan's node lists and the training graph; the partition
// report, stage export and the runtime all read this one answer.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/status.h"
#include "importer/ir.h"

namespace pt {

struct Plan;

// Values one stage sends another for every pass (ascending value id).
struct ValueFlow {
  int from = 0, to = 0;
  std::vector<const Value*> values;
};

// Shared weights an owner stage sends a reader stage for one kind of pass (ascending value id):
// 1F1B serves the reader's forward and backward passes over separate links (`backward`); GPipe
// one version per mini-batch for both. `slots`: the messages its link holds (shared_link_slots).
struct WeightFlow {
  int owner = 0, reader = 0;
  bool backward = false;
  std::vector<const Value*> values;
  int slots = 2;
};

// One stage of the layout. Every list is in a fixed order (the update nodes' order for the
// parameters, ascending value id elsewhere), so that every process and every consumer agrees.
struct StageLayoutStage {
  int index = 0;
  std::vector<const Node*> nodes;                     // the plan's node list (what this layout is of)
  std::vector<const Value*> params;                   // parameters this stage updates (it owns them)
  std::vector<const Node*> updates;                   // their update nodes
  std::vector<const Value*> grads;                    // their gradients (the updates' input 1)
  std::vector<std::vector<const Value*>> opt_state;   // their optimizer state (the updates' kState inputs)
  std::vector<const Value*> state;                    // model state its nodes use (BatchNorm statistics)
  std::vector<const Value*> saved;                    // kept from a forward until its backward
  // What the stage keeps per pass instead when it recomputes its forward before the backward
  // (--recompute): the values its nodes read that its forward cannot recompute, i.e. the data
  // inputs, the labels and the activations of other stages' forwards.
  std::vector<const Value*> recompute_saved;
  std::vector<const Value*> recv, send;               // activations from / to other stages (all flows)
  std::vector<const Value*> shared;                   // parameters owned by an earlier stage it reads
  bool reads_input = false, reads_labels = false;     // the first data input; the labels
  std::vector<std::pair<size_t, const Value*>> more_inputs;  // further data inputs it reads (index into Graph::inputs - 1)
};

struct StageLayout {
  std::vector<StageLayoutStage> stages;
  std::vector<ValueFlow> activations;  // forward values, ordered by (from, to)
  std::vector<ValueFlow> gradients;    // backward values (from > to), ordered by (from, to)
  std::vector<WeightFlow> weights;     // ordered by (owner, reader, backward)
  // Whether this is the layout of `plan`'s current node lists (a plan edited by hand after its
  // layout was made is not).
  bool describes(const Plan& plan) const;
};

// The layout of `plan` over training graph `g` (plan.schedule decides the weight flows). Errors,
// one line each (kUnsupported unless said): a shared weight read by a stage before the one that
// updates it; model state used by two stages; an activation that would flow to an earlier stage or
// a gradient to a later one; a node in two stages or (kInternal) in none.
Expected<StageLayout> build_stage_layout(const Graph& g, const Plan& plan);

// Builds plan->layout and sets every stage's recv, send and shared_params from it (what the
// reports print). On error plan->layout_status holds it too, so the runtime refuses the plan
// with the same message.
Status layout_plan(const Graph& g, Plan* plan);

}  // namespace pt
