// Host side of the elementwise CUDA kernels: unary ops and their gradients, the copy ops, the
// broadcasting binary ops (Add, Sub, Mul, Div, PRelu), Sum / Mean, Transpose, Expand and
// PReluGrad. Checks first (as the CPU kernels), then one or a few launches on the call's stream.
#include <cuda_runtime_api.h>

#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

namespace {

constexpr double kSeluAlpha = 1.67326319217681884765625;
constexpr double kSeluGamma = 1.05070102214813232421875;

template <typename T>
Status unary(const KernelCall& call, const char* op, UnaryOp u, UnaryParams p = {}) {
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims(op, "output", y.dims, x.dims));
  PT_CUDA_CHECK(launch_unary<T>(u, p, y.as<T>(), x.as<T>(), x.size(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status grad(const KernelCall& call, const char* op, GradOp g, UnaryParams p = {}) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& z = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims(op, "the second input", z.dims, dy.dims));
  RETURN_IF_ERROR(check_same_dims(op, "output", dx.dims, dy.dims));
  PT_CUDA_CHECK(launch_unary_grad<T>(g, p, dx.as<T>(), dy.as<T>(), z.as<T>(), dy.size(), stream_of(call)));
  return Status::ok();
}

// Clip's bounds: the attributes (opset < 11), overridden by the optional bound inputs, which stay
// on the device and are read by the kernel.
template <typename T>
UnaryParams clip_params(const KernelCall& call, size_t first) {
  UnaryParams p;
  p.a = call.attrs.has("min") ? static_cast<double>(static_cast<T>(call.attrs.get_float("min", 0)))
                              : static_cast<double>(std::numeric_limits<T>::lowest());
  p.b = call.attrs.has("max") ? static_cast<double>(static_cast<T>(call.attrs.get_float("max", 0)))
                              : static_cast<double>(std::numeric_limits<T>::max());
  if (has_input(call, first)) p.lo = call.inputs[first].as<T>();
  if (has_input(call, first + 1)) p.hi = call.inputs[first + 1].as<T>();
  return p;
}

UnaryParams selu_params(const KernelCall& call) {
  UnaryParams p;
  p.a = call.attrs.has("alpha") ? static_cast<double>(call.attrs.get_float("alpha", 0)) : kSeluAlpha;
  p.b = call.attrs.has("gamma") ? static_cast<double>(call.attrs.get_float("gamma", 0)) : kSeluGamma;
  return p;
}

template <typename T>
UnaryParams selu_params_t(const KernelCall& call) {
  UnaryParams p = selu_params(call);  // rounded to T as the CPU's static_cast<T>
  p.a = static_cast<double>(static_cast<T>(p.a));
  p.b = static_cast<double>(static_cast<T>(p.b));
  return p;
}

template <typename T>
UnaryParams attr_params(const KernelCall& call, const char* a, float da, const char* b = nullptr, float db = 0) {
  UnaryParams p;
  p.a = static_cast<double>(static_cast<T>(call.attrs.get_float(a, da)));
  if (b) p.b = static_cast<double>(static_cast<T>(call.attrs.get_float(b, db)));
  return p;
}

template <typename T>
Status binary(const KernelCall& call, const char* op, BinaryOp b) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const TensorView& a = call.inputs[0];
  const TensorView& bv = call.inputs[1];
  const TensorView& y = call.outputs[0];
  Dims bd;
  if (!broadcast_dims(a.dims, bv.dims, &bd))
    return invalid_input(std::string(op) + ": shapes " + dims_str(a.dims) + " and " + dims_str(bv.dims) +
                         " do not broadcast");
  RETURN_IF_ERROR(check_same_dims(op, "output", y.dims, bd));
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
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  const TensorView& y = call.outputs[0];
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  // Every check before the first launch, so a refusal leaves the output untouched.
  size_t count = 0;
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    const TensorView& x = call.inputs[k];
    if (!x.data) continue;
    Dims bd;
    if (!broadcast_dims(x.dims, y.dims, &bd) || bd != y.dims)
      return invalid_input(std::string(op) + ": input " + std::to_string(k) + " " + dims_str(x.dims) +
                           " does not broadcast to the output " + dims_str(y.dims));
    ++count;
  }
  if (count == 0) return invalid_input(std::string(op) + ": no inputs");
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
  RETURN_IF_ERROR(check_arity(call, "Identity/Reshape/Flatten", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  if (x.size() != y.size())
    return invalid_input("Identity/Reshape/Flatten: input " + dims_str(x.dims) + " and output " + dims_str(y.dims) +
                         " differ in element count");
  const T* px = x.as<T>();
  T* py = y.as<T>();
  if (px != py && x.size() > 0)
    PT_CUDA_CHECK(cudaMemcpyAsync(py, px, static_cast<size_t>(x.size()) * sizeof(T), cudaMemcpyDeviceToDevice,
                                  stream_of(call)));
  return Status::ok();
}

template <typename T> Status sigmoid(const KernelCall& c) { return unary<T>(c, "Sigmoid", UnaryOp::kSigmoid); }
template <typename T> Status tanh_op(const KernelCall& c) { return unary<T>(c, "Tanh", UnaryOp::kTanh); }
template <typename T> Status neg(const KernelCall& c) { return unary<T>(c, "Neg", UnaryOp::kNeg); }
template <typename T> Status exp_op(const KernelCall& c) { return unary<T>(c, "Exp", UnaryOp::kExp); }
template <typename T> Status log_op(const KernelCall& c) { return unary<T>(c, "Log", UnaryOp::kLog); }
template <typename T> Status sqrt_op(const KernelCall& c) { return unary<T>(c, "Sqrt", UnaryOp::kSqrt); }
template <typename T> Status erf_op(const KernelCall& c) { return unary<T>(c, "Erf", UnaryOp::kErf); }
template <typename T> Status softplus_op(const KernelCall& c) { return unary<T>(c, "Softplus", UnaryOp::kSoftplus); }
template <typename T> Status reciprocal(const KernelCall& c) { return unary<T>(c, "Reciprocal", UnaryOp::kReciprocal); }
template <typename T> Status abs_op(const KernelCall& c) { return unary<T>(c, "Abs", UnaryOp::kAbs); }
template <typename T> Status hard_swish(const KernelCall& c) { return unary<T>(c, "HardSwish", UnaryOp::kHardSwish); }
template <typename T>
Status clip(const KernelCall& c) {
  return unary<T>(c, "Clip", UnaryOp::kClip, clip_params<T>(c, 1));
}
template <typename T>
Status leaky_relu(const KernelCall& c) {
  return unary<T>(c, "LeakyRelu", UnaryOp::kLeakyRelu, attr_params<T>(c, "alpha", 0.01f));
}
template <typename T>
Status elu(const KernelCall& c) {
  return unary<T>(c, "Elu", UnaryOp::kElu, attr_params<T>(c, "alpha", 1.0f));
}
template <typename T>
Status selu(const KernelCall& c) {
  return unary<T>(c, "Selu", UnaryOp::kSelu, selu_params_t<T>(c));
}
template <typename T>
Status hard_sigmoid(const KernelCall& c) {
  return unary<T>(c, "HardSigmoid", UnaryOp::kHardSigmoid, attr_params<T>(c, "alpha", 0.2f, "beta", 0.5f));
}

template <typename T> Status sigmoid_grad(const KernelCall& c) { return grad<T>(c, "SigmoidGrad", GradOp::kSigmoid); }
template <typename T> Status tanh_grad(const KernelCall& c) { return grad<T>(c, "TanhGrad", GradOp::kTanh); }
template <typename T> Status hard_swish_grad(const KernelCall& c) { return grad<T>(c, "HardSwishGrad", GradOp::kHardSwish); }
template <typename T> Status erf_grad(const KernelCall& c) { return grad<T>(c, "ErfGrad", GradOp::kErf); }
template <typename T> Status softplus_grad(const KernelCall& c) { return grad<T>(c, "SoftplusGrad", GradOp::kSoftplus); }
template <typename T> Status abs_grad(const KernelCall& c) { return grad<T>(c, "AbsGrad", GradOp::kAbs); }
template <typename T>
Status clip_grad(const KernelCall& c) {
  return grad<T>(c, "ClipGrad", GradOp::kClip, clip_params<T>(c, 2));
}
template <typename T>
Status leaky_relu_grad(const KernelCall& c) {
  return grad<T>(c, "LeakyReluGrad", GradOp::kLeakyRelu, attr_params<T>(c, "alpha", 0.01f));
}
template <typename T>
Status elu_grad(const KernelCall& c) {
  return grad<T>(c, "EluGrad", GradOp::kElu, attr_params<T>(c, "alpha", 1.0f));
}
template <typename T>
Status selu_grad(const KernelCall& c) {
  return grad<T>(c, "SeluGrad", GradOp::kSelu, selu_params_t<T>(c));
}
template <typename T>
Status hard_sigmoid_grad(const KernelCall& c) {
  return grad<T>(c, "HardSigmoidGrad", GradOp::kHardSigmoid, attr_params<T>(c, "alpha", 0.2f, "beta", 0.5f));
}

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
  RETURN_IF_ERROR(check_arity(call, "Transpose", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const size_t r = x.dims.size();
  std::vector<int64_t> perm = call.attrs.get_ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
  std::vector<bool> seen(r, false);
  bool ok = perm.size() == r;
  for (size_t i = 0; ok && i < r; ++i) {
    ok = perm[i] >= 0 && perm[i] < static_cast<int64_t>(r) && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok) return invalid_input("Transpose: perm is not a permutation of the " + std::to_string(r) + " input dims");
  Dims od(r), st(r);
  const Dims xs = row_major_strides(x.dims);
  for (size_t i = 0; i < r; ++i) {
    od[i] = x.dims[perm[i]];
    st[i] = xs[perm[i]];
  }
  RETURN_IF_ERROR(check_same_dims("Transpose", "output", y.dims, od));
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
  RETURN_IF_ERROR(check_arity(call, "PReluGrad", 3, 2));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const TensorView& s = call.inputs[2];
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "X", x.dims, dy.dims));
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "dX", call.outputs[0].dims, dy.dims));
  RETURN_IF_ERROR(check_same_dims("PReluGrad", "dSlope", call.outputs[1].dims, dy.dims));
  Dims bd;
  if (!broadcast_dims(s.dims, dy.dims, &bd) || bd != dy.dims)
    return invalid_input("PReluGrad: slope " + dims_str(s.dims) + " does not broadcast to " + dims_str(dy.dims));
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
PT_F(sigmoid) PT_F(tanh_op) PT_F(neg) PT_F(exp_op) PT_F(log_op) PT_F(sqrt_op) PT_F(erf_op) PT_F(softplus_op)
PT_F(reciprocal) PT_F(abs_op) PT_F(hard_swish) PT_F(clip) PT_F(leaky_relu) PT_F(elu) PT_F(selu) PT_F(hard_sigmoid)
PT_F(sigmoid_grad) PT_F(tanh_grad) PT_F(hard_swish_grad) PT_F(erf_grad) PT_F(softplus_grad) PT_F(abs_grad)
PT_F(clip_grad) PT_F(leaky_relu_grad) PT_F(elu_grad) PT_F(selu_grad) PT_F(hard_sigmoid_grad)
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
