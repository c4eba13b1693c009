// The what-if simulator: every pass and transfer is an operation on one resource (a stage's
// device, or one direction of a link) with a fixed order per resource, as the schedule dictates;
// an operation starts when its resource is free and its inputs have arrived.
#include "partitioner/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "partitioner/schedule.h"

namespace pt {
namespace {

// Transfer time in ms of `bytes` over `link`; nothing to send costs nothing, not even latency.
double transfer_ms(double bytes, const LinkSpec& link) {
  return bytes > 0 ? 1e3 * link.seconds(bytes) : 0;
}

// Fixed-order list scheduling: operations run on their resource in the order they were queued.
class Engine {
 public:
  explicit Engine(int resources) : queue_(resources) {}

  int add(int resource, double dur_ms, SimEvent ev) {
    ops_.push_back(Op{resource, std::max(0.0, dur_ms), {}, ev});
    queue_[resource].push_back(static_cast<int>(ops_.size()) - 1);
    return static_cast<int>(ops_.size()) - 1;
  }
  void depend(int op, int on) { ops_[op].deps.push_back(on); }
  const SimEvent& event(int op) const { return ops_[op].ev; }
  double duration(int op) const { return ops_[op].dur; }

  // Resources `members` share `capacity` units of rate: while r of them run an operation, each
  // progresses at min(1, capacity / r) (processor sharing), so an operation of duration d takes
  // d alone and longer beside others.
  void share(const std::vector<int>& members, double capacity) {
    if (pool_.empty()) pool_.assign(queue_.size(), -1);
    for (int r : members) pool_[r] = static_cast<int>(capacity_.size());
    capacity_.push_back(capacity);
  }
  double capacity() const {  // of every pool together
    double c = 0;
    for (double x : capacity_) c += x;
    return c;
  }
  bool shared(int resource) const { return !pool_.empty() && pool_[resource] >= 0; }

  // Runs every queue as far as it goes; false when some queue cannot finish (a dependency cycle:
  // the schedule deadlocks). blocked(r) is then the operation queue r waits at (-1: finished).
  bool run() {
    if (!capacity_.empty()) return run_shared();
    std::vector<size_t> next(queue_.size(), 0);
    std::vector<double> free_at(queue_.size(), 0);
    size_t done = 0;
    while (done < ops_.size()) {
      bool progress = false;
      for (size_t r = 0; r < queue_.size(); ++r) {
        while (next[r] < queue_[r].size()) {
          Op& op = ops_[queue_[r][next[r]]];
          double ready = free_at[r];
          bool ok = true;
          for (int d : op.deps) {
            if (!ops_[d].done) { ok = false; break; }
            ready = std::max(ready, ops_[d].ev.end_ms);
          }
          if (!ok) break;
          op.ev.start_ms = ready;
          op.ev.end_ms = ready + op.dur;
          op.done = true;
          free_at[r] = op.ev.end_ms;
          ++next[r];
          ++done;
          progress = true;
        }
      }
      if (!progress) {
        next_ = next;
        return false;
      }
    }
    next_ = next;
    return true;
  }
  // run() with shared resources: an event simulation from one completion to the next. Each
  // queue starts its next operation once the one before it and its dependencies are done; the
  // operations running in a pool share its capacity.
  bool run_shared() {
    const size_t R = queue_.size();
    std::vector<size_t> next(R, 0);
    std::vector<int> running(R, -1);
    std::vector<double> left(R, 0), rate(R, 1);  // left: of the running operation, in its time alone
    double now = 0;
    size_t done = 0;
    while (done < ops_.size()) {
      // Start what can start now; operations of no duration end at once (and may free others).
      for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < R; ++r) {
          if (running[r] >= 0 || next[r] >= queue_[r].size()) continue;
          Op& op = ops_[queue_[r][next[r]]];
          bool ok = true;
          for (int d : op.deps) ok = ok && ops_[d].done;
          if (!ok) continue;
          op.ev.start_ms = now;
          changed = true;
          if (op.dur > 0) {
            running[r] = queue_[r][next[r]];
            left[r] = op.dur;
            continue;
          }
          op.ev.end_ms = now;
          op.done = true;
          ++next[r];
          ++done;
        }
      }
      if (done == ops_.size()) break;
      std::vector<int> in_pool(capacity_.size(), 0);
      for (size_t r = 0; r < R; ++r)
        if (running[r] >= 0 && pool_[r] >= 0) ++in_pool[pool_[r]];
      double step = std::numeric_limits<double>::infinity();
      for (size_t r = 0; r < R; ++r) {
        if (running[r] < 0) continue;
        const int p = pool_[r];
        rate[r] = p < 0 ? 1.0 : std::min(1.0, capacity_[p] / in_pool[p]);
        step = std::min(step, left[r] / rate[r]);
      }
      if (!std::isfinite(step)) {  // nothing runs and nothing can start: a dependency cycle
        next_ = next;
        return false;
      }
      now += step;
      for (size_t r = 0; r < R; ++r) {
        if (running[r] < 0) continue;
        left[r] -= step * rate[r];
        if (left[r] > 1e-12 * std::max(1.0, ops_[running[r]].dur)) continue;
        Op& op = ops_[running[r]];
        op.ev.end_ms = now;
        op.done = true;
        running[r] = -1;
        ++next[r];
        ++done;
      }
    }
    next_ = next;
    return true;
  }

