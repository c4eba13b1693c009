// Hybrid parallelism's layouts: a device count D split into N pipeline stages x R data-parallel
// replicas (N x R = D), each partitioned and simulated, and the fastest that fits chosen
// (--replicas auto, --whatif, the reports).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "partitioner/partition.h"
#include "partitioner/simulator.h"

namespace pt {

// The partition options of `stages` stages with `replicas` replicas (devices, link, schedule...).
using LayoutOptionsFn = std::function<Expected<PartitionOptions>(int stages, int replicas)>;

// Every factorization N x R = `devices`, N from `devices` down to 1 (D x 1 is the pure pipeline,
// 1 x D pure data parallelism): partition(g, options_for(N, R)) and simulate(plan, 4 N + 4).
// A layout whose partition fails (more stages than forward nodes, memory) is listed with fits
// false and the reason; an error of options_for is returned. Exactly one layout that fits is
// chosen: the highest simulated samples/s (the first in this order on a tie, so the fewer
// replicas); none when none fits. `plans`, when given, receives each layout's plan (empty when it
// does not fit), in the same order.
Expected<std::vector<LayoutOption>> evaluate_layouts(const Graph& g, int devices, const LayoutOptionsFn& options_for,
                                                     std::vector<Plan>* plans = nullptr);

// The index of the chosen layout, or -1.
int chosen_layout(const std::vector<LayoutOption>& layouts);

// "pipeline 4x1", "hybrid 2x2", "data-parallel 1x4" (stages x replicas).
std::string layout_name(int stages, int replicas);

}  // namespace pt
