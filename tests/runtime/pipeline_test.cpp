// The pipelined trainer against single-stage training: GPipe equals large-batch sequential
// training, 1F1B on one stage equals it bit for bit, the recorded weight versions and SpecTrain
// staleness follow SpecTrain's rules (docs/architecture.md), and results do not depend on thread timing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <unistd.h>

#include "importer/importer.h"
#include "importer/training.h"
#include "kernels/device.h"
#include "partitioner/partition.h"
#include "runtime/data/data.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/pipeline/stage.h"
#include "runtime/single/trainer.h"
#include "tests/runtime/digits_fixture.h"
#include "tests/runtime/test_settings.h"
#include "tests/python_interpreter.h"

namespace pt {
namespace {

using namespace digits_fixture;


Plan make_plan(Model& md, int stages, Schedule schedule, WeightMode weights, int micro) {
  PartitionOptions opts;
  for (int k = 0; k < stages; ++k) opts.devices.push_back(cpu_spec(k));
  opts.link.name = "host";
  opts.link.bandwidth = 1e10;
  opts.link.latency_s = 1e-6;
  opts.schedule = schedule;
  opts.weights = weights;
  opts.micro_batches = micro;
  opts.balance = balance_for(stages);
  auto plan = partition(md.g(), opts);
  EXPECT_TRUE(plan) << plan.status().message();
  return plan ? std::move(*plan) : Plan{};
}

TrainConfig config(int64_t steps) {
  TrainConfig cfg;
  cfg.steps = steps;
  cfg.lr = 0.1f;
  cfg.seed = 5;
  cfg.shuffle = false;
  cfg.quiet = true;
  return cfg;
}

std::map<std::string, HostTensor> sequential_weights(int64_t batch, const Dataset& data, int64_t steps,
                                                     const SgdOptions& opt = SgdOptions{0.9f, 1e-4f},
                                                     TrainConfig cfg = config(0)) {
  auto md = digits_model(batch, opt);
  auto t = testing::test_cpu_trainer(md->g(), md->tg);
  EXPECT_TRUE(t) << t.status().message();
  cfg.steps = steps;
  auto r = (*t)->train(data, nullptr, cfg);
  EXPECT_TRUE(r) << r.status().message();
  return (*t)->parameters();
}

struct PipeRun {
  std::map<std::string, HostTensor> weights;
  std::vector<PassRecord> trace;
  TrainResult result;
  std::vector<GraphStats> graphs;  // CUDA stages: what their graphs did
};

PipeRun pipeline_weights(int64_t graph_batch, int stages, const PipelineOptions& po, const Dataset& data,
                         int64_t steps, const SgdOptions& opt = SgdOptions{0.9f, 1e-4f}, TrainConfig cfg = config(0)) {
  auto md = digits_model(graph_batch, opt);
  Plan plan = make_plan(*md, stages, po.schedule, po.weights, po.micro_batches);
  EXPECT_EQ(static_cast<int>(plan.stages.size()), stages);
  auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
  EXPECT_TRUE(p) << p.status().message();
  if (!p) return {};
  cfg.steps = steps;
  auto r = (*p)->train(data, nullptr, cfg);
  EXPECT_TRUE(r) << r.status().message();
  PipeRun out;
  out.weights = (*p)->parameters();
  out.trace = (*p)->trace();
  out.graphs = (*p)->stage_graph_stats();
  if (r) out.result = *r;
  return out;
}

// max |a - b| / max |b| over each tensor.
double max_relative_diff(const std::map<std::string, HostTensor>& a, const std::map<std::string, HostTensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (auto& [name, tb] : b) {
    auto it = a.find(name);
    EXPECT_NE(it, a.end()) << name;
    if (it == a.end()) continue;
    const HostTensor& ta = it->second;
    EXPECT_EQ(ta.size(), tb.size()) << name;
    double d = 0, m = 0;
    for (int64_t i = 0; i < tb.size(); ++i) {
      d = std::max(d, std::abs(ta.get_double(i) - tb.get_double(i)));
      m = std::max(m, std::abs(tb.get_double(i)));
    }
    worst = std::max(worst, d / std::max(m, 1e-12));
  }
  return worst;
}

// The stages run at most `lead` mini-batches ahead of the training loop: a claim beyond waits for
// the loop to take a loss (or for the segment to end, or an abort), so losses and snapshots cannot
// pile up behind a slow loop and a stop does not wait for a backlog.
TEST(RunSharedClaims, StagesWaitForTheLoopBeyondTheirLead) {
  using namespace std::chrono_literals;
  RunShared sh;
  sh.lead = 3;
  sh.set_segment(0, 100);
  for (int64_t s = 0; s < 3; ++s) EXPECT_TRUE(sh.claim(s));
  std::atomic<int> granted{-1};
  std::thread t([&] { granted = sh.claim(3) ? 1 : 0; });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(granted.load(), -1) << "claim 3 did not wait for the loop";
  sh.consumed(0);
  t.join();
  EXPECT_EQ(granted.load(), 1);
  // a waiting claim ends with the segment: a stop refuses it at once
  std::thread u([&] { granted = sh.claim(5) ? 1 : 0; });
  std::this_thread::sleep_for(50ms);
  sh.stop_early();
  u.join();
  EXPECT_EQ(granted.load(), 0);
  EXPECT_EQ(sh.end_step(), 4);
}

TEST(PipelineStaleness, Formulas) {
  // N = 4: paper s_fwd = floor(k/2) + N-k-1, s_bwd = floor(k/2); exact N-k-1 and 0.
  const int paper_fwd[] = {3, 2, 2, 1}, paper_bwd[] = {0, 0, 1, 1}, exact_fwd[] = {3, 2, 1, 0};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(spectrain_staleness(k, 4, false, Staleness::kPaper), paper_fwd[k]);
    EXPECT_EQ(spectrain_staleness(k, 4, true, Staleness::kPaper), paper_bwd[k]);
    EXPECT_EQ(spectrain_staleness(k, 4, false, Staleness::kExact), exact_fwd[k]);
    EXPECT_EQ(spectrain_staleness(k, 4, true, Staleness::kExact), 0);
  }
}

struct GPipeCase {
  int stages;
  int micro;
};

class PipelineGPipe : public ::testing::TestWithParam<GPipeCase> {};

TEST_P(PipelineGPipe, EqualsSequentialOnTheWholeMiniBatch) {
  const auto [stages, micro] = GetParam();
  const int64_t batch = 8, steps = 10;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 96, 3);
  auto seq = sequential_weights(batch, data, steps);
  PipelineOptions po = testing::test_pipeline_options();
  po.schedule = Schedule::kGPipe;
  po.micro_batches = micro;
  PipeRun run = pipeline_weights(batch / micro, stages, po, data, steps);
  EXPECT_LE(max_relative_diff(run.weights, seq), 1e-5) << stages << " stages, " << micro << " micro-batches";
  std::map<std::string, HostTensor> initial;
  for (Value* p : probe->tg.params) initial[p->name] = *p->data;
  EXPECT_GT(max_relative_diff(seq, initial), 1e-3);  // the weights did move
  // One forward and one backward per micro-batch per stage; every pass on the current version.
  EXPECT_EQ(run.trace.size(), static_cast<size_t>(2 * stages * micro * steps));
  for (const PassRecord& r : run.trace) EXPECT_EQ(r.version, r.mini_batch);
}

