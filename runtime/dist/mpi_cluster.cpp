// The MPI implementation of runtime/dist/cluster.h (built with PIPETRAIN_MPI): MPI_THREAD_MULTIPLE,
// one duplicated communicator per use (collectives, coordinator messages, stage links,
// heartbeats) so their tags never meet; every wait is MPI_Test in a loop that backs off to short
// sleeps and gives up when the run is aborted, so a lost peer never leaves a thread blocked.
// The C API only: C++ bindings (deprecated) would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/cluster.h"
#include "runtime/exec/executor.h"

namespace pt {

namespace {

// Tests only (PIPETRAIN_TEST_CLOCK_SKEW_S): the seconds a rank of node n reads its clock ahead,
// n x the variable, as machines whose clocks differ do (MpiCluster::start sets it).
double g_test_clock_skew_s = 0;

// The steady clock in seconds (one clock for every process of a machine).
double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() +
         g_test_clock_skew_s;
}

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_sigterm{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
extern "C" void on_sigterm(int) { g_sigterm.store(true); }

// A polling wait's pause: short waits spin, yielding the core (with more ranks than cores the
// peer needs it); longer ones nap 50 us per poll, and a patient wait (max_nap_us above 50)
// doubles its naps every 16 up to max_nap_us.
void backoff(int& spins, int max_nap_us = 50) {
  if (spins++ < 200) {
    std::this_thread::yield();
    return;
  }
  const int doublings = std::min(16, (spins - 200) / 16);
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(max_nap_us, 50 << doublings)));
}

// Whether process `pid` of this machine is running (not gone, not a zombie).
bool process_alive(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!f || !std::getline(f, s)) return false;
  const size_t close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return true;
  const char state = s[close + 2];
  return state != 'Z' && state != 'X';
}

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  return std::string(buf, len);
}

class MpiCluster;

// Open MPI's TCP transport moves a message over its eager limit (4 MiB as set_tcp_eager_limits
// leaves it) by rendezvous: the data goes only while the sending process calls into MPI, so a
// stage that sent its activations and then computed for milliseconds held them back that long.
// The pump drives such sends: a thread that, while any is in flight, tests them (a nap of 200 us
// between rounds: the 4 MiB socket buffer drains in about 1.5 ms at 2.5 GB/s, and shorter naps
// take the sending stage's core from it) and marks each one's state done or failed when it
// completes; with none in flight it sleeps on a condition variable. It alone tests the requests
// it was given.
class SendPump {
 public:
  enum : int { kIdle = 0, kInFlight = 1, kDone = 2, kFailed = 3 };
  explicit SendPump(const std::atomic<bool>& aborted) : aborted_(aborted) {}
  ~SendPump() { stop(); }
  // Takes `r` (a started send); *state goes from kInFlight to kDone (or kFailed on an MPI error).
  void add(MPI_Request r, std::atomic<int>* state) {
    state->store(kInFlight, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!thread_.joinable() && !stop_) thread_ = std::thread([this] { loop(); });
      incoming_.push_back({r, state});
    }
    cv_.notify_one();
  }
  // Ends the thread (what is in flight then is left as it is: the job is ending).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  int64_t pumped() const { return pumped_.load(std::memory_order_relaxed); }

 private:
  struct Send {
    MPI_Request r;
    std::atomic<int>* state;
  };
  void loop() {
    std::vector<Send> mine;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !incoming_.empty() || !mine.empty(); });
        if (stop_) return;
        mine.insert(mine.end(), incoming_.begin(), incoming_.end());
        incoming_.clear();
      }
      for (size_t i = 0; i < mine.size();) {
        int done = 0;
        const int rc = MPI_Test(&mine[i].r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) {
          mine[i].state->store(rc == MPI_SUCCESS ? kDone : kFailed, std::memory_order_release);
          pumped_.fetch_add(1, std::memory_order_relaxed);
          mine[i] = mine.back();
          mine.pop_back();
        } else {
          ++i;
        }
      }
      if (aborted_) return;
      if (!mine.empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  const std::atomic<bool>& aborted_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Send> incoming_;
  bool stop_ = false;
  std::thread thread_;
  std::atomic<int64_t> pumped_{0};
};

