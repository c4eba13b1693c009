// Weights shared across pipeline stages (a copied layer and a merged bias; a tied embedding and
// output layer): GPipe equals sequential training, 1F1B in every weight mode equals the explicit
// version reference tests/python/pipeline_reference.py, the partitioner charges the transfers and
// copies, and plans the trainer cannot run are refused naming the parameter and the stages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "importer/importer.h"
#include "importer/training.h"
#include "kernels/device.h"
#include "partitioner/partition.h"
#include "runtime/data/data.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/single/trainer.h"
#include "tests/runtime/test_settings.h"
#include "tests/python_interpreter.h"

namespace pt {
namespace {

namespace fs = std::filesystem;

// The models of tests/python/make_shared_weight_models.py, written once per test binary run.
const fs::path& model_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("pipetrain-shared-models-" + std::to_string(::getpid()));
    const std::string cmd = testing::python() + " " PIPETRAIN_SOURCE_DIR "/tests/python/make_shared_weight_models.py " + d.string();
    if (std::system(cmd.c_str()) != 0) return fs::path();
    return d;
  }();
  return dir;
}

using testing::have_python;

struct Model {
  ImportedModel m;
  TrainingGraph tg;
  Graph& g() { return *m.graph; }
};

std::unique_ptr<Model> load(const std::string& name, int64_t batch) {
  auto out = std::make_unique<Model>();
  ImportOptions io;
  io.batch_size = batch;
  // Per-node plans (--balance counts, the cuts between each Gemm and its Relu): no epilogue fusion.
  io.fuse.epilogue = false;
  auto m = import_onnx((model_dir() / (name + ".onnx")).string(), io);
  EXPECT_TRUE(m) << m.status().message();
  if (!m) return nullptr;
  out->m = std::move(*m);
  auto tg = build_training_graph(out->g(), LossKind::kCrossEntropy, SgdOptions{0.9f, 1e-4f});
  EXPECT_TRUE(tg) << tg.status().message();
  if (!tg) return nullptr;
  out->tg = std::move(*tg);
  return out;
}

// Deterministic data: the MLP gets Gaussian features, the language model tokens whose next token
// is a fixed function of the token (with some noise).
Dataset data_for(const std::string& name, int64_t n) {
  Dataset d;
  d.source = "test";
  uint64_t s = 12345;
  auto next = [&] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(s >> 11) / static_cast<double>(1ULL << 53);
  };
  d.y = HostTensor(DType::kInt64, {n});
  if (name == "tied_lm") {
    d.x = HostTensor(DType::kInt64, {n});
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = static_cast<int64_t>(next() * 16) % 16;
      d.x.as<int64_t>()[i] = t;
      d.y.as<int64_t>()[i] = next() < 0.8 ? (3 * t + 1) % 16 : static_cast<int64_t>(next() * 16) % 16;
    }
  } else {
    d.x = HostTensor(DType::kFloat32, {n, 16});
    for (int64_t i = 0; i < n * 16; ++i) d.x.as<float>()[i] = static_cast<float>(2 * next() - 1);
    for (int64_t i = 0; i < n; ++i) d.y.as<int64_t>()[i] = static_cast<int64_t>(next() * 10) % 10;
  }
  return d;
}

int forward_nodes(const std::string& name) { return name == "tied_lm" ? 7 : 8; }  // with the loss

// Forward nodes per stage, as even as possible, the remainder at the front.
std::vector<int> balance_for(const std::string& name, int stages) {
  const int n = forward_nodes(name);
  std::vector<int> b(stages, n / stages);
  for (int k = 0; k < n % stages; ++k) ++b[k];
  return b;
}

PartitionOptions partition_options(const std::string& name, int stages, Schedule schedule, WeightMode weights, int micro) {
  PartitionOptions opts;
  for (int k = 0; k < stages; ++k) {
    DeviceSpec d;
    d.name = "cpu" + std::to_string(k);
    d.kind = DeviceKind::kCpu;
    d.peak_flops = 1e11;
    d.mem_bandwidth = 1e10;
    d.memory_bytes = 1e12;
    d.kernel_overhead_s = 1e-6;
    opts.devices.push_back(d);
  }
  opts.link.name = "host";
  opts.link.bandwidth = 1e10;
  opts.link.latency_s = 1e-6;
  opts.schedule = schedule;
  opts.weights = weights;
  opts.micro_batches = micro;
  opts.balance = balance_for(name, stages);
  return opts;
}

