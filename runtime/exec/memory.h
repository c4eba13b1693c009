// Memory as the process and the executors see it: the process's resident set (current and peak,
// from /proc/self/status), the bytes an executor allocated, and the clean out-of-memory error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "core/status.h"
#include "importer/ir.h"
#include "partitioner/plan.h"

namespace pt {

// Resident set size of this process now / its peak since start (VmRSS / VmHWM), in bytes; 0 where
// /proc is not available.
size_t process_rss_bytes();
size_t process_peak_rss_bytes();

// Bytes this process may still allocate: the least of MemAvailable (/proc/meminfo), what its
// cgroup (v2) allows beyond what it charges now, and under an address-space limit (ulimit -v) the
// limit minus the address space in use (VmSize). SIZE_MAX when none of them is known. Readers
// check a size read from a file against it before they allocate it (a gzip file can inflate to
// any size).
size_t memory_available_bytes();

// Fixes glibc's mmap threshold at 1 MB (unless MALLOC_MMAP_THRESHOLD_ is set): blocks from 1 MB up
// are mapped and go back to the system when freed. Left dynamic, glibc raises the threshold to the
// size of every mapped block freed (up to 32 MB): once import has freed the model's large tensors,
// the executors' buffers come from the heap, whose freed blocks stay resident (ResNet-18 on one CPU
// stage: 252 -> 168 MB process peak with the weights adopted by the executor). Call it first in main.
void configure_allocator();

// Drops the graph's initial values (Value::data) of parameters and optimizer state once every
// executor that trains them holds its own copy (CPU executors copy them at creation), so that the
// weights are not resident twice for the whole run. Values named in `keep` stay (parameters that
// reach no loss: the trainers read their data back). Returns the bytes released. Call it only
// when no executor that reads these values is created later.
size_t release_initial_values(Graph& g, const std::set<std::string>& keep);

// Drops the initial values of optimizer state that is all zeros (momentum, Adam moments: a CPU
// executor gives a value without data zero-filled storage), before the executors are created.
size_t release_zero_state(Graph& g);

// "out of memory allocating WHAT (N MB)": the message of every allocation failure of an executor.
std::string out_of_memory_message(const std::string& what, size_t bytes);
bool is_out_of_memory(const Status& s);

// When `s` is an allocation failure, the same error with what the plan's memory model says would
// fit: the batch size whose stages fit in the memory this process may use (RLIMIT_AS when set,
// else MemAvailable plus what the process holds now) beside `other_bytes` (baseline and data);
// any other status unchanged.
Status with_batch_hint(const Status& s, const Plan& plan, size_t other_bytes);

}  // namespace pt