  int blocked(int resource) const {
    return next_[resource] < queue_[resource].size() ? queue_[resource][next_[resource]] : -1;
  }
  const std::vector<int>& deps(int op) const { return ops_[op].deps; }
  bool done(int op) const { return ops_[op].done; }
  // The operations queue r ran, in order.
  std::vector<int> ran(int resource) const {
    return std::vector<int>(queue_[resource].begin(), queue_[resource].begin() + static_cast<long>(next_[resource]));
  }

  // The events worth drawing: every compute pass, and transfers that take time.
  std::vector<SimEvent> events() const {
    std::vector<SimEvent> out;
    for (const Op& op : ops_) {
      const bool compute = op.ev.kind == SimEvent::kForward || op.ev.kind == SimEvent::kBackward ||
                           op.ev.kind == SimEvent::kInputGrad || op.ev.kind == SimEvent::kWeightGrad;
      if (!compute && op.dur <= 0) continue;
      out.push_back(op.ev);
      out.back().work_ms = op.dur;
    }
    std::sort(out.begin(), out.end(), [](const SimEvent& a, const SimEvent& b) {
      return a.start_ms != b.start_ms ? a.start_ms < b.start_ms : a.stage < b.stage;
    });
    return out;
  }

 private:
  struct Op {
    int resource;
    double dur;
    std::vector<int> deps;
    SimEvent ev;
    bool done = false;
  };
  std::vector<Op> ops_;
  std::vector<std::vector<int>> queue_;
  std::vector<size_t> next_;
  std::vector<int> pool_;         // [resource] -> its pool in capacity_ (-1: its own), empty: no pools
  std::vector<double> capacity_;  // [pool]
};

SimEvent make_event(int stage, int mb, int micro, SimEvent::Kind kind) {
  SimEvent e;
  e.stage = stage;
  e.mini_batch = mb;
  e.micro_batch = micro;
  e.kind = kind;
  return e;
}

bool is_compute(SimEvent::Kind k) {
  return k == SimEvent::kForward || k == SimEvent::kBackward || k == SimEvent::kUpdate || k == SimEvent::kInputGrad ||
         k == SimEvent::kWeightGrad;
}

// Makespan, steady-state throughput and bubble over mini-batches (i0, i1]: the window between the
// completion of mini-batch i0 and that of i1 (all of the run when the window is empty).
// `capacity` > 0: the stages share that many devices' worth of cores, and the bubble is what the
// window left of them idle (a stage's idle time there lets the others run faster).
void measure(SimResult& res, int stages, int mini_batches, int64_t batch, int i0, int i1, double capacity) {
  std::vector<double> done(mini_batches, 0);
  res.makespan_ms = 0;
  for (const SimEvent& e : res.events) {
    done[e.mini_batch] = std::max(done[e.mini_batch], e.end_ms);
    res.makespan_ms = std::max(res.makespan_ms, e.end_ms);
  }
  double t0 = 0, t1 = res.makespan_ms;
  int counted = mini_batches;
  if (i0 >= 0 && i1 > i0 && i1 < mini_batches && done[i1] > done[i0]) {
    t0 = done[i0];
    t1 = done[i1];
    counted = i1 - i0;
  }
  const double samples = static_cast<double>(batch > 0 ? batch : 1);
  res.samples_per_s = t1 > t0 ? counted * samples / ((t1 - t0) * 1e-3) : 0;
  double busy = 0, work = 0;
  for (const SimEvent& e : res.events) {
    if (!is_compute(e.kind)) continue;
    const double in = std::max(0.0, std::min(e.end_ms, t1) - std::max(e.start_ms, t0));
    busy += in;
    if (e.end_ms > e.start_ms) work += e.work_ms * in / (e.end_ms - e.start_ms);
  }
  const double total = stages * (t1 - t0);
  res.bubble_fraction = total > 0 ? std::max(0.0, 1.0 - busy / total) : 0;
  if (capacity > 0 && t1 > t0) res.bubble_fraction = std::max(0.0, 1.0 - work / (capacity * (t1 - t0)));
}