Plan make_plan(Model& md, const std::string& name, int stages, Schedule schedule, WeightMode weights, int micro) {
  auto plan = partition(md.g(), partition_options(name, stages, schedule, weights, micro));
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

double max_relative_diff(const std::map<std::string, HostTensor>& a, const std::map<std::string, HostTensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (auto& [name, tb] : b) {
    auto it = a.find(name);
    EXPECT_NE(it, a.end()) << name;
    if (it == a.end()) continue;
    double d = 0, m = 0;
    for (int64_t i = 0; i < tb.size(); ++i) {
      d = std::max(d, std::abs(it->second.get_double(i) - tb.get_double(i)));
      m = std::max(m, std::abs(tb.get_double(i)));
    }
    worst = std::max(worst, d / std::max(m, 1e-12));
  }
  return worst;
}

// The stages that read a weight another stage updates (the plan's shared_params), as
// "name@stage" strings, so that a test knows the case really shares weights across stages.
std::vector<std::string> shared_reads(const Plan& plan) {
  std::vector<std::string> out;
  for (const StagePlan& s : plan.stages)
    for (const Value* v : s.shared_params) out.push_back(v->name + "@" + std::to_string(s.index));
  return out;
}

const char* const kModels[] = {"shared_mlp", "tied_lm"};

TEST(SharedWeights, PlansShareWeightsAcrossStages) {
  if (!have_python() || model_dir().empty()) GTEST_SKIP() << "numpy/onnx missing";
  auto mlp = load("shared_mlp", 8);
  ASSERT_TRUE(mlp);
  // 4 stages: fc0 relu | fc1 relu | fc2 relu | fc3 loss: bz (fc0, fc1, fc2) is owned by stage 0
  // and read by stages 1 and 2; Ws (fc1, fc2) by stage 1 and read by stage 2.
  Plan p4 = make_plan(*mlp, "shared_mlp", 4, Schedule::k1F1B, WeightMode::kSpecTrain, 1);
  std::vector<std::string> got = shared_reads(p4);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"Ws@2", "bz@1", "bz@2"}));
  auto lm = load("tied_lm", 8);
  ASSERT_TRUE(lm);
  for (int n : {2, 3, 4}) {
    Plan p = make_plan(*lm, "tied_lm", n, Schedule::k1F1B, WeightMode::kSpecTrain, 1);
    EXPECT_EQ(shared_reads(p), (std::vector<std::string>{"E@" + std::to_string(n == 4 ? 2 : n - 1)})) << n << " stages";
  }
}

