// The partition algorithm: contiguous stages of a topological order of the forward nodes (each
// backward and update node goes with its forward node), minimising the bottleneck stage time
// (compute + boundary transfers) subject to each device's memory. Exact for the chosen order
// (dynamic programming); the order keeps branches together.
#pragma once

#include <string>
#include <vector>

#include "partitioner/cost_model.h"
#include "partitioner/plan.h"

namespace pt {

struct PartitionOptions {
  std::vector<DeviceSpec> devices;     // one per stage, in pipeline order (heterogeneous allowed)
  LinkSpec link;                       // between adjacent stages
  Schedule schedule = Schedule::k1F1B;
  WeightMode weights = WeightMode::kSpecTrain;
  int micro_batches = 1;               // GPipe
  int optimizer_state_copies = 1;      // momentum: 1; Adam: 2
  const Profile* profile = nullptr;
  std::vector<std::string> split_at;   // manual: first node name of stages 1..N-1
  std::vector<int> balance;            // manual: forward nodes per stage
};

// The automatic (or, with split_at / balance, the manual) plan. An infeasible memory budget is an
// error naming the stage, how far over it is, and what would fit.
Expected<Plan> partition(const Graph& g, const PartitionOptions& opts);

// Predicted memory of a stage (DESIGN.md section 5) for the schedule and weight mode.
int64_t stage_memory_bytes(const StagePlan& s, int num_stages, const PartitionOptions& opts);

}  // namespace pt