// Peak memory: the plan's prediction, with the saved_bytes (recomputing stages: their inputs) *
// in_flight it assumed replaced by the largest number of passes (mini-batches; GPipe:
// micro-batches) the simulation kept in flight.
void track_memory(SimResult& res, const Plan& plan, const std::vector<std::vector<int>>& order,
                  const Engine& eng) {
  const int n = static_cast<int>(plan.stages.size());
  res.peak_memory_bytes.assign(n, 0);
  for (int k = 0; k < n; ++k) {
    const StagePlan& s = plan.stages[k];
    int in_flight = 0, peak = 0;
    for (int op : order[k]) {
      const SimEvent::Kind kind = eng.event(op).kind;
      if (kind == SimEvent::kForward) peak = std::max(peak, ++in_flight);
      if (kind == SimEvent::kBackward || kind == SimEvent::kWeightGrad) --in_flight;
    }
    // A recomputing stage keeps only its inputs per pass in flight (plan.h).
    const int64_t per_pass = s.recompute ? s.recompute_input_bytes : s.saved_bytes;
    res.peak_memory_bytes[k] = s.memory_bytes + static_cast<int64_t>(peak - s.in_flight) * per_pass;
  }
}

}  // namespace

namespace {

// The schedule's own program for the plan's stages (one order; ZB-H1's for unit times).
ScheduleIR builtin_schedule(const Plan& plan) {
  const int v = std::max(1, plan.virtual_stages);
  return make_schedule(plan.schedule, plan.weights, static_cast<int>(plan.stages.size()) / v, plan.micro_batches, nullptr, v);
}

}  // namespace

ScheduleIR plan_schedule(const Plan& plan) {
  if (plan.program) return *plan.program;
  return builtin_schedule(plan);
}

namespace {

SimEvent::Kind sim_kind(ActionKind k) {
  switch (k) {
    case ActionKind::kForward: return SimEvent::kForward;
    case ActionKind::kBackward: return SimEvent::kBackward;
    case ActionKind::kInputGrad: return SimEvent::kInputGrad;
    case ActionKind::kWeightGrad: return SimEvent::kWeightGrad;
    case ActionKind::kUpdate: return SimEvent::kUpdate;
  }
  return SimEvent::kForward;
}

// `devices`: stage k is chunk k / devices of device k % devices (interleaved stages; "@c" then).
std::string event_token(const SimEvent& e, int devices) {
  static const char* kName[] = {"F", "B", "U", "send", "recv", "all-reduce", "I", "W"};
  std::string t = kName[static_cast<int>(e.kind)];
  if (e.kind != SimEvent::kUpdate) t += std::to_string(e.micro_batch);
  if (e.stage >= devices) t.append("@").append(std::to_string(e.stage / devices));
  return t + "(" + std::to_string(e.mini_batch) + ")";
}

// Why the schedule deadlocks: each stage's (device's) next action and what it waits for, then
// every stage's actions up to there (the rank x step grid).
Status deadlock_error(const Engine& eng, const ScheduleIR& ir) {
  const int n = static_cast<int>(ir.stages.size());
  const std::string& name = ir.name;
  std::string waits, grid;
  for (int k = 0; k < n; ++k) {
    const int op = eng.blocked(k);
    grid.append("\n  stage ").append(std::to_string(k)).append(":");
    for (int x : eng.ran(k)) grid.append(" ").append(event_token(eng.event(x), n));
    if (op < 0) {
      grid += " (done)";
      continue;
    }
    grid.append(" [").append(event_token(eng.event(op), n)).append("]");
    // What it waits on: the first unfinished dependency, through a transfer to its producer.
    std::string on;
    for (int d : eng.deps(op)) {
      if (eng.done(d)) continue;
      int src = d;
      const SimEvent::Kind kd = eng.event(d).kind;
      if (kd == SimEvent::kSend || kd == SimEvent::kRecv || kd == SimEvent::kAllReduce)
        for (int dd : eng.deps(d))
          if (!eng.done(dd)) src = dd;
      on = "stage " + std::to_string(ir.device_of(eng.event(src).stage)) + "'s " + event_token(eng.event(src), n);
      break;
    }
    if (!waits.empty()) waits += "; ";
    waits += "stage " + std::to_string(k) + " waits at " + event_token(eng.event(op), n) + (on.empty() ? "" : " for " + on);
  }
  return invalid_input("schedule " + name + " deadlocks: " + waits + " (mini-batch in parentheses; [x]: where it waits)" + grid);
}

}  // namespace