TEST(SharedWeights, PartitionerChargesTransfersAndCopies) {
  if (!have_python() || model_dir().empty()) GTEST_SKIP() << "numpy/onnx missing";
  auto mlp = load("shared_mlp", 8);
  ASSERT_TRUE(mlp);
  // 2 stages: fc0 relu fc1 relu | fc2 relu fc3 loss. Stage 1 reads Ws (16x16 floats, 1024 bytes;
  // in forward and backward) and bz (64 bytes; forward only: a bias's gradient does not read it).
  const double ws = 1024, bz = 64;
  Plan one = make_plan(*mlp, "shared_mlp", 2, Schedule::k1F1B, WeightMode::kSpecTrain, 1);
  const StagePlan& r = one.stages[1];
  EXPECT_EQ(one.stages[0].shared_recv_bytes, 0);
  EXPECT_EQ(one.stages[0].shared_memory_bytes, 0);
  EXPECT_EQ(r.shared_recv_bytes, static_cast<int64_t>(2 * ws + bz));
  // Own buffers + the forward link's slots (N - 1 + 1 = 2) + the backward link's (3, Ws only).
  EXPECT_EQ(r.shared_memory_bytes, static_cast<int64_t>((ws + bz) * (1 + shared_link_slots(1, 2, false, false)) +
                                                        ws * shared_link_slots(1, 2, true, false)));
  EXPECT_EQ(r.memory_bytes, stage_memory_bytes(r, 2, partition_options("shared_mlp", 2, Schedule::k1F1B,
                                                                         WeightMode::kSpecTrain, 1)));
  // Their gradients go back: the received activation r1 (8x16 floats) plus Ws and bz.
  EXPECT_EQ(r.grad_send_bytes, static_cast<int64_t>(8 * 16 * 4 + ws + bz));
  EXPECT_GT(r.comm_ms, 1e3 * (2 * ws + bz + r.recv_bytes + r.grad_send_bytes) / 1e10);
  // GPipe: one version per mini-batch, one link of 2 slots.
  Plan gp = make_plan(*mlp, "shared_mlp", 2, Schedule::kGPipe, WeightMode::kSpecTrain, 2);
  EXPECT_EQ(gp.stages[1].shared_recv_bytes, static_cast<int64_t>(ws + bz));
  EXPECT_EQ(gp.stages[1].shared_memory_bytes, static_cast<int64_t>((ws + bz) * 3));
}

