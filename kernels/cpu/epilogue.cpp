// The fused products of importer/fuse_epilogue.cpp: FusedMatMul (A, B[, bias]), FusedGemm (A, B[, C])
// and FusedConv (X, W[, B]) -> Y[, Z], attribute activation ("none", "Relu", "Gelu") beside the
// product's own. The product runs as the op's own kernel for the operands' dtype (float, double, or
// bfloat16 operands under --precision bf16, float32 out), writing Z when the node outputs it (a Gelu
// epilogue: GeluGrad reads it) and Y otherwise; then one parallel pass over blocks of whole rows adds
// the bias and applies the activation, in place: one read and one write of the output where the
// separate ops made one each and a buffer each. The arithmetic is the
// separate ops' (the Add kernel's a + b, the Relu kernel's x > 0 ? x : 0, the Gelu kernel's
// vectorised map), so a fused graph computes the same bits as the unfused one.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/checks/epilogue.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/vmath.h"

namespace pt::cpu {
namespace {

using Act = kernels::EpilogueAct;

// y[0, n) = act(z[0, n) + bias[i % cols]) over whole rows of `cols` (bias may be null; y may be z).
template <typename T>
void epilogue_block(Act act, T* z, const T* bias, int64_t cols, int64_t n, T* y) {
  if (bias && act != Act::kGelu) {  // one pass: the sum is only read by the activation
    for (int64_t r = 0; r < n; r += cols) {
      T* zr = z + r;
      T* yr = y + r;
      if (act == Act::kRelu) {
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) {
          const T s = zr[j] + bias[j];
          yr[j] = s > T(0) ? s : T(0);
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) yr[j] = zr[j] + bias[j];
      }
    }
    return;
  }
  if (bias)  // Gelu: Z (the sum) is kept for GeluGrad
    for (int64_t r = 0; r < n; r += cols) {
      T* zr = z + r;
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) zr[j] = zr[j] + bias[j];
    }
  switch (act) {
    case Act::kNone:
      if (y != z) std::copy(z, z + n, y);
      break;
    case Act::kRelu:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = z[i] > T(0) ? z[i] : T(0);
      break;
    case Act::kGelu:
      if constexpr (std::is_same_v<T, float>) {
        vmap(VFn::kGelu, z, nullptr, y, n);  // n <= kParallelThreshold: on this thread
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = gelu_exact(z[i]);
      }
      break;
  }
}

template <typename T>
void run_epilogue(Act act, T* z, const T* bias, int64_t cols, int64_t total, T* y) {
  if (!bias && act == Act::kNone && y == z) return;
  // Blocks of about 4096 elements (16 KiB of float, within a core's L1), whole rows when there is a
  // bias (its index restarts at a block's first row); a block runs on one thread (vmap's serial path).
  constexpr int64_t kBlock = 4096;
  static_assert(kBlock <= kParallelThreshold);
  const int64_t block = bias ? std::max<int64_t>(1, kBlock / std::max<int64_t>(cols, 1)) * std::max<int64_t>(cols, 1) : kBlock;
  const int64_t blocks = (total + block - 1) / block;
#pragma omp parallel for schedule(static) if (parallel: total > kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * block, n = std::min(block, total - lo);
    epilogue_block(act, z + lo, bias, cols, n, y + lo);
  }
}

Status fused_product(const KernelCall& call, const char* op, const char* product, bool bias_input) {
  kernels::FusedProduct f;
  RETURN_IF_ERROR(kernels::check_fused_product(call, op, bias_input, &f));
  const TensorView& y = call.outputs[0];
  const TensorView& z = *f.z;
  const TensorView* bias = f.bias;
  const KernelFn fn = find_kernel(product, DeviceKind::kCpu, call.inputs[0].dtype);
  if (!fn)
    return unsupported(std::string(op) + ": no " + product + " kernel for " + dtype_name(call.inputs[0].dtype) + " operands");
  const size_t product_inputs = f.product_inputs;
  const TensorView out[1] = {z};
  KernelCall inner{call.inputs.subspan(0, product_inputs), out, call.attrs, call.stream, call.weight_cache,
                   call.versions.size() > product_inputs ? call.versions.subspan(0, product_inputs) : call.versions};
  RETURN_IF_ERROR(fn(inner));
  if (y.dtype == DType::kFloat32)
    run_epilogue<float>(f.act, z.as<float>(), bias ? bias->as<float>() : nullptr, f.cols, y.size(), y.as<float>());
  else
    run_epilogue<double>(f.act, z.as<double>(), bias ? bias->as<double>() : nullptr, f.cols, y.size(), y.as<double>());
  return Status::ok();
}

}  // namespace

Status fused_matmul(const KernelCall& call) { return fused_product(call, "FusedMatMul", "MatMul", true); }
Status fused_gemm(const KernelCall& call) { return fused_product(call, "FusedGemm", "Gemm", false); }
Status fused_conv(const KernelCall& call) { return fused_product(call, "FusedConv", "Conv", false); }

}  // namespace pt::cpu
