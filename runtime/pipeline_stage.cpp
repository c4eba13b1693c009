// The stage worker of the pipelined trainer: the channel between stages, and one stage's fixed
// sequence of forwards, backwards and updates with its weight versions (DESIGN.md section 4).
#include "runtime/pipeline_stage.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <omp.h>

namespace pt {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The error a pass returns when the run was aborted elsewhere (never reported itself).
Status aborted() { return Status(StatusCode::kInternal, "pipeline aborted"); }

void set_scalar(HostTensor& t, double v) {
  if (t.dtype() == DType::kFloat64) t.as<double>()[0] = v;
  else t.as<float>()[0] = static_cast<float>(v);
}

template <typename T>
void predict(T* out, const T* w, const T* v, int64_t n, double s_lr) {
  const T c = static_cast<T>(s_lr);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] - c * v[i];
}

template <typename T>
void scale(T* x, int64_t n, double by) {
  const T c = static_cast<T>(by);
  for (int64_t i = 0; i < n; ++i) x[i] /= c;
}

template <typename T>
void add_into(T* acc, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

}  // namespace

// ---- Channel ----

Channel::Channel(std::vector<const Value*> values, int capacity) : Link(std::move(values)) {
  slots_.resize(std::max(1, capacity));
  for (Slot& s : slots_)
    for (const Value* v : values_) s.tensors.emplace_back(v->dtype, v->dims);
}

bool Channel::send(int64_t key, const Executor& from) {
  Slot* slot = nullptr;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
      if (aborted_) return true;
      for (Slot& s : slots_)
        if (s.key == kFree) return true;
      return false;
    });
    if (aborted_) return false;
    for (Slot& s : slots_)
      if (s.key == kFree) {
        slot = &s;
        break;
      }
    slot->key = kBusy;
  }
  for (size_t i = 0; i < values_.size(); ++i) slot->tensors[i] = from.tensor(values_[i]);
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot->key = key;
  }
  cv_.notify_all();
  return true;
}

bool Channel::recv(int64_t key, Executor& to) {
  Slot* slot = nullptr;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] {
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
  }
  for (size_t i = 0; i < values_.size(); ++i) to.tensor(values_[i]) = slot->tensors[i];
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot->key = kFree;
  }
  cv_.notify_all();
  return true;
}

void Channel::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
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
    std::lock_guard<std::mutex> lock(mu);
    granted = step < end_;
    if (granted) claimed_ = std::max(claimed_, step + 1);
  }
  cv.notify_all();
  if (tell_claim) tell_claim(step, granted);
  return granted;
}

int64_t RunShared::stop_early() {
  std::lock_guard<std::mutex> lock(mu);
  // claimed_ is one past the highest mini-batch any stage has claimed: ending there lets every
  // stage finish exactly the mini-batches some stage started (a claim below end_ always succeeds).
  end_ = std::min(end_, std::max(claimed_, first_step + 1));
  return end_;
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
}

// ---- Stage ----

void Stage::prepare() {
  const int N = num_stages;
  num_slots_ = gpipe() ? std::max(1, opts.micro_batches) : N - index;
  separate_master_ = !gpipe() && opts.weights != WeightMode::kStale;
  buf_is_master_ = true;
  master_.clear();
  if (separate_master_)
    for (const Value* p : params) master_.push_back(ex->tensor(p));
  saved_slots_.clear();
  if (num_slots_ > 1) {
    saved_slots_.resize(num_slots_);
    for (auto& slot : saved_slots_)
      for (const Value* v : saved) slot.emplace_back(v->dtype, v->dims);
  }
  stash_.clear();
  stash_version_.assign(num_slots_, -1);
  if (!gpipe() && opts.weights == WeightMode::kStash && num_slots_ > 1) {
    stash_.resize(num_slots_);
    for (auto& slot : stash_)
      for (const Value* p : params) slot.emplace_back(p->dtype, p->dims);
  }
  grad_acc_.clear();
  if (gpipe() && opts.micro_batches > 1)
    for (const Value* g : grads) grad_acc_.emplace_back(g->dtype, g->dims);
}

