// CUDA graphs' bookkeeping without a GPU (runtime/exec/graph_cache.h, Executor::run_nodes): which
// runs are captured, replayed or run kernel by kernel; keys that tell passes and storages apart;
// version bumps of replayed updates; refusals and failed captures; the private pool's lifetime.
// The executor runs on a CPU device that claims to capture graphs: its "graphs" record nothing
// and count their launches, so these tests check the decisions, not the arithmetic (the CUDA
// tests of pipeline_test.cpp compare runs with and without graphs bit for bit on a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "importer/training.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/graph_cache.h"
#include "tests/runtime/graph_builder.h"

namespace pt {
namespace {

struct CountingGraph : DeviceGraph {
  int* launches;
  explicit CountingGraph(int* l) : launches(l) {}
  Status launch(void*) override {
    ++*launches;
    return Status::ok();
  }
};

TEST(GraphCache, WarmsUpThenCapturesThenReplays) {
  GraphCache c(/*warmup=*/1, /*max_graphs=*/2);
  int launches = 0;
  EXPECT_EQ(c.next(1), GraphCache::Action::kEager);
  EXPECT_EQ(c.next(1), GraphCache::Action::kCapture);
  c.add(1, std::make_unique<CountingGraph>(&launches));
  EXPECT_EQ(c.next(1), GraphCache::Action::kReplay);
  ASSERT_NE(c.graph(1), nullptr);
  EXPECT_EQ(c.graph(2), nullptr);
  EXPECT_EQ(c.next(2), GraphCache::Action::kEager);
  EXPECT_EQ(c.next(2), GraphCache::Action::kCapture);
  c.add(2, std::make_unique<CountingGraph>(&launches));
  // A third key finds the limit: kernel by kernel for good, counted.
  EXPECT_EQ(c.next(3), GraphCache::Action::kEager);
  EXPECT_EQ(c.next(3), GraphCache::Action::kEager);
  EXPECT_EQ(c.next(3), GraphCache::Action::kEager);
  const GraphStats& s = c.stats();
  EXPECT_EQ(s.captures, 2);
  EXPECT_EQ(s.replays, 1);
  EXPECT_EQ(s.eager_runs, 5);
  EXPECT_EQ(s.over_limit, 2);
  EXPECT_EQ(c.graphs(), 2u);
  EXPECT_EQ(s.summary(), "2 graphs, 1 replay, 5 runs kernel by kernel (2 beyond the graph limit)");
}

TEST(GraphCache, ARefusedKeyStaysKernelByKernelAndKeepsTheFirstReason) {
  GraphCache c;
  int launches = 0;
  (void)c.next(7);
  EXPECT_EQ(c.next(7), GraphCache::Action::kCapture);
  c.refuse(7, "Resize_3 runs on the host fallback");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.next(7), GraphCache::Action::kEager);
  (void)c.next(8);
  EXPECT_EQ(c.next(8), GraphCache::Action::kCapture);
  c.add(8, std::make_unique<CountingGraph>(&launches));
  c.refuse(8, "cudaStreamEndCapture failed");  // a graph given up drops out
  EXPECT_EQ(c.graph(8), nullptr);
  EXPECT_EQ(c.graphs(), 0u);
  EXPECT_EQ(c.next(8), GraphCache::Action::kEager);
  EXPECT_EQ(c.stats().refused, 2);
  EXPECT_EQ(c.stats().first_refusal, "Resize_3 runs on the host fallback");
  EXPECT_NE(c.stats().summary().find("not captured: Resize_3 runs on the host fallback (and 1 more)"), std::string::npos)
      << c.stats().summary();
  GraphStats sum;
  sum += c.stats();
  sum += c.stats();
  EXPECT_EQ(sum.refused, 4);
  EXPECT_EQ(sum.first_refusal, c.stats().first_refusal);
}

// The CPU device, claiming to capture graphs: begin/end are counted, a capture can be made to
// fail, pools are handed out and their release recorded.
class CapturingCpu : public Device {
 public:
  explicit CapturingCpu(std::shared_ptr<Device> cpu) : cpu_(std::move(cpu)) {}
  int begins = 0, launches = 0, fail_next = 0;
  std::vector<uint64_t> pools, released;
  bool capturing = false;

