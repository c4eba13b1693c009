// Schedules as data (partitioner/schedule.h): the generators' programs against the orders they
// stand for, the structural check and the file form against malformed programs, the passes in
// flight against the textbook counts, and the dry run against the bubble formulas and deadlocks.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "partitioner/schedule.h"
#include "partitioner/simulator.h"

namespace pt {
namespace {

std::string tokens(const std::vector<Step>& steps) {
  std::string s;
  for (const Step& st : steps)
    s.append(s.empty() ? "" : " ").append(action_token(st.action)).append("/").append(std::to_string(st.mini_batch));
  return s;
}

std::string steady(const ScheduleIR& ir, int k) {
  std::string s;
  for (const Action& a : ir.stages[k].steady) s.append(s.empty() ? "" : " ").append(action_token(a));
  return s;
}

Plan equal_stages(int n, double f, double b, double w = 0) {
  Plan p;
  p.model = "equal";
  p.batch_size = 8;
  p.link = {"free", std::numeric_limits<double>::infinity(), 0};
  for (int k = 0; k < n; ++k) {
    StagePlan s;
    s.index = k;
    s.fwd_ms = f;
    s.bwd_ms = b;
    s.wgrad_ms = w;
    p.stages.push_back(s);
  }
  return p;
}

TEST(Schedule, AsyncOneFOneBIsTheRuntimesOldOrder) {
  // Stage 0 of 4: three forwards ahead, then F, B, U of successive mini-batches; the drain at the end.
  const ScheduleIR ir = make_schedule(Schedule::k1F1B, WeightMode::kSpecTrain, 4, 1);
  EXPECT_FALSE(ir.synchronous);
  EXPECT_EQ(tokens(expand(ir.stages[0], 5)),
            "F0/0 F0+1/1 F0+2/2 F0+3/3 B0/0 U/0 F0+3/4 B0/1 U/1 B0/2 U/2 B0/3 U/3 B0/4 U/4");
  EXPECT_EQ(tokens(expand(ir.stages[3], 2)), "F0/0 B0/0 U/0 F0/1 B0/1 U/1");
  // A segment [3, 5) and one that ends early (set_end while walking) drain what they started.
  ProgramCursor c(ir.stages[1], 3, 100);
  std::vector<Step> got;
  Step s;
  while (c.next(&s)) {
    got.push_back(s);
    if (got.size() == 4) c.set_end(5);
  }
  EXPECT_EQ(tokens(got), "F0/3 F0+1/4 F0+2/5 B0/3 U/3 B0/4 U/4");
}

TEST(Schedule, SynchronousPrograms) {
  EXPECT_EQ(steady(make_schedule(Schedule::kGPipe, WeightMode::kSync, 3, 3), 1), "F0 F1 F2 B0 B1 B2 U");
  const ScheduleIR f = make_schedule(Schedule::k1F1B, WeightMode::kSync, 3, 4);
  EXPECT_TRUE(f.synchronous);
  EXPECT_EQ(f.name, "1f1b-sync");
  EXPECT_EQ(steady(f, 0), "F0 F1 F2 B0 F3 B1 B2 B3 U");
  EXPECT_EQ(steady(f, 2), "F0 B0 F1 B1 F2 B2 F3 B3 U");
  // Fewer micro-batches than stages: all of them ahead.
  EXPECT_EQ(steady(make_schedule(Schedule::k1F1B, WeightMode::kSync, 4, 2), 0), "F0 F1 B0 B1 U");
  const ScheduleIR z = make_schedule(Schedule::kZBH1, WeightMode::kSync, 2, 4);
  EXPECT_TRUE(z.splits_backward());
  // Two stages of unit passes: the last stage defers its W's while the first keeps forwarding;
  // the first fills its waits for gradients with W's.
  EXPECT_EQ(steady(z, 1), "F0 I0 F1 I1 F2 W0 I2 F3 W1 I3 W2 W3 U");
  EXPECT_EQ(steady(z, 0), "F0 F1 I0 F2 I1 F3 W0 I2 W1 W2 I3 W3 U");
}

TEST(Schedule, EveryBuiltInProgramPassesTheCheckAndItsFileFormRoundTrips) {
  for (Schedule s : {Schedule::k1F1B, Schedule::kGPipe, Schedule::kZBH1})
    for (WeightMode w : {WeightMode::kSpecTrain, WeightMode::kSync})
      for (int n = 1; n <= 6; ++n)
        for (int m : {1, 2, 3, 4, 8}) {
          const ScheduleIR ir = make_schedule(s, w, n, m);
          const std::string what = ir.name + " N=" + std::to_string(n) + " M=" + std::to_string(m);
          ASSERT_TRUE(check_schedule(ir, "").is_ok()) << what << ": " << check_schedule(ir, "").message();
          Expected<ScheduleIR> back = parse_schedule_csv(schedule_csv(ir), "s.csv");
          ASSERT_TRUE(back.has_value()) << what << ": " << back.status().message();
          // (One stage of asynchronous 1F1B is one pass per mini-batch: the file reads it as synchronous.)
          EXPECT_EQ(back->synchronous, ir.synchronous || n == 1) << what;
          EXPECT_EQ(back->micro_batches, ir.micro_batches) << what;
          ASSERT_EQ(back->stages.size(), ir.stages.size()) << what;
          for (size_t k = 0; k < ir.stages.size(); ++k) {
            EXPECT_EQ(back->stages[k].warmup, ir.stages[k].warmup) << what;
            EXPECT_EQ(back->stages[k].steady, ir.stages[k].steady) << what;
          }
        }
}

TEST(Schedule, PassesInFlight) {
  for (int n = 1; n <= 6; ++n)
    for (int m : {1, 2, 4, 8})
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(program_in_flight(make_schedule(Schedule::kGPipe, WeightMode::kSync, n, m), k), m);
        EXPECT_EQ(program_in_flight(make_schedule(Schedule::k1F1B, WeightMode::kSpecTrain, n, m), k), n - k);
        EXPECT_EQ(program_in_flight(make_schedule(Schedule::k1F1B, WeightMode::kSync, n, m), k), std::min(n - k, m));
        // ZB-H1 keeps no more passes before their I than 1F1B, and at most N waiting for their W.
        const ScheduleIR z = make_schedule(Schedule::kZBH1, WeightMode::kSync, n, m);
        EXPECT_LE(program_in_flight(z, k, true), std::min(n - k, m)) << n << " " << m << " " << k;
        EXPECT_LE(w_state_in_flight(z, k), std::min(n, m)) << n << " " << m << " " << k;
        EXPECT_GE(schedule_in_flight(Schedule::kZBH1, WeightMode::kSync, n, k, m), program_in_flight(z, k));
      }
}

TEST(Schedule, MalformedProgramsAreRefusedNamingStageAndAction) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"stage,part,actions\n0,steady,F0 F1 B0 U\n", "stage 0, mini-batch 0, action U: before B1"},
      {"stage,part,actions\n0,steady,F0 F0 B0 U\n", "action F0: repeated"},
      {"stage,part,actions\n0,steady,B0 F0 U\n", "action B0: before its forward"},
      {"stage,part,actions\n0,steady,F0 I0 U\n", "action U: before W0"},
      {"stage,part,actions\n0,steady,F0 W0 I0 U\n", "action W0: before its input-gradient part I"},
      {"stage,part,actions\n0,steady,F0 B0 W0 U\n", "action W0: after a whole backward B"},
      {"stage,part,actions\n0,steady,F1 F0 B0 B1 U\n", "action F1: before F0"},
      {"stage,part,actions\n0,steady,F0 B0\n", "no update U"},
      {"stage,part,actions\n0,steady,F0 X0 U\n", "action 'X0'"},
      {"stage,part,actions\n1,steady,F0 B0 U\n", "stage 0 has no row"},
      {"stage,part,actions\n0,steady,F0 B0 U\n0,steady,F0 B0 U\n", "two steady rows"},
      {"0,steady,F0 B0 U\n", "header"},
      {"stage,part,actions\n0,middle,F0 B0 U\n", "part 'middle'"},
  };
  for (const Case& c : cases) {
    Expected<ScheduleIR> ir = parse_schedule_csv(c.text, "s.csv");
    ASSERT_FALSE(ir.has_value()) << c.text;
    EXPECT_EQ(ir.status().code(), StatusCode::kInvalidInput);
    EXPECT_NE(ir.status().message().find(c.needle), std::string::npos) << ir.status().message();
    EXPECT_EQ(ir.status().message().rfind("s.csv", 0), 0u) << ir.status().message();
  }
}