// The size above which a send goes through the pump: the TCP transport's eager limit in effect
// (PIPETRAIN_MPI_PUMP=0: none, to measure what the pump saves).
size_t rendezvous_bytes() {
  if (const char* off = std::getenv("PIPETRAIN_MPI_PUMP"); off && std::string(off) == "0") return SIZE_MAX;
  const char* e = std::getenv("OMPI_MCA_btl_tcp_eager_limit");
  const long long v = e ? std::atoll(e) : 0;
  return v > 0 ? static_cast<size_t>(v) : size_t{4} << 20;
}

// One direction of a stage boundary between two ranks: `capacity` send buffers (the values
// packed back to back), allocated once; the receiving end has one.
// Each message carries its sender's steady clock at the send after the values (a trailer of one
// double): the receiver times a message it was already waiting for from that send to holding it
// (Link::handoffs), the peer's clock brought to its own by the offset the cluster estimated.
class MpiLink : public Link {
 public:
  MpiLink(std::vector<const Value*> values, MpiCluster& c, int peer, bool sending, int kind, int capacity,
          double clock_offset);
  ~MpiLink() override;
  bool send(int64_t key, Executor& from) override;
  bool recv(int64_t key, Executor& to) override;
  void abort() override { aborted_ = true; }
  Handoffs handoffs() const override { return handoffs_; }  // read once the receiver is done

 private:
  bool stop() const;
  MpiCluster& c_;
  int peer_, kind_;
  bool sending_;
  double clock_offset_;  // seconds to add to this rank's steady clock to read the peer's
  size_t bytes_ = 0;     // the values' (the message is one double longer)
  Handoffs handoffs_;    // the receiver's (one thread)
  std::vector<std::vector<char>> bufs_;
  std::vector<MPI_Request> reqs_;
  // A send over the rendezvous size is the pump's (SendPump): its slot is free again once its
  // state says done. [slot]
  std::unique_ptr<std::atomic<int>[]> pumped_;
  bool pump_ = false;
  std::atomic<bool> aborted_{false};
};

class MpiCluster : public Cluster {
 public:
  Status start(int* argc, char*** argv, const LaunchEnv& env);
  ~MpiCluster() override;

