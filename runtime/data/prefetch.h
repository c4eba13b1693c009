// A background thread that gathers a training loop's batches ahead of it (the data set is in
// memory; gathering a shuffled batch is scattered reads, done while the stage computes). Batches
// are produced in key order into a ring of `depth` buffers allocated once; take() waits for the
// batch of a key, copies it into the stage's input buffers and frees its slot. A small batch
// (kInlineBytes or less) is gathered by take() itself, with no thread: handing it over between
// threads cost more than gathering it (50-100 us a step on a loaded 2-core machine, where the
// prefetch thread waits to be scheduled; a batch of 16 KiB gathers in about a microsecond).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/data/source.h"

namespace pt {

class BatchPrefetcher {
 public:
  // fill(key, x, y) writes the batch of `key` into x and y (either may be null when the consumer
  // does not read it); it runs on the prefetch thread, for keys first, first+1, ..., end-1. Its
  // error (a stream's sample that does not read) is take()'s. `stats` (may be null) counts the
  // time take() waits for a batch that is not ready.
  using Fill = std::function<Status(int64_t key, HostTensor* x, HostTensor* y)>;
  BatchPrefetcher(const HostTensor* x_like, const HostTensor* y_like, int64_t first, int64_t end, int depth, Fill fill,
                  LoaderStats* stats = nullptr);
  ~BatchPrefetcher();  // stops the thread (a batch being gathered is finished first)
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Copies the batch of `key` (keys are taken in increasing order) into x / y.
  Status take(int64_t key, HostTensor* x, HostTensor* y);

  static constexpr int64_t kInlineBytes = 64 * 1024;
  bool threaded() const { return thread_.joinable(); }

 private:
  static constexpr int64_t kFree = -1;
  struct Slot {
    int64_t key = kFree;
    HostTensor x, y;
    Status status;
  };
  void produce();

  std::vector<Slot> slots_;
  int64_t first_, end_;
  Fill fill_;
  bool has_x_, has_y_;
  LoaderStats* stats_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t next_ = 0;  // without a thread: the next key to gather
  std::thread thread_;
};

}  // namespace pt
