// Pipelined training on N in-process CPU stages: asynchronous 1F1B with
// SpecTrain weight prediction, weight stashing or stale weights, and synchronous GPipe. One thread
// and one Executor per stage; activations and gradients travel through bounded channels keyed by
// mini-batch, so results never depend on thread timing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "importer/training.h"
#include "partitioner/plan.h"
#include "runtime/data/data.h"
#include "runtime/exec/executor.h"
#include "runtime/loop/run_state.h"
#include "runtime/loop/train_config.h"

namespace pt {

class Cluster;

struct PipelineOptions {
  Schedule schedule = Schedule::k1F1B;
  WeightMode weights = WeightMode::kSpecTrain;  // kSync for GPipe and ZB-H1; 1F1B: any
  Staleness staleness = Staleness::kPaper;
  // Synchronous schedules: micro-batches per mini-batch; the graph is built for one micro-batch.
  int micro_batches = 1;
  // --schedule interleaved: virtual stages per device (the plan's stages are devices x this many,
  // stage k on device k % devices); one thread per device runs its chunks' merged program.
  int virtual_stages = 1;
  // The programs the stages run (partitioner/schedule.h): null makes schedule's with
  // make_schedule; a schedule file's must be synchronous, with micro_batches micro-batches.
  std::shared_ptr<const ScheduleIR> program;
  // Data-parallel copies of the whole pipeline, each on its share of every mini-batch (the graph
  // is built for one share, or one micro-batch of it); after each mini-batch's backward, every
  // stage's gradients are averaged over its replicas before the update, so the replicas' weights
  // stay equal. In one process, replica r's stage k is its own thread and executor.
  int replicas = 1;
  // OpenMP threads of each stage's kernels (its share of the cores); 0 leaves the default.
  // OpenBLAS keeps its own, process-wide thread count.
  int threads_per_stage = 0;
  // How long a stage thread waiting for a message of another stage of this process spins before it
  // sleeps (Channel::set_spin): a wake-up costs tens of microseconds, more in a VM. Worth it only
  // where every stage thread has cores of its own (the CLI decides); 0: sleep at once.
  int handoff_spin_us = 0;
  // Messages between stages of this process on the CPU move by trading storages instead of copies
  // where both ends allow it (Channel::trade); false: copied into the link and out again.
  bool trade_handoffs = true;
  bool record_trace = true;  // keep every pass for trace() (--trace); false: no memory per step
  // Where the stages run: the CPU, or CUDA with stage k on GPU gpu_of_stage[k % size] (empty:
  // GPU k % the number of GPUs, so that several stages share a GPU when there are fewer).
  DeviceKind device = DeviceKind::kCpu;
  std::vector<int> gpu_of_stage;
  // Under MPI with CUDA stages: NCCL links between ranks (each rank on a GPU of its own); false:
  // MPI links staged through the host (several ranks sharing a GPU, or no NCCL).
  bool nccl_links = false;
  // Each stage's executor takes its parameters' initial data out of the graph instead of copying
  // it (ExecutorOptions::adopt; CPU stages, one replica): the caller must not read Value::data of
  // the stages' parameters again. The evaluator, built afterwards, loads the weights from the
  // stages before every evaluation anyway.
  bool adopt_initial_values = false;
  // What every executor of the pipeline (stages and evaluator) computes with.
  ExecSettings exec;
  // Test hook, set only by tests (the CLI's hidden --test-lose-rank): called by each stage of this
  // process after the update of 0-based step `step` (a test makes its rank vanish or hang there).
  std::function<void(int stage, int64_t step)> after_update;
  // One stage per rank (rank k runs stage k; --gpus must equal the number of ranks); null: every
  // stage in this process, one thread each. Not owned.
  Cluster* cluster = nullptr;
};

// One forward or backward pass of one stage, as it ran.
struct PassRecord {
  int stage = 0;
  bool backward = false;
  int64_t mini_batch = 0;  // 0-based (step - 1)
  int micro_batch = 0;     // synchronous schedules; 0 for asynchronous 1F1B
  char part = 0;           // a split backward (zero-bubble): 'I' or 'W'; 0 otherwise
  int64_t version = 0;     // updates applied to the weights the pass started from (stash: the stashed version)
  int staleness = 0;       // s SpecTrain predicted over (0 when nothing is predicted)
  double start_ms = 0, end_ms = 0;  // since the start of train()
  double run_ms = 0;  // when its inputs were in and it began to compute (start_ms .. run_ms: waiting)
};

// A stage's times. They cover the steady state where the run had one: the mini-batches after the
// first fifth of the run (the rule of TrainResult::steady_samples_per_s), from the end of the
// stage's update before the first of them to the end of its last update (window_s); else the
// whole run (window_s 0: the fractions are over the wall time of train()).
struct StageStats {
  int stage = 0;
  double busy_fraction = 0;     // time in passes and updates / the window
  // Time in its passes waiting for (and receiving) their inputs from other stages / the window;
  // the rest, 1 - busy - wait, is spent between passes (the schedule's own order, claims, the loop).
  double wait_fraction = 0;
  double window_s = 0;
  double wait_ms = 0;           // per mini-batch
  double fwd_ms = 0, bwd_ms = 0;  // measured per mini-batch (GPipe: summed over micro-batches)
  double wgrad_ms = 0;          // of bwd_ms, in W passes (a split backward's weight-gradient part)
  double update_ms = 0;         // per update
  // The same three in the stage thread's CPU time (CLOCK_THREAD_CPUTIME_ID): without the time its
  // core served other stages or it waited for a core, so on shared cores what the stage would
  // take alone. Only the stage's own thread is counted: with threads_per_stage > 1 its OpenMP
  // workers' time is not in it (cpu_timed false).
  double fwd_cpu_ms = 0, bwd_cpu_ms = 0, update_cpu_ms = 0;
  bool cpu_timed = false;
  // The messages it waited for (Link::handoffs; none where its links do not say): how many, and
  // the mean and median time (within 10 %) from their sending to this stage holding them;
  // activations from earlier stages, gradients from later ones.
  struct Handoffs {
    int64_t count = 0;
    double mean_us = 0, median_us = 0;
    int64_t traded = 0;  // copies left out: values handed over with their storage (Channel::trade)
  };
  Handoffs fwd_handoffs, bwd_handoffs;
  int64_t forwards = 0, backwards = 0, updates = 0;
  int64_t recomputes = 0;       // forwards rerun before their backward (--recompute)
};

class PipelineTrainer {
 public:
  // g: a training graph from build_training_graph (tg); plan: partition(g, ...) of that graph.
  // For GPipe, g is built for the micro-batch (mini-batch / M). Errors: a parameter read by
  // nodes of two stages, a value flowing against the pipeline, more than one model input.
  static Expected<std::unique_ptr<PipelineTrainer>> create(const Graph& g, const TrainingGraph& tg, const Plan& plan,
                                                           const PipelineOptions& opts);
  ~PipelineTrainer();

