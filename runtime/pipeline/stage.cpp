// The stage worker of the pipelined trainer: the channel between stages, and one stage's fixed
// sequence of forwards, backwards and updates with its weight versions.
#include "runtime/pipeline/stage.h"

#include "runtime/exec/memory.h"
#include "runtime/exec/optimizer.h"
#include "runtime/loop/training_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include <time.h>

#include <omp.h>

namespace pt {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The CPU time of the calling thread: what a stage thread computed, without the time its core
// served other threads (stages sharing cores) or it waited for one.
double thread_cpu_seconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

Stage::BusyClock::BusyClock() : wall(std::chrono::steady_clock::now()), cpu(thread_cpu_seconds()) {}

double Stage::count_busy(const BusyClock& since, double* wall, double* cpu) {
  const double busy = seconds_since(since.wall);
  busy_s_ += busy;
  *wall += busy;
  *cpu += thread_cpu_seconds() - since.cpu;
  return busy;
}

namespace {

// The error a pass returns when the run was aborted elsewhere (never reported itself).
Status aborted() { return Status(StatusCode::kInternal, "pipeline aborted"); }

}  // namespace

namespace {

// One iteration of a busy wait: tells the core (and a hyperthread sibling) that this thread spins.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

// ---- Channel ----

Expected<std::unique_ptr<Channel>> Channel::create(std::vector<const Value*> values, int capacity,
                                                   std::shared_ptr<Device> slot_device) {
  std::unique_ptr<Channel> c(new Channel(std::move(values)));
  c->device_ = std::move(slot_device);
  c->slots_.resize(std::max(1, capacity));
  const bool host = c->device_->host_memory();
  for (Slot& s : c->slots_) {
    for (const Value* v : c->values_) {
      if (host) {
        try {
          s.host.emplace_back(v->dtype, v->dims);
        } catch (const std::bad_alloc&) {
          return internal_error(out_of_memory_message("a channel slot of '" + v->name + "'", v->bytes()));
        }
        continue;
      }
      ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(c->device_, v->dtype, v->dims, nullptr));
      s.tensors.push_back(std::move(b));
    }
    ASSIGN_OR_RETURN(s.drained, c->device_->create_event());
  }
  // The slots were zeroed on the default stream: done before any copy stream uses them.
  RETURN_IF_ERROR(c->device_->synchronize(nullptr));
  return c;
}

Channel::~Channel() {
  // Nothing may still copy into or out of the slots when they are freed.
  for (Slot& s : slots_) {
    if (s.filled) (void)s.filled->wait();
    if (s.drained) (void)s.drained->wait();
  }
  if (copied_) (void)copied_->wait();
  if (sender_) sender_->destroy_stream(copy_stream_);
}

Status Channel::copy_into_slot(int slot, Executor& from) {
  Device& dev = *from.device();
  if (!sender_) {  // the first send: the sender's copy stream and events
    ASSIGN_OR_RETURN(copy_stream_, dev.create_stream());
    sender_ = from.device();
    ASSIGN_OR_RETURN(computed_, dev.create_event());
    ASSIGN_OR_RETURN(copied_, dev.create_event());
    for (Slot& s : slots_) {
      ASSIGN_OR_RETURN(s.filled, dev.create_event());
    }
  }
  Slot& s = slots_[slot];
  // After the kernels that computed the values, and after the last receiver of this slot.
  RETURN_IF_ERROR(computed_->record(from.stream()));
  RETURN_IF_ERROR(computed_->block(copy_stream_));
  RETURN_IF_ERROR(s.drained->block(copy_stream_));
  for (size_t i = 0; i < values_.size(); ++i) {
    if (i < gives_.size() && gives_[i] && !s.host.empty() && from.exchange(values_[i], s.host[i])) {
      given_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const TensorView src = std::as_const(from).view(values_[i]);
    const TensorView dst = s.view(i);
    if (src.bytes() != dst.bytes()) return internal_error("channel: '" + values_[i]->name + "' changed size");
    RETURN_IF_ERROR(dev.copy(dst.data, *device_, src.data, dev, src.bytes(), copy_stream_));
  }
  RETURN_IF_ERROR(s.filled->record(copy_stream_));
  return copied_->record(copy_stream_);
}

Status Channel::fence(const Executor& from) { return copied_ ? copied_->block(from.stream()) : Status::ok(); }

void Channel::changed() { changes_.fetch_add(1, std::memory_order_release); }

template <class Ready>
void Channel::wait(std::unique_lock<std::mutex>& lock, Ready ready) {
  if (ready()) return;
  if (spin_.count() > 0) {
    // The first tenth of the spin holds the core; the rest yields it at each turn to any other
    // runnable thread of the process (the training loop, the data prefetchers), which a thread
    // spinning on every core would otherwise keep waiting.
    const auto start = std::chrono::steady_clock::now(), until = start + spin_, yield_after = start + spin_ / 10;
    while (!ready()) {
      const uint64_t seen = changes_.load(std::memory_order_acquire);
      lock.unlock();
      bool late = false;
      for (auto now = start; changes_.load(std::memory_order_acquire) == seen && !(late = now >= until);
           now = std::chrono::steady_clock::now()) {
        if (now < yield_after) cpu_relax();
        else std::this_thread::yield();
      }
      lock.lock();
      if (late) break;
    }
  }
  cv_.wait(lock, ready);
}

bool Channel::send(int64_t key, Executor& from) {
  int slot = -1;
  {
    std::unique_lock<std::mutex> lock(mu_);
    wait(lock, [&] {
      if (aborted_) return true;
      for (Slot& s : slots_)
        if (s.key == kFree) return true;
      return false;
    });
    if (aborted_) return false;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].key == kFree) {
        slot = static_cast<int>(i);
        break;
      }
    slots_[slot].key = kBusy;
  }
  if (Status st = copy_into_slot(slot, from); !st.is_ok()) {
    error_ = st;
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[slot].key = key;
    slots_[slot].sent = std::chrono::steady_clock::now();
    changed();
  }
  cv_.notify_all();
  return true;
}

