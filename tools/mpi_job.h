// The command line's share of an MPI job (tools/onnx_pipetrain.cpp): this rank's Cluster, the
// start-up agreement of every rank on model, flags and plan, failures before and after the start,
// and the watchdog's verdict on a lost rank. A single process has no Cluster (g_cluster null).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "partitioner/device_spec.h"
#include "partitioner/plan.h"
#include "runtime/cluster.h"

// Under mpirun / srun: this rank's share of the job; null for a single process.
extern std::unique_ptr<pt::Cluster> g_cluster;

// A failure on this rank: prints it (rank 0, or the rank itself when it alone failed) and returns
// the exit code every rank returns; after the start it ends the whole job.
int rank_fail(const pt::Status& s);
// The status exchange before any collective of the start-up: 0 when every rank is fine, else the
// first failing rank's exit code.
int sync_before_start();
// Compares the fingerprints of model file, flags and plan with rank 0's; 0 to go on, else the
// exit code (2, naming the rank that differs).
int agree_start(uint64_t model, uint64_t flags, uint64_t plan);
// Stage names of every stage of the plan, for agree_start.
std::string plan_fingerprint(const pt::Plan& p);
// Rank 0's measured CPU spec for every rank (planning is deterministic given the specs).
pt::Status share_cpu_spec(pt::DeviceSpec* d);
// The watchdog's callback (Cluster::start_watchdog): one line naming the lost rank, then exit 1.
void on_lost_rank(int lost, const std::string& why);
