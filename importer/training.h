// Turning a forward Graph into a training graph: attach a loss to the model's output, build the
// backward pass by graph rewrites (importer/grad/), and append the optimizer update nodes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "importer/ir.h"

namespace pt {

enum class LossKind { kAuto, kCrossEntropy, kMse };

struct LossInfo {
  LossKind kind = LossKind::kCrossEntropy;
  Value* output = nullptr;  // the model output the loss reads
  Value* logits = nullptr;  // what the loss node consumes (the output, or the input of a final Softmax)
  Value* labels = nullptr;  // kLabel value fed by the data loader
  Value* loss = nullptr;    // scalar
  int64_t num_classes = 0;  // cross-entropy only
  int64_t tokens = 0;       // token-level cross-entropy: labels [N, tokens]; 0: one label per sample
  int64_t ignore_index = -100;  // cross-entropy: labels equal to it count for nothing (PyTorch's default)
  std::string description;  // one line for the user: which output, which loss, why
};

// Appends the loss. kAuto: a model that already ends in SoftmaxCrossEntropyLoss uses it; an output
// shaped [N, C] gets softmax cross-entropy (mean, int64 labels [N]); a sequence output, [N, T, V]
// or [N*T, V] (N the batch), token-level cross-entropy (int64 labels [N, T], mean over the tokens
// whose label is not `ignore_index`); other shapes get MSE. `output` names the model output the loss
// reads (--loss-output); empty: the first float output (a model that returns an int64 argmax first
// and its logits second trains on the logits).
Expected<LossInfo> attach_loss(Graph& g, LossKind kind, int64_t ignore_index = -100, const std::string& output = "");

// Reverse-mode autodiff. Seeds pair a value with its incoming gradient; returns the gradient of
// every value in `wrt` that the seeds depend on (absent: no path). Gradients nobody needs are never
// built. Emitted nodes have Phase kBackward and point at the forward node they serve.
Expected<std::map<Value*, Value*>> build_gradients(Graph& g, const std::vector<std::pair<Value*, Value*>>& seeds,
                                                  const std::vector<Value*>& wrt);

// The optimizer of the update nodes. kSgdPaper (the default): the SpecTrain paper's momentum SGD,
// v = gamma v + (1 - gamma) (g + wd w), w -= lr v (op SGDMomentum). kSgd: exactly torch.optim.SGD
// (op SGD; its first step sets buf = g). kAdam / kAdamW: exactly torch.optim.Adam / AdamW (op
// Adam; attribute decoupled). Every optimizer but kSgdPaper keeps a per-parameter update count,
// an int64 kState scalar "<param>.step", so each stage counts its own updates and a checkpoint
// carries it.
enum class OptimizerKind { kSgdPaper, kSgd, kAdam, kAdamW };

struct SgdOptions {
  float momentum = 0.9f;     // sgd-paper: gamma of v = gamma v + (1 - gamma) g; sgd: torch's momentum
  float weight_decay = 0.0f;
  OptimizerKind kind = OptimizerKind::kSgdPaper;
  float dampening = 0.0f;    // sgd
  bool nesterov = false;     // sgd
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam, adamw
};
using OptimizerOptions = SgdOptions;

// "sgd-paper", "sgd", "adam", "adamw"; parse_optimizer's error lists the valid names.
const char* optimizer_name(OptimizerKind k);
Expected<OptimizerKind> parse_optimizer(const std::string& name);
// The update op (domain pipetrain) of optimizer k: "SGDMomentum", "SGD" or "Adam".
const char* update_op(OptimizerKind k);

struct TrainingGraph {
  LossInfo loss;
  std::vector<Value*> params;                 // trainable parameters with a gradient
  std::map<Value*, Value*> grads;             // param -> gradient
  std::map<Value*, Value*> momentum;          // param -> first optimizer state (momentum; Adam: m) (kState)
  std::map<Value*, std::vector<Value*>> opt_state;  // param -> all its optimizer state (kState)
  Value* lr = nullptr;                        // kHyper scalar
  std::vector<std::string> unused_params;     // trainable but not reaching the loss
};

// attach_loss + build_gradients(loss, 1) + one update node per parameter (Phase kUpdate, domain
// pipetrain): SGDMomentum(W, G, V, lr); SGD(W, G, B, lr, step [, D]) with D, the last step
// direction, only when nesterov; Adam(W, G, M, V, lr, step). Every input after lr is kState.
Expected<TrainingGraph> build_training_graph(Graph& g, LossKind kind, const SgdOptions& sgd,
                                             int64_t ignore_index = -100, const std::string& loss_output = "");

// The backward split of zero-bubble schedules (partitioner/schedule.h): of a stage's `nodes`, the
// backward nodes that computing `sent` (the gradients the stage sends to earlier stages) does not
// need, in the given order. They compute only weight gradients (W) and may run after the rest of
// the backward (I) of later passes; every other backward node is an ancestor of `sent` within the
// stage. A stage that sends nothing (the first) has all of its backward in W.
std::vector<const Node*> weight_gradient_nodes(const std::vector<const Node*>& nodes,
                                               const std::vector<const Value*>& sent);

}  // namespace pt
