// Weight versions in the Executor (runtime/exec/executor.h): every non-const access and every update
// node gives a weight a new version, const access and non-update nodes do not; training with the
// weight cache is bit for bit training without it, with cache hits when a version serves two
// passes; a cache that ignores the version trains differently (so the comparison can fail); the
// policy switch turns the cache off everywhere or on everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "importer/shape_infer.h"
#include "importer/training.h"
#include "kernels/weight_cache.h"
#include "runtime/exec/executor.h"
#include "tests/runtime/graph_builder.h"

namespace pt {
namespace {

using Ints = std::vector<int64_t>;

// Conv 16 -> 32 -> 32 (3x3, pads 1: shapes oneDNN runs with blocked weights), Relu, Flatten,
// Gemm; then its training graph (momentum SGD).
struct Cnn : test::GraphBuilder {
  std::unique_ptr<TrainingGraph> tg;
  Value *w1 = nullptr, *w2 = nullptr;

  Value* param(const std::string& name, Dims d) {
    return GraphBuilder::param(name, std::move(d), ValueKind::kParameter, -0.2f, 0.2f);
  }
  Cnn() : GraphBuilder(5) {
    Value* x = input("x", {4, 16, 8, 8});
    AttrMap pad1;
    pad1.set("pads", Ints{1, 1, 1, 1});
    w1 = param("w1", {32, 16, 3, 3});
    w2 = param("w2", {32, 32, 3, 3});
    Value* h = op("Relu", {op("Conv", {x, w1, param("b1", {32})}, pad1)});
    h = op("Relu", {op("Conv", {h, w2}, pad1)});
    AttrMap gemm;
    gemm.set("transB", int64_t{1});
    Value* y = op("Gemm", {op("Flatten", {h}), param("wf", {5, 32 * 64}), param("bf", {5})}, gemm);
    g.outputs.push_back(y);
    auto t = build_training_graph(g, LossKind::kCrossEntropy, SgdOptions{0.9f, 1e-4f});
    EXPECT_TRUE(t) << t.status().message();
    if (t) tg = std::make_unique<TrainingGraph>(std::move(*t));
  }
};

TEST(WeightVersion, EveryWriteGivesANewVersionReadsDoNot) {
  Cnn m;
  ASSERT_TRUE(m.tg);
  auto made = Executor::create(m.g, DeviceKind::kCpu, {}, ExecutorOptions{true, {m.tg->loss.loss}});
  ASSERT_TRUE(made) << made.status().message();
  Executor& ex = **made;
  const Executor& cex = ex;
  const Value* w = m.w1;
  EXPECT_NE(ex.version(w), 0u);
  EXPECT_NE(ex.version(m.w2), ex.version(w));
  EXPECT_EQ(ex.version(m.g.inputs[0]), 0u);  // data, activations, state: not versioned weights
  EXPECT_EQ(ex.version(m.g.outputs[0]), 0u);
  for (const auto& [p, v] : m.tg->momentum) EXPECT_EQ(ex.version(v), 0u) << v->name;

  uint64_t last = ex.version(w);
  auto changed = [&]() {
    const uint64_t now = ex.version(w);
    const bool c = now != last;
    last = now;
    return c;
  };
  // Reads through the const executor.
  (void)cex.host(w);
  (void)cex.tensor(w);
  (void)cex.view(w);
  ASSERT_TRUE(cex.fetch(w).has_value());
  ASSERT_TRUE(cex.download(w).is_ok());
  HostTensor out(DType::kFloat32, w->dims);
  ASSERT_TRUE(cex.copy_out(w, out.view(), *ex.device()).is_ok());
  EXPECT_FALSE(changed());
  // Every non-const accessor.
  (void)ex.host(w);
  EXPECT_TRUE(changed());
  (void)ex.tensor(w);
  EXPECT_TRUE(changed());
  (void)ex.view(w);
  EXPECT_TRUE(changed());
  ASSERT_TRUE(ex.upload(w).is_ok());
  EXPECT_TRUE(changed());
  ASSERT_TRUE(ex.copy_in(w, out.view(), *ex.device()).is_ok());
  EXPECT_TRUE(changed());
  // Runs: the forward and backward read the weights; the update writes them.
  ex.tensor(m.tg->lr).as<float>()[0] = 0.05f;
  last = ex.version(w);
  const uint64_t w2_before = ex.version(m.w2);
  ASSERT_TRUE(ex.run([](Phase p) { return p != Phase::kUpdate; }).is_ok());
  EXPECT_FALSE(changed());
  EXPECT_EQ(ex.version(m.w2), w2_before);
  ASSERT_TRUE(ex.run([](Phase p) { return p == Phase::kUpdate; }).is_ok());
  EXPECT_TRUE(changed());
  EXPECT_NE(ex.version(m.w2), w2_before);
}

// A weight's other storage (Executor::add_storages: a pipeline stage's working copy beside the
// master) is another version: selecting it, or selecting the weight's own storage back, changes
// the version, so the weight cache converts what the kernels now read instead of serving the other
// storage's conversion; storage_view reads either storage in place whichever is selected.
TEST(WeightVersion, AnotherStorageOfAWeightIsAnotherVersion) {
  Cnn m;
  ASSERT_TRUE(m.tg);
  const Value* y = m.g.outputs[0];
  auto logits = [&](bool cache, int storage) {
    ExecutorOptions eo{true, {y}};
    eo.weight_cache = cache;
    auto made = Executor::create(m.g, DeviceKind::kCpu, {}, eo);
    EXPECT_TRUE(made) << made.status().message();
    Executor& ex = **made;
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    HostTensor& x = ex.tensor(m.g.inputs[0]);
    for (int64_t i = 0; i < x.size(); ++i) x.as<float>()[i] = nd(rng);
    const HostTensor own = ex.tensor(m.w1);
    HostTensor other = own;
    for (int64_t i = 0; i < other.size(); ++i) other.as<float>()[i] = -0.5f * other.as<float>()[i];
    std::vector<HostTensor> out;
    EXPECT_TRUE(ex.add_storages(m.w1, 1).is_ok());
    // Each read runs the forward twice (a cache hit the second time where the cache is on).
    auto forward = [&]() {
      for (int r = 0; r < 2; ++r) EXPECT_TRUE(ex.run([](Phase p) { return p == Phase::kForward; }).is_ok());
      out.push_back(ex.tensor(y));
    };
    if (storage == -1) {
      forward();  // the own storage, converted and cached
      uint64_t before = ex.version(m.w1);
      EXPECT_TRUE(ex.select_storage(m.w1, 0).is_ok());
      EXPECT_NE(ex.version(m.w1), before);
      EXPECT_EQ(ex.selected_storage(m.w1), 0);
      ex.tensor(m.w1) = other;
      EXPECT_EQ(std::memcmp(ex.storage_view(m.w1, -1).data, own.data(), own.bytes()), 0);
      EXPECT_EQ(std::memcmp(ex.storage_view(m.w1, 0).data, other.data(), other.bytes()), 0);
      forward();
      before = ex.version(m.w1);
      EXPECT_TRUE(ex.select_storage(m.w1, -1).is_ok());
      EXPECT_NE(ex.version(m.w1), before);
      EXPECT_EQ(ex.selected_storage(m.w1), -1);
      EXPECT_EQ(std::memcmp(ex.storage_view(m.w1, 0).data, other.data(), other.bytes()), 0);
      forward();
    } else {  // the other weights alone, in a fresh executor's own storage
      ex.tensor(m.w1) = other;
      forward();
    }
    return out;
  };
  for (bool cache : {false, true}) {
    SCOPED_TRACE(cache ? "weight cache on" : "weight cache off");
    const std::vector<HostTensor> moved = logits(cache, -1), other = logits(false, 0);
    ASSERT_EQ(moved.size(), 3u);
    ASSERT_EQ(other.size(), 1u);
    const auto same = [](const HostTensor& a, const HostTensor& b) { return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0; };
    EXPECT_TRUE(same(moved[1], other[0]));  // storage 0's weights, not the cached own ones
    EXPECT_TRUE(same(moved[2], moved[0]));  // back to the own storage
    EXPECT_FALSE(same(moved[0], other[0]));
  }
}

// Trains 5 steps; each step runs the forward once alone (as validation would), then forward,
// backward and update: the training forward reads the version the first forward converted.
struct Trained {
  std::vector<HostTensor> params;
  uint64_t hits = 0, reorders = 0;
  size_t cache_bytes = 0;
};
Trained train(bool cache, ExecSettings settings = {}) {
  Cnn m;
  Trained r;
  EXPECT_TRUE(m.tg);
  if (!m.tg) return r;
  ExecutorOptions eo{true, {m.tg->loss.loss}};
  eo.weight_cache = cache;
  eo.settings = settings;
  auto made = Executor::create(m.g, DeviceKind::kCpu, {}, eo);
  EXPECT_TRUE(made) << made.status().message();
  if (!made) return r;
  Executor& ex = **made;
  ex.tensor(m.tg->lr).as<float>()[0] = 0.05f;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int step = 0; step < 5; ++step) {
    HostTensor& x = ex.tensor(m.g.inputs[0]);
    for (int64_t i = 0; i < x.size(); ++i) x.as<float>()[i] = nd(rng);
    HostTensor& y = ex.tensor(m.tg->loss.labels);
    for (int64_t i = 0; i < y.size(); ++i) y.as<int64_t>()[i] = (i + step) % 5;
    EXPECT_TRUE(ex.run([](Phase p) { return p == Phase::kForward; }).is_ok());
    EXPECT_TRUE(ex.run().is_ok());
  }
  for (const Value* p : m.tg->params) r.params.push_back(ex.tensor(p));
  if (ex.weight_cache()) {
    r.hits = ex.weight_cache()->hits();
    r.reorders = ex.weight_cache()->reorders();
    r.cache_bytes = ex.weight_cache()->bytes();
    EXPECT_EQ(ex.allocated_bytes().weight_cache, r.cache_bytes);
  }
  return r;
}

bool same(const Trained& a, const Trained& b) {
  if (a.params.size() != b.params.size()) return false;
  for (size_t i = 0; i < a.params.size(); ++i)
    if (a.params[i].bytes() != b.params[i].bytes() ||
        std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].bytes()) != 0)
      return false;
  return true;
}

