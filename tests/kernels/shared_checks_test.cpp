// The argument checks the CPU kernels and the CUDA wrappers share (kernels/kernel_checks.h,
// kernels/checks/*.h, kernels/attention_geometry.h): malformed calls refused with the exact
// messages, by the CPU kernel and, where the CUDA backend is built, by the native CUDA kernel too
// (the checks run before any memory is touched, so no GPU is needed: the pointers are host dummies).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "kernels/registry.h"
#ifdef PIPETRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace pt {
namespace {

using Ints = std::vector<int64_t>;

struct Arg {
  Dims dims;
  std::optional<DType> dtype = std::nullopt;  // nullopt: the kernel's dtype
  bool absent = false;                        // an optional input left out (data == nullptr)
};
Arg t(Dims d) { return {std::move(d)}; }
Arg typed(Dims d, DType dt) { return {std::move(d), dt}; }
Arg i64(Dims d) { return typed(std::move(d), DType::kInt64); }
Arg absent() { return {{}, std::nullopt, true}; }

struct Bad {
  const char* op;
  std::vector<Arg> in;
  std::vector<Arg> out;
  AttrMap attrs;
  const char* message;
  bool cpu_only = false;  // the CUDA kernel needs the device to reach this check
  StatusCode code = StatusCode::kInvalidInput;
};

AttrMap attrs(std::initializer_list<std::pair<const char*, Attribute>> kv) {
  AttrMap m;
  for (const auto& [k, v] : kv) m.set(k, v);
  return m;
}

constexpr int64_t kHuge = int64_t{1} << 31;  // one past the BLAS int range

std::vector<Bad> float_cases() {
  const AttrMap none = attrs({{"reduction", std::string("none")}});
  const AttrMap k3 = attrs({{"kernel_shape", Ints{3, 3}}});
  return {
      // losses
      {"SoftmaxCrossEntropyLoss", {t({4, 3}), i64({4})}, {t({})}, attrs({{"reduction", std::string("max")}}),
       "SoftmaxCrossEntropyLoss: unsupported reduction 'max' (expected mean, sum, none)"},
      {"SoftmaxCrossEntropyLoss", {t({4, 3})}, {t({})}, {},
       "SoftmaxCrossEntropyLoss: expected at least 2 inputs and 1 outputs, got 1 and 1"},
      {"SoftmaxCrossEntropyLoss", {t({4}), i64({4})}, {t({})}, {},
       "SoftmaxCrossEntropyLoss: scores [4] must have rank >= 2 ([N, C, d...])"},
      {"SoftmaxCrossEntropyLoss", {t({4, 3}), i64({5})}, {t({})}, {},
       "SoftmaxCrossEntropyLoss: labels has dims [5], expected [4]"},
      {"SoftmaxCrossEntropyLoss", {t({4, 3}), typed({4}, DType::kFloat32)}, {t({})}, {},
       "SoftmaxCrossEntropyLoss: labels must be int64 or int32, got float32"},
      {"SoftmaxCrossEntropyLoss", {t({4, 3}), i64({4}), t({4})}, {t({})}, {},
       "SoftmaxCrossEntropyLoss: weights has dims [4], expected [3]"},
      {"SoftmaxCrossEntropyLoss", {t({4, 3}), i64({4})}, {t({5})}, none,
       "SoftmaxCrossEntropyLoss: loss has dims [5], expected [4]"},
      {"SoftmaxCrossEntropyLoss", {t({4, 3}), i64({4})}, {t({4})}, {},
       "SoftmaxCrossEntropyLoss: loss output [4] must be a scalar for reduction mean/sum"},
      {"SoftmaxCrossEntropyLoss", {t({4, 3}), i64({4})}, {t({}), t({4, 4})}, {},
       "SoftmaxCrossEntropyLoss: log_prob has dims [4, 4], expected [4, 3]"},
      {"SoftmaxCrossEntropyLossGrad", {t({}), t({4, 3})}, {t({4, 3})}, {},
       "SoftmaxCrossEntropyLossGrad: expected at least 3 inputs and 1 outputs, got 2 and 1"},
      {"SoftmaxCrossEntropyLossGrad", {t({}), t({4}), i64({4})}, {t({4})}, {},
       "SoftmaxCrossEntropyLossGrad: scores [4] must have rank >= 2 ([N, C, d...])"},
      {"SoftmaxCrossEntropyLossGrad", {t({}), t({4, 3}), i64({4})}, {t({4, 4})}, {},
       "SoftmaxCrossEntropyLossGrad: output has dims [4, 4], expected [4, 3]"},
      {"SoftmaxCrossEntropyLossGrad", {t({5}), t({4, 3}), i64({4})}, {t({4, 3})}, none,
       "SoftmaxCrossEntropyLossGrad: dLoss has dims [5], expected [4]"},
      {"SoftmaxCrossEntropyLossGrad", {t({4}), t({4, 3}), i64({4})}, {t({4, 3})}, {},
       "SoftmaxCrossEntropyLossGrad: dLoss [4] must be a scalar for reduction mean/sum"},
      {"MSELoss", {t({4}), t({4})}, {t({})}, none, "MSELoss: unsupported reduction 'none' (expected mean, sum)"},
      {"MSELoss", {t({4})}, {t({})}, {}, "MSELoss: expected at least 2 inputs and 1 outputs, got 1 and 1"},
      {"MSELoss", {t({4}), t({5})}, {t({})}, {}, "MSELoss: target has dims [5], expected [4]"},
      {"MSELoss", {t({4}), t({4})}, {t({4})}, {}, "MSELoss: loss output [4] must be a scalar"},
      {"MSELossGrad", {t({}), t({4}), t({4})}, {t({4})}, none,
       "MSELossGrad: unsupported reduction 'none' (expected mean, sum)"},
      {"MSELossGrad", {t({2}), t({4}), t({4})}, {t({4})}, {}, "MSELossGrad: dLoss [2] must be a scalar"},
      {"MSELossGrad", {t({}), t({4}), t({5})}, {t({4})}, {}, "MSELossGrad: target has dims [5], expected [4]"},
      {"MSELossGrad", {t({}), t({4}), t({4})}, {t({5})}, {}, "MSELossGrad: output has dims [5], expected [4]"},
      // Gemm, MatMul
      {"Gemm", {t({4, 5}), t({6, 3})}, {t({4, 3})}, {},
       "Gemm: inner dimensions differ: op(A) is [4, 5], op(B) is [6, 3]"},
      {"Gemm", {t({4, 5}), t({5, 3})}, {t({4, 3})}, attrs({{"transA", int64_t{1}}}),
       "Gemm: inner dimensions differ: op(A) is [5, 4], op(B) is [5, 3]"},
      {"Gemm", {t({4, 5, 1}), t({5, 3})}, {t({4, 3})}, {}, "Gemm: A [4, 5, 1] and B [5, 3] must both be 2-D"},
      {"Gemm", {t({4, 5}), t({5, 3})}, {t({4, 4})}, {}, "Gemm: output has dims [4, 4], expected [4, 3]"},
      {"Gemm", {t({4, 5}), t({5, 3}), t({1, 4, 3})}, {t({4, 3})}, {}, "Gemm: C [1, 4, 3] has rank above 2"},
      {"Gemm", {t({4, 5}), t({5, 3}), t({2, 3})}, {t({4, 3})}, {}, "Gemm: C [2, 3] does not broadcast to [4, 3]"},
      {"Gemm", {t({1, 1}), t({1, kHuge})}, {t({1, kHuge})}, {},
       "Gemm: matrix dimension 2147483648 exceeds the BLAS int range", false, StatusCode::kUnsupported},
      {"MatMul", {t({}), t({3})}, {t({})}, {}, "MatMul: operands must not be scalars"},
      {"MatMul", {t({4, 5}), t({6, 3})}, {t({4, 3})}, {}, "MatMul: inner dimensions differ: A [4, 5], B [6, 3]"},
      {"MatMul", {t({2, 4, 5}), t({3, 5, 3})}, {t({2, 4, 3})}, {},
       "MatMul: batch dims of A [2, 4, 5] and B [3, 5, 3] do not broadcast"},
      {"MatMul", {t({4, 5}), t({5})}, {t({4, 1})}, {}, "MatMul: output has dims [4, 1], expected [4]"},
      {"MatMul", {t({1, 1}), t({1, kHuge})}, {t({1, kHuge})}, {},
       "MatMul: matrix dimension 2147483648 exceeds the BLAS int range", false, StatusCode::kUnsupported},
      // optimizers
      {"SGDMomentum", {t({4}), t({4}), t({4})}, {}, {},
       "SGDMomentum: expected at least 4 inputs and 0 outputs, got 3 and 0"},
      {"SGDMomentum", {t({4}), t({5}), t({4}), t({1})}, {}, {}, "SGDMomentum: G has dims [5], expected [4]"},
      {"SGDMomentum", {t({4}), t({4}), t({5}), t({1})}, {}, {}, "SGDMomentum: V has dims [5], expected [4]"},
      {"SGDMomentum", {t({4}), t({4}), t({4}), t({2})}, {}, {}, "SGDMomentum: lr [2] must be a scalar"},
      {"SGD", {t({4}), t({4}), t({4}), t({1}), i64({1})}, {}, attrs({{"nesterov", int64_t{1}}}),
       "SGD: expected at least 6 inputs and 0 outputs, got 5 and 0"},
      {"SGD", {t({4}), t({5}), t({4}), t({1}), i64({1})}, {}, {}, "SGD: G has dims [5], expected [4]"},
      {"SGD", {t({4}), t({4}), t({5}), t({1}), i64({1})}, {}, {}, "SGD: B has dims [5], expected [4]"},
      {"SGD", {t({4}), t({4}), t({4}), t({1}), i64({1}), t({5})}, {}, attrs({{"nesterov", int64_t{1}}}),
       "SGD: D has dims [5], expected [4]"},
      {"SGD", {t({4}), t({4}), t({4}), t({2}), i64({1})}, {}, {}, "SGD: lr [2] must be a scalar"},
      {"SGD", {t({4}), t({4}), t({4}), t({1}), typed({1}, DType::kFloat32)}, {}, {},
       "SGD: step must be an int64 scalar (float32 [1])"},
      {"SGD", {t({4}), t({4}), t({4}), t({1}), i64({2})}, {}, {}, "SGD: step must be an int64 scalar (int64 [2])"},
      {"Adam", {t({4}), t({4}), t({4}), t({4}), t({1})}, {}, {},
       "Adam: expected at least 6 inputs and 0 outputs, got 5 and 0"},
      {"Adam", {t({4}), t({5}), t({4}), t({4}), t({1}), i64({1})}, {}, {}, "Adam: G has dims [5], expected [4]"},
      {"Adam", {t({4}), t({4}), t({5}), t({4}), t({1}), i64({1})}, {}, {}, "Adam: M has dims [5], expected [4]"},
      {"Adam", {t({4}), t({4}), t({4}), t({5}), t({1}), i64({1})}, {}, {}, "Adam: V has dims [5], expected [4]"},
      {"Adam", {t({4}), t({4}), t({4}), t({4}), t({2}), i64({1})}, {}, {}, "Adam: lr [2] must be a scalar"},
      {"Adam", {t({4}), t({4}), t({4}), t({4}), t({1}), typed({}, DType::kInt32)}, {}, {},
       "Adam: step must be an int64 scalar (int32 [])"},
      // FusedAttention
      {"FusedAttention", {t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6})}, {t({2, 3, 5})}, {},
       "FusedAttention: Y has dims [2, 3, 5], expected [2, 3, 6]"},
      {"FusedAttention", {t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6})}, {t({2, 3, 6}), t({2, 4})}, {},
       "FusedAttention: InvSum has dims [2, 4], expected [2, 3]"},
      {"FusedAttentionGrad", {t({2, 3, 6}), t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6}), absent()},
       {t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6})}, {},
       "FusedAttentionGrad: expected at least 6 inputs and 3 outputs, got 5 and 3"},
      {"FusedAttentionGrad", {t({2, 3, 5}), t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6}), absent(), t({2, 3})},
       {t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6})}, {}, "FusedAttentionGrad: dY has dims [2, 3, 5], expected [2, 3, 6]"},
      {"FusedAttentionGrad", {t({2, 3, 6}), t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6}), absent(), t({2, 4})},
       {t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6})}, {},
       "FusedAttentionGrad: InvSum has dims [2, 4], expected [2, 3]"},
      {"FusedAttentionGrad", {t({2, 3, 6}), t({2, 3, 4}), t({2, 4, 5}), t({2, 5, 6}), absent(), t({2, 3})},
       {t({2, 3, 4}), t({2, 4, 4}), t({2, 5, 6})}, {},
       "FusedAttentionGrad: dKt has dims [2, 4, 4], expected [2, 4, 5]"},
      // BatchNormalization
      {"BatchNormalization", {t({4}), t({4}), t({4}), t({4}), t({4})}, {t({4})}, {},
       "BatchNormalization: X [4] has rank below 2"},
      {"BatchNormalization", {t({2, 3, 4}), t({4}), t({3}), t({3}), t({3})}, {t({2, 3, 4})}, {},
       "BatchNormalization: a per-channel input has dims [4], expected [3]"},
      {"BatchNormalization", {t({2, 3, 4}), t({3}), t({3}), t({3}), t({3})}, {t({2, 3, 5})}, {},
       "BatchNormalization: Y has dims [2, 3, 5], expected [2, 3, 4]"},
      {"BatchNormalization", {t({2, 3, 4}), t({3}), t({3}), t({3}), t({3})}, {t({2, 3, 4}), t({4})}, {},
       "BatchNormalization: a statistics output has dims [4], expected [3]"},
      {"BatchNormalizationGrad", {t({2, 3, 5}), t({2, 3, 4}), t({3})}, {t({2, 3, 4})}, {},
       "BatchNormalizationGrad: dY has dims [2, 3, 5], expected [2, 3, 4]"},
      {"BatchNormalizationGrad", {t({2, 3, 4}), t({2, 3, 4}), t({3})}, {t({2, 3, 5})}, {},
       "BatchNormalizationGrad: dX has dims [2, 3, 5], expected [2, 3, 4]"},
      {"BatchNormalizationGrad", {t({2, 3, 4}), t({2, 3, 4}), t({3})}, {t({2, 3, 4}), t({4})}, {},
       "BatchNormalizationGrad: a parameter gradient has dims [4], expected [3]"},
      {"BatchNormalizationGrad", {t({2, 3, 4}), t({2, 3, 4}), t({3})}, {t({2, 3, 4})},
       attrs({{"_training", int64_t{0}}}),
       "BatchNormalizationGrad: inference mode needs the running mean and variance inputs"},
      // pooling
      {"MaxPool", {t({1, 3, 5, 5})}, {t({1, 3, 5, 5})}, k3,
       "MaxPool: output has dims [1, 3, 5, 5], expected [1, 3, 3, 3]"},
      {"MaxPool", {t({1, 3, 5, 5})}, {t({1, 3, 3, 3}), i64({1, 3, 2, 2})}, k3,
       "MaxPool: Indices has dims [1, 3, 2, 2], expected [1, 3, 3, 3]"},
      {"MaxPoolGrad", {t({1, 3, 3, 3}), t({1, 3, 5, 5})}, {t({1, 3, 5, 4})}, k3,
       "MaxPoolGrad: output has dims [1, 3, 5, 4], expected [1, 3, 5, 5]"},
      {"MaxPoolGrad", {t({1, 3, 2, 2}), t({1, 3, 5, 5})}, {t({1, 3, 5, 5})}, k3,
       "MaxPoolGrad: output has dims [1, 3, 2, 2], expected [1, 3, 3, 3]"},
      {"AveragePool", {t({1, 3, 5, 5})}, {t({1, 3, 4, 4})}, k3,
       "AveragePool: output has dims [1, 3, 4, 4], expected [1, 3, 3, 3]"},
      {"AveragePoolGrad", {t({1, 3, 2, 2})}, {t({1, 3, 5, 5})}, k3,
       "AveragePoolGrad: output has dims [1, 3, 2, 2], expected [1, 3, 3, 3]"},
      {"GlobalAveragePool", {t({4})}, {t({4})}, {}, "GlobalAveragePool: input [4] has rank below 2"},
      {"GlobalAveragePool", {t({1, 3, 5, 5})}, {t({1, 3, 2, 1})}, {},
       "GlobalAveragePool: pooled tensor has dims [1, 3, 2, 1], expected [1, 3, 1, 1]"},
      {"GlobalAveragePoolGrad", {t({1, 3, 1, 1})}, {t({1, 4, 5, 5})}, {},
       "GlobalAveragePoolGrad: pooled tensor has dims [1, 3, 1, 1], expected [1, 4, 1, 1]"},
      // reductions
      {"ReduceSum", {t({4, 5})}, {t({4})}, attrs({{"_axes", Ints{2}}}), "ReduceSum: axis 2 out of range for rank 2"},
      {"ReduceMean", {t({4, 5})}, {t({5})}, attrs({{"_axes", Ints{1}}}),
       "ReduceMean: output [5] does not match the reduction of [4, 5]"},
      {"ReduceMax", {t({4, 5})}, {t({4, 5})}, attrs({{"_axes", Ints{0}}}),
       "ReduceMax: output [4, 5] does not match the reduction of [4, 5]"},
      {"ReduceSumToShape", {t({4, 5})}, {t({3})}, {},
       "ReduceSumToShape: output [3] is not a broadcast source of input [4, 5]"},
      {"ConvGradBias", {t({4})}, {t({4})}, {}, "ConvGradBias: dY [4] has rank below 2"},
      {"ConvGradBias", {t({2, 3, 4})}, {t({4})}, {}, "ConvGradBias: output has dims [4], expected [3]"},
      // Dropout: CUDA reads the step on the device before it can refuse
      {"Dropout", {t({4}), i64({1})}, {t({4})}, attrs({{"_training", int64_t{1}}, {"ratio", 1.0f}}),
       "Dropout: ratio 1.000000 must be below 1 in training", true},
      // data movement, LayerNormalization, comparisons (kernels/checks/tensor.h, layernorm.h)
      {"Slice", {t({4, 6})}, {t({4, 3})}, attrs({{"_starts", Ints{0}}, {"_steps", Ints{1}}}),
       "Slice: normalised starts/steps do not match rank 2"},
      {"Slice", {t({4, 6})}, {t({4, 3})}, attrs({{"_starts", Ints{0, 4}}, {"_steps", Ints{1, 1}}}),
       "Slice: slice of dim 1 leaves the input"},
      {"SliceGrad", {t({4, 3}), t({4, 5})}, {t({4, 6})}, attrs({{"_starts", Ints{0, 0}}, {"_steps", Ints{1, 2}}}),
       "SliceGrad: the accumulated gradient has dims [4, 5], expected [4, 6]"},
      {"Concat", {t({2, 3}), t({2})}, {t({2, 5})}, attrs({{"axis", int64_t{1}}}),
       "Concat: inputs differ in rank from the output"},
      {"Concat", {t({2, 3}), t({2, 3})}, {t({2, 5})}, attrs({{"axis", int64_t{1}}}),
       "Concat: inputs are longer than the output along the axis"},
      {"Concat", {t({2, 3})}, {t({2, 5})}, attrs({{"axis", int64_t{1}}}),
       "Concat: inputs are shorter than the output along the axis"},
      {"Concat", {t({2, 3})}, {t({2, 3})}, attrs({{"axis", int64_t{2}}}), "Concat: axis 2 out of range for rank 2"},
      {"Split", {t({2, 5})}, {t({2, 3}), t({2, 3})}, attrs({{"axis", int64_t{1}}}),
       "Split: outputs are longer than the input along the axis"},
      {"Expand", {t({3, 2})}, {t({4, 3, 5})}, {}, "Expand: [3, 2] does not broadcast to [4, 3, 5]"},
      {"Gather", {t({10, 4}), i64({3})}, {t({3, 5})}, {}, "Gather: output [3, 5] does not match"},
      {"Gather", {t({10, 4}), typed({3}, DType::kFloat32)}, {t({3, 4})}, {},
       "Gather: indices must be int64 or int32, are float32"},
      {"GatherGrad", {t({3, 5}), i64({3})}, {t({10, 4})}, {}, "GatherGrad: dY [3, 5] does not match"},
      {"LayerNormalization", {t({4, 8}), t({7})}, {t({4, 8})}, attrs({{"axis", int64_t{1}}}),
       "LayerNormalization: scale has 7 elements, the normalized dims 8"},
      {"LayerNormalization", {t({4, 8}), t({8}), t({3})}, {t({4, 8})}, attrs({{"axis", int64_t{1}}}),
       "LayerNormalization: B has 3 elements, the normalized dims 8"},
      {"LayerNormalization", {t({4, 8}), t({8})}, {t({4, 8})}, attrs({{"axis", int64_t{-1}}}),
       "LayerNormalization: axis -1 out of range for rank 2"},
      {"LayerNormalizationGrad", {t({4, 8}), t({4, 8}), t({8})}, {t({4, 8}), t({7})}, attrs({{"axis", int64_t{1}}}),
       "LayerNormalizationGrad: dScale / dB do not have the normalized size"},
      {"Equal", {t({4, 3}), t({2})}, {typed({4, 3}, DType::kBool)}, {},
       "Equal: shapes [4, 3] and [2] do not broadcast to the output [4, 3]"},
      {"Less", {t({4, 3})}, {typed({4, 3}, DType::kBool)}, {},
       "Less: expected at least 2 inputs and 1 outputs, got 1 and 1"},
      {"Cast", {t({4})}, {typed({5}, DType::kInt64)}, {}, "Cast: output has dims [5], expected [4]"},
      {"Pad", {t({2, 3})}, {t({2, 5})}, attrs({{"_pads", Ints{0, 1}}}), "Pad: normalised pads do not match rank 2"},
      {"Pad", {t({2, 3})}, {t({2, 5})}, attrs({{"_pads", Ints{0, 1, 0, 1}}, {"mode", std::string("wrap")}}),
       "Pad: unknown mode 'wrap' (constant, reflect, edge)"},
      {"Pad", {t({2, 3})}, {t({2, 6})}, attrs({{"_pads", Ints{0, 1, 0, 1}}}), "Pad: output dim 1 does not match the pads"},
      {"Pad", {t({2, 0})}, {t({2, 2})}, attrs({{"_pads", Ints{0, 1, 0, 1}}, {"mode", std::string("edge")}}),
       "Pad: mode 'edge' of an empty input"},
      {"PadGrad", {t({2, 6})}, {t({2, 3})}, attrs({{"_pads", Ints{0, 1, 0, 1}}}),
       "PadGrad: output dim 1 does not match the pads"},
      {"ConvTranspose", {t({1, 4, 3, 3})}, {t({1, 2, 6, 6})}, attrs({{"kernel_shape", Ints{2, 2}}}),
       "ConvTranspose: expected at least 2 inputs and 1 outputs, got 1 and 1"},
      {"GroupNormalization", {t({2, 6, 4}), t({2}), t({2})}, {t({2, 6, 4})}, attrs({{"_groups", int64_t{4}}}),
       "GroupNormalization: 6 channels do not split into 4 groups"},
      {"GroupNormalization", {t({2, 6, 4}), t({3}), t({2})}, {t({2, 6, 4})},
       attrs({{"_groups", int64_t{2}}, {"_per_group", int64_t{1}}}), "GroupNormalization: scale and bias need 2 elements"},
      {"GroupNormalizationGrad", {t({2, 6, 4}), t({2, 6, 4}), t({5})}, {t({2, 6, 4}), t({6}), t({6})},
       attrs({{"_groups", int64_t{2}}}), "GroupNormalizationGrad: scale needs 6 elements"},
  };
}

