// Internals of runtime/pipeline/pipeline.h: the bounded in-process channel between two stages and the
// stage worker (its executor, saved-activation slots, master / stashed / predicted weights and
// the fixed sequence of passes its schedule prescribes). Not a public header.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_set>
#include <vector>

#include "runtime/exec/executor.h"
#include "runtime/loop/rank_coordinator.h"
#include "runtime/loop/lr_schedule.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/data/prefetch.h"
#include "runtime/dist/transport.h"

namespace pt {

// A fixed set of values sent from one stage to another, `capacity` messages at most in flight.
// Messages carry a key (the pass id: mini-batch * M + micro-batch) and are received by key; the
// slot buffers live on the receiving stage's device and are allocated once. Blocking calls
// return false once the channel is aborted.
//
// Ordering on devices with streams (CUDA): the sender's copies run on the channel's own copy
// stream, after an event of the sender's compute stream, so they overlap the sender's next
// kernels; fence() makes the sender's stream wait for them before it overwrites what was sent.
// The receiver's stream waits for the slot's "filled" event before copying out of it, and the
// next sender into that slot waits for its "drained" event. On the CPU every copy is done when
// the call returns and the events are no-ops.
class Channel : public Link {
 public:
  static Expected<std::unique_ptr<Channel>> create(std::vector<const Value*> values, int capacity,
                                                   std::shared_ptr<Device> slot_device);
  ~Channel() override;
  // Waits for a free slot, copies every value from `from` into it (or trades storages, below),
  // publishes it under `key`.
  bool send(int64_t key, Executor& from) override;
  // Waits for the message `key`, copies it into `to`'s buffers (or trades), frees the slot.
  bool recv(int64_t key, Executor& to) override;
  // Between stages that share the host's memory, a message can move without copies: the sender
  // trades its storage of value i for the slot's when sender_gives[i] (the sender reads that value
  // no more before computing it again), and the receiver trades the slot's storage for its own
  // when receiver_takes (Executor::exchange; each side copies instead where it cannot trade).
  // Off by default; the slots are host tensors when the slot device is the host.
  void trade(std::vector<bool> sender_gives, bool receiver_takes) {
    gives_ = std::move(sender_gives);
    takes_ = receiver_takes;
  }
  void abort() override;
  Status fence(const Executor& from) override;
  // A thread that waits here first spins for up to `spin` (PipelineOptions::handoff_spin_us) before
  // it sleeps: a message that arrives meanwhile is taken without a wake-up.
  void set_spin(std::chrono::nanoseconds spin) { spin_ = spin; }
  Handoffs handoffs() const override {  // read once the receiver is done
    Handoffs h = handoffs_;
    h.traded += given_.load(std::memory_order_relaxed);
    return h;
  }

 private:
  explicit Channel(std::vector<const Value*> values) : Link(std::move(values)) {}
  // Waits (holding `lock`) until ready(): spinning first, then on cv_. Every change of the slots
  // bumps changes_ under mu_ and notifies cv_.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready ready);
  void changed();  // caller holds mu_
  Status copy_into_slot(int slot, Executor& from);
  static constexpr int64_t kFree = -1, kBusy = -2;
  struct Slot {
    int64_t key = kFree;
    std::vector<DeviceBuffer> tensors;  // on a device
    std::vector<HostTensor> host;       // on the host (the slot device's memory is the host's)
    TensorView view(size_t i) const { return host.empty() ? tensors[i].view() : host[i].view(); }
    std::unique_ptr<Event> filled, drained;
    std::chrono::steady_clock::time_point sent;  // when it was published under key
  };
  std::shared_ptr<Device> device_;  // of the slots
  std::vector<Slot> slots_;
  // The sender's side (created at the first send, on the sender's device; the slots' "filled"
  // events too, since they are recorded on the copy stream).
  std::shared_ptr<Device> sender_;
  void* copy_stream_ = nullptr;
  std::unique_ptr<Event> computed_, copied_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  std::chrono::nanoseconds spin_{0};
  std::atomic<uint64_t> changes_{0};
  Handoffs handoffs_;  // the receiver's (one thread)
  std::vector<bool> gives_;  // trade()
  bool takes_ = false;
  std::atomic<int64_t> given_{0};  // values the sender traded (its thread)
};

class Stage;
// Which of `values`, sent by stage `from` on one of its links, it may hand over with their storage
// (Channel::trade): values it sends on no other link and reads in none of its later passes (not
// kept for its backward or its W, not its loss or its weights).
std::vector<bool> handed_over(const Stage& from, const StageLayout& layout, const std::vector<const Value*>& values);

// The sample order of every epoch, drawn on demand exactly as the single-stage trainer draws it
// (one shuffle per epoch from one seeded RNG), so memory does not grow with --steps; the newest
// `keep` epochs are kept. Thread-safe.
class EpochOrders {
 public:
  // Draws epochs from `first` on, starting from `order` and `rng`.
  void init(std::vector<int64_t> order, std::mt19937_64 rng, int64_t first, bool shuffle, int64_t keep);
  // Declares epoch `epoch`'s order as given (a resume in the middle of that epoch); call after init.
  void set_drawn(int64_t epoch, std::vector<int64_t> order, const std::mt19937_64& rng_after);
  std::shared_ptr<const std::vector<int64_t>> get(int64_t epoch);
  // The order of `epoch` and the RNG as it stood after drawing it (what a checkpoint records).
  std::pair<std::vector<int64_t>, std::string> state(int64_t epoch);

