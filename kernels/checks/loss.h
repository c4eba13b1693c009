// The argument checks of the loss ops (SoftmaxCrossEntropyLoss, MSELoss and their backward ops),
// shared by kernels/cpu/loss.cpp and the CUDA wrappers in kernels/cuda/nn_ops.cpp: one definition,
// so both backends refuse the same calls with the same messages.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// The `reduction` attribute. The values are the ones kernels/cuda/loss.cu takes.
enum class LossReduction : int { kMean = 0, kSum = 1, kNone = 2 };

// mean (the default), sum, and none where the op has it.
inline Status parse_loss_reduction(const KernelCall& call, const char* op, bool allow_none, LossReduction* r) {
  const std::string s = call.attrs.get_string("reduction", "mean");
  if (s == "mean")
    *r = LossReduction::kMean;
  else if (s == "sum")
    *r = LossReduction::kSum;
  else if (s == "none" && allow_none)
    *r = LossReduction::kNone;
  else
    return invalid_input(std::string(op) + ": unsupported reduction '" + s + "' (expected mean, sum" +
                         (allow_none ? ", none)" : ")"));
  return Status::ok();
}

// ---- SoftmaxCrossEntropyLoss (scores [N, C, d...], labels [N, d...][, weights [C]]) ----

// A cross-entropy call's scores viewed as [N, C, D], and its ignore_index.
struct SceGeometry {
  int64_t n = 0, c = 0, d = 1;
  bool has_ignore = false;
  int64_t ignore = 0;
};

// SoftmaxCrossEntropyLoss (scores, labels[, weights]) -> loss[, log_prob], scores at input 0, and
// SoftmaxCrossEntropyLossGrad (dLoss, log_prob, labels[, weights]) -> dScores, log_prob at input 1:
// the reduction, scores of rank >= 2, labels (int64 or int32) of the scores' dims without C, the
// weights (when present) [C]. The label values (check_sce_labels) and the outputs
// (check_sce_loss_outputs, check_sce_loss_grad_outputs) come after.
inline Status check_sce(const KernelCall& call, const char* op, size_t scores_at, LossReduction* red, SceGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, op, scores_at + 2, 1));
  RETURN_IF_ERROR(parse_loss_reduction(call, op, true, red));
  const TensorView& scores = call.inputs[scores_at];
  const TensorView& labels = call.inputs[scores_at + 1];
  if (scores.rank() < 2)
    return invalid_input(std::string(op) + ": scores " + dims_str(scores.dims) + " must have rank >= 2 ([N, C, d...])");
  Dims want(scores.dims);
  want.erase(want.begin() + 1);
  RETURN_IF_ERROR(check_same_dims(op, "labels", labels.dims, want));
  if (labels.dtype != DType::kInt64 && labels.dtype != DType::kInt32)
    return invalid_input(std::string(op) + ": labels must be int64 or int32, got " + dtype_name(labels.dtype));
  *g = SceGeometry{};
  g->n = scores.dims[0];
  g->c = scores.dims[1];
  for (int k = 2; k < scores.rank(); ++k) g->d *= scores.dims[k];
  if (has_input(call, scores_at + 2))
    RETURN_IF_ERROR(check_same_dims(op, "weights", call.inputs[scores_at + 2].dims, Dims{g->c}));
  g->has_ignore = call.attrs.has("ignore_index");
  g->ignore = call.attrs.get_int("ignore_index", 0);
  return Status::ok();
}

// The `count` labels at `labels` (host memory of `dtype`, int64 or int32): each in [0, C) unless it
// is ignore_index. `classes`, when given, receives each label's class, -1 for an ignored one.
inline Status check_sce_labels(const char* op, const void* labels, DType dtype, int64_t count, const SceGeometry& g,
                               int64_t* classes) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t l = dtype == DType::kInt64 ? static_cast<const int64_t*>(labels)[i] : static_cast<const int32_t*>(labels)[i];
    const bool ignored = g.has_ignore && l == g.ignore;
    if (!ignored && (l < 0 || l >= g.c))
      return invalid_input(std::string(op) + ": label " + std::to_string(l) + " at index " + std::to_string(i) +
                           " is outside [0, " + std::to_string(g.c) + ")");
    if (classes) classes[i] = ignored ? -1 : l;
  }
  return Status::ok();
}

// SoftmaxCrossEntropyLoss's loss (the labels' dims for reduction none, else a scalar) and log_prob
// (the scores' dims) when present.
inline Status check_sce_loss_outputs(const KernelCall& call, LossReduction red) {
  const char* op = "SoftmaxCrossEntropyLoss";
  const TensorView& loss = call.outputs[0];
  if (red == LossReduction::kNone) {
    RETURN_IF_ERROR(check_same_dims(op, "loss", loss.dims, call.inputs[1].dims));
  } else if (loss.size() != 1) {
    return invalid_input(std::string(op) + ": loss output " + dims_str(loss.dims) + " must be a scalar for reduction mean/sum");
  }
  if (call.outputs.size() > 1 && call.outputs[1].data)
    RETURN_IF_ERROR(check_same_dims(op, "log_prob", call.outputs[1].dims, call.inputs[0].dims));
  return Status::ok();
}

// SoftmaxCrossEntropyLossGrad's dScores of log_prob's dims, and dLoss: the labels' dims for
// reduction none, else a scalar.
inline Status check_sce_loss_grad_outputs(const KernelCall& call, LossReduction red) {
  const char* op = "SoftmaxCrossEntropyLossGrad";
  const TensorView& dloss = call.inputs[0];
  RETURN_IF_ERROR(check_same_dims(op, "output", call.outputs[0].dims, call.inputs[1].dims));
  if (red == LossReduction::kNone) {
    RETURN_IF_ERROR(check_same_dims(op, "dLoss", dloss.dims, call.inputs[2].dims));
  } else if (dloss.size() != 1) {
    return invalid_input(std::string(op) + ": dLoss " + dims_str(dloss.dims) + " must be a scalar for reduction mean/sum");
  }
  return Status::ok();
}

// ---- MSELoss ----

// MSELoss (pred, target) -> loss: reduction mean or sum, target of pred's dims, a scalar loss.
inline Status check_mse_loss(const KernelCall& call, LossReduction* red) {
  const char* op = "MSELoss";
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  RETURN_IF_ERROR(parse_loss_reduction(call, op, false, red));
  RETURN_IF_ERROR(check_same_dims(op, "target", call.inputs[1].dims, call.inputs[0].dims));
  if (call.outputs[0].size() != 1)
    return invalid_input(std::string(op) + ": loss output " + dims_str(call.outputs[0].dims) + " must be a scalar");
  return Status::ok();
}

// MSELossGrad (dLoss, pred, target) -> dPred: a scalar dLoss, target and dPred of pred's dims.
inline Status check_mse_loss_grad(const KernelCall& call, LossReduction* red) {
  const char* op = "MSELossGrad";
  RETURN_IF_ERROR(check_arity(call, op, 3, 1));
  RETURN_IF_ERROR(parse_loss_reduction(call, op, false, red));
  const TensorView& dloss = call.inputs[0];
  const TensorView& pred = call.inputs[1];
  if (dloss.size() != 1) return invalid_input(std::string(op) + ": dLoss " + dims_str(dloss.dims) + " must be a scalar");
  RETURN_IF_ERROR(check_same_dims(op, "target", call.inputs[2].dims, pred.dims));
  return check_same_dims(op, "output", call.outputs[0].dims, pred.dims);
}

}  // namespace pt::kernels
