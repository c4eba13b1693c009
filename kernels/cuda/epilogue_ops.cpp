// FusedMatMul, FusedGemm and FusedConv on CUDA (declared in cuda_kernels.h).
#include "kernels/cuda/cuda_kernels.h"

#include <string>

#include "kernels/checks/epilogue.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {
namespace {

// The launcher's activation codes.
static_assert(static_cast<int>(kernels::EpilogueAct::kNone) == 0 && static_cast<int>(kernels::EpilogueAct::kRelu) == 1 &&
              static_cast<int>(kernels::EpilogueAct::kGelu) == 2);

Status fused_product(const KernelCall& call, const char* op, const char* product, bool bias_input) {
  kernels::FusedProduct f;
  RETURN_IF_ERROR(kernels::check_fused_product(call, op, bias_input, &f));
  const DType operands = call.inputs[0].dtype;
  const KernelFn fn = find_kernel(product, DeviceKind::kCuda, operands);
  if (!fn) return unsupported(std::string(op) + ": no " + product + " kernel for " + dtype_name(operands) + " operands");
  const TensorView out[1] = {*f.z};
  KernelCall inner{call.inputs.subspan(0, f.product_inputs), out, call.attrs, call.stream};
  inner.tf32 = call.tf32;
  RETURN_IF_ERROR(fn(inner));
  const TensorView& y = call.outputs[0];
  const int act = static_cast<int>(f.act);
  if (y.dtype == DType::kFloat64)
    PT_CUDA_CHECK(launch_bias_activation<double>(y.as<double>(), f.z->as<double>(), f.bias ? f.bias->as<double>() : nullptr,
                                                 f.cols, y.size(), act, stream_of(call)));
  else
    PT_CUDA_CHECK(launch_bias_activation<float>(y.as<float>(), f.z->as<float>(), f.bias ? f.bias->as<float>() : nullptr,
                                                f.cols, y.size(), act, stream_of(call)));
  return Status::ok();
}

}  // namespace

Status fused_matmul(const KernelCall& call) { return fused_product(call, "FusedMatMul", "MatMul", true); }
Status fused_gemm(const KernelCall& call) { return fused_product(call, "FusedGemm", "Gemm", false); }
Status fused_conv(const KernelCall& call) { return fused_product(call, "FusedConv", "Conv", false); }

}  // namespace pt::cuda
