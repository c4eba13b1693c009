// The transport interface between pipeline stages: a Link carries a fixed set of values from one
// stage to another, message by message, each message under a key (the pass id). Implementations:
// the in-process Channel (runtime/pipeline/stage.h), MPI point-to-point (runtime/dist/mpi_cluster.cpp);
// a NCCL link for GPU stages slots in behind the same three calls.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "importer/ir.h"

namespace pt {

class Executor;

class Link {
 public:
  explicit Link(std::vector<const Value*> values) : values_(std::move(values)) {}
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  const std::vector<const Value*>& values() const { return values_; }
  // Why the last send or recv returned false when the link was not aborted (a failed copy).
  Status error() const { return error_; }
  // Copies every value out of `from` and sends them under `key`; may wait for room (the link
  // holds a bounded number of messages in flight). False once the link was aborted (or its
  // copies failed: then error() says why).
  // `from` is not changed but where a link trades storages with it (Channel::trade).
  virtual bool send(int64_t key, Executor& from) = 0;
  // Waits for the message `key` and copies it into `to`'s buffers. False once aborted.
  virtual bool recv(int64_t key, Executor& to) = 0;
  // Ends every wait, now and later, of this link (on either end in this process).
  virtual void abort() = 0;
  // The messages recv() waited for and the seconds from their sending to the receiver holding
  // them (copied into its buffers): the hand-off's own cost, without the wait for the sender's
  // pass. Links that do not measure it say {0, 0}.
  struct Handoffs {
    int64_t count = 0;
    double seconds = 0;
    // How they spread: bin b holds times from 2^(b/4) to 2^((b+1)/4) microseconds (bin 0 also
    // below 1 us, the last also above), so a median read from it is within 10 % of the true one.
    static constexpr int kBins = 96;
    std::array<int32_t, kBins> bins{};
    // Copies of a value left out by trading storages instead (Channel::trade), on every message
    // received, whether waited for or not: one per value the sender gave, one per value the
    // receiver took.
    int64_t traded = 0;
    void add(double s);
    Handoffs& operator+=(const Handoffs& o);
    Handoffs& operator-=(const Handoffs& o);
    // The median in microseconds (the middle of its bin, geometrically); 0 without messages.
    double median_us() const;
  };
  virtual Handoffs handoffs() const { return {}; }
  // Makes `from`'s stream wait until the copies of the last send() have read its buffers: call
  // before `from` runs kernels that overwrite the values sent (links that copy asynchronously,
  // on a stream of their own, need it; the others return at once).
  virtual Status fence(const Executor& /*from*/) { return Status::ok(); }

 protected:
  std::vector<const Value*> values_;
  Status error_;
};

inline void Link::Handoffs::add(double s) {
  ++count;
  seconds += s;
  const double us = s * 1e6;
  const int b = us <= 1 ? 0 : static_cast<int>(std::floor(4 * std::log2(us)));
  ++bins[b < 0 ? 0 : b >= kBins ? kBins - 1 : b];
}

inline Link::Handoffs& Link::Handoffs::operator+=(const Handoffs& o) {
  count += o.count;
  seconds += o.seconds;
  traded += o.traded;
  for (int b = 0; b < kBins; ++b) bins[b] += o.bins[b];
  return *this;
}

inline Link::Handoffs& Link::Handoffs::operator-=(const Handoffs& o) {
  count -= o.count;
  seconds -= o.seconds;
  traded -= o.traded;
  for (int b = 0; b < kBins; ++b) bins[b] -= o.bins[b];
  return *this;
}

inline double Link::Handoffs::median_us() const {
  int64_t n = 0;
  for (int32_t c : bins) n += c;
  if (n <= 0) return 0;
  int64_t seen = 0;
  for (int b = 0; b < kBins; ++b) {
    seen += bins[b];
    if (2 * seen >= n) return std::exp2((b + 0.5) / 4);
  }
  return std::exp2((kBins - 0.5) / 4);
}

}  // namespace pt
