// The what-if simulator: an event simulation of pipeline schedules over a Plan's stage times
// (asynchronous 1F1B, GPipe with M micro-batches) and of data parallelism with a ring all-reduce.
#pragma once

#include <string>
#include <vector>

#include "partitioner/plan.h"

namespace pt {

struct SimEvent {
  int stage = 0;
  int mini_batch = 0;
  int micro_batch = 0;
  enum Kind { kForward, kBackward, kUpdate, kSend, kRecv } kind = kForward;
  double start_ms = 0, end_ms = 0;
};

struct SimResult {
  std::vector<SimEvent> events;
  double makespan_ms = 0;
  double samples_per_s = 0;       // steady state
  double bubble_fraction = 0;     // idle / total across stages
  std::vector<int64_t> peak_memory_bytes;  // per stage
};

// Simulates `mini_batches` mini-batches of the plan's schedule.
SimResult simulate(const Plan& plan, int mini_batches);

struct WhatIfRow {
  std::string scheme;             // "1f1b", "gpipe (M=4)", "data-parallel"
  int devices = 0;
  double samples_per_s = 0;
  double bubble_fraction = 0;
  int64_t peak_memory_bytes = 0;
};

// Chrome trace event format (Perfetto, chrome://tracing) of a simulated or measured schedule.
std::string trace_json(const std::vector<SimEvent>& events, const Plan& plan);

}  // namespace pt
