// The weight-layout cache (kernels/weight_cache.h): versions, the process-wide switches, entries.
#include "kernels/weight_cache.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/status.h"

namespace pt {
namespace {

std::atomic<uint64_t> g_version{0};
std::atomic<uint64_t> g_hits{0}, g_reorders{0};

bool env_flag(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && std::strcmp(e, "0") != 0;
}

std::atomic<int>& policy_slot() {
  static std::atomic<int> p{[] {
    Expected<WeightCachePolicy> e = weight_cache_policy_from_env();
    PT_CHECK(e.has_value()) << e.status().message();
    return static_cast<int>(*e);
  }()};
  return p;
}

std::atomic<bool>& verify_slot() {
  static std::atomic<bool> v{env_flag("PIPETRAIN_WEIGHT_CACHE_VERIFY")};
  return v;
}

std::atomic<bool>& ignore_slot() {
  static std::atomic<bool> v{env_flag("PIPETRAIN_TEST_WEIGHT_CACHE_IGNORE_VERSIONS")};
  return v;
}

}  // namespace

Expected<WeightCachePolicy> weight_cache_policy_from_env() {
  const char* e = std::getenv("PIPETRAIN_WEIGHT_CACHE");
  if (!e || !*e || std::strcmp(e, "auto") == 0) return WeightCachePolicy::kAuto;
  if (std::strcmp(e, "off") == 0) return WeightCachePolicy::kOff;
  if (std::strcmp(e, "all") == 0) return WeightCachePolicy::kAll;
  return invalid_input(std::string("PIPETRAIN_WEIGHT_CACHE=") + e + ": not one of auto, off, all");
}

uint64_t new_weight_version() { return g_version.fetch_add(1, std::memory_order_relaxed) + 1; }

WeightCachePolicy weight_cache_policy() { return static_cast<WeightCachePolicy>(policy_slot().load()); }
void set_weight_cache_policy(WeightCachePolicy p) { policy_slot().store(static_cast<int>(p)); }
bool weight_cache_verify() { return verify_slot().load(std::memory_order_relaxed); }
void set_weight_cache_verify(bool on) { verify_slot().store(on); }
bool weight_cache_ignore_versions_for_tests() { return ignore_slot().load(std::memory_order_relaxed); }
void set_weight_cache_ignore_versions_for_tests(bool on) { ignore_slot().store(on); }

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