  Expected<std::vector<uint64_t>> allgather(uint64_t value) override {
    std::vector<uint64_t> out(size_);
    MPI_Request r;
    MPI_Iallgather(&value, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, coll_, &r);
    if (!wait(&r, -1)) return internal_error("aborted while gathering from every rank");
    return out;
  }
  Status broadcast(void* data, size_t bytes, int root) override {
    if (bytes > static_cast<size_t>(INT_MAX)) return internal_error("broadcast of more than 2 GiB");
    MPI_Request r;
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, coll_, &r);
    if (!wait(&r, root)) return internal_error("aborted while broadcasting from rank " + std::to_string(root));
    return Status::ok();
  }
  Status barrier() override {
    MPI_Request r;
    MPI_Ibarrier(coll_, &r);
    if (!wait(&r, -1)) return internal_error("aborted in a barrier");
    return Status::ok();
  }
  Status split_groups(int group) override {
    if (group_ != MPI_COMM_NULL) MPI_Comm_free(&group_);
    if (MPI_Comm_split(coll_, group, rank_, &group_) != MPI_SUCCESS) return internal_error("MPI_Comm_split failed");
    MPI_Comm_set_errhandler(group_, MPI_ERRORS_RETURN);
    return Status::ok();
  }
  Status group_allreduce_sum(void* data, int64_t count, DType dtype) override {
    if (group_ == MPI_COMM_NULL) return internal_error("group_allreduce_sum before split_groups");
    if (dtype != DType::kFloat32 && dtype != DType::kFloat64)
      return unsupported(std::string("all-reduce of ") + dtype_name(dtype) + " gradients");
    const MPI_Datatype t = dtype == DType::kFloat64 ? MPI_DOUBLE : MPI_FLOAT;
    for (int64_t done = 0; done < count;) {  // MPI counts are int
      const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX / 8));
      char* p = static_cast<char*>(data) + done * static_cast<int64_t>(dtype_size(dtype));
      MPI_Request r;
      MPI_Iallreduce(MPI_IN_PLACE, p, n, t, MPI_SUM, group_, &r);
      if (!wait(&r, -1)) return internal_error("aborted while averaging gradients over the replicas");
      done += n;
    }
    return Status::ok();
  }
  bool send(int to, int kind, int64_t seq, const void* data, size_t bytes) override {
    if (bytes > static_cast<size_t>(INT_MAX)) return false;
    MPI_Request r;
    MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, to, tag(kind, seq), ctl_, &r);
    return wait(&r, to);
  }
  bool recv(int from, int kind, int64_t seq, void* data, size_t bytes) override {
    if (bytes > static_cast<size_t>(INT_MAX)) return false;
    MPI_Request r;
    MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, from, tag(kind, seq), ctl_, &r);
    return wait(&r, from);
  }
  bool recv_patiently(int from, int kind, int64_t seq, void* data, size_t bytes) override {
    if (bytes > static_cast<size_t>(INT_MAX)) return false;
    MPI_Request r;
    MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, from, tag(kind, seq), ctl_, &r);
    return wait(&r, from, 1000);
  }
  Expected<std::unique_ptr<Link>> make_link(std::vector<const Value*> values, int from, int to, int kind,
                                            int capacity) override {
    if (from != rank_ && to != rank_) return internal_error("a link of which this rank is no end");
    if (kind < 0 || kind >= kKinds) return internal_error("link kind out of range");
    size_t bytes = 0;
    for (const Value* v : values) bytes += static_cast<size_t>(numel(v->dims)) * dtype_size(v->dtype);
    if (bytes > static_cast<size_t>(INT_MAX))
      return unsupported("the values crossing from stage " + std::to_string(from) + " to stage " + std::to_string(to) +
                         " are " + std::to_string(bytes >> 20) + " MiB per pass; MPI links carry at most 2 GiB per message");
    const int peer = from == rank_ ? to : from;
    ASSIGN_OR_RETURN(const double offset, clock_offset(peer));
    return std::unique_ptr<Link>(new MpiLink(std::move(values), *this, peer, from == rank_, kind, capacity, offset));
  }
  void abort_waits() override { aborted_ = true; }
  void start_watchdog(double timeout_s, std::function<void(int, const std::string&)> on_lost) override;
  void share_stop(std::atomic<bool>* flag) override { stop_flag_ = flag; }
  Status finalize() override;
  int64_t driven_sends() const override { return pump_.pumped(); }
  size_t eager_limit_bytes() const override { return rendezvous_bytes(); }
  [[noreturn]] void abort_job(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

  // Waits for `r` by polling (backoff's pauses up to max_nap_us); false when aborted or on an MPI
  // error (reported as `peer` lost when that is known).
  bool wait(MPI_Request* r, int peer, int max_nap_us = 50) {
    int spins = 0;
    for (;;) {
      int done = 0;
      const int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        report_error(peer, rc);
        return false;
      }
      if (done) return true;
      if (aborted_) return false;
      backoff(spins, max_nap_us);
    }
  }
  void report_error(int peer, int rc) {
    lose(peer, (peer >= 0 ? "rank " + std::to_string(peer) : std::string("a rank")) + ": MPI error: " + mpi_error_string(rc));
    aborted_ = true;
  }
  int tag(int kind, int64_t seq) const { return static_cast<int>(seq % tag_mod_) * kKinds + kind; }
  MPI_Comm data_comm() const { return data_; }
  SendPump& pump() { return pump_; }
  bool aborted() const { return aborted_; }

 private:
  static constexpr int kKinds = 16;  // message kinds < 16 (runtime/pipeline/stage.h, the NCCL link ids: 15)
  static constexpr int kMsgClock = 14;  // clock_offset's (tools/mpi_job.cpp's link probe: 13)
  // Seconds to add to a time of this rank's steady clock to read `peer`'s: 0 on one node (one
  // clock); across nodes estimated once per pair, when its first link is made (every rank makes
  // its links in one order, so both ends are here together), as NTP does: of 8 round trips of a
  // time stamp, the one with the least delay; the lower rank's estimate serves both.
  Expected<double> clock_offset(int peer);
  std::map<int, double> clock_offsets_;  // by peer (made on the thread that wires the ranks)
  void beat();
  void judge(double timeout_s);
  void stop_watchdog();
  void lose(int peer, const std::string& why);
  std::string describe(int r) const;

  MPI_Comm coll_ = MPI_COMM_NULL, ctl_ = MPI_COMM_NULL, data_ = MPI_COMM_NULL, hb_ = MPI_COMM_NULL;
  MPI_Comm group_ = MPI_COMM_NULL;  // this rank's replica group (split_groups)
  int64_t tag_mod_ = 1;
  std::vector<int> pids_;
  std::atomic<bool> aborted_{false};
  // The watchdog is two threads: `beater` exchanges the heartbeats over MPI, `judge` decides
  // from what it heard and calls no MPI function, so that it keeps time while MPI blocks a thread
  // (OpenMPI's TCP transport can hold a lock while it waits for the launcher to print a failed
  // connection to a rank that is gone).
  std::thread beater_, judge_;
  std::vector<char> local_;                                  // peers whose process this rank can see
  std::unique_ptr<std::atomic<int64_t>[]> heard_ns_;         // when each peer was last heard (steady clock)
  std::unique_ptr<std::atomic<bool>[]> ask_;                 // peers to ask for an answer at once
  std::atomic<bool> stop_heard_{false};                      // a peer has a stop request
  std::atomic<bool> stop_{false}, in_final_barrier_{false}, finished_{false}, lost_reported_{false};
  std::function<void(int, const std::string&)> on_lost_;
  std::atomic<std::atomic<bool>*> stop_flag_{nullptr};
  bool finalized_ = false;
  SendPump pump_{aborted_};  // after aborted_, which it reads
};

