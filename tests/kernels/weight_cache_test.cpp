// The weight-layout cache of the oneDNN convolutions (kernels/weight_cache.h): an unchanged
// version reuses the converted W (no reorder), a new version converts again, version 0 never
// caches, each pass keeps its own layout; the outputs are bit-identical to uncached calls; a
// cache that ignores the version returns stale results (what the version prevents); and the
// verify mode catches a write that kept the old version.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/attribute.h"
#include "kernels/registry.h"
#include "kernels/weight_cache.h"

namespace pt {
namespace {

// X [4, 16, 8, 8], W [32, 16, 3, 3], pads 1: oneDNN runs its blocked kernels on this shape, so
// every uncached call reorders W.
struct ConvFixture {
  Dims xd{4, 16, 8, 8}, wd{32, 16, 3, 3}, yd{4, 32, 8, 8};
  std::vector<float> x, w, dy;
  AttrMap attrs;
  ConvFixture() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    x.resize(numel(xd));
    w.resize(numel(wd));
    dy.resize(numel(yd));
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    for (float& v : dy) v = u(rng);
    attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
  }
  // Y = Conv(X, W), with the cache and W's version when given.
  std::vector<float> forward(WeightCache* cache = nullptr, uint64_t version = 0) {
    std::vector<float> y(numel(yd), -1.0f);
    const TensorView in[] = {{x.data(), DType::kFloat32, xd}, {w.data(), DType::kFloat32, wd}};
    const TensorView out[] = {{y.data(), DType::kFloat32, yd}};
    const uint64_t versions[] = {0, version};
    KernelCall c{in, out, attrs};
    if (cache) {
      c.weight_cache = cache;
      c.versions = versions;
    }
    Status st = find_kernel("Conv", DeviceKind::kCpu, DType::kFloat32)(c);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return y;
  }
  // dX = ConvGradInput(dY, W).
  std::vector<float> grad_input(WeightCache* cache = nullptr, uint64_t version = 0) {
    std::vector<float> dx(numel(xd), -1.0f);
    const TensorView in[] = {{dy.data(), DType::kFloat32, yd}, {w.data(), DType::kFloat32, wd}};
    const TensorView out[] = {{dx.data(), DType::kFloat32, xd}};
    const uint64_t versions[] = {0, version};
    KernelCall c{in, out, attrs};
    if (cache) {
      c.weight_cache = cache;
      c.versions = versions;
    }
    Status st = find_kernel("ConvGradInput", DeviceKind::kCpu, DType::kFloat32)(c);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return dx;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(WeightCache, VersionDecidesHitOrReorder) {
  ConvFixture f;
  const std::vector<float> y0 = f.forward(), dx0 = f.grad_input();
  WeightCache cache;
  const uint64_t v1 = new_weight_version();
  EXPECT_TRUE(same_bits(f.forward(&cache, v1), y0));
  EXPECT_EQ(cache.reorders(), 1u);
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_GE(cache.bytes(), f.w.size() * sizeof(float));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(same_bits(f.forward(&cache, v1), y0));  // same version: hits
  EXPECT_EQ(cache.reorders(), 1u);
  EXPECT_EQ(cache.hits(), 3u);
  // The backward-data pass wants another layout: its own entry, converted once.
  EXPECT_TRUE(same_bits(f.grad_input(&cache, v1), dx0));
  EXPECT_TRUE(same_bits(f.grad_input(&cache, v1), dx0));
  EXPECT_EQ(cache.reorders(), 2u);
  EXPECT_EQ(cache.hits(), 4u);
  EXPECT_EQ(cache.entries(), 2u);
  const size_t bytes = cache.bytes();

  // W written and given a new version: both layouts convert again, in their entries' storage.
  f.w[5] += 0.5f;
  const std::vector<float> y1 = f.forward(), dx1 = f.grad_input();
  ASSERT_FALSE(same_bits(y1, y0));
  const uint64_t v2 = new_weight_version();
  EXPECT_TRUE(same_bits(f.forward(&cache, v2), y1));
  EXPECT_TRUE(same_bits(f.grad_input(&cache, v2), dx1));
  EXPECT_EQ(cache.reorders(), 4u);
  EXPECT_TRUE(same_bits(f.forward(&cache, v2), y1));
  EXPECT_EQ(cache.hits(), 5u);
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(cache.bytes(), bytes);

  // Version 0: not a versioned weight, never cached nor counted.
  f.w[6] -= 0.25f;
  const std::vector<float> y2 = f.forward();
  EXPECT_TRUE(same_bits(f.forward(&cache, 0), y2));
  EXPECT_EQ(cache.reorders(), 4u);
  EXPECT_EQ(cache.hits(), 5u);
  EXPECT_EQ(cache.entries(), 2u);
}

TEST(WeightCache, IgnoringTheVersionGivesStaleResults) {
  // What the version is for: a cache keyed on the buffer alone returns the old weights' result.
  ConvFixture f;
  WeightCache cache;
  const std::vector<float> y0 = f.forward(&cache, new_weight_version());
  f.w[0] += 1.0f;
  const std::vector<float> y1 = f.forward();
  cache.set_checks({.verify = false, .ignore_versions = true});
  const std::vector<float> stale = f.forward(&cache, new_weight_version());
  cache.set_checks({});
  EXPECT_TRUE(same_bits(stale, y0));
  EXPECT_FALSE(same_bits(stale, y1));
  EXPECT_TRUE(same_bits(f.forward(&cache, new_weight_version()), y1));
}

TEST(WeightCacheDeathTest, VerifyCatchesAWriteWithoutANewVersion) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ConvFixture f;
  WeightCache cache;
  const uint64_t v = new_weight_version();
  f.forward(&cache, v);
  f.w[3] += 1.0f;  // written, version kept: a missed bump
  cache.set_checks({.verify = true, .ignore_versions = false});
  EXPECT_DEATH(f.forward(&cache, v), "something wrote it without a new version");
  f.w[3] -= 1.0f;  // the copy is right again: verify passes
  EXPECT_EQ(cache.hits(), 0u);
  f.forward(&cache, v);
  EXPECT_EQ(cache.hits(), 1u);
}

TEST(WeightCache, VersionsAreNeverReused) {
  const uint64_t a = new_weight_version(), b = new_weight_version();
  EXPECT_NE(a, 0u);
  EXPECT_GT(b, a);
}

}  // namespace
}  // namespace pt