bool Channel::recv(int64_t key, Executor& to) {
  Slot* slot = nullptr;
  const auto asked = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point sent;
  {
    std::unique_lock<std::mutex> lock(mu_);
    wait(lock, [&] {
      if (aborted_) return true;
      for (Slot& s : slots_)
        if (s.key == key) return true;
      return false;
    });
    if (aborted_) return false;
    for (Slot& s : slots_)
      if (s.key == key) {
        slot = &s;
        break;
      }
    slot->key = kBusy;
    sent = slot->sent;
  }
  Status st = slot->filled->block(to.stream());
  for (size_t i = 0; i < values_.size() && st.is_ok(); ++i)
    if (takes_ && !slot->host.empty() && to.exchange(values_[i], slot->host[i])) ++handoffs_.traded;
    else st = to.copy_in(values_[i], slot->view(i), *device_);
  if (st.is_ok()) st = slot->drained->record(to.stream());
  if (!st.is_ok()) {
    error_ = st;
    return false;
  }
  if (asked < sent) {  // the receiver was waiting: the time from the send to holding the message
    handoffs_.add(std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot->key = kFree;
    changed();
  }
  cv_.notify_all();
  return true;
}

std::vector<bool> handed_over(const Stage& from, const StageLayout& layout, const std::vector<const Value*>& values) {
  std::unordered_map<const Value*, int> links;  // how many of from's links send each value
  for (const auto* flows : {&layout.activations, &layout.gradients})
    for (const ValueFlow& f : *flows)
      if (f.from == from.index)
        for (const Value* v : f.values) ++links[v];
  std::unordered_set<const Value*> read_later(from.saved.begin(), from.saved.end());
  read_later.insert(from.w_state.begin(), from.w_state.end());
  if (from.loss) read_later.insert(from.loss);
  std::vector<bool> gives;
  for (const Value* v : values)
    gives.push_back(v->kind == ValueKind::kActivation && !v->data && links[v] == 1 && !read_later.count(v));
  return gives;
}

void Channel::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    changed();
  }
  cv_.notify_all();
}

void RunShared::fail(Status s) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (error.is_ok()) error = std::move(s);
    abort = true;
  }
  for (Link* c : channels) c->abort();
  cv.notify_all();
}

// ---- ReplicaReducer ----

bool ReplicaReducer::barrier(RunShared& sh) {
  std::unique_lock<std::mutex> lock(sh.mu);
  const int64_t gen = generation_;
  if (++count_ == replicas_) {
    count_ = 0;
    ++generation_;
    lock.unlock();
    sh.cv.notify_all();
    return !sh.abort;
  }
  sh.cv.wait(lock, [&] { return sh.abort || generation_ != gen; });
  return !sh.abort;
}

Status ReplicaReducer::allreduce(RunShared& sh, int r, const std::vector<TensorView>& grads, Device& dev, void* stream) {
  const int R = replicas_;
  // Host-addressable copies of the gradients (on the CPU the buffers themselves).
  const bool staged = dev.kind() != DeviceKind::kCpu;
  std::vector<HostTensor> host;
  if (staged) {
    RETURN_IF_ERROR(dev.synchronize(stream));
    for (const TensorView& g : grads) {
      host.emplace_back(g.dtype, g.dims);
      RETURN_IF_ERROR(dev.to_host(host.back().data(), g.data, g.bytes(), stream));
    }
    RETURN_IF_ERROR(dev.synchronize(stream));
  }
  std::vector<TensorView>& mine = views_[r];
  mine.clear();
  for (size_t i = 0; i < grads.size(); ++i)
    mine.push_back(staged ? TensorView{host[i].data(), grads[i].dtype, grads[i].dims} : grads[i]);
  if (!barrier(sh)) return aborted();
  // This replica's share of every gradient: elements [r, r + 1) * n / R, summed in replica order.
  static const std::shared_ptr<Device> cpu = [] {
    auto d = open_device(DeviceKind::kCpu);
    return d ? *d : nullptr;
  }();
  for (size_t i = 0; i < grads.size(); ++i) {
    const int64_t n = grads[i].size();
    const int64_t lo = n * r / R, hi = n * (r + 1) / R;
    if (hi <= lo) continue;
    const size_t esize = dtype_size(grads[i].dtype);
    auto part = [&](int q) {
      return TensorView{static_cast<char*>(views_[q][i].data) + lo * esize, grads[i].dtype, Dims{hi - lo}};
    };
    const TensorView sum = part(0);
    for (int q = 1; q < R; ++q) RETURN_IF_ERROR(cpu->accumulate(sum, part(q), nullptr));
    for (int q = 1; q < R; ++q) std::memcpy(part(q).data, sum.data, sum.bytes());
  }
  if (!barrier(sh)) return aborted();
  for (size_t i = 0; i < grads.size(); ++i) {
    if (staged) RETURN_IF_ERROR(dev.to_device(grads[i].data, host[i].data(), grads[i].bytes(), stream));
    RETURN_IF_ERROR(dev.divide(grads[i], R, stream));
  }
  if (staged) RETURN_IF_ERROR(dev.synchronize(stream));  // the host copies end here
  return Status::ok();
}

void EpochOrders::init(std::vector<int64_t> order, std::mt19937_64 rng, int64_t first, bool shuffle, int64_t keep) {
  std::lock_guard<std::mutex> lock(mu_);
  drawn_.clear();
  order_ = std::move(order);
  rng_ = rng;
  next_ = first;
  shuffle_ = shuffle;
  keep_ = std::max<int64_t>(2, keep);
}

void EpochOrders::set_drawn(int64_t epoch, std::vector<int64_t> order, const std::mt19937_64& rng_after) {
  std::lock_guard<std::mutex> lock(mu_);
  drawn_[epoch] = Drawn{std::make_shared<const std::vector<int64_t>>(order), rng_after};
  order_ = std::move(order);
  rng_ = rng_after;
  next_ = epoch + 1;
}

std::shared_ptr<const std::vector<int64_t>> EpochOrders::get(int64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  while (next_ <= epoch) {
    if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
    drawn_[next_] = Drawn{std::make_shared<const std::vector<int64_t>>(order_), rng_};
    ++next_;
    while (static_cast<int64_t>(drawn_.size()) > keep_) drawn_.erase(drawn_.begin());
  }
  return drawn_.at(epoch).order;
}

