// The MPI side of the command line: see tools/mpi_job.h.
#include "tools/mpi_job.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

std::unique_ptr<pt::Cluster> g_cluster;

namespace {
// Whether every rank agreed on model, flags and plan (after that, a failure ends the job).
bool g_started = false;
int g_peer_failed = 0;  // the exit code of a rank that failed before the start (it printed why)
}  // namespace

// A failure on one rank. Before the start every rank reaches exactly one agreement (here, or
// agree_start on success), so all of them stop together with the first failing rank's code;
// after it, the failing rank ends the whole job.
int rank_fail(const pt::Status& s) {
  const int me = g_cluster->rank(), code = pt::exit_code_for(s);
  auto print = [&] {
    if (me == 0) std::fprintf(stderr, "onnx-pipetrain: error: %s\n", s.message().c_str());
    else std::fprintf(stderr, "onnx-pipetrain: rank %d: error: %s\n", me, s.message().c_str());
    std::fflush(stderr);
  };
  if (g_started) {
    print();
    g_cluster->abort_job(code);
  }
  if (g_peer_failed) return g_peer_failed;  // another rank failed first: the error here follows from it
  auto codes = g_cluster->allgather(static_cast<uint64_t>(code));
  if (!codes || me == 0 || (*codes)[0] == 0) print();  // rank 0 speaks for failures every rank shares
  return code;
}

// The start-up agreement of a job: every rank's status, then model, flags and plan compared
// with rank 0's. Returns 0 to go on, or the exit code every rank returns.
// Every collective before the start is preceded by this status exchange, which a failing rank's
// rank_fail() matches: 0 when every rank is fine, else the first failing rank's exit code.
int sync_before_start() {
  auto codes = g_cluster->allgather(0);
  if (!codes) return 1;
  for (int r = 0; r < g_cluster->size(); ++r)
    if ((*codes)[r] != 0) {
      if (g_cluster->rank() == 0)
        std::fprintf(stderr, "onnx-pipetrain: error: rank %d failed before training (see its message)\n", r);
      g_peer_failed = static_cast<int>((*codes)[r]);
      return g_peer_failed;
    }
  return 0;
}

int agree_start(uint64_t model, uint64_t flags, uint64_t plan) {
  const int me = g_cluster->rank();
  if (int code = sync_before_start(); code != 0) return code;
  const std::pair<const char*, uint64_t> parts[] = {{"model file differs", model}, {"flags differ", flags},
                                                    {"plan differs", plan}};
  for (const auto& [what, h] : parts) {
    auto all = g_cluster->allgather(h);
    if (!all) return rank_fail(all.status());
    for (int r = 1; r < g_cluster->size(); ++r)
      if ((*all)[r] != (*all)[0]) {
        if (me == 0)
          std::fprintf(stderr,
                       "onnx-pipetrain: error: rank %d's %s from rank 0's: every rank must run the same model file, "
                       "training flags and plan (rank %d on %s, rank 0 on %s)\n",
                       r, what, r, g_cluster->host_of(r).c_str(), g_cluster->host_of(0).c_str());
        return 2;
      }
  }
  g_started = true;
  return 0;
}

std::string plan_fingerprint(const pt::Plan& p) {
  std::string s = std::to_string(p.stages.size());
  for (const pt::StagePlan& st : p.stages) {
    s += "|" + std::to_string(st.index) + ":";
    for (const pt::Node* n : st.nodes) s += n->name + ",";
  }
  return s;
}

// Rank 0's measured CPU spec for every rank (planning is deterministic given the specs).
pt::Status share_cpu_spec(pt::DeviceSpec* d) {
  struct Wire {
    char name[64];
    int32_t kind;
    double peak_flops, mem_bandwidth, memory_bytes, kernel_overhead_s;
  } w{};
  if (sync_before_start() != 0) return pt::internal_error("another rank failed");
  std::snprintf(w.name, sizeof w.name, "%s", d->name.c_str());
  w.kind = static_cast<int32_t>(d->kind);
  w.peak_flops = d->peak_flops;
  w.mem_bandwidth = d->mem_bandwidth;
  w.memory_bytes = d->memory_bytes;
  w.kernel_overhead_s = d->kernel_overhead_s;
  RETURN_IF_ERROR(g_cluster->broadcast(&w, sizeof w, 0));
  d->name = w.name;
  d->kind = static_cast<pt::DeviceKind>(w.kind);
  d->peak_flops = w.peak_flops;
  d->mem_bandwidth = w.mem_bandwidth;
  d->memory_bytes = w.memory_bytes;
  d->kernel_overhead_s = w.kernel_overhead_s;
  return pt::Status::ok();
}

// The watchdog's verdict on a lost rank (runtime/cluster.h): one line naming it, then this rank
// exits, so that no rank waits for a stage that is gone.
void on_lost_rank(int lost, const std::string& why) {
  const int me = g_cluster->rank();
  if (lost >= 0)
    std::fprintf(stderr, "onnx-pipetrain: rank %d: error: lost %s; the pipeline needs every stage, so rank %d exits\n",
                 me, why.c_str(), me);
  else
    std::fprintf(stderr, "onnx-pipetrain: rank %d: %s; rank %d exits\n", me, why.c_str(), me);
  std::fflush(stderr);
  // The other survivors poll every 50 ms: staying a moment longer lets them name the rank that
  // was lost first rather than this one.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::_Exit(1);
}

