// WorkerThreads (runtime/pipeline/worker_threads.h): each round runs every job once, job i always on the
// same thread, wait() returns only when the round's jobs have, and rounds may vary in size.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/pipeline/worker_threads.h"

namespace pt {
namespace {

TEST(WorkerThreads, EveryJobOncePerRoundOnItsOwnThread) {
  WorkerThreads w;
  std::mutex mu;
  std::vector<std::vector<std::thread::id>> ids(4);  // [job] -> the thread of each round it ran in
  std::atomic<int> ran{0};
  const std::vector<int> sizes = {3, 3, 1, 4, 2, 4};
  for (size_t round = 0; round < sizes.size(); ++round) {
    std::vector<std::function<void()>> jobs;
    for (int i = 0; i < sizes[round]; ++i)
      jobs.push_back([&, i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? 20 : 1));  // wait() must wait for it
        std::lock_guard<std::mutex> lock(mu);
        ids[i].push_back(std::this_thread::get_id());
        ++ran;
      });
    w.start(std::move(jobs));
    w.wait();
    int expected = 0;
    for (size_t r = 0; r <= round; ++r) expected += sizes[r];
    EXPECT_EQ(ran.load(), expected) << "round " << round;
  }
  const std::vector<size_t> runs = {6, 5, 4, 2};  // how many rounds had a job i
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(ids[i].size(), runs[i]) << "job " << i;
    for (const std::thread::id& t : ids[i]) EXPECT_EQ(t, ids[i][0]) << "job " << i << " changed threads";
    EXPECT_NE(ids[i][0], std::this_thread::get_id());
    for (size_t j = 0; j < i; ++j) EXPECT_NE(ids[i][0], ids[j][0]) << "jobs " << j << " and " << i << " share a thread";
  }
}

TEST(WorkerThreads, WaitWithoutARoundAndEndWhileIdle) {
  std::atomic<bool> done{false};  // outlives the workers (ASan: a job must not outlive what it uses)
  {
    WorkerThreads w;
    w.wait();  // nothing started: returns at once
    w.start({[&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = true;
    }});
    // Destroyed without wait(): the destructor waits for the round, then ends the thread.
  }
  EXPECT_TRUE(done.load());
}

}  // namespace
}  // namespace pt
