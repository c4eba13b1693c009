// Checkpoints and resume of the single-stage trainer: 20 steps equal 10 + resume to 20 bit for bit
// (weights and metrics rows), damaged checkpoints are skipped, mismatched runs refused, a process
// killed while writing one resumes from the previous one; and the same through the CLI.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "importer/importer.h"
#include "importer/training.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/data.h"
#include "runtime/single/trainer.h"
#include "tests/runtime/test_settings.h"

namespace pt {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSeed = 7;
const char* const kModel = PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx";

// A model, its training graph and a trainer (which refers to both), kept together.
struct TrainRun {
  ImportedModel m;
  std::unique_ptr<TrainingGraph> tg;
  std::unique_ptr<Trainer> t;
  Dataset train, val;
};

std::unique_ptr<TrainRun> make_run(int64_t batch = 8) {
  auto r = std::make_unique<TrainRun>();
  ImportOptions io;
  io.batch_size = batch;
  io.seed = kSeed;
  auto m = import_onnx(kModel, io);
  EXPECT_TRUE(m) << m.status().message();
  if (!m) return nullptr;
  r->m = std::move(*m);
  auto tg = build_training_graph(*r->m.graph, LossKind::kAuto, SgdOptions{0.9f, 1e-4f});
  EXPECT_TRUE(tg) << tg.status().message();
  if (!tg) return nullptr;
  r->tg = std::make_unique<TrainingGraph>(std::move(*tg));
  auto t = testing::test_cpu_trainer(*r->m.graph, *r->tg);
  EXPECT_TRUE(t) << t.status().message();
  if (!t) return nullptr;
  r->t = std::move(*t);
  DataSpec spec;
  const Value* in = r->m.graph->inputs.at(0);
  spec.sample_dims.assign(in->dims.begin() + 1, in->dims.end());
  spec.input_dtype = in->dtype;
  spec.label_dtype = r->tg->loss.labels->dtype;
  spec.label_sample_dims.assign(r->tg->loss.labels->dims.begin() + 1, r->tg->loss.labels->dims.end());
  spec.num_classes = r->tg->loss.num_classes;
  // 100 samples in batches of 8: 12 steps per epoch, so 20 steps cross an epoch boundary (reshuffle
  // and validation) and step 10 is mid-epoch.
  r->train = synthetic_dataset(spec, 100, kSeed);
  r->val = synthetic_dataset(spec, 24, kSeed + 1);
  return r;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pipetrain-ckpt-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  TrainConfig config(const std::string& name, int64_t steps, int64_t every, const std::string& model_hash) {
    TrainConfig c;
    c.steps = steps;
    c.lr = 0.05f;
    c.seed = kSeed;
    c.shuffle = true;
    c.quiet = true;
    c.metrics_path = (dir_ / name / "metrics.csv").string();
    c.checkpoint.dir = (dir_ / name / "checkpoints").string();
    c.checkpoint.every = every;
    c.checkpoint.keep = 10;
    c.checkpoint.model_hash = model_hash;
    fs::create_directories(dir_ / name);
    return c;
  }

  // Trains `steps` in a fresh run folder `name`; optionally resuming from `resume`.
  Expected<TrainResult> train(TrainRun& r, const std::string& name, int64_t steps, int64_t every,
                              const std::string& resume = "") {
    TrainConfig c = config(name, steps, every, r.m.hash);
    c.checkpoint.resume = resume;
    return r.t->train(r.train, &r.val, c);
  }

  std::string ckpt_dir(const std::string& name) const { return (dir_ / name / "checkpoints").string(); }
  fs::path dir_;
};

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

// A metrics row without its samples_per_s column (wall-clock dependent).
std::string without_speed(const std::string& row) {
  std::vector<std::string> f;
  std::stringstream ss(row);
  for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
  std::string out;
  for (size_t i = 0; i < f.size(); ++i)
    if (i != 4) out += f[i] + ",";
  return out;
}

void expect_same_metrics(const fs::path& a, const fs::path& b) {
  const auto ra = read_lines(a), rb = read_lines(b);
  ASSERT_EQ(ra.size(), rb.size()) << a << " vs " << b;
  for (size_t i = 0; i < ra.size(); ++i) EXPECT_EQ(without_speed(ra[i]), without_speed(rb[i])) << "row " << i;
}

void expect_bitwise_equal(const std::map<std::string, HostTensor>& a, const std::map<std::string, HostTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    ASSERT_EQ(t.dims(), it->second.dims()) << name;
    ASSERT_EQ(t.bytes(), it->second.bytes()) << name;
    EXPECT_EQ(std::memcmp(t.data(), it->second.data(), t.bytes()), 0) << name << " differs (seed " << kSeed << ")";
  }
}

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

