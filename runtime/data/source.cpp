// Streams: the default batch read, augmentation seeds, and the streams over streams (a subset, a
// normalised input).
#include "runtime/data/source.h"

#include <cstring>
#include <vector>

namespace pt {

uint64_t Draw::for_sample(int64_t sample) const {
  // splitmix64 over (seed, epoch, sample): independent streams per sample and epoch.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  return mix(mix(mix(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(sample));
}

Status SampleSource::read_batch(const int64_t* idx, int64_t n, const Draw& draw, void* const* out) const {
  const std::vector<SampleField>& f = fields();
  std::vector<void*> dst(f.size());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < f.size(); ++k)
      dst[k] = out[k] ? static_cast<char*>(out[k]) + static_cast<size_t>(i) * f[k].bytes() : nullptr;
    RETURN_IF_ERROR(read(idx[i], draw, dst.data()));
  }
  return Status::ok();
}

void normalize_sample(float* x, int64_t elements, int64_t channels, const std::vector<float>& mean,
                      const std::vector<float>& std) {
  const int64_t per_channel = elements / channels;
  for (int64_t c = 0; c < channels; ++c) {
    const float m = mean.empty() ? 0.0f : mean[mean.size() == 1 ? 0 : c];
    const float inv = 1.0f / (std.empty() ? 1.0f : std[std.size() == 1 ? 0 : c]);
    float* p = x + c * per_channel;
    for (int64_t k = 0; k < per_channel; ++k) p[k] = (p[k] - m) * inv;
  }
}

namespace {

class SubsetSource final : public SampleSource {
 public:
  SubsetSource(std::shared_ptr<const SampleSource> base, std::vector<int64_t> idx)
      : base_(std::move(base)), idx_(std::move(idx)) {}
  int64_t size() const override { return static_cast<int64_t>(idx_.size()); }
  const std::vector<SampleField>& fields() const override { return base_->fields(); }
  Status read(int64_t i, const Draw& draw, void* const* dst) const override { return base_->read(idx_.at(i), draw, dst); }
  Status read_batch(const int64_t* idx, int64_t n, const Draw& draw, void* const* out) const override {
    std::vector<int64_t> mapped(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) mapped[i] = idx_.at(idx[i]);
    return base_->read_batch(mapped.data(), n, draw, out);
  }
  size_t resident_bytes() const override { return base_->resident_bytes() + idx_.size() * sizeof(int64_t); }

 private:
  std::shared_ptr<const SampleSource> base_;
  std::vector<int64_t> idx_;
};

class NormalizedSource final : public SampleSource {
 public:
  NormalizedSource(std::shared_ptr<const SampleSource> base, int field, std::vector<float> mean, std::vector<float> std)
      : base_(std::move(base)), field_(field), mean_(std::move(mean)), std_(std::move(std)) {
    const Dims& d = base_->fields().at(field_).dims;
    channels_ = d.size() >= 2 ? d[0] : 1;  // [C, ...]; flat samples are one channel
  }
  int64_t size() const override { return base_->size(); }
  const std::vector<SampleField>& fields() const override { return base_->fields(); }
  Status read(int64_t i, const Draw& draw, void* const* dst) const override {
    RETURN_IF_ERROR(base_->read(i, draw, dst));
    if (dst[field_]) normalize(static_cast<float*>(dst[field_]), 1);
    return Status::ok();
  }
  Status read_batch(const int64_t* idx, int64_t n, const Draw& draw, void* const* out) const override {
    RETURN_IF_ERROR(base_->read_batch(idx, n, draw, out));
    if (out[field_]) normalize(static_cast<float*>(out[field_]), n);
    return Status::ok();
  }
  size_t resident_bytes() const override { return base_->resident_bytes(); }

 private:
  void normalize(float* x, int64_t n) const {
    const int64_t per = numel(base_->fields()[field_].dims);
    for (int64_t i = 0; i < n; ++i) normalize_sample(x + i * per, per, channels_, mean_, std_);
  }
  std::shared_ptr<const SampleSource> base_;
  int field_;
  int64_t channels_ = 1;
  std::vector<float> mean_, std_;
};

}  // namespace

std::shared_ptr<const SampleSource> subset_source(std::shared_ptr<const SampleSource> base, std::vector<int64_t> indices) {
  return std::make_shared<SubsetSource>(std::move(base), std::move(indices));
}

std::shared_ptr<const SampleSource> normalized_source(std::shared_ptr<const SampleSource> base, int field,
                                                      std::vector<float> mean, std::vector<float> std) {
  return std::make_shared<NormalizedSource>(std::move(base), field, std::move(mean), std::move(std));
}

}  // namespace pt
