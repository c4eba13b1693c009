// The caching allocator's bookkeeping (size classes, per-stream free lists, statistics). No CUDA
// here: the raw memory comes through CachingAllocator::Backend (allocator_cuda.cpp for CUDA).
#include "kernels/cuda/allocator.h"

#include <bit>
#include <cstdio>

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
  return buf;
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
  void* got = nullptr;
  auto it = free_.find({stream, size});
  if (it != free_.end() && !it->second.empty()) {
    got = it->second.back();
    it->second.pop_back();
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
  }
  live_[got] = Block{size, bytes, stream};
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
  free_[{b.stream, b.size}].push_back(p);
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
