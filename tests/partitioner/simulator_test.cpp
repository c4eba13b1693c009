// The what-if simulator against closed forms: one stage has no bubble; N equal 1F1B stages reach
// batch / stage time; GPipe's bubble is (N-1)/(M+N-1); data parallelism over a free link is N
// times one device, and the ring all-reduce costs 2(N-1)/N bytes/bandwidth + 2(N-1) latency;
// passes respect the schedule's order and their data dependencies; the trace is valid JSON.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "partitioner/simulator.h"

namespace pt {
namespace {

using nlohmann::json;

Plan equal_stages(int n, double fwd_ms, double bwd_ms, int64_t batch = 64) {
  Plan p;
  p.model = "equal";
  p.batch_size = batch;
  p.link = {"free", std::numeric_limits<double>::infinity(), 0};
  for (int k = 0; k < n; ++k) {
    StagePlan s;
    s.index = k;
    s.device.name = "dev" + std::to_string(k);
    s.fwd_ms = fwd_ms;
    s.bwd_ms = bwd_ms;
    s.in_flight = n - k;
    p.stages.push_back(s);
  }
  return p;
}

std::vector<SimEvent> of_stage(const SimResult& r, int stage) {
  std::vector<SimEvent> out;
  for (const SimEvent& e : r.events)
    if (e.stage == stage && (e.kind == SimEvent::kForward || e.kind == SimEvent::kBackward)) out.push_back(e);
  return out;
}

TEST(Simulator, StagesSharingCoresShareTheirRate) {
  // Two stages on one core (device_share 2: the plan's times are twice their time alone). GPipe
  // with one micro-batch runs one pass at a time: each at its speed alone, the core never idle.
  Plan g = equal_stages(2, 2.0, 4.0);
  g.device_share = 2;
  g.processor_sharing = true;
  g.schedule = Schedule::kGPipe;
  g.weights = WeightMode::kSync;
  const SimResult r = simulate(g, 6);
  EXPECT_NEAR(r.samples_per_s, 1e3 * 64 / 6.0, 1e-6 * r.samples_per_s);  // F 1 + F 1 + B 2 + B 2 alone
  EXPECT_NEAR(r.bubble_fraction, 0.0, 1e-9);                              // the core's idle time
  for (const SimEvent& e : of_stage(r, 0)) EXPECT_NEAR(e.end_ms - e.start_ms, e.kind == SimEvent::kForward ? 1 : 2, 1e-9);
  // Asynchronous 1F1B keeps both stages computing at once: they share the core, each pass taking
  // twice its time alone, and the core never idles in the steady state (the static model of a
  // dedicated device per stage, twice as slow, would predict the same rate but no overlap).
  Plan a = equal_stages(2, 2.0, 4.0);
  a.device_share = 2;
  a.processor_sharing = true;
  const SimResult s = simulate(a, 12);
  EXPECT_NEAR(s.samples_per_s, 1e3 * 64 / 6.0, 1e-3 * s.samples_per_s);
  EXPECT_NEAR(s.bubble_fraction, 0.0, 1e-3);
  // The plan's own model (processor_sharing false): each stage a device of its own, twice as slow
  // (its times as given): GPipe then takes 12 ms a mini-batch and its cores idle half of it.
  g.processor_sharing = false;
  const SimResult u = simulate(g, 6);
  EXPECT_NEAR(u.samples_per_s, 1e3 * 64 / 12.0, 1e-6 * u.samples_per_s);
  EXPECT_NEAR(u.bubble_fraction, 0.5, 1e-9);
  // One stage per node whose threads outnumber its cores 2 to 1: the stages do not share with each
  // other, each runs at half its speed alone throughout (the plan's times).
  Plan n = equal_stages(2, 2.0, 4.0);
  n.device_share = 2;
  n.processor_sharing = true;
  n.stages[1].node = 1;
  const SimResult t = simulate(n, 12);
  EXPECT_NEAR(t.samples_per_s, 1e3 * 64 / 6.0, 1e-3 * t.samples_per_s);  // each stage 3 alone at half speed
  for (const SimEvent& e : of_stage(t, 1)) EXPECT_NEAR(e.end_ms - e.start_ms, e.kind == SimEvent::kForward ? 2 : 4, 1e-9);
}

TEST(Simulator, OneStageHasNoBubble) {
  Plan p = equal_stages(1, 1.0, 2.0);
  p.stages[0].update_ms = 0.5;
  const SimResult r = simulate(p, 10);
  EXPECT_NEAR(r.bubble_fraction, 0.0, 1e-12);
  EXPECT_NEAR(r.makespan_ms, 10 * 3.5, 1e-9);
  EXPECT_NEAR(r.samples_per_s, 64 / 3.5e-3, 1e-6);
}

TEST(Simulator, TheRuntimesTimeBetweenPassesIsIdleAfterEachAction) {
  // One stage, F 1 + B 2 + U 0.5 a mini-batch, 0.25 ms of the runtime's own after each of its 3
  // actions: 4.25 ms a mini-batch, of which 0.75 idle.
  Plan p = equal_stages(1, 1.0, 2.0);
  p.stages[0].update_ms = 0.5;
  p.stages[0].pass_gap_ms = 0.25;
  const SimResult r = simulate(p, 10);
  EXPECT_NEAR(r.makespan_ms, 10 * 4.25, 1e-9);
  EXPECT_NEAR(r.samples_per_s, 64 / 4.25e-3, 1e-6);
  EXPECT_NEAR(r.bubble_fraction, 0.75 / 4.25, 1e-9);
  int gaps = 0;
  for (size_t i = 0; i < r.events.size(); ++i)
    if (r.events[i].kind == SimEvent::kGap) {
      ++gaps;
      ASSERT_GT(i, 0u);
      EXPECT_NEAR(r.events[i].start_ms, r.events[i - 1].end_ms, 1e-9);  // right behind its action
      EXPECT_NEAR(r.events[i].end_ms - r.events[i].start_ms, 0.25, 1e-9);
    }
  EXPECT_EQ(gaps, 30);
  // GPipe on 2 stages, M = 4 (F 1, B 2), gaps of 0.5: a gap delays its stage's next pass, not the
  // send of the pass before it. Stage 0's forwards end at 1, 2.5, 4 and 5.5; stage 1 runs each as it
  // arrives (1-2, 2.5-3.5, 4-5, 5.5-6.5) and starts its first backward after the last one's gap.
  Plan g = equal_stages(2, 1.0, 2.0);
  g.schedule = Schedule::kGPipe;
  g.weights = WeightMode::kSync;
  g.micro_batches = 4;
  for (StagePlan& s : g.stages) s.pass_gap_ms = 0.5;
  const SimResult q = simulate(g, 3);
  double first_b1 = 1e300;
  for (const SimEvent& e : q.events)
    if (e.stage == 1 && e.kind == SimEvent::kBackward && e.mini_batch == 0) first_b1 = std::min(first_b1, e.start_ms);
  EXPECT_NEAR(first_b1, 7.0, 1e-9);
  // On shared cores (processor sharing) the gap is not simulated: the core serves the others then.
  Plan c = equal_stages(2, 2.0, 4.0);
  c.device_share = 2;
  c.processor_sharing = true;
  for (StagePlan& s : c.stages) s.pass_gap_ms = 1.0;
  for (const SimEvent& e : simulate(c, 6).events) EXPECT_NE(e.kind, SimEvent::kGap);
}

TEST(Simulator, EqualStages1F1BReachBatchOverStageTime) {
  for (int n : {2, 4, 8}) {
    const SimResult r = simulate(equal_stages(n, 1.0, 2.0), 48);
    const double expected = 64 / 3e-3;
    EXPECT_NEAR(r.samples_per_s / expected, 1.0, 0.02) << n << " stages";
    EXPECT_LT(r.bubble_fraction, 0.02) << n << " stages (steady state)";
  }
}

TEST(Simulator, OneF1BWarmsUpWithNMinusKForwards) {
  const int n = 4;
  const SimResult r = simulate(equal_stages(n, 1.0, 2.0), 12);
  for (int k = 0; k < n; ++k) {
    const std::vector<SimEvent> ev = of_stage(r, k);
    int warm = 0;
    while (ev[warm].kind == SimEvent::kForward) ++warm;
    EXPECT_EQ(warm, n - k) << "stage " << k;
    for (size_t i = warm; i + 1 < ev.size() && ev[i + 1].mini_batch + n - k < 12; i += 2) {
      EXPECT_EQ(ev[i].kind, SimEvent::kBackward);
      EXPECT_EQ(ev[i + 1].kind, SimEvent::kForward);  // then strictly one backward, one forward
    }
  }
}

TEST(Simulator, PassesWaitForTheirInputsAndTransfersTakeBytesOverBandwidth) {
  Plan p = equal_stages(3, 1.0, 2.0);
  p.link = {"slow", 1e9, 1e-4};  // 1 GB/s, 0.1 ms
  for (StagePlan& s : p.stages) s.send_bytes = 2'000'000;  // 2 ms + 0.1 ms per transfer
  p.stages[2].send_bytes = 0;
  const SimResult r = simulate(p, 6);
  std::map<std::tuple<int, int, int>, SimEvent> by;  // (kind, stage, mini-batch)
  for (const SimEvent& e : r.events) by[{e.kind, e.stage, e.mini_batch}] = e;
  for (int i = 0; i < 6; ++i) {
    for (int k = 1; k < 3; ++k) {
      const SimEvent& send = by.at({SimEvent::kSend, k - 1, i});
      EXPECT_NEAR(send.end_ms - send.start_ms, 2.1, 1e-9);
      EXPECT_GE(send.start_ms, by.at({SimEvent::kForward, k - 1, i}).end_ms - 1e-9);
      EXPECT_GE(by.at({SimEvent::kForward, k, i}).start_ms, send.end_ms - 1e-9);
      const SimEvent& grad = by.at({SimEvent::kRecv, k - 1, i});
      EXPECT_GE(grad.start_ms, by.at({SimEvent::kBackward, k, i}).end_ms - 1e-9);
      EXPECT_GE(by.at({SimEvent::kBackward, k - 1, i}).start_ms, grad.end_ms - 1e-9);
    }
  }
  // The first mini-batch's critical path: F0 F1 F2 B2 B1 B0 with four transfers.
  EXPECT_NEAR(by.at({SimEvent::kBackward, 0, 0}).end_ms, 3 * 1.0 + 3 * 2.0 + 4 * 2.1, 1e-9);
}

TEST(Simulator, GPipeBubbleIsNMinusOneOverMPlusNMinusOne) {
  for (auto [n, m] : {std::pair{4, 8}, {2, 4}, {4, 1}, {8, 32}}) {
    Plan p = equal_stages(n, 4.0, 8.0);
    p.schedule = Schedule::kGPipe;
    p.micro_batches = m;
    for (StagePlan& s : p.stages) s.in_flight = m;
    const SimResult r = simulate(p, 4);
    const double expected = static_cast<double>(n - 1) / (m + n - 1);
    EXPECT_NEAR(r.bubble_fraction, expected, 0.02) << n << " stages, " << m << " micro-batches";
    EXPECT_NEAR(r.samples_per_s, 64 / (12e-3 * (m + n - 1) / m), 1e-6 * r.samples_per_s);
    for (int k = 0; k < n; ++k) EXPECT_EQ(r.peak_memory_bytes[k], 0);  // M in flight, as planned
  }
}

TEST(Simulator, PeakMemoryFollowsTheActivationsInFlight) {
  Plan p = equal_stages(4, 1.0, 2.0);
  for (StagePlan& s : p.stages) {
    s.saved_bytes = 1000;
    s.in_flight = 1;  // a plan that assumed one mini-batch in flight everywhere
    s.memory_bytes = 5000 + 1000;
  }
  const SimResult r = simulate(p, 12);
  ASSERT_EQ(r.peak_memory_bytes.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(r.peak_memory_bytes[k], 5000 + 1000 * (4 - k)) << "stage " << k;
}

TEST(Simulator, DataParallelOverAFreeLinkIsNTimesOneDevice) {
  Plan one = equal_stages(1, 4.0, 8.0);
  one.stages[0].param_bytes = 100'000'000;
  const LinkSpec free_link{"free", std::numeric_limits<double>::infinity(), 0};
  const SimResult single = simulate_data_parallel(one, 1, free_link);
  EXPECT_NEAR(single.samples_per_s, 64 / 12e-3, 1e-6);
  for (int n : {2, 4, 8}) {
    const SimResult r = simulate_data_parallel(one, n, free_link);
    EXPECT_NEAR(r.samples_per_s / single.samples_per_s, n, 1e-9) << n;
    EXPECT_NEAR(r.bubble_fraction, 0, 1e-12);
  }
  const LinkSpec pcie{"pcie3", 1e10, 1e-5};
  const SimResult r = simulate_data_parallel(one, 4, pcie);
  const double ring_ms = 1e3 * (2.0 * 3 / 4 * 1e8 / 1e10 + 2.0 * 3 * 1e-5);
  EXPECT_NEAR(r.samples_per_s, 64 / ((12.0 / 4 + ring_ms) * 1e-3), 1e-6 * r.samples_per_s);
  EXPECT_NEAR(r.bubble_fraction, ring_ms / (3.0 + ring_ms), 1e-9);
}

TEST(Simulator, TraceIsChromeTraceJsonWithOneEventPerPass) {
  for (Schedule sched : {Schedule::k1F1B, Schedule::kGPipe}) {
    Plan p = equal_stages(3, 1.0, 2.0);
    p.schedule = sched;
    p.micro_batches = sched == Schedule::kGPipe ? 4 : 1;
    p.stages[0].update_ms = 0.1;
    const SimResult r = simulate(p, 5);
    const json j = json::parse(trace_json(r.events, p));
    ASSERT_TRUE(j.at("traceEvents").is_array());
    int passes = 0, updates = 0;
    for (const json& e : j["traceEvents"]) {
      if (e.at("ph") != "X") continue;
      EXPECT_EQ(e.at("pid"), 0);
      EXPECT_GE(e.at("dur").get<double>(), 0);
      const std::string name = e.at("name");
      if (name[0] == 'F' || name[0] == 'B') {
        ++passes;
        EXPECT_EQ(e.at("tid"), e.at("args").at("stage"));
        EXPECT_TRUE(e["args"].contains("mini_batch"));
        EXPECT_TRUE(e["args"].contains("micro_batch"));
      }
      if (name[0] == 'U') ++updates;
    }
    EXPECT_EQ(passes, 2 * 3 * 5 * p.micro_batches);
    EXPECT_EQ(updates, 5);  // only stage 0 takes time to update
  }
  // Names as in the brief: "F3" for mini-batch 3.
  const Plan p = equal_stages(2, 1.0, 2.0);
  const std::string t = trace_json(simulate(p, 4).events, p);
  EXPECT_NE(t.find("\"F3\""), std::string::npos);
  EXPECT_NE(t.find("\"B3\""), std::string::npos);
}

TEST(Simulator, WhatIfTableShowsEveryRowWithItsSpeedup) {
  const std::vector<WhatIfRow> rows = {{"1f1b", 1, 1000, 0, 1'000'000},
                                       {"1f1b", 4, 3500, 0.05, 400'000},
                                       {"data-parallel", 4, 2000, 0.2, 1'000'000}};
  const std::string t = what_if_table(rows);
  EXPECT_NE(t.find("data-parallel"), std::string::npos) << t;
  EXPECT_NE(t.find("3.50x"), std::string::npos) << t;
  EXPECT_NE(t.find("2.00x"), std::string::npos) << t;
  EXPECT_NE(t.find("20.0%"), std::string::npos) << t;
  EXPECT_EQ(t.find("fastest predicted"), std::string::npos) << t;  // nothing chosen
}

TEST(Simulator, WhatIfTableSaysWhenFewerDevicesArePredictedFaster) {
  // Stages sharing a CPU's cores: 2 stages predicted faster than the 4 asked for.
  std::vector<WhatIfRow> rows = {{"1f1b", 1, 1000, 0, 1'000'000},
                                 {"1f1b", 2, 1500, 0.01, 600'000},
                                 {"1f1b", 4, 1200, 0.05, 400'000}};
  rows[2].chosen = true;
  std::string t = what_if_table(rows);
  EXPECT_NE(t.find("fastest predicted: 1f1b on 2 devices (1500.0 samples/s, 1.25x the chosen 1f1b on 4)"),
            std::string::npos)
      << t;
  // The chosen row the fastest (or within 2 %): no such line.
  rows[2].samples_per_s = 1490;
  t = what_if_table(rows);
  EXPECT_EQ(t.find("fastest predicted"), std::string::npos) << t;
}

}  // namespace
}  // namespace pt