std::pair<std::vector<int64_t>, std::string> EpochOrders::state(int64_t epoch) {
  get(epoch);
  std::lock_guard<std::mutex> lock(mu_);
  const Drawn& d = drawn_.at(epoch);
  std::ostringstream os;
  os << d.rng_after;
  return {*d.order, os.str()};
}

bool RunShared::claim(int64_t step) {
  if (ask_claim) {  // another rank's stage: rank 0's answer decides, and may end the segment here
    const bool granted = ask_claim(step);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (granted) claimed_ = std::max(claimed_, step + 1);
      else end_ = std::min(end_, step);
    }
    cv.notify_all();
    return granted;
  }
  bool granted = false;
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return abort || step >= end_ || step < consumed_ + lead; });
    granted = step < end_ && !abort;
    if (granted) claimed_ = std::max(claimed_, step + 1);
  }
  cv.notify_all();
  if (tell_claim) tell_claim(step, granted);
  return granted;
}

void RunShared::consumed(int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu);
    consumed_ = std::max(consumed_, step + 1);
  }
  cv.notify_all();
}

int64_t RunShared::stop_early() {
  int64_t end = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    // claimed_ is one past the highest mini-batch any stage has claimed: ending there lets every
    // stage finish exactly the mini-batches some stage started (a claim below end_ always succeeds).
    end_ = std::min(end_, std::max(claimed_, first_step + 1));
    end = end_;
  }
  cv.notify_all();  // a claim waiting for the loop to catch up is refused now
  return end;
}

int64_t RunShared::end_step() {
  std::lock_guard<std::mutex> lock(mu);
  return end_;
}

void RunShared::set_segment(int64_t first, int64_t end) {
  std::lock_guard<std::mutex> lock(mu);
  first_step = first;
  end_ = end;
  claimed_ = first;
  consumed_ = std::max(consumed_, first);
}

// ---- Stage ----

namespace {

// The error of a pass whose link returned false: the link's own failure, or the abort.
Status link_failed(const Link* l) { return l->error().is_ok() ? aborted() : l->error(); }

}  // namespace

Expected<DeviceBuffer> Stage::buffer_like(const Value* v) const {
  return DeviceBuffer::allocate(ex->device(), v->dtype, v->dims, ex->stream());
}

void Stage::SlotPool::reset(int n) {
  of.clear();
  free.clear();
  for (int i = n - 1; i >= 0; --i) free.push_back(i);
}

Expected<int> Stage::SlotPool::take(int64_t key, int stage) {
  if (free.empty())
    return internal_error("more passes in flight than the schedule's program keeps (stage " + std::to_string(stage) + ")");
  const int s = free.back();
  free.pop_back();
  of[key] = s;
  return s;
}

void Stage::SlotPool::give(int64_t key) {
  auto it = of.find(key);
  if (it == of.end()) return;
  free.push_back(it->second);
  of.erase(it);
}

Status Stage::prepare() {
  PT_CHECK(program) << "stage " << index << " has no program";
  // The program's passes in flight: from F to B, or to I when the backward is split (W keeps
  // its own, smaller state).
  ScheduleIR one;
  one.micro_batches = opts.micro_batches;
  one.stages = {*program};
  const bool split = one.splits_backward();
  // A split backward holds its pass's saved slot until W, which reads some of it.
  num_slots_ = program_in_flight(one, 0, !split);
  num_w_slots_ = split ? w_state_in_flight(one, 0) : 0;
  // With one pass in flight its activations stay in the executor's own storage from F to B; a split
  // backward always gives each pass a storage, since another pass's W may run between its F and I.
  slot_saved_ = num_slots_ > 1 || split;
  slots_.reset(num_slots_);
  w_slots_.reset(num_w_slots_);
  accumulated_ = 0;
  if (recompute && !slot_saved_)
    return internal_error("stage " + std::to_string(index) + " recomputes with one pass in flight (the plan's schedule is not the run's)");
  // Recomputing under stale weights keeps the forward's version per pass, so the master gets a
  // copy of its own (as SpecTrain's) instead of living in the executor's buffers.
  const bool keep_fwd_weights = recompute && !sync() && opts.weights != WeightMode::kStash && !two_bw();
  separate_master_ = !sync() && (opts.weights != WeightMode::kStale || keep_fwd_weights);
  buf_is_master_ = true;
  if (separate_master_)
    for (const Value* p : params) RETURN_IF_ERROR(ex->add_storages(p, 1));  // the working copy
  if (two_bw())  // the working copy is the version before the latest update, the master's at first
    for (size_t i = 0; i < params.size(); ++i)
      RETURN_IF_ERROR(copy_master_to_working(i));
  // The saved activations of each pass in flight stay in a storage of their own in the executor
  // (Executor::add_storages): a pass selects its slot's before its forward writes them and before
  // its backward reads them, so nothing is copied aside and back.
  if (slot_saved_)
    for (const Value* v : saved) RETURN_IF_ERROR(ex->add_storages(v, num_slots_));
  stash_.clear();
  stash_version_.assign(num_slots_, -1);
  if (!sync() && opts.weights == WeightMode::kStash && num_slots_ > 1) {
    stash_.resize(num_slots_);
    for (auto& slot : stash_)
      for (const Value* p : params) {
        ASSIGN_OR_RETURN(DeviceBuffer b, buffer_like(p));
        slot.push_back(std::move(b));
      }
  }
  fwd_weights_.clear();
  if (keep_fwd_weights) {
    fwd_weights_.resize(num_slots_);
    for (auto& slot : fwd_weights_)
      for (const Value* p : params) {
        ASSIGN_OR_RETURN(DeviceBuffer b, buffer_like(p));
        slot.push_back(std::move(b));
      }
  }
  state_copy_.clear();
  if (recompute)
    for (const Value* v : state) {
      ASSIGN_OR_RETURN(DeviceBuffer b, buffer_like(v));
      state_copy_.push_back(std::move(b));
    }
  grad_acc_.clear();
  if (micro() > 1)
    for (const Value* g : grads) {
      ASSIGN_OR_RETURN(DeviceBuffer b, buffer_like(g));
      grad_acc_.push_back(std::move(b));
    }
  // 2BW reading weights shared with an earlier stage: the versions of two mini-batches in use.
  shared_in_.clear();
  shared_versions_.clear();
  shared_loaded_ = -1;
  shared_held_ = {-1, -1};
  if (two_bw() || two_bw_predict())
    for (Link* l : weights_fwd_in) shared_in_.insert(shared_in_.end(), l->values().begin(), l->values().end());
  if (!shared_in_.empty()) {
    shared_versions_.resize(2);
    for (auto& set : shared_versions_)
      for (const Value* v : shared_in_) {
        ASSIGN_OR_RETURN(DeviceBuffer b, buffer_like(v));
        set.push_back(std::move(b));
      }
  }
  // W's state likewise, one storage per pass between its I and its W.
  if (num_w_slots_ > 0)
    for (const Value* v : w_state) RETURN_IF_ERROR(ex->add_storages(v, num_w_slots_));
  return ex->device()->synchronize(ex->stream());
}

