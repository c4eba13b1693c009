// The kernel table: every (op, device, dtype) this build can run, in one explicit list.
#include "kernels/registry.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <set>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/unary_math_ops.h"
#ifdef PIPETRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace pt {

void set_cpu_kernel_threads(int threads) {
  if (threads < 1) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

const char* device_kind_name(DeviceKind d) { return d == DeviceKind::kCpu ? "cpu" : "cuda"; }

namespace {

#define PT_CPU_F(op, fn) {op, DeviceKind::kCpu, DType::kFloat32, &cpu::fn<float>}, \
                         {op, DeviceKind::kCpu, DType::kFloat64, &cpu::fn<double>}

#define PT_CPU_I64(op, fn) {op, DeviceKind::kCpu, DType::kInt64, &cpu::fn<int64_t>}
#define PT_CPU_I32(op, fn) {op, DeviceKind::kCpu, DType::kInt32, &cpu::fn<int32_t>}

// CPU table. float32 and float64 (tests check gradients in double) for every op; int64 where
// shape arithmetic needs it.
const KernelEntry kCpuTable[] = {
    // Elementwise
    PT_CPU_F("Relu", relu),
    PT_CPU_F("Sigmoid", sigmoid),
    PT_CPU_F("Tanh", tanh_op),
    PT_CPU_F("Neg", neg),
    PT_CPU_F("Exp", exp_op),
    PT_CPU_F("Log", log_op),
    PT_CPU_F("Sqrt", sqrt_op),
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
    {"Identity", DeviceKind::kCpu, DType::kBool, &cpu::copy_input<bool>},
    {"Reshape", DeviceKind::kCpu, DType::kBool, &cpu::copy_input<bool>},
    {"Flatten", DeviceKind::kCpu, DType::kBool, &cpu::copy_input<bool>},
    {"Squeeze", DeviceKind::kCpu, DType::kBool, &cpu::copy_input<bool>},
    {"Unsqueeze", DeviceKind::kCpu, DType::kBool, &cpu::copy_input<bool>},
    {"Identity", DeviceKind::kCpu, DType::kUint8, &cpu::copy_input<uint8_t>},
    {"Reshape", DeviceKind::kCpu, DType::kUint8, &cpu::copy_input<uint8_t>},
    {"Flatten", DeviceKind::kCpu, DType::kUint8, &cpu::copy_input<uint8_t>},
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
    PT_CPU_F("ReluGrad", relu_grad),
    PT_CPU_F("Dropout", dropout),
    PT_CPU_F("DropoutGrad", dropout_grad),
    PT_CPU_F("SigmoidGrad", sigmoid_grad),
    PT_CPU_F("TanhGrad", tanh_grad),
    PT_CPU_F("SoftmaxGrad", softmax_grad),
    PT_CPU_F("LogSoftmaxGrad", log_softmax_grad),
    PT_CPU_F("ReduceSumToShape", reduce_sum_to_shape),
    PT_CPU_F("SoftmaxCrossEntropyLossGrad", softmax_cross_entropy_loss_grad),
    PT_CPU_F("MSELossGrad", mse_loss_grad),
    // Activations, pointwise math, reductions, data movement, LayerNorm (ops of issue 3)
#define PT_CPU_MOVE(op, fn) PT_CPU_F(op, fn), PT_CPU_I64(op, fn), PT_CPU_I32(op, fn), \
                            {op, DeviceKind::kCpu, DType::kBool, &cpu::fn<bool>}
    PT_CPU_F("Clip", clip),
    PT_CPU_F("LeakyRelu", leaky_relu),
    PT_CPU_F("Elu", elu),
    PT_CPU_F("Selu", selu),
    PT_CPU_F("HardSigmoid", hard_sigmoid),
    PT_CPU_F("HardSwish", hard_swish),
    PT_CPU_F("Erf", erf_op),
    PT_CPU_F("Softplus", softplus_op),
    PT_CPU_F("Reciprocal", reciprocal),
    PT_CPU_F("Abs", abs_op),
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
    {"Equal", DeviceKind::kCpu, DType::kBool, &cpu::equal<bool>},
    PT_CPU_F("Less", less), PT_CPU_I64("Less", less), PT_CPU_I32("Less", less),
    PT_CPU_F("Greater", greater), PT_CPU_I64("Greater", greater), PT_CPU_I32("Greater", greater),
    {"Where", DeviceKind::kCpu, DType::kBool, &cpu::where_op},
    {"Not", DeviceKind::kCpu, DType::kBool, &cpu::not_op},
    {"Cast", DeviceKind::kCpu, DType::kFloat32, &cpu::cast_op},
    {"Cast", DeviceKind::kCpu, DType::kFloat64, &cpu::cast_op},
    {"Cast", DeviceKind::kCpu, DType::kInt64, &cpu::cast_op},
    {"Cast", DeviceKind::kCpu, DType::kInt32, &cpu::cast_op},
    {"Cast", DeviceKind::kCpu, DType::kInt8, &cpu::cast_op},
    {"Cast", DeviceKind::kCpu, DType::kUint8, &cpu::cast_op},
    {"Cast", DeviceKind::kCpu, DType::kBool, &cpu::cast_op},
    {"Cast", DeviceKind::kCpu, DType::kBFloat16, &cpu::cast_op},
    PT_CPU_F("LayerNormalization", layer_norm),
    // ... and their backward ops (domain "pipetrain")
    PT_CPU_F("ClipGrad", clip_grad),
    PT_CPU_F("LeakyReluGrad", leaky_relu_grad),
    PT_CPU_F("EluGrad", elu_grad),
    PT_CPU_F("SeluGrad", selu_grad),
    PT_CPU_F("HardSigmoidGrad", hard_sigmoid_grad),
    PT_CPU_F("HardSwishGrad", hard_swish_grad),
    PT_CPU_F("ErfGrad", erf_grad),
    PT_CPU_F("SoftplusGrad", softplus_grad),
    PT_CPU_F("AbsGrad", abs_grad),
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
#define PT_CPU_FUSED(op, fn) {op, DeviceKind::kCpu, DType::kFloat32, &cpu::fn}, \
                             {op, DeviceKind::kCpu, DType::kFloat64, &cpu::fn}, \
                             {op, DeviceKind::kCpu, DType::kBFloat16, &cpu::fn}
    PT_CPU_FUSED("FusedMatMul", fused_matmul),
    PT_CPU_FUSED("FusedGemm", fused_gemm),
    PT_CPU_FUSED("FusedConv", fused_conv),
#undef PT_CPU_FUSED
    // --precision bf16 (importer/precision.h): bfloat16 operands, float32 outputs.
    {"Gemm", DeviceKind::kCpu, DType::kBFloat16, &cpu::gemm_bf16},
    {"MatMul", DeviceKind::kCpu, DType::kBFloat16, &cpu::matmul_bf16},
    {"Conv", DeviceKind::kCpu, DType::kBFloat16, &cpu::conv_bf16},
    {"ConvGradInput", DeviceKind::kCpu, DType::kBFloat16, &cpu::conv_grad_input_bf16},
    {"ConvGradWeight", DeviceKind::kCpu, DType::kBFloat16, &cpu::conv_grad_weight_bf16},
    PT_CPU_F("MaxPoolGrad", max_pool_grad),
    PT_CPU_F("AveragePoolGrad", average_pool_grad),
    PT_CPU_F("GlobalAveragePoolGrad", global_average_pool_grad),
    PT_CPU_F("GlobalMaxPoolGrad", global_max_pool_grad),
    PT_CPU_F("BatchNormalizationGrad", batch_normalization_grad),
    PT_CPU_F("LRNGrad", lrn_grad),
    // Ops of opsets 18 to 21 and the missing ops of issue 13 (one block: unary_math.cpp,
    // reduce_ops.cpp, index_ops.cpp, group_norm.cpp); the one-formula ops come from their list.
#define PT_CPU_UNARY_MATH(Name, fn, fwd, bwd) PT_CPU_F(#Name, fn##_math), PT_CPU_F(#Name "Grad", fn##_math_grad),
    PT_UNARY_MATH_OPS(PT_CPU_UNARY_MATH)
#undef PT_CPU_UNARY_MATH
    PT_CPU_F("Gelu", gelu),
    PT_CPU_F("GeluGrad", gelu_grad),
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
                             {op, DeviceKind::kCpu, DType::kBool, &cpu::fn<bool>}
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

std::vector<KernelEntry> build_table() {
  std::vector<KernelEntry> t(std::begin(kCpuTable), std::end(kCpuTable));
#ifdef PIPETRAIN_HAVE_CUDA
  for (const KernelEntry& e : cuda::kernel_table()) t.push_back(e);
#endif
  return t;
}

const std::vector<KernelEntry>& table() {
  static const std::vector<KernelEntry> t = build_table();
  return t;
}

}  // namespace

std::span<const KernelEntry> all_kernels() { return table(); }

KernelFn find_kernel(std::string_view op, DeviceKind device, DType dtype) {
  for (const KernelEntry& e : table())
    if (e.device == device && e.dtype == dtype && op == e.op) return e.fn;
  return nullptr;
}

bool has_kernel(std::string_view op, DeviceKind device, DType dtype) {
  return find_kernel(op, device, dtype) != nullptr;
}

std::vector<std::string> supported_ops(DeviceKind device) {
  std::set<std::string> s;
  for (const KernelEntry& e : table())
    if (e.device == device) s.insert(e.op);
  return {s.begin(), s.end()};
}

#ifndef PIPETRAIN_HAVE_CUDA
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "this build has no CUDA backend (PIPETRAIN_CUDA=OFF or no nvcc)"; }
std::string cuda_device_name(int) { return ""; }
#endif

}  // namespace pt
