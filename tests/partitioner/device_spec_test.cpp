// Device specs and the cost model: built-in GPUs and links (names case-insensitive, unknown names
// list the known ones), JSON device specs and their errors, the measured and cached CPU spec, FLOP
// counts of the CNN ops, and which activations count as kept for backward.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "importer/shape_infer.h"
#include "importer/training.h"
#include "partitioner/partition.h"
#include "partitioner/cost_model.h"
#include "partitioner/device_spec.h"

namespace pt {
namespace {

TEST(DeviceSpec, BuiltinsAreCaseInsensitiveAndRealistic) {
  for (const std::string& name : builtin_device_names()) {
    auto d = builtin_device_spec(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(d->kind, DeviceKind::kCuda);
    EXPECT_GT(d->peak_flops, 5e12) << name;
    EXPECT_LT(d->peak_flops, 1e14) << name;
    EXPECT_GT(d->mem_bandwidth, 4e11) << name;
    EXPECT_GE(d->memory_bytes, 11.0 * (1 << 30)) << name;
    EXPECT_NEAR(d->kernel_overhead_s, 5e-6, 1e-9);
  }
  EXPECT_EQ(builtin_device_names().size(), 7u);
  EXPECT_EQ(builtin_device_spec("h100")->name, "H100-SXM");
  EXPECT_EQ(builtin_device_spec("GTX 1080 Ti")->name, "GTX1080Ti");
  EXPECT_EQ(builtin_device_spec("rtx3090")->name, "RTX3090");
  EXPECT_EQ(builtin_device_spec("A100")->memory_bytes, 80.0 * (1 << 30));
  EXPECT_GT(builtin_device_spec("H200")->mem_bandwidth, builtin_device_spec("H100")->mem_bandwidth);
  EXPECT_GT(builtin_device_spec("H100")->peak_flops, builtin_device_spec("A100")->peak_flops);
  auto bad = builtin_device_spec("TPUv4");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(bad.status().message().find("'TPUv4'"), std::string::npos);
  for (const std::string& name : builtin_device_names())
    EXPECT_NE(bad.status().message().find(name), std::string::npos) << bad.status().message();
}

TEST(DeviceSpec, BuiltinLinks) {
  EXPECT_EQ(builtin_link_names().size(), 8u);
  EXPECT_NEAR(builtin_link_spec("pcie3")->bandwidth, 12e9, 1);
  EXPECT_NEAR(builtin_link_spec("PCIe4")->bandwidth, 25e9, 1);
  EXPECT_NEAR(builtin_link_spec("network")->bandwidth, 12.5e9, 1);
  EXPECT_NEAR(builtin_link_spec("network")->latency_s, 20e-6, 1e-12);
  EXPECT_GT(builtin_link_spec("nvlink4")->bandwidth, builtin_link_spec("nvlink3")->bandwidth);
  EXPECT_GT(builtin_link_spec("nvlink3")->bandwidth, builtin_link_spec("nvlink2")->bandwidth);
  auto bad = builtin_link_spec("infiniband");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("pcie3"), std::string::npos);
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("pt_spec_test_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(DeviceSpec, LoadsJsonAndNamesFileAndFieldInErrors) {
  TempDir dir;
  auto ok = load_device_spec(dir.write("mi250.json",
      R"({"name": "MI250", "peak_tflops": 47.9, "mem_bandwidth_gbs": 3276.8, "memory_gb": 128, "kernel_overhead_us": 7})"));
  ASSERT_TRUE(ok.has_value()) << ok.status().message();
  EXPECT_EQ(ok->name, "MI250");
  EXPECT_DOUBLE_EQ(ok->peak_flops, 47.9e12);
  EXPECT_DOUBLE_EQ(ok->mem_bandwidth, 3276.8e9);
  EXPECT_DOUBLE_EQ(ok->memory_bytes, 128.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(ok->kernel_overhead_s, 7e-6);
  auto dflt = load_device_spec(dir.write("tiny.json", R"({"peak_tflops": 1, "mem_bandwidth_gbs": 100, "memory_gb": 4})"));
  ASSERT_TRUE(dflt.has_value()) << dflt.status().message();
  EXPECT_EQ(dflt->name, "tiny");
  EXPECT_DOUBLE_EQ(dflt->kernel_overhead_s, 5e-6);

  auto expect_error = [](const Expected<DeviceSpec>& e, const std::string& file, const std::string& field) {
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidInput);
    EXPECT_NE(e.status().message().find(file), std::string::npos) << e.status().message();
    EXPECT_NE(e.status().message().find(field), std::string::npos) << e.status().message();
  };
  std::string f = dir.write("missing.json", R"({"peak_tflops": 1, "memory_gb": 4})");
  expect_error(load_device_spec(f), f, "'mem_bandwidth_gbs' is missing");
  f = dir.write("string.json", R"({"peak_tflops": "fast", "mem_bandwidth_gbs": 100, "memory_gb": 4})");
  expect_error(load_device_spec(f), f, "'peak_tflops' must be a number");
  f = dir.write("negative.json", R"({"peak_tflops": 1, "mem_bandwidth_gbs": 100, "memory_gb": -4})");
  expect_error(load_device_spec(f), f, "'memory_gb' must be positive");
  f = dir.write("broken.json", R"({"peak_tflops": 1,)");
  expect_error(load_device_spec(f), f, "not valid JSON");
  f = dir.write("array.json", "[1, 2]");
  expect_error(load_device_spec(f), f, "JSON object");
  expect_error(load_device_spec(dir.path() + "/absent.json"), "absent.json", "cannot open");
}

TEST(DeviceSpec, MeasuresTheCpuQuicklyAndCaches) {
  TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  DeviceSpec a = measure_cpu_spec(dir.path() + "/cache", 1);
  const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(first_s, 0.6);  // < 0.3 s on an idle machine; room for a loaded test run
  EXPECT_EQ(a.kind, DeviceKind::kCpu);
  EXPECT_GT(a.peak_flops, 1e8);
  EXPECT_GT(a.mem_bandwidth, 1e8);
  EXPECT_GT(a.memory_bytes, 1e8);
  EXPECT_GT(a.kernel_overhead_s, 0);
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path() + "/cache")) {
    ++files;
    EXPECT_NE(e.path().filename().string().find("_1t.json"), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 1u);
  const auto t1 = std::chrono::steady_clock::now();
  DeviceSpec b = measure_cpu_spec(dir.path() + "/cache", 1);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 0.05);
  EXPECT_EQ(a.peak_flops, b.peak_flops);
  EXPECT_EQ(a.mem_bandwidth, b.mem_bandwidth);
}

// Builds one forward node with the given input and output shapes.
struct OneNode {
  Graph g;
  Node* n = nullptr;
  OneNode(const std::string& op, std::vector<Dims> ins, std::vector<Dims> outs, AttrMap attrs = {}) {
    std::vector<Value*> in, out;
    for (size_t i = 0; i < ins.size(); ++i)
      in.push_back(g.add_value("in" + std::to_string(i), DType::kFloat32, ins[i], i ? ValueKind::kParameter : ValueKind::kInput));
    for (size_t i = 0; i < outs.size(); ++i) out.push_back(g.add_value("out" + std::to_string(i), DType::kFloat32, outs[i], ValueKind::kActivation));
    n = g.add_node(op, op, in, out, attrs);
  }
};

TEST(CostModel, FlopsOfMatrixAndCnnOps) {
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Gemm", {{8, 32}, {32, 16}}, {{8, 16}}).n), 2.0 * 8 * 16 * 32);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Gemm", {{8, 32}, {32, 16}, {16}}, {{8, 16}}).n), 2.0 * 8 * 16 * 32 + 8 * 16);
  AttrMap ta;
  ta.set("transA", int64_t{1});
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Gemm", {{32, 8}, {32, 16}}, {{8, 16}}, ta).n), 2.0 * 8 * 16 * 32);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("MatMul", {{4, 8, 32}, {32, 16}}, {{4, 8, 16}}).n), 2.0 * 4 * 8 * 16 * 32);
  // Conv 2-D: 2 N Cout OH OW (Cin / group) KH KW, plus the bias; grouped; 1-D.
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Conv", {{2, 3, 32, 32}, {16, 3, 3, 3}}, {{2, 16, 30, 30}}).n),
                   2.0 * 2 * 16 * 30 * 30 * 3 * 3 * 3);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Conv", {{2, 3, 32, 32}, {16, 3, 3, 3}, {16}}, {{2, 16, 30, 30}}).n),
                   2.0 * 2 * 16 * 30 * 30 * 3 * 3 * 3 + 2 * 16 * 30 * 30);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Conv", {{1, 8, 10, 10}, {8, 2, 3, 3}}, {{1, 8, 8, 8}}).n), 2.0 * 8 * 8 * 8 * 2 * 9);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Conv", {{4, 6, 100}, {12, 6, 5}}, {{4, 12, 96}}).n), 2.0 * 4 * 12 * 96 * 6 * 5);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("ConvTranspose", {{2, 16, 8, 8}, {16, 4, 3, 3}}, {{2, 4, 10, 10}}).n),
                   2.0 * 2 * 16 * 8 * 8 * 4 * 9);
  AttrMap pool;
  pool.set("kernel_shape", std::vector<int64_t>{3, 3});
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("MaxPool", {{2, 8, 16, 16}}, {{2, 8, 7, 7}}, pool).n), 2.0 * 8 * 7 * 7 * 9);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("BatchNormalization", {{2, 8, 4, 4}, {8}, {8}, {8}, {8}}, {{2, 8, 4, 4}}).n), 5.0 * 2 * 8 * 16);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Concat", {{2, 8}, {2, 8}}, {{2, 16}}).n), 0.0);
  EXPECT_DOUBLE_EQ(node_bytes(*OneNode("Concat", {{2, 8}, {2, 8}}, {{2, 16}}).n), 4.0 * 64);
  EXPECT_DOUBLE_EQ(node_flops(*OneNode("Relu", {{2, 8}}, {{2, 8}}).n), 16.0);
  // Defensive: unknown dims and odd ranks give finite numbers.
  EXPECT_TRUE(std::isfinite(node_flops(*OneNode("Conv", {{-1, 3}, {16}}, {{-1}}).n)));
  EXPECT_TRUE(std::isfinite(node_flops(*OneNode("Gemm", {{8}}, {{}}).n)));
  // Roofline: the larger of compute and memory time, plus the overhead.
  OneNode gemm("Gemm", {{64, 64}, {64, 64}}, {{64, 64}});
  DeviceSpec d;
  d.peak_flops = 1e9;
  d.mem_bandwidth = 1e12;
  d.kernel_overhead_s = 1e-6;
  EXPECT_DOUBLE_EQ(node_time_s(*gemm.n, d), 2.0 * 64 * 64 * 64 / 1e9 + 1e-6);
  d.peak_flops = 1e15;
  d.mem_bandwidth = 1e6;
  EXPECT_DOUBLE_EQ(node_time_s(*gemm.n, d), 3.0 * 64 * 64 * 4 / 1e6 + 1e-6);
}

