// The CPU kernel table: every op of the kernel set is registered for float32 and float64 (int64
// where shape arithmetic needs it), and unknown ops are not.
#include "tests/kernels/kernel_test_util.h"

namespace pt::test {
namespace {

TEST(CpuRegistry, EveryOpHasFloatAndDouble) {
  const char* ops[] = {"Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh",
                       "Neg", "Exp", "Log", "Sqrt", "Identity", "Softmax", "LogSoftmax",
                       "Reshape", "Flatten", "Transpose", "SoftmaxCrossEntropyLoss", "ReluGrad",
                       "SigmoidGrad", "TanhGrad", "SoftmaxGrad", "LogSoftmaxGrad",
                       "ReduceSumToShape", "SoftmaxCrossEntropyLossGrad", "MSELoss",
                       "MSELossGrad", "SGDMomentum"};
  const auto supported = supported_ops(DeviceKind::kCpu);
  for (const char* op : ops) {
    EXPECT_TRUE(has_kernel(op, DeviceKind::kCpu, DType::kFloat32)) << op;
    EXPECT_TRUE(has_kernel(op, DeviceKind::kCpu, DType::kFloat64)) << op;
    EXPECT_NE(std::find(supported.begin(), supported.end(), op), supported.end()) << op;
  }
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Identity", "Reshape", "Flatten", "Transpose"})
    EXPECT_TRUE(has_kernel(op, DeviceKind::kCpu, DType::kInt64)) << op;
  EXPECT_FALSE(has_kernel("NoSuchOp", DeviceKind::kCpu, DType::kFloat32));
  for (const char* op : {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization",
                         "LRN", "ConvGradInput", "ConvGradWeight", "ConvGradBias", "MaxPoolGrad", "AveragePoolGrad",
                         "GlobalAveragePoolGrad", "GlobalMaxPoolGrad", "BatchNormalizationGrad", "LRNGrad"}) {
    EXPECT_TRUE(has_kernel(op, DeviceKind::kCpu, DType::kFloat32)) << op;
    EXPECT_TRUE(has_kernel(op, DeviceKind::kCpu, DType::kFloat64)) << op;
  }
  EXPECT_FALSE(has_kernel("Relu", DeviceKind::kCpu, DType::kFloat16));
}

}  // namespace
}  // namespace pt::test
