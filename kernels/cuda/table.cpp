// The CUDA kernel table: every (op, dtype) the CUDA backend runs, in one explicit list: native
// kernels first, then the host fallbacks (fallback.h: the CPU kernel on staged copies) for every
// CPU (op, dtype) without a native kernel, so that the CUDA backend covers the CPU's table
// entry for entry (tests/kernels/cuda_kernels_test.cpp checks it). Adding a native CUDA op is its
// kernel, its declaration in cuda_kernels.h, its line here, and its fallback line removed.
#include <algorithm>
#include <set>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fallback.h"
#include "kernels/unary_math_ops.h"

namespace pt::cuda {

namespace {

#define PT_CUDA_F(op, fn) {op, DeviceKind::kCuda, DType::kFloat32, &cuda::fn<float>}, \
                          {op, DeviceKind::kCuda, DType::kFloat64, &cuda::fn<double>}
#define PT_CUDA_T(op, fn, T, D) {op, DeviceKind::kCuda, D, &cuda::fn<T>}

// float32 and float64 for every op, like the CPU table (tests compare in double).
const KernelEntry kNative[] = {
    PT_CUDA_F("Relu", relu),
    PT_CUDA_F("ReluGrad", relu_grad),
    // Elementwise math and activations (elementwise.cu)
    PT_CUDA_F("Sigmoid", sigmoid),
    PT_CUDA_F("Tanh", tanh_op),
    PT_CUDA_F("Neg", neg),
    PT_CUDA_F("Exp", exp_op),
    PT_CUDA_F("Log", log_op),
    PT_CUDA_F("Sqrt", sqrt_op),
    PT_CUDA_F("Clip", clip),
    PT_CUDA_F("LeakyRelu", leaky_relu),
    PT_CUDA_F("Elu", elu),
    PT_CUDA_F("Selu", selu),
    PT_CUDA_F("HardSigmoid", hard_sigmoid),
    PT_CUDA_F("HardSwish", hard_swish),
    PT_CUDA_F("Erf", erf_op),
    PT_CUDA_F("Softplus", softplus_op),
    PT_CUDA_F("Reciprocal", reciprocal),
    PT_CUDA_F("Abs", abs_op),
    PT_CUDA_F("SigmoidGrad", sigmoid_grad),
    PT_CUDA_F("TanhGrad", tanh_grad),
    PT_CUDA_F("ClipGrad", clip_grad),
    PT_CUDA_F("LeakyReluGrad", leaky_relu_grad),
    PT_CUDA_F("EluGrad", elu_grad),
    PT_CUDA_F("SeluGrad", selu_grad),
    PT_CUDA_F("HardSigmoidGrad", hard_sigmoid_grad),
    PT_CUDA_F("HardSwishGrad", hard_swish_grad),
    PT_CUDA_F("ErfGrad", erf_grad),
    PT_CUDA_F("SoftplusGrad", softplus_grad),
    PT_CUDA_F("AbsGrad", abs_grad),
    // Broadcasting binary ops (binary.cu)
    PT_CUDA_F("Add", add), PT_CUDA_T("Add", add, int64_t, DType::kInt64),
    PT_CUDA_F("Sub", sub), PT_CUDA_T("Sub", sub, int64_t, DType::kInt64),
    PT_CUDA_F("Mul", mul), PT_CUDA_T("Mul", mul, int64_t, DType::kInt64),
    PT_CUDA_F("Div", div_op),
    PT_CUDA_F("PRelu", prelu),
    PT_CUDA_F("PReluGrad", prelu_grad),
    PT_CUDA_F("Sum", sum_op), PT_CUDA_T("Sum", sum_op, int64_t, DType::kInt64),
    PT_CUDA_F("Mean", mean_op),
    PT_CUDA_F("Transpose", transpose), PT_CUDA_T("Transpose", transpose, int64_t, DType::kInt64),
    // Copies: every dtype the CPU table has for them
#define PT_CUDA_COPY(op) PT_CUDA_F(op, copy_input), PT_CUDA_T(op, copy_input, int64_t, DType::kInt64), \
                         PT_CUDA_T(op, copy_input, int32_t, DType::kInt32), PT_CUDA_T(op, copy_input, bool, DType::kBool)
    PT_CUDA_COPY("Identity"), PT_CUDA_T("Identity", copy_input, uint8_t, DType::kUint8),
    PT_CUDA_COPY("Reshape"), PT_CUDA_T("Reshape", copy_input, uint8_t, DType::kUint8),
    PT_CUDA_COPY("Flatten"), PT_CUDA_T("Flatten", copy_input, uint8_t, DType::kUint8),
    PT_CUDA_COPY("Squeeze"),
    PT_CUDA_COPY("Unsqueeze"),
#undef PT_CUDA_COPY
    // Reductions (reduce.cu)
    PT_CUDA_F("ReduceSum", reduce_sum),
    PT_CUDA_F("ReduceMean", reduce_mean),
    PT_CUDA_F("ReduceMax", reduce_max),
    PT_CUDA_F("ReduceSumToShape", reduce_sum_to_shape),
    PT_CUDA_F("ConvGradBias", conv_grad_bias),
    PT_CUDA_F("GlobalAveragePool", global_average_pool),
    PT_CUDA_F("GlobalAveragePoolGrad", global_average_pool_grad),
    // cuBLAS
    PT_CUDA_F("Gemm", gemm),
    PT_CUDA_F("MatMul", matmul),
    // cuDNN
    PT_CUDA_F("Conv", conv),
    PT_CUDA_F("ConvGradInput", conv_grad_input),
    PT_CUDA_F("ConvGradWeight", conv_grad_weight),
    PT_CUDA_F("Softmax", softmax),
    PT_CUDA_F("LogSoftmax", log_softmax),
    PT_CUDA_F("SoftmaxGrad", softmax_grad),
    PT_CUDA_F("FusedAttention", fused_attention),          // attention_ops.cpp (importer/fuse_attention.cpp)
    PT_CUDA_F("FusedAttentionGrad", fused_attention_grad),
    PT_CUDA_F("LogSoftmaxGrad", log_softmax_grad),
    // Pooling, normalisation, dropout, losses, optimizer (pool.cu, batchnorm.cu, dropout.cu,
    // loss.cu, optimizer.cu)
    PT_CUDA_F("MaxPool", max_pool),
    PT_CUDA_F("MaxPoolGrad", max_pool_grad),
    PT_CUDA_F("AveragePool", average_pool),
    PT_CUDA_F("AveragePoolGrad", average_pool_grad),
    PT_CUDA_F("BatchNormalization", batch_normalization),
    PT_CUDA_F("BatchNormalizationGrad", batch_normalization_grad),
    PT_CUDA_F("Dropout", dropout),
    PT_CUDA_F("DropoutGrad", dropout_grad),
    PT_CUDA_F("SoftmaxCrossEntropyLoss", softmax_cross_entropy_loss),
    PT_CUDA_F("SoftmaxCrossEntropyLossGrad", softmax_cross_entropy_loss_grad),
    PT_CUDA_F("MSELoss", mse_loss),
    PT_CUDA_F("MSELossGrad", mse_loss_grad),
    PT_CUDA_F("SGDMomentum", sgd_momentum),
    PT_CUDA_F("SGD", sgd),
    PT_CUDA_F("Adam", adam),
};

#undef PT_CUDA_F
#undef PT_CUDA_T

// Host fallbacks: the CPU kernel of the same (op, dtype) on staged copies.
#define PT_FB(op, fn, T, D) {op, DeviceKind::kCuda, D, &host_fallback<&cpu::fn<T>>}
#define PT_FB_F(op, fn) PT_FB(op, fn, float, DType::kFloat32), PT_FB(op, fn, double, DType::kFloat64)
#define PT_FB_I64(op, fn) PT_FB(op, fn, int64_t, DType::kInt64)
#define PT_FB_I32(op, fn) PT_FB(op, fn, int32_t, DType::kInt32)
#define PT_FB_MOVE(op, fn) PT_FB_F(op, fn), PT_FB_I64(op, fn), PT_FB_I32(op, fn), PT_FB(op, fn, bool, DType::kBool)
#define PT_FB_RAW(op, fn, D) {op, DeviceKind::kCuda, D, &host_fallback<&cpu::fn>}

const KernelEntry kFallback[] = {
    PT_FB_I64("Div", div_op),  // the CPU refuses integer division by zero: it reads the divisor
    PT_FB_I64("Abs", abs_op),
    PT_FB_F("Pow", pow_op), PT_FB_I64("Pow", pow_op),
    PT_FB_I64("ReduceSum", reduce_sum),
    PT_FB_I64("ReduceMax", reduce_max),
    PT_FB_F("ReduceMaxGrad", reduce_max_grad),
    PT_FB_MOVE("Concat", concat),
    PT_FB_MOVE("Split", split),
    PT_FB_MOVE("Slice", slice),
    PT_FB_MOVE("Expand", expand),
    PT_FB_MOVE("Tile", tile),
    PT_FB_MOVE("Gather", gather),
    PT_FB_F("Pad", pad), PT_FB_I64("Pad", pad), PT_FB_I32("Pad", pad),
    PT_FB_F("Equal", equal), PT_FB_I64("Equal", equal), PT_FB_I32("Equal", equal),
    PT_FB("Equal", equal, bool, DType::kBool),
    PT_FB_F("Less", less), PT_FB_I64("Less", less), PT_FB_I32("Less", less),
    PT_FB_F("Greater", greater), PT_FB_I64("Greater", greater), PT_FB_I32("Greater", greater),
    PT_FB_RAW("Where", where_op, DType::kBool),
    PT_FB_RAW("Not", not_op, DType::kBool),
    PT_FB_RAW("Cast", cast_op, DType::kFloat32),
    PT_FB_RAW("Cast", cast_op, DType::kFloat64),
    PT_FB_RAW("Cast", cast_op, DType::kInt64),
    PT_FB_RAW("Cast", cast_op, DType::kInt32),
    PT_FB_RAW("Cast", cast_op, DType::kInt8),
    PT_FB_RAW("Cast", cast_op, DType::kUint8),
    PT_FB_RAW("Cast", cast_op, DType::kBool),
    // --precision bf16 is refused on CUDA devices (tools/run_training.cpp); these rows keep the
    // table covering the CPU's (CudaKernelTable.CoversEveryCpuEntry), nothing runs them.
    PT_FB_RAW("Cast", cast_op, DType::kBFloat16),
    PT_FB_RAW("Gemm", gemm_bf16, DType::kBFloat16),
    PT_FB_RAW("MatMul", matmul_bf16, DType::kBFloat16),
    PT_FB_RAW("Conv", conv_bf16, DType::kBFloat16),
    PT_FB_RAW("ConvGradInput", conv_grad_input_bf16, DType::kBFloat16),
    PT_FB_RAW("ConvGradWeight", conv_grad_weight_bf16, DType::kBFloat16),
    // The epilogue pass's fused products (importer/fuse_epilogue.cpp): CUDA imports do not run that
    // pass (import_onnx), so nothing runs these either; they keep the table covering the CPU's.
#define PT_FB_FUSED(op, fn) PT_FB_RAW(op, fn, DType::kFloat32), PT_FB_RAW(op, fn, DType::kFloat64), \
                            PT_FB_RAW(op, fn, DType::kBFloat16)
    PT_FB_FUSED("FusedMatMul", fused_matmul),
    PT_FB_FUSED("FusedGemm", fused_gemm),
    PT_FB_FUSED("FusedConv", fused_conv),
#undef PT_FB_FUSED
    PT_FB_F("LayerNormalization", layer_norm),
    PT_FB_F("LayerNormalizationGrad", layer_norm_grad),
    PT_FB_F("SliceGrad", slice_grad),
    PT_FB_F("PadGrad", pad_grad),
    PT_FB_F("GatherGrad", gather_grad),
    PT_FB_F("GlobalMaxPool", global_max_pool),
    PT_FB_F("GlobalMaxPoolGrad", global_max_pool_grad),
    PT_FB_F("LRN", lrn),
    // Ops of opsets 18 to 21 and the missing ops of issue 13: host fallbacks for now.
#define PT_FB_UNARY_MATH(Name, fn, fwd, bwd) PT_FB_F(#Name, fn##_math), PT_FB_F(#Name "Grad", fn##_math_grad),
    PT_UNARY_MATH_OPS(PT_FB_UNARY_MATH)
#undef PT_FB_UNARY_MATH
    PT_FB_F("Gelu", gelu),
    PT_FB_F("GeluGrad", gelu_grad),
    PT_FB_F("ReduceMin", reduce_min), PT_FB_I64("ReduceMin", reduce_min),
    PT_FB_F("ReduceProd", reduce_prod),
    PT_FB_F("ReduceL1", reduce_l1),
    PT_FB_F("ReduceL2", reduce_l2),
    PT_FB_F("ReduceSumSquare", reduce_sum_square),
    PT_FB_F("ReduceLogSum", reduce_log_sum),
    PT_FB_F("ReduceLogSumExp", reduce_log_sum_exp),
    PT_FB_F("Max", max_op), PT_FB_I64("Max", max_op), PT_FB_I32("Max", max_op),
    PT_FB_F("Min", min_op), PT_FB_I64("Min", min_op), PT_FB_I32("Min", min_op),
    PT_FB_F("Mod", mod_op), PT_FB_I64("Mod", mod_op), PT_FB_I32("Mod", mod_op),
    PT_FB_F("ArgMax", arg_max), PT_FB_I64("ArgMax", arg_max), PT_FB_I32("ArgMax", arg_max),
    PT_FB_F("CumSum", cum_sum), PT_FB_I64("CumSum", cum_sum), PT_FB_I32("CumSum", cum_sum),
    PT_FB_F("Trilu", trilu), PT_FB_I64("Trilu", trilu), PT_FB_I32("Trilu", trilu),
    PT_FB_F("GatherElements", gather_elements), PT_FB_I64("GatherElements", gather_elements),
    PT_FB_I32("GatherElements", gather_elements),
    PT_FB_F("GatherElementsGrad", gather_elements_grad),
    PT_FB_F("GroupNormalization", group_norm),
    PT_FB_F("InstanceNormalization", group_norm),
    PT_FB_F("GroupNormalizationGrad", group_norm_grad),
    PT_FB_F("ConvTranspose", conv_transpose),
    PT_FB_F("Resize", resize),
    PT_FB_F("ResizeGrad", resize_grad),
    PT_FB_F("Einsum", einsum),
    PT_FB_MOVE("GatherND", gather_nd), PT_FB_MOVE("ScatterND", scatter_nd),
    PT_FB_MOVE("ScatterElements", scatter_elements),
    PT_FB_F("GatherNDGrad", gather_nd_grad),
    PT_FB_F("LRNGrad", lrn_grad),
};

#undef PT_FB
#undef PT_FB_F
#undef PT_FB_I64
#undef PT_FB_I32
#undef PT_FB_MOVE
#undef PT_FB_RAW

const std::vector<KernelEntry>& all() {
  static const std::vector<KernelEntry> t = [] {
    std::vector<KernelEntry> v(std::begin(kNative), std::end(kNative));
    v.insert(v.end(), std::begin(kFallback), std::end(kFallback));
    return v;
  }();
  return t;
}

}  // namespace

std::span<const KernelEntry> kernel_table() { return all(); }

bool is_host_fallback(std::string_view op, DType dtype) {
  for (const KernelEntry& e : kFallback)
    if (e.dtype == dtype && op == e.op) return true;
  return false;
}

std::vector<std::string> native_ops() {
  std::set<std::string> s;
  for (const KernelEntry& e : kNative) s.insert(e.op);
  return {s.begin(), s.end()};
}

std::vector<std::string> fallback_ops() {
  std::set<std::string> s, native;
  for (const KernelEntry& e : kNative) native.insert(e.op);
  for (const KernelEntry& e : kFallback)
    if (!native.count(e.op)) s.insert(e.op);
  return {s.begin(), s.end()};
}

}  // namespace pt::cuda
