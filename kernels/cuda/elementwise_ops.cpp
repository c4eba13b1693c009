// Host side of the elementwise CUDA kernels: the unary ops of kernels/unary_ops.h and their
// gradients, the copy ops, the broadcasting binary ops (Add, Sub, Mul, Div, PRelu), Sum / Mean, Transpose, Expand and
// PReluGrad. Checks first (as the CPU kernels), then one or a few launches on the call's stream.
#include <cuda_runtime_api.h>

#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops_util.h"
#include "kernels/unary_args.h"

namespace pt::cuda {

namespace {

// The unary ops of kernels/unary_ops.h: the CPU kernels' parameter reading and check (with the
// dtypes the device needs), then one launch.
template <typename Op, typename T>
Status unary(const KernelCall& call, const char* op, UnaryOp u) {
  unary::Args<T> p;
  RETURN_IF_ERROR(kernels::read_unary_args<T>(Op::kArgs, call, op, 1, &p));
  RETURN_IF_ERROR(kernels::check_unary(call, op, 1, " (cuda)", dtype_of<T>()));
  const TensorView& x = call.inputs[0];
  PT_CUDA_CHECK(launch_unary<T>(u, p, call.outputs[0].as<T>(), x.as<T>(), x.size(), stream_of(call)));
  return Status::ok();
}

template <typename Op, typename T>
Status grad(const KernelCall& call, const char* op, UnaryOp u) {
  unary::Args<T> p;
  RETURN_IF_ERROR(kernels::read_unary_args<T>(Op::kArgs, call, op, 2, &p));
  if constexpr (std::is_same_v<T, float>) {
    // --precision bf16 hands ReluGrad the bfloat16 copy of Y (importer/precision.cpp), as on the CPU.
    if (u == UnaryOp::kRelu && call.inputs.size() == 2 && call.inputs[1].dtype == DType::kBFloat16) {
      RETURN_IF_ERROR(kernels::check_unary(call, "ReluGrad", 2));
      PT_CUDA_CHECK(launch_relu_grad_bf16(call.outputs[0].as<float>(), call.inputs[0].as<float>(),
                                          static_cast<const uint16_t*>(call.inputs[1].data), call.inputs[0].size(),
                                          stream_of(call)));
      return Status::ok();
    }
  }
  RETURN_IF_ERROR(kernels::check_unary(call, op, 2, " (cuda)", dtype_of<T>()));
  const TensorView& dy = call.inputs[0];
  PT_CUDA_CHECK(launch_unary_grad<T>(u, p, call.outputs[0].as<T>(), dy.as<T>(), call.inputs[1].as<T>(), dy.size(),
                                     stream_of(call)));
  return Status::ok();
}

template <typename T>
Status binary(const KernelCall& call, const char* op, BinaryOp b) {
  Dims bd;
  RETURN_IF_ERROR(kernels::check_broadcast_binary(call, op, &bd));
  const TensorView& a = call.inputs[0];
  const TensorView& bv = call.inputs[1];
  const TensorView& y = call.outputs[0];
  if (bv.dtype != dtype_of<T>())
    return unsupported(std::string(op) + " (cuda): second input of type " + dtype_name(bv.dtype));
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  Strided<2> s;
  RETURN_IF_ERROR(make_strided<2>(op, bd, {broadcast_strides(a.dims, bd), broadcast_strides(bv.dims, bd)}, &s));
  PT_CUDA_CHECK(launch_binary<T>(b, s, y.as<T>(), a.as<T>(), bv.as<T>(), n, stream_of(call)));
  return Status::ok();
}

template <typename T>
Status variadic(const KernelCall& call, const char* op, bool mean) {
  // Every check before the first launch, so a refusal leaves the output untouched.
  size_t count = 0;
  RETURN_IF_ERROR(kernels::check_variadic(call, op, &count));
  const TensorView& y = call.outputs[0];
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  // An input aliasing the output must be read before the output is overwritten: such a call is
  // rare (the executor does not alias Sum's operands); refuse it rather than compute garbage.
  bool first = true;
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    const TensorView& x = call.inputs[k];
    if (!x.data) continue;
    if (x.data == y.data && !first)
      return unsupported(std::string(op) + " (cuda): input " + std::to_string(k) + " aliases the output");
    Strided<1> s;
    RETURN_IF_ERROR(make_strided<1>(op, y.dims, {broadcast_strides(x.dims, y.dims)}, &s));
    if (first) {
      if (x.data != y.data)
        PT_CUDA_CHECK(launch_gather_copy<T>(s, y.as<T>(), x.as<T>(), n, 1.0, stream_of(call)));
      first = false;
    } else {
      PT_CUDA_CHECK(launch_accumulate<T>(s, y.as<T>(), x.as<T>(), n, stream_of(call)));
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (mean && count > 1)
      PT_CUDA_CHECK(launch_scale<T>(y.as<T>(), n, static_cast<double>(T(1) / static_cast<T>(count)), stream_of(call)));
  }
  return Status::ok();
}

}  // namespace

template <typename T>
Status copy_input(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_copy(call));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const T* px = x.as<T>();
  T* py = y.as<T>();
  if (px != py && x.size() > 0)
    PT_CUDA_CHECK(cudaMemcpyAsync(py, px, static_cast<size_t>(x.size()) * sizeof(T), cudaMemcpyDeviceToDevice,
                                  stream_of(call)));
  return Status::ok();
}