INSTANTIATE_TEST_SUITE_P(Pipeline, PipelineGPipe,
                         ::testing::Values(GPipeCase{2, 2}, GPipeCase{2, 4}, GPipeCase{3, 2}, GPipeCase{3, 4}),
                         [](const auto& info) {
                           return std::to_string(info.param.stages) + "stages_" + std::to_string(info.param.micro) + "micro";
                         });

class PipelineOneStage : public ::testing::TestWithParam<WeightMode> {};

TEST_P(PipelineOneStage, EqualsSequentialBitForBit) {
  const int64_t batch = 8, steps = 10;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 64, 4);
  auto seq = sequential_weights(batch, data, steps);
  PipelineOptions po = testing::test_pipeline_options();
  po.weights = GetParam();
  PipeRun run = pipeline_weights(batch, 1, po, data, steps);
  EXPECT_TRUE(bitwise_equal(run.weights, seq)) << weight_mode_name(GetParam()) << ": max rel diff "
                                               << max_relative_diff(run.weights, seq);
}

INSTANTIATE_TEST_SUITE_P(Pipeline, PipelineOneStage,
                         ::testing::Values(WeightMode::kSpecTrain, WeightMode::kStash, WeightMode::kStale),
                         [](const auto& info) { return std::string(weight_mode_name(info.param)); });

struct TraceCase {
  WeightMode weights;
  Staleness staleness;
};

class PipelineTrace : public ::testing::TestWithParam<TraceCase> {};

TEST_P(PipelineTrace, VersionsAndStalenessFollowTheSchedule) {
  const auto [weights, staleness] = GetParam();
  const int N = 4;
  const int64_t batch = 4, steps = 12;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 64, 6);
  PipelineOptions po = testing::test_pipeline_options();
  po.weights = weights;
  po.staleness = staleness;
  PipeRun run = pipeline_weights(batch, N, po, data, steps);
  ASSERT_EQ(run.trace.size(), static_cast<size_t>(2 * N * steps));
  for (int k = 0; k < N; ++k) {
    std::vector<PassRecord> mine;
    for (const PassRecord& r : run.trace)
      if (r.stage == k) mine.push_back(r);
    ASSERT_EQ(mine.size(), static_cast<size_t>(2 * steps));
    // Order: N-k-1 warm-up forwards, then F, B alternating, then the drain of backwards.
    const int warm = N - k - 1;
    int64_t f = 0, b = 0;
    std::vector<std::pair<bool, int64_t>> want;
    while (f < warm) want.push_back({false, f++});
    while (f < steps) {
      want.push_back({false, f++});
      want.push_back({true, b++});
    }
    while (b < steps) want.push_back({true, b++});
    for (size_t i = 0; i < mine.size(); ++i) {
      const PassRecord& r = mine[i];
      ASSERT_EQ(r.backward, want[i].first) << "stage " << k << " pass " << i;
      ASSERT_EQ(r.mini_batch, want[i].second) << "stage " << k << " pass " << i;
      const int64_t fwd_version = std::max<int64_t>(0, r.mini_batch - warm);
      if (!r.backward) {
        EXPECT_EQ(r.version, fwd_version) << "stage " << k << " F" << r.mini_batch;
      } else if (weights == WeightMode::kStash) {
        EXPECT_EQ(r.version, fwd_version) << "stage " << k << " B" << r.mini_batch;
      } else {
        EXPECT_EQ(r.version, r.mini_batch) << "stage " << k << " B" << r.mini_batch;
      }
      const int s = weights == WeightMode::kSpecTrain ? spectrain_staleness(k, N, r.backward, staleness) : 0;
      EXPECT_EQ(r.staleness, s) << "stage " << k << (r.backward ? " B" : " F") << r.mini_batch;
    }
  }
  EXPECT_TRUE(std::isfinite(run.result.last_loss));
}

INSTANTIATE_TEST_SUITE_P(Pipeline, PipelineTrace,
                         ::testing::Values(TraceCase{WeightMode::kSpecTrain, Staleness::kPaper},
                                           TraceCase{WeightMode::kSpecTrain, Staleness::kExact},
                                           TraceCase{WeightMode::kStash, Staleness::kPaper},
                                           TraceCase{WeightMode::kStale, Staleness::kPaper}),
                         [](const auto& info) {
                           return std::string(weight_mode_name(info.param.weights)) + "_" +
                                  staleness_name(info.param.staleness);
                         });

