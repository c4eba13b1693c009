// The MPI job a run belongs to, as an object (tools/run_training.h takes it): joining and leaving
// the job, which rank does what, the planning inputs every rank takes from rank 0, the start-up
// agreement of every rank on model, spec and plan, failures before and after the start, the
// watchdog's verdict on a lost rank, and stop requests (Ctrl-C) that every rank obeys at the same
// mini-batch. A job of no ranks is a single process: every method then gives the single-process
// answer (launched without mpirun / srun, or a one-rank job).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "partitioner/plan.h"
#include "runtime/dist/cluster.h"
#include "runtime/pipeline/pipeline.h"
#include "tools/plan_step.h"
#include "tools/training_spec.h"

namespace pt {

class MpiJob {
 public:
  // The program's answer to the watchdog's verdict (runtime/dist/cluster.h) that rank `lost` is gone
  // (or, lost < 0, that the launcher ends the job), called on the watchdog thread of rank `me`:
  // the pipeline needs every stage, so it must end this process (the command line prints one line
  // and exits 1). The library itself never ends the process.
  using LostRankHandler = std::function<void(int me, int lost, const std::string& why)>;
  // Under mpirun / srun joins the job (MPI_Init, the lost-rank watchdog with
  // PIPETRAIN_MPI_TIMEOUT seconds, default 30); else a single process. Errors: MPI failed to start.
  static Expected<std::unique_ptr<MpiJob>> join(int* argc, char*** argv, LostRankHandler on_lost_rank);
  // A single process (library users that run no MPI job).
  static std::unique_ptr<MpiJob> single_process();
  ~MpiJob();
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;
  // Leaves the job (the final barrier, MPI_Finalize). Errors: MPI failed to finish.
  Status leave();

  // Whether this process is one rank of a job.
  bool in_job() const { return cluster_ != nullptr; }
  // Whether this process reads the data, prints and writes the run folder: rank 0 of a job, or a
  // single process.
  bool leads_run() const { return !cluster_ || cluster_->rank() == 0; }
  int rank() const { return cluster_ ? cluster_->rank() : 0; }
  // This rank's share of the job; null for a single process.
  Cluster* cluster() const { return cluster_.get(); }

  // A failure: one line on stderr and the exit code to return (exit_code_for). In a job, before
  // the start every rank stops with the first failing rank's code (rank 0 speaks for failures
  // every rank shares); after the start the failing rank ends the whole job (MPI_Abort) with its code.
  int fail(const Status& s);

  // --gpus (x --replicas) against the job: one rank runs one stage of one replica, so they must be equal.
  Status check_stages(int gpus, int replicas = 1) const;
  // --ranks-per-node R (0: not given) against the `devices` ranks (--gpus x --replicas): R divides
  // them and, under MPI, is what the job has (ranks / nodes); the same answer on every rank.
  Status check_ranks_per_node(int ranks_per_node, int64_t devices) const;
  // What planning needs in a job: reports from rank 0 alone, the node of every stage, each rank's
  // share of its node's cores, and rank 0's measured CPU spec and profile for every rank, so that
  // every rank computes the same plan. Leaves `pf` alone for a single process.
  void set_plan_flags(PlanFlags* pf);
  // The CUDA devices this process's stages need on this machine: one per stage, or in a job one
  // per rank of this node.
  int cuda_devices_needed(int stages) const;
  // The GPU of this rank's stage: its local rank, wrapped onto the `gpus_here` GPUs of this
  // machine (--oversubscribe); 0 for a single process.
  int local_gpu(int gpus_here) const;
  // What a pipelined run needs in a job: this rank's Cluster and, with CUDA stages, the GPU of
  // this rank's stage, with NCCL links between ranks unless ranks share GPUs (--oversubscribe, a
  // flag every rank agrees on). Nothing for a single process.
  void set_pipeline(PipelineOptions* po, bool use_cuda, int gpus_here, bool oversubscribe) const;
  // Threads of one stage's kernels: the cores (of this node, in a job) over the stages sharing them.
  int threads_per_stage(int stages) const;
  // The start-up agreement: every rank's status, then the model file, the whole spec
  // (serialize_for_agreement) and the plan compared with rank 0's. 0 to go on, else the exit code
  // every rank returns (2, naming the rank that differs); 0 at once for a single process.
  int agree_start(const TrainingSpec& spec, const std::string& model_hash, const Plan& plan);

 private:
  MpiJob() = default;
  int rank_fail(const Status& s);
  int agree_hashes(uint64_t model, uint64_t spec, uint64_t plan);
  int sync_before_start();
  Status share_cpu_spec(DeviceSpec* d);
  Status share_profile(Profile* p, bool* have);
  Expected<LinkSpec> measure_network_link(bool quiet);

  std::unique_ptr<Cluster> cluster_;
  bool started_ = false;  // every rank agreed (after that, a failure ends the job)
  int peer_failed_ = 0;   // the exit code of a rank that failed before the start (it printed why)
  std::optional<LinkSpec> network_link_;  // measured once (measure_network_link)
  bool quiet_ = false;                    // the run's --quiet (set_plan_flags)
};

// Stop requests, while alive (TrainConfig::stop of the run under way): Ctrl-C (SIGINT) and SIGTERM
// (how Slurm, Kubernetes and docker stop a job) in one process. In a job also SIGINT or SIGUSR1 on
// any rank (mpirun passes SIGUSR1 on to every rank, not SIGINT) and the launcher's SIGTERM
// (mpirun's answer to Ctrl-C, followed by SIGKILL odls_base_sigkill_timeout seconds later): the
// watchdog passes a request to every rank, and rank 0 picks the mini-batch after which every stage
// stops (in a job the cluster's own handler takes SIGTERM). A second signal of the same kind ends
// the process at once (the handler restores the default action). The flag itself is the one
// process-wide value left: a signal handler can reach nothing else.
class StopRequests {
 public:
  explicit StopRequests(const MpiJob& job);
  ~StopRequests();
  StopRequests(const StopRequests&) = delete;
  StopRequests& operator=(const StopRequests&) = delete;
  const std::atomic<bool>* flag() const;

 private:
  Cluster* cluster_;
};

}  // namespace pt
