// Single-stage training: batches from a Dataset, forward + loss + backward + update through the
// Executor, as a stage set of one driven by the one training loop (runtime/loop/stage_set.h);
// evaluation and the trained weights.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "importer/training.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/data.h"
#include "runtime/exec/executor.h"
#include "runtime/loop/run_state.h"
#include "runtime/loop/train_config.h"

namespace pt {

class Trainer {
 public:
  // g must be a training graph built by build_training_graph (tg).
  static Expected<std::unique_ptr<Trainer>> create(const Graph& g, const TrainingGraph& tg, DeviceKind device);
  static Expected<std::unique_ptr<Trainer>> create(const Graph& g, const TrainingGraph& tg, std::shared_ptr<Device> device);
  struct Options {
    // Each update runs right behind its gradient's producer (interleave_updates,
    // runtime/exec/optimizer.h), so the gradients share the memory plan's arena instead of all living
    // to the end; such a trainer refuses TrainConfig::clip_grad_norm (it needs every gradient).
    bool update_in_backward = false;
    // The executor takes the parameters' initial data out of the graph instead of copying it
    // (ExecutorOptions::adopt; the CPU): the caller must not read Value::data of tg.params again.
    bool adopt_initial_values = false;
    // The memory plan shares activation and gradient buffers (tools/bench/step_bench can turn it
    // off to measure what it saves).
    bool memory_plan = true;
    ExecSettings exec;  // what the executor computes with
  };
  static Expected<std::unique_ptr<Trainer>> create(const Graph& g, const TrainingGraph& tg, std::shared_ptr<Device> device,
                                                   const Options& opts);
  bool update_in_backward() const { return update_in_backward_; }

  Expected<TrainResult> train(const Dataset& train, const Dataset* val, const TrainConfig& cfg);
  // One training step as train() runs it: forward, loss, backward and update of 1-based `step` at
  // learning rate `lr` on the batch in the input buffers below; its loss. clip_grad_norm > 0: the
  // gradients are clipped before the update. node_seconds: each node's seconds are added to
  // (*node_seconds)[node id] (not with clipping).
  Expected<double> step(int64_t step, double lr, double clip_grad_norm = 0, std::vector<double>* node_seconds = nullptr);
  // The host buffers step() reads the batch from: the model's first data input, the labels, and the
  // further data inputs of a model with several.
  HostTensor& input_buffer() { return ex_->host(input_); }
  HostTensor& label_buffer() { return ex_->host(tg_.loss.labels); }
  std::vector<HostTensor*> more_input_buffers();
  // Forward only over every sample (the last partial batch padded, padding not counted).
  Expected<EvalResult> evaluate(const Dataset& d);
  // The model output for one batch of inputs (dims of the model input), with the current weights.
  Expected<HostTensor> forward(const HostTensor& x);
  // Current values of the trainable parameters, by initializer name.
  std::map<std::string, HostTensor> parameters() const;
  // What export writes back: the parameters and the model's own state (BatchNorm running stats).
  std::map<std::string, HostTensor> trained_initializers() const;
  // The same, taken at the end of a run: the parameters move out of the executor's buffers (on the
  // CPU; copied from a device), so the export holds them once. The trainer cannot train afterwards.
  std::map<std::string, HostTensor> take_trained_initializers();
  int64_t batch_size() const { return batch_; }
  const Executor& executor() const { return *ex_; }  // memory accounting

 private:
  Trainer(const Graph& g, const TrainingGraph& tg) : g_(g), tg_(tg) {}
  // The step random ops (Dropout) draw their masks for; -1: evaluation (identity).
  Status set_step(int64_t step);
  // The values a checkpoint holds: parameters and state (momentum, BatchNorm running stats).
  std::vector<const Value*> persistent_values() const;
  int64_t total_steps(const Dataset& train, const TrainConfig& cfg) const;
  // The flags and data a checkpoint of this run records and a resume must match.
  CheckpointMeta checkpoint_meta(const Dataset& train, const TrainConfig& cfg) const;
  // Copies the tensors of c (checked by read_checked_resume) into the executor's buffers.
  Status restore(const Checkpoint& c);
  friend class OneStageSet;  // the stage set train() drives (trainer.cpp)
  const Graph& g_;
  const TrainingGraph& tg_;
  std::unique_ptr<Executor> ex_;
  Status check_inputs(const Dataset& d) const;
  Value* input_ = nullptr;
  std::vector<Value*> more_inputs_;  // the further data inputs of a model with several
  int64_t batch_ = 0;
  bool update_in_backward_ = false;
};

}  // namespace pt
