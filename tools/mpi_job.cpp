// The MPI side of a run: see tools/mpi_job.h.
#include "tools/mpi_job.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>

#include "core/cores.h"

namespace pt {

namespace {

// Set by the stop signals' handler, polled by the trainer at every mini-batch boundary.
std::atomic<bool> g_stop{false};
std::atomic<int64_t> g_first_stop_ns{0};

// The first SIGINT/SIGTERM asks for a stop at the next mini-batch boundary (checkpoint, model,
// exit 130). A second one within 2 s is the same request again (a launcher that signals both the
// process and its group, `timeout` among them) and changes nothing; one after that ends the
// process at once. Async-signal-safe: an atomic flag, clock_gettime, signal and raise.
extern "C" void on_stop_signal(int sig) {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  if (!g_stop.exchange(true)) {
    g_first_stop_ns.store(now);
    return;
  }
  if (now - g_first_stop_ns.load() < 2000000000) return;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

// A failure on one rank. Before the start every rank reaches exactly one agreement (here, or
// agree_start on success), so all of them stop together with the first failing rank's code;
// after it, the failing rank ends the whole job.
int MpiJob::rank_fail(const Status& s) {
  const int me = cluster_->rank(), code = exit_code_for(s);
  auto print = [&] {
    if (me == 0) std::fprintf(stderr, "onnx-pipetrain: error: %s\n", s.message().c_str());
    else std::fprintf(stderr, "onnx-pipetrain: rank %d: error: %s\n", me, s.message().c_str());
    std::fflush(stderr);
  };
  if (started_) {
    print();
    cluster_->abort_job(code);
  }
  if (peer_failed_) return peer_failed_;  // another rank failed first: the error here follows from it
  auto codes = cluster_->allgather(static_cast<uint64_t>(code));
  if (!codes || me == 0 || (*codes)[0] == 0) print();  // rank 0 speaks for failures every rank shares
  return code;
}

// Every collective before the start is preceded by this status exchange, which a failing rank's
// rank_fail() matches: 0 when every rank is fine, else the first failing rank's exit code.
int MpiJob::sync_before_start() {
  auto codes = cluster_->allgather(0);
  if (!codes) return 1;
  for (int r = 0; r < cluster_->size(); ++r)
    if ((*codes)[r] != 0) {
      if (cluster_->rank() == 0)
        std::fprintf(stderr, "onnx-pipetrain: error: rank %d failed before training (see its message)\n", r);
      peer_failed_ = static_cast<int>((*codes)[r]);
      return peer_failed_;
    }
  return 0;
}

namespace {

// Stage names of every stage of the plan, for agree_start.
std::string plan_fingerprint(const Plan& p) {
  std::string s = std::to_string(p.stages.size());
  for (const StagePlan& st : p.stages) {
    s.append("|").append(std::to_string(st.index)).append(":");
    for (const Node* n : st.nodes) s.append(n->name).append(",");
  }
  return s;
}

}  // namespace

// Rank 0's measured CPU spec for every rank (planning is deterministic given the specs).
Status MpiJob::share_cpu_spec(DeviceSpec* d) {
  struct Wire {
    char name[64];
    int32_t kind, calibrated;
    double peak_flops, mem_bandwidth, memory_bytes, kernel_overhead_s, share;
    double floor_s[kOpClasses][kCostPhases], scale[kOpClasses][kCostPhases], byte_scale[kOpClasses][kCostPhases];
  } w{};
  if (sync_before_start() != 0) return internal_error("another rank failed");
  std::snprintf(w.name, sizeof w.name, "%s", d->name.c_str());
  w.kind = static_cast<int32_t>(d->kind);
  w.peak_flops = d->peak_flops;
  w.mem_bandwidth = d->mem_bandwidth;
  w.memory_bytes = d->memory_bytes;
  w.kernel_overhead_s = d->kernel_overhead_s;
  w.share = d->share;
  w.calibrated = d->calibrated ? 1 : 0;
  for (int k = 0; k < kOpClasses; ++k)
    for (int ph = 0; ph < kCostPhases; ++ph) {
      w.floor_s[k][ph] = d->classes[k][ph].floor_s;
      w.scale[k][ph] = d->classes[k][ph].scale;
      w.byte_scale[k][ph] = d->classes[k][ph].byte_scale;
    }
  RETURN_IF_ERROR(cluster_->broadcast(&w, sizeof w, 0));
  d->name = w.name;
  d->kind = static_cast<DeviceKind>(w.kind);
  d->peak_flops = w.peak_flops;
  d->mem_bandwidth = w.mem_bandwidth;
  d->memory_bytes = w.memory_bytes;
  d->kernel_overhead_s = w.kernel_overhead_s;
  d->share = w.share;
  d->calibrated = w.calibrated != 0;
  for (int k = 0; k < kOpClasses; ++k)
    for (int ph = 0; ph < kCostPhases; ++ph) d->classes[k][ph] = ClassCost{w.floor_s[k][ph], w.scale[k][ph], w.byte_scale[k][ph], 0};
  return Status::ok();
}

// Rank 0's profile (--profile) for every rank, measured (or read from its run folder's cache) by
// rank 0 alone: per-node times differ from run to run, and every rank must plan with the same.
// Every rank takes part in a job, with or without --profile, so that the collectives match
// whatever the flags say (a difference in --profile is refused by agree_start afterwards).
Status MpiJob::share_profile(Profile* p, bool* have) {
  if (sync_before_start() != 0) return internal_error("another rank failed");
  std::string wire;  // per entry: phase byte, name length (uint32), name, seconds (double)
  if (cluster_->rank() == 0 && *have) {
    for (const auto* m : {&p->fwd_s, &p->bwd_s})
      for (const auto& [name, s] : *m) {
        const char phase = m == &p->fwd_s ? 'f' : 'b';
        const uint32_t n = static_cast<uint32_t>(name.size());
        wire.append(&phase, 1).append(reinterpret_cast<const char*>(&n), sizeof n).append(name);
        wire.append(reinterpret_cast<const char*>(&s), sizeof s);
      }
  }
  int64_t head[2] = {*have ? 1 : 0, static_cast<int64_t>(wire.size())};
  RETURN_IF_ERROR(cluster_->broadcast(head, sizeof head, 0));
  wire.resize(static_cast<size_t>(head[1]));
  if (head[1] > 0) RETURN_IF_ERROR(cluster_->broadcast(wire.data(), wire.size(), 0));
  *have = head[0] != 0;
  if (cluster_->rank() == 0) return Status::ok();
  *p = Profile{};
  for (size_t at = 0; at < wire.size();) {
    const char phase = wire[at++];
    uint32_t n = 0;
    std::memcpy(&n, wire.data() + at, sizeof n);
    at += sizeof n;
    std::string name = wire.substr(at, n);
    at += n;
    double s = 0;
    std::memcpy(&s, wire.data() + at, sizeof s);
    at += sizeof s;
    (phase == 'f' ? p->fwd_s : p->bwd_s)[std::move(name)] = s;
  }
  return Status::ok();
}

// Compares the fingerprints of model file, flags and plan with rank 0's; 0 to go on, else the
// exit code (2, naming the rank that differs).
int MpiJob::agree_hashes(uint64_t model, uint64_t flags, uint64_t plan) {
  const int me = cluster_->rank();
  if (int code = sync_before_start(); code != 0) return code;
  const std::pair<const char*, uint64_t> parts[] = {{"model file differs", model}, {"flags differ", flags},
                                                    {"plan differs", plan}};
  for (const auto& [what, h] : parts) {
    auto all = cluster_->allgather(h);
    if (!all) return rank_fail(all.status());
    for (int r = 1; r < cluster_->size(); ++r)
      if ((*all)[r] != (*all)[0]) {
        if (me == 0)
          std::fprintf(stderr,
                       "onnx-pipetrain: error: rank %d's %s from rank 0's: every rank must run the same model file, "
                       "training flags and plan (rank %d on %s, rank 0 on %s)\n",
                       r, what, r, cluster_->host_of(r).c_str(), cluster_->host_of(0).c_str());
        return 2;
      }
  }
  started_ = true;
  return 0;
}

Expected<std::unique_ptr<MpiJob>> MpiJob::join(int* argc, char*** argv, LostRankHandler on_lost_rank) {
  std::unique_ptr<MpiJob> job(new MpiJob);
  ASSIGN_OR_RETURN(job->cluster_, Cluster::init(argc, argv));
  if (!job->cluster_) return job;
  const char* t = std::getenv("PIPETRAIN_MPI_TIMEOUT");
  const double timeout_s = t && std::atof(t) > 0 ? std::atof(t) : 30.0;
  const int me = job->cluster_->rank();
  job->cluster_->start_watchdog(timeout_s, [me, on_lost_rank](int lost, const std::string& why) { on_lost_rank(me, lost, why); });
  return job;
}

std::unique_ptr<MpiJob> MpiJob::single_process() { return std::unique_ptr<MpiJob>(new MpiJob); }

MpiJob::~MpiJob() = default;

Status MpiJob::leave() {
  if (!cluster_) return Status::ok();
  if (const int64_t n = cluster_->driven_sends(); n > 0 && cluster_->rank() == 0 && !quiet_)
    std::printf("mpi: rank 0 sent %lld messages over the TCP transport's eager limit (%.1f MiB); a progress thread "
                "of its own moved them while its stage computed\n",
                static_cast<long long>(n), static_cast<double>(cluster_->eager_limit_bytes()) / (1 << 20));
  Status s = cluster_->finalize();
  cluster_.reset();
  return s;
}

int MpiJob::fail(const Status& s) {
  if (cluster_) return rank_fail(s);
  std::fprintf(stderr, "onnx-pipetrain: error: %s\n", s.message().c_str());
  return exit_code_for(s);
}

namespace {
constexpr int kMsgLinkProbe = 13;  // after runtime/pipeline/stage.h's MessageKind, before the NCCL ids (15)
}  // namespace

// Rank 0 and the first rank on another node send each other messages of 4 KiB and 1 MiB through the
// cluster's own point-to-point path (what the coordinators' messages take; the stage links wait
// the same way): after a warm-up, the fastest of 5 round trips of each size, halved, gives
// t(s) = latency + s / bandwidth through the two points. Every rank gets rank 0's answer.
Expected<LinkSpec> MpiJob::measure_network_link(bool quiet) {
  if (network_link_) return *network_link_;
  if (sync_before_start() != 0) return internal_error("another rank failed");
  const int me = cluster_->rank();
  int peer = -1;
  for (int r = 1; r < cluster_->size() && peer < 0; ++r)
    if (cluster_->node_of(r) != cluster_->node_of(0)) peer = r;
  constexpr size_t kSmall = 4096, kLarge = 1 << 20;
  constexpr int kRounds = 5;
  struct Wire {
    double small_s = 0, large_s = 0;
    int32_t ok = 0;
  } w;
  if (peer > 0 && (me == 0 || me == peer)) {
    std::vector<char> buf(kLarge, 1);
    int64_t seq = 0;
    auto one_way = [&](size_t bytes, double* best) {
      for (int k = 0; k <= kRounds; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        const bool ok = me == 0 ? cluster_->send(peer, kMsgLinkProbe, seq, buf.data(), bytes) &&
                                      cluster_->recv(peer, kMsgLinkProbe, seq + 1, buf.data(), bytes)
                                : cluster_->recv(0, kMsgLinkProbe, seq, buf.data(), bytes) &&
                                      cluster_->send(0, kMsgLinkProbe, seq + 1, buf.data(), bytes);
        seq += 2;
        if (!ok) return false;
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 2;
        if (k > 0 && (*best == 0 || s < *best)) *best = s;  // k = 0: the warm-up
      }
      return true;
    };
    w.ok = one_way(kSmall, &w.small_s) && one_way(kLarge, &w.large_s) ? 1 : 0;
  }
  RETURN_IF_ERROR(cluster_->broadcast(&w, sizeof w, 0));
  if (!w.ok)
    return internal_error(std::string("measuring the link between nodes failed (rank 0 and rank ").append(std::to_string(peer)).append(")"));
  LinkSpec l;
  l.name = "measured";
  const double ds = static_cast<double>(kLarge - kSmall), dt = w.large_s - w.small_s;
  l.bandwidth = dt > 0 ? ds / dt : 0;  // 0: too fast to tell, infinite for the plan
  l.latency_s = std::max(0.0, w.small_s - (l.bandwidth > 0 ? kSmall / l.bandwidth : 0));
  if (me == 0 && !quiet)
    std::printf("network: measured between %s and %s (ranks 0 and %d): 4 KiB in %.1f us, 1 MiB in %.1f us one way: "
                "%.2f GB/s, %.1f us\n",
                cluster_->host_of(0).c_str(), cluster_->host_of(peer).c_str(), peer, 1e6 * w.small_s, 1e6 * w.large_s,
                l.bandwidth / 1e9, 1e6 * l.latency_s);
  network_link_ = l;
  return l;
}

Status MpiJob::check_ranks_per_node(int ranks_per_node, int64_t devices) const {
  if (ranks_per_node <= 0) return Status::ok();
  const std::string flag = "--ranks-per-node " + std::to_string(ranks_per_node);
  if (devices % ranks_per_node != 0)
    return invalid_input(flag + " does not divide the " + std::to_string(devices) +
                         " ranks (--gpus x --replicas): every node runs as many stages");
  if (!cluster_) return Status::ok();
  const int nodes = cluster_->num_nodes();
  if (int64_t{ranks_per_node} * nodes != cluster_->size())
    return invalid_input(flag + ": this job has " + std::to_string(cluster_->size()) + " ranks on " +
                         std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s") +
                         " (rank " + std::to_string(cluster_->rank()) + " on node " +
                         std::to_string(cluster_->node_of(cluster_->rank())) +
                         "); under mpirun the nodes come from the job: leave --ranks-per-node out or make them agree");
  return Status::ok();
}

Status MpiJob::check_stages(int gpus, int replicas) const {
  if (!cluster_ || int64_t{gpus} * replicas == cluster_->size()) return Status::ok();
  if (replicas > 1)
    return invalid_input("--gpus " + std::to_string(gpus) + " x --replicas " + std::to_string(replicas) + ": this job has " +
                         std::to_string(cluster_->size()) + " ranks; one rank runs one stage of one replica, so the job needs " +
                         std::to_string(int64_t{gpus} * replicas) + " ranks (mpirun -np " +
                         std::to_string(int64_t{gpus} * replicas) + ")");
  return invalid_input("--gpus " + std::to_string(gpus) + ": this job has " + std::to_string(cluster_->size()) +
                       " ranks; one rank runs one stage, so --gpus must equal the number of ranks (mpirun -np " +
                       std::to_string(gpus) + ")");
}

void MpiJob::set_plan_flags(PlanFlags* pf) {
  if (!cluster_) return;
  pf->write_reports = cluster_->rank() == 0;
  pf->node_of_stage.clear();
  // Stage k of replica 0 runs on rank k * R (rank_of in runtime/pipeline/stage.h).
  const int R = std::max(1, cluster_->size() / std::max(1, pf->stages));
  for (int k = 0; k < pf->stages; ++k) pf->node_of_stage.push_back(cluster_->node_of(std::min(k * R, cluster_->size() - 1)));
  pf->cpu_threads = threads_per_stage(pf->stages);
  pf->agree_cpu_spec = [this](DeviceSpec* d) { return share_cpu_spec(d); };
  quiet_ = pf->quiet;
  if (cluster_->num_nodes() > 1) {
    const bool quiet = pf->quiet;
    pf->measure_network_link = [this, quiet] { return measure_network_link(quiet); };
  }
  pf->profile_here = cluster_->rank() == 0;
  pf->agree_profile = [this](Profile* p, bool* have) { return share_profile(p, have); };
}

int MpiJob::cuda_devices_needed(int stages) const { return cluster_ ? cluster_->local_size() : stages; }

int MpiJob::local_gpu(int gpus_here) const { return cluster_ ? cluster_->local_rank() % std::max(1, gpus_here) : 0; }

void MpiJob::set_pipeline(PipelineOptions* po, bool use_cuda, int gpus_here, bool oversubscribe) const {
  if (!cluster_) return;
  po->cluster = cluster_.get();
  if (!use_cuda) return;
  po->gpu_of_stage.assign(cluster_->size(), 0);  // one stage per rank (check_stages)
  po->gpu_of_stage[cluster_->rank()] = local_gpu(gpus_here);
  po->nccl_links = !oversubscribe;  // ranks sharing a GPU exchange through MPI
}

int MpiJob::threads_per_stage(int stages) const {
  return std::max(1, usable_cores() /
                         (cluster_ ? cluster_->local_size() : std::max(1, stages)));
}

int MpiJob::agree_start(const TrainingSpec& spec, const std::string& model_hash, const Plan& plan) {
  if (!cluster_) return 0;
  return agree_hashes(fnv1a64(model_hash), fnv1a64(serialize_for_agreement(spec)), fnv1a64(plan_fingerprint(plan)));
}

StopRequests::StopRequests(const MpiJob& job) : cluster_(job.cluster()) {
  std::signal(SIGINT, on_stop_signal);
  if (!cluster_) {
    std::signal(SIGTERM, on_stop_signal);
    return;
  }
  std::signal(SIGUSR1, on_stop_signal);
  cluster_->share_stop(&g_stop);
}

StopRequests::~StopRequests() {
  // After a stop the run writes its model and exits 130: a repeated signal must not cut that short.
  const auto after = g_stop.load() ? SIG_IGN : SIG_DFL;
  std::signal(SIGINT, after);
  if (!cluster_) {
    std::signal(SIGTERM, after);
    return;
  }
  std::signal(SIGUSR1, SIG_DFL);
  cluster_->share_stop(nullptr);
}

const std::atomic<bool>* StopRequests::flag() const { return &g_stop; }

}  // namespace pt
