// Single-stage training loop: batches from a Dataset, forward + loss + backward + update through
// the Executor, metrics.csv, validation after each epoch. Pipelined stages build on the same
// pieces (runtime/executor.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "importer/training.h"
#include "runtime/data.h"
#include "runtime/executor.h"

namespace pt {

struct TrainConfig {
  int64_t epochs = 1;
  int64_t steps = 0;        // total steps; 0: epochs * steps_per_epoch
  float lr = 0.05f;
  uint64_t seed = 0;
  bool shuffle = true;      // reshuffle the training order every epoch (seeded)
  int64_t log_every = 0;    // 0: about 10 lines per run
  bool quiet = false;
  std::string metrics_path;  // metrics.csv; written as <path>.partial, renamed when done
  std::string curves_path;   // curves.svg, refreshed at every validation and at the end
  std::string title;         // of the curves
};

struct EvalResult {
  int64_t samples = 0;
  double loss = 0;
  double accuracy = -1;  // -1 for regression
};

struct TrainResult {
  int64_t steps = 0;
  double first_loss = 0, last_loss = 0;
  double seconds = 0, samples_per_s = 0;
  EvalResult val;  // samples == 0 when there is no validation set
};

class Trainer {
 public:
  // g must be a training graph built by build_training_graph (tg).
  static Expected<std::unique_ptr<Trainer>> create(const Graph& g, const TrainingGraph& tg, DeviceKind device);

  Expected<TrainResult> train(const Dataset& train, const Dataset* val, const TrainConfig& cfg);
  // Forward only over every sample (the last partial batch padded, padding not counted).
  Expected<EvalResult> evaluate(const Dataset& d);
  // The model output for one batch of inputs (dims of the model input), with the current weights.
  Expected<HostTensor> forward(const HostTensor& x);
  // Current values of the trainable parameters, by initializer name.
  std::map<std::string, HostTensor> parameters() const;
  // What export writes back: the parameters and the model's own state (BatchNorm running stats).
  std::map<std::string, HostTensor> trained_initializers() const;
  int64_t batch_size() const { return batch_; }

 private:
  Trainer(const Graph& g, const TrainingGraph& tg) : g_(g), tg_(tg) {}
  // The step random ops (Dropout) draw their masks for; -1: evaluation (identity).
  void set_step(int64_t step);
  const Graph& g_;
  const TrainingGraph& tg_;
  std::unique_ptr<Executor> ex_;
  Value* input_ = nullptr;
  int64_t batch_ = 0;
};

}  // namespace pt
