// The caching allocator of the CUDA backend: device memory (and pinned host memory) handed out
// from size-class free lists so that a training loop, after its first step, never calls
// cudaMalloc or cudaFree. Plain C++: the raw memory comes from a Backend, which is cudaMalloc /
// cudaHostAlloc in a CUDA build and a fake in the allocator's CPU-only tests.
//
// Stream safety: a block freed on stream S goes back to S's free list and is only handed out
// again for S, so the next user's kernels queue behind the last user's (stream order); no event
// or synchronisation is needed. A block that another stream also used must not be freed before
// that stream is done with it (the runtime's business, as PyTorch's record_stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pt::cuda {

struct AllocatorStats {
  size_t in_use_bytes = 0;      // bytes of blocks handed out (size-class sizes)
  size_t requested_bytes = 0;   // bytes the callers asked for, of the blocks handed out
  size_t cached_bytes = 0;      // bytes of free blocks kept for reuse
  size_t reserved_bytes = 0;    // in_use + cached: what the backend holds for us
  size_t peak_in_use_bytes = 0;
  size_t peak_reserved_bytes = 0;
  int64_t allocs = 0;           // allocate() calls that returned memory
  int64_t cache_hits = 0;       // ... of which served from a free list
  int64_t backend_allocs = 0;   // raw allocations (cudaMalloc)
  int64_t backend_frees = 0;    // raw frees (cudaFree): only release_cached() and OOM retries
  int64_t oom_retries = 0;      // raw allocations that failed, were retried after a release
  size_t pool_bytes = 0;        // bytes of the blocks of private pools (CUDA graphs), in use or free
  // Internal fragmentation: the share of handed-out bytes the callers did not ask for.
  double fragmentation() const {
    return in_use_bytes ? 1.0 - static_cast<double>(requested_bytes) / static_cast<double>(in_use_bytes) : 0.0;
  }
  std::string summary() const;  // one line: peak, in use, cached, fragmentation, hit rate
};

class CachingAllocator {
 public:
  // Raw memory. alloc sets *p (nullptr on failure) and returns a Status naming the error.
  struct Backend {
    virtual ~Backend() = default;
    virtual Status alloc(void** p, size_t bytes) = 0;
    virtual Status free(void* p) = 0;
    virtual const char* name() const = 0;  // "cudaMalloc", "cudaHostAlloc", ...
  };

  explicit CachingAllocator(Backend* backend) : backend_(backend) {}
  ~CachingAllocator();  // returns every free block to the backend; blocks still in use leak
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The block size a request of `bytes` gets: at least kMinBlock, then four classes per power
  // of two (1, 1.25, 1.5, 1.75 x 2^k), so no block wastes more than 20% of itself.
  static size_t size_class(size_t bytes);
  static constexpr size_t kMinBlock = 512;

  // *p = a block of at least `bytes` (256-byte aligned as cudaMalloc's), for use on `stream`
  // (a cudaStream_t; null is the legacy default stream). bytes == 0 gives nullptr and ok. When
  // the backend fails, every cached block is released and the allocation tried once more.
  Status allocate(size_t bytes, void* stream, void** p);
  // Returns a block from allocate() to its stream's free list (never to the backend).
  // nullptr is ignored; a pointer this allocator did not hand out aborts (PT_CHECK).
  void deallocate(void* p);
  // Gives every free block back to the backend (outside a training step: teardown, OOM). Blocks
  // of private pools stay.
  Status release_cached();

  // Private pools, for CUDA graphs. A graph captured on a stream replays with the addresses its
  // kernels were captured with, so the scratch blocks they took (workspaces freed right after the
  // call) must never go to anyone else. While `stream` is routed to a pool (route_stream), its
  // allocations come from the pool's free lists (the backend on a miss) and every block it hands
  // out goes back to the pool when freed, whenever that is. Blocks of one pool are reused among
  // the captures routed to it, which is safe when their graphs replay one after the other on one
  // stream (one executor's). release_pool() gives the pool's free blocks to the shared free lists
  // of the streams they were made for (after its graphs are gone and their stream has finished);
  // blocks of it still handed out go there when freed.
  // Only the calling thread's allocations on `stream` are routed (the capturing thread's: another
  // thread's buffer must never take a block a graph was captured with).
  uint64_t create_pool();
  void route_stream(void* stream, uint64_t pool);  // pool 0: back to the shared free lists
  void release_pool(uint64_t pool);

  AllocatorStats stats() const;
  void reset_peaks();


 private:
  struct Block {
    size_t size = 0;       // size class
    size_t requested = 0;  // what the caller asked for
    void* stream = nullptr;
    uint64_t pool = 0;     // the private pool it belongs to, 0 for none
  };
  Status release_cached_locked();

  Backend* backend_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> live_;                           // handed out
  std::map<std::pair<void*, size_t>, std::vector<void*>> free_;     // (stream, size) -> blocks
  // Private pools: (pool, size) -> (block, its stream); the streams routed to a pool; live pools.
  std::map<std::pair<uint64_t, size_t>, std::vector<std::pair<void*, void*>>> pool_free_;
  std::unordered_map<void*, std::pair<uint64_t, std::thread::id>> routes_;  // [stream]: pool, routing thread
  std::unordered_map<uint64_t, size_t> pools_;  // [pool]: bytes of its blocks (handed out or free)
  uint64_t next_pool_ = 1;
  AllocatorStats st_;
};

// The per-process allocators of a CUDA build (kernels/cuda/allocator_cuda.cpp): device memory of
// the current device (one allocator per device, created on first use), and pinned host memory
// (one for the process) for staging copies.
CachingAllocator& device_allocator();
CachingAllocator& pinned_host_allocator();

// A device block for one kernel call's scratch (workspaces, per-channel coefficients), given
// back to the allocator on scope exit: stream-ordered, so it may be freed while the kernels
// that use it are still queued on that stream.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer() { device_allocator().deallocate(p_); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  Status allocate(size_t bytes, void* stream) {
    device_allocator().deallocate(p_);
    p_ = nullptr;
    return device_allocator().allocate(bytes, stream, &p_);
  }
  void* get() const { return p_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
};

// A pinned host block, given back on scope exit. The owner must make sure no asynchronous copy
// still reads or writes it by then (synchronise the stream first).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { pinned_host_allocator().deallocate(p_); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  PinnedBuffer(const PinnedBuffer&) = delete;
  Status allocate(size_t bytes) { return pinned_host_allocator().allocate(bytes, nullptr, &p_); }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

}  // namespace pt::cuda