TEST_F(CheckpointTest, ResumedRunEqualsUninterruptedBitForBit) {
  auto full = make_run();
  ASSERT_TRUE(full);
  auto rf = train(*full, "full", 20, 4);
  ASSERT_TRUE(rf) << rf.status().message();
  EXPECT_EQ(rf->steps, 20);
  EXPECT_EQ(list_checkpoints(ckpt_dir("full")).size(), 5u);  // 4, 8, 12, 16, 20

  // 10 steps, stop, resume (newest checkpoint of the folder: step 10, mid-epoch) to 20 in a new trainer.
  {
    auto half = make_run();
    ASSERT_TRUE(half);
    auto rh = train(*half, "split", 10, 4);
    ASSERT_TRUE(rh) << rh.status().message();
    EXPECT_EQ(rh->last_checkpoint, checkpoint_path(ckpt_dir("split"), 10));
  }
  auto resumed = make_run();
  ASSERT_TRUE(resumed);
  auto rr = train(*resumed, "split", 20, 4, ckpt_dir("split"));
  ASSERT_TRUE(rr) << rr.status().message();
  EXPECT_EQ(rr->resumed_from, 10);
  EXPECT_EQ(rr->steps, 20);
  EXPECT_EQ(rr->first_loss, rf->first_loss);
  EXPECT_EQ(rr->last_loss, rf->last_loss);
  EXPECT_EQ(rr->val.loss, rf->val.loss);
  expect_bitwise_equal(resumed->t->trained_initializers(), full->t->trained_initializers());
  expect_same_metrics(dir_ / "full" / "metrics.csv", dir_ / "split" / "metrics.csv");

  // From a named checkpoint at an epoch boundary (step 12: the next step reshuffles).
  auto at12 = make_run();
  ASSERT_TRUE(at12);
  auto r12 = train(*at12, "from12", 20, 0, checkpoint_path(ckpt_dir("full"), 12));
  ASSERT_TRUE(r12) << r12.status().message();
  EXPECT_EQ(r12->resumed_from, 12);
  expect_bitwise_equal(at12->t->trained_initializers(), full->t->trained_initializers());
  expect_same_metrics(dir_ / "full" / "metrics.csv", dir_ / "from12" / "metrics.csv");

  // Resuming a finished run to the same total trains nothing and reports the same losses.
  auto done = make_run();
  ASSERT_TRUE(done);
  auto rd = train(*done, "done", 20, 0, checkpoint_path(ckpt_dir("full"), 20));
  ASSERT_TRUE(rd) << rd.status().message();
  EXPECT_EQ(rd->steps, 20);
  EXPECT_EQ(rd->first_loss, rf->first_loss);
  EXPECT_EQ(rd->last_loss, rf->last_loss);
  expect_bitwise_equal(done->t->trained_initializers(), full->t->trained_initializers());
}

TEST_F(CheckpointTest, KeepsTheNewestK) {
  auto r = make_run();
  ASSERT_TRUE(r);
  TrainConfig c = config("keep", 12, 2, r->m.hash);
  c.checkpoint.keep = 3;
  ASSERT_TRUE(r->t->train(r->train, nullptr, c));
  const auto all = list_checkpoints(ckpt_dir("keep"));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(fs::path(all[0]).filename(), "step-8.ckpt");
  EXPECT_EQ(fs::path(all[2]).filename(), "step-12.ckpt");
}

