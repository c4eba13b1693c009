// Which runs of an executor are CUDA graphs (ExecSettings::cuda_graphs): the bookkeeping, without
// CUDA, so that it is tested on any machine.
//
// A run is known by its key (Executor: a hash of the steps it runs and of every pointer they read
// or write, so a pass that selected other storages, or another subset of the nodes, is another
// key). The first `warmup` runs of a key run kernel by kernel: they choose the convolution
// algorithms, create the library handles and fill the allocator's caches, none of which may
// happen inside a capture. The next run is captured (and then launched); every later one replays
// the graph. A key whose capture failed, or that cannot be captured (a node on the host
// fallback), runs kernel by kernel for good, and the first reason is kept for the report. At most
// `max_graphs` graphs per executor; runs of further keys stay kernel by kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "kernels/device.h"

namespace pt {

struct GraphStats {
  int64_t eager_runs = 0;   // runs kernel by kernel (warm-up, refused keys, keys over the limit)
  int64_t captures = 0;     // graphs made
  int64_t replays = 0;      // launches of a graph made earlier
  int64_t refused = 0;      // keys that run kernel by kernel for good
  int64_t over_limit = 0;   // runs of keys beyond max_graphs
  std::string first_refusal;  // why the first refused key was refused
  GraphStats& operator+=(const GraphStats& o);
  // "4 graphs, 1192 replays, 8 runs kernel by kernel" (+ "; not captured: <reason>").
  std::string summary() const;
};

class GraphCache {
 public:
  enum class Action { kEager, kCapture, kReplay };
  explicit GraphCache(int warmup = 1, size_t max_graphs = 64) : warmup_(warmup), max_graphs_(max_graphs) {}

  // What to do for a run with this key (counted in the stats as that action).
  Action next(uint64_t key);
  // The graph of a kCapture run, now made; the following runs of the key replay it.
  void add(uint64_t key, std::unique_ptr<DeviceGraph> graph);
  // The key runs kernel by kernel from now on (its capture failed, or it cannot be captured),
  // starting with the run at hand (counted as such).
  void refuse(uint64_t key, const std::string& why);
  // The graph of a kReplay run.
  DeviceGraph* graph(uint64_t key) const;
  size_t graphs() const { return graphs_; }
  const GraphStats& stats() const { return stats_; }

 private:
  struct Entry {
    int runs = 0;  // kernel-by-kernel runs so far
    bool refused = false;
    std::unique_ptr<DeviceGraph> graph;
  };
  int warmup_;
  size_t max_graphs_;
  size_t graphs_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  GraphStats stats_;
};

}  // namespace pt
