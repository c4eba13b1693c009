// Weights converted to a kernel's own layout (oneDNN's blocked convolution weights), kept across
// kernel calls while the weight is unchanged. A weight's version says "unchanged": the executor
// that owns the weight's buffer gives it a new version, drawn from one process-wide counter, at
// every write (runtime/exec/executor.h), and passes the versions of a node's inputs in KernelCall. A
// copy is reused only for the same buffer, layout and version; version 0 means "not a versioned
// weight" and is never cached. One cache per executor: an executor runs on one thread at a time,
// so the cache takes no lock, and it dies with the buffers it copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace pt {

// A version no buffer has had before (never 0). Thread-safe.
uint64_t new_weight_version();

// Which executors cache (ExecSettings::weight_cache, --weight-cache): kAuto: those the runtime
// marks (one weight version serving several passes: GPipe's micro-batches, validation); kOff:
// none; kAll: every executor (tests of the version bookkeeping).
enum class WeightCachePolicy { kAuto, kOff, kAll };
const char* weight_cache_policy_name(WeightCachePolicy p);

// Process-wide counts over every cache (for tests and PIPETRAIN_WEIGHT_CACHE_STATS): counters
// only, they change nothing that is computed.
struct WeightCacheStats {
  uint64_t hits = 0;      // calls that used a kept copy
  uint64_t reorders = 0;  // calls that converted the weight into the cache
};
WeightCacheStats weight_cache_stats();

class WeightCache {
 public:
  struct Entry {
    std::vector<int64_t> layout;  // the kernel's description of the target layout
    uint64_t version = 0;         // of the source when `data` was written (0: never)
    void* data = nullptr;         // 64-byte aligned
    size_t bytes = 0;
  };
  // Checks a test turns on (the CLI's hidden --test-weight-cache-* flags): verify: every hit
  // converts the weight again and aborts, naming the buffer and version, when the copy differs (a
  // writer that did not bump the version); ignore_versions: hits ignore the version (a broken
  // cache), so that tests can show that they fail when the version is not honoured.
  struct Checks {
    bool verify = false;
    bool ignore_versions = false;
  };
  WeightCache() = default;
  explicit WeightCache(Checks checks) : checks_(checks) {}
  ~WeightCache();
  const Checks& checks() const { return checks_; }
  void set_checks(Checks checks) { checks_ = checks; }
  WeightCache(const WeightCache&) = delete;
  WeightCache& operator=(const WeightCache&) = delete;

  // The entry holding `src` converted to `layout` (created empty, version 0, with `bytes` of
  // storage). The caller compares entry->version with the source's, converts on a mismatch and
  // sets the version; hit() / reordered() count the outcome. Aborts when out of memory.
  Entry* entry(const void* src, const std::vector<int64_t>& layout, size_t bytes);
  void hit();
  void reordered();

  size_t bytes() const { return bytes_; }  // storage of every entry
  size_t entries() const { return entries_; }
  uint64_t hits() const { return hits_; }
  uint64_t reorders() const { return reorders_; }
  void clear();

 private:
  std::unordered_map<const void*, std::vector<Entry>> map_;
  size_t bytes_ = 0;
  size_t entries_ = 0;
  uint64_t hits_ = 0, reorders_ = 0;
  Checks checks_;
};

}  // namespace pt