 private:
  struct Drawn {
    std::shared_ptr<const std::vector<int64_t>> order;
    std::mt19937_64 rng_after;
  };
  std::mutex mu_;
  std::map<int64_t, Drawn> drawn_;
  std::vector<int64_t> order_;
  std::mt19937_64 rng_;
  int64_t next_ = 0, keep_ = 4;
  bool shuffle_ = true;
};

struct RunShared;

// The R replicas of one stage average their gradients of each mini-batch here (in one process,
// through shared memory): every replica arrives with its gradient buffers, each sums its share of
// the elements over the replicas in replica order (r = 0, 1, ...) into every replica's buffers,
// and, once all have summed, each divides its own by R: the same arithmetic as an all-reduce sum
// followed by the division, so that every replica's buffers hold bit-identical means. Gradients
// on a device whose memory the host cannot address are staged through host copies.
class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // Replica `r`'s gradients `grads` (on `dev`, with stream `stream`): averaged over the replicas in
  // place. Every replica calls it once per update, in the same order; waits end at sh.abort.
  virtual Status allreduce(RunShared& sh, int r, const std::vector<TensorView>& grads, Device& dev, void* stream) = 0;
};

class ReplicaReducer final : public GradientReducer {
 public:
  explicit ReplicaReducer(int replicas) : replicas_(replicas), views_(replicas) {}
  Status allreduce(RunShared& sh, int r, const std::vector<TensorView>& grads, Device& dev, void* stream) override;

 private:
  bool barrier(RunShared& sh);
  const int replicas_;
  std::vector<std::vector<TensorView>> views_;  // [replica][gradient] host-addressable
  int count_ = 0;                               // guarded by sh.mu
  int64_t generation_ = 0;
};

// One stage per rank (runtime/pipeline/ranks.cpp): the replicas of a stage are ranks of one group
// (Cluster::split_groups), and the sum is MPI's all-reduce (then the division by R).
std::unique_ptr<GradientReducer> make_rank_reducer(Cluster& cluster, int replicas);

// Batches a stage's prefetch thread gathers ahead of its forwards.
constexpr int kPrefetchDepth = 2;