  // Same contract as Trainer::train: metrics.csv has one row per mini-batch with its loss (GPipe:
  // the mean over its micro-batches); validation runs at each epoch end on the weights after that
  // mini-batch's update at every stage. One step consumes samples_per_step() samples.
  Expected<TrainResult> train(const Dataset& train, const Dataset* val, const TrainConfig& cfg);
  // Forward over every sample with the current master weights (sequential pass, rng_step -1).
  Expected<EvalResult> evaluate(const Dataset& d);

  // Master weights by initializer name (never the predicted or stashed copies). Under MPI, on
  // rank 0 after train(): every stage's (gathered); on other ranks: their own stage's.
  std::map<std::string, HostTensor> parameters() const;
  // Master weights plus the model's own state (BatchNorm running statistics).
  std::map<std::string, HostTensor> trained_initializers() const;
  // The same, taken for the export at the end of a run: the evaluator and every stage's copy of a
  // weight are released as it is gathered, so the process holds the trained weights once, not
  // beside the stages' own copies. The trainer cannot train or evaluate afterwards.
  std::map<std::string, HostTensor> take_trained_initializers();

  int num_stages() const;
  int64_t samples_per_step() const;  // mini-batch size: graph batch * micro-batches * replicas
  int replicas() const;
  // Every pass of the last train(), per stage in the order it ran (stage 0 first); stats and trace
  // under MPI as parameters().
  std::vector<PassRecord> trace() const;
  std::vector<StageStats> stage_stats() const;
  // Bytes each stage of this process holds ([stage]; -1 for a stage of another rank): its
  // executor's buffers and arena, its master, saved-activation and stashed copies; stage 0 also
  // holds the evaluator.
  std::vector<int64_t> stage_allocated_bytes() const;
  // What the CUDA graphs of each stage of this process did ([stage]: summed over its replicas;
  // empty when no stage of this process captures graphs).
  std::vector<GraphStats> stage_graph_stats() const;
  // Each stage's memory plan ([stage]; nullptr for a stage of another rank).
  std::vector<const MemoryPlan*> stage_memory_plans() const;
  // The links this process wired between its stages, as the stages hold them: kind "activations"
  // (from -> to), "gradients" (from -> to, upstream) or "weights" (owner -> reader; backward: for
  // the reader's backward passes), with the names of the values each carries in link order. Tests
  // compare it with the partition report's layout.
  struct WiredLink {
    std::string kind;
    int from = 0, to = 0;
    bool backward = false;
    std::vector<std::string> values;
  };
  std::vector<WiredLink> wired_links() const;
  // The parameters each stage updates (its master weights), [stage] -> names in update order.
  std::vector<std::vector<std::string>> stage_params() const;
  // Writes trace() in Chrome trace format (one row per stage; args: mini-batch, version, s).
  Status write_chrome_trace(const std::string& path) const;

  struct Impl;

 private:
  explicit PipelineTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pt