size_t Stage::held_bytes() const {
  size_t b = 0;
  for (const auto& slot : stash_)
    for (const auto& t : slot) b += t.bytes();
  for (const auto& slot : fwd_weights_)
    for (const auto& t : slot) b += t.bytes();
  for (const auto& t : state_copy_) b += t.bytes();
  for (const auto& t : grad_acc_) b += t.bytes();
  for (const auto& set : shared_versions_)
    for (const auto& t : set) b += t.bytes();
  return b;
}

Expected<HostTensor> Stage::master(size_t i) const {
  if (!separate_master_) return ex->fetch(params[i]);
  const TensorView m = master_view(i);
  HostTensor t(m.dtype, m.dims);
  if (t.bytes()) RETURN_IF_ERROR(ex->device()->to_host(t.data(), m.data, t.bytes(), ex->stream()));
  return t;
}

Expected<HostTensor> Stage::take_master(size_t i) {
  RETURN_IF_ERROR(use_master(i));
  if (!ex->direct()) return ex->fetch(params[i]);
  return std::move(ex->tensor(params[i]));
}

Status Stage::use_working(size_t i) {
  if (!separate_master_) return internal_error("stage " + std::to_string(index) + " keeps no working copy of its weights");
  return ex->select_storage(params[i], 0);
}

Status Stage::load_master() {
  if (!separate_master_ || buf_is_master_) return Status::ok();
  for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(use_master(i));
  buf_is_master_ = true;
  return Status::ok();
}

// The prediction reads the master and writes the working copy (through view(), a new version of
// the weight even when the working copy was selected already).
Status Stage::load_predicted(int s) {
  if (s == 0) return load_master();
  working_prediction_ = -1;
  for (size_t i = 0; i < params.size(); ++i) {
    RETURN_IF_ERROR(use_working(i));
    RETURN_IF_ERROR(predict_weights(*ex, *updates[i], ex->view(params[i]), master_view(i), lr, s));
  }
  buf_is_master_ = false;
  return Status::ok();
}

Status Stage::feed(RunShared& sh, int64_t key) {
  if (rng_step) RETURN_IF_ERROR(ex->set_scalar(rng_step, static_cast<double>(key + 1)));
  if (data_in) return data_in->recv(key, *ex) ? Status::ok() : link_failed(data_in);
  if (sh.recv_batch && (reads_input || reads_labels)) {  // a replica's stage under MPI: from rank 0
    if (!sh.recv_batch(key, reads_input ? &ex->host(input) : nullptr, reads_labels ? &ex->host(labels) : nullptr))
      return aborted();
    if (reads_input) RETURN_IF_ERROR(ex->upload(input));
    if (reads_labels) RETURN_IF_ERROR(ex->upload(labels));
    return Status::ok();
  }
  const bool sends = !data_out.empty();  // the data rank: what it gathers travels from its buffers
  if (prefetch_) {
    const bool x = reads_input || sends, y = reads_labels || sends;
    RETURN_IF_ERROR(prefetch_->take(key, x ? &ex->host(input) : nullptr, y ? &ex->host(labels) : nullptr));
    if (x) RETURN_IF_ERROR(ex->upload(input));
    if (y) RETURN_IF_ERROR(ex->upload(labels));
  }
  if (!more_inputs.empty() || (sends && !graph_more_inputs.empty())) {
    // Further inputs: gathered here from the order the prefetcher draws for this key; the data
    // rank gathers every one (what the other stages read travels from its buffers).
    const int64_t M = micro(), step = key / M, j = key % M;
    const int64_t epoch = step / sh.per_epoch, in_epoch = step % sh.per_epoch;
    std::vector<HostTensor*> more(sh.data->more.size(), nullptr);
    std::vector<const Value*> up;
    if (sends) {
      for (size_t k = 0; k < graph_more_inputs.size() && k < more.size(); ++k) {
        more[k] = &ex->host(graph_more_inputs[k]);
        up.push_back(graph_more_inputs[k]);
      }
    } else {
      for (const auto& [k, v] : more_inputs) {
        more.at(k) = &ex->host(v);
        up.push_back(v);
      }
    }
    RETURN_IF_ERROR(gather_more(*sh.data, *sh.orders->get(epoch), sh.first_sample(in_epoch, replica, j), epoch, more));
    for (const Value* v : up) RETURN_IF_ERROR(ex->upload(v));
  }
  for (Link* l : data_out)
    if (!l->send(key, *ex)) return link_failed(l);
  return Status::ok();
}

Status Stage::set_lr(RunShared& sh, int64_t step) { return ex->set_scalar(lr, sh.lr.at(step + 1)); }

Status Stage::set_master(size_t i, const HostTensor& t) {
  working_prediction_ = -1;  // made from another master
  RETURN_IF_ERROR(use_master(i));
  ex->host(params[i]) = t;
  RETURN_IF_ERROR(ex->upload(params[i]));
  buf_is_master_ = true;
  return Status::ok();
}

Status Stage::fence_sends() {
  for (const auto* links : {&fwd_out, &bwd_out, &data_out})
    for (Link* c : *links) RETURN_IF_ERROR(c->fence(*ex));
  return Status::ok();
}

