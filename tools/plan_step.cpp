// Flags -> device specs, link, partition options; then partition, simulate, report.
#include "tools/plan_step.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <thread>

#include "kernels/registry.h"
#include "partitioner/report.h"
#include "runtime/exec/calibrate.h"
#include "runtime/exec/profiler.h"

namespace pt {

namespace fs = std::filesystem;

namespace {

// Holds the cache folder's lock file (flock) for its lifetime: processes starting at once (ctest
// -j, several runs) measure the CPU and calibrate one at a time, so that the later ones read what
// the first measured and every one of them plans with the same numbers.
class CacheLock {
 public:
  explicit CacheLock(const std::string& dir) {
    if (dir.empty()) return;
    fd_ = ::open((fs::path(dir) / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);  // best effort: without it each process measures its own
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

// The device's classes fitted on this machine (cached); one line when it measured. Under MPI
// rank 0's calibration reaches the other ranks with its spec (agree_cpu_spec).
Status calibrate_spec(DeviceSpec* d, const PlanFlags& f, int threads) {
  if (!f.profile_here) return Status::ok();  // an MPI follower: rank 0's spec replaces its own
  CalibrationOptions co;
  co.cache_dir = user_cache_dir();
  co.threads = threads;
  co.refresh = f.recalibrate;
  co.quiet = f.quiet;
  ASSIGN_OR_RETURN(CalibrationResult r, calibrate_device(d, co));
  if (!r.from_cache && !f.quiet) {
    char b[256];
    std::snprintf(b, sizeof b, "calibration: %s at %d thread%s, %d nodes measured in %.1f s (median fit error %.0f%%)%s%s",
                  device_kind_name(d->kind), threads, threads == 1 ? "" : "s", r.points, r.seconds, 100 * r.median_error,
                  r.cache_path.empty() ? "" : ", cached in ", r.cache_path.c_str());
    std::printf("%s\n", b);
  }
  return Status::ok();
}

Expected<DeviceSpec> spec_from_flag(const std::string& s) {
  std::error_code ec;
  if (fs::exists(s, ec) || s.find(".json") != std::string::npos) return load_device_spec(s);
  auto b = builtin_device_spec(s);
  if (!b) return b.status().with_context("--device-spec: ");
  return b;
}

Expected<PartitionOptions> options_from(const PlanFlags& f, const Profile* profile) {
  PartitionOptions o;
  if (f.device_specs.empty()) {
    if (f.device == DeviceKind::kCpu) {
      const int cores = std::max(1u, std::thread::hardware_concurrency());
      // Every device (stages x replicas) gets its share of the cores and of the memory.
      const int replicas = std::max(1, f.replicas);
      const int threads = f.cpu_threads > 0 ? f.cpu_threads : std::max(1, cores / (f.stages * replicas));
      int per_node = f.stages;  // the stages of one node share its memory
      if (!f.node_of_stage.empty()) {
        std::map<int, int> count;
        for (int n : f.node_of_stage) ++count[n];
        per_node = 1;
        for (auto& [n, c] : count) per_node = std::max(per_node, c);
      }
      DeviceSpec cpu;
      {
        // Released before the ranks of a job agree on the spec: that is a collective, which a
        // rank waiting here for the lock would never join.
        const CacheLock lock(user_cache_dir());
        cpu = measure_cpu_spec(user_cache_dir(), threads);
        if (f.calibrate) RETURN_IF_ERROR(calibrate_spec(&cpu, f, threads));
      }
      // More stage threads than cores: the stages of a node run at once and share its cores, each
      // `share` times slower than alone (threads / cores). Counted, not measured: a peak measured
      // while other work ran would make the share (and every plan after it) depend on that work.
      cpu.share = std::max(1.0, static_cast<double>(per_node * replicas * threads) / cores);
      if (f.agree_cpu_spec) RETURN_IF_ERROR(f.agree_cpu_spec(&cpu));
      cpu.memory_bytes /= per_node * replicas;
      o.devices.assign(f.stages, cpu);
    } else {
      // The GPU this process sees (device 0), by its name: "NVIDIA H200" has the built-in H200.
      const std::string gpu_name = cuda_device_name(0);  // no CUDA context is made for this
      if (gpu_name.empty())
        return invalid_input("--device cuda: name the GPU with --device-spec (H100, A100, ... or a JSON file); " +
                             (cuda_available() ? std::string("the name of GPU 0 is unknown") : cuda_unavailable_reason()));
      std::string name = gpu_name;
      for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      std::string found;
      for (const std::string& b : builtin_device_names()) {
        std::string upper = b;
        for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        if (name.find(upper) != std::string::npos && upper.size() > found.size()) found = b;
      }
      if (found.empty())
        return invalid_input("--device cuda: " + gpu_name +
                             " has no built-in spec; describe it with --device-spec FILE.json (docs/partition-json.md)");
      ASSIGN_OR_RETURN(DeviceSpec gpu, builtin_device_spec(found));
      // Under MPI each rank would measure its own: the plans must agree, so only single processes calibrate GPUs.
      if (f.calibrate && !f.agree_cpu_spec) {
        const CacheLock lock(user_cache_dir());
        RETURN_IF_ERROR(calibrate_spec(&gpu, f, 1));
      }
      // Stages sharing a GPU (--oversubscribe) share its memory.
      const int gpus = std::max(1, cuda_device_count());
      const int devices = f.stages * std::max(1, f.replicas);
      gpu.memory_bytes /= (devices + gpus - 1) / gpus;
      o.devices.assign(f.stages, gpu);
    }
  } else if (f.device_specs.size() == 1 || static_cast<int>(f.device_specs.size()) == f.stages) {
    for (int k = 0; k < f.stages; ++k) {
      ASSIGN_OR_RETURN(DeviceSpec d, spec_from_flag(f.device_specs[f.device_specs.size() == 1 ? 0 : k]));
      o.devices.push_back(d);
    }
  } else {
    return invalid_input("--device-spec: " + std::to_string(f.device_specs.size()) + " specs for " +
                         std::to_string(f.stages) + " stages (give one for all, or one per stage)");
  }
  std::string link = f.link;
  if (link.empty()) link = o.devices[0].kind == DeviceKind::kCpu ? "host" : "pcie4";
  auto l = link_spec(link);
  if (!l) return l.status().with_context("--link: ");
  o.link = *l;
  if (!f.replica_link.empty()) {
    auto rl = link_spec(f.replica_link);
    if (!rl) return rl.status().with_context("--replica-link: ");
    o.replica_link = *rl;
  }
  // A host link is a copy made by the stages' own threads: on shared cores it slows as they do.
  const double share = o.devices[0].share;
  for (LinkSpec* l : {&o.link, &o.replica_link})
    if (share > 1 && o.devices[0].kind == DeviceKind::kCpu && l->name == "host") {
      l->bandwidth /= share;
      l->latency_s *= share;
    }
  // --network-link is checked whether or not the stages span nodes.
  const bool measure = f.network_link == "measure" || (f.network_link.empty() && f.measure_network_link);
  if (measure && !f.measure_network_link)
    return invalid_input("--network-link measure: the link between nodes is measured in a job whose ranks run on "
                         "more than one node (mpirun across machines); name it here instead (GBPS,US or a built-in link)");
  Expected<LinkSpec> named = link_spec(f.network_link.empty() || measure ? "network" : f.network_link);
  if (!named) return named.status().with_context("--network-link: ");
  if (!f.node_of_stage.empty()) {
    if (static_cast<int>(f.node_of_stage.size()) != f.stages) return internal_error("node_of_stage needs one node per stage");
    o.node_of_stage = f.node_of_stage;
    if (measure) {
      ASSIGN_OR_RETURN(o.network_link, f.measure_network_link());
    } else {
      o.network_link = *named;
    }
  }
  o.schedule = f.schedule;
  o.weights = f.weights;
  o.micro_batches = micro_batched(o.schedule, o.weights) ? f.micro_batches : 1;
  if (f.virtual_stages > 1) {
    // Interleaved stages: device d's virtual stages d, d + N, ... share its memory (an equal
    // share each) and run on its thread one at a time (at its speed alone).
    const int N = static_cast<int>(o.devices.size()), V = f.virtual_stages;
    for (DeviceSpec& d : o.devices) d.memory_bytes /= V;
    const bool v_shape = f.schedule == Schedule::kZBV;  // its stages run down the devices and back up
    for (int k = N; k < N * V; ++k) o.devices.push_back(o.devices[static_cast<size_t>(virtual_device(k, N, v_shape))]);
    for (int k = static_cast<int>(o.node_of_stage.size()); !o.node_of_stage.empty() && k < N * V; ++k)
      o.node_of_stage.push_back(o.node_of_stage[static_cast<size_t>(virtual_device(k, N, v_shape))]);
    o.virtual_stages = V;
  }
  o.program = f.program;
  o.recompute = f.recompute;
  o.profile = profile;
  o.split_at = f.split_at;
  o.balance = f.balance;
  o.optimizer_state_copies = f.optimizer_state_copies;
  o.staleness = f.staleness;
  o.update_in_backward = f.update_in_backward;
  o.replicas = std::max(1, f.replicas);
  o.graph_replicas = std::max(1, f.graph_replicas);
  return o;
}

// The flags of one layout (automatic partition): N stages x R replicas; a per-stage device list
// or a node per stage that does not match N gives way to the first spec and one node.
PlanFlags layout_flags(const PlanFlags& f, int stages, int replicas) {
  PlanFlags fd = f;
  fd.stages = stages;
  fd.replicas = replicas;
  fd.split_at.clear();
  fd.balance.clear();
  if (fd.device_specs.size() > 1 && static_cast<int>(fd.device_specs.size()) != stages) fd.device_specs.resize(1);
  if (!fd.node_of_stage.empty() && static_cast<int>(fd.node_of_stage.size()) != stages) fd.node_of_stage.clear();
  // A schedule file is of one stage count; other layouts run the built-in schedule it stands for.
  if (fd.program && static_cast<int>(fd.program->stages.size()) != stages) fd.program = nullptr;
  return fd;
}

Expected<std::vector<LayoutOption>> layouts_of(const Graph& g, const PlanFlags& f, int devices, const Profile* profile) {
  return evaluate_layouts(g, devices, [&](int n, int r) { return options_from(layout_flags(f, n, r), profile); });
}

int64_t peak_of(const SimResult& s) {
  int64_t peak = 0;
  for (int64_t b : s.peak_memory_bytes) peak = std::max(peak, b);
  return peak;
}

}  // namespace

Expected<LayoutChoice> choose_layout(const Graph& g, const PlanFlags& f) {
  // The profile (--profile) is measured by plan_and_report, for the chosen layout's plan; the
  // choice uses the cost model's analytic times.
  const int devices = std::max(1, f.stages);
  // Flags that fix the stage count leave nothing to choose.
  if (!f.split_at.empty() || !f.balance.empty())
    return invalid_input(std::string("--replicas auto: cannot be combined with ") +
                         (f.split_at.empty() ? "--balance" : "--split-at") +
                         ", which fixes the stages; give --replicas R (stages = --gpus)");
  if (f.device_specs.size() > 1)
    return invalid_input("--replicas auto: --device-spec lists " + std::to_string(f.device_specs.size()) +
                         " specs, one per stage, which fixes the stages; give one spec for every device");
  ASSIGN_OR_RETURN(std::vector<LayoutOption> layouts, layouts_of(g, f, devices, nullptr));
  const int c = chosen_layout(layouts);
  if (c < 0) {
    // None fits: the pipeline layout's reason (the layouts run from D x 1 down).
    const std::string why = layouts.empty() ? std::string("no layout") : layouts.front().why_not;
    return invalid_input("--replicas auto: no layout of " + std::to_string(devices) + " devices fits: " + why);
  }
  LayoutChoice out;
  out.stages = layouts[c].stages;
  out.replicas = layouts[c].replicas;
  out.layouts = layouts;
  if (!f.quiet) {
    std::string from;
    for (const LayoutOption& L : layouts)
      from += (from.empty() ? "" : ", ") + std::to_string(L.stages) + "x" + std::to_string(L.replicas);
    std::printf("layout: %d stage%s x %d replica%s (chosen from %s on %d device%s by predicted throughput; --whatif "
                "shows the table)\n",
                out.stages, out.stages == 1 ? "" : "s", out.replicas, out.replicas == 1 ? "" : "s", from.c_str(), devices,
                devices == 1 ? "" : "s");
  }
  return out;
}

namespace {

// The largest number of virtual stages per device that --schedule auto and --whatif try with
// interleaved stages (Megatron-LM's order; more chunks shrink the bubble by 1/V and pay a hand-off each).
constexpr int kMaxAutoChunks = 4;

// What a chunked schedule's name says of its chunks: "interleaved-v3"; the others as they are.
std::string schedule_label(Schedule s, int virtual_stages) {
  if (s == Schedule::k1F1B) return "1f1b-sync";
  if (s == Schedule::kInterleaved) return "interleaved-v" + std::to_string(virtual_stages);
  return schedule_name(s);
}

// Why `stages` devices x `chunks` cannot run schedule s at all ("" when they can): the model's
// `nodes` forward nodes too few to cut, interleaved stages' micro-batch groups, ZB-V on one device.
std::string chunks_error(size_t nodes, Schedule s, int stages, int chunks, int micro_batches) {
  if (s == Schedule::kInterleaved) {
    if (const std::string why = interleaved_error(stages, chunks, micro_batches); !why.empty()) return why;
  }
  if (s == Schedule::kZBV && stages < 2) return "one stage";
  if (static_cast<size_t>(stages) * chunks > nodes) return "the model's " + std::to_string(nodes) + " forward nodes are too few";
  return "";
}

struct ScheduleChoice {
  Schedule schedule = Schedule::k1F1B;
  int virtual_stages = 1;
};

// The synchronous schedules `unchunked` (in the caller's order), then interleaved stages with 2 to
// kMaxAutoChunks virtual stages per device (and `also_chunks` beyond that, 0: none), then ZB-V.
std::vector<ScheduleChoice> schedule_choices(std::initializer_list<Schedule> unchunked, int also_chunks = 0) {
  std::vector<ScheduleChoice> c;
  for (Schedule s : unchunked) c.push_back({s, 1});
  for (int v = 2; v <= kMaxAutoChunks; ++v) c.push_back({Schedule::kInterleaved, v});
  if (also_chunks > kMaxAutoChunks) c.push_back({Schedule::kInterleaved, also_chunks});
  c.push_back({Schedule::kZBV, 2});
  return c;
}

// --schedule auto: each synchronous schedule planned and its program dry-run (interleaved stages
// with 2 to kMaxAutoChunks virtual stages per device, ZB-V with 2, where they can run); the fastest
// that fits (ties: the one listed first, which keeps fewer passes in flight). They train the same
// weights, so only speed and memory choose. Prints why unless quiet.
Expected<ScheduleChoice> choose_schedule(const Graph& g, const PlanFlags& f, const Profile* profile) {
  struct Option {
    ScheduleChoice c;
    double samples_per_s = -1;
    std::string why_not;
    bool applies = true;  // false: the schedule cannot run these stages and micro-batches at all
  };
  const std::vector<ScheduleChoice> choices = schedule_choices({Schedule::k1F1B, Schedule::kZBH1, Schedule::kGPipe});
  const size_t nodes = forward_order(g, NodeOrder::kGraph).size();
  std::vector<Option> opts(choices.size());
  for (size_t i = 0; i < choices.size(); ++i) opts[i].c = choices[i];
  for (Option& o : opts) {
    PlanFlags fc = f;
    fc.schedule = o.c.schedule;
    fc.weights = WeightMode::kSync;
    fc.virtual_stages = o.c.virtual_stages;
    if (chunked_schedule(o.c.schedule)) o.why_not = chunks_error(nodes, o.c.schedule, f.stages, o.c.virtual_stages, f.micro_batches);
    if (!o.why_not.empty()) {
      o.applies = false;
      continue;
    }
    ASSIGN_OR_RETURN(PartitionOptions po, options_from(fc, profile));
    Expected<Plan> p = partition(g, po);
    if (!p) {
      o.why_not = p.status().message();
      continue;
    }
    Expected<SimResult> sim = dry_run(*p, plan_schedule(*p), 2 * static_cast<int>(p->stages.size()) + 2);
    if (!sim) return sim.status();
    o.samples_per_s = sim->samples_per_s;
  }
  const Option* best = nullptr;
  for (const Option& o : opts)
    if (o.samples_per_s > 0 && (!best || o.samples_per_s > best->samples_per_s * (1 + 1e-9))) best = &o;
  auto label = [](const ScheduleChoice& c) { return schedule_label(c.schedule, c.virtual_stages); };
  if (!best) return invalid_input("--schedule auto: no synchronous schedule fits: " + label(opts[0].c) + ": " + opts[0].why_not);
  if (!f.quiet) {
    std::string others;
    for (const Option& o : opts)
      if (&o != best)
        others += "; " + label(o.c) + (o.samples_per_s > 0 ? " " + std::to_string(static_cast<int64_t>(o.samples_per_s))
                                       : o.applies                ? " does not fit"
                                                                  : " not applicable");
    std::printf("schedule auto: %s, the best predicted throughput that fits (%lld samples/s%s)\n", label(best->c).c_str(),
                static_cast<long long>(best->samples_per_s), others.c_str());
  }
  return best->c;
}

}  // namespace

namespace {

// --whatif: for 1..D devices (D = stages x replicas) the pipeline with each schedule (interleaved
// stages with 2 to kMaxAutoChunks virtual stages per device and the plan's own, ZB-V with 2, where
// they can run), then every hybrid and
// data-parallel layout of d devices (with the plan's schedule); at D the chosen layout is marked.
Expected<std::vector<WhatIfRow>> what_if_rows(const Graph& g, const PlanFlags& f, int devices, const PlanOutcome& out) {
  std::vector<WhatIfRow> rows;
  const size_t nodes = forward_order(g, NodeOrder::kGraph).size();
  const std::vector<ScheduleChoice> choices = schedule_choices(
      {Schedule::k1F1B, Schedule::kGPipe, Schedule::kZBH1}, f.schedule == Schedule::kInterleaved ? f.virtual_stages : 0);
  for (int d = 1; d <= devices; ++d) {
    const PlanFlags base = layout_flags(f, d, 1);
    int user_row = -1;  // the row of d x 1 with the plan's schedule
    for (const auto& [sched, chunks] : choices) {
      if (chunked_schedule(sched) && !chunks_error(nodes, sched, d, chunks, f.micro_batches).empty()) continue;
      PlanFlags fd = base;
      fd.schedule = sched;
      fd.virtual_stages = chunks;
      if (sched != Schedule::k1F1B) fd.weights = WeightMode::kSync;  // 1F1B: the run's weights
      if (sched != f.schedule) fd.program = nullptr;
      auto o = options_from(fd, out.options.profile);
      if (!o) return o.status();
      if ((fd.schedule == f.schedule && (sched != Schedule::kInterleaved || chunks == f.virtual_stages)) || d == 1)
        user_row = static_cast<int>(rows.size());
      auto p = partition(g, *o);
      if (!p) {
        rows.push_back({schedule_label(sched, chunks) + " (does not fit)", d, 0, 0, 0});
        continue;
      }
      SimResult s = simulate(*p, 4 * d + 4);
      const std::string name = sched == Schedule::kInterleaved ? schedule_label(sched, chunks) : plan_schedule(*p).name;
      rows.push_back({micro_batched(fd.schedule, fd.weights) ? name + " (M=" + std::to_string(o->micro_batches) + ")" : name, d,
                      s.samples_per_s, s.bubble_fraction, peak_of(s)});
      if (d == 1) break;  // one device: both schedules are sequential training
    }
    if (d == 1) continue;
    std::vector<LayoutOption> layouts;
    if (d == devices && !out.plan.layouts.empty()) {
      layouts = out.plan.layouts;
    } else {
      ASSIGN_OR_RETURN(layouts, layouts_of(g, f, d, out.options.profile));
    }
    for (const LayoutOption& L : layouts) {
      if (L.replicas == 1) {
        if (d == devices && L.chosen && user_row >= 0) rows[user_row].chosen = true;
        continue;
      }
      WhatIfRow row{layout_name(L.stages, L.replicas) + (L.fits ? "" : " (does not fit)"), d, L.samples_per_s,
                    L.bubble_fraction, L.peak_memory_bytes};
      row.chosen = d == devices && L.chosen;
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace

Expected<PlanOutcome> plan_and_report(const ImportedModel& m, const Graph& g, const PlanFlags& flags) {
  PlanOutcome out;
  PlanFlags f = flags;  // --schedule auto: resolved below
  if (f.profile && f.profile_here) {
    ProfileOptions po;
    po.cache_path = (fs::path(f.out_dir) / "profile.json").string();
    po.key = m.hash + "/batch" + std::to_string(g.inputs.empty() ? 0 : g.inputs[0]->dims[0]) + "/" +
             device_kind_name(f.device);
    if (!f.quiet) std::printf("profiling every node on the %s (cached in %s)\n", device_kind_name(f.device), po.cache_path.c_str());
    ASSIGN_OR_RETURN(out.profile, profile_graph(g, f.device, po));
    out.have_profile = true;
  }
  if (f.agree_profile) RETURN_IF_ERROR(f.agree_profile(&out.profile, &out.have_profile));
  if (f.schedule == Schedule::kAuto) {
    ASSIGN_OR_RETURN(const ScheduleChoice c, choose_schedule(g, f, out.have_profile ? &out.profile : nullptr));
    f.schedule = c.schedule;
    f.virtual_stages = c.virtual_stages;
  }
  ASSIGN_OR_RETURN(out.options, options_from(f, out.have_profile ? &out.profile : nullptr));
  out.options.profile = out.have_profile ? &out.profile : nullptr;
  ASSIGN_OR_RETURN(out.plan, partition(g, out.options));
  out.plan.model = m.path;
  ReportInputs r;
  r.plan = &out.plan;
  r.graph = &g;
  if (out.plan.manual) {
    PartitionOptions ao = out.options;
    ao.split_at.clear();
    ao.balance.clear();
    auto automatic = partition(g, ao);
    if (automatic) {
      out.automatic = std::move(*automatic);
      out.automatic.model = m.path;
      r.automatic = &out.automatic;
    }
  }
  const int devices = f.stages * std::max(1, f.replicas);
  if (!f.layouts.empty()) {
    out.plan.layouts = f.layouts;
  } else if (f.whatif && devices > 1) {
    ASSIGN_OR_RETURN(out.plan.layouts, layouts_of(g, f, devices, out.options.profile));
    // The layout given (--gpus x --replicas) is the chosen one; evaluate_layouts marked the fastest.
    for (LayoutOption& L : out.plan.layouts) L.chosen = L.stages == f.stages && L.replicas == std::max(1, f.replicas);
  }
  // The dry run before launch: the program over the plan's times; a deadlock is refused here.
  ASSIGN_OR_RETURN(out.sim, dry_run(out.plan, plan_schedule(out.plan), 2 * static_cast<int>(out.plan.stages.size()) + 2));
  r.sim = &out.sim;
  if (!f.quiet) std::printf("%s", report_text(r).c_str());
  if (f.write_reports) RETURN_IF_ERROR(write_reports(r, f.out_dir));
  if (f.whatif) {
    ASSIGN_OR_RETURN(std::vector<WhatIfRow> rows, what_if_rows(g, f, devices, out));
    if (!f.quiet) std::printf("%s", what_if_table(rows).c_str());
  }
  return out;
}

Status rewrite_reports(PlanOutcome& p, const Graph& g, const std::string& out_dir, bool write_trace) {
  ReportInputs r;
  r.write_trace = write_trace;
  r.plan = &p.plan;
  r.graph = &g;
  r.sim = &p.sim;
  if (p.plan.manual && !p.automatic.stages.empty()) r.automatic = &p.automatic;
  return write_reports(r, out_dir);
}

Status export_plan_stages(const ImportedModel& m, const std::map<std::string, HostTensor>& values, const Plan& plan,
                          const std::string& dir, bool quiet, bool check_only) {
  // Cut at the plan's stage layout (partitioner/stage_layout.h), the boundary the runtime wires.
  if (!plan.layout_status.is_ok()) return plan.layout_status;
  if (!plan.layout.describes(plan)) return internal_error("--export-stages: the plan has no stage layout of its stages");
  std::vector<StageCut> cuts;
  for (const StagePlan& s : plan.stages)
    cuts.push_back({s.forward_nodes, plan.layout.stages[s.index].recv, plan.layout.stages[s.index].send});
  ASSIGN_OR_RETURN(std::vector<StageModelInfo> infos, export_stages(m, values, cuts, dir, check_only));
  if (!quiet && !check_only) {
    size_t folded = 0;
    for (const StageModelInfo& s : infos) folded += s.folded_constants.size();
    std::printf("stages: %zu stage model%s in %s (inputs and outputs in stages.json)%s\n", infos.size(),
                infos.size() == 1 ? "" : "s", dir.c_str(),
                folded ? "; shape values folded for this batch size make them batch-specific" : "");
  }
  return Status::ok();
}

}  // namespace pt