MpiLink::MpiLink(std::vector<const Value*> values, MpiCluster& c, int peer, bool sending, int kind, int capacity,
                 double clock_offset)
    : Link(std::move(values)), c_(c), peer_(peer), kind_(kind), sending_(sending), clock_offset_(clock_offset) {
  for (const Value* v : values_) bytes_ += static_cast<size_t>(numel(v->dims)) * dtype_size(v->dtype);
  const int n = sending ? std::max(1, capacity) : 1;
  bufs_.assign(n, std::vector<char>(bytes_ + sizeof(double)));
  reqs_.assign(n, MPI_REQUEST_NULL);
  pumped_ = std::make_unique<std::atomic<int>[]>(n);
  for (int i = 0; i < n; ++i) pumped_[i].store(SendPump::kIdle);
  pump_ = sending && bytes_ + sizeof(double) > rendezvous_bytes();
}

MpiLink::~MpiLink() {
  if (c_.aborted() || aborted_) return;  // the job is ending; outstanding sends may never match
  for (MPI_Request& r : reqs_)
    if (r != MPI_REQUEST_NULL) c_.wait(&r, peer_);
  for (size_t i = 0; i < reqs_.size(); ++i) {  // the pump's
    int spins = 0;
    while (pumped_[i].load(std::memory_order_acquire) == SendPump::kInFlight && !c_.aborted()) backoff(spins);
  }
}

bool MpiLink::stop() const { return aborted_ || c_.aborted(); }