// Shared between the coordinator (train()) and the stage threads of one run. The stage threads
// run one segment at a time: steps [first_step, end) (0-based), starting and ending with the
// pipeline empty. Segments end at checkpoint steps, at the end of the run, or earlier when a stop
// is requested: end then drops to the first mini-batch no stage has started yet.
struct RunShared {
  const Dataset* data = nullptr;
  EpochOrders* orders = nullptr;
  int64_t per_epoch = 1;
  int64_t total_steps = 0;
  int64_t first_step = 0;  // of the current segment
  LrSchedule lr;           // the rate of step t (1-based) is lr.at(t)
  int64_t mini_batch = 0;  // samples per step (over every replica)
  int64_t graph_batch = 0;  // samples per pass
  int replicas = 1;         // replica r reads samples [r, r + 1) * mini_batch / replicas of each step
  int local_replicas = 1;   // the replicas of this process (in one process: all; under MPI: 1)
  // Under MPI, a stage of replica r > 0 receives its batches from rank 0 (which reads the data):
  // the input and labels of pass `key` into x / y (null: not read here); false once aborted.
  std::function<bool(int64_t key, HostTensor* x, HostTensor* y)> recv_batch;
  // The first sample (in the epoch's order) of micro-batch j of replica r, in_epoch steps into the epoch.
  int64_t first_sample(int64_t in_epoch, int r, int64_t j) const {
    return in_epoch * mini_batch + r * (mini_batch / replicas) + j * graph_batch;
  }
  // Validation needs the weights after 0-based step s at epoch ends, every eval_every steps and
  // after the last step (only when there is a validation set).
  bool validate = false;
  int64_t eval_every = 0;
  bool snapshot_at(int64_t s) const {
    return validate && (s % per_epoch == per_epoch - 1 || s == total_steps - 1 || (eval_every > 0 && (s + 1) % eval_every == 0));
  }
  std::atomic<bool> abort{false};
  std::chrono::steady_clock::time_point t0;

  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, double> losses;   // [pass id * local_replicas + replica], filled by the loss stages, erased when consumed
  // [step] -> per-stage snapshot of (value, tensor), posted after that step's update.
  std::map<int64_t, std::vector<std::vector<std::pair<const Value*, HostTensor>>>> snapshots;
  std::map<int64_t, int> snapshot_count;
  Status error;  // the first stage failure
  std::vector<Link*> channels;  // aborted on failure, so no stage waits forever
  // --clip-grad-norm (0: off). GPipe: the stages' sums of squared gradients of mini-batch `step`
  // are added (in stage order, so the result does not depend on timing) by sum_over_stages; under
  // MPI through sum_across_ranks (set by runtime/pipeline/ranks.cpp). 1F1B: each stage its own.
  double clip_grad_norm = 0;
  // Under MPI: the parts of this rank's stages (in stage order) in, the sum over every stage of
  // the replica (added in stage order at device 0's rank) out.
  std::function<Expected<double>(int64_t step, const std::vector<double>& parts)> sum_across_ranks;
  // Stage `stage`'s part of mini-batch `step`'s sum (posted once its gradients are final), then
  // the sum once every stage posted (waits; each of the num_stages stages reads it once).
  void post_norm_part(int64_t step, int stage, int num_stages, double local);
  Expected<double> sum_over_stages(int64_t step);
  Expected<std::vector<double>> wait_norm_parts(int64_t step);  // the parts themselves (one read)
  std::map<int64_t, std::pair<std::vector<double>, int>> norm_parts;  // [step] -> (by stage, readers left)
  // Under MPI with several stages per rank (a device's chunks): [stage] its position among this
  // rank's stages (-1: another rank's) and their count; their parts meet in norm_parts first, and
  // the first of them to clip asks the other ranks once (rank_totals keeps the answer for the rest).
  std::vector<int> rank_position;
  int rank_stages = 1;
  std::map<int64_t, std::pair<double, int>> rank_totals;  // [step] -> (sum, readers left)
  Expected<double> rank_norm_total(int64_t step, double local);
  void fail(Status s);

  // A stage about to start the forward of mini-batch `step` (GPipe: its micro-batches) asks
  // first; false when the segment ends before it. The stages run at most `lead` mini-batches ahead
  // of the training loop (consumed()): a loop slowed by validation or a loaded machine would
  // otherwise leave losses and snapshots piling up without bound, and a stop request would first
  // wait for that backlog (a stopped 2-stage run took minutes to exit under load).
  bool claim(int64_t step);
  // The training loop has taken mini-batch `step`'s losses.
  void consumed(int64_t step);
  int64_t lead = 1 << 30;
  // One stage per rank (runtime/pipeline/ranks.cpp): rank 0 passes every answer of claim() on
  // (tell_claim), the other ranks take rank 0's answer for their own (ask_claim; false once the
  // run is aborted), so that a stop on rank 0 ends every rank's segment at the same mini-batch.
  std::function<void(int64_t step, bool granted)> tell_claim;
  std::function<bool(int64_t step)> ask_claim;
  // Whether mini-batch `s` has been claimed here or the segment ends at or before it (caller
  // holds mu; claim() notifies cv).
  bool settled(int64_t s) const { return s < claimed_ || s >= end_; }
  bool past_end(int64_t s) const { return s >= end_; }  // caller holds mu
  // Ends the segment after the mini-batches already started; returns the new end.
  int64_t stop_early();
  int64_t end_step();  // the current segment's end (exclusive)
  void set_segment(int64_t first, int64_t end);

