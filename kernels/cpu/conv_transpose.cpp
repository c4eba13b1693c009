// ConvTranspose on the CPU: Conv's input gradient (ConvGradInput, with the window attributes the
// shape function normalised for the Conv that maps Y back to X) plus the bias per output channel.
#include "kernels/checks/conv.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {

template <typename T>
Status conv_transpose(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ConvTranspose", 2, 1));
  const TensorView ins[] = {call.inputs[0], call.inputs[1]};  // X (N, C, in...), W (C, M/g, k...)
  RETURN_IF_ERROR(conv_grad_input<T>(KernelCall{ins, call.outputs.first(1), call.attrs, nullptr}));
  if (!has_input(call, 2)) return Status::ok();
  const TensorView& y = call.outputs[0];  // (N, M, out...)
  const TensorView& b = call.inputs[2];   // (M)
  RETURN_IF_ERROR(kernels::check_conv_transpose_bias(y, b));
  const int64_t n = y.dims[0], m = y.dims[1], sp = n * m != 0 ? y.size() / (n * m) : 0;
  T* py = y.as<T>();
  const T* pb = b.as<T>();
#pragma omp parallel for if (y.size() > kParallelThreshold)
  for (int64_t r = 0; r < n * m; ++r)
    for (int64_t i = 0; i < sp; ++i) py[r * sp + i] += pb[r % m];
  return Status::ok();
}

template Status conv_transpose<float>(const KernelCall&);
template Status conv_transpose<double>(const KernelCall&);

}  // namespace pt::cpu
