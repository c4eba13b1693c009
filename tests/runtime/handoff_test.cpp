// Messages between stages without copies (Channel::trade, Executor::exchange): a sender hands its
// storage of a value to the channel and a receiver takes the slot's storage instead of copying,
// the bytes the kernels read are the ones the sender's kernels wrote, and a pipeline trained with
// trading is bit for bit the pipeline trained with copies, under every kind of schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "partitioner/partition.h"
#include "runtime/exec/executor.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/pipeline/stage.h"
#include "tests/runtime/digits_fixture.h"
#include "tests/runtime/graph_builder.h"
#include "tests/runtime/test_settings.h"

namespace pt {
namespace {

using namespace digits_fixture;

// x -> Relu -> h (sent) | h -> Neg -> y: two "stages" of one graph, each an executor of its node.
struct TwoStages : test::GraphBuilder {
  Value *x = nullptr, *h = nullptr, *y = nullptr, *w = nullptr;
  std::unique_ptr<Executor> a, b;
  TwoStages() {
    x = input("x", {4, 8});
    w = param("w", {4, 8});
    h = op("Relu", {op("Add", {x, w})});
    y = op("Neg", {h});
    g.outputs.push_back(y);
    const Node* add = g.nodes()[0].get();
    const Node* relu = g.nodes()[1].get();
    const Node* neg = g.nodes()[2].get();
    auto ea = Executor::create(g, DeviceKind::kCpu, {add, relu}, ExecutorOptions{true, {}});
    auto eb = Executor::create(g, DeviceKind::kCpu, {neg}, ExecutorOptions{true, {y}});
    EXPECT_TRUE(ea && eb);
    if (ea) a = std::move(*ea);
    if (eb) b = std::move(*eb);
  }
  void set_x(float base) {
    HostTensor& t = a->host(x);
    for (int64_t i = 0; i < t.size(); ++i) t.as<float>()[i] = base + static_cast<float>(i % 7) - 3.0f;
  }
};

TEST(Handoff, ExchangeTradesStorageAndRefusesWhatItCannotTrade) {
  TwoStages s;
  ASSERT_TRUE(s.a && s.b);
  // The Add's output is planned (read only inside stage a): its bytes are the arena's, not tradeable.
  const Value* sum = s.g.nodes()[0]->outputs[0];
  HostTensor t(DType::kFloat32, sum->dims);
  EXPECT_FALSE(s.a->exchange(sum, t));
  // Another shape or type: refused, nothing moves.
  HostTensor wrong(DType::kFloat32, {8, 4});
  const void* before = s.a->view(s.h).data;
  EXPECT_FALSE(s.a->exchange(s.h, wrong));
  EXPECT_EQ(std::as_const(*s.a).view(s.h).data, before);
  // A weight: traded, with a new version (its cached reorders do not apply to other bytes).
  HostTensor wt(DType::kFloat32, s.w->dims);
  for (int64_t i = 0; i < wt.size(); ++i) wt.as<float>()[i] = 0.25f;
  const void* given = wt.data();
  const void* own = std::as_const(*s.a).view(s.w).data;
  const uint64_t v0 = s.a->version(s.w);
  ASSERT_TRUE(s.a->exchange(s.w, wt));
  EXPECT_NE(s.a->version(s.w), v0);
  EXPECT_EQ(std::as_const(*s.a).view(s.w).data, given);
  EXPECT_EQ(wt.data(), own);  // the executor's old storage, now the caller's
  // The kernels read the traded bytes: h = relu(x + 0.25).
  s.set_x(0);
  ASSERT_TRUE(s.a->run().is_ok());
  const HostTensor& xs = s.a->host(s.x);
  const HostTensor& hs = s.a->host(s.h);
  for (int64_t i = 0; i < hs.size(); ++i) EXPECT_EQ(hs.as<float>()[i], std::max(0.0f, xs.as<float>()[i] + 0.25f)) << i;
}

// Three messages through a channel of two slots, trading on both ends: the receiver's kernels read
// the storage the sender's kernels wrote (no copy: the same address), each message its own bytes,
// and the link counts two copies left out per message. Then the same with copies.
TEST(Handoff, ChannelMovesMessagesWithoutCopies) {
  for (bool trade : {true, false}) {
    TwoStages s;
    ASSERT_TRUE(s.a && s.b);
    auto made = Channel::create({s.h}, 2, s.b->device());
    ASSERT_TRUE(made) << made.status().message();
    Channel& ch = **made;
    if (trade) ch.trade({true}, true);
    std::vector<const void*> written;
    for (int k = 0; k < 3; ++k) {
      s.set_x(static_cast<float>(k));
      ASSERT_TRUE(s.a->run().is_ok());
      written.push_back(std::as_const(*s.a).view(s.h).data);
      const HostTensor expect = s.a->host(s.h);
      ASSERT_TRUE(ch.send(k, *s.a));
      if (trade) {
        EXPECT_NE(std::as_const(*s.a).view(s.h).data, written.back());  // handed over
      }
      ASSERT_TRUE(ch.recv(k, *s.b));
      EXPECT_EQ(std::as_const(*s.b).view(s.h).data == written.back(), trade) << "message " << k;
      ASSERT_TRUE(s.b->run().is_ok());
      const HostTensor& y = s.b->host(s.y);
      for (int64_t i = 0; i < y.size(); ++i) ASSERT_EQ(y.as<float>()[i], -expect.as<float>()[i]) << "message " << k;
    }
    EXPECT_EQ(ch.handoffs().traded, trade ? 6 : 0);
  }
}

// The digits MLP on 2 and 4 stages under each kind of schedule: trading on and off train the same
// bits, and with it on the stages' links left copies out (the senders' and the receivers').
TEST(Handoff, PipelinesTrainTheSameBitsWithTrading) {
  struct Case {
    int stages;
    Schedule schedule;
    WeightMode weights;
    int micro;
  };
  const int64_t batch = 8, steps = 12;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 96, 11);
  for (const Case& c : {Case{2, Schedule::k1F1B, WeightMode::kSpecTrain, 1}, Case{4, Schedule::k1F1B, WeightMode::kStash, 1},
                        Case{2, Schedule::kGPipe, WeightMode::kSync, 4}, Case{2, Schedule::kZBH1, WeightMode::kSync, 4},
                        Case{4, Schedule::k1F1B, WeightMode::k2BW, 4}}) {
    std::vector<std::map<std::string, HostTensor>> weights;
    std::vector<int64_t> traded;
    for (bool trade : {true, false}) {
      auto md = digits_model(batch / c.micro);
      PartitionOptions opts;
      for (int k = 0; k < c.stages; ++k) opts.devices.push_back(cpu_spec(k));
      opts.schedule = c.schedule;
      opts.weights = c.weights;
      opts.micro_batches = c.micro;
      opts.balance = balance_for(c.stages);
      auto plan = partition(md->g(), opts);
      ASSERT_TRUE(plan) << plan.status().message();
      PipelineOptions po = testing::test_pipeline_options();
      po.schedule = c.schedule;
      po.weights = c.weights;
      po.micro_batches = c.micro;
      po.trade_handoffs = trade;
      auto p = PipelineTrainer::create(md->g(), md->tg, *plan, po);
      ASSERT_TRUE(p) << p.status().message();
      auto r = (*p)->train(data, nullptr, digits_config(steps));
      ASSERT_TRUE(r) << r.status().message();
      weights.push_back((*p)->parameters());
      int64_t n = 0;
      for (const StageStats& s : (*p)->stage_stats()) n += s.fwd_handoffs.traded + s.bwd_handoffs.traded;
      traded.push_back(n);
    }
    const std::string what = std::to_string(c.stages) + " stages, " + schedule_name(c.schedule) + " " +
                             weight_mode_name(c.weights) + ", M = " + std::to_string(c.micro);
    EXPECT_TRUE(bitwise_equal(weights[0], weights[1])) << what;
    EXPECT_GT(traded[0], 0) << what;
    EXPECT_EQ(traded[1], 0) << what;
  }
}

}  // namespace
}  // namespace pt