// bfloat16 Gemm / MatMul (CPU only): the float kernels' shape checks, their own dtype and range checks.
std::vector<Bad> bf16_cases() {
  const DType bf = DType::kBFloat16, f32 = DType::kFloat32;
  return {
      {"Gemm", {typed({4, 5}, bf), typed({6, 3}, bf)}, {typed({4, 3}, f32)}, {},
       "Gemm: inner dimensions differ: op(A) is [4, 5], op(B) is [6, 3]"},
      {"Gemm", {typed({4, 5}, f32), typed({5, 3}, bf)}, {typed({4, 3}, f32)}, {},
       "Gemm (bfloat16): A, B must be bfloat16 and Y float32; got float32, bfloat16 -> float32"},
      {"Gemm", {typed({4, 5}, bf), typed({5, 3}, bf)}, {typed({4, 4}, f32)}, {},
       "Gemm: output has dims [4, 4], expected [4, 3]"},
      {"Gemm", {typed({1, 1}, bf), typed({1, kHuge}, bf)}, {typed({1, kHuge}, f32)}, {},
       "Gemm: matrix dimension 2147483648 exceeds the int range", false, StatusCode::kUnsupported},
      {"Gemm", {typed({4, 5}, bf), typed({5, 3}, bf), typed({4, 3}, DType::kFloat64)}, {typed({4, 3}, f32)}, {},
       "Gemm (bfloat16): C must be float32, got float64"},
      {"Gemm", {typed({4, 5}, bf), typed({5, 3}, bf), typed({1, 4, 3}, f32)}, {typed({4, 3}, f32)}, {},
       "Gemm: C [1, 4, 3] has rank above 2"},
      {"MatMul", {typed({}, bf), typed({3}, bf)}, {typed({}, f32)}, {}, "MatMul: operands must not be scalars"},
      {"MatMul", {typed({2, 4, 5}, bf), typed({3, 5, 3}, bf)}, {typed({2, 4, 3}, f32)}, {},
       "MatMul: batch dims of A [2, 4, 5] and B [3, 5, 3] do not broadcast"},
      {"MatMul", {typed({1, 1}, bf), typed({1, kHuge}, bf)}, {typed({1, kHuge}, f32)}, {},
       "MatMul: matrix dimension 2147483648 exceeds the int range", false, StatusCode::kUnsupported},
      {"Conv", {typed({1, 2, 5, 5}, f32), typed({3, 2, 3, 3}, bf)}, {typed({1, 3, 3, 3}, f32)}, {},
       "Conv (bfloat16): input 0 is float32, expected bfloat16"},
      {"Conv", {typed({1, 2, 5, 5}, bf), typed({3, 2, 3, 3}, bf), typed({3}, bf)}, {typed({1, 3, 3, 3}, f32)}, {},
       "Conv (bfloat16): the bias must be float32"},
      {"ConvGradWeight", {typed({1, 3, 3, 3}, bf), typed({1, 2, 5, 5}, bf)}, {typed({3, 2, 3, 3}, bf)}, {},
       "ConvGradWeight (bfloat16): the output must be float32"},
  };
}