TEST(PipelineDeterminism, SameSeedSameWeights) {
  const int64_t batch = 4, steps = 20;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 64, 7);
  PipelineOptions po = testing::test_pipeline_options();
  po.weights = WeightMode::kSpecTrain;
  PipeRun a = pipeline_weights(batch, 3, po, data, steps);
  PipeRun b = pipeline_weights(batch, 3, po, data, steps);
  EXPECT_TRUE(bitwise_equal(a.weights, b.weights));
  EXPECT_EQ(a.result.last_loss, b.result.last_loss);
}

// Every stage's executor adopting its parameters' initial values (PipelineOptions::
// adopt_initial_values, what the command line does on the CPU) trains the same bits, evaluates the
// same, and take_trained_initializers gives what trained_initializers copies, under every weight
// mode (SpecTrain and stash keep separate master copies, stale none).
TEST(PipelineMemory, AdoptedWeightsAndTakenResultsAreTheSame) {
  const int64_t batch = 8, steps = 12;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 64, 9);
  for (WeightMode m : {WeightMode::kSpecTrain, WeightMode::kStash, WeightMode::kStale}) {
    SCOPED_TRACE(weight_mode_name(m));
    std::map<std::string, HostTensor> trained[2];
    double val_loss[2] = {0, 0};
    for (int adopt = 0; adopt < 2; ++adopt) {
      auto md = digits_model(batch);
      PipelineOptions po = testing::test_pipeline_options();
      po.weights = m;
      po.adopt_initial_values = adopt == 1;
      Plan plan = make_plan(*md, 3, po.schedule, po.weights, po.micro_batches);
      auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
      ASSERT_TRUE(p) << p.status().message();
      // Adopted on host-memory executors only (separate_host_tests gives every executor host copies).
      const bool direct = !testing::separate_host_run();
      for (Value* v : md->tg.params) EXPECT_EQ(v->data->data() == nullptr, adopt == 1 && direct) << v->name;
      TrainConfig cfg = config(0);
      cfg.steps = steps;
      auto r = (*p)->train(data, nullptr, cfg);
      ASSERT_TRUE(r) << r.status().message();
      auto ev = (*p)->evaluate(data);
      ASSERT_TRUE(ev) << ev.status().message();
      val_loss[adopt] = ev->loss;
      const auto copied = (*p)->trained_initializers();
      trained[adopt] = (*p)->take_trained_initializers();
      EXPECT_TRUE(bitwise_equal(trained[adopt], copied));
    }
    EXPECT_TRUE(bitwise_equal(trained[1], trained[0]));
    EXPECT_EQ(val_loss[1], val_loss[0]);
  }
}

// The single-stage trainer likewise: adopting the initial values and taking the results changes
// no bit, and the taken parameters are the executor's own buffers (moved, not copied).
TEST(PipelineMemory, TrainerAdoptsAndTakes) {
  const int64_t batch = 8, steps = 12;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 64, 9);
  const auto plain = sequential_weights(batch, data, steps);
  auto md = digits_model(batch);
  auto dev = open_device(DeviceKind::kCpu, 0);
  ASSERT_TRUE(dev);
  Trainer::Options to = testing::test_trainer_options();
  to.adopt_initial_values = true;
  auto t = Trainer::create(md->g(), md->tg, *dev, to);
  ASSERT_TRUE(t) << t.status().message();
  const bool direct = (*t)->executor().direct();  // not under separate_host_tests
  for (Value* v : md->tg.params) EXPECT_EQ(v->data->data() == nullptr, direct) << v->name;
  auto r = (*t)->train(data, nullptr, config(steps));
  ASSERT_TRUE(r) << r.status().message();
  const void* buffer = direct ? (*t)->executor().tensor(md->tg.params[0]).data() : nullptr;
  auto taken = (*t)->take_trained_initializers();
  if (direct) {
    EXPECT_EQ(taken.at(md->tg.params[0]->name).data(), buffer);
  }
  std::map<std::string, HostTensor> params;
  for (Value* v : md->tg.params) params[v->name] = taken.at(v->name);
  EXPECT_TRUE(bitwise_equal(params, plain));
}

TEST(PipelineModes, WeightModesDifferAndTrain) {
  // Stale, stash and spectrain see different weights on a 3-stage pipeline; each still learns.
  const int64_t batch = 8, steps = 40;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 64, 8);
  std::vector<std::map<std::string, HostTensor>> ws;
  for (WeightMode m : {WeightMode::kSpecTrain, WeightMode::kStash, WeightMode::kStale}) {
    PipelineOptions po = testing::test_pipeline_options();
    po.weights = m;
    PipeRun run = pipeline_weights(batch, 3, po, data, steps);
    EXPECT_LT(run.result.last_loss, run.result.first_loss) << weight_mode_name(m);
    ws.push_back(run.weights);
  }
  EXPECT_GT(max_relative_diff(ws[0], ws[1]), 1e-6);
  EXPECT_GT(max_relative_diff(ws[1], ws[2]), 1e-6);
}