void Stage::load_master() {
  if (!separate_master_ || buf_is_master_) return;
  for (size_t i = 0; i < params.size(); ++i) ex->tensor(params[i]) = master_[i];
  buf_is_master_ = true;
}

void Stage::load_predicted(int s) {
  if (s == 0) {
    load_master();
    return;
  }
  const double s_lr = s * ex->tensor(lr).get_double(0);
  for (size_t i = 0; i < params.size(); ++i) {
    HostTensor& out = ex->tensor(params[i]);
    const HostTensor& w = master_[i];
    const HostTensor& v = ex->tensor(momentum[i]);
    if (out.dtype() == DType::kFloat64) predict(out.as<double>(), w.as<double>(), v.as<double>(), out.size(), s_lr);
    else predict(out.as<float>(), w.as<float>(), v.as<float>(), out.size(), s_lr);
  }
  buf_is_master_ = false;
}

bool Stage::feed(RunShared& sh, int64_t key) {
  if (rng_step) ex->tensor(rng_step).as<int64_t>()[0] = key + 1;
  if (data_in) return data_in->recv(key, *ex);
  const bool sends = !data_out.empty();  // the data rank: what it gathers travels from its buffers
  if (prefetch_)
    prefetch_->take(key, reads_input || sends ? &ex->tensor(input) : nullptr,
                    reads_labels || sends ? &ex->tensor(labels) : nullptr);
  for (Link* l : data_out)
    if (!l->send(key, *ex)) return false;
  return true;
}

void Stage::set_lr(RunShared& sh, int64_t step) { set_scalar(ex->tensor(lr), sh.lr.at(step + 1)); }

void Stage::set_master(size_t i, const HostTensor& t) {
  if (separate_master_) master_[i] = t;
  ex->tensor(params[i]) = t;
}

Status Stage::forward(RunShared& sh, int64_t key) {
  if (sh.abort) return aborted();
  const auto t_start = std::chrono::steady_clock::now();
  for (Link* c : fwd_in)
    if (!c->recv(key, *ex)) return aborted();
  const auto t_run = std::chrono::steady_clock::now();  // waiting for inputs is not busy time
  if (!feed(sh, key)) return aborted();
  PassRecord r;
  r.stage = index;
  r.mini_batch = key / micro();
  r.micro_batch = static_cast<int>(key % micro());
  r.version = version_;
  set_lr(sh, r.mini_batch);
  if (!gpipe() && opts.weights == WeightMode::kSpecTrain) {
    r.staleness = spectrain_staleness(index, num_stages, false, opts.staleness);
    load_predicted(r.staleness);
  } else {
    load_master();
  }
  RETURN_IF_ERROR(ex->run([](Phase p) { return p == Phase::kForward || p == Phase::kLoss; }));
  if (loss) {
    const double l = ex->tensor(loss).get_double(0);
    {
      std::lock_guard<std::mutex> lock(sh.mu);
      sh.losses[key] = l;
    }
    sh.cv.notify_all();
  }
  for (Link* c : fwd_out)
    if (!c->send(key, *ex)) return aborted();
  const int slot = slot_of(key);
  if (num_slots_ > 1) {
    for (size_t i = 0; i < saved.size(); ++i) saved_slots_[slot][i] = ex->tensor(saved[i]);
    if (!stash_.empty()) {
      for (size_t i = 0; i < params.size(); ++i) stash_[slot][i] = ex->tensor(params[i]);
      stash_version_[slot] = version_;
    }
  }
  const double busy = seconds_since(t_run);
  busy_s_ += busy;
  fwd_s_ += busy;
  ++stats.forwards;
  r.start_ms = 1e3 * std::chrono::duration<double>(t_start - sh.t0).count();
  r.end_ms = 1e3 * seconds_since(sh.t0);
  if (opts.record_trace) trace.push_back(r);
  return Status::ok();
}