bool MpiLink::send(int64_t key, Executor& from) {
  PT_CHECK(sending_) << "send on the receiving end of a link";
  int slot = -1, spins = 0;
  while (slot < 0) {
    for (size_t i = 0; i < reqs_.size() && slot < 0; ++i) {
      if (const int p = pumped_[i].load(std::memory_order_acquire); p != SendPump::kIdle) {
        if (p == SendPump::kInFlight) continue;
        pumped_[i].store(SendPump::kIdle, std::memory_order_relaxed);
        if (p == SendPump::kFailed) {
          c_.report_error(peer_, MPI_ERR_OTHER);
          return false;
        }
      }
      if (reqs_[i] != MPI_REQUEST_NULL) {
        int done = 0;
        const int rc = MPI_Test(&reqs_[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          c_.report_error(peer_, rc);
          return false;
        }
        if (!done) continue;
      }
      slot = static_cast<int>(i);
    }
    if (slot >= 0) break;
    if (stop()) return false;
    backoff(spins);
  }
  char* p = bufs_[slot].data();
  for (const Value* v : values_) {
    const TensorView t = from.view(v);
    if (Status st = from.device()->to_host(p, t.data, t.bytes(), from.stream()); !st.is_ok()) {
      error_ = st;
      return false;
    }
    p += t.bytes();
  }
  const double sent = steady_now();
  std::memcpy(bufs_[slot].data() + bytes_, &sent, sizeof sent);
  MPI_Isend(bufs_[slot].data(), static_cast<int>(bytes_ + sizeof sent), MPI_BYTE, peer_, c_.tag(kind_, key),
            c_.data_comm(), &reqs_[slot]);
  if (pump_) {  // the pump drives it while this stage computes (see SendPump)
    c_.pump().add(reqs_[slot], &pumped_[slot]);
    reqs_[slot] = MPI_REQUEST_NULL;
  }
  return true;
}

bool MpiLink::recv(int64_t key, Executor& to) {
  PT_CHECK(!sending_) << "recv on the sending end of a link";
  const double asked = steady_now();
  MPI_Request r;
  MPI_Irecv(bufs_[0].data(), static_cast<int>(bytes_ + sizeof(double)), MPI_BYTE, peer_, c_.tag(kind_, key), c_.data_comm(), &r);
  int spins = 0;
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      c_.report_error(peer_, rc);
      return false;
    }
    if (done) break;
    if (stop()) return false;
    backoff(spins);
  }
  const char* p = bufs_[0].data();
  for (const Value* v : values_) {
    const TensorView t = to.view(v);
    if (Status st = to.device()->to_device(t.data, p, t.bytes(), to.stream()); !st.is_ok()) {
      error_ = st;
      return false;
    }
    p += t.bytes();
  }
  double sent = 0;
  std::memcpy(&sent, bufs_[0].data() + bytes_, sizeof sent);
  sent -= clock_offset_;  // on this rank's clock
  if (asked < sent) {     // the receiver was waiting: the time from the send to holding the message
    handoffs_.add(std::max(0.0, steady_now() - sent));
  }
  return true;
}

Expected<double> MpiCluster::clock_offset(int peer) {
  if (node_of_.at(peer) == node_of_.at(rank_)) return 0.0;
  if (auto it = clock_offsets_.find(peer); it != clock_offsets_.end()) return it->second;
  // Polls without sleeping (a sleep would add to one side of the round trip), yielding the core.
  auto move = [&](bool out, double* v, int n, int64_t seq) {
    MPI_Request r;
    if (out) MPI_Isend(v, n, MPI_DOUBLE, peer, tag(kMsgClock, seq), ctl_, &r);
    else MPI_Irecv(v, n, MPI_DOUBLE, peer, tag(kMsgClock, seq), ctl_, &r);
    for (;;) {
      int done = 0;
      const int rc = MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        report_error(peer, rc);
        return false;
      }
      if (done) return true;
      if (aborted_) return false;
      std::this_thread::yield();
    }
  };
  constexpr int kRounds = 8;
  const bool lead = rank_ < peer;
  double offset = 0, best = -1;
  bool ok = true;
  for (int k = 0; k < kRounds && ok; ++k) {
    if (lead) {  // t0 out; back the peer's receipt t1 and reply t2; t3 here
      double t0 = steady_now(), t12[2];
      ok = move(true, &t0, 1, 2 * k) && move(false, t12, 2, 2 * k + 1);
      const double t3 = steady_now();
      const double delay = (t3 - t0) - (t12[1] - t12[0]);
      if (ok && (best < 0 || delay < best)) {
        best = delay;
        offset = ((t12[0] - t0) + (t12[1] - t3)) / 2;
      }
    } else {
      double t0 = 0, t12[2];
      ok = move(false, &t0, 1, 2 * k);
      t12[0] = steady_now();
      t12[1] = steady_now();
      ok = ok && move(true, t12, 2, 2 * k + 1);
    }
  }
  ok = ok && move(lead, &offset, 1, 2 * kRounds);
  if (!ok) return internal_error("aborted while setting the clocks of ranks " + std::to_string(rank_) + " and " +
                                 std::to_string(peer) + " side by side");
  if (!lead) offset = -offset;
  clock_offsets_[peer] = offset;
  return offset;
}