TEST_F(CheckpointTest, NonFiniteStateIsNeverSaved) {
  // The newest checkpoint must stay the last good one: a state holding NaN or Inf is refused
  // as divergence (exit 3), naming the tensor and the element, and no file appears.
  Checkpoint c;
  c.step = 5;
  HostTensor good(DType::kFloat32, {3}), bad(DType::kFloat32, {2, 2}), inf(DType::kFloat64, {2});
  for (int i = 0; i < 3; ++i) good.as<float>()[i] = 1.0f + i;
  for (int i = 0; i < 4; ++i) bad.as<float>()[i] = 0.5f;
  bad.as<float>()[3] = std::nanf("");
  inf.as<double>()[0] = 1.0;
  inf.as<double>()[1] = -HUGE_VAL;
  EXPECT_EQ(describe_non_finite({{"a", good}}), "");
  EXPECT_EQ(describe_non_finite({{"a", good}, {"fc.weight", bad}}), "'fc.weight' holds NaN (element 3 of 4)");
  EXPECT_EQ(describe_non_finite({{"v", inf}}), "'v' holds -Inf (element 1 of 2)");
  c.tensors = {{"a", good}, {"fc.weight", bad}};
  const std::string dir = ckpt_dir("nonfinite");
  auto saved = save_checkpoint(dir, 3, c);
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.status().code(), StatusCode::kDiverged);
  EXPECT_NE(saved.status().message().find("'fc.weight' holds NaN"), std::string::npos) << saved.status().message();
  EXPECT_TRUE(list_checkpoints(dir).empty());
  c.tensors = {{"a", good}};
  ASSERT_TRUE(save_checkpoint(dir, 3, c));
  EXPECT_EQ(list_checkpoints(dir).size(), 1u);
}

TEST_F(CheckpointTest, DamagedNewestIsSkipped) {
  auto full = make_run();
  ASSERT_TRUE(full);
  ASSERT_TRUE(train(*full, "full", 20, 0));
  {
    auto r = make_run();
    ASSERT_TRUE(r);
    ASSERT_TRUE(train(*r, "run", 15, 5));  // 5, 10, 15
  }
  const std::string p5 = checkpoint_path(ckpt_dir("run"), 5), p10 = checkpoint_path(ckpt_dir("run"), 10),
                    p15 = checkpoint_path(ckpt_dir("run"), 15);
  const std::string b15 = read_bytes(p15), b10 = read_bytes(p10);
  ASSERT_TRUE(read_checkpoint(p15));
  write_bytes(p15, b15.substr(0, b15.size() - 1));  // truncated by one byte
  auto bad = read_checkpoint(p15);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("truncated"), std::string::npos) << bad.status().message();
  std::string flipped = b10;
  flipped[flipped.size() / 2] ^= 0x01;  // one flipped bit inside the payload
  write_bytes(p10, flipped);
  auto bad10 = read_checkpoint(p10);
  ASSERT_FALSE(bad10);
  EXPECT_NE(bad10.status().message().find("checksum"), std::string::npos) << bad10.status().message();

  std::vector<std::string> notices;
  std::string used;
  auto c = read_newest_checkpoint(ckpt_dir("run"), &notices, &used);
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->step, 5);
  EXPECT_EQ(used, p5);
  ASSERT_EQ(notices.size(), 2u);
  EXPECT_NE(notices[0].find("step-15.ckpt"), std::string::npos) << notices[0];

  auto resumed = make_run();
  ASSERT_TRUE(resumed);
  auto rr = train(*resumed, "run", 20, 0, ckpt_dir("run"));
  ASSERT_TRUE(rr) << rr.status().message();
  EXPECT_EQ(rr->resumed_from, 5);
  EXPECT_EQ(rr->notices.size(), 2u);
  expect_bitwise_equal(resumed->t->trained_initializers(), full->t->trained_initializers());
  expect_same_metrics(dir_ / "full" / "metrics.csv", dir_ / "run" / "metrics.csv");

  // Nothing intact: an error naming the folder.
  write_bytes(p5, "PTCKPT");
  auto none = read_newest_checkpoint(ckpt_dir("run"), nullptr);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(none.status().message().find(ckpt_dir("run")), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("no intact checkpoint"), std::string::npos);
}

