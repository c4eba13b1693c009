// The caching allocator's bookkeeping (size classes, per-stream free lists, statistics). No CUDA
// here: the raw memory comes through CachingAllocator::Backend (allocator_cuda.cpp for CUDA).
#include "kernels/cuda/allocator.h"

#include <bit>
#include <cstdio>
#include <iterator>

namespace pt::cuda {

std::string AllocatorStats::summary() const {
  auto mib = [](size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "peak %.1f MiB in use (%.1f MiB reserved), now %.1f MiB in use, %.1f MiB cached, "
                "fragmentation %.1f%%, %lld allocs (%.1f%% from cache), %lld backend allocs, %lld frees",
                mib(peak_in_use_bytes), mib(peak_reserved_bytes), mib(in_use_bytes), mib(cached_bytes),
                100.0 * fragmentation(), static_cast<long long>(allocs),
                allocs ? 100.0 * static_cast<double>(cache_hits) / static_cast<double>(allocs) : 0.0,
                static_cast<long long>(backend_allocs), static_cast<long long>(backend_frees));
  std::string line = buf;
  if (pool_bytes) {
    std::snprintf(buf, sizeof buf, ", %.1f MiB kept for CUDA graphs", mib(pool_bytes));
    line += buf;
  }
  return line;
}

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  // 2^k <= bytes - 1 < 2^(k+1); classes 2^k * {1, 1.25, 1.5, 1.75, 2}.
  const int k = std::bit_width(bytes - 1) - 1;
  const size_t base = size_t{1} << k, step = base / 4;
  return base + ((bytes - base + step - 1) / step) * step;
}

CachingAllocator::~CachingAllocator() { (void)release_cached(); }

Status CachingAllocator::allocate(size_t bytes, void* stream, void** p) {
  *p = nullptr;
  if (bytes == 0) return Status::ok();
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t pool = 0;
  if (auto r = routes_.find(stream); r != routes_.end() && r->second.second == std::this_thread::get_id())
    pool = r->second.first;
  void* got = nullptr;
  if (pool) {
    auto it = pool_free_.find({pool, size});
    if (it != pool_free_.end() && !it->second.empty()) {
      got = it->second.back().first;
      it->second.pop_back();
    }
  } else {
    auto it = free_.find({stream, size});
    if (it != free_.end() && !it->second.empty()) {
      got = it->second.back();
      it->second.pop_back();
    }
  }
  if (got) {
    st_.cached_bytes -= size;
    ++st_.cache_hits;
  } else {
    Status s = backend_->alloc(&got, size);
    if (!s.is_ok()) {
      // Out of memory (or fragmented across streams): give the cache back, try once more.
      ++st_.oom_retries;
      RETURN_IF_ERROR(release_cached_locked());
      s = backend_->alloc(&got, size);
      if (!s.is_ok())
        return s.with_context("caching allocator: " + std::to_string(bytes) + " bytes (block of " +
                              std::to_string(size) + ") after releasing the cache; " + st_.summary() + ": ");
    }
    ++st_.backend_allocs;
    st_.reserved_bytes += size;
    if (pool) {
      pools_[pool] += size;
      st_.pool_bytes += size;
    }
  }
  live_[got] = Block{size, bytes, stream, pool};
  ++st_.allocs;
  st_.in_use_bytes += size;
  st_.requested_bytes += bytes;
  st_.peak_in_use_bytes = std::max(st_.peak_in_use_bytes, st_.in_use_bytes);
  st_.peak_reserved_bytes = std::max(st_.peak_reserved_bytes, st_.reserved_bytes);
  *p = got;
  return Status::ok();
}

void CachingAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  PT_CHECK(it != live_.end()) << "caching allocator (" << backend_->name() << "): freeing " << p
                              << ", which it did not hand out (double free?)";
  const Block b = it->second;
  live_.erase(it);
  st_.in_use_bytes -= b.size;
  st_.requested_bytes -= b.requested;
  st_.cached_bytes += b.size;
  if (b.pool && pools_.count(b.pool)) pool_free_[{b.pool, b.size}].emplace_back(p, b.stream);
  else free_[{b.stream, b.size}].push_back(p);
}

uint64_t CachingAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t pool = next_pool_++;
  pools_[pool] = 0;
  return pool;
}

void CachingAllocator::route_stream(void* stream, uint64_t pool) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pool == 0) {
    routes_.erase(stream);
    return;
  }
  PT_CHECK(pools_.count(pool)) << "caching allocator (" << backend_->name() << "): pool " << pool << " does not exist";
  routes_[stream] = {pool, std::this_thread::get_id()};
}

void CachingAllocator::release_pool(uint64_t pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto p = pools_.find(pool);
  if (p == pools_.end()) return;
  st_.pool_bytes -= p->second;
  pools_.erase(p);
  for (auto it = routes_.begin(); it != routes_.end();)
    it = it->second.first == pool ? routes_.erase(it) : std::next(it);
  for (auto it = pool_free_.lower_bound({pool, 0}); it != pool_free_.end() && it->first.first == pool;) {
    for (const auto& [block, stream] : it->second) free_[{stream, it->first.second}].push_back(block);
    it = pool_free_.erase(it);
  }
  // Blocks of the pool still handed out join the shared lists when freed (deallocate); they no
  // longer count as the pool's.
  for (auto& [ptr, b] : live_)
    if (b.pool == pool) b.pool = 0;
}

Status CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  return release_cached_locked();
}

Status CachingAllocator::release_cached_locked() {
  Status first;
  for (auto& [key, blocks] : free_) {
    while (!blocks.empty()) {
      Status s = backend_->free(blocks.back());
      if (first.is_ok()) first = s;
      st_.cached_bytes -= key.second;
      st_.reserved_bytes -= key.second;
      ++st_.backend_frees;
      blocks.pop_back();
    }
  }
  free_.clear();
  return first;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  st_.peak_in_use_bytes = st_.in_use_bytes;
  st_.peak_reserved_bytes = st_.reserved_bytes;
}

}  // namespace pt::cuda