TEST(Schedule, DryRunBubblesMatchTheFormulas) {
  // Equal stages, free links: GPipe and synchronous 1F1B idle (p-1)/(m+p-1) of the time.
  for (int n : {2, 4})
    for (int m : {4, 8}) {
      Plan p = equal_stages(n, 1.0, 2.0, 1.0);
      p.micro_batches = m;
      for (Schedule s : {Schedule::kGPipe, Schedule::k1F1B}) {
        p.schedule = s;
        p.weights = WeightMode::kSync;
        const SimResult r = simulate(p, 4);
        EXPECT_NEAR(r.bubble_fraction, (n - 1.0) / (m + n - 1.0), 1e-9) << schedule_name(s) << " " << n << " " << m;
      }
      // ZB-H1 with F = I = W: at most a third of 1F1B's idle time plus the few steps its greedy
      // order loses at the end; always less than 1F1B's.
      p.schedule = Schedule::kZBH1;
      const SimResult z = simulate(p, 4);
      const double one_f_one_b = (n - 1.0) / (m + n - 1.0);
      EXPECT_LT(z.bubble_fraction, 0.75 * one_f_one_b) << n << " " << m;
      EXPECT_GE(z.bubble_fraction, (n - 1) / 3.0 / (m + (n - 1) / 3.0) - 1e-9) << n << " " << m;
    }
  // Two stages, four micro-batches of unit F, I and W: 1F1B's 25 % of the compute becomes 1/12.
  Plan p = equal_stages(2, 1.0, 2.0, 1.0);
  p.micro_batches = 4;
  p.schedule = Schedule::kZBH1;
  p.weights = WeightMode::kSync;
  const SimResult z = simulate(p, 1);
  EXPECT_NEAR(z.makespan_ms, 13 * 1.0, 1e-9);  // 12 passes of 1 ms each per stage, one of fill
}

