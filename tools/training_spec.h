// What one training run is asked to do, as one typed value: the library entry point
// run_training (tools/run_training.h) takes it, the command line parses its flags straight into
// it (tools/onnx_pipetrain.cpp), and the ranks of an MPI job agree on its serialization.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "importer/precision.h"
#include "importer/training.h"
#include "partitioner/plan.h"
#include "kernels/weight_cache.h"
#include "runtime/exec/executor.h"
#include "runtime/loop/lr_schedule.h"
#include "runtime/pipeline/pipeline.h"

namespace pt {

enum class DeviceChoice { kAuto, kCpu, kCuda };
const char* device_choice_name(DeviceChoice d);

// The batch: samples per weight update, and (GPipe) the passes each mini-batch is split into.
struct BatchSpec {
  int64_t mini_batch = 32;         // --batch-size
  int micro_batches = 4;           // --micro-batches (GPipe only; 1F1B runs one pass per mini-batch)
  bool micro_batches_given = false;
};

// Set only by tests (the command line's hidden --test-* flags); never part of a user's run.
struct TestHooks {
  // Every executor keeps host copies apart from its buffers, as on CUDA (runtime/exec/executor.h).
  bool separate_host = false;
  // --test-weight-cache-verify: every weight-cache hit converts again and aborts on a difference;
  // --test-weight-cache-ignore-versions: hits ignore the version (a broken cache, which the tests
  // must catch). kernels/weight_cache.h, WeightCache::Checks.
  bool weight_cache_verify = false;
  bool weight_cache_ignore_versions = false;
  // --test-lose-rank RANK:STEP[:stop] as given (agreed on by the ranks like every other flag),
  // and what the command line made of it: called by this process's stages after each update.
  std::string lose_rank;
  std::function<void(int stage, int64_t step)> after_update;
};

// What only the process that leads the run (rank 0, or the single process) reads, writes or
// prints: not part of the start-up agreement (a rank other than 0 runs quietly).
struct RunLocal {
  std::string out;                 // run folder; empty: runs/<model stem>
  std::string data = "synthetic";  // --data
  bool data_given = false;
  std::string val_data;
  // How --data is read (runtime/data/data.h, LoadOptions): only the leading process reads it.
  std::vector<std::string> augment;      // --augment crop,flip
  std::string on_bad_sample = "fail";    // --on-bad-sample skip|fail
  std::string tokenizer;                 // --tokenizer bytes
  std::string token_dtype = "uint16";    // --token-dtype uint16|uint32
  std::string stream_data = "auto";      // --stream-data auto|always|never
  int loader_threads = 0;                // --loader-threads; 0: auto
  std::string resume_path;         // --resume's value; empty: the run folder's newest checkpoint
  bool quiet = false;
  int64_t log_every = 0;
  int keep_checkpoints = 3;
  bool overwrite = false;
  bool export_stages = false;
  bool export_training = false;
  bool tensorboard = false;
  std::vector<std::string> schedule_flags;  // the --lr-* schedule flags given (checked against --lr-schedule)
  bool eval_every_given = false;
};

struct TrainingSpec {
  std::string model;
  int gpus = 1;                                 // pipeline stages
  // Data-parallel copies of the pipeline (--replicas): each runs on its share of every mini-batch
  // and each stage's gradients are averaged over its replicas before the update.
  int replicas = 1;
  DeviceChoice device = DeviceChoice::kAuto;
  bool oversubscribe = false;
  // --replicas auto: the --gpus devices are split into N stages x R replicas (N x R = --gpus) by
  // the cost model (tools/plan_step.h, choose_layout); replicas stays 1 until then.
  bool replicas_auto = false;
  BatchSpec batch;
  Schedule schedule = Schedule::k1F1B;
  WeightMode weights = WeightMode::kSpecTrain;  // kSync for gpipe and zb-h1 (resolve_schedule)
  std::string schedule_file;                    // --schedule-file: a synchronous program (partitioner/schedule.h)
  std::string schedule_out;                     // --schedule-out: where the program is written
  // --virtual-stages: --schedule interleaved's virtual stages per device (0: not given; resolve_schedule
  // makes it 2 for interleaved, 1 otherwise).
  int virtual_stages = 0;
  Staleness staleness = Staleness::kPaper;
  Recompute recompute = Recompute::kNone;       // --recompute (partitioner/plan.h)
  Precision precision = Precision::kFp32;       // --precision (importer/precision.h)
  // Memory: copy-free Reshape/Flatten/Squeeze/Unsqueeze/Identity (--reshape-alias) and which
  // executors keep weights converted to the kernels' layouts (--weight-cache).
  bool reshape_alias = true;
  // CUDA stages replay their passes as CUDA graphs (--no-cuda-graphs: false; refused on CPU stages).
  bool cuda_graphs = true;
  WeightCachePolicy weight_cache = WeightCachePolicy::kAuto;
  int64_t epochs = 1;
  int64_t steps = 0;                            // instead of epochs when > 0
  // Learning rate and its schedule.
  float lr = 0.05f;
  LrSchedule::Kind lr_schedule = LrSchedule::Kind::kConstant;
  int64_t warmup_steps = 0;
  int64_t lr_decay_every = 0;
  double lr_gamma = 0.1;
  double lr_power = 2.0;
  double lr_min = 0.0;
  // The optimizer and its hyper-parameters.
  OptimizerKind optimizer = OptimizerKind::kSgdPaper;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  double clip_grad_norm = 0;                    // 0: off
  std::vector<std::string> optimizer_flags;     // those of its flags given (refused where they do not apply)
  // Loss, parameters, data handling.
  LossKind loss = LossKind::kAuto;
  int64_t ignore_index = -100;
  std::string loss_output;  // --loss-output: the model output the loss reads; empty: the first float one
  std::vector<std::string> freeze, trainable;
  std::vector<std::string> no_fusion;  // fusion passes turned off (importer/fuse.h)
  int64_t eval_every = 0;
  double val_split = 0;
  std::vector<float> mean, std;
  bool raw_pixels = false;
  uint64_t seed = 0;
  bool no_shuffle = false;
  // Planning.
  bool plan_only = false;
  bool whatif = false;
  bool profile = false;
  bool trace = false;
  bool calibrate = false;     // --calibrate: measure the cost model's classes again
  bool no_calibrate = false;  // --no-calibrate: the analytic roofline model
  std::vector<std::string> device_spec;
  std::string link;
  std::string replica_link;                     // --replica-link: between a stage's replicas ("" = --link)
  std::string network_link;                     // --network-link: between nodes ("" = the built-in network)
  std::vector<std::string> split_at;
  std::vector<int> balance;
  int ranks_per_node = 0;
  // Checkpoints.
  int64_t checkpoint_every = 0;
  bool resume = false;

