// Readers for the image data sets people have on disk: MNIST-style IDX files (plain or gzip) and
// CIFAR-10/100 binary batches. Pixels (uint8) are scaled to [0, 1]; errors name the file and the
// byte or record where the data stops making sense.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/resource.h>
#include <unistd.h>

#include "core/file.h"
#include "runtime/data/data.h"
#include "core/checked_size.h"
#include "runtime/exec/memory.h"

namespace pt {

namespace fs = std::filesystem;

namespace {

// An open IDX file, plain or gzip (zlib reads a plain file as it is).
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {}
  ~GzReader() {
    if (f_) gzclose(f_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  bool is_open() const { return f_ != nullptr; }
  bool is_gzip() const { return gzdirect(f_) == 0; }  // known after the first read
  // Appends up to n more bytes (fewer at the end of the data) to *out.
  Status read(size_t n, std::string* out) {
    while (n > 0) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1 << 20));
      const size_t at = out->size();
      out->resize(at + chunk);
      const int got = gzread(f_, out->data() + at, chunk);
      out->resize(at + static_cast<size_t>(std::max(got, 0)));
      pos_ += static_cast<size_t>(std::max(got, 0));
      if (got < 0 || static_cast<unsigned>(got) < chunk) {
        // The end, or an error: a truncated gzip stream ends without -1 (Z_BUF_ERROR).
        int err = 0;
        const char* m = gzerror(f_, &err);
        if (got < 0 || err < 0)
          return invalid_input(path_ + ": corrupt gzip data after " + std::to_string(pos_) + " bytes (" + (m ? m : "?") + ")");
        break;
      }
      n -= chunk;
    }
    return Status::ok();
  }

 private:
  std::string path_;
  gzFile f_;
  size_t pos_ = 0;  // bytes read (inflated)
};

uint32_t be32(const std::string& b, size_t off) {
  auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(b[off + i])); };
  return (u(0) << 24) | (u(1) << 16) | (u(2) << 8) | u(3);
}

