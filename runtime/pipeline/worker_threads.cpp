// Persistent worker threads (runtime/pipeline/worker_threads.h).
#include "runtime/pipeline/worker_threads.h"

#include "core/status.h"

namespace pt {

WorkerThreads::~WorkerThreads() {
  wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerThreads::start(std::vector<std::function<void()>> jobs) {
  const size_t n = jobs.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    PT_CHECK(running_ == 0) << "a round of worker jobs started before the last one ended";
    jobs_ = std::move(jobs);
    running_ = n;
    ++round_;
  }
  while (threads_.size() < n) {
    const size_t i = threads_.size();
    threads_.emplace_back([this, i] { work(i); });
  }
  cv_.notify_all();
}

void WorkerThreads::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return running_ == 0; });
  jobs_.clear();
}

void WorkerThreads::work(size_t i) {
  int64_t done = 0;  // the last round this worker has seen
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || round_ != done; });
    if (quit_) return;
    done = round_;
    if (i >= jobs_.size()) continue;
    std::function<void()> job = std::move(jobs_[i]);
    lock.unlock();
    job();
    job = nullptr;  // what it captured is released before the round ends
    lock.lock();
    if (--running_ == 0) cv_.notify_all();
  }
}

}  // namespace pt
