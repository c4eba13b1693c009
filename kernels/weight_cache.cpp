// The weight-layout cache (kernels/weight_cache.h): versions, counters, entries.
#include "kernels/weight_cache.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/status.h"

namespace pt {
namespace {

// Process state, not switches: versions must be unique across every executor of the process, and
// the counters only count.
std::atomic<uint64_t> g_version{0};
std::atomic<uint64_t> g_hits{0}, g_reorders{0};

}  // namespace

const char* weight_cache_policy_name(WeightCachePolicy p) {
  switch (p) {
    case WeightCachePolicy::kAuto: return "auto";
    case WeightCachePolicy::kOff: return "off";
    case WeightCachePolicy::kAll: return "all";
  }
  return "?";
}

uint64_t new_weight_version() { return g_version.fetch_add(1, std::memory_order_relaxed) + 1; }

WeightCacheStats weight_cache_stats() { return {g_hits.load(), g_reorders.load()}; }

WeightCache::~WeightCache() { clear(); }

void WeightCache::clear() {
  for (auto& [src, list] : map_)
    for (Entry& e : list) std::free(e.data);
  map_.clear();
  bytes_ = 0;
  entries_ = 0;
}

WeightCache::Entry* WeightCache::entry(const void* src, const std::vector<int64_t>& layout, size_t bytes) {
  std::vector<Entry>& list = map_[src];
  for (Entry& e : list)
    if (e.layout == layout) {
      if (e.bytes < bytes) {  // the same layout key always has the same size; kept for safety
        std::free(e.data);
        bytes_ -= e.bytes;
        e.bytes = 0;
        e.version = 0;
        e.data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        PT_CHECK(e.data) << "out of memory for a " << bytes << "-byte cached weight layout";
        e.bytes = bytes;
        bytes_ += bytes;
      }
      return &e;
    }
  Entry e;
  e.layout = layout;
  e.data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  PT_CHECK(e.data) << "out of memory for a " << bytes << "-byte cached weight layout";
  e.bytes = bytes;
  bytes_ += bytes;
  ++entries_;
  list.push_back(std::move(e));
  return &list.back();
}

void WeightCache::hit() {
  ++hits_;
  g_hits.fetch_add(1, std::memory_order_relaxed);
}

void WeightCache::reordered() {
  ++reorders_;
  g_reorders.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace pt