Status Stage::select_saved(int slot) {
  if (!slot_saved_) return Status::ok();
  for (const Value* v : saved) RETURN_IF_ERROR(ex->select_storage(v, slot));
  return Status::ok();
}

PassRecord Stage::begin_record(int64_t key, bool backward, char part) const {
  PassRecord r;
  r.stage = index;
  r.backward = backward;
  r.part = part;
  r.mini_batch = key / micro();
  r.micro_batch = static_cast<int>(key % micro());
  r.version = version_;
  return r;
}

Status Stage::forward(RunShared& sh, int64_t key) {
  if (sh.abort) return aborted();
  // Before anything writes into this stage's values: what was sent from them may still be in
  // flight on a link's stream (saved activations that were sent, the data rank's input).
  RETURN_IF_ERROR(fence_sends());
  const auto t_start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const int slot, slots_.take(key, index));
  RETURN_IF_ERROR(select_saved(slot));  // before anything (received, fed or computed) is written into them
  // W's state of the passes waiting for their W stays untouched (with --recompute it holds
  // forward activations, which this forward computes again for its own pass).
  if (num_w_slots_ > 0)
    for (const Value* v : w_state) RETURN_IF_ERROR(ex->select_storage(v, -1));
  for (Link* c : fwd_in)
    if (!c->recv(key, *ex)) return link_failed(c);
  RETURN_IF_ERROR(recv_weights(key, false));
  const BusyClock busy;  // waiting for inputs is not busy time
  wait_s_ += std::chrono::duration<double>(busy.wall - t_start).count();
  RETURN_IF_ERROR(feed(sh, key));
  PassRecord r = begin_record(key, false, 0);
  RETURN_IF_ERROR(set_lr(sh, r.mini_batch));
  if (!sync() && opts.weights == WeightMode::kSpecTrain) {
    r.staleness = spectrain_staleness(index, num_stages, false, opts.staleness);
    RETURN_IF_ERROR(load_predicted(r.staleness));
  } else if (two_bw()) {
    RETURN_IF_ERROR(load_two_bw(r.mini_batch));
    r.version = std::max<int64_t>(0, r.mini_batch - 1);
  } else if (two_bw_predict()) {
    ASSIGN_OR_RETURN(r.staleness, load_two_bw_predict(r.mini_batch));
  } else {
    RETURN_IF_ERROR(load_master());
  }
  RETURN_IF_ERROR(ex->run([](Phase p) { return p == Phase::kForward || p == Phase::kLoss; }));
  if (loss) {
    RETURN_IF_ERROR(ex->download(loss));
    const double l = ex->host(loss).get_double(0);
    {
      std::lock_guard<std::mutex> lock(sh.mu);
      sh.losses[key * sh.local_replicas + replica % sh.local_replicas] = l;
    }
    sh.cv.notify_all();
  }
  for (Link* c : fwd_out)
    if (!c->send(key, *ex)) return link_failed(c);
  if (slot_saved_) {
    const Device& dev = *ex->device();
    if (!stash_.empty()) {
      for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(ex->copy_out(params[i], stash_[slot][i].view(), dev));
      stash_version_[slot] = version_;
    }
    if (!fwd_weights_.empty())
      for (size_t i = 0; i < params.size(); ++i)
        RETURN_IF_ERROR(ex->copy_out(params[i], fwd_weights_[slot][i].view(), dev));
  }
  count_busy(busy, &fwd_s_, &fwd_cpu_s_);
  ++stats.forwards;
  r.start_ms = 1e3 * std::chrono::duration<double>(t_start - sh.t0).count();
  r.run_ms = 1e3 * std::chrono::duration<double>(busy.wall - sh.t0).count();
  r.end_ms = 1e3 * seconds_since(sh.t0);
  if (opts.record_trace) trace.push_back(r);
  forwarded_end_ = std::max(forwarded_end_, r.mini_batch + 1);
  return serve_readers(sh);
}

Status Stage::backward(RunShared& sh, int64_t key, bool input_part) {
  if (sh.abort) return aborted();
  RETURN_IF_ERROR(fence_sends());
  const auto t_start = std::chrono::steady_clock::now();
  const int slot = slots_.at(key);
  if (input_part) {  // what W needs of this pass stays in the pass's storages until its W runs
    ASSIGN_OR_RETURN(const int ws, w_slots_.take(key, index));
    for (const Value* v : w_state) RETURN_IF_ERROR(ex->select_storage(v, ws));
  } else if (num_w_slots_ > 0) {  // a whole B beside split passes (a schedule file): not their storages
    for (const Value* v : w_state) RETURN_IF_ERROR(ex->select_storage(v, -1));
  }
  for (Link* c : bwd_in)
    if (!c->recv(key, *ex)) return link_failed(c);
  RETURN_IF_ERROR(recv_weights(key, true));
  const BusyClock busy;
  wait_s_ += std::chrono::duration<double>(busy.wall - t_start).count();
  RETURN_IF_ERROR(select_saved(slot));
  if (rng_step) RETURN_IF_ERROR(ex->set_scalar(rng_step, static_cast<double>(key + 1)));
  if (recompute) RETURN_IF_ERROR(recompute_forward(slot, key));
  PassRecord r = begin_record(key, true, input_part ? 'I' : 0);
  RETURN_IF_ERROR(set_lr(sh, r.mini_batch));
  if (!sync() && opts.weights == WeightMode::kSpecTrain) {
    r.staleness = spectrain_staleness(index, num_stages, true, opts.staleness);
    RETURN_IF_ERROR(load_predicted(r.staleness));
  } else if (!sync() && opts.weights == WeightMode::kStash && !stash_.empty() && stash_version_[slot] != version_) {
    RETURN_IF_ERROR(load_working(stash_[slot]));
    r.version = stash_version_[slot];
  } else if (two_bw()) {
    RETURN_IF_ERROR(load_two_bw(r.mini_batch));
    r.version = std::max<int64_t>(0, r.mini_batch - 1);
  } else if (two_bw_predict()) {
    ASSIGN_OR_RETURN(r.staleness, load_two_bw_predict(r.mini_batch));
  } else {
    RETURN_IF_ERROR(load_master());
  }
  if (input_part) {
    const auto* w = &w_nodes;
    RETURN_IF_ERROR(ex->run_nodes([w](const Node* n) { return n->phase == Phase::kBackward && !w->count(n); }));
  } else {
    // With the update in the backward, the updates run too, each right behind its gradient.
    const bool updates = update_in_backward;
    RETURN_IF_ERROR(ex->run([updates](Phase p) { return p == Phase::kBackward || (updates && p == Phase::kUpdate); }));
  }
  for (Link* c : bwd_out)
    if (!c->send(key, *ex)) return link_failed(c);
  if (!input_part) RETURN_IF_ERROR(accumulate_grads());
  if (!input_part) slots_.give(key);  // else W gives it back
  count_busy(busy, &bwd_s_, &bwd_cpu_s_);
  ++stats.backwards;
  r.start_ms = 1e3 * std::chrono::duration<double>(t_start - sh.t0).count();
  r.run_ms = 1e3 * std::chrono::duration<double>(busy.wall - sh.t0).count();
  r.end_ms = 1e3 * seconds_since(sh.t0);
  if (opts.record_trace) trace.push_back(r);
  return Status::ok();
}

