// Internals of runtime/pipeline.h: the bounded in-process channel between two stages and the
// stage worker (its executor, saved-activation slots, master / stashed / predicted weights and
// the fixed sequence of passes its schedule prescribes). Not a public header.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/executor.h"
#include "runtime/pipeline.h"

namespace pt {

// A fixed set of values sent from one stage to another, `capacity` messages at most in flight.
// Messages carry a key (the pass id: mini-batch * M + micro-batch) and are received by key; the
// buffers are allocated once. Blocking calls return false once the channel is aborted.
class Channel {
 public:
  Channel(std::vector<const Value*> values, int capacity);
  const std::vector<const Value*>& values() const { return values_; }
  // Waits for a free slot, copies every value from `from` into it, publishes it under `key`.
  bool send(int64_t key, const Executor& from);
  // Waits for the message `key`, copies it into `to`'s buffers, frees the slot.
  bool recv(int64_t key, Executor& to);
  void abort();

 private:
  static constexpr int64_t kFree = -1, kBusy = -2;
  struct Slot {
    int64_t key = kFree;
    std::vector<HostTensor> tensors;
  };
  std::vector<const Value*> values_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
};

// Shared between the coordinator (train()) and the stage threads of one run.
struct RunShared {
  const Dataset* data = nullptr;
  const std::vector<std::vector<int64_t>>* epoch_orders = nullptr;
  int64_t per_epoch = 1;
  int64_t total_steps = 0;
  int64_t mini_batch = 0;  // samples per step
  int64_t graph_batch = 0;  // samples per pass
  std::vector<char> snapshot_step;  // [step index]: 1 when validation needs the weights after it
  std::atomic<bool> abort{false};
  std::chrono::steady_clock::time_point t0;

  std::mutex mu;
  std::condition_variable cv;
  std::vector<double> losses;         // [pass id], filled by the loss stage
  std::vector<char> loss_ready;       // [pass id]
  // [step] -> per-stage snapshot of (value, tensor), posted after that step's update.
  std::map<int64_t, std::vector<std::vector<std::pair<const Value*, HostTensor>>>> snapshots;
  std::map<int64_t, int> snapshot_count;
  Status error;  // the first stage failure
  std::vector<Channel*> channels;  // aborted on failure, so no stage waits forever
  void fail(Status s);
};

class Stage {
 public:
  int index = 0;
  int num_stages = 1;
  PipelineOptions opts;
  std::vector<const Node*> nodes;
  std::unique_ptr<Executor> ex;
  std::vector<const Value*> params;    // trainable parameters this stage updates
  std::vector<const Value*> momentum;  // their momentum buffers (v)
  std::vector<const Value*> grads;     // their gradients (G)
  std::vector<const Value*> state;     // model state its nodes own (BatchNorm running statistics)
  std::vector<const Value*> saved;     // kept from a forward until that pass's backward
  const Value* input = nullptr;        // the model input (fed only when reads_input)
  const Value* labels = nullptr;       // the labels (fed only when reads_labels)
  bool reads_input = false, reads_labels = false;
  const Value* loss = nullptr;         // the loss, when this stage computes it
  const Value* lr = nullptr;
  const Value* rng_step = nullptr;
  std::vector<Channel*> fwd_in, fwd_out, bwd_in, bwd_out;

  // Allocates slots and weight copies; call once after the fields above are set.
  void prepare();
  // Runs the stage's whole schedule for one training run (the body of its thread).
  void run(RunShared& shared);
  // Master weights (the executor's buffers when the mode keeps no separate copy).
  const HostTensor& master(size_t i) const { return separate_master_ ? master_[i] : ex->tensor(params[i]); }

  std::vector<PassRecord> trace;
  StageStats stats;

 private:
  Status forward(RunShared& sh, int64_t key);
  Status backward(RunShared& sh, int64_t key);
  Status update(RunShared& sh, int64_t step);
  void feed(RunShared& sh, int64_t key);
  void load_master();
  void load_predicted(int s);
  void post_snapshot(RunShared& sh, int64_t step);
  int slot_of(int64_t key) const { return static_cast<int>(key % num_slots_); }
  bool gpipe() const { return opts.schedule == Schedule::kGPipe; }
  int micro() const { return gpipe() ? opts.micro_batches : 1; }

  int num_slots_ = 1;
  bool separate_master_ = false;
  bool buf_is_master_ = true;
  int64_t version_ = 0;  // updates applied to the master weights
  std::vector<HostTensor> master_;
  std::vector<std::vector<HostTensor>> saved_slots_;  // [slot][saved value]
  std::vector<std::vector<HostTensor>> stash_;        // [slot][param]
  std::vector<int64_t> stash_version_;                // [slot]
  std::vector<HostTensor> grad_acc_;                  // GPipe: summed parameter gradients
  HostTensor scratch_x_, scratch_y_;                  // data this stage does not read
  double busy_s_ = 0, fwd_s_ = 0, bwd_s_ = 0, upd_s_ = 0;
};

}  // namespace pt