 private:
  int64_t end_ = 0, claimed_ = 0, consumed_ = 0;  // guarded by mu
};

class Stage {
 public:
  int index = 0;
  int num_stages = 1;
  int replica = 0;                       // which copy of the pipeline (PipelineOptions::replicas)
  GradientReducer* reducer = nullptr;    // with replicas: where stage `index` averages its gradients
  PipelineOptions opts;
  std::vector<const Node*> nodes;
  std::unique_ptr<Executor> ex;
  std::vector<const Value*> params;    // trainable parameters this stage updates
  std::vector<const Node*> updates;    // their update nodes (SGDMomentum, SGD, Adam)
  std::vector<std::vector<const Value*>> opt_state;  // their optimizer state (the updates' kState inputs)
  std::vector<const Value*> grads;     // their gradients (G)
  std::vector<const Value*> state;     // model state its nodes own (BatchNorm running statistics)
  std::vector<const Value*> saved;     // kept from a forward until that pass's backward
  // Activation recomputation (--recompute; the plan's StagePlan::recompute): `saved` holds only
  // the stage's inputs, and each backward first reruns the forward of its pass (recompute_forward).
  bool recompute = false;
  // The update in the backward (StagePlan::update_in_backward): the executor's node list has each
  // update right behind its gradient's producer (interleave_updates), the backward pass runs them,
  // and update() only finishes the step (master copy, version, readers, snapshot).
  bool update_in_backward = false;
  const Value* input = nullptr;        // the model input (fed only when reads_input)
  const Value* labels = nullptr;       // the labels (fed only when reads_labels)
  bool reads_input = false, reads_labels = false;
  // A model with several data inputs: the further ones this stage's nodes read, with their index
  // k in Dataset::more; gathered and uploaded by feed(), or received over the data link (MPI).
  std::vector<std::pair<size_t, const Value*>> more_inputs;
  std::vector<const Value*> graph_more_inputs;  // every further input (the data rank gathers them all)
  const Value* loss = nullptr;         // the loss, when this stage computes it
  const Value* lr = nullptr;
  const Value* rng_step = nullptr;
  std::vector<Link*> fwd_in, fwd_out, bwd_in, bwd_out;
  // The actions this stage runs (its program in PipelineOptions::program; interleaved stages:
  // its chunk's actions alone, ScheduleIR::chunk_program, kept in own_program).
  const StageProgram* program = nullptr;
  StageProgram own_program;
  // A split backward (zero-bubble schedules, the program has I and W): the nodes of its
  // weight-gradient part W (weight_gradient_nodes: what the gradients sent upstream do not need),
  // and what W reads that the forward, I or other stages computed, kept per pass from I to W.
  std::unordered_set<const Node*> w_nodes;
  std::vector<const Value*> w_state;
  // One stage per rank: rank 0 alone reads the data and sends the input and labels of every pass
  // to the other stages that read them (data_out); such a stage receives them (data_in).
  std::vector<Link*> data_out;
  Link* data_in = nullptr;
  // Shared weights (runtime/pipeline/shared_weights.cpp): a parameter updated here (its owner) and read by
  // later stages. The owner sends each reader, for every pass, the version that reader uses when
  // the weight is its own (SpecTrain predicted with the reader's staleness); the readers' gradient
  // contributions come back through the ordinary gradient links into the graph's sum.
  struct WeightLink {
    Link* link = nullptr;
    int reader = 0;
    bool backward = false;       // serves the reader's backward passes (1F1B); else its forwards
    std::vector<size_t> params;  // indices into params, in the link's value order
    int64_t next = 0;            // the next mini-batch to serve in this segment (2BW-predict: message)
  };
  std::vector<WeightLink> weights_out;                   // owner side
  std::vector<Link*> weights_fwd_in, weights_bwd_in;     // reader side