TEST(Schedule, DryRunTimesPassesPerMicroBatchAndTheUpdateOncePerMiniBatch) {
  // The plan's times are per pass (one micro-batch) and its update per mini-batch: GPipe's steady
  // state is the partitioner's formula M b / ((M + N - 1)(f + b) + u) at every M. (The dry run
  // once divided the pass times by M while leaving the update whole, so a 0.5 ms update weighed
  // M times too much against the passes and the bubble grew with M.)
  for (int m : {4, 16}) {
    Plan p = equal_stages(2, 1.0, 2.0, 1.0);
    for (StagePlan& s : p.stages) s.update_ms = 0.5;
    p.micro_batches = m;
    p.schedule = Schedule::kGPipe;
    p.weights = WeightMode::kSync;
    const SimResult r = simulate(p, 6);
    const double step_ms = (m + 1) * 3.0 + 0.5;
    EXPECT_NEAR(r.samples_per_s, 1e3 * m * 8 / step_ms, 1e-6 * r.samples_per_s) << m;
    EXPECT_NEAR(r.bubble_fraction, 1 - (m * 3.0 + 0.5) / step_ms, 1e-9) << m;
  }
}

TEST(Schedule, ZbH1OrderFitsTheStageTimes) {
  // A first stage that sends nothing has no I (all of its backward is W), the last a short W:
  // the order fitted to these times is a valid program, never slower than the unit-time order on
  // them, and faster than synchronous 1F1B.
  for (int n : {2, 3, 4})
    for (int m : {2, 4, 8}) {
      Plan p = equal_stages(n, 1.0, 2.0, 1.0);
      p.stages[0].wgrad_ms = 2.0;
      p.stages[n - 1].wgrad_ms = 0.5;
      p.micro_batches = m;
      p.schedule = Schedule::kZBH1;
      p.weights = WeightMode::kSync;
      const ScheduleIR timed = fitted_schedule(p);
      ASSERT_TRUE(check_schedule(timed, "").is_ok()) << n << " " << m;
      const double t_timed = dry_run(p, timed, 3)->makespan_ms;
      const double t_unit = dry_run(p, make_schedule(p.schedule, p.weights, n, m), 3)->makespan_ms;
      EXPECT_LE(t_timed, t_unit + 1e-9) << n << " " << m;
      p.schedule = Schedule::k1F1B;
      EXPECT_LT(t_timed, simulate(p, 3).makespan_ms) << n << " " << m;
      for (int k = 0; k < n; ++k) {
        EXPECT_LE(program_in_flight(timed, k), schedule_in_flight(Schedule::kZBH1, WeightMode::kSync, n, k, m));
        EXPECT_LE(program_in_flight(timed, k, true), std::min(n - k, m));
      }
    }
}