TEST(PipelineStats, SteadyStateCoversTheMiniBatchesAfterTheFirstFifth) {
  // 20 steps of synchronous 1F1B over 2 micro-batches: each stage's figures cover mini-batches
  // 4..19 (the steps after the first fifth), whose passes all run after the stage's update 3 and
  // before its update 19. Their trace spans (waiting included) sum to what the stats say of those
  // 16 mini-batches, which the whole run's (first steps' warm-up included) would not.
  const int64_t batch = 8, steps = 20;
  auto md = digits_model(batch / 2);
  Dataset data = digits_data(*md, 96, 3);
  Plan plan = make_plan(*md, 2, Schedule::k1F1B, WeightMode::kSync, 2);
  PipelineOptions po = testing::test_pipeline_options();
  po.threads_per_stage = 1;
  po.schedule = Schedule::k1F1B;
  po.weights = WeightMode::kSync;
  po.micro_batches = 2;
  po.record_trace = true;
  auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
  ASSERT_TRUE(p) << p.status().message();
  auto r = (*p)->train(data, nullptr, config(steps));
  ASSERT_TRUE(r) << r.status().message();
  const std::vector<PassRecord> trace = (*p)->trace();
  for (const StageStats& s : (*p)->stage_stats()) {
    EXPECT_EQ(s.updates, steps);
    EXPECT_GT(s.window_s, 0);
    EXPECT_GT(s.busy_fraction, 0);
    EXPECT_LE(s.busy_fraction + s.wait_fraction, 1.0 + 1e-9);
    double in_passes_ms = 0, first_ms = 1e300, last_ms = 0;
    int passes = 0;
    for (const PassRecord& t : trace)
      if (t.stage == s.stage && t.mini_batch >= 4) {
        in_passes_ms += t.end_ms - t.start_ms;
        first_ms = std::min(first_ms, t.start_ms);
        last_ms = std::max(last_ms, t.end_ms);
        ++passes;
      }
    EXPECT_EQ(passes, 16 * 2 * 2);
    EXPECT_LE(last_ms - first_ms, 1e3 * s.window_s + 1e-6);  // the passes lie in the window
    const double stats_ms = 16 * (s.fwd_ms + s.bwd_ms + s.wait_ms);
    EXPECT_NEAR(in_passes_ms, stats_ms, 0.01 * stats_ms + 0.005 * passes) << "stage " << s.stage << ": " << in_passes_ms << " ms in the trace";
    EXPECT_NEAR(s.busy_fraction, 16e-3 * (s.fwd_ms + s.bwd_ms + s.update_ms) / s.window_s, 1e-9);
  }
  // A run too short for a steady state (fewer than 5 steps) reports over the whole run.
  auto q = PipelineTrainer::create(md->g(), md->tg, plan, po);
  ASSERT_TRUE(q) << q.status().message();
  ASSERT_TRUE((*q)->train(data, nullptr, config(4)));
  for (const StageStats& s : (*q)->stage_stats()) {
    EXPECT_EQ(s.window_s, 0);
    EXPECT_GT(s.busy_fraction, 0);
  }
}

TEST(PipelineEval, ValidationAndMetrics) {
  const int64_t batch = 8;
  auto md = digits_model(batch);
  Dataset data = digits_data(*md, 64, 9), val = digits_data(*md, 20, 10);
  Plan plan = make_plan(*md, 2, Schedule::k1F1B, WeightMode::kSpecTrain, 1);
  PipelineOptions po = testing::test_pipeline_options();
  po.threads_per_stage = 1;
  auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
  ASSERT_TRUE(p) << p.status().message();
  TrainConfig cfg = config(0);
  cfg.metrics_path = (std::filesystem::temp_directory_path() / ("pipetrain-pipe-metrics-" + std::to_string(::getpid()) + ".csv")).string();
  cfg.epochs = 2;
  auto r = (*p)->train(data, &val, cfg);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->steps, 16);
  EXPECT_EQ(r->val.samples, 20);
  auto e = (*p)->evaluate(val);
  ASSERT_TRUE(e) << e.status().message();
  // The epoch-end validation saw the weights after the last update: the final weights.
  EXPECT_DOUBLE_EQ(e->loss, r->val.loss);
  auto stats = (*p)->stage_stats();
  ASSERT_EQ(stats.size(), 2u);
  for (const StageStats& s : stats) {
    EXPECT_EQ(s.forwards, 16);
    EXPECT_EQ(s.backwards, 16);
    EXPECT_GT(s.busy_fraction, 0);
    EXPECT_LE(s.busy_fraction, 1.0);
  }
  EXPECT_EQ((*p)->trained_initializers().size(), 6u);
  std::ifstream csv(cfg.metrics_path);
  std::string line;
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 17);  // header + one row per mini-batch
  std::filesystem::remove(cfg.metrics_path);
  const std::string trace = cfg.metrics_path + ".trace.json";
  EXPECT_TRUE((*p)->write_chrome_trace(trace).is_ok());
  EXPECT_TRUE(std::filesystem::exists(trace));
  std::filesystem::remove(trace);
}

TEST(PipelineErrors, DivergenceStopsEveryStage) {
  const int64_t batch = 8;
  auto md = digits_model(batch);
  Dataset data = digits_data(*md, 64, 13);
  Plan plan = make_plan(*md, 3, Schedule::k1F1B, WeightMode::kSpecTrain, 1);
  auto p = PipelineTrainer::create(md->g(), md->tg, plan, testing::test_pipeline_options());
  ASSERT_TRUE(p) << p.status().message();
  TrainConfig cfg = config(200);
  cfg.lr = 1e30f;
  auto r = (*p)->train(data, nullptr, cfg);  // returns (the stages are aborted, not left waiting)
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kDiverged) << r.status().message();
}