// IDX: magic 0x0000 0x08 (ubyte) rank, then rank big-endian uint32 dims, then the data. The header
// is read first and the data after it only up to what the header promises: a gzip file is never
// inflated past that (a few kilobytes can inflate to gigabytes), nor past the memory available,
// and a promise its compressed size cannot hold is refused before the buffer is reserved (a
// 1.2 KiB file promising 6.9 GB made it reserve 6.9 GB: fuzz_data's -malloc_limit_mb).
Expected<std::pair<Dims, std::string>> read_idx(const std::string& path) {
  RETURN_IF_ERROR(check_regular_file(path));
  GzReader in(path);
  if (!in.is_open()) return invalid_input(path + ": cannot be opened");
  std::string b;
  RETURN_IF_ERROR(in.read(4, &b));
  if (b.size() < 4 || b[0] != 0 || b[1] != 0)
    return invalid_input(path + ": not an IDX file (bad magic at byte 0)");
  if (static_cast<unsigned char>(b[2]) != 0x08)
    return invalid_input(path + ": IDX element type 0x" + std::to_string(static_cast<unsigned char>(b[2])) +
                         " at byte 2; only unsigned bytes (0x08) are supported");
  constexpr int64_t kElementBytes = 1;  // 0x08
  const int rank = static_cast<unsigned char>(b[3]);
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  RETURN_IF_ERROR(in.read(header - 4, &b));
  if (b.size() < header) return invalid_input(path + ": truncated IDX header");
  Dims dims;
  for (int i = 0; i < rank; ++i) dims.push_back(be32(b, 4 + 4 * i));
  int64_t count = 0, bytes = 0;
  if (!checked_numel(dims, &count) || __builtin_mul_overflow(count, kElementBytes, &bytes))
    return invalid_input(path + ": the IDX header's dimensions " + dims_str(dims) + " multiply past 2^63 elements");
  const size_t need = static_cast<size_t>(bytes);
  const bool gz = in.is_gzip();
  auto truncated = [&](size_t file_end) {
    const int64_t per = dims.empty() ? 1 : std::max<int64_t>(1, count / std::max<int64_t>(1, dims[0]));
    return invalid_input(path + ": truncated: the header promises " + dims_str(dims) + " (" + std::to_string(need) +
                         " bytes of data), the " + (gz ? "inflated data ends" : "file ends") + " at byte " +
                         std::to_string(file_end) + ", in record " + std::to_string((file_end - header) / per));
  };
  if (!gz) {  // a plain file's size says at once whether it holds the data
    std::error_code ec;
    const size_t size = static_cast<size_t>(fs::file_size(path, ec));
    if (ec) return invalid_input(path + ": cannot be read (" + ec.message() + ")");
    if (size - header < need) return truncated(size);
    if (size - header > need)
      return invalid_input(path + ": " + std::to_string(size - header - need) + " bytes after the " +
                           std::to_string(need) + " bytes of data its header promises (" + dims_str(dims) + ")");
  }
  const size_t avail = memory_available_bytes();
  if (need > avail)
    return invalid_input(path + ": the IDX header's dimensions " + dims_str(dims) + " promise " + std::to_string(need) +
                         " bytes of data, more than the " + std::to_string(avail) + " bytes of memory available" +
                         (gz ? " to inflate them into" : ""));
  if (gz) {  // deflate inflates at most 1032:1, so the file's size bounds what it can hold
    std::error_code ec;
    const size_t packed = static_cast<size_t>(fs::file_size(path, ec));
    if (ec) return invalid_input(path + ": cannot be read (" + ec.message() + ")");
    constexpr size_t kMaxDeflateRatio = 1032;
    if (packed <= (SIZE_MAX - 65536) / kMaxDeflateRatio && need > packed * kMaxDeflateRatio + 65536)
      return invalid_input(path + ": truncated: the IDX header's dimensions " + dims_str(dims) + " promise " +
                           std::to_string(need) + " bytes of data, more than " + std::to_string(packed) +
                           " bytes of gzip data can inflate to (at most 1032 times as many)");
  }
  std::string data;
  data.reserve(need);
  RETURN_IF_ERROR(in.read(need, &data));
  if (data.size() < need) return truncated(header + data.size());
  std::string more;
  RETURN_IF_ERROR(in.read(1, &more));
  if (!more.empty()) {
    std::error_code ec;
    const auto packed = fs::file_size(path, ec);
    return invalid_input(path + ": the gzip data inflates past the " + std::to_string(header + need) +
                         " bytes its IDX header promises (" + dims_str(dims) + " + a " + std::to_string(header) +
                         "-byte header) from " + (ec ? std::string("?") : std::to_string(packed)) +
                         " compressed bytes; not inflating further");
  }
  return std::make_pair(dims, std::move(data));
}

HostTensor pixels(const std::string& bytes, Dims dims, bool scale) {
  HostTensor t(DType::kFloat32, std::move(dims));
  float* p = t.as<float>();
  const float by = scale ? 1.0f / 255.0f : 1.0f;
  for (int64_t i = 0; i < t.size(); ++i) p[i] = static_cast<unsigned char>(bytes[i]) * by;
  return t;
}

std::string find_with(const fs::path& dir_or_prefix, const std::vector<std::string>& needles) {
  std::error_code ec;
  fs::path dir = fs::is_directory(dir_or_prefix, ec) ? dir_or_prefix : dir_or_prefix.parent_path();
  const std::string prefix = fs::is_directory(dir_or_prefix, ec) ? "" : dir_or_prefix.filename().string();
  if (dir.empty()) dir = ".";
  std::vector<std::string> hits;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) != 0) continue;
    bool all = true;
    for (const auto& s : needles) all &= n.find(s) != std::string::npos;
    if (all) hits.push_back(e.path().string());
  }
  std::sort(hits.begin(), hits.end());
  return hits.size() == 1 ? hits[0] : hits.empty() ? "" : "ambiguous:" + hits[0] + " and " + hits[1];
}

