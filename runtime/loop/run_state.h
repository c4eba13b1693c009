// What every trainer needs about a run beyond the loop itself: the values a checkpoint holds,
// its record of the run's flags and data, the checks of a resume, the data against the model's
// inputs, and forward-only evaluation of a data set.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "importer/training.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/data.h"
#include "runtime/loop/train_config.h"

namespace pt {

class TrainingLoop;

struct Curves;
// A resumed run's bookkeeping from its checkpoint: the result so far (step, first and last loss,
// the last scheduled validation), the metrics rows (moved out of c) and the curves drawn from them.
// `rows`: the metrics rows of steps 1..c->step (resume_metrics_rows: from `metrics_path`), which
// the new metrics file starts with; `tail` continues the checkpoint's.
void continue_from(Checkpoint* c, const std::string& metrics_path, TrainResult* r, EvalResult* last_val,
                   MetricsTail* tail, std::vector<std::string>* rows, Curves* curves);

// Forward-only evaluation of every sample of d in batches of x's first dimension (the last batch
// padded by wrapping around, padding not counted): gathers into x and y, calls forward(), scores
// `out` against the labels (cross-entropy: mean loss and accuracy; MSE: mean loss).
// A model with several data inputs: more[k] (null: not read) receives d.more[k] per batch.
Expected<EvalResult> evaluate_dataset(const Dataset& d, const TrainingGraph& tg, HostTensor* x, HostTensor* y,
                                      const HostTensor& out, const std::function<Status()>& forward,
                                      const std::vector<HostTensor*>& more = {});
// The data holds one array per data input of g (x, then d.more in graph order) of its dtype and
// sample size.
Status check_dataset_inputs(const Dataset& d, const Graph& g);

// What a checkpoint holds: every parameter and every piece of state (momentum, BatchNorm running
// statistics) of g, by name; the same for single-stage and pipelined runs of one model.
std::vector<const Value*> checkpoint_values(const Graph& g);
// The flags and data a checkpoint records and a resume must match (pipeline: recorded only).
CheckpointMeta make_checkpoint_meta(const Graph& g, const TrainingGraph& tg, const Dataset& train,
                                    const TrainConfig& cfg, int64_t samples_per_step, int64_t total_steps,
                                    const std::string& pipeline);
// Checks c against this run: flags, data size and order, tensor names, dtypes and dims.
Status check_checkpoint(const Checkpoint& c, const CheckpointMeta& now, const std::vector<const Value*>& values,
                        int64_t n, int64_t per_epoch, const std::string& path);
// ck.resume (a file, or a folder's newest intact checkpoint); skipped damaged files go to notices
// (and are printed unless quiet); *path is the file read.
Expected<Checkpoint> read_resume_checkpoint(const CheckpointOptions& ck, bool quiet, std::vector<std::string>* notices,
                                            std::string* path);

// The data order and shuffle RNG of a run: 0..n-1 and the generator of the seed, until a resume
// takes a checkpoint's.
struct DataOrder {
  DataOrder(int64_t n, uint64_t seed);
  std::vector<int64_t> order;
  std::mt19937_64 rng;
  std::string rng_text() const;  // the RNG's state as a checkpoint holds it
};

// A resume's checkpoint (TrainingLoop::read_resume: cfg.checkpoint.resume), checked against this
// run (check_checkpoint: `meta`, `values`, n samples in loop.per_epoch() steps an epoch), with its
// RNG state parsed into *rng; *path is the file read. The caller restores its tensors and order,
// then calls loop.continue_from.
Expected<Checkpoint> read_checked_resume(TrainingLoop& loop, const CheckpointMeta& meta,
                                         const std::vector<const Value*>& values, int64_t n, std::mt19937_64* rng,
                                         std::string* path);

}  // namespace pt
