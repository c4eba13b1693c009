// The update fused into the backward (runtime/exec/optimizer.h interleave_updates, partition.h
// stage_update_in_backward, --no-fusion update): the node order it makes, the stages the plan lets
// update in their backward under every schedule and weight mode, trained weights bit-identical to
// updating after the backward (1 to 4 stages, with and without recomputation, and the single-stage
// trainer), less memory on the stages that do, and clipping refused.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "importer/importer.h"
#include "importer/training.h"
#include "partitioner/partition.h"
#include "runtime/data/data.h"
#include "runtime/exec/optimizer.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/single/trainer.h"
#include "tests/runtime/digits_fixture.h"

namespace pt {
namespace {

using namespace digits_fixture;

SgdOptions optimizer(OptimizerKind kind) {
  SgdOptions sgd{0.9f, 1e-4f};
  sgd.kind = kind;
  return sgd;
}


// Each update right behind the last node that touches one of its inputs; everything else in order.
TEST(InterleaveUpdates, EachUpdateFollowsItsGradientAndTheLastReaderOfItsWeight) {
  auto md = digits_model(8);
  ASSERT_TRUE(md);
  std::vector<const Node*> nodes;
  for (auto& n : md->g().nodes()) nodes.push_back(n.get());
  const std::vector<const Node*> out = interleave_updates(nodes);
  ASSERT_EQ(out.size(), nodes.size());
  EXPECT_EQ(std::set<const Node*>(out.begin(), out.end()), std::set<const Node*>(nodes.begin(), nodes.end()));
  std::vector<const Node*> others_in, others_out;
  for (const Node* n : nodes)
    if (n->phase != Phase::kUpdate) others_in.push_back(n);
  int updates = 0, last_backward = -1, first_update = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    const Node* u = out[i];
    if (u->phase != Phase::kUpdate) {
      others_out.push_back(u);
      if (u->phase == Phase::kBackward) last_backward = static_cast<int>(i);
      continue;
    }
    ++updates;
    if (first_update < 0) first_update = static_cast<int>(i);
    // Nothing after it touches its inputs; the node just before it does.
    std::set<const Value*> ins(u->inputs.begin(), u->inputs.end());
    ins.erase(md->tg.lr);
    for (size_t j = i + 1; j < out.size(); ++j) {
      if (out[j]->phase == Phase::kUpdate) continue;
      for (const Value* v : out[j]->inputs) EXPECT_FALSE(ins.count(v)) << out[j]->name << " reads an input of " << u->name;
      for (const Value* v : out[j]->outputs) EXPECT_FALSE(ins.count(v)) << out[j]->name << " writes an input of " << u->name;
    }
    size_t k = i;
    while (k > 0 && out[k - 1]->phase == Phase::kUpdate) --k;
    ASSERT_GT(k, 0u);
    bool touches = false;
    for (const Value* v : out[k - 1]->inputs) touches = touches || ins.count(v);
    for (const Value* v : out[k - 1]->outputs) touches = touches || ins.count(v);
    EXPECT_TRUE(touches) << u->name << " does not follow the last node of its inputs (" << out[k - 1]->name << ")";
  }
  EXPECT_EQ(others_out, others_in);
  EXPECT_EQ(updates, 6);  // 3 Gemm x (weight, bias)
  EXPECT_LT(first_update, last_backward) << "the updates were left at the end";
}

struct Mode {
  const char* name;
  Schedule schedule;
  WeightMode weights;
  Staleness staleness;
  int micro;
};

const Mode kModes[] = {
    {"spectrain_paper", Schedule::k1F1B, WeightMode::kSpecTrain, Staleness::kPaper, 1},
    {"spectrain_exact", Schedule::k1F1B, WeightMode::kSpecTrain, Staleness::kExact, 1},
    {"stash", Schedule::k1F1B, WeightMode::kStash, Staleness::kPaper, 1},
    {"stale", Schedule::k1F1B, WeightMode::kStale, Staleness::kPaper, 1},
    {"gpipe1", Schedule::kGPipe, WeightMode::kSpecTrain, Staleness::kPaper, 1},
    {"gpipe4", Schedule::kGPipe, WeightMode::kSpecTrain, Staleness::kPaper, 4},
};

// Written out per mode, independently of stage_update_in_backward: the stages whose backward runs
// on the master weights with one gradient per update.
bool expected_in_backward(const Mode& m, int k, int N) {
  if (m.schedule == Schedule::kGPipe) return m.micro == 1;
  if (N == 1) return true;
  switch (m.weights) {
    case WeightMode::kStale: return true;
    case WeightMode::kStash: return k == N - 1;
    case WeightMode::kSpecTrain: return m.staleness == Staleness::kExact || k < 2;  // paper: s_bwd = k / 2
    case WeightMode::kSync: return m.micro == 1;  // synchronous 1F1B: GPipe's rule
    case WeightMode::k2BW:                        // its passes read the version before the latest update
    case WeightMode::k2BWPredict: return false;   // or a prediction
  }
  return false;
}

PartitionOptions options(int stages, const Mode& m, bool in_backward, Recompute rc) {
  PartitionOptions opts;
  for (int k = 0; k < stages; ++k) opts.devices.push_back(cpu_spec(k));
  opts.link.name = "host";
  opts.link.bandwidth = 1e10;
  opts.link.latency_s = 1e-6;
  opts.schedule = m.schedule;
  opts.weights = m.weights;
  opts.staleness = m.staleness;
  opts.micro_batches = m.micro;
  opts.recompute = rc;
  opts.update_in_backward = in_backward;
  opts.balance = balance_for(stages);
  return opts;
}

struct RunResult {
  std::map<std::string, HostTensor> weights;
  std::vector<int64_t> allocated;
  Plan plan;
};

RunResult train(int stages, const Mode& m, bool in_backward, Recompute rc, const Dataset& data, int64_t mini, int64_t steps) {
  auto md = digits_model(mini / m.micro);
  RunResult out;
  auto plan = partition(md->g(), options(stages, m, in_backward, rc));
  EXPECT_TRUE(plan) << plan.status().message();
  if (!plan) return out;
  out.plan = *plan;
  PipelineOptions po;
  po.schedule = m.schedule;
  po.weights = m.weights;
  po.staleness = m.staleness;
  po.micro_batches = m.micro;
  po.record_trace = false;
  auto p = PipelineTrainer::create(md->g(), md->tg, *plan, po);
  EXPECT_TRUE(p) << p.status().message();
  if (!p) return out;
  auto r = (*p)->train(data, nullptr, digits_config(steps));
  EXPECT_TRUE(r) << r.status().message();
  out.weights = (*p)->parameters();
  out.allocated = (*p)->stage_allocated_bytes();
  return out;
}

class UpdateInBackwardExact : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(UpdateInBackwardExact, SameWeightsAsUpdatingAfterTheBackward) {
  const auto [stages, mode_index] = GetParam();
  const Mode& mode = kModes[mode_index];
  const int64_t mini = 256, steps = 6;
  auto probe = digits_model(mini / mode.micro);
  ASSERT_TRUE(probe);
  Dataset data = digits_data(*probe, 64, 11);
  RunResult after = train(stages, mode, false, Recompute::kNone, data, mini, steps);
  RunResult fused = train(stages, mode, true, Recompute::kNone, data, mini, steps);
  EXPECT_TRUE(bitwise_equal(fused.weights, after.weights)) << stages << " stages, " << mode.name;
  std::map<std::string, HostTensor> initial;
  for (Value* p : probe->tg.params) initial[p->name] = *p->data;
  EXPECT_FALSE(bitwise_equal(after.weights, initial));  // the weights did move
  ASSERT_EQ(fused.allocated.size(), static_cast<size_t>(stages));
  for (int k = 0; k < stages; ++k) {
    const StagePlan& f = fused.plan.stages[k];
    const StagePlan& a = after.plan.stages[k];
    // (A stage without parameters, the 4-stage split's loss stage, has no update to move.)
    EXPECT_EQ(f.update_in_backward, expected_in_backward(mode, k, stages) && f.param_bytes > 0) << "stage " << k;
    EXPECT_FALSE(a.update_in_backward);
    if (f.update_in_backward) {
      // The gradients share the arena: a parameter copy fewer, in the plan and in the buffers.
      EXPECT_EQ(f.memory_bytes, a.memory_bytes - f.param_bytes + f.transient_gradient_bytes) << "stage " << k;
      EXPECT_GT(f.transient_gradient_bytes, 0);
      EXPECT_LE(f.transient_gradient_bytes, f.param_bytes);
      EXPECT_LT(fused.allocated[k], after.allocated[k]) << "stage " << k;
    } else {
      EXPECT_EQ(f.memory_bytes, a.memory_bytes) << "stage " << k;
      EXPECT_EQ(fused.allocated[k], after.allocated[k]) << "stage " << k;
    }
  }
  if (stages > 1 && mode.schedule == Schedule::k1F1B) {  // with recomputation too
    RunResult rec = train(stages, mode, true, Recompute::kStage, data, mini, steps);
    EXPECT_TRUE(bitwise_equal(rec.weights, after.weights)) << stages << " stages, " << mode.name << ", recompute";
  }
}

INSTANTIATE_TEST_SUITE_P(UpdateInBackward, UpdateInBackwardExact,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Range(0, 6)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "stages_" +
                                  kModes[std::get<1>(info.param)].name;
                         });