// The weight-gradient part of a split backward: its pass's storages of what it reads (saved
// activations, received and computed gradients, the parameter gradients I computed), then W's nodes. The
// weights are the mini-batch's (synchronous schedules only split).
Status Stage::weight_grad(RunShared& sh, int64_t key) {
  if (sh.abort) return aborted();
  RETURN_IF_ERROR(fence_sends());
  const BusyClock busy;
  const int ws = w_slots_.at(key);
  for (const Value* v : w_state) RETURN_IF_ERROR(ex->select_storage(v, ws));
  w_slots_.give(key);
  RETURN_IF_ERROR(select_saved(slots_.at(key)));
  slots_.give(key);
  if (rng_step) RETURN_IF_ERROR(ex->set_scalar(rng_step, static_cast<double>(key + 1)));
  PassRecord r = begin_record(key, true, 'W');
  RETURN_IF_ERROR(set_lr(sh, r.mini_batch));
  RETURN_IF_ERROR(load_master());
  const auto* w = &w_nodes;
  RETURN_IF_ERROR(ex->run_nodes([w](const Node* n) { return w->count(n) > 0; }));
  RETURN_IF_ERROR(accumulate_grads());
  wgrad_s_ += count_busy(busy, &bwd_s_, &bwd_cpu_s_);
  r.start_ms = r.run_ms = 1e3 * std::chrono::duration<double>(busy.wall - sh.t0).count();
  r.end_ms = 1e3 * seconds_since(sh.t0);
  if (opts.record_trace) trace.push_back(r);
  return Status::ok();
}

// Synchronous schedules with several micro-batches: the first pass of a mini-batch to finish its
// gradients copies them, the others add theirs, in the program's order (every built-in schedule
// finishes them in micro-batch order, so their sums are GPipe's bit for bit).
Status Stage::accumulate_grads() {
  if (grad_acc_.empty()) return Status::ok();
  const Device& dev = *ex->device();
  const bool first = accumulated_++ == 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (first) RETURN_IF_ERROR(ex->copy_out(grads[i], grad_acc_[i].view(), dev));
    else RETURN_IF_ERROR(ex->device()->accumulate(grad_acc_[i].view(), ex->view(grads[i]), ex->stream()));
  }
  return Status::ok();
}

// The rerun forward must compute exactly the activations the pass's forward computed: the same
// inputs (its slot's storage), the same dropout masks (rng_step is the pass key) and the same
// weights. GPipe's do not change within a mini-batch and stash keeps them; 1F1B SpecTrain
// predicts the forward's weights from master weights and a smoothed gradient that have moved on
// by the backward (the prediction for s_fwd cannot be redone), and stale reads master weights
// that have moved on too, so both keep the forward's weights per slot (fwd_weights_), as
// PipeDream-2BW and Megatron recompute with stashed weights. BatchNorm in training mode
// normalises with the batch's statistics, so the rerun's outputs do not depend on the running
// statistics; its running-statistics update is undone (state_copy_) so that it counts once.
Status Stage::recompute_forward(int slot, int64_t key) {
  const Device& dev = *ex->device();
  if (!fwd_weights_.empty()) {
    RETURN_IF_ERROR(load_working(fwd_weights_[slot]));
  } else if (two_bw()) {
    RETURN_IF_ERROR(load_two_bw(key / micro()));
  } else if (!stash_.empty() && stash_version_[slot] != version_) {
    RETURN_IF_ERROR(load_working(stash_[slot]));
  } else {
    RETURN_IF_ERROR(load_master());
  }
  for (size_t i = 0; i < state.size(); ++i) RETURN_IF_ERROR(ex->copy_out(state[i], state_copy_[i].view(), dev));
  RETURN_IF_ERROR(ex->run([](Phase p) { return p == Phase::kForward || p == Phase::kLoss; }));
  for (size_t i = 0; i < state.size(); ++i) RETURN_IF_ERROR(ex->copy_in(state[i], state_copy_[i].view(), dev));
  ++stats.recomputes;
  return Status::ok();
}

Status Stage::load_two_bw(int64_t step) {
  const int64_t need = std::max<int64_t>(0, step - 1);
  if (version_ == need) return load_master();
  if (version_ != need + 1)
    return internal_error("stage " + std::to_string(index) + ": 2BW pass of mini-batch " + std::to_string(step) + " needs version " +
                          std::to_string(need) + ", the stage has " + std::to_string(version_) + " and the one before");
  for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(use_working(i));  // the version before
  buf_is_master_ = false;
  return Status::ok();
}

Status Stage::restart_two_bw() {
  if (!two_bw() || !separate_master_) return Status::ok();
  for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(copy_master_to_working(i));
  buf_is_master_ = true;
  return Status::ok();
}

Status Stage::copy_master_to_working(size_t i) {
  working_prediction_ = -1;
  RETURN_IF_ERROR(use_master(i));  // the working copy unselected: selecting it later gives it a new version
  const TensorView m = master_view(i), w = ex->storage_view(params[i], 0);
  Device& dev = *ex->device();
  return dev.copy(w.data, dev, m.data, dev, m.bytes(), ex->stream());
}