TEST_F(CheckpointTest, MismatchedRunIsRefused) {
  {
    auto r = make_run();
    ASSERT_TRUE(r);
    ASSERT_TRUE(train(*r, "run", 6, 3));
  }
  const std::string p6 = checkpoint_path(ckpt_dir("run"), 6);
  // Another batch size.
  auto b4 = make_run(4);
  ASSERT_TRUE(b4);
  auto rb = train(*b4, "b4", 20, 0, p6);
  ASSERT_FALSE(rb);
  EXPECT_EQ(rb.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(rb.status().message().find("--batch-size: 8 in the checkpoint, 4 now"), std::string::npos)
      << rb.status().message();
  // Another learning rate (and seed): both named.
  auto r = make_run();
  ASSERT_TRUE(r);
  TrainConfig c = config("lr", 20, 0, r->m.hash);
  c.checkpoint.resume = p6;
  c.lr = 0.01f;
  c.seed = kSeed + 1;
  auto rl = r->t->train(r->train, nullptr, c);
  ASSERT_FALSE(rl);
  EXPECT_NE(rl.status().message().find("--lr: 0.0500000007 in the checkpoint, 0.00999999978 now"), std::string::npos)
      << rl.status().message();
  EXPECT_NE(rl.status().message().find("--seed"), std::string::npos) << rl.status().message();
  // Another model.
  c = config("model", 20, 0, "0123456789abcdef");
  c.checkpoint.resume = p6;
  auto rm = r->t->train(r->train, nullptr, c);
  ASSERT_FALSE(rm);
  EXPECT_NE(rm.status().message().find("the model (hash)"), std::string::npos) << rm.status().message();
  // A total behind the checkpoint.
  auto behind = train(*r, "behind", 4, 0, p6);
  ASSERT_FALSE(behind);
  EXPECT_NE(behind.status().message().find("at step 6, past the 4 steps"), std::string::npos)
      << behind.status().message();
}

// The child resumes from step 10 towards 15 and is SIGKILLed in the middle of writing step 15: its
// file size limit makes write() raise SIGXFSZ, whose handler SIGKILLs the process.
void kill_self(int) { ::kill(::getpid(), SIGKILL); }

TEST_F(CheckpointTest, KilledDuringWriteResumesFromPreviousIntact) {
  auto full = make_run();
  ASSERT_TRUE(full);
  ASSERT_TRUE(train(*full, "full", 20, 0));
  {
    auto r = make_run();
    ASSERT_TRUE(r);
    ASSERT_TRUE(train(*r, "run", 10, 5));
  }
  const std::string p10 = checkpoint_path(ckpt_dir("run"), 10);
  const size_t size10 = fs::file_size(p10);
  auto child_run = make_run();
  ASSERT_TRUE(child_run);
  TrainConfig cc = config("run", 15, 5, child_run->m.hash);
  cc.checkpoint.resume = ckpt_dir("run");
  cc.metrics_path.clear();  // only the checkpoint write reaches the size limit
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, kill_self);
    rlimit lim{static_cast<rlim_t>(size10 / 2), static_cast<rlim_t>(size10 / 2)};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    (void)child_run->t->train(child_run->train, nullptr, cc);
    ::_exit(3);  // not reached: the write of step 15 is killed
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
  EXPECT_EQ(WTERMSIG(wstatus), SIGKILL);
  const std::string p15 = checkpoint_path(ckpt_dir("run"), 15);
  EXPECT_FALSE(fs::exists(p15));
  ASSERT_TRUE(fs::exists(p15 + ".tmp"));
  EXPECT_LT(fs::file_size(p15 + ".tmp"), size10);
  // And a torn file under a final name, as a writer without the rename would leave it.
  const std::string b10 = read_bytes(p10);
  write_bytes(checkpoint_path(ckpt_dir("run"), 20), b10.substr(0, b10.size() / 3));

  auto resumed = make_run();
  ASSERT_TRUE(resumed);
  auto rr = train(*resumed, "run", 20, 5, ckpt_dir("run"));
  ASSERT_TRUE(rr) << rr.status().message();
  EXPECT_EQ(rr->resumed_from, 10);
  EXPECT_EQ(rr->notices.size(), 1u);
  expect_bitwise_equal(resumed->t->trained_initializers(), full->t->trained_initializers());
  expect_same_metrics(dir_ / "full" / "metrics.csv", dir_ / "run" / "metrics.csv");
  EXPECT_FALSE(fs::exists(p15 + ".tmp"));  // pruned with the next write
}