// 1F1B on 2, 3, 4 stages in every weight mode against tests/python/pipeline_reference.py, an
// independent float64 reference that keeps each stage's weight versions explicitly.
TEST(PipelineReference, MatchesExplicitVersionReference) {
  if (!testing::have_python()) GTEST_SKIP() << "numpy/onnx missing";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pipetrain-pipeline-ref-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int64_t batch = 8, steps = 20;
  const float lr = 0.1f;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 64, 12);
  ASSERT_TRUE(write_npy((dir / "x.npy").string(), data.x).is_ok());
  ASSERT_TRUE(write_npy((dir / "y.npy").string(), data.y).is_ok());
  std::ofstream(dir / "model.txt") << PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx\n";
  std::ofstream cases(dir / "cases.txt");
  struct Mode {
    WeightMode w;
    Staleness s;
    const char* name;
  };
  const Mode modes[] = {{WeightMode::kSpecTrain, Staleness::kPaper, "spectrain paper"},
                        {WeightMode::kSpecTrain, Staleness::kExact, "spectrain exact"},
                        {WeightMode::kStash, Staleness::kPaper, "stash paper"},
                        {WeightMode::kStale, Staleness::kPaper, "stale paper"}};
  for (int n : {2, 3, 4})
    for (const Mode& m : modes) {
      PipelineOptions po = testing::test_pipeline_options();
      po.weights = m.w;
      po.staleness = m.s;
      auto md = digits_model(batch);
      Plan plan = make_plan(*md, n, po.schedule, po.weights, 1);
      auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
      ASSERT_TRUE(p) << p.status().message();
      TrainConfig cfg = config(steps);
      cfg.lr = lr;
      auto r = (*p)->train(data, nullptr, cfg);
      ASSERT_TRUE(r) << r.status().message();
      std::string name = std::to_string(n) + "_" + weight_mode_name(m.w) + "_" + staleness_name(m.s);
      fs::create_directories(dir / name);
      for (auto& [pname, t] : (*p)->parameters())
        ASSERT_TRUE(write_npy((dir / name / (pname + ".npy")).string(), t).is_ok());
      std::string bal;
      for (int c : balance_for(n)) bal += (bal.empty() ? "" : ",") + std::to_string(c);
      cases << name << " " << n << " " << bal << " " << m.name << " " << steps << " " << batch << " " << lr
            << " 0.9 0.0001\n";
    }
  // PipeDream-2BW, and with prediction: micro-batches of batch / M, M >= N, one update per
  // mini-batch of `batch`.
  for (WeightMode w2 : {WeightMode::k2BW, WeightMode::k2BWPredict})
  for (int n : {2, 3, 4})
    for (int micro : {n, 2 * n}) {
      PipelineOptions po = testing::test_pipeline_options();
      po.weights = w2;
      po.micro_batches = micro;
      const int64_t mini = 4 * micro;
      auto md = digits_model(mini / micro);
      Plan plan = make_plan(*md, n, po.schedule, po.weights, micro);
      auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
      ASSERT_TRUE(p) << p.status().message();
      TrainConfig cfg = config(steps);
      cfg.lr = lr;
      auto r = (*p)->train(data, nullptr, cfg);
      ASSERT_TRUE(r) << r.status().message();
      // The trace: every pass of mini-batch i read version max(0, i - 1) (2bw), or i, predicted one
      // step ahead exactly for the forwards of micro-batches j < N-k-1 of i >= 1 (2bw-predict).
      for (const PassRecord& rec : (*p)->trace()) {
        if (w2 == WeightMode::k2BW) {
          ASSERT_EQ(rec.version, std::max<int64_t>(0, rec.mini_batch - 1)) << n << " stages, M " << micro;
        } else {
          const bool ahead = !rec.backward && rec.mini_batch > 0 && rec.micro_batch < n - rec.stage - 1;
          ASSERT_EQ(rec.staleness, ahead ? 1 : 0) << n << " stages, M " << micro << ", stage " << rec.stage;
          ASSERT_EQ(rec.version, rec.mini_batch - (ahead ? 1 : 0));
        }
      }
      const std::string name = std::to_string(n) + "_" + weight_mode_name(w2) + "_m" + std::to_string(micro);
      fs::create_directories(dir / name);
      for (auto& [pname, t] : (*p)->parameters())
        ASSERT_TRUE(write_npy((dir / name / (pname + ".npy")).string(), t).is_ok());
      std::string bal;
      for (int c : balance_for(n)) bal += (bal.empty() ? "" : ",") + std::to_string(c);
      cases << name << " " << n << " " << bal << " " << weight_mode_name(w2) << " m" << micro << " " << steps << " " << mini
            << " " << lr << " 0.9 0.0001\n";
    }
  cases.close();
  const std::string cmd = testing::python() + " " PIPETRAIN_SOURCE_DIR "/tests/python/pipeline_reference.py " + dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  fs::remove_all(dir);
}

// The optimizers of --optimizer (importer/training.h) in the pipeline: GPipe on 2 and 3 stages
// equals one stage; 1F1B SpecTrain with each optimizer's own prediction against
// tests/python/pipeline_reference.py (explicit weight and optimizer-state versions).
struct OptCase {
  const char* name;
  SgdOptions opt;
  float lr;
};

std::vector<OptCase> optimizer_cases() {
  std::vector<OptCase> c;
  SgdOptions o;
  o.kind = OptimizerKind::kSgd;
  o.momentum = 0.9f;
  o.dampening = 0.1f;
  o.weight_decay = 1e-3f;
  c.push_back({"sgd", o, 0.1f});
  o.dampening = 0;
  o.nesterov = true;
  c.push_back({"sgd_nesterov", o, 0.1f});
  o = SgdOptions{};
  o.kind = OptimizerKind::kAdam;
  o.beta1 = 0.85f;
  o.beta2 = 0.99f;
  o.eps = 1e-6f;
  o.weight_decay = 1e-3f;
  c.push_back({"adam", o, 0.01f});
  o = SgdOptions{};
  // Betas and eps as Adam's above: with torch's defaults (0.9, 0.999, 1e-8) float32 training
  // itself ends 1.7e-5 from the float64 reference after 20 steps, with stale weights too (no
  // prediction involved): beta2 = 0.999's small bias correction and eps = 1e-8 let the float32
  // rounding of tiny gradients through (measured; tests/python/torch_optim_oracle.py explains).
  o.kind = OptimizerKind::kAdamW;
  o.beta1 = 0.85f;
  o.beta2 = 0.99f;
  o.eps = 1e-6f;
  o.weight_decay = 0.1f;
  c.push_back({"adamw", o, 0.01f});
  return c;
}