Status Stage::load_working(const std::vector<DeviceBuffer>& version) {
  working_prediction_ = -1;
  const Device& dev = *ex->device();
  for (size_t i = 0; i < params.size(); ++i) {
    RETURN_IF_ERROR(use_working(i));
    RETURN_IF_ERROR(ex->copy_in(params[i], version[i].view(), dev));
  }
  buf_is_master_ = false;
  return Status::ok();
}

Expected<int> Stage::load_two_bw_predict(int64_t step) {
  if (version_ == step) {
    RETURN_IF_ERROR(load_master());
    return 0;
  }
  if (version_ != step - 1)
    return internal_error("stage " + std::to_string(index) + ": 2BW pass of mini-batch " + std::to_string(step) +
                          " with " + std::to_string(version_) + " updates done");
  // Every pass of the mini-batch that runs before its update reads the same prediction (the same
  // master, momentum and rate): made once, selected by the rest.
  if (working_prediction_ == step) {
    for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(use_working(i));
    buf_is_master_ = false;
    return 1;
  }
  RETURN_IF_ERROR(load_predicted(1));
  working_prediction_ = step;
  return 1;
}

Status Stage::finish_gradients(RunShared& sh, int64_t step) {
  if (grads_ready_ == step) return Status::ok();
  const BusyClock busy;
  RETURN_IF_ERROR(fence_sends());
  const Device& dev = *ex->device();
  if (two_bw()) {  // the version the next mini-batch's passes read
    for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(copy_master_to_working(i));
    buf_is_master_ = true;
  }
  if (!grad_acc_.empty()) {  // the mean of the micro-batch gradients (each loss is a mean)
    if (accumulated_ != opts.micro_batches)
      return internal_error("stage " + std::to_string(index) + ": update of mini-batch " + std::to_string(step) + " after " +
                            std::to_string(accumulated_) + " of " + std::to_string(opts.micro_batches) + " micro-batches");
    accumulated_ = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      RETURN_IF_ERROR(ex->copy_in(grads[i], grad_acc_[i].view(), dev));
      RETURN_IF_ERROR(ex->device()->divide(ex->view(grads[i]), opts.micro_batches, ex->stream()));
    }
  }
  if (reducer) {  // data-parallel replicas: every replica's stage updates with the mean gradient
    std::vector<TensorView> views;
    for (const Value* g : grads) views.push_back(ex->view(g));
    RETURN_IF_ERROR(reducer->allreduce(sh, replica, views, *ex->device(), ex->stream()));
  }
  if (sh.clip_grad_norm > 0) RETURN_IF_ERROR(post_norm_part(sh, step));
  grads_ready_ = step;
  count_busy(busy, &upd_s_, &upd_cpu_s_);
  return Status::ok();
}

Status Stage::update(RunShared& sh, int64_t step) {
  RETURN_IF_ERROR(finish_gradients(sh, step));
  const BusyClock busy;
  if (sh.clip_grad_norm > 0) RETURN_IF_ERROR(clip_gradients(sh, step));
  if (!update_in_backward) {  // else the backward ran the updates, on the master weights
    RETURN_IF_ERROR(load_master());
    RETURN_IF_ERROR(set_lr(sh, step));
    RETURN_IF_ERROR(ex->run([](Phase p) { return p == Phase::kUpdate; }));
  }
  // The updates wrote the selected storages in place: the masters (a working copy updated would
  // lose the step).
  for (const Value* p : params)
    if (ex->selected_storage(p) != -1)
      return internal_error("stage " + std::to_string(index) + ": update of '" + p->name + "' ran on its working copy");
  ++version_;
  RETURN_IF_ERROR(serve_readers(sh));
  count_busy(busy, &upd_s_, &upd_cpu_s_);
  ++stats.updates;
  last_update_end_ = std::chrono::steady_clock::now();
  if (step + 1 == steady_from_)
    steady_mark_ = sums();
  if (sh.snapshot_at(step) && replica == 0) RETURN_IF_ERROR(post_snapshot(sh, step));  // the replicas' are equal
  if (opts.after_update) opts.after_update(index, step);
  return Status::ok();
}

Status Stage::post_snapshot(RunShared& sh, int64_t step) {
  std::vector<std::pair<const Value*, HostTensor>> snap;
  for (size_t i = 0; i < params.size(); ++i) {
    ASSIGN_OR_RETURN(HostTensor t, master(i));
    snap.emplace_back(params[i], std::move(t));
  }
  for (const Value* v : state) {
    ASSIGN_OR_RETURN(HostTensor t, ex->fetch(v));
    snap.emplace_back(v, std::move(t));
  }
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    auto& per_stage = sh.snapshots[step];
    per_stage.resize(num_stages);
    per_stage[index] = std::move(snap);
    ++sh.snapshot_count[step];
  }
  sh.cv.notify_all();
  return Status::ok();
}

void Stage::begin_train(int64_t start, int64_t total) {
  trace.clear();
  stats = StageStats{};
  stats.stage = index;
  busy_s_ = fwd_s_ = bwd_s_ = wgrad_s_ = upd_s_ = wait_s_ = 0;
  fwd_cpu_s_ = bwd_cpu_s_ = upd_cpu_s_ = 0;
  steady_from_ = steady_state_from(start, total);  // finish_stats wants 4 updates after it
  steady_mark_.reset();
}

Stage::Sums Stage::sums() const {
  Sums s{busy_s_, fwd_s_, bwd_s_, wgrad_s_, upd_s_, wait_s_, fwd_cpu_s_, bwd_cpu_s_, upd_cpu_s_, {}, {},
         stats.updates, last_update_end_};
  for (const Link* l : fwd_in) s.fwd_in += l->handoffs();  // received on this thread
  for (const Link* l : bwd_in) s.bwd_in += l->handoffs();
  return s;
}

