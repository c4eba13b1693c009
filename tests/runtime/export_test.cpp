// The exported model: passes onnx.checker, keeps everything but the trained initializers, re-imports,
// and its forward (our re-import, and an independent numpy evaluator) equals the trainer's forward.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "importer/importer.h"
#include "importer/training.h"
#include "runtime/data/data.h"
#include "runtime/exec/executor.h"
#include "runtime/single/trainer.h"
#include "tests/python_interpreter.h"

namespace pt {
namespace {

namespace fs = std::filesystem;

struct Case {
  const char* name;
  LossKind loss;
};

class ExportTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("pipetrain-export-" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const std::string cmd = testing::python() + " " PIPETRAIN_SOURCE_DIR "/tests/python/make_external_data_model.py " +
                            dir_->string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    // A CNN as PyTorch exports it for inference (BatchNorm folded into Conv).
    const std::string cnn = testing::python() + " " PIPETRAIN_SOURCE_DIR "/tools/export_models.py " + dir_->string() +
                            " --only lenet_bn --opsets 13 --modes eval > /dev/null 2>&1";
    ASSERT_EQ(std::system(cnn.c_str()), 0) << cnn;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path* dir_;
};
fs::path* ExportTest::dir_ = nullptr;

std::string model_path(const std::string& name, const fs::path& dir) {
  if (name == "external") return (dir / "ext" / "model.onnx").string();
  if (name == "lenet") return (dir / "lenet_bn.op13.eval.onnx").string();
  return PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx";
}

TEST_P(ExportTest, TrainedModelRoundTrips) {
  const Case c = GetParam();
  const std::string src = model_path(c.name, *dir_);
  const int64_t batch = 4;
  ImportOptions io;
  io.batch_size = batch;
  auto m = import_onnx(src, io);
  ASSERT_TRUE(m) << m.status().message();
  auto tg = build_training_graph(*m->graph, c.loss, SgdOptions{0.9f, 1e-4f});
  ASSERT_TRUE(tg) << tg.status().message();
  auto trainer = Trainer::create(*m->graph, *tg, DeviceKind::kCpu);
  ASSERT_TRUE(trainer) << trainer.status().message();
  DataSpec spec;
  Value* in = m->graph->inputs[0];
  spec.sample_dims.assign(in->dims.begin() + 1, in->dims.end());
  spec.label_dtype = tg->loss.labels->dtype;
  spec.label_sample_dims.assign(tg->loss.labels->dims.begin() + 1, tg->loss.labels->dims.end());
  spec.num_classes = tg->loss.num_classes;
  Dataset data = synthetic_dataset(spec, 64, 11);
  TrainConfig cfg;
  cfg.steps = 10;
  cfg.lr = 0.1f;
  cfg.quiet = true;
  auto r = (*trainer)->train(data, nullptr, cfg);
  ASSERT_TRUE(r) << r.status().message();

  const fs::path out = *dir_ / (std::string(c.name) + "_out");
  fs::create_directories(out);
  const fs::path trained = out / "model.trained.onnx";
  ASSERT_TRUE(export_onnx(*m, (*trainer)->parameters(), trained.string()).is_ok());
  if (std::string(c.name) == "external") {
    EXPECT_TRUE(fs::exists(trained.string() + ".data"));
  }

  // A batch of inputs, the trainer's forward with the trained weights.
  HostTensor x(DType::kFloat32, in->dims);
  for (int64_t i = 0; i < x.size(); ++i) x.as<float>()[i] = static_cast<float>((i * 37 % 101) / 50.0 - 1.0);
  auto y_trainer = (*trainer)->forward(x);
  ASSERT_TRUE(y_trainer) << y_trainer.status().message();

  // Re-import the exported model: the same forward, bit for bit.
  ImportOptions fo;
  fo.batch_size = batch;
  fo.for_training = false;
  auto back = import_onnx(trained.string(), fo);
  ASSERT_TRUE(back) << back.status().message();
  auto ex = Executor::create(*back->graph, DeviceKind::kCpu);
  ASSERT_TRUE(ex) << ex.status().message();
  (*ex)->tensor(back->graph->inputs[0]) = x;
  ASSERT_TRUE((*ex)->run().is_ok());
  const HostTensor& y = (*ex)->tensor(back->graph->outputs[0]);
  ASSERT_EQ(y.dims(), y_trainer->dims());
  for (int64_t i = 0; i < y.size(); ++i) ASSERT_EQ(y.as<float>()[i], y_trainer->as<float>()[i]) << "element " << i;
  // The weights really changed.
  auto orig = import_onnx(src, fo);
  ASSERT_TRUE(orig);
  auto ex0 = Executor::create(*orig->graph, DeviceKind::kCpu);
  ASSERT_TRUE(ex0);
  (*ex0)->tensor(orig->graph->inputs[0]) = x;
  ASSERT_TRUE((*ex0)->run().is_ok());
  double diff = 0;
  for (int64_t i = 0; i < y.size(); ++i)
    diff = std::max(diff, std::abs(double((*ex0)->tensor(orig->graph->outputs[0]).as<float>()[i]) - y.as<float>()[i]));
  EXPECT_GT(diff, 1e-4) << "training did not change the model's output";

  // onnx.checker, unchanged structure, and an independent evaluator's forward.
  ASSERT_TRUE(write_npy((out / "x.npy").string(), x).is_ok());
  ASSERT_TRUE(write_npy((out / "y.npy").string(), y).is_ok());
  const std::string cmd = testing::python() + " " PIPETRAIN_SOURCE_DIR "/tests/python/check_exported_model.py " + src + " " +
                          trained.string() + " " + (out / "x.npy").string() + " " + (out / "y.npy").string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

INSTANTIATE_TEST_SUITE_P(Models, ExportTest,
                         ::testing::Values(Case{"external", LossKind::kMse}, Case{"digits", LossKind::kCrossEntropy},
                                           Case{"lenet", LossKind::kCrossEntropy}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Npy, RoundTrip) {
  const fs::path p = fs::temp_directory_path() / "pipetrain-npy-roundtrip.npy";
  std::vector<int64_t> v = {1, -2, 3, 4, 5, 6};
  HostTensor t = HostTensor::from<int64_t>({2, 3}, v);
  ASSERT_TRUE(write_npy(p.string(), t).is_ok());
  auto back = read_npy(p.string());
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->dims(), (Dims{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back->as<int64_t>()[i], v[i]);
  fs::remove(p);
}

// 16-bit .npy ('<u2', '<i2'): uint16 pixels are scaled by 1/65535 (unless raw), int16 ones are only
// converted; 16-bit labels are widened to int64.
TEST(Npy, SixteenBitPixelsAndLabels) {
  const fs::path dir = fs::temp_directory_path() / ("pipetrain-npy16-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto make = [](DType dt, Dims dims, const auto& values) {
    HostTensor t(dt, std::move(dims));
    std::memcpy(t.data(), values.data(), t.bytes());
    return t;
  };
  const std::vector<uint16_t> u = {0, 1, 32768, 65535, 7, 65534};
  const std::vector<int16_t> s = {-32768, -1, 0, 1, 300, 32767};
  const std::vector<int16_t> y16 = {2, 0};
  const std::vector<uint16_t> yu16 = {1, 2};
  DataSpec spec;
  spec.sample_dims = {3};
  spec.num_classes = 3;
  for (bool scale : {true, false}) {
    spec.scale_pixels = scale;
    for (DType xt : {DType::kUint16, DType::kInt16}) {
      const bool is_u = xt == DType::kUint16;
      HostTensor x = is_u ? make(xt, {2, 3}, u) : make(xt, {2, 3}, s);
      HostTensor y = is_u ? make(DType::kUint16, {2}, yu16) : make(DType::kInt16, {2}, y16);
      ASSERT_TRUE(write_npy((dir / "x.npy").string(), x).is_ok());
      ASSERT_TRUE(write_npy((dir / "y.npy").string(), y).is_ok());
      auto back = read_npy((dir / "x.npy").string());
      ASSERT_TRUE(back) << back.status().message();
      EXPECT_EQ(back->dtype(), xt);
      auto d = load_npy_dataset(dir.string(), spec);
      ASSERT_TRUE(d) << d.status().message();
      ASSERT_EQ(d->x.dtype(), DType::kFloat32);
      ASSERT_EQ(d->y.dtype(), DType::kInt64);
      for (int i = 0; i < 6; ++i) {
        const float raw = is_u ? static_cast<float>(u[i]) : static_cast<float>(s[i]);
        const float want = scale && is_u ? raw * (1.0f / 65535.0f) : raw;
        EXPECT_EQ(d->x.as<float>()[i], want) << dtype_name(xt) << " element " << i << " scale " << scale;
      }
      for (int i = 0; i < 2; ++i) EXPECT_EQ(d->y.as<int64_t>()[i], is_u ? yu16[i] : y16[i]);
    }
  }
  // A label out of range is still caught after widening.
  ASSERT_TRUE(write_npy((dir / "y.npy").string(), make(DType::kUint16, {2}, std::vector<uint16_t>{1, 300})).is_ok());
  auto bad = load_npy_dataset(dir.string(), spec);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("label 300"), std::string::npos) << bad.status().message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pt
