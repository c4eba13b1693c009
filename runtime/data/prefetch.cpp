#include "runtime/data/prefetch.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace pt {

BatchPrefetcher::BatchPrefetcher(const HostTensor* x_like, const HostTensor* y_like, int64_t first, int64_t end,
                                 int depth, Fill fill, LoaderStats* stats)
    : first_(first), end_(end), fill_(std::move(fill)), has_x_(x_like != nullptr), has_y_(y_like != nullptr),
      stats_(stats) {
  slots_.resize(std::max(1, depth));
  for (Slot& s : slots_) {
    if (x_like) s.x = HostTensor(x_like->dtype(), x_like->dims());
    if (y_like) s.y = HostTensor(y_like->dtype(), y_like->dims());
  }
  const int64_t bytes = (x_like ? x_like->bytes() : 0) + (y_like ? y_like->bytes() : 0);
  if (bytes <= kInlineBytes) {
    slots_.resize(1);
    next_ = first_;
    return;
  }
  thread_ = std::thread([this] { produce(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchPrefetcher::produce() {
  const int64_t depth = static_cast<int64_t>(slots_.size());
  for (int64_t key = first_; key < end_; ++key) {
    Slot& s = slots_[(key - first_) % depth];
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || s.key == kFree; });
      if (stop_) return;
    }
    Status st = fill_(key, has_x_ ? &s.x : nullptr, has_y_ ? &s.y : nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      s.status = std::move(st);
      s.key = key;
    }
    cv_.notify_all();
  }
}

Status BatchPrefetcher::take(int64_t key, HostTensor* x, HostTensor* y) {
  PT_CHECK(key >= first_ && key < end_) << "batch " << key << " is outside the prefetched range [" << first_ << ", "
                                        << end_ << ")";
  if (!thread_.joinable()) {
    // Gathered here, in key order as the thread would (fill may draw shuffles as it goes).
    PT_CHECK(key >= next_) << "batch " << key << " was taken after batch " << next_ - 1;
    Slot& s = slots_[0];
    const auto t0 = std::chrono::steady_clock::now();
    for (; next_ <= key; ++next_) RETURN_IF_ERROR(fill_(next_, has_x_ ? &s.x : nullptr, has_y_ ? &s.y : nullptr));
    if (stats_)  // gathered on the consumer's thread: all of it is time the consumer waited
      stats_->waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    if (x && has_x_) std::memcpy(x->data(), s.x.data(), s.x.bytes());
    if (y && has_y_) std::memcpy(y->data(), s.y.data(), s.y.bytes());
    return Status::ok();
  }
  Slot& s = slots_[(key - first_) % static_cast<int64_t>(slots_.size())];
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (s.key != key) {
      const auto t0 = std::chrono::steady_clock::now();
      cv_.wait(lock, [&] { return s.key == key; });
      if (stats_)
        stats_->waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  Status st = std::move(s.status);
  if (x && has_x_) std::memcpy(x->data(), s.x.data(), s.x.bytes());
  if (y && has_y_) std::memcpy(y->data(), s.y.data(), s.y.bytes());
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.key = kFree;
    s.status = Status::ok();
  }
  cv_.notify_all();
  return st;
}

}  // namespace pt
