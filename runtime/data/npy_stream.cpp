// .npy folders read from disk as they are gathered (--stream-data, or arrays larger than a
// quarter of memory): each sample is read with pread and converted as the in-memory loader
// converts whole arrays, so that both give the same bits. pread, not mmap: mapped pages count in
// the process's resident set, so an epoch over a mapped 40 GB array would look like 40 GB of
// memory, while read pages stay in the kernel's page cache, which it reclaims.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/hash.h"
#include "runtime/data/npy.h"
#include "runtime/data/stream_file.h"

namespace pt {

namespace fs = std::filesystem;

Expected<std::shared_ptr<StreamFile>> StreamFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return invalid_input(path + ": cannot be opened: " + std::strerror(errno));
  auto f = std::make_shared<StreamFile>();
  f->fd_ = fd;
  f->path_ = path;
  std::error_code ec;
  f->size_ = fs::file_size(path, ec);
  if (ec) return invalid_input(path + ": cannot be read: " + ec.message());
  return f;
}

StreamFile::~StreamFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status StreamFile::read(uint64_t offset, void* dst, size_t bytes) const {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return invalid_input(path_ + ": read failed at byte " + std::to_string(offset) + ": " +
                           (got < 0 ? std::strerror(errno) : "the file is shorter than when it was opened"));
    p += got;
    offset += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return Status::ok();
}

std::string StreamFile::fingerprint(uint64_t from) const {
  // The size and 64 KiB at each of 64 evenly spaced places: a changed or other file shows, and no
  // start reads a whole large file for it.
  uint64_t h = fnv1a64(&size_, sizeof size_);
  constexpr uint64_t kChunk = 64 * 1024, kPlaces = 64;
  std::vector<char> buf(kChunk);
  const uint64_t span = size_ > from ? size_ - from : 0;
  for (uint64_t k = 0; k < kPlaces && span > 0; ++k) {
    const uint64_t at = from + span * k / kPlaces;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - at));
    if (!read(at, buf.data(), n).is_ok()) break;
    h = fnv1a64(buf.data(), n, h);
  }
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

namespace {

struct StreamedArray {
  std::shared_ptr<StreamFile> file;
  NpyHeader header;
  size_t sample_bytes = 0;  // in the file
};

class NpyStream final : public SampleSource {
 public:
  NpyStream(std::vector<StreamedArray> x, HostTensor y, std::vector<SampleField> fields, bool scale_pixels)
      : x_(std::move(x)), y_(std::move(y)), fields_(std::move(fields)), scale_pixels_(scale_pixels) {}
  int64_t size() const override { return y_.dims()[0]; }
  const std::vector<SampleField>& fields() const override { return fields_; }
  size_t resident_bytes() const override { return y_.bytes(); }

  Status read(int64_t i, const Draw&, void* const* dst) const override {
    for (size_t f = 0; f < fields_.size(); ++f) {
      if (!dst[f]) continue;
      if (f == 1) {
        const size_t per = fields_[1].bytes();
        std::memcpy(dst[1], static_cast<const char*>(y_.data()) + static_cast<size_t>(i) * per, per);
        continue;
      }
      const StreamedArray& a = x_[f == 0 ? 0 : f - 1];
      const uint64_t at = a.header.offset + static_cast<uint64_t>(i) * a.sample_bytes;
      if (a.header.dtype == fields_[f].dtype) {  // read straight into the batch
        RETURN_IF_ERROR(a.file->read(at, dst[f], a.sample_bytes));
        continue;
      }
      Dims one = a.header.dims;
      one[0] = 1;
      HostTensor raw(a.header.dtype, one);
      RETURN_IF_ERROR(a.file->read(at, raw.data(), a.sample_bytes));
      const HostTensor c = convert_input(raw, scale_pixels_);
      std::memcpy(dst[f], c.data(), c.bytes());
    }
    return Status::ok();
  }

 private:
  std::vector<StreamedArray> x_;  // the first input, then the further inputs
  HostTensor y_;
  std::vector<SampleField> fields_;
  bool scale_pixels_;
};

}  // namespace

Expected<Dataset> stream_npy_dataset(const std::string& dir, const DataSpec& spec) {
  ASSIGN_OR_RETURN(NpyFolder f, find_npy_files(dir, spec));
  std::vector<StreamedArray> arrays;
  std::vector<SampleField> fields;
  int64_t n = 0;
  for (size_t k = 0; k < f.x.size(); ++k) {
    StreamedArray a;
    ASSIGN_OR_RETURN(a.header, read_npy_header(f.x[k]));
    const Dims& want = k == 0 ? spec.sample_dims : spec.more_inputs[k - 1].sample_dims;
    const DType wt = k == 0 ? spec.input_dtype : spec.more_inputs[k - 1].dtype;
    RETURN_IF_ERROR(check_input_shape(a.header.dims, a.header.dtype, f.x[k], want, wt));
    if (k == 0) n = a.header.dims[0];
    else RETURN_IF_ERROR(check_counts(f, k, n, a.header.dims[0], dir));
    a.sample_bytes = static_cast<size_t>(numel(a.header.dims) / a.header.dims[0]) * dtype_size(a.header.dtype);
    ASSIGN_OR_RETURN(a.file, StreamFile::open(f.x[k]));
    fields.push_back(SampleField{wt, want});
    arrays.push_back(std::move(a));
  }
  // The labels are read whole (a few bytes a sample) and checked as the in-memory loader does.
  ASSIGN_OR_RETURN(HostTensor y, read_npy(f.y));
  RETURN_IF_ERROR(check_labels(&y, f.y, n, f.names[0], spec));
  fields.insert(fields.begin() + 1, SampleField{y.dtype(), spec.label_sample_dims});
  Dataset d;
  d.source = f.source + ", read from disk as gathered";
  d.fingerprint = "npy:";
  for (const StreamedArray& a : arrays) d.fingerprint += a.file->fingerprint(a.header.offset);
  d.fingerprint += std::to_string(fnv1a64(y.data(), y.bytes()));
  d.stream = std::make_shared<NpyStream>(std::move(arrays), std::move(y), std::move(fields), spec.scale_pixels);
  d.stats = std::make_shared<LoaderStats>();
  return d;
}

}  // namespace pt
