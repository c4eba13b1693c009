// The library entry point (tools/run_training.h) used as a program would: a typed spec trains the
// bundled digits MLP on two GPipe stages and writes the run folder; and the start-up agreement's
// serialization covers the spec but not its rank-local part.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "tools/run_training.h"
#include "tools/training_spec.h"

namespace pt {
namespace {

namespace fs = std::filesystem;

TEST(RunTraining, TypedSpecTrainsAPipelineAndWritesTheRunFolder) {
  const fs::path out = fs::temp_directory_path() / ("pipetrain-run-training-" + std::to_string(::getpid()));
  TrainingSpec spec;
  spec.model = PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx";
  spec.gpus = 2;
  spec.device = DeviceChoice::kCpu;
  spec.schedule = Schedule::kGPipe;
  spec.batch = {/*mini_batch=*/32, /*micro_batches=*/2};
  spec.optimizer = OptimizerKind::kAdam;
  spec.lr = 1e-3f;
  spec.steps = 6;
  spec.local.data = PIPETRAIN_SOURCE_DIR "/models/digits/train";
  spec.local.out = out.string();
  spec.local.quiet = true;
  auto job = MpiJob::single_process();
  ASSERT_EQ(run_training(spec, *job), 0);
  EXPECT_TRUE(fs::exists(out / "digits_mlp.trained.onnx"));
  std::ifstream metrics(out / "metrics.csv");
  int lines = 0;
  for (std::string l; std::getline(metrics, l);) ++lines;
  EXPECT_EQ(lines, 1 + 6);  // the header and one row per step
  std::ifstream plan(out / "partition.json");
  const std::string text((std::istreambuf_iterator<char>(plan)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"schedule\": \"gpipe\""), std::string::npos);
  // A bad input is an exit code, not an abort: --micro-batches that does not divide the batch.
  spec.batch = {/*mini_batch=*/30, /*micro_batches=*/4};
  spec.local.overwrite = true;
  EXPECT_EQ(run_training(spec, *job), 2);
  fs::remove_all(out);
}

TEST(RunTraining, AgreementCoversTheSpecButNotItsLocalPart) {
  TrainingSpec a;
  const std::string base = serialize_for_agreement(a);
  TrainingSpec b = a;
  b.local.out = "elsewhere";
  b.local.quiet = true;
  b.local.data = "other";
  EXPECT_EQ(serialize_for_agreement(b), base);
  for (auto change : std::vector<void (*)(TrainingSpec&)>{
           [](TrainingSpec& s) { s.trace = true; },
           [](TrainingSpec& s) { s.batch.micro_batches = 8; },
           [](TrainingSpec& s) { s.weights = WeightMode::kStash; },
           [](TrainingSpec& s) { s.optimizer = OptimizerKind::kAdamW; },
           [](TrainingSpec& s) { s.mean = {0.5f}; },
           [](TrainingSpec& s) { s.test.lose_rank = "1:2"; },
           [](TrainingSpec& s) { s.precision = Precision::kTf32; },
           [](TrainingSpec& s) { s.reshape_alias = false; },
           [](TrainingSpec& s) { s.weight_cache = WeightCachePolicy::kOff; },
           [](TrainingSpec& s) { s.test.weight_cache_verify = true; },
           [](TrainingSpec& s) { s.test.weight_cache_ignore_versions = true; },
       }) {
    TrainingSpec c = a;
    change(c);
    EXPECT_NE(serialize_for_agreement(c), base);
  }
}

// --precision tf32 is part of the agreement by name, and reaches the executors as ExecSettings::tf32
// (the CUDA kernels' math mode); the other settings come from their fields unchanged.
TEST(RunTraining, SpecCarriesTf32AndTheExecutorSettings) {
  TrainingSpec s;
  EXPECT_FALSE(exec_settings(s).tf32);
  EXPECT_NE(serialize_for_agreement(s).find("\"precision\":\"fp32\""), std::string::npos);
  s.precision = Precision::kTf32;
  s.reshape_alias = false;
  s.weight_cache = WeightCachePolicy::kAll;
  s.test.separate_host = true;
  EXPECT_NE(serialize_for_agreement(s).find("\"precision\":\"tf32\""), std::string::npos);
  const ExecSettings e = exec_settings(s);
  EXPECT_TRUE(e.tf32);
  EXPECT_FALSE(e.reshape_alias);
  EXPECT_EQ(e.weight_cache, WeightCachePolicy::kAll);
  EXPECT_TRUE(e.separate_host);
  auto p = parse_precision("tf32");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, Precision::kTf32);
  EXPECT_STREQ(precision_name(Precision::kTf32), "tf32");
}

}  // namespace
}  // namespace pt