TEST(Schedule, DeadlockIsRefusedWithTheGrid) {
  // Stage 1 wants F1 before it sends B0's gradients; stage 0 sends F1 only after receiving them.
  Expected<ScheduleIR> ir = parse_schedule_csv(
      "stage,part,actions\n0,steady,F0 B0 F1 B1 U\n1,steady,F0 F1 B0 B1 U\n", "dead.csv");
  ASSERT_TRUE(ir.has_value()) << ir.status().message();
  Plan p = equal_stages(2, 1.0, 2.0);
  p.micro_batches = 2;
  p.schedule = Schedule::kGPipe;
  p.weights = WeightMode::kSync;
  Expected<SimResult> r = dry_run(p, *ir, 2);
  ASSERT_FALSE(r.has_value());
  const std::string m = r.status().message();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(m.find("schedule dead.csv deadlocks"), std::string::npos) << m;
  EXPECT_NE(m.find("stage 0 waits at B0(0) for stage 1's B0(0)"), std::string::npos) << m;
  EXPECT_NE(m.find("stage 1 waits at F1(0) for stage 0's F1(0)"), std::string::npos) << m;
  EXPECT_NE(m.find("stage 1: F0(0) [F1(0)]"), std::string::npos) << m;
  // The same actions in a working order run.
  Expected<ScheduleIR> ok = parse_schedule_csv(
      "stage,part,actions\n0,steady,F0 F1 B0 B1 U\n1,steady,F0 B0 F1 B1 U\n", "ok.csv");
  ASSERT_TRUE(ok.has_value());
  EXPECT_TRUE(dry_run(p, *ok, 2).has_value());
}

TEST(Schedule, InterleavedIsMegatronsOrder) {
  // 2 devices x 2 chunks, 4 micro-batches: device 0 runs 2 (N-d-1) + (V-1) N = 4 forwards ahead,
  // two micro-batches at a time through chunk 0, then chunk 1; backwards from the last chunk down.
  const ScheduleIR ir = make_schedule(Schedule::kInterleaved, WeightMode::kSync, 2, 4, nullptr, 2);
  EXPECT_TRUE(ir.synchronous);
  EXPECT_EQ(ir.chunks, 2);
  EXPECT_EQ(ir.virtual_stages(), 4);
  EXPECT_EQ(steady(ir, 0), "F0 F1 F0@1 F1@1 F2 B0@1 F3 B1@1 F2@1 B0 F3@1 B1 B2@1 B3@1 B2 B3 U@1 U");
  EXPECT_EQ(steady(ir, 1), "F0 F1 F0@1 B0@1 F1@1 B1@1 F2 B0 F3 B1 F2@1 B2@1 F3@1 B3@1 B2 B3 U@1 U");
  // Virtual stage 3 is device 1's chunk 1: its own actions, as a one-chunk program.
  const StageProgram last = ir.chunk_program(3);
  std::string got;
  for (const Action& a : last.steady) got.append(got.empty() ? "" : " ").append(action_token(a));
  EXPECT_EQ(got, "F0 B0 F1 B1 F2 B2 F3 B3 U");
  EXPECT_EQ(ir.device_of(3), 1);
  EXPECT_EQ(ir.chunk_of(3), 1);
  // Micro-batches in groups of the stage count; one device runs nothing interleaved.
  EXPECT_NE(interleaved_error(2, 2, 3).find("--micro-batches 3"), std::string::npos);
  EXPECT_NE(interleaved_error(1, 2, 4).find("at least 2 stages"), std::string::npos);
  EXPECT_EQ(interleaved_error(4, 3, 8), "");
}

