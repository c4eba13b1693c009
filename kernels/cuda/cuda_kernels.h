// The CUDA backend as the rest of the tree sees it: its kernel table (merged into the registry by
// kernels/registry.cpp), declarations of the kernels (kernels/cuda/*.cu, templates instantiated
// for float and double) and the few device-memory helpers that tests and tools need.
// Plain C++ (no CUDA headers): included by g++-compiled code and by nvcc-compiled .cu files.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kernels/registry.h"
#include "kernels/unary_ops.h"

namespace pt::cuda {

// Every CUDA kernel of this build: {op, DeviceKind::kCuda, dtype, fn} (kernels/cuda/table.cpp):
// the native kernels, then the host fallbacks (fallback.h) for the CPU ops without one.
std::span<const KernelEntry> kernel_table();
// The multi-tensor kernel of (op, dtype) (registry.h's KernelGroupFn), or nullptr: SGDMomentum.
KernelGroupFn group_kernel(std::string_view op, DType dtype);
// True when (op, dtype) on CUDA runs the CPU kernel through the host fallback.
bool is_host_fallback(std::string_view op, DType dtype);
// is_host_fallback, or a native kernel that runs the CPU kernel for this call's attributes and
// dims (registry.h's runs_on_host with attributes): Conv, FusedConv, ConvGradInput and
// ConvGradWeight with asymmetric pads; PadGrad in reflect or edge mode.
bool call_takes_host(std::string_view op, DType dtype, const AttrMap& attrs, std::span<const Dims> inputs,
                     std::span<const Dims> outputs);
// The convolution part of it (dnn_ops.cpp): false for other ops and for calls whose dims do not fit.
bool conv_takes_host(std::string_view op, const AttrMap& attrs, std::span<const Dims> inputs,
                     std::span<const Dims> outputs);
// Ops that run on CUDA only through the host fallback (sorted).
std::vector<std::string> fallback_ops();

// Kernels: inputs and outputs are device pointers; outputs are preallocated by the caller; each
// launch goes on KernelCall::stream (a cudaStream_t; null is the default stream) and returns
// without synchronising, except where a comment says otherwise. Each has the CPU kernel's
// signature, attributes and refusals (kernels/cpu/cpu_kernels.h).
#define PT_DECLARE_CUDA_KERNEL(name) \
  template <typename T>              \
  Status name(const KernelCall& call)

// elementwise_ops.cpp (elementwise.cu): every op of kernels/unary_ops.h, fn_op and fn_grad.
#define PT_DECLARE_CUDA_UNARY(Name, fn, args, fwd, kind, bwd, fast, fast_grad) \
  PT_DECLARE_CUDA_KERNEL(fn##_op);                                             \
  PT_UNARY_IF_GRAD(kind, PT_DECLARE_CUDA_KERNEL(fn##_grad);)
PT_UNARY_OPS(PT_DECLARE_CUDA_UNARY)
#undef PT_DECLARE_CUDA_UNARY
// attention_ops.cpp (attention.cu): FusedAttention (Q, Kt, V[, mask]) -> Y, InvSum and
// FusedAttentionGrad (dY, Q, Kt, V, mask, InvSum) -> dQ, dKt, dV; cuBLAS batched GEMMs.
PT_DECLARE_CUDA_KERNEL(fused_attention);
PT_DECLARE_CUDA_KERNEL(fused_attention_grad);
// elementwise_ops.cpp (elementwise.cu, binary.cu)
PT_DECLARE_CUDA_KERNEL(add);  // also int64
PT_DECLARE_CUDA_KERNEL(sub);  // also int64
PT_DECLARE_CUDA_KERNEL(mul);  // also int64
PT_DECLARE_CUDA_KERNEL(div_op);
PT_DECLARE_CUDA_KERNEL(prelu);
PT_DECLARE_CUDA_KERNEL(prelu_grad);
PT_DECLARE_CUDA_KERNEL(sum_op);  // also int64
PT_DECLARE_CUDA_KERNEL(mean_op);
PT_DECLARE_CUDA_KERNEL(transpose);   // also int64
PT_DECLARE_CUDA_KERNEL(copy_input);  // also int64, int32, bool, uint8: cudaMemcpyAsync
// reduce_ops.cpp (reduce.cu, pool.cu)
PT_DECLARE_CUDA_KERNEL(reduce_sum);
PT_DECLARE_CUDA_KERNEL(reduce_mean);
PT_DECLARE_CUDA_KERNEL(reduce_max);
PT_DECLARE_CUDA_KERNEL(reduce_sum_to_shape);
PT_DECLARE_CUDA_KERNEL(conv_grad_bias);
PT_DECLARE_CUDA_KERNEL(global_average_pool);
PT_DECLARE_CUDA_KERNEL(global_average_pool_grad);
// gemm_ops.cpp (cuBLAS)
PT_DECLARE_CUDA_KERNEL(gemm);
PT_DECLARE_CUDA_KERNEL(matmul);
// tensor_ops.cpp (tensor.cu, binary.cu): data movement (also int64, int32, bool) and LayerNorm
PT_DECLARE_CUDA_KERNEL(slice);
PT_DECLARE_CUDA_KERNEL(slice_grad);
PT_DECLARE_CUDA_KERNEL(concat);
PT_DECLARE_CUDA_KERNEL(split);
PT_DECLARE_CUDA_KERNEL(expand);
PT_DECLARE_CUDA_KERNEL(gather);       // indices checked on the device (deferred_error.h)
PT_DECLARE_CUDA_KERNEL(gather_grad);
PT_DECLARE_CUDA_KERNEL(layer_norm);
PT_DECLARE_CUDA_KERNEL(layer_norm_grad);
PT_DECLARE_CUDA_KERNEL(group_norm);       // group_norm_ops.cpp: also InstanceNormalization
PT_DECLARE_CUDA_KERNEL(group_norm_grad);
PT_DECLARE_CUDA_KERNEL(pad);       // pad_ops.cpp (pad.cu): also int64, int32
PT_DECLARE_CUDA_KERNEL(pad_grad);  // reflect / edge modes through the host fallback
PT_DECLARE_CUDA_KERNEL(equal);    // select.cu: also int64, int32, bool; bool output
PT_DECLARE_CUDA_KERNEL(less);
PT_DECLARE_CUDA_KERNEL(greater);
Status not_op(const KernelCall& call);   // bool
Status where_op(const KernelCall& call); // bool condition; float, double, int64, int32, bool values
Status cast_op(const KernelCall& call);  // every pair the CPU's Cast has
// --precision bf16 (importer/precision.h): bfloat16 operands, float32 outputs. gemm_ops.cpp
// (cublasGemmEx, float32 accumulation) and dnn_ops.cpp (widened to float32, TF32 tensor cores).
Status gemm_bf16(const KernelCall& call);
Status matmul_bf16(const KernelCall& call);
Status conv_bf16(const KernelCall& call);
Status conv_grad_input_bf16(const KernelCall& call);
Status conv_grad_weight_bf16(const KernelCall& call);
// dnn_ops.cpp (cuDNN)
PT_DECLARE_CUDA_KERNEL(conv);
PT_DECLARE_CUDA_KERNEL(conv_grad_input);
PT_DECLARE_CUDA_KERNEL(conv_grad_weight);
PT_DECLARE_CUDA_KERNEL(conv_transpose);  // ConvGradInput + bias
PT_DECLARE_CUDA_KERNEL(softmax);
PT_DECLARE_CUDA_KERNEL(log_softmax);
PT_DECLARE_CUDA_KERNEL(softmax_grad);
PT_DECLARE_CUDA_KERNEL(log_softmax_grad);
// nn_ops.cpp (pool.cu, batchnorm.cu, dropout.cu, loss.cu, optimizer.cu)
PT_DECLARE_CUDA_KERNEL(max_pool);
PT_DECLARE_CUDA_KERNEL(max_pool_grad);
PT_DECLARE_CUDA_KERNEL(average_pool);
PT_DECLARE_CUDA_KERNEL(average_pool_grad);
PT_DECLARE_CUDA_KERNEL(batch_normalization);
PT_DECLARE_CUDA_KERNEL(batch_normalization_grad);
PT_DECLARE_CUDA_KERNEL(dropout);
PT_DECLARE_CUDA_KERNEL(dropout_grad);
// Label values checked on the device (deferred_error.h): reported at the next synchronisation.
PT_DECLARE_CUDA_KERNEL(softmax_cross_entropy_loss);
PT_DECLARE_CUDA_KERNEL(softmax_cross_entropy_loss_grad);
PT_DECLARE_CUDA_KERNEL(mse_loss);
PT_DECLARE_CUDA_KERNEL(mse_loss_grad);
PT_DECLARE_CUDA_KERNEL(sgd_momentum);
// SGDMomentum of several parameters in launches of up to kMaxGroupTensors tensors (launch.h's
// SgdGroup: the single-tensor kernel's arithmetic, element for element); calls with another
// learning rate, momentum or weight decay than the first run in a group of their own.
template <typename T>
Status sgd_momentum_group(std::span<const KernelCall> calls);
PT_DECLARE_CUDA_KERNEL(sgd);   // torch.optim.SGD (W, G, B, lr, step[, D])
PT_DECLARE_CUDA_KERNEL(adam);  // torch.optim.Adam / AdamW (W, G, M, V, lr, step)
// torch's SGD and Adam / AdamW over several parameters, as sgd_momentum_group: launches of up to
// kMaxGroupTensors tensors, one call per tensor's arithmetic and results.
template <typename T>
Status sgd_group(std::span<const KernelCall> calls);
template <typename T>
Status adam_group(std::span<const KernelCall> calls);
// resize_ops.cpp (resize.cu): Resize and ResizeGrad, the CPU's coordinate map (kernels/checks/resize_map.h).
PT_DECLARE_CUDA_KERNEL(resize);
PT_DECLARE_CUDA_KERNEL(resize_grad);

#undef PT_DECLARE_CUDA_KERNEL

// epilogue_ops.cpp (epilogue.cu): the fused products of importer/fuse_epilogue.cpp, FusedMatMul
// (A, B[, bias]), FusedGemm (A, B[, C]), FusedConv (X, W[, B]) -> Y[, Z], for float, double and
// bfloat16 operands (float32 out): the product is the op's own CUDA kernel for the operands' dtype,
// written to Z when the node keeps it and to Y otherwise, then one pass adds the bias and applies
// the activation (launch_bias_activation). Checks: kernels/checks/epilogue.h, the CPU's.
Status fused_matmul(const KernelCall& call);
Status fused_gemm(const KernelCall& call);
Status fused_conv(const KernelCall& call);

// The fused optimizer step for a parameter group, for the runtime (no registry op: the CPU
// runtime does SpecTrain's prediction in host code). For every tensor: g = G + wd*W;
// V = gamma*V + (1 - gamma)*g; W -= lr*V; and where pred is set, pred = W - s_predict*lr*V (the
// weights SpecTrain predicts for the next pass, from the updated W and V). lr_device: a T scalar
// on the device. One launch per 64 tensors. T is float or double.
struct SgdTensor {
  void* w = nullptr;
  const void* g = nullptr;
  void* v = nullptr;
  void* pred = nullptr;  // optional
  int64_t n = 0;
};
template <typename T>
Status sgd_spectrain_step(std::span<const SgdTensor> tensors, const void* lr_device, double gamma,
                          double weight_decay, double s_predict, void* stream);
// SpecTrain's prediction alone: out = w - s * lr * v (as runtime/pipeline/stage.cpp's predict).
template <typename T>
Status spectrain_predict(void* out, const void* w, const void* v, int64_t n, const void* lr_device,
                         double s, void* stream);

// Device::predict_adam on the device (kernels/device.h); step: a device int64 scalar.
template <typename T>
Status adam_predict(void* out, const void* w, const void* m, const void* v, const void* step, int64_t n,
                    const void* lr_device, double s, double beta1, double beta2, double eps, double decoupled_wd,
                    void* stream);

// "CUDA runtime 13000, driver 13000, cuBLAS 130100, cuDNN 91900" (driver 0 without one): what this
// process loaded, for reports. Needs no GPU.
std::string library_versions();

// Entries of the convolution algorithm cache (dnn_ops.cpp), for tests and reports.
size_t conv_algo_cache_size();
// One line per cached convolution: pass, dtype, shapes, the algorithm and whether it was measured.
std::vector<std::string> conv_algo_report();

// Device memory on the current device, for tests and tools (the runtime has its own allocator).
// Each returns internal_error naming the CUDA error; the copies are synchronous with the host.
Status device_alloc(void** p, size_t bytes);  // *p = nullptr on failure
Status device_free(void* p);                  // p may be null
Status copy_to_device(void* dst_device, const void* src_host, size_t bytes);
Status copy_to_host(void* dst_host, const void* src_device, size_t bytes);
// Waits for all work on the current device; reports asynchronous kernel faults.
Status device_synchronize();

}  // namespace pt::cuda
