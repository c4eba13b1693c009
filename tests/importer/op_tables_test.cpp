// Holds the op tables against each other: shape functions (importer/shape_infer.cpp), CPU kernels
// (kernels/registry.cpp), gradient builders and their backward ops (importer/grad/grad_registry.cpp).
// The CUDA leg (every CPU (op, dtype) has a CUDA kernel, native or declared host fallback) is
// CudaKernelTable.CoversEveryCpuEntry in tests/kernels/cuda_kernels_test.cpp, built with CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "importer/grad/grad_registry.h"
#include "importer/importer.h"
#include "importer/rnn_expand.h"
#include "importer/shape_infer.h"
#include "importer/training.h"
#include "kernels/registry.h"

namespace pt {
namespace {

const OptimizerKind kOptimizers[] = {OptimizerKind::kSgdPaper, OptimizerKind::kSgd, OptimizerKind::kAdam,
                                     OptimizerKind::kAdamW};

bool is_no_gradient(const std::string& op) {
  const std::vector<std::string> v = no_gradient_ops();
  return std::find(v.begin(), v.end(), op) != v.end();
}

const BackwardOp* find_backward(const std::string& op) {
  for (const BackwardOp& b : backward_ops())
    if (op == b.op) return &b;
  return nullptr;
}

bool is_update_op(const std::string& op) {
  for (OptimizerKind k : kOptimizers)
    if (op == update_op(k)) return true;
  return false;
}

// Shape function => CPU kernel (or declared as folded at import, or expanded into other ops), and
// the declarations stay true: an import-time or expanded op has no kernel of its own.
TEST(OpTables, EveryShapeFunctionHasACpuKernel) {
  std::vector<std::string> missing;
  for (const std::string& op : shape_fn_ops()) {
    const bool kernel = !supported_dtypes(op, DeviceKind::kCpu).empty();
    if (is_import_time_op(op) || is_expanded_op(op)) {
      EXPECT_FALSE(kernel) << op << " is declared kernel-less but has a CPU kernel";
      continue;
    }
    if (!kernel) missing.push_back(op);
  }
  EXPECT_TRUE(missing.empty()) << "shape function but no CPU kernel: " << ::testing::PrintToString(missing);
}

// CPU kernel => shape function, unless it is an internal op: a backward op a builder emits or an
// optimizer's update op.
TEST(OpTables, EveryCpuKernelHasAShapeFunctionOrIsInternal) {
  std::vector<std::string> missing, both;
  for (const std::string& op : supported_ops(DeviceKind::kCpu)) {
    const bool internal = find_backward(op) != nullptr || is_update_op(op);
    if (has_shape_fn(op) && internal) both.push_back(op);
    if (!has_shape_fn(op) && !internal) missing.push_back(op);
  }
  EXPECT_TRUE(missing.empty()) << "CPU kernel but neither a shape function nor an internal op: "
                               << ::testing::PrintToString(missing);
  EXPECT_TRUE(both.empty()) << "declared internal but also an ONNX op with a shape function: "
                            << ::testing::PrintToString(both);
}

// Every op the importer accepts decided its gradient: a builder, or the documented no-gradient
// list (whose ops get a builder that emits nothing). Expanded ops (LSTM, GRU) are differentiated
// through the ops they expand into. And every builder serves an op with a shape function.
TEST(OpTables, EveryOpDecidesItsGradient) {
  std::vector<std::string> undecided;
  for (const std::string& op : shape_fn_ops())
    if (!has_grad_builder(op) && !is_expanded_op(op)) undecided.push_back(op);
  EXPECT_TRUE(undecided.empty()) << "no gradient builder and not in kNoGradientOps (importer/grad/grad_registry.cpp): "
                                 << ::testing::PrintToString(undecided);
  for (const std::string& op : grad_builder_ops()) EXPECT_TRUE(has_shape_fn(op)) << "builder without a shape function: " << op;
  for (const std::string& op : no_gradient_ops()) EXPECT_TRUE(has_grad_builder(op)) << op;
}

// Every internal backward op has a CPU kernel in float and double, is listed once, and is served
// by a forward op that has a real builder (not a no-gradient one). Every update op has a kernel.
TEST(OpTables, EveryBackwardOpIsReachableFromABuilder) {
  std::set<std::string> seen;
  for (const BackwardOp& b : backward_ops()) {
    EXPECT_TRUE(seen.insert(b.op).second) << "listed twice: " << b.op;
    EXPECT_TRUE(has_kernel(b.op, DeviceKind::kCpu, DType::kFloat32)) << b.op;
    EXPECT_TRUE(has_kernel(b.op, DeviceKind::kCpu, DType::kFloat64)) << b.op;
    EXPECT_TRUE(has_grad_builder(b.forward)) << b.op << " is emitted by " << b.forward << ", which has no builder";
    EXPECT_FALSE(is_no_gradient(b.forward)) << b.op << " is emitted by " << b.forward << ", declared no-gradient";
  }
  for (OptimizerKind k : kOptimizers) {
    EXPECT_TRUE(has_kernel(update_op(k), DeviceKind::kCpu, DType::kFloat32)) << update_op(k);
    EXPECT_TRUE(has_kernel(update_op(k), DeviceKind::kCpu, DType::kFloat64)) << update_op(k);
  }
}

}  // namespace
}  // namespace pt