Status check_against_spec(Dataset* d, const DataSpec& spec, const std::string& xname, const std::string& yname) {
  const int64_t n = d->x.dims()[0];
  Dims sample(d->x.dims().begin() + 1, d->x.dims().end());
  if (numel(sample) != numel(spec.sample_dims))
    return invalid_input(xname + ": samples are " + dims_str(sample) + " (" + std::to_string(numel(sample)) +
                         " values), the model input wants " + dims_str(spec.sample_dims) + " (" +
                         std::to_string(numel(spec.sample_dims)) + ")");
  Dims nd = spec.sample_dims;
  nd.insert(nd.begin(), n);
  d->x.reshape(nd);
  if (spec.input_dtype != DType::kFloat32)
    return invalid_input(xname + ": image data is float32, the model input wants " + dtype_name(spec.input_dtype));
  if (spec.num_classes <= 0) return invalid_input(yname + ": class labels, but the loss wants float targets (use --loss cross-entropy)");
  const int64_t* y = d->y.as<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    if (y[i] < 0 || y[i] >= spec.num_classes)
      return invalid_input(yname + ": label " + std::to_string(y[i]) + " of record " + std::to_string(i) +
                           " is outside [0, " + std::to_string(spec.num_classes) + ")");
  return Status::ok();
}

Expected<Dataset> load_idx(const std::string& images, const std::string& labels, const DataSpec& spec) {
  ASSIGN_OR_RETURN(auto img, read_idx(images));
  ASSIGN_OR_RETURN(auto lab, read_idx(labels));
  if (img.first.empty()) return invalid_input(images + ": an IDX scalar, expected [N, ...] images");
  if (lab.first.size() != 1) return invalid_input(labels + ": labels must be a 1-D IDX file, it is " + dims_str(lab.first));
  if (lab.first[0] != img.first[0])
    return invalid_input(labels + ": " + std::to_string(lab.first[0]) + " labels for " + std::to_string(img.first[0]) +
                         " images in " + images);
  Dataset d;
  d.source = images + " + " + labels + " (IDX)";
  d.x = pixels(img.second, img.first, spec.scale_pixels);
  d.y = HostTensor(DType::kInt64, {lab.first[0]});
  for (int64_t i = 0; i < lab.first[0]; ++i) d.y.as<int64_t>()[i] = static_cast<unsigned char>(lab.second[i]);
  RETURN_IF_ERROR(check_against_spec(&d, spec, images, labels));
  return d;
}

// CIFAR-10: records of <label byte><3072 pixel bytes>; CIFAR-100: <coarse><fine><3072> (fine used).
Expected<Dataset> load_cifar(const std::vector<std::string>& files, const DataSpec& spec) {
  std::string all;
  int label_bytes = 0;
  for (const auto& f : files) {
    RETURN_IF_ERROR(check_regular_file(f));
    std::ifstream in(f, std::ios::binary);
    if (!in) return invalid_input(f + ": cannot be opened");
    std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int lb = b.size() % 3073 == 0 ? 1 : b.size() % 3074 == 0 ? 2 : 0;
    if (lb == 0)
      return invalid_input(f + ": " + std::to_string(b.size()) + " bytes is not a whole number of CIFAR records (3073 bytes for "
                           "CIFAR-10, 3074 for CIFAR-100): truncated in record " + std::to_string(b.size() / 3073));
    if (label_bytes && lb != label_bytes) return invalid_input(f + ": mixes CIFAR-10 and CIFAR-100 records with the other files");
    label_bytes = lb;
    all += b;
  }
  const size_t rec = 3072 + label_bytes;
  const int64_t n = static_cast<int64_t>(all.size() / rec);
  Dataset d;
  d.source = std::string(label_bytes == 1 ? "CIFAR-10" : "CIFAR-100") + " binary (" + std::to_string(files.size()) + " file" +
             (files.size() > 1 ? "s" : "") + ")";
  d.x = HostTensor(DType::kFloat32, {n, 3, 32, 32});
  d.y = HostTensor(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) {
    const char* r = all.data() + i * rec;
    d.y.as<int64_t>()[i] = static_cast<unsigned char>(r[label_bytes - 1]);
    float* px = d.x.as<float>() + i * 3072;
    const float by = spec.scale_pixels ? 1.0f / 255.0f : 1.0f;
    for (int k = 0; k < 3072; ++k) px[k] = static_cast<unsigned char>(r[label_bytes + k]) * by;
  }
  RETURN_IF_ERROR(check_against_spec(&d, spec, files[0], files[0]));
  return d;
}

}  // namespace

