// The Plan handed from the partitioner to the runtime: stages with their nodes, parameters and
// boundary tensors, with an analytic cost estimate per stage. This first version builds
// single-stage plans; the cost-model partitioner fills in several stages.
#pragma once

#include <string>
#include <vector>

#include "importer/ir.h"
#include "kernels/registry.h"

namespace pt {

struct StagePlan {
  int index = 0;
  DeviceKind device = DeviceKind::kCpu;
  std::vector<const Node*> nodes;        // forward, loss, backward and update nodes of the stage
  std::vector<const Value*> params;
  int64_t param_count = 0;
  int64_t param_bytes = 0;
  double forward_flops = 0;
  double backward_flops = 0;
  int64_t activation_bytes = 0;          // every non-persistent value computed by the stage
};

struct Plan {
  std::vector<StagePlan> stages;
};

// Multiply-adds counted as 2 FLOPs; elementwise ops as one FLOP per output element.
double node_flops(const Node& n);

// One stage holding the whole training graph.
Plan plan_single_stage(const Graph& g, DeviceKind device);

}  // namespace pt
