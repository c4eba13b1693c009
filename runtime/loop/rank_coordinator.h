// What the processes of a pipelined run tell each other around the training loop: the data size,
// a resume, claims, segment ends, losses, validation weights, checkpoints and the final weights.
// One process (every stage in it) coordinates with no one; under MPI (one stage per rank) rank 0
// leads and the others follow (runtime/pipeline/ranks.cpp). The loop only asks; it never sends.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "importer/ir.h"

namespace pt {

struct RunShared;  // the state a pipeline's stages share (runtime/pipeline/stage.h)

class RankCoordinator {
 public:
  using Tensors = std::map<std::string, HostTensor>;
  using Snapshot = std::vector<std::pair<const Value*, HostTensor>>;
  virtual ~RankCoordinator() = default;

  // Whether this process leads: it reads the data, computes metrics, validates, prints and writes
  // the run folder. Under MPI: rank 0.
  bool leads() const { return leads_; }
  // More than one process runs the stages.
  virtual bool distributed() const = 0;
  // The stages this process runs.
  virtual int local_stages() const = 0;

  // The training set's size and whether there is a validation set, as the leader has them.
  virtual Status agree_data(int64_t* n, bool* validate) = 0;
  // After the leader's attempt to resume (`resumed`; its stages restored, *start the checkpoint's
  // step, `tensors` the checkpoint's): every process learns the outcome and the step, and restores
  // its stage. Returns the leader's failure (followers: a line saying rank 0 could not resume).
  virtual Status share_resume(const Status& resumed, int64_t* start, const Tensors& tensors) = 0;
  // Sets sh's claim and norm hooks so that the leader's claims decide for every process.
  virtual void relay_claims(RunShared& sh) = 0;
  // At a segment end: every process takes the leader's step and whether the run stops there.
  virtual Status agree_segment_end(int64_t* step, bool* stop) = 0;
  // A checkpoint at `step` with every stage drained: *t holds this process's stages' tensors; the
  // leader receives the others' into it, the followers send theirs.
  virtual Status gather_checkpoint(int64_t step, Tensors* t) = 0;
  // The losses of 0-based mini-batch s0 (one per micro-batch), from the loss stage to the leader.
  virtual Status pass_losses(int64_t s0, std::vector<double>* losses) = 0;
  // A follower sends its stage's weights after 0-based step s0 for validation.
  virtual Status send_snapshot(int64_t s0, const Snapshot& snap) = 0;
  // The leader receives every other stage's weights after s0 into the evaluator.
  virtual Status gather_snapshots(int64_t s0) = 0;
  // After training: the followers send their final weights, stats and trace; the leader keeps them.
  virtual Status gather_final() = 0;
  // The loop waits for 1-based step `step` (under MPI the watchdog names it when a rank is lost).
  virtual void at_step(int64_t step) {}

 protected:
  explicit RankCoordinator(bool leads) : leads_(leads) {}

 private:
  bool leads_;
};

// Every stage in this process: nothing travels.
std::unique_ptr<RankCoordinator> make_local_coordinator(int stages);

}  // namespace pt