TEST(WeightVersion, CachedTrainingIsBitIdentical) {
  const Trained plain = train(false), cached = train(true);
  ASSERT_FALSE(plain.params.empty());
  EXPECT_TRUE(same(plain, cached));
  // Per step: w1 and w2 converted for the first forward (2), reused by the training forward (2
  // hits), w2 converted for the backward-data pass (w1's input gradient is not needed).
  EXPECT_EQ(cached.reorders, 5u * 3u);
  EXPECT_EQ(cached.hits, 5u * 2u);
  EXPECT_GE(cached.cache_bytes, (32u * 16 * 9 + 2 * 32u * 32 * 9) * sizeof(float));
  EXPECT_EQ(plain.reorders + plain.hits, 0u);

  // A cache that ignores versions reuses the weights of the step before: the result differs.
  ExecSettings ignore;
  ignore.weight_cache_checks.ignore_versions = true;
  const Trained broken = train(true, ignore);
  EXPECT_FALSE(same(plain, broken));
}

TEST(WeightVersion, PolicyOverridesTheExecutorsChoice) {
  ExecSettings policy;
  policy.weight_cache = WeightCachePolicy::kOff;
  const Trained off = train(true, policy);
  policy.weight_cache = WeightCachePolicy::kAll;
  const Trained all = train(false, policy);
  EXPECT_EQ(off.reorders + off.hits, 0u);
  EXPECT_EQ(all.hits, 5u * 2u);
  EXPECT_TRUE(same(off, all));
}

}  // namespace
}  // namespace pt