TEST(CostModel, SavedBytesAreWhatBackwardReads) {
  // x -> fc1 (Gemm) -> a -> relu -> r -> fc2 -> loss. Backward reads x (dW1), r (ReluGrad, dW2);
  // not a (ReluGrad reads the output).
  Graph g;
  Value* x = g.add_value("x", DType::kFloat32, {8, 32}, ValueKind::kInput);
  g.inputs = {x};
  Value* w1 = g.add_value("w1", DType::kFloat32, {32, 64}, ValueKind::kParameter);
  Value* a = g.add_value("a", DType::kFloat32, {8, 64}, ValueKind::kActivation);
  g.add_node("Gemm", "fc1", {x, w1}, {a});
  Value* r = g.add_value("r", DType::kFloat32, {8, 64}, ValueKind::kActivation);
  g.add_node("Relu", "relu", {a}, {r});
  Value* w2 = g.add_value("w2", DType::kFloat32, {64, 10}, ValueKind::kParameter);
  Value* y = g.add_value("y", DType::kFloat32, {8, 10}, ValueKind::kActivation);
  g.add_node("Gemm", "fc2", {r, w2}, {y});
  g.outputs = {y};
  ASSERT_TRUE(build_training_graph(g, LossKind::kCrossEntropy, SgdOptions{}).has_value());
  DeviceSpec d;
  d.peak_flops = 1e12;
  d.mem_bandwidth = 1e11;
  auto costs = node_costs(g, d);
  ASSERT_EQ(costs.size(), 4u);
  EXPECT_EQ(costs[0].first->name, "fc1");
  EXPECT_EQ(costs[0].second.saved_bytes, static_cast<int64_t>(x->bytes()));
  EXPECT_EQ(costs[0].second.param_bytes, static_cast<int64_t>(w1->bytes()));
  EXPECT_EQ(costs[1].second.saved_bytes, static_cast<int64_t>(r->bytes()));
  EXPECT_EQ(costs[2].second.saved_bytes, 0);  // y: the loss reads it, its backward reads log_prob
  EXPECT_GT(costs[0].second.bwd_flops, 0);
  EXPECT_DOUBLE_EQ(costs[0].second.bwd_flops, 2.0 * 32 * 64 * 8);  // dW1 only: x needs no gradient
  EXPECT_DOUBLE_EQ(costs[2].second.bwd_flops, 2 * (2.0 * 8 * 64 * 10));  // dr and dW2
  EXPECT_GT(costs[0].second.update_s, 0);
}

