// The digits MLP (models/digits_mlp.onnx: Gemm, Relu, Gemm, Relu, Gemm, then the loss) as the
// runtime tests train it: imported without the epilogue fusion (their plans cut between each Gemm
// and its Relu), synthetic data, fixed per-stage splits, a CPU device spec, bitwise comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "importer/importer.h"
#include "importer/training.h"
#include "partitioner/device_spec.h"
#include "runtime/data/data.h"
#include "runtime/loop/train_config.h"

namespace pt::digits_fixture {

struct Model {
  ImportedModel m;
  TrainingGraph tg;
  Graph& g() { return *m.graph; }
};

inline std::unique_ptr<Model> digits_model(int64_t batch, const SgdOptions& opt = SgdOptions{0.9f, 1e-4f}) {
  auto out = std::make_unique<Model>();
  ImportOptions io;
  io.fuse.epilogue = false;  // per-node cuts of the digits MLP (Gemm | Relu): no epilogue fusion
  io.batch_size = batch;
  auto m = import_onnx(PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx", io);
  EXPECT_TRUE(m) << m.status().message();
  if (!m) return nullptr;
  out->m = std::move(*m);
  auto tg = build_training_graph(out->g(), LossKind::kCrossEntropy, opt);
  EXPECT_TRUE(tg) << tg.status().message();
  if (!tg) return nullptr;
  out->tg = std::move(*tg);
  return out;
}

// The training run the pipeline tests compare: `steps` steps at lr 0.1, seed 5, quiet.
inline TrainConfig digits_config(int64_t steps) {
  TrainConfig cfg;
  cfg.steps = steps;
  cfg.lr = 0.1f;
  cfg.seed = 5;
  cfg.quiet = true;
  return cfg;
}

inline Dataset digits_data(Model& md, int64_t n, uint64_t seed) {
  DataSpec spec;
  Value* in = md.g().inputs[0];
  spec.sample_dims.assign(in->dims.begin() + 1, in->dims.end());
  spec.label_dtype = md.tg.loss.labels->dtype;
  spec.num_classes = md.tg.loss.num_classes;
  return synthetic_dataset(spec, n, seed);
}

// 6 forward nodes: a fixed split per stage count, so that both runs of a comparison train the same
// stages (under 1F1B the split decides what each layer's weights see).
inline std::vector<int> balance_for(int stages) {
  switch (stages) {
    case 1: return {6};
    case 2: return {3, 3};
    case 3: return {2, 2, 2};
    default: return {2, 1, 2, 1};
  }
}

inline DeviceSpec cpu_spec(int k, double memory = 1e12) {
  DeviceSpec d;
  d.name = "cpu" + std::to_string(k);
  d.kind = DeviceKind::kCpu;
  d.peak_flops = 1e11;
  d.mem_bandwidth = 1e10;
  d.memory_bytes = memory;
  d.kernel_overhead_s = 1e-6;
  return d;
}

// Same names, same bytes (and not both empty).
inline bool bitwise_equal(const std::map<std::string, HostTensor>& a, const std::map<std::string, HostTensor>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (auto& [name, tb] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.bytes() != tb.bytes()) return false;
    if (std::memcmp(it->second.data(), tb.data(), tb.bytes()) != 0) return false;
  }
  return true;
}

}  // namespace pt::digits_fixture