Expected<SimResult> dry_run(const Plan& plan, const ScheduleIR& ir, int mini_batches) {
  SimResult res;
  const int n = static_cast<int>(plan.stages.size());
  const int t = std::max(1, mini_batches);
  if (n == 0) return res;
  if (ir.virtual_stages() != n)
    return invalid_input(ir.name + ": a schedule of " + std::to_string(ir.virtual_stages()) + " stages for a plan of " +
                         std::to_string(n));
  const int m = std::max(1, ir.micro_batches);
  const int devices = static_cast<int>(ir.stages.size());
  // Resources: device d computes on d (stage k on device ir.device_of(k); one stage per device but
  // for interleaved stages), the link k -> k+1 carries activations on n + k and gradients on
  // 2n + k; stage k's replicas all-reduce on 3n + k.
  Engine eng(4 * n);
  // fwd[k][i*m + j]: its forward; bwd: the pass that sends its gradients up (B, or I). The plan's
  // times and bytes are per pass (one run of the graph, a micro-batch of plan.batch_size samples),
  // its update per mini-batch: a mini-batch is m passes and one update.
  const int passes = t * m;
  // Devices sharing their node's cores (plan.device_share > 1, plan.processor_sharing) share them
  // here as the OS shares cores among threads: a node's devices compute at once, each at min(1,
  // capacity / running) of its speed alone (the plan's times / share), capacity = the node's
  // devices / share. Otherwise each is a device `share` times slower (the plan's times as they are).
  const double share = plan.processor_sharing ? std::max(1.0, plan.device_share) : 1.0;
  if (share > 1 + 1e-9) {
    std::map<int, std::vector<int>> of_node;
    for (int d = 0; d < devices; ++d) of_node[plan.stages[ir.virtual_of(d, 0)].node].push_back(d);
    for (auto& [node, ds] : of_node) eng.share(ds, static_cast<double>(ds.size()) / share);
  }
  std::vector<std::vector<int>> fwd(n, std::vector<int>(passes, -1)), bwd = fwd;
  std::vector<std::vector<int>> order(n);
  for (int d = 0; d < devices; ++d) {
    for (const Step& st : expand(ir.stages[d], t)) {
      const Action& a = st.action;
      const int k = ir.virtual_of(d, a.chunk);
      const StagePlan& s = plan.stages[k];
      const double wgrad = std::clamp(s.wgrad_ms, 0.0, s.bwd_ms);
      const int i = static_cast<int>(st.mini_batch);
      const SimEvent ev = make_event(k, i, a.micro, sim_kind(a.kind));
      double ms = 0;
      switch (a.kind) {
        case ActionKind::kForward: ms = s.fwd_ms; break;
        case ActionKind::kBackward: ms = s.bwd_ms; break;
        case ActionKind::kInputGrad: ms = s.bwd_ms - wgrad; break;
        case ActionKind::kWeightGrad: ms = wgrad; break;
        case ActionKind::kUpdate: ms = s.update_ms; break;
      }
      const int op = eng.add(d, ms / share, ev);
      // The runtime's own time after the action, before the device's next (on a device of its own).
      if (s.pass_gap_ms > 0 && share <= 1 + 1e-9) eng.add(d, s.pass_gap_ms, make_event(k, i, a.micro, SimEvent::kGap));
      const int p = i * m + a.micro;
      if (a.kind == ActionKind::kForward) fwd[k][p] = op;
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kInputGrad) bwd[k][p] = op;
      if (a.kind == ActionKind::kUpdate && s.allreduce_ms > 0 && !order[k].empty()) {
        // The update waits for the replicas' gradients, all-reduced after the stage's last backward work.
        const int ar = eng.add(3 * n + k, s.allreduce_ms, make_event(k, i, 0, SimEvent::kAllReduce));
        eng.depend(ar, order[k].back());
        eng.depend(op, ar);
      }
      order[k].push_back(op);
    }
  }
  // Transfers, queued on each link in the order their producing passes run.
  for (int k = 0; k < n; ++k) {
    for (int op : order[k]) {
      const SimEvent e = eng.event(op);  // a copy: adding operations moves them
      const int p = e.mini_batch * m + e.micro_batch;
      if (e.kind == SimEvent::kForward) {
        if (k + 1 < n) {
          if (fwd[k + 1][p] < 0) continue;
          const LinkSpec& link = plan.stages[k + 1].link_in.name.empty() ? plan.link : plan.stages[k + 1].link_in;
          const double ms = transfer_ms(static_cast<double>(plan.stages[k].send_bytes), link);
          const int x = eng.add(n + k, ms, make_event(k, e.mini_batch, e.micro_batch, SimEvent::kSend));
          eng.depend(x, op);
          eng.depend(fwd[k + 1][p], x);
        } else if (bwd[k][p] >= 0) {
          eng.depend(bwd[k][p], op);  // the loss turns around on the last stage
        }
      } else if (e.kind == SimEvent::kBackward || e.kind == SimEvent::kInputGrad) {
        if (fwd[k][p] >= 0) eng.depend(op, fwd[k][p]);
        if (k > 0 && bwd[k - 1][p] >= 0) {
          // The gradients of what stage k received (the size of what stage k-1 sent when unknown).
          const int64_t bytes = plan.stages[k].grad_send_bytes > 0 ? plan.stages[k].grad_send_bytes
                                                                   : plan.stages[k - 1].send_bytes;
          const LinkSpec& link = plan.stages[k].link_in.name.empty() ? plan.link : plan.stages[k].link_in;
          const double ms = transfer_ms(static_cast<double>(bytes), link);
          const int x = eng.add(2 * n + k - 1, ms, make_event(k - 1, e.mini_batch, e.micro_batch, SimEvent::kRecv));
          eng.depend(x, op);
          eng.depend(bwd[k - 1][p], x);
        }
      }
    }
  }
  if (!eng.run()) return deadlock_error(eng, ir);
  res.events = eng.events();
  // Steady state: asynchronous 1F1B skips the n warm-up mini-batches and the n-1 whose stage-0
  // backward is in the drain; a synchronous schedule repeats whole mini-batches (flushes).
  const int i0 = ir.synchronous ? 0 : n - 1;
  const int i1 = ir.synchronous ? t - 1 : t - n;
  measure(res, devices, t, static_cast<int64_t>(m) * plan.batch_size * std::max(1, plan.graph_replicas), i0, i1,
          share > 1 + 1e-9 ? eng.capacity() : 0);
  track_memory(res, plan, order, eng);
  return res;
}

