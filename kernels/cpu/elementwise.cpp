// The copy ops (Identity, Reshape, Flatten, Squeeze, Unsqueeze) whose output dims the caller has
// already set. The unary activations and math are generated from kernels/unary_ops.h (unary.cpp).
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {

template <typename T>
Status copy_input(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_copy(call));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const T* px = x.as<T>();
  T* py = y.as<T>();
  if (px != py && x.size() > 0) std::memcpy(py, px, static_cast<size_t>(x.size()) * sizeof(T));
  return Status::ok();
}

#define PT_INSTANTIATE(name)                                   \
  template Status name<float>(const KernelCall& call);          \
  template Status name<double>(const KernelCall& call)

PT_INSTANTIATE(copy_input);
template Status copy_input<int64_t>(const KernelCall& call);
template Status copy_input<int32_t>(const KernelCall& call);
template Status copy_input<bool>(const KernelCall& call);
template Status copy_input<uint8_t>(const KernelCall& call);

#undef PT_INSTANTIATE

}  // namespace pt::cpu