  // Allocates slots and weight copies on the executor's device; call once after the fields
  // above are set.
  Status prepare();
  // Bytes of the stage's own buffers beside its executor: stashed versions, GPipe's gradient sums
  // (the working copies, 2BW's previous weights among them, and pass slots are the executor's).
  size_t held_bytes() const;
  // Clears the trace and the statistics (at the start of PipelineTrainer::train, which runs the
  // steps [start, total): the steady state's window opens after the update of the first fifth's last).
  void begin_train(int64_t start, int64_t total);
  // Runs the stage's schedule for the current segment of the run (the body of its thread):
  // run_device over this stage alone.
  void run(RunShared& shared);
  // One segment in parts, for a thread that runs several stages (run_device): its start (the
  // batch prefetch, the slots), one action of its program, its end (reports `st` once).
  void begin_segment(RunShared& sh);
  Status act(RunShared& sh, const Step& step);
  void end_segment(RunShared& sh, Status st);
  // The gradients of mini-batch `step` final for its update (micro-batches summed, replicas
  // averaged) and, with --clip-grad-norm, this stage's part of the norm posted; update() calls it
  // unless it ran already for `step`.
  Status finish_gradients(RunShared& sh, int64_t step);
  // Master weight i, copied to the host (from the executor's buffer when the mode keeps no
  // separate copy).
  Expected<HostTensor> master(size_t i) const;
  // The same, taken: the stage's own storage of it is released (a CPU executor's buffer moved out,
  // not copied), so that gathering every weight for the export costs no second copy. The stage
  // cannot train afterwards.
  Expected<HostTensor> take_master(size_t i);
  // Replaces master weight i (a resume; nothing may be in flight); updates_done: its version.
  Status set_master(size_t i, const HostTensor& t);
  void set_version(int64_t updates_done) { version_ = updates_done; }
  // After a resume under 2BW: a checkpoint holds the master alone, not the version before it, so
  // the first mini-batch reads the checkpoint's weights (the working copies set to the master),
  // as a run's first mini-batch reads the initial ones (they held the source model's weights).
  Status restart_two_bw();
  // Folds the time of the passes so far into stats (after each segment).
  void finish_stats();

  std::vector<PassRecord> trace;
  StageStats stats;

 private:
  Status forward(RunShared& sh, int64_t key);
  // B (input_part false) or, for a split backward, its part I.
  Status backward(RunShared& sh, int64_t key, bool input_part);
  Status weight_grad(RunShared& sh, int64_t key);  // W of a split backward
  Status accumulate_grads();  // synchronous schedules: adds the pass's gradients to the mini-batch's
  PassRecord begin_record(int64_t key, bool backward, char part) const;
  Status select_saved(int slot);  // the saved activations' storage of pass slot `slot`
  // Reruns the forward (and loss) nodes of the pass whose inputs are in the executor, with the
  // weights its forward used, leaving the model state (BatchNorm running statistics) as it was.
  Status recompute_forward(int slot, int64_t key);
  Status update(RunShared& sh, int64_t step);
  Status feed(RunShared& sh, int64_t key);
  Status fence_sends();  // this stage's stream waits until its sends have read their values
  Status set_lr(RunShared& sh, int64_t step);  // the rate of 0-based step `step`
  Status load_master();
  Status load_predicted(int s);
  Status post_snapshot(RunShared& sh, int64_t step);
  // Shared weights (runtime/pipeline/shared_weights.cpp).
  void begin_shared_segment(int64_t first);
  Status serve_readers(RunShared& sh);  // owner: sends every version that is due
  Status recv_weights(int64_t key, bool backward);  // reader: before a pass runs
  int64_t shared_version_for(const WeightLink& w, int64_t step) const;
  Status load_version_for(RunShared& sh, const WeightLink& w, int64_t step);
  Status post_norm_part(RunShared& sh, int64_t step);  // runtime/pipeline/clip.cpp
  Status clip_gradients(RunShared& sh, int64_t step);  // scales by the norm of every stage
  Expected<DeviceBuffer> buffer_like(const Value* v) const;  // on the executor's device
  bool sync() const { return synchronous(opts.schedule, opts.weights); }
  int micro() const { return micro_batched(opts.schedule, opts.weights) ? opts.micro_batches : 1; }
  bool two_bw() const { return opts.weights == WeightMode::k2BW; }
  bool two_bw_predict() const { return opts.weights == WeightMode::k2BWPredict; }
  // 2BW with prediction: the weights after update `step` (the master once it ran, else predicted
  // one step ahead); returns the prediction's distance (0 or 1).
  Expected<int> load_two_bw_predict(int64_t step);
  // 2BW: the version the passes of mini-batch `step` read (the weights after update step - 1) into
  // the executor: selects the master or the working copy (the version before the latest update).
  Status load_two_bw(int64_t step);
  // Slots of the passes in flight, by pass key: taken by a forward, given back by its B or I;
  // the W state's likewise, taken by I, given back by W.
  struct SlotPool {
    std::map<int64_t, int> of;
    std::vector<int> free;
    void reset(int n);
    Expected<int> take(int64_t key, int stage);
    int at(int64_t key) const { return of.at(key); }
    void give(int64_t key);
  };