TEST_F(CheckpointTest, StopFlagWritesACheckpointAtTheBatchBoundary) {
  auto r = make_run();
  ASSERT_TRUE(r);
  std::atomic<bool> stop{true};  // already set: the loop stops after its first step
  TrainConfig c = config("stop", 20, 0, r->m.hash);
  c.stop = &stop;
  auto rs = r->t->train(r->train, nullptr, c);
  ASSERT_TRUE(rs) << rs.status().message();
  EXPECT_TRUE(rs->interrupted);
  EXPECT_EQ(rs->steps, 1);
  EXPECT_EQ(rs->last_checkpoint, checkpoint_path(ckpt_dir("stop"), 1));
  EXPECT_EQ(read_lines(dir_ / "stop" / "metrics.csv").size(), 2u);
}

// The command line: --checkpoint-every, --resume, refusals (exit 2), SIGINT (exit 130).
class CheckpointCliTest : public CheckpointTest {
 protected:
  int cli(const std::string& args) {
    const std::string cmd = std::string(PIPETRAIN_BINARY_DIR "/tools/onnx-pipetrain ") + kModel +
                            " --quiet --device cpu --seed 3 --batch-size 16 " + args + " > " +
                            (dir_ / "cli.log").string() + " 2>&1";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  std::string log() const { return read_bytes((dir_ / "cli.log").string()); }
};

TEST_F(CheckpointCliTest, ResumeEqualsUninterrupted) {
  if (!fs::exists(PIPETRAIN_BINARY_DIR "/tools/onnx-pipetrain")) GTEST_SKIP() << "onnx-pipetrain is not built";
  const std::string a = (dir_ / "a").string(), b = (dir_ / "b").string();
  ASSERT_EQ(cli("--steps 40 --checkpoint-every 10 --out " + a), 0) << log();
  ASSERT_EQ(cli("--steps 25 --checkpoint-every 10 --keep-checkpoints 2 --out " + b), 0) << log();
  EXPECT_EQ(list_checkpoints(b + "/checkpoints").size(), 2u);  // 20, 25
  ASSERT_EQ(cli("--steps 40 --checkpoint-every 10 --out " + b + " --resume"), 0) << log();
  EXPECT_EQ(read_bytes(a + "/digits_mlp.trained.onnx"), read_bytes(b + "/digits_mlp.trained.onnx"));
  expect_same_metrics(a + "/metrics.csv", b + "/metrics.csv");

  EXPECT_EQ(cli("--steps 40 --lr 0.1 --out " + b + " --resume=" + b + "/checkpoints/step-40.ckpt"), 2);
  EXPECT_NE(log().find("--lr: 0.0500000007 in the checkpoint, 0.100000001 now"), std::string::npos) << log();
  EXPECT_EQ(cli("--steps 40 --out " + (dir_ / "empty").string() + " --resume"), 2);
  EXPECT_NE(log().find("no checkpoint"), std::string::npos) << log();
}

TEST_F(CheckpointCliTest, SigintWritesCheckpointAndModel) {
  if (!fs::exists(PIPETRAIN_BINARY_DIR "/tools/onnx-pipetrain")) GTEST_SKIP() << "onnx-pipetrain is not built";
  const std::string out = (dir_ / "int").string();
  // Waits until training runs (metrics.csv.partial exists, so the handler is installed), then SIGINT.
  const std::string cmd = std::string(PIPETRAIN_BINARY_DIR "/tools/onnx-pipetrain ") + kModel +
                          " --quiet --device cpu --steps 100000000 --out " + out + " > " + (dir_ / "cli.log").string() +
                          " 2>&1 & pid=$!; for i in $(seq 600); do [ -e " + out +
                          "/metrics.csv.partial ] && break; sleep 0.05; done; sleep 0.2; kill -INT $pid; wait $pid";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 130) << read_bytes((dir_ / "cli.log").string());
  EXPECT_TRUE(fs::exists(out + "/digits_mlp.trained.onnx"));
  const auto cks = list_checkpoints(out + "/checkpoints");
  ASSERT_EQ(cks.size(), 1u);
  auto c = read_checkpoint(cks[0]);
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_GT(c->step, 0);
  EXPECT_EQ(read_lines(out + "/metrics.csv").size(), static_cast<size_t>(c->step) + 1);
}

}  // namespace
}  // namespace pt