// A small CNN through the real importer pieces: Conv -> Relu -> MaxPool -> Flatten -> Gemm. The
// Conv's backward (input and weight gradients) costs two forwards' multiply-adds plus the bias
// sum; the partition puts each backward node with its forward node.
TEST(CostModel, CnnTrainingGraphCostsAndPartitions) {
  Graph g;
  Value* x = g.add_value("x", DType::kFloat32, {4, 3, 16, 16}, ValueKind::kInput);
  g.inputs = {x};
  auto param = [&](const std::string& name, Dims d) { return g.add_value(name, DType::kFloat32, d, ValueKind::kParameter); };
  auto node = [&](const std::string& op, std::vector<Value*> in, AttrMap attrs = {}) -> Value* {
    Value* out = g.add_value(op + ".out", DType::kUndefined, {}, ValueKind::kActivation);
    Node* n = g.add_node(op, op, in, {out}, attrs);
    n->since_version = 13;
    Status st = infer_node(*n, "test");
    if (!st.is_ok()) return nullptr;
    return out;
  };
  AttrMap conv;
  conv.set("kernel_shape", std::vector<int64_t>{3, 3});
  conv.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  Value* c = node("Conv", {x, param("w", {8, 3, 3, 3}), param("b", {8})}, conv);
  if (!c) GTEST_SKIP() << "no Conv shape function in this build";
  AttrMap pool;
  pool.set("kernel_shape", std::vector<int64_t>{2, 2});
  pool.set("strides", std::vector<int64_t>{2, 2});
  Value* p = node("MaxPool", {node("Relu", {c})}, pool);
  ASSERT_NE(p, nullptr);
  Value* f = node("Flatten", {p});
  ASSERT_NE(f, nullptr);
  Value* y = node("Gemm", {f, param("fc", {8 * 8 * 8, 10})});
  ASSERT_NE(y, nullptr);
  g.outputs = {y};
  auto tg = build_training_graph(g, LossKind::kCrossEntropy, SgdOptions{});
  if (!tg.has_value()) GTEST_SKIP() << "CNN gradients not in this build: " << tg.status().message();
  DeviceSpec d = builtin_device_spec("V100").value();
  auto costs = node_costs(g, d);
  ASSERT_EQ(costs[0].first->op_type, "Conv");
  const double core = 2.0 * 4 * 8 * 16 * 16 * 3 * 9;
  EXPECT_DOUBLE_EQ(costs[0].second.fwd_flops, core + 4 * 8 * 16 * 16);
  // x needs no gradient: dW (one forward's multiply-adds) and db (a sum over Y).
  EXPECT_DOUBLE_EQ(costs[0].second.bwd_flops, core + 4 * 8 * 16 * 16);
  EXPECT_GT(costs[0].second.workspace_bytes, 0);
  EXPECT_EQ(costs[0].second.saved_bytes, static_cast<int64_t>(x->bytes()));
  PartitionOptions opts;
  opts.devices.assign(2, d);
  opts.link = builtin_link_spec("pcie3").value();
  auto plan = partition(g, opts);
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  for (const StagePlan& s : plan->stages)
    for (const Node* n : s.nodes)
      if (n->phase == Phase::kBackward) {
        bool found = false;
        for (const Node* m : s.forward_nodes) found |= m == n->forward;
        EXPECT_TRUE(found) << n->describe();
      }
}

}  // namespace
}  // namespace pt