namespace {

// A .npy folder in memory, or read from disk as it is gathered (LoadOptions::stream).
Expected<Dataset> load_npy_folder(const std::string& path, const DataSpec& spec, const LoadOptions& opts) {
  bool stream = opts.stream == LoadOptions::Stream::kAlways;
  if (opts.stream == LoadOptions::Stream::kAuto) {
    // In memory up to a quarter of the machine's memory (or of the address space a `ulimit -v`
    // leaves).
    uintmax_t bytes = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".npy") bytes += e.file_size(ec);
    uintmax_t memory = static_cast<uintmax_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uintmax_t>(sysconf(_SC_PAGE_SIZE));
    struct rlimit as {};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) memory = std::min<uintmax_t>(memory, as.rlim_cur);
    stream = bytes > memory / 4;
  }
  return stream ? stream_npy_dataset(path, spec) : load_npy_dataset(path, spec);
}

Expected<Dataset> load_any(const std::string& path, const DataSpec& spec, const LoadOptions& opts) {
  std::error_code ec;
  const fs::path p(path);
  if (is_token_file(path, spec, opts)) return load_token_file(path, spec, opts);
  if (!opts.tokenizer.empty()) return invalid_input(path + ": --tokenizer reads a text file, and this is not a file");
  if (fs::is_directory(p, ec) && fs::exists(p / "x.npy")) return load_npy_folder(path, spec, opts);
  // IDX and CIFAR hold one input: a model with several reads .npy folders only.
  if (!spec.more_inputs.empty()) return load_npy_folder(path, spec, opts);
  if (is_image_folder(path)) return load_image_folder(path, spec, opts);
  const std::string images = find_with(p, {"images", "idx3"});
  const std::string labels = find_with(p, {"labels", "idx1"});
  if (images.rfind("ambiguous:", 0) == 0 || labels.rfind("ambiguous:", 0) == 0)
    return invalid_input(path + ": several IDX files match (" + (images.rfind("ambiguous:", 0) == 0 ? images : labels).substr(10) +
                         "); give a prefix such as " + (p / "train").string());
  if (!images.empty() && !labels.empty()) return load_idx(images, labels, spec);
  std::vector<std::string> cifar;
  if (fs::is_regular_file(p, ec) && p.extension() == ".bin") cifar.push_back(path);
  else if (fs::is_directory(p, ec)) {
    for (const auto& e : fs::directory_iterator(p, ec)) {
      const std::string n = e.path().filename().string();
      if ((n.rfind("data_batch_", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".bin") || n == "train.bin")
        cifar.push_back(e.path().string());
    }
    std::sort(cifar.begin(), cifar.end());
  }
  if (!cifar.empty()) return load_cifar(cifar, spec);
  if (fs::is_directory(p, ec)) return load_npy_dataset(path, spec);  // its error names the missing x.npy
  return invalid_input(path + ": not found, or not a known format (a folder with x.npy + y.npy, a folder of class "
                       "subfolders of images, MNIST-style IDX files, CIFAR-10/100 .bin batches, a token file or text, "
                       "or 'synthetic')");
}

}  // namespace

Expected<Dataset> load_dataset(const std::string& path, const DataSpec& spec, const LoadOptions& opts) {
  try {
    ASSIGN_OR_RETURN(Dataset d, load_any(path, spec, opts));
    d.seed = opts.seed;
    return d;
  } catch (const std::bad_alloc&) {
    // Read whole, the set does not fit (a `ulimit -v`, or the machine's memory).
    uintmax_t bytes = 0;
    std::error_code ec;
    if (fs::is_directory(path, ec))
      for (const auto& e : fs::directory_iterator(path, ec)) bytes += e.is_regular_file(ec) ? e.file_size(ec) : 0;
    else bytes = fs::file_size(path, ec);
    return invalid_input(path + ": " + std::to_string(bytes / 1000000) + " MB of data does not fit in memory" +
                         (fs::exists(fs::path(path) / "x.npy") || !spec.more_inputs.empty()
                              ? "; --stream-data always reads its samples from disk as they are gathered"
                              : ""));
  }
}

}  // namespace pt
