// Host side of the element-wise unary ops of kernels/unary_ops.h, shared by the CPU kernels and
// the CUDA wrappers: reading an op's parameters from its attributes (and Clip's bound inputs), and
// the one argument check of y = f(x) and dX = g(dY, Z), so that both backends refuse alike.
#pragma once

#include <limits>
#include <string>

#include "kernels/kernel_checks.h"
#include "kernels/registry.h"
#include "kernels/unary_ops.h"

namespace pt::kernels {

// Fills `p` as `spec` says (unary_ops.h). first_bound: the index of Clip's optional min input (1
// forward, 2 for ClipGrad); its pointers are left unread (host memory on the CPU, device memory on
// CUDA). Refuses an unknown Gelu `approximate`.
template <typename T>
Status read_unary_args(const unary::ArgSpec& spec, const KernelCall& call, const char* op, size_t first_bound,
                       unary::Args<T>* p) {
  const AttrMap& m = call.attrs;
  auto value = [&](const char* name, double def) {
    return m.has(name) ? static_cast<T>(m.get_float(name, 0)) : static_cast<T>(def);
  };
  switch (spec.kind) {
    case unary::ArgSpec::kAttrs:
      if (spec.a_name) p->a = value(spec.a_name, spec.a_default);
      if (spec.b_name) p->b = value(spec.b_name, spec.b_default);
      break;
    case unary::ArgSpec::kClip:
      p->a = m.has("min") ? static_cast<T>(m.get_float("min", 0)) : std::numeric_limits<T>::lowest();
      p->b = m.has("max") ? static_cast<T>(m.get_float("max", 0)) : std::numeric_limits<T>::max();
      if (has_input(call, first_bound)) p->lo = call.inputs[first_bound].as<T>();
      if (has_input(call, first_bound + 1)) p->hi = call.inputs[first_bound + 1].as<T>();
      break;
    case unary::ArgSpec::kGelu: {
      const std::string a = m.get_string("approximate", "none");
      if (a != "none" && a != "tanh") return invalid_input(std::string(op) + ": approximate '" + a + "' (none or tanh)");
      p->a = a == "tanh" ? T(1) : T(0);
      break;
    }
  }
  return Status::ok();
}

// y = f(x) (n_in 1) or dX = g(dY, Z) (n_in 2; ClipGrad's bounds follow): at least n_in inputs and
// one output, Z and the output of input 0's dims. With `dtype` (the CUDA wrappers: a kernel
// reads every operand as T) also each operand's dtype and data, before its dims; the CPU leaves
// the dtype to the kernel (ReluGrad reads a bfloat16 Y). `suffix` follows the op in messages.
inline Status check_unary(const KernelCall& call, const char* op, size_t n_in, const char* suffix = "",
                          DType dtype = DType::kUndefined) {
  auto who = [&] { return std::string(op) + suffix; };
  if (call.inputs.size() < n_in || call.outputs.empty())
    return invalid_input(who() + ": expected at least " + std::to_string(n_in) + " inputs and 1 outputs, got " +
                         std::to_string(call.inputs.size()) + " and " + std::to_string(call.outputs.size()));
  const Dims& dims = call.inputs[0].dims;
  auto check = [&](const TensorView& t, const char* what) -> Status {
    if (dtype != DType::kUndefined) {
      if (t.dtype != dtype)
        return invalid_input(who() + ": " + what + " is " + dtype_name(t.dtype) + ", the kernel computes in " +
                             dtype_name(dtype));
      if (t.data == nullptr && t.size() != 0) return invalid_input(who() + ": " + what + " has no data");
    }
    if (t.dims != dims)
      return invalid_input(who() + ": " + what + " has dims " + dims_str(t.dims) + ", expected " + dims_str(dims));
    return Status::ok();
  };
  if (dtype != DType::kUndefined) RETURN_IF_ERROR(check(call.inputs[0], "the input"));
  if (n_in == 2) RETURN_IF_ERROR(check(call.inputs[1], "the second input"));
  return check(call.outputs[0], "output");
}

}  // namespace pt::kernels
