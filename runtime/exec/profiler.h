// Measured per-node costs for the partitioner (--profile): the training graph runs on the real
// device (warm-up, then the median of repeats), each forward node gets its own time and the time
// of the backward nodes that serve it. Cached as JSON keyed by model hash, batch size, device and a
// fingerprint of the training graph (its nodes, their values' dtypes and shapes); the JSON also lists
// every node's own time ("nodes": name, op, phase, dtype, seconds, the forward node it serves).
#pragma once

#include <string>

#include "importer/ir.h"
#include "kernels/registry.h"
#include "partitioner/cost_model.h"

namespace pt {

struct ProfileOptions {
  int warmup = 2;
  int repeats = 5;
  std::string cache_path;  // empty: no cache
  std::string key;         // model hash + batch + device (profile_graph adds the graph's fingerprint);
                           // a cache with another key is ignored
};

// Runs the whole training graph `warmup + repeats` times on random inputs and valid labels (the
// parameters move: the updates run at a tiny rate) and gives every node's median time of the
// repeats, by node id. The profile and the cost model's calibration both time with it.
Expected<std::vector<double>> median_node_seconds(const Graph& g, DeviceKind device, int warmup, int repeats);

// Runs the whole training graph (on random inputs and valid labels) and times every node.
// The parameters move during profiling (the updates run); the caller's graph is not modified.
Expected<Profile> profile_graph(const Graph& g, DeviceKind device, const ProfileOptions& opts);

}  // namespace pt
