// Image folders in torchvision's ImageFolder layout: DIR/<class>/.../<image>.jpg|.jpeg|.png, the
// classes sorted by name and numbered from 0, each class's files in the order of a sorted walk
// (os.walk, followlinks), as torchvision lists them. Only the list of files is in memory: each
// image is read, decoded, cropped, flipped and resized to the model's input when its batch is
// gathered, by a pool of loader threads.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "core/hash.h"
#include "runtime/data/data.h"
#include "runtime/data/image.h"

namespace pt {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The name's lower-cased suffix from its last '.', matched as torchvision matches it (endswith):
// a file named ".png" is an image to it, though std::filesystem gives that name no extension.
std::string suffix(const fs::path& p) {
  const std::string n = p.filename().string();
  const size_t dot = n.rfind('.');
  return dot == std::string::npos ? std::string() : lower(n.substr(dot));
}

bool decodable(const fs::path& p) {
  const std::string e = suffix(p);
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

// What torchvision's ImageFolder would also list, but is not decoded here.
bool other_image(const fs::path& p) {
  const std::string e = suffix(p);
  return e == ".ppm" || e == ".bmp" || e == ".pgm" || e == ".tif" || e == ".tiff" || e == ".webp";
}

// A parallel for over [0, n) on `threads` threads: the caller and threads - 1 workers, started once.
class LoaderPool {
 public:
  explicit LoaderPool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  ~LoaderPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Callers on several threads (a pipeline's stages gather from one set) take turns: one job at
  // a time owns the workers.
  void run(int64_t n, const std::function<void(int64_t)>& body) {
    if (workers_.empty() || n < 2) {
      for (int64_t i = 0; i < n; ++i) body(i);
      return;
    }
    std::lock_guard<std::mutex> turn(run_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    job_ = &body;
    n_ = n;
    next_ = 0;
    busy_ = static_cast<int>(workers_.size());
    ++generation_;
    lock.unlock();
    cv_.notify_all();
    drain(body, n);
    lock.lock();
    done_.wait(lock, [&] { return busy_ == 0; });
    job_ = nullptr;
  }

 private:
  void drain(const std::function<void(int64_t)>& body, int64_t n) {
    for (int64_t i = next_.fetch_add(1); i < n; i = next_.fetch_add(1)) body(i);
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const std::function<void(int64_t)>* body = job_;
      const int64_t n = n_;
      lock.unlock();
      drain(*body, n);
      lock.lock();
      if (--busy_ == 0) done_.notify_one();
    }
  }
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // held by the caller whose job the workers serve
  std::mutex mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

struct Entry {
  std::string path;
  int64_t label;
};

class ImageFolderStream final : public SampleSource {
 public:
  ImageFolderStream(std::vector<Entry> entries, const Dims& sample, const LoadOptions& opts, std::shared_ptr<LoaderStats> stats)
      : entries_(std::move(entries)), crop_(opts.crop), flip_(opts.flip), skip_bad_(opts.skip_bad),
        stats_(std::move(stats)), pool_(std::make_unique<LoaderPool>(std::max(1, opts.loader_threads))) {
    fields_ = {SampleField{DType::kFloat32, sample}, SampleField{DType::kInt64, {}}};
  }
  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }
  const std::vector<SampleField>& fields() const override { return fields_; }
  size_t resident_bytes() const override {
    size_t b = 0;
    for (const Entry& e : entries_) b += sizeof(Entry) + e.path.capacity();
    // Each loader thread holds one decoded image and its file (a 1000 x 1000 RGB JPEG: about 3.5 MB).
    return b + static_cast<size_t>(pool_->threads()) * (4u << 20);
  }

  Status read(int64_t i, const Draw& draw, void* const* dst) const override {
    const int64_t n = size();
    for (int64_t tries = 0; tries < n; ++tries) {
      const int64_t s = (i + tries) % n;  // --on-bad-sample skip: the next image that decodes stands in
      Status st = read_one(s, i, draw, dst);
      if (st.is_ok() || !skip_bad_) return st;
      note_bad(st);
    }
    return invalid_input("no image of the folder decodes");
  }

  Status read_batch(const int64_t* idx, int64_t n, const Draw& draw, void* const* out) const override {
    std::vector<Status> errors(static_cast<size_t>(n));
    pool_->run(n, [&](int64_t k) {
      void* dst[2] = {out[0] ? static_cast<char*>(out[0]) + static_cast<size_t>(k) * fields_[0].bytes() : nullptr,
                      out[1] ? static_cast<char*>(out[1]) + static_cast<size_t>(k) * sizeof(int64_t) : nullptr};
      errors[k] = read(idx[k], draw, dst);
    });
    for (Status& s : errors) RETURN_IF_ERROR(s);
    return Status::ok();
  }

 private:
  // Image s decoded into the fields of sample i (its augmentation drawn for i).
  Status read_one(int64_t s, int64_t i, const Draw& draw, void* const* dst) const {
    const Entry& e = entries_[s];
    if (dst[1]) *static_cast<int64_t*>(dst[1]) = e.label;
    if (!dst[0]) return Status::ok();
    const Dims& d = fields_[0].dims;
    ASSIGN_OR_RETURN(Image im, read_image(e.path, static_cast<int>(d[0])));
    std::mt19937_64 rng(draw.for_sample(i));
    CropBox box{0, 0, im.height, im.width};
    if (draw.augment() && crop_) box = random_resized_crop(im.width, im.height, rng);
    const bool mirror = draw.augment() && flip_ && (rng() >> 63) != 0;
    crop_resize_chw(static_cast<float*>(dst[0]), im, box, static_cast<int>(d[1]), static_cast<int>(d[2]), mirror);
    return Status::ok();
  }
  void note_bad(const Status& st) const {
    if (stats_) stats_->note_bad(st.message());
  }

  std::vector<Entry> entries_;
  std::vector<SampleField> fields_;
  bool crop_, flip_, skip_bad_;
  std::shared_ptr<LoaderStats> stats_;
  std::unique_ptr<LoaderPool> pool_;
};

// Files of one class folder in torchvision's order: sorted(os.walk(dir, followlinks=True)), each
// folder's names sorted.
void walk_class(const fs::path& dir, std::vector<std::string>* images, std::vector<std::string>* others) {
  std::vector<std::pair<std::string, std::vector<std::string>>> folders;  // (root, sorted file names)
  std::vector<fs::path> todo = {dir};
  std::error_code ec;
  while (!todo.empty()) {
    const fs::path root = todo.back();
    todo.pop_back();
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(root, fs::directory_options::follow_directory_symlink, ec)) {
      if (e.is_directory(ec)) todo.push_back(e.path());
      else names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    folders.emplace_back(root.string(), std::move(names));
  }
  std::sort(folders.begin(), folders.end());
  for (const auto& [root, names] : folders)
    for (const std::string& n : names) {
      const fs::path p = fs::path(root) / n;
      if (decodable(p)) images->push_back(p.string());
      else if (other_image(p)) others->push_back(p.string());
    }
}

}  // namespace

bool is_image_folder(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_directory(ec) || decodable(e.path()) || other_image(e.path())) return true;
  return false;
}

Expected<Dataset> load_image_folder(const std::string& dir, const DataSpec& spec, const LoadOptions& opts) {
  std::error_code ec;
  std::vector<std::string> classes;
  int64_t loose = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory(ec)) classes.push_back(e.path().filename().string());
    else if (decodable(e.path()) || other_image(e.path())) ++loose;
  }
  std::sort(classes.begin(), classes.end());
  if (classes.empty())
    return invalid_input(dir + ": " + std::to_string(loose) + " images but no class subfolders (an image folder holds "
                         "one subfolder of images per class, as torchvision's ImageFolder reads it)");
  const Dims& s = spec.sample_dims;
  if (spec.input_dtype != DType::kFloat32 || s.size() != 3 || (s[0] != 1 && s[0] != 3))
    return invalid_input(dir + ": images feed a float input of [1 or 3, H, W] values; the model's input is " + dims_str(s) +
                         " " + dtype_name(spec.input_dtype));
  if (spec.num_classes <= 0 || !spec.label_sample_dims.empty())
    return invalid_input(dir + ": an image folder gives one class label per image; the model's loss wants " +
                         dims_str(spec.label_sample_dims) + " " + dtype_name(spec.label_dtype) + " targets");
  if (static_cast<int64_t>(classes.size()) > spec.num_classes)
    return invalid_input(dir + ": " + std::to_string(classes.size()) + " class folders, but the model's output has " +
                         std::to_string(spec.num_classes) + " classes");
  std::vector<Entry> entries;
  std::vector<std::string> others;
  uint64_t h = kFnv1a64Offset;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> images;
    walk_class(fs::path(dir) / classes[c], &images, &others);
    if (images.empty())
      return invalid_input((fs::path(dir) / classes[c]).string() + ": no JPEG or PNG images (every class folder needs one)");
    for (std::string& p : images) {
      h = fnv1a64(p.substr(dir.size()), h);
      const uintmax_t bytes = fs::file_size(p, ec);
      h = fnv1a64(&bytes, sizeof bytes, h);
      entries.push_back(Entry{std::move(p), static_cast<int64_t>(c)});
    }
  }
  // Every header is read now: a file that is no image is skipped or refused before any work.
  std::vector<std::string> bad;
  std::vector<Entry> good;
  for (Entry& e : entries) {
    auto size = image_size(e.path);
    if (size) {
      good.push_back(std::move(e));
      continue;
    }
    if (!opts.skip_bad) return invalid_input(size.status().message() + " (--on-bad-sample skip leaves such files out)");
    bad.push_back(size.status().message());
  }
  if (good.empty()) return invalid_input(dir + ": none of its " + std::to_string(entries.size()) + " images is readable");
  Dataset d;
  d.source = dir + " (image folder: " + std::to_string(good.size()) + " images in " + std::to_string(classes.size()) +
             " classes" + (opts.crop || opts.flip ? std::string(", augmented: ") + (opts.crop ? "crop" : "") +
                                                     (opts.crop && opts.flip ? "," : "") + (opts.flip ? "flip" : "")
                                                : std::string()) + ")";
  if (!bad.empty())
    d.source += "; skipped " + std::to_string(bad.size()) + " unreadable file" + (bad.size() > 1 ? "s" : "") + ", first: " + bad[0];
  if (!others.empty())
    d.source += "; left out " + std::to_string(others.size()) + " image" + (others.size() > 1 ? "s" : "") +
                " of types not decoded here (JPEG and PNG are), first: " + others[0];
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  d.fingerprint = std::string("images:") + b;
  d.classes = std::move(classes);
  d.stats = std::make_shared<LoaderStats>();
  for (const std::string& m : bad) d.stats->note_bad(m);
  d.stream = std::make_shared<ImageFolderStream>(std::move(good), spec.sample_dims, opts, d.stats);
  return d;
}

}  // namespace pt
