// The CLI's planning step: device specs and link from the flags, optional profiling, the
// partition (automatic, or manual compared with automatic), the simulator, the reports and the
// what-if table. Library code does the work; this file only turns flags into calls.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "importer/importer.h"
#include "importer/stage_export.h"
#include "partitioner/layout.h"
#include "partitioner/partition.h"
#include "partitioner/simulator.h"

namespace pt {

struct PlanFlags {
  int stages = 1;
  // Data-parallel copies of the pipeline (--replicas): stages x replicas devices in all. The
  // graph planned holds 1/graph_replicas of the mini-batch (PartitionOptions: 1 when it was
  // imported at the whole --batch-size, R when at the replica's share batch / R).
  int replicas = 1;
  int graph_replicas = 1;
  // The layouts choose_layout evaluated (--replicas auto): shown in the reports and the what-if.
  std::vector<LayoutOption> layouts;
  DeviceKind device = DeviceKind::kCpu;
  std::vector<std::string> device_specs;  // builtin names or JSON files; one for all, or one per stage
  std::string link;                       // builtin link name; "" = default for the device
  std::string replica_link;               // between a stage's replicas; "" = link
  // Between nodes (cuts across machines): a built-in link or GBPS,US; "measure" (the default under
  // MPI across nodes, "") measures it with measure_network_link; "" elsewhere: the built-in network.
  std::string network_link;
  Schedule schedule = Schedule::k1F1B;
  WeightMode weights = WeightMode::kSpecTrain;
  std::shared_ptr<const ScheduleIR> program;  // --schedule-file's (null: the schedule's own)
  Recompute recompute = Recompute::kNone;
  int optimizer_state_copies = 1;  // parameter-sized state tensors per parameter (momentum 1, Adam 2)
  int micro_batches = 4;
  // --schedule interleaved: virtual stages per device; the plan cuts stages x this many, stage k
  // on device k % stages, each with 1/virtual_stages of its device's memory.
  int virtual_stages = 1;
  Staleness staleness = Staleness::kPaper;  // SpecTrain's (--staleness)
  bool update_in_backward = false;          // PartitionOptions::update_in_backward
  std::vector<std::string> split_at;
  std::vector<int> balance;
  bool profile = false;
  bool whatif = false;
  std::string out_dir;
  bool quiet = false;
  bool write_reports = true;              // under MPI: rank 0 only
  // Multi-node: the node of every device (a rank; empty: one node); cuts between nodes use the
  // network link. Interleaved stages and ZB-V repeat it for each virtual stage of a device.
  std::vector<int> node_of_stage;
  int cpu_threads = 0;                    // threads of one CPU stage; 0: the cores / stages
  // The cost model calibrated on this machine's device (runtime/exec/calibrate.h): on by default,
  // cached; `recalibrate` (--calibrate) measures again.
  bool calibrate = true;
  bool recalibrate = false;
  // Under MPI: replaces the measured CPU spec with rank 0's, so that every rank plans alike.
  std::function<Status(DeviceSpec*)> agree_cpu_spec;
  // Under MPI with ranks on more than one node: the link between the nodes measured (a collective,
  // once; later calls return the first answer), the same on every rank.
  std::function<Expected<LinkSpec>()> measure_network_link;
  // Under MPI: whether this rank measures the profile (--profile: rank 0 alone), and the exchange
  // that gives every rank rank 0's profile (or none), so that every rank plans with the same costs.
  bool profile_here = true;
  std::function<Status(Profile* profile, bool* have)> agree_profile;
};

struct PlanOutcome {
  Plan plan;
  Plan automatic;        // == plan unless manual
  SimResult sim;
  PartitionOptions options;
  Profile profile;
  bool have_profile = false;
};

// --replicas auto: the f.stages devices split into N stages x R replicas (N x R = f.stages), the
// layout that fits with the highest simulated throughput (partitioner/layout.h), for the graph
// `g` (f.graph_replicas as for plan_and_report; the other fields of f as for it). Prints
// "layout: N stages x R replicas (chosen from ...; --whatif shows the table)" unless quiet.
// An error when no layout fits (the pipeline layout's error: what the plan would have said), and
// with flags that fix the stage count (--split-at, --balance, one --device-spec per stage).
struct LayoutChoice {
  int stages = 1, replicas = 1;
  std::vector<LayoutOption> layouts;  // for PlanFlags::layouts
};
Expected<LayoutChoice> choose_layout(const Graph& g, const PlanFlags& f);

// Plans `g` (a training graph), prints the report table, writes the reports into out_dir.
// f.stages stages with f.replicas replicas; with --whatif also every layout of the
// f.stages x f.replicas devices (in the plan's layouts, for the reports, unless f.layouts gives
// them) and the what-if table of 1..that many devices.
Expected<PlanOutcome> plan_and_report(const ImportedModel& m, const Graph& g, const PlanFlags& f);

// Rewrites the reports with measured stage times.
// write_trace false keeps the trace.json a pipelined --trace run wrote (the passes as they ran).
Status rewrite_reports(PlanOutcome& p, const Graph& g, const std::string& out_dir, bool write_trace = true);

// --export-stages: one ONNX model per stage of `plan` in `dir` (importer/stage_export.h), with
// `values` (the trained initializers; empty: the source's) substituted; prints one line.
// check_only: whether the plan's cuts can be exported at all, nothing written (before training).
Status export_plan_stages(const ImportedModel& m, const std::map<std::string, HostTensor>& values, const Plan& plan,
                          const std::string& dir, bool quiet, bool check_only = false);

}  // namespace pt
