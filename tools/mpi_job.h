// The command line's MPI side (tools/onnx_pipetrain.cpp): joining and leaving the job, which rank
// does what, the planning inputs every rank takes from rank 0, the start-up agreement of every
// rank on model, flags and plan, failures before and after the start, the watchdog's verdict on
// a lost rank, and stop requests (Ctrl-C) that every rank obeys at the same mini-batch. Every function gives the single-process answer when this process is not one
// rank of a job (launched without mpirun / srun, or a one-rank job).
#pragma once

#include <atomic>
#include <string>

#include "partitioner/plan.h"
#include "runtime/cluster.h"
#include "runtime/pipeline.h"
#include "tools/options.h"
#include "tools/plan_step.h"

namespace pt {

// main() of the command line: under mpirun / srun joins the job (MPI_Init, the lost-rank
// watchdog with PIPETRAIN_MPI_TIMEOUT), runs `body`, then leaves it (the final barrier,
// MPI_Finalize); a single process just runs `body`. Returns the exit code.
int run_job(int argc, char** argv, int (*body)(int, char**));

// Whether this process is one rank of a job.
bool in_job();
// Whether this process reads the data, prints and writes the run folder: rank 0 of a job, or a
// single process.
bool leads_run();
// This rank's share of the job; null for a single process.
Cluster* job_cluster();

// A failure: one line on stderr and the exit code to return (exit_code_for). In a job, before the
// start every rank stops with the first failing rank's code (rank 0 speaks for failures every
// rank shares); after the start the failing rank ends the whole job (MPI_Abort) with its code.
int fail_run(const Status& s);

// --gpus against the job: one rank runs one stage, so they must be equal.
Status check_job_stages(int gpus);

// What planning needs in a job: reports from rank 0 alone, the node of every stage, each rank's
// share of its node's cores, and rank 0's measured CPU spec for every rank, so that every rank
// computes the same plan. Leaves `pf` alone for a single process.
void set_job_plan_flags(PlanFlags* pf);

// The CUDA devices this process's stages need on this machine: one per stage, or in a job one per
// rank of this node.
int cuda_devices_needed(int stages);
// The GPU of this rank's stage: its local rank, wrapped onto the `gpus_here` GPUs of this machine
// (--oversubscribe); 0 for a single process.
int job_local_gpu(int gpus_here);
// What a pipelined run needs in a job: this rank's Cluster and, with CUDA stages, the GPU of this
// rank's stage, with NCCL links between ranks unless ranks share GPUs (--oversubscribe, a flag
// every rank agrees on, so that every rank picks the same kind of link). Nothing for a single
// process.
void set_job_pipeline(PipelineOptions* po, bool use_cuda, int gpus_here, bool oversubscribe);

// Threads of one stage's kernels: the cores (of this node, in a job) over the stages sharing them.
int threads_per_stage(int stages);

// The start-up agreement: every rank's status, then model file, training flags and plan compared
// with rank 0's. 0 to go on, else the exit code every rank returns (2, naming the rank that
// differs); 0 at once for a single process.
int agree_job_start(const Options& o, const std::string& model_hash, const Plan& plan);

// Stop requests, while alive (TrainConfig::stop of the run under way): Ctrl-C (SIGINT) and SIGTERM
// (how Slurm, Kubernetes and docker stop a job) in one process. In a job also SIGINT or SIGUSR1 on any rank (mpirun passes SIGUSR1 on to every rank,
// not SIGINT) and the launcher's SIGTERM (mpirun's answer to Ctrl-C, followed by SIGKILL
// odls_base_sigkill_timeout seconds later): the watchdog passes a request to every rank, and
// rank 0 picks the mini-batch after which every stage stops (in a job the cluster's own handler
// takes SIGTERM). A second signal of the same kind ends the process at once (the handler restores
// the default action).
class StopRequests {
 public:
  StopRequests();
  ~StopRequests();
  StopRequests(const StopRequests&) = delete;
  StopRequests& operator=(const StopRequests&) = delete;
  const std::atomic<bool>* flag() const;
};

}  // namespace pt