  DeviceKind kind() const override { return cpu_->kind(); }
  int ordinal() const override { return cpu_->ordinal(); }
  std::string name() const override { return "cpu (capturing)"; }
  Status activate() const override { return cpu_->activate(); }
  Expected<void*> create_stream() override { return cpu_->create_stream(); }
  void destroy_stream(void* s) override { cpu_->destroy_stream(s); }
  Expected<std::unique_ptr<Event>> create_event() override { return cpu_->create_event(); }
  Expected<void*> allocate(size_t b, void* s) override { return cpu_->allocate(b, s); }
  void deallocate(void* p) override { cpu_->deallocate(p); }
  Status to_device(void* d, const void* h, size_t b, void* s) override { return cpu_->to_device(d, h, b, s); }
  Status to_host(void* h, const void* d, size_t b, void* s) override { return cpu_->to_host(h, d, b, s); }
  Status copy(void* d, const Device& dd, const void* s, const Device& sd, size_t b, void* st) override {
    return cpu_->copy(d, dd, s, sd, b, st);
  }
  Status synchronize(void* s) override { return cpu_->synchronize(s); }
  Status predict(const TensorView& o, const TensorView& w, const TensorView& v, const TensorView& lr, double s,
                 void* st) override {
    return cpu_->predict(o, w, v, lr, s, st);
  }
  Status predict_adam(const TensorView& o, const TensorView& w, const TensorView& m, const TensorView& v,
                      const TensorView& step, const TensorView& lr, double s, const AdamPredict& h, void* st) override {
    return cpu_->predict_adam(o, w, m, v, step, lr, s, h, st);
  }
  Status accumulate(const TensorView& a, const TensorView& x, void* s) override { return cpu_->accumulate(a, x, s); }
  Status divide(const TensorView& x, double by, void* s) override { return cpu_->divide(x, by, s); }
  std::string memory_summary() const override { return ""; }

  bool capture_graphs() const override { return true; }
  uint64_t create_graph_pool() override {
    pools.push_back(100 + pools.size());
    return pools.back();
  }
  void release_graph_pool(uint64_t p) override { released.push_back(p); }
  Status begin_capture(void*, uint64_t pool) override {
    EXPECT_FALSE(capturing);
    EXPECT_FALSE(pools.empty());
    if (!pools.empty()) {
      EXPECT_EQ(pool, pools.back());
    }
    capturing = true;
    ++begins;
    return Status::ok();
  }
  Expected<std::unique_ptr<DeviceGraph>> end_capture(void*) override {
    EXPECT_TRUE(capturing);
    capturing = false;
    if (fail_next > 0) {
      --fail_next;
      return internal_error("cudaStreamEndCapture: operation not permitted when stream is capturing");
    }
    return std::unique_ptr<DeviceGraph>(new CountingGraph(&launches));
  }

 private:
  std::shared_ptr<Device> cpu_;
};

// x [4, 6] -> Gemm -> Relu -> Gemm -> cross-entropy, trained with momentum SGD.
struct Mlp : test::GraphBuilder {
  std::unique_ptr<TrainingGraph> tg;
  Value* w1 = nullptr;
  Mlp() : GraphBuilder(3) {
    Value* x = input("x", {4, 6});
    AttrMap tb;
    tb.set("transB", int64_t{1});
    w1 = param("w1", {8, 6});
    Value* h = op("Relu", {op("Gemm", {x, w1, param("b1", {8})}, tb)});
    g.outputs.push_back(op("Gemm", {h, param("w2", {3, 8}), param("b2", {3})}, tb));
    auto t = build_training_graph(g, LossKind::kCrossEntropy, SgdOptions{0.9f, 0.0f});
    EXPECT_TRUE(t) << t.status().message();
    if (t) tg = std::make_unique<TrainingGraph>(std::move(*t));
  }
};

struct Fixture {
  Mlp m;
  std::shared_ptr<CapturingCpu> dev;
  std::unique_ptr<Executor> ex;
  explicit Fixture(bool graphs = true, std::vector<const Value*> keep = {}) {
    auto cpu = open_device(DeviceKind::kCpu);
    EXPECT_TRUE(cpu);
    dev = std::make_shared<CapturingCpu>(*cpu);
    ExecutorOptions opts{true, std::move(keep)};
    opts.keep.push_back(m.tg->loss.loss);
    opts.settings.cuda_graphs = graphs;
    auto made = Executor::create(m.g, dev, {}, opts);
    EXPECT_TRUE(made) << made.status().message();
    if (made) ex = std::move(*made);
  }
};

bool forward(Phase p) { return p == Phase::kForward || p == Phase::kLoss; }
bool backward(Phase p) { return p == Phase::kBackward; }
bool update(Phase p) { return p == Phase::kUpdate; }

TEST(ExecutorGraphs, SecondRunIsCapturedLaterOnesReplay) {
  Fixture f;
  ASSERT_TRUE(f.ex && f.m.tg);
  EXPECT_TRUE(f.ex->graphs_on());
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(f.ex->run(forward).is_ok());
    ASSERT_TRUE(f.ex->run(backward).is_ok());
    ASSERT_TRUE(f.ex->run(update).is_ok());
  }
  // Three keys (forward, backward, update): one run each kernel by kernel, one captured (and
  // launched), two replays.
  EXPECT_EQ(f.dev->begins, 3);
  EXPECT_EQ(f.dev->launches, 3 + 6);
  const GraphStats s = f.ex->graph_stats();
  EXPECT_EQ(s.eager_runs, 3);
  EXPECT_EQ(s.captures, 3);
  EXPECT_EQ(s.replays, 6);
  EXPECT_EQ(s.refused, 0);
  // The whole list is a fourth key.
  ASSERT_TRUE(f.ex->run().is_ok());
  EXPECT_EQ(f.ex->graph_stats().eager_runs, 4);
}