TEST(PipelineOptimizers, GPipeEqualsOneStage) {
  const int64_t batch = 8, steps = 12;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 96, 3);
  std::map<std::string, HostTensor> initial;
  for (Value* p : probe->tg.params) initial[p->name] = *p->data;
  for (const OptCase& c : optimizer_cases())
    for (int stages : {2, 3}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(stages) + " stages");
      TrainConfig cfg = config(steps);
      cfg.lr = c.lr;
      auto seq = sequential_weights(batch, data, steps, c.opt, cfg);
      PipelineOptions po = testing::test_pipeline_options();
      po.schedule = Schedule::kGPipe;
      po.micro_batches = 2;
      PipeRun run = pipeline_weights(batch / 2, stages, po, data, steps, c.opt, cfg);
      EXPECT_LE(max_relative_diff(run.weights, seq), 1e-5);
      EXPECT_GT(max_relative_diff(seq, initial), 1e-3);  // the weights did move
    }
}

// --clip-grad-norm: GPipe on 2 and 3 stages (the norm summed across stages) equals one stage, and
// the clip is active (a run without it ends elsewhere).
TEST(PipelineOptimizers, ClipGradNormGPipeEqualsOneStage) {
  const int64_t batch = 8, steps = 12;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 96, 3);
  for (const OptCase& c : optimizer_cases()) {
    if (std::string(c.name) != "sgd" && std::string(c.name) != "adam") continue;
    TrainConfig cfg = config(steps);
    cfg.lr = c.lr;
    const auto unclipped = sequential_weights(batch, data, steps, c.opt, cfg);
    cfg.clip_grad_norm = 0.05;
    const auto seq = sequential_weights(batch, data, steps, c.opt, cfg);
    EXPECT_GT(max_relative_diff(seq, unclipped), 1e-3) << c.name;
    for (int stages : {2, 3}) {
      PipelineOptions po = testing::test_pipeline_options();
      po.schedule = Schedule::kGPipe;
      po.micro_batches = 2;
      PipeRun run = pipeline_weights(batch / 2, stages, po, data, steps, c.opt, cfg);
      EXPECT_LE(max_relative_diff(run.weights, seq), 1e-5) << c.name << ", " << stages << " stages";
    }
  }
}

TEST(PipelineReference, OptimizersMatchExplicitVersionReference) {
  if (!testing::have_python()) GTEST_SKIP() << "numpy/onnx missing";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pipetrain-pipeline-opt-ref-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int64_t batch = 8, steps = 20;
  auto probe = digits_model(batch);
  Dataset data = digits_data(*probe, 64, 12);
  ASSERT_TRUE(write_npy((dir / "x.npy").string(), data.x).is_ok());
  ASSERT_TRUE(write_npy((dir / "y.npy").string(), data.y).is_ok());
  std::ofstream(dir / "model.txt") << PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx\n";
  std::ofstream cases(dir / "cases.txt");
  for (const OptCase& c : optimizer_cases())
    for (Staleness s : {Staleness::kPaper, Staleness::kExact}) {
      const int n = 3;
      PipelineOptions po = testing::test_pipeline_options();
      po.weights = WeightMode::kSpecTrain;
      po.staleness = s;
      auto md = digits_model(batch, c.opt);
      Plan plan = make_plan(*md, n, po.schedule, po.weights, 1);
      auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
      ASSERT_TRUE(p) << p.status().message();
      TrainConfig cfg = config(steps);
      cfg.lr = c.lr;
      auto r = (*p)->train(data, nullptr, cfg);
      ASSERT_TRUE(r) << r.status().message();
      const std::string name = std::string(c.name) + "_" + staleness_name(s);
      fs::create_directories(dir / name);
      for (auto& [pname, t] : (*p)->parameters())
        ASSERT_TRUE(write_npy((dir / name / (pname + ".npy")).string(), t).is_ok());
      std::string bal;
      for (int k : balance_for(n)) bal += (bal.empty() ? "" : ",") + std::to_string(k);
      const SgdOptions& o = c.opt;
      const bool adam = o.kind == OptimizerKind::kAdam || o.kind == OptimizerKind::kAdamW;
      cases << name << " " << n << " " << bal << " spectrain " << staleness_name(s) << " " << steps << " " << batch
            << " " << c.lr << " " << o.momentum << " " << o.weight_decay << " " << optimizer_name(o.kind);
      if (adam) cases << " beta1=" << o.beta1 << " beta2=" << o.beta2 << " eps=" << o.eps;
      else cases << " dampening=" << o.dampening << " nesterov=" << (o.nesterov ? 1 : 0);
      cases << "\n";
    }
  cases.close();
  const std::string cmd = testing::python() + " " PIPETRAIN_SOURCE_DIR "/tests/python/pipeline_reference.py " + dir.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  fs::remove_all(dir);
}

// ---- CUDA stages (skipped without a GPU; tools/gpu-check.sh runs them on one) ----

// Without the backend or a GPU, CUDA is refused with the reason, not crashed into.
// Rows of a metrics file being written (without its header): the steps the training loop has done.
int64_t metrics_rows(const std::string& path) {
  std::ifstream in(path);
  int64_t n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return std::max<int64_t>(0, n - 1);
}