alignas(64) double dummy[4096];  // zeros: int64 labels 0, step 0

std::string describe(const Bad& b) {
  std::string s = std::string(b.op) + "(";
  for (const Arg& a : b.in) s += (a.absent ? std::string("-") : dims_str(a.dims)) + " ";
  s += "-> ";
  for (const Arg& a : b.out) s += dims_str(a.dims) + " ";
  return s + ")";
}

void expect_refusals(const std::vector<Bad>& cases, DType dt) {
  for (const Bad& b : cases) {
    std::vector<TensorView> in, out;
    for (const Arg& a : b.in) in.push_back(TensorView{a.absent ? nullptr : dummy, a.dtype.value_or(dt), a.dims});
    for (const Arg& a : b.out) out.push_back(TensorView{dummy, a.dtype.value_or(dt), a.dims});
    const KernelCall call{in, out, b.attrs, nullptr};
    const KernelFn cpu = find_kernel(b.op, DeviceKind::kCpu, dt);
    ASSERT_TRUE(cpu) << b.op << " " << dtype_name(dt);
    const Status cs = cpu(call);
    EXPECT_EQ(cs.code(), b.code) << describe(b) << " cpu " << dtype_name(dt) << ": " << cs.message();
    EXPECT_EQ(cs.message(), b.message) << describe(b) << " cpu " << dtype_name(dt);
#ifdef PIPETRAIN_HAVE_CUDA
    if (b.cpu_only) continue;
    const KernelFn gpu = find_kernel(b.op, DeviceKind::kCuda, dt);
    ASSERT_TRUE(gpu && !cuda::is_host_fallback(b.op, dt)) << b.op << " has no native CUDA kernel (test bug)";
    const Status gs = gpu(call);
    EXPECT_EQ(gs.code(), b.code) << describe(b) << " cuda " << dtype_name(dt) << ": " << gs.message();
    EXPECT_EQ(gs.message(), b.message) << describe(b) << " cuda " << dtype_name(dt);
#endif
  }
}