TEST(ExecutorGraphs, AReplayedUpdateGivesItsWeightsNewVersionsOtherRunsDoNot) {
  Fixture f;
  ASSERT_TRUE(f.ex && f.m.tg);
  const Value* w = f.m.w1;
  for (int step = 0; step < 2; ++step) {  // warm-up and capture
    ASSERT_TRUE(f.ex->run(forward).is_ok());
    ASSERT_TRUE(f.ex->run(update).is_ok());
  }
  uint64_t v = f.ex->version(w);
  ASSERT_TRUE(f.ex->run(forward).is_ok());  // a replay
  EXPECT_EQ(f.ex->version(w), v) << "a forward does not write its weights";
  ASSERT_TRUE(f.ex->run(update).is_ok());   // a replay
  EXPECT_EQ(f.ex->graph_stats().replays, 2);
  EXPECT_NE(f.ex->version(w), v) << "a replayed update wrote w1: it needs a new version";
  v = f.ex->version(w);
  ASSERT_TRUE(f.ex->run(update).is_ok());
  EXPECT_NE(f.ex->version(w), v);
}

TEST(ExecutorGraphs, AnotherStorageIsAnotherGraph) {
  // The first Gemm's output, kept and given a second storage (a pass slot). The fixture's graph
  // is built before the executor, so its own value is named through a first fixture's.
  Fixture g;
  ASSERT_TRUE(g.ex);
  const Value* hf = g.m.w1->consumers.at(0)->outputs.at(0);
  ExecutorOptions opts{true, {hf, g.m.tg->loss.loss}};
  auto made = Executor::create(g.m.g, g.dev, {}, opts);
  ASSERT_TRUE(made) << made.status().message();
  g.ex = std::move(*made);
  ASSERT_TRUE(g.ex->add_storages(hf, 1).is_ok());
  for (int k : {-1, 0, -1, 0, -1, 0}) {
    ASSERT_TRUE(g.ex->select_storage(hf, k).is_ok());
    ASSERT_TRUE(g.ex->run(forward).is_ok());
  }
  // Two keys (the value's own storage, slot 0): each warmed up, captured, replayed once.
  const GraphStats s = g.ex->graph_stats();
  EXPECT_EQ(s.eager_runs, 2);
  EXPECT_EQ(s.captures, 2);
  EXPECT_EQ(s.replays, 2);
}

TEST(ExecutorGraphs, AFailedCaptureRunsKernelByKernelForGood) {
  Fixture f;
  ASSERT_TRUE(f.ex);
  f.dev->fail_next = 1;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(f.ex->run(forward).is_ok());
  const GraphStats s = f.ex->graph_stats();
  EXPECT_EQ(f.dev->begins, 1) << "a refused key is not captured again";
  EXPECT_EQ(f.dev->launches, 0);
  EXPECT_EQ(s.captures, 0);
  EXPECT_EQ(s.refused, 1);
  EXPECT_EQ(s.eager_runs, 4) << "warm-up, the failed capture's run, two more";
  EXPECT_NE(s.summary().find("not captured: cudaStreamEndCapture"), std::string::npos) << s.summary();
  // The run whose capture failed still computed the loss (kernel by kernel after the failure).
  EXPECT_TRUE(std::isfinite(f.ex->tensor(f.m.tg->loss.loss).as<float>()[0]));
}

TEST(ExecutorGraphs, OffMeansNoCaptureAndThePoolGoesWithTheExecutor) {
  {
    Fixture off(false);
    ASSERT_TRUE(off.ex);
    EXPECT_FALSE(off.ex->graphs_on());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(off.ex->run(forward).is_ok());
    EXPECT_EQ(off.dev->begins, 0);
    EXPECT_TRUE(off.dev->pools.empty());
    EXPECT_EQ(off.ex->graph_stats().eager_runs, 0);
  }
  Fixture on;
  ASSERT_TRUE(on.ex);
  ASSERT_EQ(on.dev->pools.size(), 1u);
  std::shared_ptr<CapturingCpu> dev = on.dev;
  on.ex.reset();
  ASSERT_EQ(dev->released.size(), 1u);
  EXPECT_EQ(dev->released[0], dev->pools[0]);
}

}  // namespace
}  // namespace pt