ScheduleIR fitted_schedule(const Plan& plan) {
  const int n = static_cast<int>(plan.stages.size());
  ScheduleIR unit = builtin_schedule(plan);
  if ((plan.schedule != Schedule::kZBH1 && plan.schedule != Schedule::kZBV) || n == 0) return unit;
  std::vector<PassTimes> times;
  for (const StagePlan& s : plan.stages) times.push_back({s.fwd_ms, s.bwd_ms - s.wgrad_ms, s.wgrad_ms});
  const int devices = static_cast<int>(unit.stages.size());
  ScheduleIR timed = make_schedule(plan.schedule, plan.weights, devices, plan.micro_batches, &times);
  // The greedy order for these times is usually the faster; keep whichever simulates faster.
  Expected<SimResult> a = dry_run(plan, unit, 3), b = dry_run(plan, timed, 3);
  if (!b || (a && a->makespan_ms < b->makespan_ms)) return unit;
  // ZB-V's memory is charged for its unit-time order (schedule_in_flight): a fitted order that
  // keeps more passes anywhere is not taken.
  if (plan.schedule == Schedule::kZBV)
    for (int k = 0; k < n; ++k)
      if (program_in_flight(timed, k) > program_in_flight(unit, k) || w_state_in_flight(timed, k) > w_state_in_flight(unit, k))
        return unit;
  return timed;
}