// The single-stage trainer (the CLI's --gpus 1), with each optimizer: the same bits, and clipping
// refused by a trainer that updates in the backward.
TEST(UpdateInBackwardTrainer, SameWeightsEveryOptimizer) {
  for (OptimizerKind kind : {OptimizerKind::kSgdPaper, OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    SCOPED_TRACE(static_cast<int>(kind));
    std::map<std::string, HostTensor> w[2];
    size_t arena[2] = {0, 0};
    for (int fused = 0; fused < 2; ++fused) {
      auto md = digits_model(64, optimizer(kind));
      ASSERT_TRUE(md);
      Dataset data = digits_data(*md, 256, 3);
      auto dev = open_device(DeviceKind::kCpu, 0);
      ASSERT_TRUE(dev);
      Trainer::Options to;
      to.update_in_backward = fused == 1;
      auto t = Trainer::create(md->g(), md->tg, *dev, to);
      ASSERT_TRUE(t) << t.status().message();
      EXPECT_EQ((*t)->update_in_backward(), fused == 1);
      TrainConfig cfg;
      cfg.steps = 8;
      cfg.lr = 0.05f;
      cfg.seed = 2;
      cfg.quiet = true;
      auto r = (*t)->train(data, nullptr, cfg);
      ASSERT_TRUE(r) << r.status().message();
      w[fused] = (*t)->parameters();
      arena[fused] = (*t)->executor().plan().arena_bytes;
      if (fused) {
        cfg.clip_grad_norm = 1.0;
        auto refused = (*t)->train(data, nullptr, cfg);
        ASSERT_FALSE(refused);
        EXPECT_NE(refused.status().message().find("--clip-grad-norm"), std::string::npos) << refused.status().message();
      }
    }
    EXPECT_TRUE(bitwise_equal(w[1], w[0]));
    EXPECT_LE(arena[1], arena[0]);  // the gradients no longer all live to the end of the step
  }
}

TEST(UpdateInBackwardPipeline, ClippingRefused) {
  const Mode& mode = kModes[3];  // stale: every stage updates in its backward
  auto md = digits_model(64);
  ASSERT_TRUE(md);
  auto plan = partition(md->g(), options(2, mode, true, Recompute::kNone));
  ASSERT_TRUE(plan) << plan.status().message();
  PipelineOptions po;
  po.weights = mode.weights;
  po.record_trace = false;
  auto p = PipelineTrainer::create(md->g(), md->tg, *plan, po);
  ASSERT_TRUE(p) << p.status().message();
  TrainConfig cfg;
  cfg.steps = 2;
  cfg.quiet = true;
  cfg.clip_grad_norm = 1.0;
  auto r = (*p)->train(digits_data(*md, 128, 1), nullptr, cfg);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--clip-grad-norm"), std::string::npos) << r.status().message();
  // A run whose weights differ from the plan's (here the plan's stale, the run's stash on stage 0) is refused.
  po.weights = WeightMode::kStash;
  auto q = PipelineTrainer::create(md->g(), md->tg, *plan, po);
  ASSERT_FALSE(q);
  EXPECT_NE(q.status().message().find("updates in the backward"), std::string::npos) << q.status().message();
}

}  // namespace
}  // namespace pt
