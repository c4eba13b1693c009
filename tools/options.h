// The command line's flags as parsed (tools/onnx_pipetrain.cpp), shared with its MPI side
// (tools/mpi_job.*), which fingerprints those every rank must agree on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pt {

struct Options {
  std::string model;
  int gpus = 1;
  std::string device = "auto";
  std::string data = "synthetic";
  std::string val_data;
  double val_split = 0;
  int64_t epochs = 1;
  int64_t steps = 0;
  int64_t batch_size = 32;
  float lr = 0.05f;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  int64_t lr_decay_every = 0;
  double lr_gamma = 0.1;
  double lr_power = 2.0;
  double lr_min = 0.0;
  int64_t eval_every = 0;
  std::vector<float> mean, std;
  bool raw_pixels = false;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  std::string loss = "auto";
  std::vector<std::string> freeze;
  std::vector<std::string> no_fusion;  // fusion passes turned off (importer/fuse.h)
  uint64_t seed = 0;
  std::string out;
  bool quiet = false;
  bool no_shuffle = false;
  bool oversubscribe = false;
  int64_t log_every = 0;
  bool plan_only = false;
  bool export_stages = false;
  bool whatif = false;
  bool profile = false;
  std::string schedule = "1f1b";
  std::string weights = "spectrain";
  int micro_batches = 4;
  bool micro_batches_given = false;
  std::string staleness = "paper";
  bool trace = false;
  std::vector<std::string> device_spec;
  std::string link;
  std::vector<std::string> split_at;
  std::vector<int> balance;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  bool resume = false;      // --resume given
  std::string resume_path;  // its value; empty: the run folder's newest intact checkpoint
  int ranks_per_node = 0;   // --plan-only of a multi-node job: stages k / R share node k / R

  // The optimizer (--optimizer and its hyper-parameters; --momentum and --weight-decay above).
  std::string optimizer = "sgd-paper";
  float dampening = 0.0f;
  bool nesterov = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  double clip_grad_norm = 0;  // --clip-grad-norm; 0: off
  std::vector<std::string> optimizer_flags;  // those of --momentum, --dampening, --nesterov, --beta1,
                                             // --beta2, --eps given on the command line
  // ---- trainer-ux: exports, parameters, run folder, data, TensorBoard (issue #15, items 3 to 7)
  bool export_training = false;  // also write <stem>.training.onnx (the training-mode graph)
  std::vector<std::string> trainable;  // fnmatch globs: train these float initializers instead of the weights
  bool overwrite = false;   // train into a run folder that holds a finished run
  bool data_given = false;  // --data was on the command line
  int64_t ignore_index = -100;  // cross-entropy: labels equal to it count for nothing
  bool tensorboard = false;     // also write the metrics as TensorBoard event files into the run folder
};

}  // namespace pt