TEST(Schedule, InterleavedProgramsCheckRoundTripAndKeepFewPassesInFlight) {
  for (int n = 2; n <= 4; ++n)
    for (int v = 1; v <= 3; ++v)
      for (int m : {n, 2 * n, 4 * n}) {
        const ScheduleIR ir = make_schedule(Schedule::kInterleaved, WeightMode::kSync, n, m, nullptr, v);
        const std::string what = "N=" + std::to_string(n) + " V=" + std::to_string(v) + " M=" + std::to_string(m);
        ASSERT_TRUE(check_schedule(ir, "").is_ok()) << what << ": " << check_schedule(ir, "").message();
        Expected<ScheduleIR> back = parse_schedule_csv(schedule_csv(ir), "s.csv");
        ASSERT_TRUE(back.has_value()) << what << ": " << back.status().message();
        EXPECT_EQ(back->chunks, v) << what;
        for (int d = 0; d < n; ++d) EXPECT_EQ(back->stages[d].steady, ir.stages[d].steady) << what;
        // Every virtual stage keeps at most every micro-batch in flight; the first chunk of device 0
        // no more than its warm-up's share (Megatron's bound: it starts 2 (N-1) + (V-1) N ahead).
        for (int k = 0; k < n * v; ++k) {
          EXPECT_LE(program_in_flight(ir, k), m) << what << " stage " << k;
          EXPECT_EQ(schedule_in_flight(Schedule::kInterleaved, WeightMode::kSync, n * v, k, m, v), program_in_flight(ir, k));
        }
        // The plan of n x v equal virtual stages runs it without a deadlock, with less bubble
        // than 1F1B on n stages of the same total work, and the bubble of the formula
        // (N-1)/V / (M + (N-1)/V) when M > N (M = N runs every forward first).
        Plan p = equal_stages(n * v, 1.0 / v, 2.0 / v);
        p.micro_batches = m;
        p.schedule = Schedule::kInterleaved;
        p.weights = WeightMode::kSync;
        p.virtual_stages = v;
        Expected<SimResult> r = dry_run(p, ir, 3);
        ASSERT_TRUE(r.has_value()) << what << ": " << r.status().message();
        const double x = (n - 1.0) / v;
        if (m > n) {
          EXPECT_NEAR(r->bubble_fraction, x / (m + x), 1e-9) << what;
        }
        Plan q = equal_stages(n, 1.0, 2.0);
        q.micro_batches = m;
        q.schedule = Schedule::k1F1B;
        q.weights = WeightMode::kSync;
        if (v > 1) {
          EXPECT_LT(r->bubble_fraction, simulate(q, 3).bubble_fraction - 1e-9) << what;
        } else {
          EXPECT_NEAR(r->bubble_fraction, simulate(q, 3).bubble_fraction, 1e-9) << what;
        }
      }
}