  int num_slots_ = 1, num_w_slots_ = 0;
  // The saved activations have a storage per pass in flight (else, one pass in flight, they stay in
  // the executor's own from F to B).
  bool slot_saved_ = false;
  SlotPool slots_, w_slots_;
  int accumulated_ = 0;       // passes of this mini-batch in grad_acc_
  int64_t grads_ready_ = -1;  // the mini-batch finish_gradients ran for
  double norm_sq_ = 0;        // its squared gradient norm here (--clip-grad-norm)
  // Modes whose passes read other versions than the master (SpecTrain's prediction, stashed,
  // 2BW's previous): each parameter has a second executor storage, the working copy (storage 0),
  // where those versions are written and read in place; the master is the parameter's own storage,
  // which the updates write in place. Moving between them selects a storage: nothing is copied.
  bool separate_master_ = false;
  bool buf_is_master_ = true;  // every parameter's own storage (the master) selected
  int64_t version_ = 0;  // updates applied to the master weights
  // 2BW-predict: the mini-batch whose prediction the working copies hold (-1: none, or they were
  // written since); every writer of the working copies resets it.
  int64_t working_prediction_ = -1;
  int64_t segment_first_ = 0, forwarded_end_ = 0;  // shared weights: this segment's first step, 1 + last forwarded
  // The master of parameter i (its own storage), whichever storage is selected.
  TensorView master_view(size_t i) const { return ex->storage_view(params[i], -1); }
  // Selects the working copy of parameter i (separate_master_): what copy_in writes next.
  Status use_working(size_t i);
  Status use_master(size_t i) { return separate_master_ ? ex->select_storage(params[i], -1) : Status::ok(); }
  // 2BW: the master of parameter i into its working copy (the version the passes of the next
  // mini-batch read beside the master), the master selected.
  Status copy_master_to_working(size_t i);
  // Copies `version` ([param]) into the working copies and selects them.
  Status load_working(const std::vector<DeviceBuffer>& version);
  // On the executor's device.
  std::vector<std::vector<DeviceBuffer>> stash_;        // [slot][param]
  std::vector<int64_t> stash_version_;                  // [slot]
  // --recompute under 1F1B SpecTrain / stale: the weights each pass's forward read, [slot][param]
  // (the master weights move on before its backward); the model state around a rerun forward.
  std::vector<std::vector<DeviceBuffer>> fwd_weights_;
  std::vector<DeviceBuffer> state_copy_;
  std::vector<DeviceBuffer> grad_acc_;                  // micro-batches (synchronous, 2BW): summed gradients
  // 2BW, a reader of weights shared with an earlier stage: what it receives (shared_in_) and the
  // versions of mini-batches i and i+1 ([i % 2][value]), since the passes of two overlap.
  std::vector<const Value*> shared_in_;
  std::vector<std::vector<DeviceBuffer>> shared_versions_;
  int64_t shared_loaded_ = -1;  // the mini-batch whose version the executor holds (2BW-predict: the message)
  // 2BW-predict: the message (shared_message) each of shared_versions_ holds, -1 for none.
  std::array<int64_t, 2> shared_held_ = {-1, -1};
  // 2BW-predict's messages of a shared weight, owner to reader, one flow: 2i + 1 is version i (what
  // the reader's passes of mini-batch i read once its own update i-1 is done), 2i the prediction
  // of version i from version i-1 (what its forwards of mini-batch i read before that update).
  static int64_t shared_message(int64_t step, bool predicted) { return 2 * step + (predicted ? 0 : 1); }
  Status serve_two_bw_predict(RunShared& sh, WeightLink& w);
  Status recv_two_bw_predict(int64_t key);
  std::unique_ptr<BatchPrefetcher> prefetch_;         // the segment's batches, when this stage reads data
  double busy_s_ = 0, fwd_s_ = 0, bwd_s_ = 0, wgrad_s_ = 0, upd_s_ = 0;
  double wait_s_ = 0;  // in passes, waiting for their inputs (StageStats::wait_fraction)
  double fwd_cpu_s_ = 0, bwd_cpu_s_ = 0, upd_cpu_s_ = 0;  // the stage thread's CPU time in them
  // Where a pass's busy time starts: the wall clock and the thread's CPU clock.
  struct BusyClock {
    BusyClock();
    std::chrono::steady_clock::time_point wall;
    double cpu;
  };
  // Adds the time since `since` to busy_s_ and *wall, its CPU time to *cpu; returns the wall time.
  double count_busy(const BusyClock& since, double* wall, double* cpu);
  // The steady state (StageStats): the sums above as they stood at the end of the update of
  // mini-batch steady_from_ - 1, and the end of the last update.
  struct Sums {
    double busy = 0, fwd = 0, bwd = 0, wgrad = 0, upd = 0, wait = 0, fwd_cpu = 0, bwd_cpu = 0, upd_cpu = 0;
    // The messages it waited for (Link::handoffs of its links in): activations from earlier
    // stages, gradients from later ones.
    Link::Handoffs fwd_in, bwd_in;
    int64_t updates = 0;
    std::chrono::steady_clock::time_point t;
  };
  Sums sums() const;  // as they stand (t: the end of the last update)
  int64_t steady_from_ = -1;
  std::optional<Sums> steady_mark_;
  std::chrono::steady_clock::time_point last_update_end_;
};