// Open MPI's TCP transport sends a message over its eager limit (64 KiB by default) in two
// phases, the second only when the sender's process next calls into MPI; a stage that sends its
// activations and then computes for milliseconds held its gradients back that long (a 262 KB
// message of ResNet-18 between two emulated nodes took 6.7 ms instead of 0.1). Up to the socket
// buffers' size (4 MiB by default on Linux) a message sent eagerly is on its way when MPI_Isend
// returns. Set before MPI_Init, unless the user's own (mpirun --mca, OMPI_MCA_*) are set.
void set_tcp_eager_limits() {
  for (const char* var : {"OMPI_MCA_btl_tcp_eager_limit", "OMPI_MCA_btl_tcp_rndv_eager_limit",
                          "OMPI_MCA_btl_tcp_max_send_size"})
    setenv(var, "4194304", 0);
}

Status MpiCluster::start(int* argc, char*** argv, const LaunchEnv& env) {
  set_tcp_eager_limits();
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return internal_error("MPI_Init_thread failed");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    return unsupported("the MPI library offers thread level " + std::to_string(provided) +
                       "; onnx-pipetrain needs MPI_THREAD_MULTIPLE (stage threads and the coordinator both talk)");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (size_ != env.size) {
    MPI_Finalize();
    return unsupported(env.launcher + " started " + std::to_string(env.size) + " ranks, but MPI_Init found a job of " +
                       std::to_string(size_) + (env.launcher == "srun" ? ": srun needs MPI support (srun --mpi=pmix; "
                                                                        "see srun --mpi=list)"
                                                                      : ": the launcher and the MPI library do not match"));
  }
  for (MPI_Comm* c : {&coll_, &ctl_, &data_, &hb_}) {
    MPI_Comm_dup(MPI_COMM_WORLD, c);
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  }
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  const int64_t tag_ub = flag && ub ? *static_cast<int*>(ub) : 32767;
  tag_mod_ = std::max<int64_t>(1, (tag_ub + 1) / kKinds);
  // Hosts and process ids of every rank: node numbers by first appearance, local ranks.
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(256 * size_);
  MPI_Allgather(host, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, coll_);
  int pid = static_cast<int>(getpid());
  pids_.assign(size_, 0);
  MPI_Allgather(&pid, 1, MPI_INT, pids_.data(), 1, MPI_INT, coll_);
  hosts_.clear();
  node_of_.clear();
  std::vector<std::string> nodes;
  for (int r = 0; r < size_; ++r) {
    hosts_.emplace_back(&hosts[256 * r]);
    auto it = std::find(nodes.begin(), nodes.end(), hosts_.back());
    node_of_.push_back(static_cast<int>(it - nodes.begin()));
    if (it == nodes.end()) nodes.push_back(hosts_.back());
  }
  num_nodes_ = static_cast<int>(nodes.size());
  if (const char* skew = std::getenv("PIPETRAIN_TEST_CLOCK_SKEW_S"))
    g_test_clock_skew_s = std::strtod(skew, nullptr) * node_of_[rank_];
  local_rank_ = local_size_ = 0;
  for (int r = 0; r < size_; ++r)
    if (node_of_[r] == node_of_[rank_]) {
      if (r < rank_) ++local_rank_;
      ++local_size_;
    }
  return Status::ok();
}

