// The caching allocator's private pools (kernels/cuda/allocator.h), which keep the scratch blocks
// of captured CUDA graphs to themselves: with a fake backend, no GPU needed.
#ifdef PIPETRAIN_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <thread>

#include "kernels/cuda/allocator.h"

namespace pt {
namespace {

struct PoolBackend final : cuda::CachingAllocator::Backend {
  std::set<void*> live;
  int64_t allocs = 0, frees = 0;
  Status alloc(void** p, size_t bytes) override {
    *p = std::malloc(bytes);
    live.insert(*p);
    ++allocs;
    return Status::ok();
  }
  Status free(void* p) override {
    EXPECT_EQ(live.erase(p), 1u);
    std::free(p);
    ++frees;
    return Status::ok();
  }
  const char* name() const override { return "fake"; }
};

void* const kS1 = reinterpret_cast<void*>(0x1);
void* const kS2 = reinterpret_cast<void*>(0x2);

TEST(AllocatorPools, ARoutedStreamTakesAndReturnsThePoolsBlocksOnly) {
  PoolBackend be;
  cuda::CachingAllocator a(&be);
  void* shared = nullptr;
  ASSERT_TRUE(a.allocate(1000, kS1, &shared).is_ok());
  a.deallocate(shared);  // a free block on S1's shared list
  const uint64_t pool = a.create_pool();
  ASSERT_NE(pool, 0u);
  a.route_stream(kS1, pool);
  void* x = nullptr;
  ASSERT_TRUE(a.allocate(1000, kS1, &x).is_ok());
  EXPECT_NE(x, shared) << "a pool never takes a shared block";
  a.deallocate(x);
  void* y = nullptr;
  ASSERT_TRUE(a.allocate(900, kS1, &y).is_ok());
  EXPECT_EQ(y, x) << "the pool reuses its own block (captures of one stream in turn)";
  a.deallocate(y);
  a.route_stream(kS1, 0);
  // Unrouted, the stream gets its shared block back, never the pool's.
  void* z = nullptr;
  ASSERT_TRUE(a.allocate(1000, kS1, &z).is_ok());
  EXPECT_EQ(z, shared);
  void* w = nullptr;
  ASSERT_TRUE(a.allocate(1000, kS1, &w).is_ok());
  EXPECT_NE(w, x) << "the graph's scratch stays the graph's";
  a.deallocate(z);
  a.deallocate(w);
  EXPECT_EQ(a.stats().pool_bytes, cuda::CachingAllocator::size_class(1000));
  // Another thread allocating on a routed stream gets a shared block, never the pool's.
  a.route_stream(kS1, pool);
  void* other = nullptr;
  std::thread([&] { ASSERT_TRUE(a.allocate(1000, kS1, &other).is_ok()); }).join();
  EXPECT_NE(other, x);
  a.deallocate(other);
  a.route_stream(kS1, 0);
  EXPECT_NE(a.stats().summary().find("kept for CUDA graphs"), std::string::npos) << a.stats().summary();
}

TEST(AllocatorPools, ReleaseCachedKeepsPoolsReleasePoolHandsThemBack) {
  PoolBackend be;
  {
    cuda::CachingAllocator a(&be);
    const uint64_t pool = a.create_pool();
    a.route_stream(kS2, pool);
    void *x = nullptr, *kept = nullptr;
    ASSERT_TRUE(a.allocate(4096, kS2, &x).is_ok());
    ASSERT_TRUE(a.allocate(512, kS2, &kept).is_ok());  // still handed out at the release (a workspace)
    a.deallocate(x);
    a.route_stream(kS2, 0);
    ASSERT_TRUE(a.release_cached().is_ok());
    EXPECT_EQ(be.frees, 0) << "an OOM release or teardown release must not free a graph's blocks";
    a.release_pool(pool);
    EXPECT_EQ(a.stats().pool_bytes, 0u);
    // x is now a shared block of S2; `kept` joins the shared list when freed.
    void* again = nullptr;
    ASSERT_TRUE(a.allocate(4096, kS2, &again).is_ok());
    EXPECT_EQ(again, x);
    a.deallocate(again);
    a.deallocate(kept);
    void* small = nullptr;
    ASSERT_TRUE(a.allocate(100, kS2, &small).is_ok());
    EXPECT_EQ(small, kept);
    a.deallocate(small);
    ASSERT_TRUE(a.release_cached().is_ok());
    EXPECT_EQ(be.frees, 2);
  }
  EXPECT_TRUE(be.live.empty());
}

TEST(AllocatorPools, TwoPoolsDoNotShare) {
  PoolBackend be;
  cuda::CachingAllocator a(&be);
  const uint64_t p1 = a.create_pool(), p2 = a.create_pool();
  ASSERT_NE(p1, p2);
  a.route_stream(kS1, p1);
  void* x = nullptr;
  ASSERT_TRUE(a.allocate(2000, kS1, &x).is_ok());
  a.deallocate(x);
  a.route_stream(kS1, p2);
  void* y = nullptr;
  ASSERT_TRUE(a.allocate(2000, kS1, &y).is_ok());
  EXPECT_NE(y, x);
  a.deallocate(y);
  a.route_stream(kS1, 0);
  a.release_pool(p1);
  a.release_pool(p2);
  a.release_pool(p2);  // twice: nothing
  EXPECT_EQ(a.stats().pool_bytes, 0u);
}

}  // namespace
}  // namespace pt

#endif  // PIPETRAIN_HAVE_CUDA
