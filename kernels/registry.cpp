// The kernel table: every (op, device, dtype) this build can run, in one explicit list.
#include "kernels/registry.h"

#include <algorithm>
#include <set>

#include "kernels/cpu/cpu_kernels.h"
#ifdef PIPETRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace pt {

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
    PT_CPU_F("SigmoidGrad", sigmoid_grad),
    PT_CPU_F("TanhGrad", tanh_grad),
    PT_CPU_F("SoftmaxGrad", softmax_grad),
    PT_CPU_F("LogSoftmaxGrad", log_softmax_grad),
    PT_CPU_F("ReduceSumToShape", reduce_sum_to_shape),
    PT_CPU_F("SoftmaxCrossEntropyLossGrad", softmax_cross_entropy_loss_grad),
    PT_CPU_F("MSELossGrad", mse_loss_grad),
    // Optimizer steps
    PT_CPU_F("SGDMomentum", sgd_momentum),
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
std::string cuda_unavailable_reason() { return "this build has no CUDA backend (PIPETRAIN_CUDA=OFF or no nvcc)"; }
#endif

}  // namespace pt
