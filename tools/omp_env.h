// How GCC's OpenMP threads wait for the next parallel region, chosen once per process. libgomp
// reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it loads, so the process re-executes itself
// with the variable set (unless the user set either one):
// - on a machine that was idle at the start (no other thread runnable throughout 30 ms), a
//   bounded spin, GOMP_SPINCOUNT=kIdleSpinCount: a training step opens hundreds of short parallel
//   regions, and waking a sleeping thread for each costs more than the region (2 cores, a
//   Transformer step: 5.2-6.0 ms passive, 2.6-3.2 ms with this spin, docs/performance.md). libgomp
//   itself cuts the spin to 1000 when the process has more threads than CPUs.
// - on a busy machine, OMP_WAIT_POLICY=PASSIVE: spinning threads then take the cores from other
//   processes' threads and their own team's (a loaded 2-core machine: a Transformer step took
//   400 ms with libgomp's default spin and 17 ms passive; with the bounded spin 12-50 ms).
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <string>

namespace pt {

// Busy-wait iterations (x86 `pause`) before an idle OpenMP thread sleeps: well under a
// millisecond, longer than the gap between two kernels of a step.
inline constexpr int kIdleSpinCount = 10000;
// Microseconds a pipeline stage thread spins waiting for another stage's message before it sleeps
// (PipelineOptions::handoff_spin_us): longer than a synchronous schedule's waits for small passes
// (a Transformer's stage waits a whole flush of its neighbour's passes). Measured 2026-12-07 on 2
// CPU stages with 200 us: a message a stage waited for reached it 45 us after its sending (median;
// a wake-up from the condition variable), with 2000 us 0.5 us plus its copy (docs/schedules.md).
inline constexpr int kHandoffSpinUs = 2000;

// "spin" when no other process kept a CPU busy (`busy_cpus`, measured), else
// "passive": the run's threads take every CPU (threads per stage x stages = CPUs), so any other
// busy thread means more runnable threads than CPUs, where a spinning thread holds a CPU another
// one needs.
inline const char* omp_wait_choice(double busy_cpus) { return busy_cpus < 0.5 ? "spin" : "passive"; }

// Runnable threads on the machine now (the 4th field of /proc/loadavg: running / total), this
// one included; -1 when it cannot be read.
inline int runnable_threads() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return -1;
  double a, b, c;
  int running = -1, total = 0;
  if (std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) != 5) running = -1;
  std::fclose(f);
  return running;
}

// This process's runnable threads (state R in /proc/self/task/*/stat): libraries start thread
// pools when they load (OpenBLAS's), before main.
inline int own_runnable_threads() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return 1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;
    char buf[512];
    const size_t len = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[len] = '\0';
    const char* close = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
    if (close && close[1] == ' ' && close[2] == 'R') ++n;
  }
  closedir(d);
  return std::max(n, 1);
}

// How many CPUs other processes keep busy now: runnable threads but this process's, the fewest
// of 10 samples 3 ms apart (a CPU-bound job is runnable in every sample; a kernel thread that
// wakes to write a file back is not); the 1-minute load average where /proc/loadavg lacks the
// count (it lags by a minute: a job that just ended still counts).
inline double busy_cpus_now() {
  int fewest = -1;
  for (int i = 0; i < 10; ++i) {
    const int r = runnable_threads();
    if (r < 1) {
      double load = 0.0;
      return getloadavg(&load, 1) == 1 ? load : 1e9;
    }
    const int others = std::max(0, r - own_runnable_threads());
    fewest = fewest < 0 ? others : std::min(fewest, others);
    if (i < 9) usleep(3000);
  }
  return fewest;
}

// Sets the wait policy as above (PIPETRAIN_OMP_WAIT records the choice for the run's log) and
// re-executes the process; returns at once when OMP_WAIT_POLICY or GOMP_SPINCOUNT is set.
inline void configure_omp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  const char* choice = omp_wait_choice(busy_cpus_now());
  if (std::strcmp(choice, "spin") == 0) {
    setenv("GOMP_SPINCOUNT", std::to_string(kIdleSpinCount).c_str(), 1);
  } else {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  }
  setenv("PIPETRAIN_OMP_WAIT", choice, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run on with libgomp's default
}

// Whether idle threads may spin: not when OMP_WAIT_POLICY is passive (set by the user, or above
// because the machine was busy at the start).
inline bool spinning_allowed() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return !(policy && strcasecmp(policy, "passive") == 0);
}

// What idle OpenMP threads do, for the log: "spin (GOMP_SPINCOUNT=10000; the machine was idle at
// the start)", "sleep (OMP_WAIT_POLICY=PASSIVE; ...busy...)", or "...; set by the user".
inline std::string omp_wait_description() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* ours = std::getenv("PIPETRAIN_OMP_WAIT");
  if (!policy && !spin) return "spin (libgomp's default)";
  std::string vars;
  if (policy) vars = std::string("OMP_WAIT_POLICY=") + policy;
  if (spin) vars += (vars.empty() ? "" : ", ") + std::string("GOMP_SPINCOUNT=") + spin;
  const bool passive = policy && (strcasecmp(policy, "passive") == 0) && !spin;
  std::string why = !ours ? "set by the user"
                          : std::strcmp(ours, "spin") == 0 ? "the machine was idle at the start"
                                                           : "the machine was busy at the start";
  return std::string(passive ? "sleep" : "spin") + " (" + vars + "; " + why + ")";
}

}  // namespace pt