Status Stage::backward(RunShared& sh, int64_t key) {
  if (sh.abort) return aborted();
  const auto t_start = std::chrono::steady_clock::now();
  const int slot = slot_of(key);
  for (Link* c : bwd_in)
    if (!c->recv(key, *ex)) return aborted();
  const auto t_run = std::chrono::steady_clock::now();
  if (num_slots_ > 1)
    for (size_t i = 0; i < saved.size(); ++i) ex->tensor(saved[i]) = saved_slots_[slot][i];
  if (rng_step) ex->tensor(rng_step).as<int64_t>()[0] = key + 1;
  PassRecord r;
  r.stage = index;
  r.backward = true;
  r.mini_batch = key / micro();
  r.micro_batch = static_cast<int>(key % micro());
  r.version = version_;
  set_lr(sh, r.mini_batch);
  if (!gpipe() && opts.weights == WeightMode::kSpecTrain) {
    r.staleness = spectrain_staleness(index, num_stages, true, opts.staleness);
    load_predicted(r.staleness);
  } else if (!gpipe() && opts.weights == WeightMode::kStash && !stash_.empty() && stash_version_[slot] != version_) {
    for (size_t i = 0; i < params.size(); ++i) ex->tensor(params[i]) = stash_[slot][i];
    buf_is_master_ = false;
    r.version = stash_version_[slot];
  } else {
    load_master();
  }
  RETURN_IF_ERROR(ex->run([](Phase p) { return p == Phase::kBackward; }));
  for (Link* c : bwd_out)
    if (!c->send(key, *ex)) return aborted();
  if (!grad_acc_.empty()) {
    const bool first = key % micro() == 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      const HostTensor& g = ex->tensor(grads[i]);
      if (first) grad_acc_[i] = g;
      else if (g.dtype() == DType::kFloat64) add_into(grad_acc_[i].as<double>(), g.as<double>(), g.size());
      else add_into(grad_acc_[i].as<float>(), g.as<float>(), g.size());
    }
  }
  const double busy = seconds_since(t_run);
  busy_s_ += busy;
  bwd_s_ += busy;
  ++stats.backwards;
  r.start_ms = 1e3 * std::chrono::duration<double>(t_start - sh.t0).count();
  r.end_ms = 1e3 * seconds_since(sh.t0);
  if (opts.record_trace) trace.push_back(r);
  return Status::ok();
}

Status Stage::update(RunShared& sh, int64_t step) {
  const auto t_run = std::chrono::steady_clock::now();
  if (!grad_acc_.empty())  // GPipe: the mean of the micro-batch gradients (each loss is a mean)
    for (size_t i = 0; i < grads.size(); ++i) {
      HostTensor& g = ex->tensor(grads[i]);
      g = grad_acc_[i];
      if (g.dtype() == DType::kFloat64) scale(g.as<double>(), g.size(), opts.micro_batches);
      else scale(g.as<float>(), g.size(), opts.micro_batches);
    }
  load_master();
  set_lr(sh, step);
  RETURN_IF_ERROR(ex->run([](Phase p) { return p == Phase::kUpdate; }));
  if (separate_master_)
    for (size_t i = 0; i < params.size(); ++i) master_[i] = ex->tensor(params[i]);
  ++version_;
  const double busy = seconds_since(t_run);
  busy_s_ += busy;
  upd_s_ += busy;
  ++stats.updates;
  if (sh.snapshot_at(step)) post_snapshot(sh, step);
  if (step == sh.debug_lose_step) {
    std::fprintf(stderr, "onnx-pipetrain: stage %d: PIPETRAIN_DEBUG_LOSE_RANK: %s after step %lld\n", index,
                 sh.debug_stop ? "stopping (SIGSTOP)" : "leaving (exit 1)", static_cast<long long>(step + 1));
    std::fflush(stderr);
    if (sh.debug_stop) std::raise(SIGSTOP);
    else std::_Exit(1);
  }
  return Status::ok();
}

