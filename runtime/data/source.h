// Data sets read sample by sample (image folders, token files, .npy arrays larger than memory):
// only an index is in memory, and each batch is read, decoded and augmented as it is gathered.
// The in-memory sets (Dataset::x, y, more) need none of this.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace pt {

// One field of a sample: the first input, the label, or a further input, without the batch
// dimension.
struct SampleField {
  DType dtype = DType::kUndefined;
  Dims dims;
  size_t bytes() const { return static_cast<size_t>(numel(dims)) * dtype_size(dtype); }
};

// What a read may draw: augmentation is random per (seed, epoch, sample), so that a run and its
// resume, and any number of loader threads, read the same pixels.
struct Draw {
  uint64_t seed = 0;
  int64_t epoch = -1;  // < 0: evaluation (no augmentation)
  bool augment() const { return epoch >= 0; }
  // The seed of one sample's augmentation.
  uint64_t for_sample(int64_t sample) const;
};

// How a stream spent its time (the progress line's loader rate, the warning when stages wait).
struct LoaderStats {
  std::atomic<int64_t> samples{0};   // read
  std::atomic<int64_t> read_ns{0};   // wall time spent reading batches (all loader threads together count once)
  std::atomic<int64_t> waited_ns{0}; // time consumers waited for a batch that was not ready
  std::atomic<int64_t> bad{0};       // samples skipped as unreadable (--on-bad-sample skip)
  void note_bad(const std::string& why) {
    ++bad;
    std::lock_guard<std::mutex> lock(mu);
    if (first_bad.empty()) first_bad = why;
  }
  std::string first_bad_message() {
    std::lock_guard<std::mutex> lock(mu);
    return first_bad;
  }

 private:
  std::mutex mu;
  std::string first_bad;
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  // fields()[0]: the first input, [1]: the label, [2 + k]: further input k.
  virtual const std::vector<SampleField>& fields() const = 0;
  // Writes sample `i`'s fields into dst[f] (dst.size() == fields().size(); null: not wanted).
  // Called from several threads at once.
  virtual Status read(int64_t i, const Draw& draw, void* const* dst) const = 0;
  // Reads samples idx[0..n) into the rows of out[f] (null: not wanted), in parallel where reading
  // is expensive (decoding images); the default reads them one by one.
  virtual Status read_batch(const int64_t* idx, int64_t n, const Draw& draw, void* const* out) const;
  // Bytes the stream keeps in memory (its index, decode buffers), for the plan's memory line.
  virtual size_t resident_bytes() const { return 0; }
};

// A sample's input normalised in place: x = (x - mean[c]) * (1 / std[c]) with the same float
// arithmetic as normalize_dataset, so that a streamed set equals the in-memory one bit for bit.
// `channels` is the first sample dimension of an image-like input ([C, H, W], [C, L]), else 1.
void normalize_sample(float* x, int64_t elements, int64_t channels, const std::vector<float>& mean,
                      const std::vector<float>& std);

// Streams over streams: a subset (the validation split), and the first float input normalised.
std::shared_ptr<const SampleSource> subset_source(std::shared_ptr<const SampleSource> base, std::vector<int64_t> indices);
std::shared_ptr<const SampleSource> normalized_source(std::shared_ptr<const SampleSource> base, int field,
                                                      std::vector<float> mean, std::vector<float> std);

}  // namespace pt
