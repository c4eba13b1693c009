// Activation recomputation (--recompute): trained weights bit-identical to keeping the
// activations, on 1 to 4 stages under every schedule and weight mode; the stages that recompute
// hold strictly less memory; the plan's memory model (inputs per pass + one set of activations)
// and --recompute auto's choice of stages.
#include <gtest/gtest.h>

#include <cstring>

#include "importer/importer.h"
#include "importer/training.h"
#include "partitioner/partition.h"
#include "runtime/data/data.h"
#include "runtime/pipeline/pipeline.h"
#include "tests/runtime/digits_fixture.h"

namespace pt {
namespace {

using namespace digits_fixture;

PartitionOptions options(int stages, const PipelineOptions& po, Recompute rc, std::vector<double> memory = {}) {
  PartitionOptions opts;
  for (int k = 0; k < stages; ++k) opts.devices.push_back(cpu_spec(k, memory.empty() ? 1e12 : memory[k]));
  opts.link.name = "host";
  opts.link.bandwidth = 1e10;
  opts.link.latency_s = 1e-6;
  opts.schedule = po.schedule;
  opts.weights = po.weights;
  opts.micro_batches = po.micro_batches;
  opts.recompute = rc;
  opts.balance = balance_for(stages);
  return opts;
}

struct RunResult {
  std::map<std::string, HostTensor> weights;
  std::vector<int64_t> allocated;
  std::vector<StageStats> stats;
  Plan plan;
};

RunResult train(int64_t graph_batch, int stages, const PipelineOptions& po, Recompute rc, const Dataset& data, int64_t steps) {
  auto md = digits_model(graph_batch);
  RunResult out;
  auto plan = partition(md->g(), options(stages, po, rc));
  EXPECT_TRUE(plan) << plan.status().message();
  if (!plan) return out;
  out.plan = *plan;
  auto p = PipelineTrainer::create(md->g(), md->tg, *plan, po);
  EXPECT_TRUE(p) << p.status().message();
  if (!p) return out;
  auto r = (*p)->train(data, nullptr, digits_config(steps));
  EXPECT_TRUE(r) << r.status().message();
  out.weights = (*p)->parameters();
  out.allocated = (*p)->stage_allocated_bytes();
  out.stats = (*p)->stage_stats();
  return out;
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
    {"gpipe2", Schedule::kGPipe, WeightMode::kSpecTrain, Staleness::kPaper, 2},
    {"gpipe4", Schedule::kGPipe, WeightMode::kSpecTrain, Staleness::kPaper, 4},
};

PipelineOptions pipeline_options(const Mode& m) {
  PipelineOptions po;
  po.schedule = m.schedule;
  po.weights = m.weights;
  po.staleness = m.staleness;
  po.micro_batches = m.micro;
  po.record_trace = false;
  return po;
}

class RecomputeExact : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Every stage with more than one pass in flight reruns its forward before each backward; the
// trained weights equal those of the run that kept its activations, bit for bit.
TEST_P(RecomputeExact, SameWeightsAsKeepingActivations) {
  const auto [stages, mode_index] = GetParam();
  const Mode& mode = kModes[mode_index];
  const int64_t mini = 512, steps = 6;
  const PipelineOptions po = pipeline_options(mode);
  auto probe = digits_model(mini / mode.micro);
  Dataset data = digits_data(*probe, 64, 11);
  RunResult keep = train(mini / mode.micro, stages, po, Recompute::kNone, data, steps);
  RunResult rec = train(mini / mode.micro, stages, po, Recompute::kStage, data, steps);
  EXPECT_TRUE(bitwise_equal(rec.weights, keep.weights)) << stages << " stages, " << mode.name;
  std::map<std::string, HostTensor> initial;
  for (Value* p : probe->tg.params) initial[p->name] = *p->data;
  EXPECT_FALSE(bitwise_equal(keep.weights, initial));  // the weights did move
  ASSERT_EQ(rec.stats.size(), static_cast<size_t>(stages));
  int recomputing = 0;
  for (int k = 0; k < stages; ++k) recomputing += rec.plan.stages[k].recompute;
  // Stage 0 keeps several passes in flight whenever any stage does, and its hidden layer outweighs its input.
  EXPECT_EQ(recomputing > 0, stages > 1 || mode.schedule == Schedule::kGPipe);
  for (int k = 0; k < stages; ++k) {
    const bool several = mode.schedule == Schedule::kGPipe ? mode.micro > 1 : stages - k > 1;
    if (!several) {
      EXPECT_FALSE(rec.plan.stages[k].recompute) << "stage " << k;
    }
    EXPECT_FALSE(keep.plan.stages[k].recompute);
    // One rerun forward per backward on the stages that recompute, none elsewhere.
    EXPECT_EQ(rec.stats[k].recomputes, rec.plan.stages[k].recompute ? rec.stats[k].backwards : 0) << "stage " << k;
    EXPECT_EQ(keep.stats[k].recomputes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Recompute, RecomputeExact,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Range(0, 6)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "stages_" +
                                  kModes[std::get<1>(info.param)].name;
                         });

// A stage that recomputes holds strictly less: its slots keep its inputs, not its activations.
// Two stages of the MLP at batch 512: stage 0 (Gemm, Relu, Gemm) keeps the input and a hidden
// layer of its own, which outweigh its weights and any forward weight copies.
TEST(RecomputeMemory, StagesThatRecomputeHoldLess) {
  const int64_t mini = 512, steps = 2;
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    const PipelineOptions po = pipeline_options(mode);
    auto probe = digits_model(mini / mode.micro);
    Dataset data = digits_data(*probe, 2 * mini, 12);
    RunResult keep = train(mini / mode.micro, 2, po, Recompute::kNone, data, steps);
    RunResult rec = train(mini / mode.micro, 2, po, Recompute::kStage, data, steps);
    ASSERT_EQ(rec.allocated.size(), 2u);
    EXPECT_TRUE(rec.plan.stages[0].recompute);
    for (int k = 0; k < 2; ++k) {
      if (rec.plan.stages[k].recompute) {
        EXPECT_LT(rec.allocated[k], keep.allocated[k]) << "stage " << k;
        EXPECT_LT(rec.plan.stages[k].memory_bytes, keep.plan.stages[k].memory_bytes) << "stage " << k;
      } else {
        EXPECT_EQ(rec.allocated[k], keep.allocated[k]) << "stage " << k;
      }
    }
  }
}

int64_t bytes_of(const std::vector<const Value*>& vs) {
  int64_t b = 0;
  for (const Value* v : vs) b += static_cast<int64_t>(v->bytes());
  return b;
}

// The plan's numbers: a recomputing stage keeps its inputs (the layout's recompute_saved: data,
// labels, received activations) per pass in flight plus one set of activations, and its backward
// is charged the rerun forward.
TEST(RecomputePlan, MemoryModel) {
  auto md = digits_model(16);
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    const PipelineOptions po = pipeline_options(mode);
    const PartitionOptions ro = options(3, po, Recompute::kStage);
    auto keep = partition(md->g(), options(3, po, Recompute::kNone));
    auto rec = partition(md->g(), ro);
    ASSERT_TRUE(keep && rec) << (keep ? rec.status() : keep.status()).message();
    for (int k = 0; k < 3; ++k) {
      const StagePlan& s = rec->stages[k];
      const StagePlan& n = keep->stages[k];
      if (!s.recompute) {
        EXPECT_EQ(s.memory_bytes, n.memory_bytes);
        continue;
      }
      EXPECT_EQ(s.recompute_input_bytes, bytes_of(rec->layout.stages[k].recompute_saved)) << "stage " << k;
      EXPECT_GT(s.recompute_input_bytes, 0);
      EXPECT_EQ(s.saved_bytes, n.saved_bytes);
      // The rerun is the forward's nodes (its weights come back from the copy kept per pass).
      EXPECT_NEAR(s.recompute_ms, s.fwd_ms - s.fwd_weights_ms, 1e-12);
      EXPECT_NEAR(s.bwd_ms, n.bwd_ms + s.recompute_ms, 1e-9);
      const bool one_f_one_b = mode.schedule == Schedule::k1F1B;
      const int fwd_copies = !one_f_one_b ? 0 : mode.weights == WeightMode::kSpecTrain ? s.in_flight
                                              : mode.weights == WeightMode::kStale      ? s.in_flight + 1
                                                                                        : 0;
      EXPECT_EQ(s.recompute_weight_copies, fwd_copies);
      EXPECT_EQ(s.weight_copies, n.weight_copies + fwd_copies);
      // GPipe's micro-batches sum their gradients into one more parameter-sized buffer.
      EXPECT_EQ(s.gradient_accumulators, one_f_one_b ? 0 : 1);
      const int64_t want = s.param_bytes * (2 + 1 + s.weight_copies + s.gradient_accumulators) +
                           s.recompute_input_bytes * (s.in_flight + 1) +
                           s.saved_bytes + s.workspace_bytes + s.evaluator_bytes + s.shared_memory_bytes;
      EXPECT_EQ(s.memory_bytes, want) << "stage " << k;
      EXPECT_EQ(stage_memory_bytes(s, 3, ro), want);
    }
  }
}

// --recompute auto turns recomputation on for the stages that would not fit without it, and only
// for those; without it the plan is refused with the hint.
TEST(RecomputePlan, AutoPicksOnlyTheStagesThatDoNotFit) {
  auto md = digits_model(64);
  PipelineOptions po;
  po.schedule = Schedule::kGPipe;
  po.micro_batches = 4;
  auto keep = partition(md->g(), options(2, po, Recompute::kNone));
  auto rec = partition(md->g(), options(2, po, Recompute::kStage));
  ASSERT_TRUE(keep && rec);
  for (int fat : {0, 1}) {
    SCOPED_TRACE("stage " + std::to_string(fat) + " short of memory");
    ASSERT_LT(rec->stages[fat].memory_bytes, keep->stages[fat].memory_bytes);
    std::vector<double> memory(2, 1e12);
    memory[fat] = 0.5 * static_cast<double>(rec->stages[fat].memory_bytes + keep->stages[fat].memory_bytes);
    auto none = partition(md->g(), options(2, po, Recompute::kNone, memory));
    ASSERT_FALSE(none);
    EXPECT_NE(none.status().message().find("out of memory"), std::string::npos) << none.status().message();
    auto a = partition(md->g(), options(2, po, Recompute::kAuto, memory));
    ASSERT_TRUE(a) << a.status().message();
    EXPECT_EQ(a->recompute, Recompute::kAuto);
    for (int k = 0; k < 2; ++k) EXPECT_EQ(a->stages[k].recompute, k == fat) << "stage " << k;
    EXPECT_LE(a->stages[fat].memory_bytes, memory[fat]);
  }
  // One device short of memory for the whole model: the error names --recompute auto as a fix.
  PartitionOptions one = options(1, po, Recompute::kNone);
  auto whole = partition(md->g(), one);
  one.recompute = Recompute::kStage;
  auto whole_rec = partition(md->g(), one);
  ASSERT_TRUE(whole && whole_rec);
  one.recompute = Recompute::kNone;
  one.devices[0].memory_bytes =
      0.5 * static_cast<double>(whole->stages[0].memory_bytes + whole_rec->stages[0].memory_bytes);
  auto refused = partition(md->g(), one);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("--recompute auto"), std::string::npos) << refused.status().message();
}

// A single 1F1B stage keeps one pass at a time: nothing to recompute, so nothing is.
TEST(RecomputePlan, OnePassInFlightIsNotRecomputed) {
  auto md = digits_model(256);
  PipelineOptions po;
  auto plan = partition(md->g(), options(1, po, Recompute::kStage));
  ASSERT_TRUE(plan) << plan.status().message();
  EXPECT_FALSE(plan->stages[0].recompute);
  auto two = partition(md->g(), options(2, po, Recompute::kStage));
  ASSERT_TRUE(two) << two.status().message();
  EXPECT_TRUE(two->stages[0].recompute);
  EXPECT_FALSE(two->stages[1].recompute);  // the last 1F1B stage runs each backward right after its forward
}

}  // namespace
}  // namespace pt
