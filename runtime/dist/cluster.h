// The process group of a multi-process run: one rank per pipeline stage, launched by mpirun or
// srun. Rank detection from the launcher's environment, collectives for the start and the end
// of a run, point-to-point messages for the coordinator (losses, weights gathered to rank 0),
// Links between stages, and the watchdog that turns a lost rank into a prompt, named exit and
// passes stop requests (Ctrl-C) between ranks.
// Only runtime/dist/mpi_cluster.cpp includes <mpi.h>; without MPI, init() reports a single process.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/hash.h"
#include "core/status.h"
#include "runtime/dist/transport.h"

namespace pt {

// What the launcher's environment says, read before MPI is initialised.
struct LaunchEnv {
  int rank = 0, size = 1;              // -1 when the variable is absent
  int local_rank = 0, local_size = 1;
  std::string launcher;                // "mpirun", "srun", "pmi" or "" (single process)
};
// OMPI_COMM_WORLD_*, then PMI_RANK/PMI_SIZE (MPICH, Intel MPI), then SLURM_PROCID/SLURM_NTASKS.
LaunchEnv detect_launch_env();

// Whether this build has MPI (PIPETRAIN_MPI found an MPI library).
bool mpi_built();

class Cluster {
 public:
  virtual ~Cluster() = default;

  // MPI_Init_thread (MPI_THREAD_MULTIPLE) when the environment names a job of more than one
  // rank; nullptr for a single process. Errors: a multi-rank launch of a build without MPI, an
  // MPI library without thread support.
  static Expected<std::unique_ptr<Cluster>> init(int* argc, char*** argv);

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_of(int rank) const { return node_of_.at(rank); }
  int num_nodes() const { return num_nodes_; }
  const std::string& host_of(int rank) const { return hosts_.at(rank); }

  // ---- collectives: every rank calls them in the same order (polled, so a lost rank is noticed)
  // Every rank's `value`, by rank.
  virtual Expected<std::vector<uint64_t>> allgather(uint64_t value) = 0;
  // root's bytes to every rank.
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;
  // Replica groups (--replicas): collective over every rank, once: the ranks that pass the same
  // `group` form one group (ordered by rank); group_allreduce_sum then sums over this rank's group.
  virtual Status split_groups(int group) = 0;
  // Sums `count` values of `dtype` (float32 or float64) at `data` in place over this rank's group
  // (MPI_Allreduce, MPI_SUM); every rank of the group calls it in the same order.
  virtual Status group_allreduce_sum(void* data, int64_t count, DType dtype) = 0;

  // ---- point-to-point for the coordinators (tags from kind and sequence number). Blocking with
  // polling; false once abort_waits() was called.
  virtual bool send(int to, int kind, int64_t seq, const void* data, size_t bytes) = 0;
  virtual bool recv(int from, int kind, int64_t seq, void* data, size_t bytes) = 0;
  // The same, for a wait that need not end the moment the message arrives (rank 0's training loop
  // waiting for a step's loss): its polls grow apart, up to 1 ms, so that the waiting thread takes
  // little of a core a stage computes on (each poll's wake-up costs that core).
  virtual bool recv_patiently(int from, int kind, int64_t seq, void* data, size_t bytes) {
    return recv(from, kind, seq, data, bytes);
  }

  // A link for `values` from rank `from` to rank `to`, of which this rank is one end. `kind`
  // (0..7) tells apart links between the same two ranks; `capacity` messages may be in flight.
  virtual Expected<std::unique_ptr<Link>> make_link(std::vector<const Value*> values, int from, int to, int kind,
                                                    int capacity) = 0;

  // Ends every wait of send/recv and of the links made here.
  virtual void abort_waits() = 0;

  // Watches the other ranks (their processes on this node, heartbeats from every rank, the
  // launcher's SIGTERM) and calls `on_lost(rank, why)` from the watchdog thread when one is gone;
  // `on_lost` is expected not to return. A rank is lost after `timeout_s` without a heartbeat, or,
  // on another machine, when it does not answer within 0.5 s after the launcher's SIGTERM during
  // training (mpirun ends a job whose rank or node is gone, with SIGKILL 1 s later). `why` names
  // the rank's pid and host, and the step this rank was at (note_step).
  virtual void start_watchdog(double timeout_s, std::function<void(int, const std::string&)> on_lost) = 0;
  // The 1-based training step this rank works on, for the watchdog's verdict (0: not training).
  void note_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  // Stop requests shared by every rank (TrainConfig::stop of the run under way; null: none). Once
  // `*flag` is true here, the watchdog tells every rank at once (in the heartbeat), and a request
  // heard from any rank sets `*flag` here, also one heard before `flag` was given. While a flag is
  // given, the launcher's SIGTERM sets it (mpirun's answer to Ctrl-C) instead of ending the rank,
  // unless a rank on this machine is found gone.
  virtual void share_stop(std::atomic<bool>* flag) = 0;

  // The clean end: a barrier, the watchdog stopped, MPI_Finalize.
  virtual Status finalize() = 0;
  // This rank's sends over the transport's eager limit that a progress thread of its own drove
  // while the sending stage computed (mpi_cluster.cpp's SendPump), and that limit in bytes.
  virtual int64_t driven_sends() const { return 0; }
  virtual size_t eager_limit_bytes() const { return 0; }
  // Ends the whole job now (MPI_Abort) with `code`.
  [[noreturn]] virtual void abort_job(int code) = 0;

 protected:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, num_nodes_ = 1;
  std::atomic<int64_t> step_{0};
  std::vector<int> node_of_;
  std::vector<std::string> hosts_;
};


}  // namespace pt