// The body of one device's thread: `program` (a program over its chunks, ScheduleIR::stages of
// one device) run for the current segment, each action by chunks[action.chunk]; interleaved stages
// give a device several chunks, every other schedule one.
void run_device(RunShared& sh, const std::vector<Stage*>& chunks, const StageProgram& program);

// The trainer's state (runtime/pipeline/pipeline.cpp); under MPI (opts.cluster) stages holds every stage's
// description but only this rank's stage has an executor and runs (runtime/pipeline/ranks.cpp).
struct PipelineTrainer::Impl {
  Impl(const Graph& graph, const TrainingGraph& training) : g(graph), tg(training) {}
  const Graph& g;
  const TrainingGraph& tg;
  PipelineOptions opts;
  std::vector<std::unique_ptr<Stage>> stages;  // replica 0's (the ones reported, saved and exported)
  // Replicas 1.. (PipelineOptions::replicas) in this process: [replica - 1][stage]. Their weights
  // equal replica 0's after every update; their model state (BatchNorm statistics) is their own,
  // and replica 0's is the model's (as PyTorch's DistributedDataParallel keeps rank 0's buffers).
  std::vector<std::vector<std::unique_ptr<Stage>>> more_replicas;
  std::vector<std::unique_ptr<GradientReducer>> reducers;  // [stage] with replicas (under MPI: this rank's)
  std::vector<std::unique_ptr<Link>> channels;
  std::vector<Link*> shared_links;  // MPI: [layout weight flow] this rank's end of its weight link (null: not an end)
  std::unique_ptr<Executor> eval;  // the whole forward, for evaluation (rank 0 only under MPI)
  int64_t graph_batch = 0;
  int loss_stage = -1;             // the stage that computes the loss
  std::vector<std::string> plan_lines;  // Checkpoint::plan

  // Gathered on rank 0 at the end of train() from the other ranks.
  std::map<std::string, HostTensor> remote_values;  // their master weights and model state
  std::vector<StageStats> remote_stats;
  std::vector<PassRecord> remote_trace;

