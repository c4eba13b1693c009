// The stages one training loop drives: a pipeline of N stages (PipelineTrainer: one thread per
// stage, or one stage per rank) or the single stage (Trainer). drive_stages is that loop: steps,
// losses, divergence, validation, metrics, progress, checkpoints at segment ends and stops; the
// set runs mini-batches and hands back losses and weights. A later replica dimension (stages whose
// gradients are all-reduced) belongs inside a set: the loop sees one loss per micro-batch and one
// set of weights per stage whatever runs them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/data/data.h"
#include "runtime/loop/rank_coordinator.h"
#include "runtime/loop/training_loop.h"

namespace pt {

class StageSet {
 public:
  using Tensors = std::map<std::string, HostTensor>;
  virtual ~StageSet() = default;

  // Starts 0-based mini-batches [first, end): a segment, which ends with every stage drained.
  virtual void launch(int64_t first, int64_t end) = 0;
  // Waits until this process's stages have finished the segment.
  virtual void join() = 0;
  // The segment's end (exclusive; lowered by stop_early).
  virtual int64_t segment_end() = 0;
  // Ends the segment after the mini-batches already started.
  virtual void stop_early() = 0;
  // The first failure of a stage; fail() records one and wakes every wait.
  virtual Status error() = 0;
  virtual void fail(Status s) = 0;

  enum class Settled { kClaimed, kPastEnd, kAborted };
  // A follower (under MPI) waits until its stage has claimed s0 or heard the segment ends before it.
  virtual Settled settle(int64_t s0) = 0;
  // The loss of each micro-batch of 0-based mini-batch s0 into *out (sized to the micro-batches),
  // when this process computes the loss (otherwise *out is left alone); false: the run aborted.
  virtual bool losses(int64_t s0, std::vector<double>* out) = 0;
  // Whether the weights after s0 are validated (with a validation set: loop.eval_due).
  virtual bool snapshot_due(int64_t s0) const = 0;
  // The weights after s0's update: the leader's stages load them into the evaluator; a
  // follower's stage's go to *mine. False: the run aborted.
  virtual bool take_snapshot(int64_t s0, RankCoordinator::Snapshot* mine) = 0;
  // Validation on the weights take_snapshot loaded (and the coordinator gathered).
  virtual Expected<EvalResult> evaluate_snapshot(const Dataset& val) = 0;
  // This process's stages' checkpoint tensors (drained).
  virtual Expected<Tensors> checkpoint_tensors() = 0;
  // After the last segment, with the run's seconds: per-stage timing.
  virtual void account(TrainResult* r) = 0;
  // At the end of the leader's run: the stages' TensorBoard scalars.
  virtual Status add_scalars(TrainingLoop& loop, int64_t step) = 0;
};

// The training loop over `stages` from loop.start(): segments end at checkpoint steps, at the
// end and where a stop request drains the stages; save(step, tensors) writes the leader's
// checkpoint. Returns the first failure; the caller reads loop.result().
Status drive_stages(StageSet& stages, RankCoordinator& co, TrainingLoop& loop, const Dataset* val, int micro_batches,
                    const std::function<Status(int64_t step, StageSet::Tensors tensors)>& save);

}  // namespace pt