TEST(SharedChecks, FloatKernelsRefuseWithTheSameMessages) {
  expect_refusals(float_cases(), DType::kFloat32);
  expect_refusals(float_cases(), DType::kFloat64);
}

TEST(SharedChecks, Bf16ProductsRefuseWithTheFloatMessages) { expect_refusals(bf16_cases(), DType::kBFloat16); }

// The label values (kernels/checks/loss.h's check_sce_labels): on CUDA they are read on the device.
TEST(SharedChecks, CrossEntropyLabelsOutsideTheClassesAreRefused) {
  const AttrMap ignore = attrs({{"ignore_index", int64_t{-100}}});
  const int64_t l64[] = {1, -100, 5, 0};
  const int32_t l32[] = {2, 0, 1, -1};
  const TensorView scores{dummy, DType::kFloat32, {4, 3}}, logp = scores, dloss{dummy, DType::kFloat32, {}};
  const TensorView labels64{const_cast<int64_t*>(l64), DType::kInt64, {4}};
  const TensorView labels32{const_cast<int32_t*>(l32), DType::kInt32, {4}};
  const TensorView loss{dummy, DType::kFloat32, {}}, dscores{dummy, DType::kFloat32, {4, 3}};
  const KernelFn fwd = find_kernel("SoftmaxCrossEntropyLoss", DeviceKind::kCpu, DType::kFloat32);
  const KernelFn bwd = find_kernel("SoftmaxCrossEntropyLossGrad", DeviceKind::kCpu, DType::kFloat32);
  ASSERT_TRUE(fwd && bwd);
  {
    const std::vector<TensorView> in{scores, labels64}, out{loss};
    EXPECT_EQ(fwd(KernelCall{in, out, ignore}).message(),
              "SoftmaxCrossEntropyLoss: label 5 at index 2 is outside [0, 3)");
    const AttrMap no_ignore;
    EXPECT_EQ(fwd(KernelCall{in, out, no_ignore}).message(),
              "SoftmaxCrossEntropyLoss: label -100 at index 1 is outside [0, 3)");
  }
  {
    const std::vector<TensorView> in{dloss, logp, labels32}, out{dscores};
    const AttrMap no_ignore;
    EXPECT_EQ(bwd(KernelCall{in, out, no_ignore}).message(),
              "SoftmaxCrossEntropyLossGrad: label -1 at index 3 is outside [0, 3)");
    const AttrMap ignore_last = attrs({{"ignore_index", int64_t{-1}}});
    const Status ok = bwd(KernelCall{in, out, ignore_last});  // dLoss 0: writes zeros
    EXPECT_TRUE(ok.is_ok()) << ok.message();
  }
}

}  // namespace
}  // namespace pt