  bool distributed() const { return opts.cluster != nullptr; }
  // Every stage this process runs, of every replica (replica 0's first).
  std::vector<Stage*> local_stages() const;
  int rank() const;
  bool coordinator() const { return rank() == 0; }  // prints, validates, writes the run folder
  bool local(int stage) const { return !distributed() || device_of(stage) == my_device(); }
  // Ranks under MPI are devices: device d of replica r is rank d * R + r (a device's replicas side
  // by side, so that the all-reduce, the heaviest traffic, stays between neighbouring ranks: on one
  // node when ranks are placed by node). Without chunks (interleaved stages, ZB-V) device d runs
  // stage d; with them, the program's virtual stages of device d (ScheduleIR::device_of).
  int device_of(int stage) const { return device_of_stage.empty() ? stage : device_of_stage.at(stage); }
  int my_device() const { return rank() / opts.replicas; }
  int my_replica() const { return distributed() ? rank() % opts.replicas : 0; }
  int rank_of(int stage, int replica) const { return device_of(stage) * opts.replicas + replica; }
  // The stages device `d` runs, in stage order.
  std::vector<int> stages_of_device(int d) const;
  std::vector<int> device_of_stage;  // [stage] (empty: stage k on device k)
  Status load_eval_weights();  // into the evaluator's host copies (run_eval uploads them)
  Expected<EvalResult> run_eval(const Dataset& d);
  std::string describe() const;  // "4 stages, 1F1B spectrain (paper)" (checkpoints record it)
  // The tensors of a checkpoint (checkpoint_values(g) by name: master weights, momentum, state).
  Expected<std::map<std::string, HostTensor>> checkpoint_tensors() const;
  // Puts checkpoint tensors (checked by check_checkpoint) into the stages, at version `step`.
  Status restore_tensors(const std::map<std::string, HostTensor>& t, int64_t step);

  // Building (pipeline.cpp, PipelineTrainer::create): the stages of one replica with their
  // executors, the channels between them, the reducers of the replicas, the evaluator.
  Expected<std::unique_ptr<Stage>> describe_stage(const Plan& plan, const StageLayoutStage& ls, int replica);
  Status open_stage_executor(Stage& st, int num_stages);
  Status build_replica(const Plan& plan, int replica, std::vector<std::unique_ptr<Stage>>* out);
  Status attach_shared(std::vector<std::unique_ptr<Stage>>& of, const WeightFlow& f, Link* l);
  Status wire_replica(const StageLayout& layout, std::vector<std::unique_ptr<Stage>>& of, int capacity);
  Status attach_reducers(int num_stages);
  Status make_evaluator();

  // ranks.cpp: the wiring between ranks, and what the MPI RankCoordinator packs.
  // Every rank walks the layout's flows in the same order, so a link's number names it on both ends.
  Status wire_ranks(const StageLayout& layout, int capacity);
  // Bytes of stage k's snapshot: its master weights, then its model state.
  size_t snapshot_bytes(int k) const;
  void pack_snapshot(const std::vector<std::pair<const Value*, HostTensor>>& snap, std::vector<char>* out) const;
  void unpack_into_eval(int k, const std::vector<char>& in);
  // What stage k contributes to a checkpoint, in a fixed order: each parameter and its momentum,
  // then the state; packed from / unpacked into a map by name (checkpoint_tensors()).
  std::vector<const Value*> checkpoint_values_of(int k) const;
  void pack_values(const std::vector<const Value*>& vs, const std::map<std::string, HostTensor>& t,
                   std::vector<char>* out) const;
  void unpack_values(const std::vector<const Value*>& vs, const std::vector<char>& in,
                     std::map<std::string, HostTensor>* t) const;
};

// Message kinds of the coordinators (Cluster::send/recv).
enum MessageKind { kMsgLoss = 0, kMsgSnapshot = 1, kMsgFinal = 2, kMsgStats = 3, kMsgTraceCount = 4, kMsgTrace = 5,
                   kMsgHeader = 6, kMsgCheckpoint = 7, kMsgClaim = 8, kMsgSegmentEnd = 9,
                   kMsgNorm = 10, kMsgBatchX = 11, kMsgBatchY = 12 };
// Link kinds between two ranks.
enum LinkKind { kLinkForward = 0, kLinkBackward = 1, kLinkData = 2, kLinkWeightsForward = 3, kLinkWeightsBackward = 4 };

// One stage per rank of impl.opts.cluster (runtime/pipeline/ranks.cpp).
std::unique_ptr<RankCoordinator> make_mpi_coordinator(PipelineTrainer::Impl& impl);

}  // namespace pt
