// The CPU kernel table: every (op, dtype) the CPU runs, in one explicit list. The registry
// (kernels/registry.cpp) serves it, and the CUDA backend derives its host fallbacks from it
// (kernels/cuda/table.cpp): a CPU row without a native CUDA kernel runs on the host there.
#pragma once

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/registry.h"
#include "kernels/unary_ops.h"

namespace pt::cpu {

#define PT_CPU_F(op, fn) {op, DeviceKind::kCpu, DType::kFloat32, &fn<float>}, \
                         {op, DeviceKind::kCpu, DType::kFloat64, &fn<double>}

#define PT_CPU_I64(op, fn) {op, DeviceKind::kCpu, DType::kInt64, &fn<int64_t>}
#define PT_CPU_I32(op, fn) {op, DeviceKind::kCpu, DType::kInt32, &fn<int32_t>}

// float32 and float64 (tests check gradients in double) for every op; int64 where shape arithmetic
// needs it.
inline constexpr KernelEntry kCpuTable[] = {
    // The element-wise unary ops and their dedicated backward ops (kernels/unary_ops.h)
#define PT_CPU_UNARY(Name, fn, args, fwd, kind, bwd, fast, fast_grad) \
  PT_CPU_F(#Name, fn##_op), PT_UNARY_IF_GRAD(kind, PT_CPU_F(#Name "Grad", fn##_grad), )
    PT_UNARY_OPS(PT_CPU_UNARY)
#undef PT_CPU_UNARY
    // Broadcasting arithmetic
    PT_CPU_F("Add", add),
    PT_CPU_I64("Add", add),
    PT_CPU_F("Sub", sub),
    PT_CPU_I64("Sub", sub),
    PT_CPU_F("Mul", mul),
    PT_CPU_I64("Mul", mul),
    PT_CPU_F("Div", div_op),
    PT_CPU_I64("Div", div_op),
    // Copies and layout
    PT_CPU_F("Identity", copy_input),
    PT_CPU_I64("Identity", copy_input),
    PT_CPU_I32("Identity", copy_input),
    PT_CPU_F("Reshape", copy_input),
    PT_CPU_I64("Reshape", copy_input),
    PT_CPU_I32("Reshape", copy_input),
    PT_CPU_F("Flatten", copy_input),
    PT_CPU_I64("Flatten", copy_input),
    PT_CPU_I32("Flatten", copy_input),
    // Masks (bool) and bytes move through the copy ops too (attention masks, image data).
    {"Identity", DeviceKind::kCpu, DType::kBool, &copy_input<bool>},
    {"Reshape", DeviceKind::kCpu, DType::kBool, &copy_input<bool>},
    {"Flatten", DeviceKind::kCpu, DType::kBool, &copy_input<bool>},
    {"Squeeze", DeviceKind::kCpu, DType::kBool, &copy_input<bool>},
    {"Unsqueeze", DeviceKind::kCpu, DType::kBool, &copy_input<bool>},
    {"Identity", DeviceKind::kCpu, DType::kUint8, &copy_input<uint8_t>},
    {"Reshape", DeviceKind::kCpu, DType::kUint8, &copy_input<uint8_t>},
    {"Flatten", DeviceKind::kCpu, DType::kUint8, &copy_input<uint8_t>},
    PT_CPU_F("Transpose", transpose),
    PT_CPU_I64("Transpose", transpose),
    // Matrix products and softmax
    PT_CPU_F("Gemm", gemm),
    PT_CPU_F("MatMul", matmul),
    PT_CPU_F("Softmax", softmax),
    PT_CPU_F("LogSoftmax", log_softmax),
    // Losses
    PT_CPU_F("SoftmaxCrossEntropyLoss", softmax_cross_entropy_loss),
    PT_CPU_F("MSELoss", mse_loss),
    // Backward ops (domain "pipetrain")
    PT_CPU_F("Dropout", dropout),
    PT_CPU_F("DropoutGrad", dropout_grad),
    PT_CPU_F("SoftmaxGrad", softmax_grad),
    PT_CPU_F("LogSoftmaxGrad", log_softmax_grad),
    PT_CPU_F("ReduceSumToShape", reduce_sum_to_shape),
    PT_CPU_F("SoftmaxCrossEntropyLossGrad", softmax_cross_entropy_loss_grad),
    PT_CPU_F("MSELossGrad", mse_loss_grad),
    // PRelu, Pow, reductions, data movement, LayerNorm
#define PT_CPU_MOVE(op, fn) PT_CPU_F(op, fn), PT_CPU_I64(op, fn), PT_CPU_I32(op, fn), \
                            {op, DeviceKind::kCpu, DType::kBool, &fn<bool>}
    PT_CPU_I64("Abs", abs_op),
    PT_CPU_F("PRelu", prelu),
    PT_CPU_F("Pow", pow_op),
    PT_CPU_I64("Pow", pow_op),
    PT_CPU_F("ReduceSum", reduce_sum),
    PT_CPU_I64("ReduceSum", reduce_sum),
    PT_CPU_F("ReduceMean", reduce_mean),
    PT_CPU_F("ReduceMax", reduce_max),
    PT_CPU_I64("ReduceMax", reduce_max),
    PT_CPU_F("Sum", sum_op),
    PT_CPU_I64("Sum", sum_op),
    PT_CPU_F("Mean", mean_op),
    PT_CPU_MOVE("Concat", concat),
    PT_CPU_MOVE("Split", split),
    PT_CPU_MOVE("Slice", slice),
    PT_CPU_MOVE("Expand", expand),
    PT_CPU_MOVE("Tile", tile),
    PT_CPU_MOVE("Gather", gather),
    PT_CPU_F("Pad", pad), PT_CPU_I64("Pad", pad), PT_CPU_I32("Pad", pad),
    PT_CPU_F("Squeeze", copy_input), PT_CPU_I64("Squeeze", copy_input), PT_CPU_I32("Squeeze", copy_input),
    PT_CPU_F("Unsqueeze", copy_input), PT_CPU_I64("Unsqueeze", copy_input), PT_CPU_I32("Unsqueeze", copy_input),
    PT_CPU_F("Equal", equal), PT_CPU_I64("Equal", equal), PT_CPU_I32("Equal", equal),
    {"Equal", DeviceKind::kCpu, DType::kBool, &equal<bool>},
    PT_CPU_F("Less", less), PT_CPU_I64("Less", less), PT_CPU_I32("Less", less),
    PT_CPU_F("Greater", greater), PT_CPU_I64("Greater", greater), PT_CPU_I32("Greater", greater),
    {"Where", DeviceKind::kCpu, DType::kBool, &where_op},
    {"Not", DeviceKind::kCpu, DType::kBool, &not_op},
    {"Cast", DeviceKind::kCpu, DType::kFloat32, &cast_op},
    {"Cast", DeviceKind::kCpu, DType::kFloat64, &cast_op},
    {"Cast", DeviceKind::kCpu, DType::kInt64, &cast_op},
    {"Cast", DeviceKind::kCpu, DType::kInt32, &cast_op},
    {"Cast", DeviceKind::kCpu, DType::kInt8, &cast_op},
    {"Cast", DeviceKind::kCpu, DType::kUint8, &cast_op},
    {"Cast", DeviceKind::kCpu, DType::kBool, &cast_op},
    {"Cast", DeviceKind::kCpu, DType::kBFloat16, &cast_op},
    PT_CPU_F("LayerNormalization", layer_norm),
    // ... and their backward ops (domain "pipetrain")
    PT_CPU_F("PReluGrad", prelu_grad),
    PT_CPU_F("ReduceMaxGrad", reduce_max_grad),
    PT_CPU_F("SliceGrad", slice_grad),
    PT_CPU_F("PadGrad", pad_grad),
    PT_CPU_F("GatherGrad", gather_grad),
    PT_CPU_F("LayerNormalizationGrad", layer_norm_grad),
    // Fused attention (importer/fuse_attention.cpp; FusedAttentionGrad in domain "pipetrain")
    PT_CPU_F("FusedAttention", fused_attention),
    PT_CPU_F("FusedAttentionGrad", fused_attention_grad),
#undef PT_CPU_MOVE
    // Convolution, pooling and normalisation (kernels/cpu/conv.cpp, pool.cpp, batchnorm.cpp, lrn.cpp)
    PT_CPU_F("Conv", conv),
    PT_CPU_F("MaxPool", max_pool),
    PT_CPU_F("AveragePool", average_pool),
    PT_CPU_F("GlobalAveragePool", global_average_pool),
    PT_CPU_F("GlobalMaxPool", global_max_pool),
    PT_CPU_F("BatchNormalization", batch_normalization),
    PT_CPU_F("LRN", lrn),
    PT_CPU_F("ConvGradInput", conv_grad_input),
    PT_CPU_F("ConvGradWeight", conv_grad_weight),
    PT_CPU_F("ConvGradBias", conv_grad_bias),
    // Products with a bias / activation epilogue (importer/fuse_epilogue.cpp): float, double, and
    // bfloat16 operands under --precision bf16 (the product's own kernel runs by the operands' dtype).
#define PT_CPU_FUSED(op, fn) {op, DeviceKind::kCpu, DType::kFloat32, &fn}, \
                             {op, DeviceKind::kCpu, DType::kFloat64, &fn}, \
                             {op, DeviceKind::kCpu, DType::kBFloat16, &fn}
    PT_CPU_FUSED("FusedMatMul", fused_matmul),
    PT_CPU_FUSED("FusedGemm", fused_gemm),
    PT_CPU_FUSED("FusedConv", fused_conv),
#undef PT_CPU_FUSED
    // --precision bf16 (importer/precision.h): bfloat16 operands, float32 outputs.
    {"Gemm", DeviceKind::kCpu, DType::kBFloat16, &gemm_bf16},
    {"MatMul", DeviceKind::kCpu, DType::kBFloat16, &matmul_bf16},
    {"Conv", DeviceKind::kCpu, DType::kBFloat16, &conv_bf16},
    {"ConvGradInput", DeviceKind::kCpu, DType::kBFloat16, &conv_grad_input_bf16},
    {"ConvGradWeight", DeviceKind::kCpu, DType::kBFloat16, &conv_grad_weight_bf16},
    PT_CPU_F("MaxPoolGrad", max_pool_grad),
    PT_CPU_F("AveragePoolGrad", average_pool_grad),
    PT_CPU_F("GlobalAveragePoolGrad", global_average_pool_grad),
    PT_CPU_F("GlobalMaxPoolGrad", global_max_pool_grad),
    PT_CPU_F("BatchNormalizationGrad", batch_normalization_grad),
    PT_CPU_F("LRNGrad", lrn_grad),
    // Ops of opsets 18 to 21 (reduce_ops.cpp, index_ops.cpp, group_norm.cpp, ...)
    PT_CPU_F("ReduceMin", reduce_min),
    PT_CPU_I64("ReduceMin", reduce_min),
    PT_CPU_F("ReduceProd", reduce_prod),
    PT_CPU_F("ReduceL1", reduce_l1),
    PT_CPU_F("ReduceL2", reduce_l2),
    PT_CPU_F("ReduceSumSquare", reduce_sum_square),
    PT_CPU_F("ReduceLogSum", reduce_log_sum),
    PT_CPU_F("ReduceLogSumExp", reduce_log_sum_exp),
    PT_CPU_F("Max", max_op), PT_CPU_I64("Max", max_op), PT_CPU_I32("Max", max_op),
    PT_CPU_F("Min", min_op), PT_CPU_I64("Min", min_op), PT_CPU_I32("Min", min_op),
    PT_CPU_F("Mod", mod_op), PT_CPU_I64("Mod", mod_op), PT_CPU_I32("Mod", mod_op),
    PT_CPU_F("ArgMax", arg_max), PT_CPU_I64("ArgMax", arg_max), PT_CPU_I32("ArgMax", arg_max),
    PT_CPU_F("CumSum", cum_sum), PT_CPU_I64("CumSum", cum_sum), PT_CPU_I32("CumSum", cum_sum),
    PT_CPU_F("Trilu", trilu), PT_CPU_I64("Trilu", trilu), PT_CPU_I32("Trilu", trilu),
    PT_CPU_F("GatherElements", gather_elements), PT_CPU_I64("GatherElements", gather_elements),
    PT_CPU_I32("GatherElements", gather_elements),
    PT_CPU_F("GatherElementsGrad", gather_elements_grad),
    PT_CPU_F("GroupNormalization", group_norm),
    PT_CPU_F("InstanceNormalization", group_norm),
    PT_CPU_F("GroupNormalizationGrad", group_norm_grad),
    PT_CPU_F("ConvTranspose", conv_transpose),
    PT_CPU_F("Resize", resize),
    PT_CPU_F("ResizeGrad", resize_grad),
    PT_CPU_F("Einsum", einsum),
#define PT_CPU_INDEX(op, fn) PT_CPU_F(op, fn), PT_CPU_I64(op, fn), PT_CPU_I32(op, fn), \
                             {op, DeviceKind::kCpu, DType::kBool, &fn<bool>}
    PT_CPU_INDEX("GatherND", gather_nd), PT_CPU_INDEX("ScatterND", scatter_nd),
    PT_CPU_INDEX("ScatterElements", scatter_elements),
    PT_CPU_F("GatherNDGrad", gather_nd_grad),
#undef PT_CPU_INDEX
    // Optimizer steps
    PT_CPU_F("SGDMomentum", sgd_momentum),
    PT_CPU_F("SGD", sgd),
    PT_CPU_F("Adam", adam),
};

#undef PT_CPU_F
#undef PT_CPU_I64
#undef PT_CPU_I32

}  // namespace pt::cpu
