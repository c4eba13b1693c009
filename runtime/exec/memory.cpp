// Process memory from /proc/self/status.
#include "runtime/exec/memory.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pt {

namespace {

size_t status_kb(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      kb = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace

void configure_allocator() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr) return;
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

size_t process_rss_bytes() { return status_kb("VmRSS"); }
size_t process_peak_rss_bytes() { return status_kb("VmHWM"); }

size_t release_initial_values(Graph& g, const std::set<std::string>& keep) {
  size_t bytes = 0;
  for (auto& up : g.values()) {
    Value* v = up.get();
    if (!v->data || (v->kind != ValueKind::kParameter && v->kind != ValueKind::kState) || keep.count(v->name)) continue;
    if (v->data->data()) bytes += v->data->bytes();  // an adopted (moved-out) tensor holds nothing
    v->data.reset();
  }
  return bytes;
}

size_t release_zero_state(Graph& g) {
  size_t bytes = 0;
  for (auto& up : g.values()) {
    Value* v = up.get();
    if (!v->data || v->kind != ValueKind::kState || v->from_initializer) continue;
    const auto* p = static_cast<const unsigned char*>(v->data->data());
    const size_t n = v->data->bytes();
    bool zero = true;
    for (size_t i = 0; i < n && zero; ++i) zero = p[i] == 0;
    if (!zero) continue;
    bytes += n;
    v->data.reset();
  }
  return bytes;
}

std::string out_of_memory_message(const std::string& what, size_t bytes) {
  char b[64];
  std::snprintf(b, sizeof b, " (%.1f MB)", static_cast<double>(bytes) / 1e6);
  return "out of memory allocating " + what + b;
}

bool is_out_of_memory(const Status& s) {
  return !s.is_ok() && s.message().find("out of memory allocating ") != std::string::npos;
}

namespace {

size_t meminfo_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "MemAvailable:", 13) == 0) {
      kb = std::strtoull(line + 13, nullptr, 10);
      break;
    }
  std::fclose(f);
  return kb * 1024;
}

// A number from a one-line file (cgroup's memory.max / memory.current); false for "max" or none.
bool read_number_file(const char* path, size_t* n) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char line[64] = {0};
  const bool ok = std::fgets(line, sizeof line, f) && line[0] >= '0' && line[0] <= '9';
  std::fclose(f);
  if (ok) *n = std::strtoull(line, nullptr, 10);
  return ok;
}

}  // namespace

size_t memory_available_bytes() {
  size_t avail = meminfo_available_bytes();
  if (avail == 0) avail = SIZE_MAX;
  size_t max = 0, current = 0;
  if (read_number_file("/sys/fs/cgroup/memory.max", &max) && read_number_file("/sys/fs/cgroup/memory.current", &current))
    avail = std::min(avail, max > current ? max - current : 0);
  rlimit lim{};
  if (::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    const size_t limit = static_cast<size_t>(lim.rlim_cur), used = status_kb("VmSize");
    avail = std::min(avail, limit > used ? limit - used : 0);
  }
  return avail;
}

Status with_batch_hint(const Status& s, const Plan& plan, size_t other_bytes) {
  if (!is_out_of_memory(s) || plan.stages.empty() || plan.batch_size <= 0) return s;
  rlimit lim{};
  size_t limit = 0;
  std::string source;
  if (::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    limit = static_cast<size_t>(lim.rlim_cur);
    source = "the address-space limit (ulimit -v)";
  } else {
    limit = meminfo_available_bytes() + process_rss_bytes();
    source = "available memory";
  }
  // The plan's model: what scales with the batch (saved activations, workspace) and what does not.
  const bool pipelined = plan.stages.size() > 1 || plan.schedule == Schedule::kGPipe;
  double fixed = 0, per_batch = 0;
  for (const StagePlan& st : plan.stages) {
    // A recomputing stage keeps its inputs per pass in flight and one set of activations.
    const double act = st.recompute ? static_cast<double>(st.recompute_input_bytes) * (st.in_flight + (pipelined ? 1 : 0)) +
                                          static_cast<double>(st.saved_bytes + st.workspace_bytes)
                                    : static_cast<double>(st.saved_bytes) * (st.in_flight + (pipelined ? 1 : 0)) +
                                          static_cast<double>(st.workspace_bytes);
    per_batch += act;
    fixed += static_cast<double>(st.memory_bytes) - act;
  }
  const double room = static_cast<double>(limit) - static_cast<double>(other_bytes) - fixed;
  const double b = per_batch > 0 ? std::floor(static_cast<double>(plan.batch_size) * room / per_batch) : 0;
  char mb[64];
  std::snprintf(mb, sizeof mb, "%.0f MB", static_cast<double>(limit) / 1e6);
  std::string hint = "; the plan's memory model puts " + std::string(plan.stages.size() > 1 ? "these stages" : "this stage") +
                     " within " + source + " (" + mb + ") at ";
  if (b >= 1 && b < static_cast<double>(plan.batch_size))
    hint += "a batch size of about " + std::to_string(static_cast<int64_t>(b)) + " (now " + std::to_string(plan.batch_size) + ")";
  else if (b >= static_cast<double>(plan.batch_size))
    hint += "this batch size: the process's other memory (threads, libraries) takes the rest; try a smaller batch";
  else
    hint += "no batch size: its weights alone do not fit; use more stages or more memory";
  return Status(s.code(), s.message() + hint);
}

}  // namespace pt
