// Fusion passes per device (importer/onnx_import.cpp): a CUDA import fuses the bias and activation
// epilogues as a CPU import does (FusedGemm / FusedConv and BatchNormalization + Relu have CUDA
// kernels: kernels/cuda/epilogue_ops.cpp, batchnorm.cu), so both train the same graph.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "importer/importer.h"
#include "kernels/registry.h"

namespace pt {
namespace {

std::map<std::string, int> op_counts(const Graph& g) {
  std::map<std::string, int> n;
  for (const auto& node : g.nodes()) ++n[node->op_type];
  return n;
}

TEST(DeviceFusion, CudaImportsFuseEpiloguesAsTheCpuDoes) {
  if (supported_ops(DeviceKind::kCuda).empty()) GTEST_SKIP() << "built without the CUDA backend";
  const std::string path = PIPETRAIN_SOURCE_DIR "/models/fashion_lenet5_bn.onnx";
  ImportOptions o;
  o.batch_size = 4;
  auto cpu = import_onnx(path, o);
  ASSERT_TRUE(cpu) << cpu.status().message();
  o.device = DeviceKind::kCuda;
  auto gpu = import_onnx(path, o);
  ASSERT_TRUE(gpu) << gpu.status().message();
  EXPECT_GT(cpu->fused.epilogue, 0);
  EXPECT_EQ(gpu->fused.epilogue, cpu->fused.epilogue);
  EXPECT_EQ(op_counts(*gpu->graph), op_counts(*cpu->graph));
  // Every fused op of the graph has a native CUDA kernel.
  for (const auto& n : gpu->graph->nodes())
    if (n->domain == "pipetrain") {
      EXPECT_FALSE(runs_on_host(n->op_type, DeviceKind::kCuda, n->kernel_dtype())) << n->describe();
    }
}

}  // namespace
}  // namespace pt