MpiCluster::~MpiCluster() {
  stop_watchdog();
  pump_.stop();
}

void MpiCluster::stop_watchdog() {
  stop_ = true;
  if (judge_.joinable()) judge_.join();
  if (beater_.joinable()) beater_.join();
}

void MpiCluster::lose(int peer, const std::string& why) {
  if (finished_) return;
  if (in_final_barrier_) {
    // A peer that passed the final barrier may exit before this rank has seen the barrier end.
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (!finished_ && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (finished_) return;
  }
  if (lost_reported_.exchange(true)) return;
  if (on_lost_) on_lost_(peer, why);  // normally does not return
  aborted_ = true;
}

void MpiCluster::start_watchdog(double timeout_s, std::function<void(int, const std::string&)> on_lost) {
  on_lost_ = std::move(on_lost);
  struct sigaction sa{};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  // Peers whose process this rank can see (same host, and visible in this pid namespace now).
  local_.assign(size_, 0);
  for (int r = 0; r < size_; ++r) local_[r] = r != rank_ && node_of_[r] == node_of_[rank_] && process_alive(pids_[r]);
  heard_ns_.reset(new std::atomic<int64_t>[size_]);
  ask_.reset(new std::atomic<bool>[size_]);
  const int64_t now = Clock::now().time_since_epoch().count();
  for (int r = 0; r < size_; ++r) {
    heard_ns_[r] = now;
    ask_[r] = false;
  }
  beater_ = std::thread([this] { beat(); });
  judge_ = std::thread([this, timeout_s] { judge(timeout_s); });
}

std::string MpiCluster::describe(int r) const {
  const int64_t step = step_.load(std::memory_order_relaxed);
  return "rank " + std::to_string(r) + " (pid " + std::to_string(pids_[r]) + " on " + hosts_[r] + ")" +
         (step > 0 ? " at step " + std::to_string(step) : std::string());
}

// A heartbeat is one byte of flags: kBeat; kStop once this rank has a stop request (its own or
// heard), which every rank gets at once rather than with the next beat; kAsk: answer at once.
constexpr char kBeat = 1, kStop = 2, kAsk = 4;

void MpiCluster::beat() {
  std::vector<MPI_Request> rreq(size_, MPI_REQUEST_NULL), sreq(size_, MPI_REQUEST_NULL);
  std::vector<char> inbox(size_, 0), outbox(size_, kBeat), told_stop(size_, 0), answer(size_, 0);
  for (int r = 0; r < size_; ++r)
    if (r != rank_) MPI_Irecv(&inbox[r], 1, MPI_CHAR, r, 0, hb_, &rreq[r]);
  auto last_beat = Clock::now() - std::chrono::seconds(1);
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop_) break;
    const auto now = Clock::now();
    std::atomic<bool>* const flag = stop_flag_.load();
    if (flag && stop_heard_) flag->store(true);
    const bool stopping = flag && flag->load();
    const bool beat_due = now - last_beat > std::chrono::milliseconds(500);
    if (beat_due) last_beat = now;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      int done = 1;
      if (sreq[r] != MPI_REQUEST_NULL) MPI_Test(&sreq[r], &done, MPI_STATUS_IGNORE);
      const bool ask = ask_[r].load();
      if (!done || !(beat_due || (stopping && !told_stop[r]) || ask || answer[r])) continue;
      outbox[r] = static_cast<char>(kBeat | (stopping ? kStop : 0) | (ask ? kAsk : 0));
      told_stop[r] |= stopping;
      answer[r] = 0;
      if (ask) ask_[r] = false;
      MPI_Isend(&outbox[r], 1, MPI_CHAR, r, 0, hb_, &sreq[r]);
    }
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      for (;;) {
        int done = 0;
        if (MPI_Test(&rreq[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) break;
        heard_ns_[r] = Clock::now().time_since_epoch().count();
        if (inbox[r] & kStop) stop_heard_ = true;
        answer[r] |= (inbox[r] & kAsk) != 0;
        MPI_Irecv(&inbox[r], 1, MPI_CHAR, r, 0, hb_, &rreq[r]);
      }
    }
  }
  for (int r = 0; r < size_; ++r) {
    if (rreq[r] != MPI_REQUEST_NULL) {
      MPI_Cancel(&rreq[r]);
      MPI_Wait(&rreq[r], MPI_STATUS_IGNORE);
    }
    if (sreq[r] != MPI_REQUEST_NULL) MPI_Wait(&sreq[r], MPI_STATUS_IGNORE);
  }
}

