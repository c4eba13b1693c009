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
#include "runtime/transport.h"

namespace pt {

// A fixed set of values sent from one stage to another, `capacity` messages at most in flight.
// Messages carry a key (the pass id: mini-batch * M + micro-batch) and are received by key; the
// buffers are allocated once. Blocking calls return false once the channel is aborted.
class Channel : public Link {
 public:
  Channel(std::vector<const Value*> values, int capacity);
  // Waits for a free slot, copies every value from `from` into it, publishes it under `key`.
  bool send(int64_t key, const Executor& from) override;
  // Waits for the message `key`, copies it into `to`'s buffers, frees the slot.
  bool recv(int64_t key, Executor& to) override;
  void abort() override;

 private:
  static constexpr int64_t kFree = -1, kBusy = -2;
  struct Slot {
    int64_t key = kFree;
    std::vector<HostTensor> tensors;
  };
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
  std::vector<Link*> channels;  // aborted on failure, so no stage waits forever
  // Test hook (PIPETRAIN_DEBUG_LOSE_RANK=rank:step[:stop]): this process leaves (exit 1) or
  // stops (SIGSTOP) after the update of this 0-based step; -1: never.
  int64_t debug_lose_step = -1;
  bool debug_stop = false;
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
  std::vector<Link*> fwd_in, fwd_out, bwd_in, bwd_out;
  // One stage per rank: rank 0 alone reads the data and sends the input and labels of every pass
  // to the other stages that read them (data_out); such a stage receives them (data_in).
  std::vector<Link*> data_out;
  Link* data_in = nullptr;

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
  bool feed(RunShared& sh, int64_t key);
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

// The trainer's state (runtime/pipeline.cpp); under MPI (opts.cluster) stages holds every stage's
// description but only this rank's stage has an executor and runs (runtime/pipeline_ranks.cpp).
struct PipelineTrainer::Impl {
  Impl(const Graph& graph, const TrainingGraph& training) : g(graph), tg(training) {}
  const Graph& g;
  const TrainingGraph& tg;
  PipelineOptions opts;
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<std::unique_ptr<Link>> channels;
  std::unique_ptr<Executor> eval;  // the whole forward, for evaluation (rank 0 only under MPI)
  int64_t graph_batch = 0;
  int loss_stage = -1;             // the stage that computes the loss

  // Gathered on rank 0 at the end of train() from the other ranks.
  std::map<std::string, HostTensor> remote_values;  // their master weights and model state
  std::vector<StageStats> remote_stats;
  std::vector<PassRecord> remote_trace;

  bool distributed() const { return opts.cluster != nullptr; }
  int rank() const;
  bool coordinator() const { return rank() == 0; }  // prints, validates, writes the run folder
  bool local(int stage) const { return !distributed() || stage == rank(); }
  void load_eval_weights();
  Expected<EvalResult> run_eval(const Dataset& d);

  // pipeline_ranks.cpp: the wiring and the coordinator messages between ranks.
  Status wire_ranks(const std::map<std::pair<int, int>, std::vector<const Value*>>& fwd,
                    const std::map<std::pair<int, int>, std::vector<const Value*>>& bwd, int capacity);
  // Bytes of stage k's snapshot: its master weights, then its model state.
  size_t snapshot_bytes(int k) const;
  void pack_snapshot(const std::vector<std::pair<const Value*, HostTensor>>& snap, std::vector<char>* out) const;
  void unpack_into_eval(int k, const std::vector<char>& in);
  // Non-zero ranks send their final weights, stats and trace; rank 0 keeps them.
  Status gather_final();
};

// Message kinds of the coordinators (Cluster::send/recv).
enum MessageKind { kMsgLoss = 0, kMsgSnapshot = 1, kMsgFinal = 2, kMsgStats = 3, kMsgTraceCount = 4, kMsgTrace = 5,
                   kMsgHeader = 6 };
// Link kinds between two ranks.
enum LinkKind { kLinkForward = 0, kLinkBackward = 1, kLinkData = 2 };

}  // namespace pt
