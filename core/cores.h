// The cores this process may run on: its CPU affinity (taskset, cgroup cpusets, a batch scheduler's
// binding, tools/netns-cluster.sh's nodes), not every core of the machine as
// std::thread::hardware_concurrency says. What a process's own threads may use (its stage threads,
// its loader); the plan and the calibration cache keep the machine's count, which every rank of a
// node agrees on however mpirun bound each one.
#pragma once

#include <sched.h>

#include <thread>

namespace pt {

inline int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace pt