void MpiCluster::judge(double timeout_s) {
  // After the launcher's SIGTERM, a rank on another machine has this long to answer (its beater
  // polls every 50 ms); mpirun sends SIGKILL odls_base_sigkill_timeout (1 s) after its SIGTERM.
  constexpr auto kAnswerWithin = std::chrono::milliseconds(500);
  bool sigterm_taken = false;
  Clock::time_point asked_at{};
  auto heard = [&](int r) { return Clock::time_point(Clock::duration(heard_ns_[r].load())); };
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop_) break;
    const auto now = Clock::now();
    for (int r = 0; r < size_; ++r)
      if (local_[r] && !process_alive(pids_[r])) lose(r, describe(r) + ": its process ended");
    std::atomic<bool>* const flag = stop_flag_.load();
    if (g_sigterm && !sigterm_taken) {
      // The launcher stops the job, normally because a rank ended: name it when it is visible.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (int r = 0; r < size_; ++r)
        if (local_[r] && !process_alive(pids_[r])) lose(r, describe(r) + ": its process ended");
      // Every peer here is alive: during training this is mpirun passing on Ctrl-C (or the job
      // being cancelled), which ends with a checkpoint like a stop request, or mpirun ending the
      // job because a rank on another machine is gone: those are asked to answer at once.
      if (flag) {
        sigterm_taken = true;
        asked_at = now;
        flag->store(true);
        for (int r = 0; r < size_; ++r)
          if (r != rank_ && !local_[r]) ask_[r] = true;
      } else {
        lose(-1, "stopped by the launcher (SIGTERM): another rank ended or the job was cancelled");
      }
    }
    if (flag && sigterm_taken) flag->store(true);
    // The peer silent longest: when MPI blocks this rank's beater too, every peer falls silent
    // here, the one that was gone first before the others.
    int quiet = -1;
    double longest = timeout_s;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const double silent = std::chrono::duration<double>(now - heard(r)).count();
      if (silent > longest) quiet = r, longest = silent;
      if (sigterm_taken && !local_[r] && now - asked_at > kAnswerWithin && heard(r) < asked_at)
        lose(r, describe(r) + ": no answer within 0.5 s after the launcher's SIGTERM (mpirun ends a job whose "
                              "rank or node is gone)");
    }
    if (quiet >= 0) {
      char b[96];
      std::snprintf(b, sizeof b, ": no heartbeat for %.0f s (PIPETRAIN_MPI_TIMEOUT)", longest);
      lose(quiet, describe(quiet) + b);
    }
  }
}

Status MpiCluster::finalize() {
  if (finalized_) return Status::ok();
  in_final_barrier_ = true;
  Status s = barrier();
  finished_ = true;
  stop_watchdog();
  pump_.stop();
  if (!s.is_ok()) return s;
  for (MPI_Comm* c : {&coll_, &ctl_, &data_, &hb_}) MPI_Comm_free(c);
  if (group_ != MPI_COMM_NULL) MPI_Comm_free(&group_);
  MPI_Finalize();
  finalized_ = true;
  return Status::ok();
}

}  // namespace

Expected<std::unique_ptr<Cluster>> make_mpi_cluster(int* argc, char*** argv, const LaunchEnv& env) {
  auto c = std::make_unique<MpiCluster>();
  RETURN_IF_ERROR(c->start(argc, argv, env));
  return std::unique_ptr<Cluster>(std::move(c));
}

}  // namespace pt