#define PT_CUDA_UNARY(Name, fn, args, fwd, kind, bwd, fast, fast_grad)                          \
  template <typename T>                                                                       \
  Status fn##_op(const KernelCall& c) {                                                       \
    return unary<unary::Name##Op, T>(c, #Name, UnaryOp::k##Name);                             \
  }                                                                                           \
  template Status fn##_op<float>(const KernelCall&);                                          \
  template Status fn##_op<double>(const KernelCall&);                                         \
  PT_UNARY_IF_GRAD(kind, template <typename T> Status fn##_grad(const KernelCall& c) {        \
    return grad<unary::Name##Op, T>(c, #Name "Grad", UnaryOp::k##Name);                       \
  } template Status fn##_grad<float>(const KernelCall&);                                      \
  template Status fn##_grad<double>(const KernelCall&);)
PT_UNARY_OPS(PT_CUDA_UNARY)
#undef PT_CUDA_UNARY

template <typename T> Status add(const KernelCall& c) { return binary<T>(c, "Add", BinaryOp::kAdd); }
template <typename T> Status sub(const KernelCall& c) { return binary<T>(c, "Sub", BinaryOp::kSub); }
template <typename T> Status mul(const KernelCall& c) { return binary<T>(c, "Mul", BinaryOp::kMul); }
template <typename T> Status div_op(const KernelCall& c) { return binary<T>(c, "Div", BinaryOp::kDiv); }
template <typename T> Status prelu(const KernelCall& c) { return binary<T>(c, "PRelu", BinaryOp::kPRelu); }
template <typename T> Status sum_op(const KernelCall& c) { return variadic<T>(c, "Sum", false); }
template <typename T> Status mean_op(const KernelCall& c) { return variadic<T>(c, "Mean", true); }

// Transpose (attr perm, default reversed dims): y[i] = x[permuted offset of i].
template <typename T>
Status transpose(const KernelCall& call) {
  std::vector<int64_t> perm;
  RETURN_IF_ERROR(kernels::check_transpose(call, &perm));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const size_t r = x.dims.size();
  Dims od(r), st(r);
  const Dims xs = row_major_strides(x.dims);
  for (size_t i = 0; i < r; ++i) {
    od[i] = x.dims[perm[i]];
    st[i] = xs[perm[i]];
  }
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  Strided<1> s;
  RETURN_IF_ERROR(make_strided<1>("Transpose", od, {st}, &s));
  PT_CUDA_CHECK(launch_gather_copy<T>(s, y.as<T>(), x.as<T>(), n, 1.0, stream_of(call)));
  return Status::ok();
}

// PReluGrad (dY, X, slope) -> dX, dSlope unreduced (dY's dims), as the CPU kernel.
template <typename T>
Status prelu_grad(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_prelu_grad(call));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const TensorView& s = call.inputs[2];
  const int64_t n = dy.size();
  if (n == 0) return Status::ok();
  Strided<1> walk;
  RETURN_IF_ERROR(make_strided<1>("PReluGrad", dy.dims, {broadcast_strides(s.dims, dy.dims)}, &walk));
  PT_CUDA_CHECK(launch_prelu_grad<T>(walk, call.outputs[0].as<T>(), call.outputs[1].as<T>(), dy.as<T>(), x.as<T>(),
                                     s.as<T>(), n, stream_of(call)));
  return Status::ok();
}

#define PT_F(name)                                  \
  template Status name<float>(const KernelCall&);   \
  template Status name<double>(const KernelCall&);
PT_F(add) PT_F(sub) PT_F(mul) PT_F(div_op) PT_F(prelu) PT_F(sum_op) PT_F(mean_op) PT_F(transpose) PT_F(prelu_grad)
PT_F(copy_input)
#undef PT_F
template Status add<int64_t>(const KernelCall&);
template Status sub<int64_t>(const KernelCall&);
template Status mul<int64_t>(const KernelCall&);
template Status sum_op<int64_t>(const KernelCall&);
template Status transpose<int64_t>(const KernelCall&);
template Status copy_input<int64_t>(const KernelCall&);
template Status copy_input<int32_t>(const KernelCall&);
template Status copy_input<bool>(const KernelCall&);
template Status copy_input<uint8_t>(const KernelCall&);

}  // namespace pt::cuda
