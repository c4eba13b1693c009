// The argument checks of the optimizer-step ops (SGDMomentum, SGD, Adam), shared by
// kernels/cpu/optimizer.cpp and the CUDA wrappers in kernels/cuda/nn_ops.cpp: one definition, so
// both backends refuse the same calls with the same messages.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// The learning rate every update node reads: a scalar the runtime sets each step.
inline Status check_lr(const char* op, const TensorView& lr) {
  if (lr.size() != 1 || !lr.data) return invalid_input(std::string(op) + ": lr " + dims_str(lr.dims) + " must be a scalar");
  return Status::ok();
}

// The count of updates done (SGD, Adam), incremented by the step.
inline Status check_step(const char* op, const TensorView& step) {
  if (step.dtype != DType::kInt64 || step.size() != 1 || !step.data)
    return invalid_input(std::string(op) + ": step must be an int64 scalar (" + dtype_name(step.dtype) + " " +
                         dims_str(step.dims) + ")");
  return Status::ok();
}

// An update of `n_in` inputs (W first): the state inputs `like_w` ({input, name}) of W's dims, the
// learning rate at input lr_at, the step count at input step_at (none when negative).
inline Status check_update(const KernelCall& call, const char* op, size_t n_in,
                           std::initializer_list<std::pair<size_t, const char*>> like_w, size_t lr_at, int step_at) {
  RETURN_IF_ERROR(check_arity(call, op, n_in, 0));
  for (const auto& [i, name] : like_w) RETURN_IF_ERROR(check_same_dims(op, name, call.inputs[i].dims, call.inputs[0].dims));
  RETURN_IF_ERROR(check_lr(op, call.inputs[lr_at]));
  return step_at < 0 ? Status::ok() : check_step(op, call.inputs[step_at]);
}

// SGDMomentum (W, G, V, lr).
inline Status check_sgd_momentum(const KernelCall& call) {
  return check_update(call, "SGDMomentum", 4, {{1, "G"}, {2, "V"}}, 3, -1);
}

// SGD (W, G, B, lr, step[, D]); D with attribute nesterov (*nesterov).
inline Status check_sgd(const KernelCall& call, bool* nesterov) {
  *nesterov = call.attrs.get_int("nesterov", 0) != 0;
  if (*nesterov) return check_update(call, "SGD", 6, {{1, "G"}, {2, "B"}, {5, "D"}}, 3, 4);
  return check_update(call, "SGD", 5, {{1, "G"}, {2, "B"}}, 3, 4);
}

// Adam (W, G, M, V, lr, step).
inline Status check_adam(const KernelCall& call) { return check_update(call, "Adam", 6, {{1, "G"}, {2, "M"}, {3, "V"}}, 4, 5); }

}  // namespace pt::kernels