  TestHooks test;
  RunLocal local;
};

// Every field of `spec` but `local` and the hooks' function, as canonical JSON text (the start-up
// agreement hashes it: ranks that differ in any of them are refused). Written with one serializer
// per struct (tools/training_spec.cpp), which a static_assert on the struct sizes keeps complete.
std::string serialize_for_agreement(const TrainingSpec& spec);

// The schedule and weights the flags mean (after the parse; `schedule_given`, `weights_given`:
// whether --schedule, --weights were on the command line). gpipe and zb-h1 are synchronous: their
// weights are sync (another --weights is refused). --schedule-file is checked here, before any
// work: its program must be synchronous and of --gpus stages; it runs as zb-h1 does when it splits
// the backward (I and W), else as 1F1B sync, and gives the micro-batch count when --micro-batches
// is not given (a different one is refused).
Status resolve_schedule(bool schedule_given, bool weights_given, TrainingSpec* o);
// The program of --schedule-file (null without one).
Expected<std::shared_ptr<const ScheduleIR>> schedule_file_program(const TrainingSpec& o);

// What the spec asks of every executor of the run (runtime/exec/executor.h): made here, once,
// and carried unchanged through PipelineOptions / Trainer::Options.
ExecSettings exec_settings(const TrainingSpec& spec);

}  // namespace pt
