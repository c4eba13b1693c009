// A background thread that gathers a training loop's batches ahead of it (the data set is in
// memory; gathering a shuffled batch is scattered reads, done while the stage computes). Batches
// are produced in key order into a ring of `depth` buffers allocated once; take() waits for the
// batch of a key, copies it into the stage's input buffers and frees its slot.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace pt {

class BatchPrefetcher {
 public:
  // fill(key, x, y) writes the batch of `key` into x and y (either may be null when the consumer
  // does not read it); it runs on the prefetch thread, for keys first, first+1, ..., end-1.
  using Fill = std::function<void(int64_t key, HostTensor* x, HostTensor* y)>;
  BatchPrefetcher(const HostTensor* x_like, const HostTensor* y_like, int64_t first, int64_t end, int depth, Fill fill);
  ~BatchPrefetcher();  // stops the thread (a batch being gathered is finished first)
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Copies the batch of `key` (keys are taken in increasing order) into x / y.
  void take(int64_t key, HostTensor* x, HostTensor* y);

 private:
  static constexpr int64_t kFree = -1;
  struct Slot {
    int64_t key = kFree;
    HostTensor x, y;
  };
  void produce();

  std::vector<Slot> slots_;
  int64_t first_, end_;
  Fill fill_;
  bool has_x_, has_y_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pt