// RunShared::lead in a whole run: the training loop validates after every step on a validation set
// far larger than a mini-batch, so it is much slower than the stages. They must still not update
// more than the lead (2N + kPrefetchDepth + 2, PipelineTrainer::train) past the steps it has
// written to metrics.csv: what they post for it (a loss per pass, the weights at every validation
// step) would otherwise pile up over the whole segment (the soak's memory growth: thousands of
// losses and ~100 weight snapshots waiting in a 20,000-step run).
TEST(PipelineMemory, StagesStayNearTheTrainingLoop) {
  struct Case {
    int stages;
    Schedule schedule;
    int micro;
  };
  for (const Case c : {Case{3, Schedule::k1F1B, 1}, Case{2, Schedule::kGPipe, 2}}) {
    const int64_t batch = 4, steps = 60;
    auto md = digits_model(batch);
    Dataset data = digits_data(*md, 64, 11), val = digits_data(*md, 2000, 12);
    Plan plan = make_plan(*md, c.stages, c.schedule, WeightMode::kSpecTrain, c.micro);
    PipelineOptions po = testing::test_pipeline_options();
    po.schedule = c.schedule;
    po.micro_batches = c.micro;
    po.threads_per_stage = 1;
    po.record_trace = false;
    TrainConfig cfg = config(steps);
    cfg.eval_every = 1;
    cfg.metrics_path = (std::filesystem::temp_directory_path() /
                        ("pipetrain-lead-" + std::to_string(::getpid()) + "-" + std::to_string(c.stages) + ".csv"))
                           .string();
    const std::string partial = cfg.metrics_path + ".partial";
    std::mutex mu;
    int64_t most_ahead = 0;  // of a stage's update over the loop's finished steps
    po.after_update = [&](int, int64_t step) {
      const int64_t ahead = step - metrics_rows(partial);
      std::lock_guard<std::mutex> lock(mu);
      most_ahead = std::max(most_ahead, ahead);
    };
    auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
    ASSERT_TRUE(p) << p.status().message();
    auto r = (*p)->train(data, &val, cfg);
    ASSERT_TRUE(r) << r.status().message();
    EXPECT_EQ(r->steps, steps);
    const int64_t lead = 2 * c.stages + kPrefetchDepth + 2;
    EXPECT_LE(most_ahead, lead) << c.stages << " stages, " << schedule_name(c.schedule);
    std::filesystem::remove(cfg.metrics_path);
    std::filesystem::remove(partial);
  }
}

// A number of the calling thread, never reused (a pthread_t can be: a new thread may get the
// descriptor of one that ended).
int thread_serial() {
  static std::atomic<int> next{0};
  thread_local const int me = next++;
  return me;
}

// A run drains its stages at every checkpoint; their threads carry on into the next segment
// rather than being started anew (a new thread per stage per segment fragmented the allocator's
// per-thread arenas: the soak's resident set crept up by ~25 KiB a checkpoint).
TEST(PipelineMemory, StageThreadsLastTheRun) {
  const int64_t batch = 4, steps = 50;
  auto md = digits_model(batch);
  Dataset data = digits_data(*md, 64, 13);
  Plan plan = make_plan(*md, 3, Schedule::k1F1B, WeightMode::kSpecTrain, 1);
  PipelineOptions po = testing::test_pipeline_options();
  po.threads_per_stage = 1;
  std::mutex mu;
  std::map<int, std::set<int>> threads;  // [stage] -> thread_serial()s
  po.after_update = [&](int stage, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    threads[stage].insert(thread_serial());
  };
  TrainConfig cfg = config(steps);
  cfg.checkpoint.dir = (std::filesystem::temp_directory_path() / ("pipetrain-threads-" + std::to_string(::getpid()))).string();
  cfg.checkpoint.every = 10;  // 5 segments
  auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
  ASSERT_TRUE(p) << p.status().message();
  auto r = (*p)->train(data, nullptr, cfg);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->steps, steps);
  EXPECT_TRUE(std::filesystem::exists(cfg.checkpoint.dir + "/step-40.ckpt"));
  ASSERT_EQ(threads.size(), 3u);
  for (auto& [stage, ids] : threads) EXPECT_EQ(ids.size(), 1u) << "stage " << stage << " ran on " << ids.size() << " threads";
  std::filesystem::remove_all(cfg.checkpoint.dir);
}

TEST(CudaRuntime, RefusedWithTheReasonWithoutAGpu) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  auto d = open_device(DeviceKind::kCuda, 0);
  ASSERT_FALSE(d);
  EXPECT_FALSE(d.status().message().empty());
  auto md = digits_model(16);
  ASSERT_TRUE(md);
  auto t = Trainer::create(md->g(), md->tg, DeviceKind::kCuda);
  EXPECT_FALSE(t);
}

// The stage arithmetic on the device against the CPU device.
TEST(CudaRuntime, DeviceArithmeticMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto gpu = open_device(DeviceKind::kCuda, 0);
  ASSERT_TRUE(gpu) << gpu.status().message();
  auto cpu = open_device(DeviceKind::kCpu);
  ASSERT_TRUE(cpu);
  const int64_t n = 100003;  // not a multiple of a block
  HostTensor w(DType::kFloat32, {n}), v(DType::kFloat32, {n}), lr(DType::kFloat32, {1});
  for (int64_t i = 0; i < n; ++i) {
    w.as<float>()[i] = std::sin(0.001f * i);
    v.as<float>()[i] = std::cos(0.002f * i);
  }
  lr.as<float>()[0] = 0.05f;
  void* s = nullptr;
  auto up = [&](const HostTensor& h) {
    auto b = DeviceBuffer::allocate(*gpu, h.dtype(), h.dims(), s);
    EXPECT_TRUE(b) << b.status().message();
    EXPECT_TRUE((*gpu)->to_device(b->view().data, h.data(), h.bytes(), s).is_ok());
    return std::move(*b);
  };
  DeviceBuffer dw = up(w), dv = up(v), dlr = up(lr), dout = up(w);
  ASSERT_TRUE((*gpu)->predict(dout.view(), dw.view(), dv.view(), dlr.view(), 3, s).is_ok());
  ASSERT_TRUE((*gpu)->accumulate(dout.view(), dv.view(), s).is_ok());
  ASSERT_TRUE((*gpu)->divide(dout.view(), 4, s).is_ok());
  auto got = dout.to_host(s);
  ASSERT_TRUE(got) << got.status().message();
  HostTensor want = w;
  ASSERT_TRUE((*cpu)->predict(want.view(), w.view(), v.view(), lr.view(), 3, nullptr).is_ok());
  ASSERT_TRUE((*cpu)->accumulate(want.view(), v.view(), nullptr).is_ok());
  ASSERT_TRUE((*cpu)->divide(want.view(), 4, nullptr).is_ok());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(got->as<float>()[i], want.as<float>()[i], 1e-6 + 1e-5 * std::abs(want.as<float>()[i])) << i;
}