// A plan whose shared weight is updated after a stage that reads it (the partitioner never makes
// one: the owner is the first reader) has no stage layout, and the trainer refuses it with the
// layout's reason.
TEST(SharedWeights, OwnerAfterReaderIsRefusedNamingParameterAndStages) {
  if (!have_python() || model_dir().empty()) GTEST_SKIP() << "numpy/onnx missing";
  auto mlp = load("shared_mlp", 8);
  ASSERT_TRUE(mlp);
  Plan plan = make_plan(*mlp, "shared_mlp", 2, Schedule::k1F1B, WeightMode::kSpecTrain, 1);
  auto& from = plan.stages[0].nodes;
  auto it = std::find_if(from.begin(), from.end(),
                         [](const Node* n) { return n->phase == Phase::kUpdate && n->inputs[0]->name == "Ws"; });
  ASSERT_NE(it, from.end());
  plan.stages[1].nodes.push_back(*it);
  from.erase(it);
  Status st = layout_plan(mlp->g(), &plan);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("parameter 'Ws'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("in stage 0 and updated in later stage 1"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  auto p = PipelineTrainer::create(mlp->g(), mlp->tg, plan, testing::test_pipeline_options());
  ASSERT_FALSE(p);
  EXPECT_EQ(p.status().message(), st.message());
}

// GPipe with shared weights equals sequential training on the whole mini-batch.
TEST(SharedWeights, GPipeEqualsSequential) {
  if (!have_python() || model_dir().empty()) GTEST_SKIP() << "numpy/onnx missing";
  const int64_t batch = 8, steps = 10;
  const int micro = 2;
  for (const char* name : kModels) {
    Dataset data = data_for(name, 96);
    auto seq_model = load(name, batch);
    ASSERT_TRUE(seq_model);
    std::map<std::string, HostTensor> initial;
    for (Value* p : seq_model->tg.params) initial[p->name] = *p->data;
    auto t = testing::test_cpu_trainer(seq_model->g(), seq_model->tg);
    ASSERT_TRUE(t) << t.status().message();
    auto rs = (*t)->train(data, nullptr, config(steps));
    ASSERT_TRUE(rs) << rs.status().message();
    const auto seq = (*t)->parameters();
    EXPECT_GT(max_relative_diff(seq, initial), 1e-3) << name;  // the weights did move
    for (int n : {2, 3, 4}) {
      auto md = load(name, batch / micro);
      ASSERT_TRUE(md);
      PipelineOptions po = testing::test_pipeline_options();
      po.schedule = Schedule::kGPipe;
      po.micro_batches = micro;
      Plan plan = make_plan(*md, name, n, po.schedule, po.weights, micro);
      ASSERT_FALSE(shared_reads(plan).empty()) << name << " " << n;
      auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
      ASSERT_TRUE(p) << p.status().message();
      auto r = (*p)->train(data, nullptr, config(steps));
      ASSERT_TRUE(r) << r.status().message();
      EXPECT_LE(max_relative_diff((*p)->parameters(), seq), 1e-5) << name << " on " << n << " stages";
    }
  }
}

// 1F1B on 2, 3, 4 stages in every weight mode (2BW included) against the explicit version reference.
TEST(SharedWeights, OneFOneBMatchesExplicitVersionReference) {
  if (!have_python() || model_dir().empty()) GTEST_SKIP() << "numpy/onnx missing";
  const int64_t batch = 8, steps = 20;
  const float lr = 0.1f;
  struct Mode {
    WeightMode w;
    Staleness s;
    const char* name;  // the reference's mode and staleness fields
    int micro = 1;
  };
  // PipeDream-2BW: M = 4 micro-batches of 2 (M >= N), every pass of mini-batch i on version i-1 of
  // every weight, a shared one included (the reader keeps two mini-batches' versions). 2BW-predict:
  // a stage's forwards of mini-batch i before its update i-1 on the prediction of version i, every
  // other pass on version i; a reader of a shared weight gets both from the owner.
  const Mode modes[] = {{WeightMode::kSpecTrain, Staleness::kPaper, "spectrain paper"},
                        {WeightMode::kSpecTrain, Staleness::kExact, "spectrain exact"},
                        {WeightMode::kStash, Staleness::kPaper, "stash paper"},
                        {WeightMode::kStale, Staleness::kPaper, "stale paper"},
                        {WeightMode::k2BW, Staleness::kPaper, "2bw m4", 4},
                        {WeightMode::k2BWPredict, Staleness::kPaper, "2bw-predict m4", 4}};
  for (const char* model : kModels) {
    const fs::path dir = fs::temp_directory_path() / ("pipetrain-shared-ref-" + std::string(model) + "-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    Dataset data = data_for(model, 64);
    ASSERT_TRUE(write_npy((dir / "x.npy").string(), data.x).is_ok());
    ASSERT_TRUE(write_npy((dir / "y.npy").string(), data.y).is_ok());
    std::ofstream(dir / "model.txt") << (model_dir() / (std::string(model) + ".onnx")).string() << "\n";
    std::ofstream cases(dir / "cases.txt");
    for (int n : {2, 3, 4})
      for (const Mode& m : modes) {
        PipelineOptions po = testing::test_pipeline_options();
        po.weights = m.w;
        po.staleness = m.s;
        po.micro_batches = m.micro;
        auto md = load(model, batch / m.micro);
        ASSERT_TRUE(md);
        Plan plan = make_plan(*md, model, n, po.schedule, po.weights, m.micro);
        ASSERT_FALSE(shared_reads(plan).empty()) << model << " " << n;
        auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
        ASSERT_TRUE(p) << p.status().message();
        TrainConfig cfg = config(steps);
        cfg.lr = lr;
        auto r = (*p)->train(data, nullptr, cfg);
        ASSERT_TRUE(r) << r.status().message();
        if (m.w == WeightMode::k2BW) {
          for (const PassRecord& rec : (*p)->trace()) ASSERT_EQ(rec.version, std::max<int64_t>(0, rec.mini_batch - 1));
        }
        const std::string name = std::to_string(n) + "_" + weight_mode_name(m.w) + "_" +
                                 (m.micro > 1 ? "m" + std::to_string(m.micro) : std::string(staleness_name(m.s)));
        fs::create_directories(dir / name);
        for (auto& [pname, t] : (*p)->parameters())
          ASSERT_TRUE(write_npy((dir / name / (pname + ".npy")).string(), t).is_ok());
        std::string bal;
        for (int c : balance_for(model, n)) bal += (bal.empty() ? "" : ",") + std::to_string(c);
        cases << name << " " << n << " " << bal << " " << m.name << " " << steps << " " << batch << " " << lr << " 0.9 0.0001\n";
      }
    cases.close();
    const std::string cmd = testing::python() + " " PIPETRAIN_SOURCE_DIR "/tests/python/pipeline_reference.py " + dir.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << model << ": " << cmd;
    fs::remove_all(dir);
  }
}

// Checkpoints of a shared-weight pipeline hold the owner's master copy once: 10 steps, then a
// resume to 20 in a new trainer equals 20 uninterrupted steps bit for bit (same drain points).
TEST(SharedWeights, ResumeEqualsUninterruptedBitForBit) {
  if (!have_python() || model_dir().empty()) GTEST_SKIP() << "numpy/onnx missing";
  const fs::path dir = fs::temp_directory_path() / ("pipetrain-shared-ckpt-" + std::to_string(::getpid()));
  const int64_t batch = 8;
  Dataset data = data_for("tied_lm", 64);
  auto run = [&](const std::string& name, int64_t steps, const std::string& resume) {
    auto md = load("tied_lm", batch);
    EXPECT_TRUE(md);
    PipelineOptions po = testing::test_pipeline_options();
    po.weights = WeightMode::kSpecTrain;
    Plan plan = make_plan(*md, "tied_lm", 3, po.schedule, po.weights, 1);
    EXPECT_FALSE(shared_reads(plan).empty());
    auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
    EXPECT_TRUE(p) << p.status().message();
    TrainConfig cfg = config(steps);
    cfg.checkpoint.dir = (dir / name / "checkpoints").string();
    cfg.checkpoint.every = 10;
    cfg.checkpoint.model_hash = md->m.hash;
    cfg.checkpoint.resume = resume;
    fs::create_directories(cfg.checkpoint.dir);
    auto r = (*p)->train(data, nullptr, cfg);
    EXPECT_TRUE(r) << r.status().message();
    return (*p)->parameters();
  };
  const auto full = run("full", 20, "");
  run("split", 10, "");
  const auto resumed = run("split", 20, (dir / "split" / "checkpoints").string());
  ASSERT_EQ(full.size(), resumed.size());
  for (auto& [name, t] : full) {
    ASSERT_TRUE(resumed.count(name)) << name;
    EXPECT_EQ(std::memcmp(t.data(), resumed.at(name).data(), t.bytes()), 0) << name << " differs after the resume";
  }
  fs::remove_all(dir);
}

// CUDA stages (skipped without a GPU; tools/gpu-check.sh runs CudaRuntime.*): the weight links
// and the owner's predictions on the device follow the same pipeline on CPU stages.
TEST(CudaRuntime, SharedWeightsMatchCpuStages) {
  if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
  if (!have_python() || model_dir().empty()) GTEST_SKIP() << "numpy/onnx missing";
  struct Case {
    int stages;
    Schedule schedule;
    WeightMode weights;
    int micro;
  };
  for (const char* name : kModels)
    for (const Case& c : {Case{3, Schedule::k1F1B, WeightMode::kSpecTrain, 1}, Case{4, Schedule::k1F1B, WeightMode::kStash, 1},
                          Case{2, Schedule::kGPipe, WeightMode::kSpecTrain, 2}}) {
      const Dataset data = data_for(name, 96);
      std::map<std::string, HostTensor> w[2];
      for (int dev = 0; dev < 2; ++dev) {
        auto md = load(name, 8 / c.micro);
        ASSERT_TRUE(md);
        PipelineOptions po = testing::test_pipeline_options();
        po.schedule = c.schedule;
        po.weights = c.weights;
        po.micro_batches = c.micro;
        po.device = dev ? DeviceKind::kCuda : DeviceKind::kCpu;
        Plan plan = make_plan(*md, name, c.stages, c.schedule, c.weights, c.micro);
        auto p = PipelineTrainer::create(md->g(), md->tg, plan, po);
        ASSERT_TRUE(p) << p.status().message();
        auto r = (*p)->train(data, nullptr, config(20));
        ASSERT_TRUE(r) << r.status().message();
        w[dev] = (*p)->parameters();
      }
      EXPECT_LT(max_relative_diff(w[1], w[0]), 1e-4) << name << " on " << c.stages << " stages";
    }
}

}  // namespace
}  // namespace pt