SimResult simulate(const Plan& plan, int mini_batches) {
  Expected<SimResult> r = dry_run(plan, plan_schedule(plan), mini_batches);
  PT_CHECK(r.has_value()) << "simulator: " << r.status().message();
  return std::move(r).value();
}

SimResult simulate_data_parallel(const Plan& single_stage_plan, int devices, const LinkSpec& link) {
  SimResult res;
  PT_CHECK(!single_stage_plan.stages.empty()) << "data-parallel simulation needs a one-stage plan";
  const int n = std::max(1, devices);
  const int t = 8;
  StagePlan whole;  // the sum of the plan's stages: the whole model on one device
  for (const StagePlan& s : single_stage_plan.stages) {
    whole.fwd_ms += s.fwd_ms;
    whole.bwd_ms += s.bwd_ms;
    whole.update_ms += s.update_ms;
    whole.param_bytes += s.param_bytes;
    whole.memory_bytes += s.memory_bytes;
    whole.saved_bytes += s.saved_bytes * s.in_flight;  // one mini-batch's activations
  }
  const double ring = n > 1 ? 1e3 * (2.0 * (n - 1) / n *
                                         (link.bandwidth > 0 ? whole.param_bytes / link.bandwidth : 0) +
                                     2.0 * (n - 1) * std::max(0.0, link.latency_s))
                            : 0;
  // Resources: replica d computes on d and all-reduces on n + d.
  Engine eng(2 * n);
  std::vector<int> last(n, -1);
  for (int i = 0; i < t; ++i) {
    std::vector<int> b(n), ar(n);
    for (int d = 0; d < n; ++d) {
      eng.add(d, whole.fwd_ms / n, make_event(d, i, 0, SimEvent::kForward));
      b[d] = eng.add(d, whole.bwd_ms / n, make_event(d, i, 0, SimEvent::kBackward));
    }
    for (int d = 0; d < n; ++d) {
      ar[d] = eng.add(n + d, ring, make_event(d, i, 0, SimEvent::kSend));
      for (int e = 0; e < n; ++e) eng.depend(ar[d], b[e]);  // the ring needs every replica
    }
    for (int d = 0; d < n; ++d) {
      const int u = eng.add(d, whole.update_ms, make_event(d, i, 0, SimEvent::kUpdate));
      eng.depend(u, ar[d]);
    }
  }
  eng.run();
  res.events = eng.events();
  measure(res, n, t, single_stage_plan.batch_size, 0, t - 1, 0);
  const int64_t act_share = static_cast<int64_t>(static_cast<double>(whole.saved_bytes) * (1.0 - 1.0 / n));
  res.peak_memory_bytes.assign(n, whole.memory_bytes - act_share);
  return res;
}

std::string what_if_table(const std::vector<WhatIfRow>& rows) {
  double base = 0;
  for (const WhatIfRow& r : rows) {
    if (r.devices == 1 && r.samples_per_s > 0) { base = r.samples_per_s; break; }
  }
  if (base == 0 && !rows.empty()) base = rows.front().samples_per_s;
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "%-20s %7s %12s %8s %8s %12s\n", "scheme", "devices", "samples/s",
                "speedup", "bubble", "peak mem MB");
  out += line;
  for (const WhatIfRow& r : rows) {
    std::snprintf(line, sizeof line, "%-20s %7d %12.1f %7.2fx %7.1f%% %12.1f%s\n", r.scheme.c_str(), r.devices,
                  r.samples_per_s, base > 0 ? r.samples_per_s / base : 0.0, 100.0 * r.bubble_fraction,
                  static_cast<double>(r.peak_memory_bytes) / 1e6, r.chosen ? "  <- chosen" : "");
    out += line;
  }
  // Where fewer devices (or another scheme) are predicted faster than the chosen row, say so: on
  // a CPU whose cores the stages share, more stages can be slower.
  const WhatIfRow* chosen = nullptr;
  const WhatIfRow* best = nullptr;
  for (const WhatIfRow& r : rows) {
    if (r.chosen) chosen = &r;
    if (!best || r.samples_per_s > best->samples_per_s) best = &r;
  }
  if (chosen && best && best != chosen && best->samples_per_s > chosen->samples_per_s * 1.02) {
    std::snprintf(line, sizeof line, "fastest predicted: %s on %d device%s (%.1f samples/s, %.2fx the chosen %s on %d)\n",
                  best->scheme.c_str(), best->devices, best->devices == 1 ? "" : "s", best->samples_per_s,
                  best->samples_per_s / chosen->samples_per_s, chosen->scheme.c_str(), chosen->devices);
    out += line;
  }
  return out;
}

