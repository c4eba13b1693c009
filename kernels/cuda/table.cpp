// The CUDA kernel table: every (op, dtype) the CUDA backend runs: the native kernels in one explicit
// list, then a host fallback (fallback.h: the CPU kernel on staged copies) for every row of the CPU
// table (kernels/cpu/cpu_table.h) without a native kernel, derived from that table, so the CUDA
// backend covers the CPU's entry for entry by construction (tests/kernels/cuda_kernels_test.cpp
// checks it). Adding a native CUDA op is its kernel, its declaration in cuda_kernels.h and its line
// here; the element-wise unary ops come from kernels/unary_ops.h.
#include <algorithm>
#include <array>
#include <iterator>
#include <set>
#include <utility>

#include "kernels/cpu/cpu_table.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fallback.h"
#include "kernels/unary_ops.h"

namespace pt::cuda {

namespace {

#define PT_CUDA_F(op, fn) {op, DeviceKind::kCuda, DType::kFloat32, &cuda::fn<float>}, \
                          {op, DeviceKind::kCuda, DType::kFloat64, &cuda::fn<double>}
#define PT_CUDA_T(op, fn, T, D) {op, DeviceKind::kCuda, D, &cuda::fn<T>}
#define PT_CUDA_FUSED(op, fn) {op, DeviceKind::kCuda, DType::kFloat32, &cuda::fn}, \
                              {op, DeviceKind::kCuda, DType::kFloat64, &cuda::fn}, \
                              {op, DeviceKind::kCuda, DType::kBFloat16, &cuda::fn}

// float32 and float64 for every op, like the CPU table (tests compare in double).
const KernelEntry kNative[] = {
    // The element-wise unary ops and their dedicated backward ops (kernels/unary_ops.h)
#define PT_CUDA_UNARY(Name, fn, args, fwd, kind, bwd, fast, fast_grad) \
  PT_CUDA_F(#Name, fn##_op), PT_UNARY_IF_GRAD(kind, PT_CUDA_F(#Name "Grad", fn##_grad), )
    PT_UNARY_OPS(PT_CUDA_UNARY)
#undef PT_CUDA_UNARY
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
    // Data movement and LayerNormalization (tensor_ops.cpp): every dtype the CPU table has
#define PT_CUDA_MOVE(op, fn) PT_CUDA_F(op, fn), PT_CUDA_T(op, fn, int64_t, DType::kInt64), \
                             PT_CUDA_T(op, fn, int32_t, DType::kInt32), PT_CUDA_T(op, fn, bool, DType::kBool)
    PT_CUDA_MOVE("Slice", slice), PT_CUDA_MOVE("Concat", concat), PT_CUDA_MOVE("Split", split),
    PT_CUDA_MOVE("Expand", expand), PT_CUDA_MOVE("Gather", gather),
#undef PT_CUDA_MOVE
    PT_CUDA_F("Pad", pad), PT_CUDA_T("Pad", pad, int64_t, DType::kInt64), PT_CUDA_T("Pad", pad, int32_t, DType::kInt32),
    PT_CUDA_F("PadGrad", pad_grad),
    PT_CUDA_F("Resize", resize),
    PT_CUDA_F("ResizeGrad", resize_grad),
    PT_CUDA_F("GroupNormalization", group_norm),
    PT_CUDA_F("InstanceNormalization", group_norm),
    PT_CUDA_F("GroupNormalizationGrad", group_norm_grad),
    PT_CUDA_F("SliceGrad", slice_grad),
    PT_CUDA_F("GatherGrad", gather_grad),
    PT_CUDA_F("LayerNormalization", layer_norm),
    PT_CUDA_F("LayerNormalizationGrad", layer_norm_grad),
    // Comparisons, Not, Where, Cast (select.cu): the CPU table's dtypes
#define PT_CUDA_CMP(op, fn) PT_CUDA_F(op, fn), PT_CUDA_T(op, fn, int64_t, DType::kInt64), \
                            PT_CUDA_T(op, fn, int32_t, DType::kInt32)
    PT_CUDA_CMP("Equal", equal), PT_CUDA_T("Equal", equal, bool, DType::kBool),
    PT_CUDA_CMP("Less", less), PT_CUDA_CMP("Greater", greater),
#undef PT_CUDA_CMP
    {"Not", DeviceKind::kCuda, DType::kBool, &cuda::not_op},
    {"Where", DeviceKind::kCuda, DType::kBool, &cuda::where_op},
    {"Cast", DeviceKind::kCuda, DType::kFloat32, &cuda::cast_op},
    {"Cast", DeviceKind::kCuda, DType::kFloat64, &cuda::cast_op},
    {"Cast", DeviceKind::kCuda, DType::kInt64, &cuda::cast_op},
    {"Cast", DeviceKind::kCuda, DType::kInt32, &cuda::cast_op},
    {"Cast", DeviceKind::kCuda, DType::kInt8, &cuda::cast_op},
    {"Cast", DeviceKind::kCuda, DType::kUint8, &cuda::cast_op},
    {"Cast", DeviceKind::kCuda, DType::kBool, &cuda::cast_op},
    {"Cast", DeviceKind::kCuda, DType::kBFloat16, &cuda::cast_op},
    // --precision bf16's products: bfloat16 operands, float32 outputs
    {"Gemm", DeviceKind::kCuda, DType::kBFloat16, &cuda::gemm_bf16},
    {"MatMul", DeviceKind::kCuda, DType::kBFloat16, &cuda::matmul_bf16},
    {"Conv", DeviceKind::kCuda, DType::kBFloat16, &cuda::conv_bf16},
    {"ConvGradInput", DeviceKind::kCuda, DType::kBFloat16, &cuda::conv_grad_input_bf16},
    {"ConvGradWeight", DeviceKind::kCuda, DType::kBFloat16, &cuda::conv_grad_weight_bf16},
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
    PT_CUDA_F("ConvTranspose", conv_transpose),
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
    // epilogue_ops.cpp (epilogue.cu): the fused products, for the CPU's dtypes (bfloat16 operands
    // under --precision bf16, float32 out)
    PT_CUDA_FUSED("FusedMatMul", fused_matmul),
    PT_CUDA_FUSED("FusedGemm", fused_gemm),
    PT_CUDA_FUSED("FusedConv", fused_conv),
};

#undef PT_CUDA_F
#undef PT_CUDA_T
#undef PT_CUDA_FUSED

// Host fallbacks, derived from the CPU table: row I runs the CPU kernel of cpu::kCpuTable[I] on
// staged copies. Rows with a native kernel for the same (op, dtype) are left out of the table.
constexpr size_t kCpuRows = std::size(cpu::kCpuTable);

template <size_t I>
Status fallback_row(const KernelCall& call) {
  return run_on_host(cpu::kCpuTable[I].fn, call);
}
template <size_t... I>
constexpr std::array<KernelFn, kCpuRows> fallback_fns(std::index_sequence<I...>) {
  return {&fallback_row<I>...};
}
constexpr std::array<KernelFn, kCpuRows> kFallbackFns = fallback_fns(std::make_index_sequence<kCpuRows>());

bool has_native(std::string_view op, DType dtype) {
  for (const KernelEntry& e : kNative)
    if (e.dtype == dtype && op == e.op) return true;
  return false;
}

const std::vector<KernelEntry>& fallbacks() {
  static const std::vector<KernelEntry> v = [] {
    std::vector<KernelEntry> f;
    for (size_t i = 0; i < kCpuRows; ++i) {
      const KernelEntry& c = cpu::kCpuTable[i];
      if (!has_native(c.op, c.dtype)) f.push_back({c.op, DeviceKind::kCuda, c.dtype, kFallbackFns[i]});
    }
    return f;
  }();
  return v;
}

const std::vector<KernelEntry>& all() {
  static const std::vector<KernelEntry> t = [] {
    std::vector<KernelEntry> v(std::begin(kNative), std::end(kNative));
    v.insert(v.end(), fallbacks().begin(), fallbacks().end());
    return v;
  }();
  return t;
}

}  // namespace

std::span<const KernelEntry> kernel_table() { return all(); }

bool is_host_fallback(std::string_view op, DType dtype) {
  for (const KernelEntry& e : fallbacks())
    if (e.dtype == dtype && op == e.op) return true;
  return false;
}

// Every optimizer op of kNative has one (CudaKernelTable.EveryOptimizerHasAGroupKernel).
KernelGroupFn group_kernel(std::string_view op, DType dtype) {
  const bool f32 = dtype == DType::kFloat32;
  if (!f32 && dtype != DType::kFloat64) return nullptr;
  if (op == "SGDMomentum") return f32 ? &sgd_momentum_group<float> : &sgd_momentum_group<double>;
  if (op == "SGD") return f32 ? &sgd_group<float> : &sgd_group<double>;
  if (op == "Adam") return f32 ? &adam_group<float> : &adam_group<double>;
  return nullptr;
}

bool call_takes_host(std::string_view op, DType dtype, const AttrMap& attrs, std::span<const Dims> inputs,
                     std::span<const Dims> outputs) {
  if (is_host_fallback(op, dtype)) return true;
  if (op == "PadGrad") return attrs.get_string("mode", "constant") != "constant";  // pad_ops.cpp
  return conv_takes_host(op, attrs, inputs, outputs);
}

std::vector<std::string> fallback_ops() {
  std::set<std::string> s, native;
  for (const KernelEntry& e : kNative) native.insert(e.op);
  for (const KernelEntry& e : fallbacks())
    if (!native.count(e.op)) s.insert(e.op);
  return {s.begin(), s.end()};
}

}  // namespace pt::cuda
