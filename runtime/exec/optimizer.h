// The runtime's side of the optimizers (importer/training.h builds their update nodes): SpecTrain's
// weight prediction for each optimizer, and the one-line description checkpoints compare.
#pragma once

#include <string>
#include <vector>

#include "importer/ir.h"
#include "runtime/exec/executor.h"

namespace pt {

// SpecTrain's prediction of the weights s updates ahead, from the master weights `master` and the
// optimizer state of `update` (a kUpdate node) in `ex`, written to `out` (on ex's device and stream):
//   SGDMomentum (sgd-paper): out = W - s*lr*V (the paper's rule);
//   SGD (torch): out = W - s*lr*dir, dir the direction of the last step: the momentum buffer (with
//     momentum 0 the buffer holds the last d_p), with nesterov the stored d_p + momentum*buf;
//   Adam / AdamW: Device::predict_adam: s times the last step's direction m_hat / (sqrt(v_hat) + eps),
//     bias-corrected with that step's count t (the updates done; t = 0: no move), plus, for AdamW,
//     the decoupled decay lr*wd*W per step.
Status predict_weights(const Executor& ex, const Node& update, const TensorView& out, const TensorView& master,
                       const Value* lr, double s);

// --clip-grad-norm (torch.nn.utils.clip_grad_norm_): the sum of squares of `grads` in double, in
// a fixed order (on a device without host memory the gradients are fetched to the host).
Expected<double> grad_sum_squares(const Executor& ex, const std::vector<const Value*>& grads);
// min(1, max_norm / (sqrt(sum_squares) + 1e-6)), torch's clip coefficient.
double clip_coefficient(double max_norm, double sum_squares);
// Multiplies every gradient by coef (rounded to the gradients' dtype first, as torch's mul_ of a
// float32 tensor); nothing when coef >= 1 (torch multiplies by 1, which changes no bit).
Status scale_grads(Executor& ex, const std::vector<const Value*>& grads, double coef);

// "sgd-paper", "sgd (dampening 0, nesterov off)", "adam (betas 0.9, 0.999, eps 1e-08)", ...:
// the optimizer of g's update nodes and the hyper-parameters --lr, --momentum and --weight-decay do
// not cover (checkpoints compare it); "" when g has no update node.
std::string optimizer_description(const Graph& g);

// The update fused into the backward (--no-fusion update turns it off): `nodes` (a run order) with
// each update node (Phase::kUpdate) moved to just after the last other node that reads or writes
// one of its inputs: the producer of its gradient and every reader of the weight and state it
// writes in place (the backward's dX = dY W^T reads W after dW is made). Every other node keeps
// its place, the updates keep their relative order, and an update none of whose inputs a node of
// the list touches stays at the end. The arithmetic is the same (every update still reads what it
// read), but the gradient is consumed while it is fresh in cache and, under a memory plan, its
// storage is free for the rest of the backward: the gradients stop being a parameter-sized copy.
// Valid only when nothing between the backward and the update reads the gradients or the old
// weights: no gradient clipping (it needs every gradient first), no accumulation over
// micro-batches, no all-reduce across replicas, no weights shared with another stage, and a
// backward that runs on the master weights (not SpecTrain's predicted or PipeDream's stashed).
std::vector<const Node*> interleave_updates(const std::vector<const Node*>& nodes);

}  // namespace pt