std::string trace_json(const std::vector<SimEvent>& events, const Plan& plan) {
  int n = static_cast<int>(plan.stages.size());
  for (const SimEvent& e : events) n = std::max(n, e.stage + 1);
  const bool gpipe = synchronous(plan.schedule, plan.weights);
  nlohmann::json list = nlohmann::json::array();
  auto meta = [&](int tid, const std::string& name) {
    list.push_back({{"ph", "M"}, {"pid", 0}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", name}}}});
    list.push_back({{"ph", "M"}, {"pid", 0}, {"tid", tid}, {"name", "thread_sort_index"}, {"args", {{"sort_index", tid}}}});
  };
  list.push_back({{"ph", "M"}, {"pid", 0}, {"name", "process_name"},
                  {"args", {{"name", plan.model.empty() ? std::string("pipeline") : plan.model}}}});
  std::vector<bool> has_tid(4 * n, false);
  for (const SimEvent& e : events) {
    const int tid = e.kind == SimEvent::kSend        ? n + e.stage
                    : e.kind == SimEvent::kRecv      ? 2 * n + e.stage
                    : e.kind == SimEvent::kAllReduce ? 3 * n + e.stage
                                                     : e.stage;
    has_tid[tid] = true;
  }
  for (int k = 0; k < n; ++k) {
    const std::string dev = k < static_cast<int>(plan.stages.size()) ? plan.stages[k].device.name : "";
    meta(k, "stage " + std::to_string(k) + (dev.empty() ? "" : " (" + dev + ")"));
    if (has_tid[n + k]) meta(n + k, "link " + std::to_string(k) + "->" + std::to_string(k + 1) + " activations");
    if (has_tid[2 * n + k]) meta(2 * n + k, "link " + std::to_string(k + 1) + "->" + std::to_string(k) + " gradients");
    if (has_tid[3 * n + k]) meta(3 * n + k, "stage " + std::to_string(k) + " all-reduce across replicas");
  }
  for (const SimEvent& e : events) {
    std::string id = std::to_string(e.mini_batch);
    if (gpipe) id += "." + std::to_string(e.micro_batch);
    std::string name, cat;
    int tid = e.stage;
    switch (e.kind) {
      case SimEvent::kForward: name = "F" + id; cat = "forward"; break;
      case SimEvent::kBackward: name = "B" + id; cat = "backward"; break;
      case SimEvent::kInputGrad: name = "I" + id; cat = "backward"; break;
      case SimEvent::kWeightGrad: name = "W" + id; cat = "backward"; break;
      case SimEvent::kUpdate: name = "U" + std::to_string(e.mini_batch); cat = "update"; break;
      case SimEvent::kSend: name = "send F" + id; cat = "comm"; tid = n + e.stage; break;
      case SimEvent::kRecv: name = "grad B" + id; cat = "comm"; tid = 2 * n + e.stage; break;
      case SimEvent::kAllReduce: name = "all-reduce " + std::to_string(e.mini_batch); cat = "comm"; tid = 3 * n + e.stage; break;
      case SimEvent::kGap: name = "runtime " + id; cat = "runtime"; break;
    }
    list.push_back({{"name", name},
                    {"cat", cat},
                    {"ph", "X"},
                    {"pid", 0},
                    {"tid", tid},
                    {"ts", e.start_ms * 1e3},
                    {"dur", (e.end_ms - e.start_ms) * 1e3},
                    {"args", {{"stage", e.stage}, {"mini_batch", e.mini_batch}, {"micro_batch", e.micro_batch}}}});
  }
  nlohmann::json doc = {{"traceEvents", list}, {"displayTimeUnit", "ms"},
                        {"otherData", {{"model", plan.model}, {"schedule", schedule_name(plan.schedule)}}}};
  return doc.dump(1) + "\n";
}

}  // namespace pt