void Stage::post_snapshot(RunShared& sh, int64_t step) {
  std::vector<std::pair<const Value*, HostTensor>> snap;
  for (size_t i = 0; i < params.size(); ++i) snap.emplace_back(params[i], master(i));
  for (const Value* v : state) snap.emplace_back(v, ex->tensor(v));
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    auto& per_stage = sh.snapshots[step];
    per_stage.resize(num_stages);
    per_stage[index] = std::move(snap);
    ++sh.snapshot_count[step];
  }
  sh.cv.notify_all();
}

void Stage::begin_train() {
  trace.clear();
  stats = StageStats{};
  stats.stage = index;
  busy_s_ = fwd_s_ = bwd_s_ = upd_s_ = 0;
}

void Stage::finish_stats() {
  const int64_t mbs = std::max<int64_t>(1, stats.updates);
  stats.fwd_ms = 1e3 * fwd_s_ / mbs;
  stats.bwd_ms = 1e3 * bwd_s_ / mbs;
  stats.update_ms = 1e3 * upd_s_ / mbs;
}

void Stage::run(RunShared& sh) {
  if (opts.threads_per_stage > 0) set_cpu_kernel_threads(opts.threads_per_stage);  // OpenMP: this thread's regions
  const int64_t first = sh.first_step, end = sh.end_step();
  const bool sends = !data_out.empty();
  if ((reads_input || reads_labels || sends) && !data_in) {
    // Batches of the segment's passes, gathered ahead (the segment can only end earlier).
    const int M = micro();
    const RunShared* shp = &sh;
    prefetch_ = std::make_unique<BatchPrefetcher>(
        reads_input || sends ? &ex->tensor(input) : nullptr, reads_labels || sends ? &ex->tensor(labels) : nullptr,
        first * M, end * M,
        kPrefetchDepth, [shp, M](int64_t key, HostTensor* x, HostTensor* y) {
          const int64_t step = key / M, j = key % M;
          const int64_t epoch = step / shp->per_epoch, in_epoch = step % shp->per_epoch;
          gather_batch(*shp->data, *shp->orders->get(epoch), in_epoch * shp->mini_batch + j * shp->graph_batch, x, y);
        });
  }
  Status st = Status::ok();
  auto ok = [&](Status s) {
    if (s.is_ok()) return true;
    st = std::move(s);
    return false;
  };
  if (gpipe()) {
    const int M = micro();
    for (int64_t step = first; sh.claim(step); ++step) {
      bool good = true;
      for (int j = 0; j < M && good; ++j) good = ok(forward(sh, step * M + j));
      for (int j = 0; j < M && good; ++j) good = ok(backward(sh, step * M + j));
      if (!good || !ok(update(sh, step))) break;
    }
  } else {
    // N-k-1 warm-up forwards, then F, B (+ update), F, B ...: in steady state one backward, one
    // forward, so the forward of mini-batch i sees the weights after i-(N-k-1) updates. A claim
    // refused ends the forwards; the backwards of those started follow (the drain).
    const int64_t warm = num_stages - index - 1;
    int64_t f = first, b = first;
    bool good = true;
    while (good && f < first + warm && sh.claim(f)) good = ok(forward(sh, f++));
    while (good && sh.claim(f)) {
      good = ok(forward(sh, f++)) && ok(backward(sh, b)) && ok(update(sh, b));
      ++b;
    }
    while (good && b < f) {
      good = ok(backward(sh, b)) && ok(update(sh, b));
      ++b;
    }
  }
  prefetch_.reset();
  if (!st.is_ok() && !sh.abort) sh.fail(st.with_context("stage " + std::to_string(index) + ": "));
  finish_stats();
}

}  // namespace pt
