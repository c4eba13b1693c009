// GraphCache: warm-up, capture, replay and refusal per key (graph_cache.h).
#include "runtime/exec/graph_cache.h"

#include <utility>

namespace pt {

GraphStats& GraphStats::operator+=(const GraphStats& o) {
  eager_runs += o.eager_runs;
  captures += o.captures;
  replays += o.replays;
  refused += o.refused;
  over_limit += o.over_limit;
  if (first_refusal.empty()) first_refusal = o.first_refusal;
  return *this;
}

std::string GraphStats::summary() const {
  std::string s = std::to_string(captures) + (captures == 1 ? " graph, " : " graphs, ") + std::to_string(replays) +
                  (replays == 1 ? " replay, " : " replays, ") + std::to_string(eager_runs) +
                  (eager_runs == 1 ? " run" : " runs") + " kernel by kernel";
  if (over_limit) s += " (" + std::to_string(over_limit) + " beyond the graph limit)";
  if (refused) s += "; not captured: " + first_refusal + (refused > 1 ? " (and " + std::to_string(refused - 1) + " more)" : "");
  return s;
}

GraphCache::Action GraphCache::next(uint64_t key) {
  Entry& e = entries_[key];
  if (e.graph) {
    ++stats_.replays;
    return Action::kReplay;
  }
  if (e.refused || e.runs < warmup_) {
    ++e.runs;
    ++stats_.eager_runs;
    return Action::kEager;
  }
  if (graphs_ >= max_graphs_) {
    ++stats_.eager_runs;
    ++stats_.over_limit;
    return Action::kEager;
  }
  return Action::kCapture;
}

void GraphCache::add(uint64_t key, std::unique_ptr<DeviceGraph> graph) {
  Entry& e = entries_[key];
  if (!e.graph) ++graphs_;
  e.graph = std::move(graph);
  ++stats_.captures;
}

void GraphCache::refuse(uint64_t key, const std::string& why) {
  Entry& e = entries_[key];
  ++stats_.eager_runs;  // the run at hand, done kernel by kernel
  if (e.refused) return;
  e.refused = true;
  if (e.graph) {
    e.graph.reset();
    --graphs_;
  }
  ++stats_.refused;
  if (stats_.first_refusal.empty()) stats_.first_refusal = why;
}

DeviceGraph* GraphCache::graph(uint64_t key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.graph.get();
}

}  // namespace pt