void Stage::finish_stats() {
  const Sums now = sums();
  Sums from{};
  stats.window_s = 0;
  if (steady_mark_ && stats.updates - steady_mark_->updates >= 4) {
    from = *steady_mark_;
    stats.window_s = std::chrono::duration<double>(now.t - from.t).count();
  }
  const double mbs = static_cast<double>(std::max<int64_t>(1, now.updates - from.updates));
  stats.fwd_ms = 1e3 * (now.fwd - from.fwd) / mbs;
  stats.bwd_ms = 1e3 * (now.bwd - from.bwd) / mbs;
  stats.wgrad_ms = 1e3 * (now.wgrad - from.wgrad) / mbs;
  stats.update_ms = 1e3 * (now.upd - from.upd) / mbs;
  stats.wait_ms = 1e3 * (now.wait - from.wait) / mbs;
  stats.fwd_cpu_ms = 1e3 * (now.fwd_cpu - from.fwd_cpu) / mbs;
  stats.bwd_cpu_ms = 1e3 * (now.bwd_cpu - from.bwd_cpu) / mbs;
  stats.update_cpu_ms = 1e3 * (now.upd_cpu - from.upd_cpu) / mbs;
  stats.cpu_timed = ex && ex->device()->kind() == DeviceKind::kCpu && opts.threads_per_stage == 1;
  Link::Handoffs fwd = now.fwd_in, bwd = now.bwd_in;
  fwd -= from.fwd_in;
  bwd -= from.bwd_in;
  auto figures = [](const Link::Handoffs& h) {
    return StageStats::Handoffs{h.count, h.count > 0 ? 1e6 * h.seconds / static_cast<double>(h.count) : 0, h.median_us(),
                                h.traded};
  };
  stats.fwd_handoffs = figures(fwd);
  stats.bwd_handoffs = figures(bwd);
  if (stats.window_s > 0) {  // else PipelineTrainer's account() divides by the run's wall time
    stats.busy_fraction = (now.busy - from.busy) / stats.window_s;
    stats.wait_fraction = (now.wait - from.wait) / stats.window_s;
  }
}

void Stage::begin_segment(RunShared& sh) {
  const int64_t first = sh.first_step, end = sh.end_step();
  begin_shared_segment(first);
  const bool sends = !data_out.empty();
  if ((reads_input || reads_labels || sends) && !data_in && !sh.recv_batch) {
    // Batches of the segment's passes, gathered ahead (the segment can only end earlier).
    const int M = micro();
    const RunShared* shp = &sh;
    prefetch_ = std::make_unique<BatchPrefetcher>(
        reads_input || sends ? &ex->host(input) : nullptr, reads_labels || sends ? &ex->host(labels) : nullptr,
        first * M, end * M,
        kPrefetchDepth,
        [shp, M, r = replica](int64_t key, HostTensor* x, HostTensor* y) {
          const int64_t step = key / M, j = key % M;
          const int64_t epoch = step / shp->per_epoch, in_epoch = step % shp->per_epoch;
          return gather_batch(*shp->data, *shp->orders->get(epoch), shp->first_sample(in_epoch, r, j), epoch, x, y);
        },
        sh.data->stats.get());
  }
  slots_.reset(num_slots_);
  w_slots_.reset(num_w_slots_);
  accumulated_ = 0;
  grads_ready_ = -1;
}

Status Stage::act(RunShared& sh, const Step& step) {
  const int64_t mb = step.mini_batch;
  const int64_t key = mb * micro() + step.action.micro;
  switch (step.action.kind) {
    case ActionKind::kForward: return forward(sh, key);
    case ActionKind::kBackward: return backward(sh, key, false);
    case ActionKind::kInputGrad: return backward(sh, key, true);
    case ActionKind::kWeightGrad: return weight_grad(sh, key);
    case ActionKind::kUpdate: return update(sh, mb);
  }
  return Status::ok();
}

void Stage::end_segment(RunShared& sh, Status st) {
  prefetch_.reset();
  // The segment's work is done when the device is: a checkpoint or validation reads it next.
  if (st.is_ok()) st = ex->device()->synchronize(ex->stream());
  if (!st.is_ok() && !sh.abort) sh.fail(st.with_context("stage " + std::to_string(index) + ": "));
  finish_stats();
}

void Stage::run(RunShared& sh) { run_device(sh, {this}, *program); }

void run_device(RunShared& sh, const std::vector<Stage*>& chunks, const StageProgram& program) {
  if (chunks.front()->opts.threads_per_stage > 0)  // OpenMP: this thread's regions
    set_cpu_kernel_threads(chunks.front()->opts.threads_per_stage);
  const int64_t first = sh.first_step, end = sh.end_step();
  for (Stage* st : chunks) st->begin_segment(sh);
  // Clipping over interleaved stages: every chunk of the device posts its part of the norm before
  // any of them waits for the whole (they would otherwise wait for each other on this thread).
  const bool post_first = chunks.size() > 1 && sh.clip_grad_norm > 0;
  int64_t posted = -1;  // mini-batches up to this one have their chunks' parts posted
  Status st = Status::ok();
  Stage* failed = nullptr;  // the chunk whose action failed: its end reports it
  // The device's program over the segment's mini-batches. The first action of a mini-batch here
  // is its first forward: the device claims it first, and a claim refused (a stop, a checkpoint
  // boundary moved) ends the segment there: the program then skips that mini-batch and the later
  // ones, so the passes already started drain (their backwards and updates still run).
  ProgramCursor cursor(program, first, end);
  int64_t claimed_end = first;  // mini-batches [first, claimed_end) are claimed
  Step step;
  while (st.is_ok() && cursor.next(&step)) {
    const int64_t mb = step.mini_batch;
    if (mb >= claimed_end) {
      while (claimed_end <= mb && sh.claim(claimed_end)) ++claimed_end;
      if (claimed_end <= mb) {
        cursor.set_end(claimed_end);
        continue;
      }
    }
    if (post_first && step.action.kind == ActionKind::kUpdate && mb > posted) {
      for (Stage* c : chunks)
        if (st.is_ok() && !(st = c->finish_gradients(sh, mb)).is_ok()) failed = c;
      posted = mb;
      if (!st.is_ok()) break;
    }
    Stage* c = chunks.at(step.action.chunk);
    if (!(st = c->act(sh, step)).is_ok()) failed = c;
  }
  for (Stage* c : chunks) c->end_segment(sh, c == failed ? st : Status::ok());
}

}  // namespace pt
