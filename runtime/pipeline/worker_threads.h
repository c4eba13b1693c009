// Threads that live as long as their owner and run one job each per round: the pipeline's stage
// threads, kept from one segment of a run to the next (a run drains at every checkpoint) instead
// of being started anew for each segment.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pt {

class WorkerThreads {
 public:
  WorkerThreads() = default;
  ~WorkerThreads();  // waits for the round in progress, then ends the threads
  WorkerThreads(const WorkerThreads&) = delete;
  WorkerThreads& operator=(const WorkerThreads&) = delete;

  // Starts a round: jobs[i] runs on worker thread i (threads are started on first need); returns
  // at once. The previous round must have been waited for.
  void start(std::vector<std::function<void()>> jobs);
  // Waits until every job of the round has returned (at once when none is running).
  void wait();

 private:
  void work(size_t i);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  int64_t round_ = 0;   // rounds started
  size_t running_ = 0;  // jobs of the round not yet returned
  bool quit_ = false;
};

}  // namespace pt