// Single-stage training on the GPU follows the CPU run (summation orders differ: not bit-equal).
TEST(CudaRuntime, TrainerMatchesCpu) {
  if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto md = digits_model(16);
  ASSERT_TRUE(md);
  const Dataset data = digits_data(*md, 160, 3);
  auto t = Trainer::create(md->g(), md->tg, DeviceKind::kCuda);
  ASSERT_TRUE(t) << t.status().message();
  auto r = (*t)->train(data, nullptr, config(30));
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_LT(max_relative_diff((*t)->parameters(), sequential_weights(16, data, 30)), 1e-4);
}

// A pipeline the CUDA tests run: its stages, schedule, weights and micro-batches, as PipelineOptions.
struct CudaCase {
  int stages;
  Schedule schedule;
  WeightMode weights;
  int micro;
  PipelineOptions options() const {
    PipelineOptions po = testing::test_pipeline_options();
    po.schedule = schedule;
    po.weights = weights;
    po.micro_batches = micro;
    return po;
  }
};

// Pipelines of CUDA stages (several stages per GPU on a one-GPU machine) follow the same
// pipeline on CPU stages, for SpecTrain 1F1B, stash and GPipe.
TEST(CudaRuntime, PipelineMatchesCpuStages) {
  if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto md = digits_model(16);
  ASSERT_TRUE(md);
  const Dataset data = digits_data(*md, 160, 4);
  for (const CudaCase& c : {CudaCase{3, Schedule::k1F1B, WeightMode::kSpecTrain, 1},
                            CudaCase{4, Schedule::k1F1B, WeightMode::kStash, 1},
                            CudaCase{2, Schedule::kGPipe, WeightMode::kSpecTrain, 2}}) {
    PipelineOptions po = c.options();
    const int64_t batch = c.schedule == Schedule::kGPipe ? 8 : 16;
    const PipeRun on_cpu = pipeline_weights(batch, c.stages, po, data, 25);
    po.device = DeviceKind::kCuda;
    const PipeRun on_gpu = pipeline_weights(batch, c.stages, po, data, 25);
    EXPECT_LT(max_relative_diff(on_gpu.weights, on_cpu.weights), 1e-4) << c.stages << " stages";
    EXPECT_NEAR(on_gpu.result.last_loss, on_cpu.result.last_loss, 1e-4 * std::abs(on_cpu.result.last_loss) + 1e-5);
  }
}

// CUDA graphs (Executor, runtime/exec/graph_cache.h) replay the kernels they captured on the same
// bytes: training with them is bit for bit training without them, on every kind of pass (SpecTrain
// 1F1B with per-pass activation slots, GPipe's micro-batches, ZB-H1's split backward, the
// single-stage trainer), and the graphs are really used (captured, then replayed).
TEST(CudaRuntime, GraphsTrainBitForBitAsKernelByKernel) {
  if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto md = digits_model(16);
  ASSERT_TRUE(md);
  const Dataset data = digits_data(*md, 160, 4);
  for (const CudaCase& c : {CudaCase{3, Schedule::k1F1B, WeightMode::kSpecTrain, 1},
                            CudaCase{2, Schedule::kGPipe, WeightMode::kSpecTrain, 2},
                            CudaCase{2, Schedule::kZBH1, WeightMode::kSync, 2}}) {
    PipelineOptions po = c.options();
    po.device = DeviceKind::kCuda;
    const int64_t batch = c.micro > 1 ? 8 : 16;
    po.exec.cuda_graphs = false;
    const PipeRun eager = pipeline_weights(batch, c.stages, po, data, 25);
    EXPECT_TRUE(eager.graphs.empty());
    po.exec.cuda_graphs = true;
    const PipeRun graphs = pipeline_weights(batch, c.stages, po, data, 25);
    EXPECT_EQ(max_relative_diff(graphs.weights, eager.weights), 0.0) << c.stages << " stages, " << schedule_name(c.schedule);
    EXPECT_EQ(graphs.result.last_loss, eager.result.last_loss);
    ASSERT_EQ(graphs.graphs.size(), static_cast<size_t>(c.stages));
    for (const GraphStats& g : graphs.graphs) {
      EXPECT_GT(g.captures, 0) << g.summary();
      EXPECT_GT(g.replays, 10 * g.captures) << g.summary();
      EXPECT_EQ(g.refused, 0) << g.summary();
    }
  }
  ExecSettings off;
  off.cuda_graphs = false;
  Trainer::Options to;
  to.exec = off;
  auto gpu = open_device(DeviceKind::kCuda);
  ASSERT_TRUE(gpu) << gpu.status().message();
  auto t_off = Trainer::create(md->g(), md->tg, *gpu, to);
  auto t_on = Trainer::create(md->g(), md->tg, DeviceKind::kCuda);
  ASSERT_TRUE(t_off && t_on);
  ASSERT_TRUE((*t_off)->train(data, nullptr, config(30)));
  ASSERT_TRUE((*t_on)->train(data, nullptr, config(30)));
  EXPECT_EQ(max_relative_diff((*t_on)->parameters(), (*t_off)->parameters()), 0.0);
  EXPECT_GT((*t_on)->executor().graph_stats().replays, 0) << (*t_on)->executor().graph_stats().summary();
  EXPECT_FALSE((*t_off)->executor().graphs_on());
}

}  // namespace
}  // namespace pt