TEST(Schedule, InterleavedFilesNameChunksAndDeadlocksSayWhichChunk) {
  // A chunk beyond the file's own count cannot happen (the highest named sets it); a device whose
  // chunk 1 forwards before its chunk 0 sent anything waits forever.
  Expected<ScheduleIR> bad = parse_schedule_csv("stage,part,actions\n0,steady,F0 F0@1 B0@1 B0 U@1 U\n1,steady,F0@1 F0 B0@1 B0 U@1 U\n", "i.csv");
  ASSERT_TRUE(bad.has_value()) << bad.status().message();
  EXPECT_EQ(bad->chunks, 2);
  Plan p = equal_stages(4, 1.0, 2.0);
  p.schedule = Schedule::kInterleaved;
  p.weights = WeightMode::kSync;
  p.virtual_stages = 2;
  Expected<SimResult> r = dry_run(p, *bad, 1);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("stage 1 waits at F0@1(0) for stage 0's F0@1(0)"), std::string::npos)
      << r.status().message();
  Expected<ScheduleIR> missing = parse_schedule_csv("stage,part,actions\n0,steady,F0 F0@1 B0@1 U@1 U\n", "m.csv");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.status().message().find("virtual stage 0 (stage 0, chunk 0), mini-batch 0, action U: before B0"),
            std::string::npos)
      << missing.status().message();
}

TEST(Schedule, ZbvRunsDownAndBackUpTheDevices) {
  for (int n = 2; n <= 4; ++n)
    for (int m : {2, 4, 2 * n, 4 * n}) {
      const ScheduleIR z = make_schedule(Schedule::kZBV, WeightMode::kSync, n, m);
      const std::string what = "N=" + std::to_string(n) + " M=" + std::to_string(m);
      EXPECT_TRUE(z.v_shape && z.chunks == 2 && z.splits_backward() && z.synchronous) << what;
      // Device 0 runs the first and the last virtual stage (the loss); device N-1 the middle two.
      EXPECT_EQ(z.device_of(0), 0);
      EXPECT_EQ(z.device_of(2 * n - 1), 0);
      EXPECT_EQ(z.device_of(n - 1), n - 1);
      EXPECT_EQ(z.device_of(n), n - 1);
      EXPECT_EQ(z.virtual_of(0, 1), 2 * n - 1);
      ASSERT_TRUE(check_schedule(z, "").is_ok()) << what << ": " << check_schedule(z, "").message();
      Expected<ScheduleIR> back = parse_schedule_csv(schedule_csv(z), "z.csv");
      ASSERT_TRUE(back.has_value()) << what << ": " << back.status().message();
      EXPECT_TRUE(back->v_shape) << what;
      for (int d = 0; d < n; ++d) EXPECT_EQ(back->stages[d].steady, z.stages[d].steady) << what;
      // Equal virtual stages with F = I = W: no deadlock, less bubble than ZB-H1 on N stages of the
      // same total work, under 2 % once M >= 2N, and a device holds the activations of at most 2N+1
      // chunk passes before their I (N + 1/2 stages' worth; 1F1B's first stage holds N).
      Plan p = equal_stages(2 * n, 0.5, 1.0, 0.5);
      p.micro_batches = m;
      p.schedule = Schedule::kZBV;
      p.weights = WeightMode::kSync;
      p.virtual_stages = 2;
      Expected<SimResult> r = dry_run(p, z, 3);
      ASSERT_TRUE(r.has_value()) << what << ": " << r.status().message();
      Plan q = equal_stages(n, 1.0, 2.0, 1.0);
      q.micro_batches = m;
      q.schedule = Schedule::kZBH1;
      q.weights = WeightMode::kSync;
      const double zbh1 = simulate(q, 3).bubble_fraction;
      EXPECT_LT(r->bubble_fraction, zbh1) << what;
      if (m >= 2 * n) {
        EXPECT_LT(r->bubble_fraction, 0.02) << what;  // zero bubble, but for the ends
      }
      for (int d = 0; d < n; ++d) {
        const int held = program_in_flight(z, z.virtual_of(d, 0), true) + program_in_flight(z, z.virtual_of(d, 1), true);
        EXPECT_LE(held, 2 * n + 1) << what << " device " << d;
      }
    }
}

}  // namespace
}  // namespace pt
