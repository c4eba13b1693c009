// Data sets read as they are gathered (runtime/data/source.h), against independent references: an
// image folder against torchvision's ImageFolder, ToTensor and torch's antialiased resize
// (tests/runtime/data_stream_reference.py); augmentation as a function of (seed, epoch, sample)
// only; streamed .npy folders bit for bit against the in-memory loader; token files and text
// against the slices they promise; and the refusals, each naming the path and the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "runtime/data/data.h"
#include "tests/python_interpreter.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace pt {
namespace {

// A fresh folder under the test temp dir, removed with the object.
struct TempFolder {
  explicit TempFolder(const std::string& name)
      : path(fs::path(::testing::TempDir()) / ("pipetrain_data_stream_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempFolder() { fs::remove_all(path); }
  std::string operator/(const std::string& rel) const { return (path / rel).string(); }
  fs::path path;
};

void write_file(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A 2x2 RGB PNG, every pixel (10, 200, 30), as PIL writes it.
const unsigned char kPng[] = {0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
                              0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x08, 0x02, 0x00, 0x00, 0x00, 0xfd, 0xd4, 0x9a,
                              0x73, 0x00, 0x00, 0x00, 0x16, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xe4, 0x3a, 0x21, 0xc7,
                              0xc0, 0xc0, 0xc0, 0xc4, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0x00, 0x00, 0x0b, 0x56, 0x00, 0xf4, 0x23,
                              0x88, 0x6a, 0x9b, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
const std::string kPngBytes(reinterpret_cast<const char*>(kPng), sizeof kPng);

DataSpec image_spec(Dims sample, int64_t classes = 3) {
  DataSpec s;
  s.sample_dims = std::move(sample);
  s.input_dtype = DType::kFloat32;
  s.label_dtype = DType::kInt64;
  s.num_classes = classes;
  return s;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

std::vector<int64_t> shuffled(int64_t n, uint64_t seed) {
  std::vector<int64_t> v = iota(n);
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

Dims with_batch(int64_t b, const Dims& sample) {
  Dims d = sample;
  d.insert(d.begin(), b);
  return d;
}

// Inputs and labels of `count` samples order[begin ..) of a set, as gather_batch gives them.
struct Batch {
  HostTensor x, y;
};
Batch gather(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t count, int64_t epoch) {
  Batch b{HostTensor(d.field(0).dtype, with_batch(count, d.field(0).dims)),
          HostTensor(d.field(1).dtype, with_batch(count, d.field(1).dims))};
  const Status st = gather_batch(d, order, begin, epoch, &b.x, &b.y);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return b;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

bool same_row(const HostTensor& a, int64_t i, const HostTensor& b, int64_t j) {
  const size_t per = a.bytes() / static_cast<size_t>(a.dims()[0]);
  return std::memcmp(static_cast<const char*>(a.data()) + i * per, static_cast<const char*>(b.data()) + j * per, per) == 0;
}

// The largest |a - b| over two float tensors of the same size.
double max_diff(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (int64_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::abs(static_cast<double>(a.as<float>()[i]) - b.as<float>()[i]));
  return m;
}

Dataset load_ok(const std::string& path, const DataSpec& spec, const LoadOptions& opts = {}) {
  Expected<Dataset> d = load_dataset(path, spec, opts);
  EXPECT_TRUE(d.has_value()) << d.status().message();
  return d.has_value() ? std::move(d).value() : Dataset{};
}

std::string load_error(const std::string& path, const DataSpec& spec, const LoadOptions& opts = {}) {
  Expected<Dataset> d = load_dataset(path, spec, opts);
  EXPECT_FALSE(d.has_value()) << path << " loaded: " << d->source;
  return d.has_value() ? std::string() : d.status().message();
}

// ---------------------------------------------------------------------------------------------
// Image folders against torchvision: the reference script runs once for the suite.

class DataStreamImages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(::testing::TempDir()) / ("pipetrain_data_stream_images_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    if (!pt::testing::have_python()) {
      skip_ = "no Python with numpy and onnx (tests/python_interpreter.h)";
      return;
    }
    const std::string log = (dir_ / "reference.log").string();
    const std::string cmd = pt::testing::python() + " " + PIPETRAIN_SOURCE_DIR + "/tests/runtime/data_stream_reference.py " +
                            dir_.string() + " > " + log + " 2>&1";
    const int rc = std::system(cmd.c_str());
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
      skip_ = "the reference script needs torch and torchvision: " + read_text(log);
    else if (rc != 0)
      failure_ = cmd + " failed: " + read_text(log);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failure_.empty()) << failure_;
  }
  static std::string folder() { return (dir_ / "folder").string(); }
  static HostTensor reference(const std::string& name) {
    Expected<HostTensor> t = read_npy((dir_ / name).string());
    EXPECT_TRUE(t.has_value()) << t.status().message();
    return t.has_value() ? std::move(t).value() : HostTensor();
  }
  static std::vector<std::string> classes() {
    std::istringstream in(read_text((dir_ / "classes.txt").string()));
    std::vector<std::string> c;
    for (std::string line; std::getline(in, line);) c.push_back(line);
    return c;
  }
  static fs::path dir_;
  static std::string skip_, failure_;
};
fs::path DataStreamImages::dir_;
std::string DataStreamImages::skip_, DataStreamImages::failure_;

TEST_F(DataStreamImages, ClassesLabelsAndPixelsAreTorchvisions) {
  const HostTensor targets = reference("targets.npy");
  const int64_t n = targets.size();
  ASSERT_EQ(n, 10);
  Dataset d = load_ok(folder(), image_spec({3, 20, 20}));
  ASSERT_TRUE(d.stream);
  EXPECT_EQ(d.classes, classes());
  EXPECT_EQ(d.classes, (std::vector<std::string>{"C", "a_x", "b"}));
  ASSERT_EQ(d.size(), n) << d.source;
  EXPECT_THAT(d.source, HasSubstr("10 images in 3 classes"));
  Batch b = gather(d, iota(n), 0, n, -1);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(b.y.as<int64_t>()[i], targets.as<int64_t>()[i]) << "sample " << i;
  const HostTensor x20 = reference("x20.npy");
  ASSERT_EQ(x20.dims(), b.x.dims());
  // Same size: no resize, and JPEGs decode with PIL's libjpeg-turbo, so the pixels are PIL's.
  EXPECT_LE(max_diff(b.x, x20), 1e-6);
  for (int64_t i = 0; i < n; ++i) {
    HostTensor one(DType::kFloat32, {1, 3, 20, 20});
    ASSERT_TRUE(gather_batch(d, iota(n), i, -1, &one, nullptr).is_ok());
    EXPECT_TRUE(same_row(one, 0, b.x, i)) << "sample " << i << " gathered alone";
  }

  // A one-channel model input: PIL's convert("L").
  Dataset gray = load_ok(folder(), image_spec({1, 20, 20}));
  Batch g = gather(gray, iota(n), 0, n, -1);
  EXPECT_LE(max_diff(g.x, reference("x20_L.npy")), 1e-6);
  EXPECT_TRUE(same_bytes(g.y, b.y));
}

TEST_F(DataStreamImages, ResizedToTheModelInputAsTorchInterpolates) {
  const int64_t n = 10;
  Dataset d = load_ok(folder(), image_spec({3, 32, 32}));
  Batch b = gather(d, iota(n), 0, n, -1);
  const HostTensor x32 = reference("x32.npy");
  ASSERT_EQ(x32.dims(), b.x.dims());
  EXPECT_LE(max_diff(b.x, x32), 1e-5);
}

TEST_F(DataStreamImages, AugmentationDependsOnSeedEpochAndSampleOnly) {
  const int64_t n = 10;
  LoadOptions aug;
  aug.crop = aug.flip = true;
  aug.seed = 5;
  Dataset d = load_ok(folder(), image_spec({3, 32, 32}), aug);
  EXPECT_THAT(d.source, HasSubstr("augmented: crop,flip"));
  const std::vector<int64_t> order = iota(n);
  const Batch e0 = gather(d, order, 0, n, 0);
  EXPECT_TRUE(same_bytes(e0.x, gather(d, order, 0, n, 0).x)) << "the same (order, epoch) twice";
  const Batch e1 = gather(d, order, 0, n, 1);
  EXPECT_TRUE(same_bytes(e0.y, e1.y));
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += !same_row(e0.x, i, e1.x, i);
  EXPECT_GE(differ, n / 2) << "epochs 0 and 1 draw other crops";

  // Any number of loader threads reads the same pixels.
  LoadOptions threads = aug;
  threads.loader_threads = 3;
  Dataset t = load_ok(folder(), image_spec({3, 32, 32}), threads);
  EXPECT_TRUE(same_bytes(gather(t, order, 0, n, 0).x, e0.x)) << "3 loader threads";
  EXPECT_TRUE(same_bytes(gather(t, order, 0, n, 1).x, e1.x)) << "3 loader threads";

  // A sample's pixels do not depend on its batch or its position there.
  const std::vector<int64_t> reversed = shuffled(n, 3);
  for (const Dataset* s : {&d, &t})
    for (int64_t begin : {int64_t{0}, int64_t{3}, n - 1}) {  // n - 1: the batch wraps around
      const Batch two = gather(*s, reversed, begin, 2, 0);
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t sample = reversed[(begin + k) % n];
        EXPECT_TRUE(same_row(two.x, k, e0.x, sample)) << "sample " << sample << " at batch position " << k;
        EXPECT_EQ(two.y.as<int64_t>()[k], e0.y.as<int64_t>()[sample]);
      }
    }

  // Another seed, other crops.
  LoadOptions other = aug;
  other.seed = 6;
  EXPECT_FALSE(same_bytes(gather(load_ok(folder(), image_spec({3, 32, 32}), other), order, 0, n, 0).x, e0.x));

  // A validation split keeps each sample's augmentation: train and validation rows together are
  // the rows of the whole set.
  Dataset train = load_ok(folder(), image_spec({3, 32, 32}), aug);
  Dataset val = split_validation(&train, 0.3, 11);
  ASSERT_EQ(train.size() + val.size(), n);
  std::multiset<int64_t> matched;
  for (Dataset* s : {&train, &val}) {
    const Batch r = gather(*s, iota(s->size()), 0, s->size(), 0);
    for (int64_t i = 0; i < s->size(); ++i)
      for (int64_t j = 0; j < n; ++j)
        if (same_row(r.x, i, e0.x, j)) {
          matched.insert(j);
          EXPECT_EQ(r.y.as<int64_t>()[i], e0.y.as<int64_t>()[j]);
          break;
        }
  }
  EXPECT_EQ(std::set<int64_t>(matched.begin(), matched.end()).size(), static_cast<size_t>(n));
  EXPECT_EQ(matched.size(), static_cast<size_t>(n));
}

// A pipeline's stages gather from one set at once, each on its own thread (the first stage the
// inputs, the last the labels; replicas their own batches): the loader pool serves them all.
TEST_F(DataStreamImages, ConcurrentGathersShareTheLoaderPool) {
  const int64_t n = 10;
  LoadOptions aug;
  aug.crop = aug.flip = true;
  aug.loader_threads = 3;
  Dataset d = load_ok(folder(), image_spec({3, 8, 8}), aug);
  const std::vector<int64_t> order = shuffled(n, 21);
  std::vector<Batch> want;
  for (int64_t epoch = 0; epoch < 4; ++epoch) want.push_back(gather(d, order, 0, n, epoch));
  std::atomic<int> wrong{0};
  auto gatherer = [&](bool inputs) {
    for (int rep = 0; rep < 150; ++rep) {
      const int64_t epoch = rep % 4, begin = rep % n, count = 1 + rep % 4;
      HostTensor x(DType::kFloat32, {count, 3, 8, 8}), y(DType::kInt64, {count});
      if (!gather_batch(d, order, begin, epoch, inputs ? &x : nullptr, &y).is_ok()) ++wrong;
      for (int64_t k = 0; k < count; ++k) {
        const int64_t at = (begin + k) % n;
        if (y.as<int64_t>()[k] != want[epoch].y.as<int64_t>()[at]) ++wrong;
        if (inputs && !same_row(x, k, want[epoch].x, at)) ++wrong;
      }
    }
  };
  std::thread a(gatherer, true), b(gatherer, false), c(gatherer, true);
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(DataStreamImages, EvaluationIsThePlainResize) {
  const int64_t n = 10;
  LoadOptions aug;
  aug.crop = aug.flip = true;
  aug.seed = 5;
  aug.loader_threads = 2;
  const Batch plain = gather(load_ok(folder(), image_spec({3, 32, 32})), iota(n), 0, n, -1);
  const Batch eval = gather(load_ok(folder(), image_spec({3, 32, 32}), aug), iota(n), 0, n, -1);
  EXPECT_TRUE(same_bytes(eval.x, plain.x));
  EXPECT_LE(max_diff(eval.x, reference("x32.npy")), 1e-5);
}

TEST_F(DataStreamImages, FlipAloneMirrorsThePlainResize) {
  const int64_t n = 10, h = 32, w = 32;
  const Batch plain = gather(load_ok(folder(), image_spec({3, h, w})), iota(n), 0, n, -1);
  LoadOptions flip;
  flip.flip = true;
  flip.seed = 9;
  Dataset d = load_ok(folder(), image_spec({3, h, w}), flip);
  int mirrored = 0, kept = 0;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const Batch b = gather(d, iota(n), 0, n, epoch);
    for (int64_t i = 0; i < n; ++i) {
      bool same = true, mirror = true;
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            const float v = b.x.as<float>()[((i * 3 + c) * h + y) * w + x];
            same = same && v == plain.x.as<float>()[((i * 3 + c) * h + y) * w + x];
            mirror = mirror && v == plain.x.as<float>()[((i * 3 + c) * h + y) * w + (w - 1 - x)];
          }
      EXPECT_TRUE(same || mirror) << "sample " << i << " epoch " << epoch << " is neither the image nor its mirror";
      mirrored += mirror && !same;
      kept += same;
    }
  }
  EXPECT_GT(mirrored, 0);
  EXPECT_GT(kept, 0);
}

// ---------------------------------------------------------------------------------------------
// .npy folders read from disk against the in-memory loader, bit for bit.

// Every sample of both sets, gathered in a shuffled order (from a wrapping start), equal in bytes:
// the first input, the labels and every further input.
void expect_same_samples(const Dataset& mem, const Dataset& str, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_FALSE(mem.stream);
  ASSERT_TRUE(str.stream);
  ASSERT_EQ(mem.size(), str.size());
  ASSERT_EQ(mem.inputs(), str.inputs());
  const int64_t n = mem.size();
  const std::vector<int64_t> order = shuffled(n, 17);
  for (int64_t epoch : {int64_t{-1}, int64_t{0}}) {
    const Batch a = gather(mem, order, 3, n, epoch), b = gather(str, order, 3, n, epoch);
    EXPECT_TRUE(same_bytes(a.x, b.x)) << "inputs, epoch " << epoch;
    EXPECT_TRUE(same_bytes(a.y, b.y)) << "labels, epoch " << epoch;
    for (size_t k = 2; k <= mem.inputs(); ++k) {
      ASSERT_EQ(mem.field(k).dtype, str.field(k).dtype);
      ASSERT_EQ(mem.field(k).dims, str.field(k).dims);
      std::vector<HostTensor> t;
      for (int s = 0; s < 2; ++s) t.emplace_back(mem.field(k).dtype, with_batch(n, mem.field(k).dims));
      std::vector<HostTensor*> ma(mem.inputs() - 1, nullptr), sa(mem.inputs() - 1, nullptr);
      ma[k - 2] = &t[0];
      sa[k - 2] = &t[1];
      ASSERT_TRUE(gather_more(mem, order, 3, epoch, ma).is_ok());
      const Status st = gather_more(str, order, 3, epoch, sa);
      ASSERT_TRUE(st.is_ok()) << st.message();
      EXPECT_TRUE(same_bytes(t[0], t[1])) << "further input " << k - 2 << ", epoch " << epoch;
    }
  }
}

// The in-memory and streamed loads of one folder, as given, normalised, split, and both.
void expect_stream_equals_memory(const std::string& dir, const DataSpec& spec, const std::vector<float>& mean,
                                 const std::vector<float>& std) {
  auto both = [&] {
    Expected<Dataset> m = load_npy_dataset(dir, spec), s = stream_npy_dataset(dir, spec);
    EXPECT_TRUE(m.has_value()) << m.status().message();
    EXPECT_TRUE(s.has_value()) << s.status().message();
    return std::make_pair(std::move(m).value(), std::move(s).value());
  };
  {
    auto [m, s] = both();
    expect_same_samples(m, s, dir + " as loaded");
  }
  {
    auto [m, s] = both();
    ASSERT_TRUE(normalize_dataset(&m, mean, std).is_ok());
    ASSERT_TRUE(normalize_dataset(&s, mean, std).is_ok());
    expect_same_samples(m, s, dir + " normalised");
  }
  for (bool normalized : {false, true}) {
    auto [m, s] = both();
    if (normalized) {
      ASSERT_TRUE(normalize_dataset(&m, mean, std).is_ok());
      ASSERT_TRUE(normalize_dataset(&s, mean, std).is_ok());
    }
    Dataset mv = split_validation(&m, 0.25, 42), sv = split_validation(&s, 0.25, 42);
    expect_same_samples(m, s, dir + " training split" + (normalized ? " of the normalised set" : ""));
    expect_same_samples(mv, sv, dir + " validation split" + (normalized ? " of the normalised set" : ""));
  }
}

template <typename T>
HostTensor random_tensor(DType t, const Dims& dims, std::mt19937_64& rng, double lo, double hi) {
  HostTensor x(t, dims);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < x.size(); ++i) static_cast<T*>(x.data())[i] = static_cast<T>(u(rng));
  return x;
}

TEST(DataStreamNpy, StreamedEqualsInMemoryOneInput) {
  TempFolder tmp("npy1");
  std::mt19937_64 rng(1);
  ASSERT_TRUE(write_npy(tmp / "x.npy", random_tensor<uint8_t>(DType::kUint8, {13, 1, 6, 6}, rng, 0, 256)).is_ok());
  ASSERT_TRUE(write_npy(tmp / "y.npy", random_tensor<int32_t>(DType::kInt32, {13}, rng, 0, 4)).is_ok());
  const DataSpec spec = image_spec({1, 6, 6}, 4);
  expect_stream_equals_memory(tmp.path.string(), spec, {0.45f}, {0.3f});

  // Samples of the right element count are reshaped to the model input, in both.
  expect_stream_equals_memory(tmp.path.string(), image_spec({36}, 4), {0.45f}, {0.3f});

  // load_dataset picks the stream when told to, and memory when told not to.
  LoadOptions always;
  always.stream = LoadOptions::Stream::kAlways;
  Dataset s = load_ok(tmp.path.string(), spec, always);
  EXPECT_TRUE(s.stream) << s.source;
  EXPECT_THAT(s.source, HasSubstr("read from disk as gathered"));
  LoadOptions never;
  never.stream = LoadOptions::Stream::kNever;
  Dataset m = load_ok(tmp.path.string(), spec, never);
  EXPECT_FALSE(m.stream) << m.source;
  expect_same_samples(m, s, "load_dataset kNever vs kAlways");
}

TEST(DataStreamNpy, StreamedEqualsInMemoryTwoInputs) {
  TempFolder tmp("npy2");
  std::mt19937_64 rng(2);
  const int64_t n = 21;
  // x0 float [N, 2, 3] (2 channels), x1 int64 ids.
  ASSERT_TRUE(write_npy(tmp / "x0.npy", random_tensor<float>(DType::kFloat32, {n, 2, 3}, rng, -3, 3)).is_ok());
  ASSERT_TRUE(write_npy(tmp / "x1.npy", random_tensor<int64_t>(DType::kInt64, {n, 4}, rng, 0, 50)).is_ok());
  ASSERT_TRUE(write_npy(tmp / "y.npy", random_tensor<int64_t>(DType::kInt64, {n}, rng, 0, 5)).is_ok());
  DataSpec spec = image_spec({2, 3}, 5);
  spec.input_name = "x";
  spec.more_inputs = {{"ids", {4}, DType::kInt64, 50}};
  expect_stream_equals_memory(tmp.path.string(), spec, {0.5f, -1.0f}, {2.0f, 0.7f});

  // The float input second: the normalisation reaches it there.
  TempFolder swapped("npy2s");
  fs::copy_file(tmp / "x1.npy", swapped / "x0.npy");
  fs::copy_file(tmp / "x0.npy", swapped / "x1.npy");
  fs::copy_file(tmp / "y.npy", swapped / "y.npy");
  DataSpec ids_first = image_spec({4}, 5);
  ids_first.input_dtype = DType::kInt64;
  ids_first.input_vocab = 50;
  ids_first.input_name = "ids";
  ids_first.more_inputs = {{"x", {2, 3}, DType::kFloat32, 0}};
  expect_stream_equals_memory(swapped.path.string(), ids_first, {0.5f, -1.0f}, {2.0f, 0.7f});

  LoadOptions always;
  always.stream = LoadOptions::Stream::kAlways;
  Dataset s = load_ok(tmp.path.string(), spec, always);
  EXPECT_TRUE(s.stream) << s.source;
  EXPECT_EQ(s.inputs(), 2u);
}

// ---------------------------------------------------------------------------------------------
// Token files and text: sample i is ids[i*T, i*T + T), its labels ids[i*T + 1, i*T + T + 1).

DataSpec token_spec(int64_t seq, int64_t vocab, DType input = DType::kInt64) {
  DataSpec s;
  s.sample_dims = {seq};
  s.input_dtype = input;
  s.input_vocab = vocab;
  s.label_dtype = DType::kInt64;
  s.label_sample_dims = {seq};
  s.num_classes = vocab;
  return s;
}

// Every sample of `d` (gathered in a shuffled order that wraps) against the slices of `ids`.
void expect_token_slices(const Dataset& d, const std::vector<int64_t>& ids, int64_t seq, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(d.stream) << d.source;
  const int64_t count = static_cast<int64_t>(ids.size()), n = (count - 1) / seq;
  ASSERT_EQ(d.size(), n) << d.source;
  const std::vector<int64_t> order = shuffled(n, 5);
  const Batch b = gather(d, order, 1, n, 0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = order[(1 + k) % n];
    for (int64_t t = 0; t < seq; ++t) {
      const int64_t x = d.field(0).dtype == DType::kInt64 ? b.x.as<int64_t>()[k * seq + t] : b.x.as<int32_t>()[k * seq + t];
      ASSERT_EQ(x, ids[i * seq + t]) << "sample " << i << " position " << t;
      ASSERT_EQ(b.y.as<int64_t>()[k * seq + t], ids[i * seq + t + 1]) << "label of sample " << i << " position " << t;
    }
  }
}

template <typename T>
std::string raw_ids(const std::vector<int64_t>& ids) {
  std::string s(ids.size() * sizeof(T), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const T v = static_cast<T>(ids[i]);
    std::memcpy(s.data() + i * sizeof(T), &v, sizeof(T));
  }
  return s;
}

std::vector<int64_t> some_ids(int64_t count, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t& v : ids) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  ids[0] = vocab - 1;  // the largest id is allowed
  return ids;
}

TEST(DataStreamTokens, RawBinFiles) {
  TempFolder tmp("bin");
  const int64_t seq = 5;
  // 18 tokens: 3 sequences and 2 left over; 16: 3 sequences, the last label the last token.
  for (int64_t count : {18, 16}) {
    const std::vector<int64_t> ids = some_ids(count, 1000, count);
    const std::string path = tmp / ("train" + std::to_string(count) + ".bin");
    write_file(path, raw_ids<uint16_t>(ids));
    expect_token_slices(load_ok(path, token_spec(seq, 1000)), ids, seq, path + " uint16");
    expect_token_slices(load_ok(path, token_spec(seq, 1000, DType::kInt32)), ids, seq, path + " uint16, int32 input");
  }
  const std::vector<int64_t> wide = some_ids(23, 100000, 3);
  write_file(tmp / "wide.bin", raw_ids<uint32_t>(wide));
  LoadOptions u32;
  u32.token_dtype = DType::kUint32;
  expect_token_slices(load_ok(tmp / "wide.bin", token_spec(4, 100000), u32), wide, 4, "uint32");
}

TEST(DataStreamTokens, NpyArrays) {
  TempFolder tmp("tokens_npy");
  const int64_t seq = 6;
  const std::vector<int64_t> ids = some_ids(40, 700, 4);
  HostTensor i64(DType::kInt64, {40}), u16(DType::kUint16, {40});
  for (int64_t i = 0; i < 40; ++i) {
    i64.as<int64_t>()[i] = ids[i];
    const uint16_t v = static_cast<uint16_t>(ids[i]);
    std::memcpy(static_cast<char*>(u16.data()) + 2 * i, &v, 2);
  }
  ASSERT_TRUE(write_npy(tmp / "ids64.npy", i64).is_ok());
  ASSERT_TRUE(write_npy(tmp / "ids16.npy", u16).is_ok());
  expect_token_slices(load_ok(tmp / "ids64.npy", token_spec(seq, 700)), ids, seq, "int64 .npy");
  expect_token_slices(load_ok(tmp / "ids16.npy", token_spec(seq, 700)), ids, seq, "uint16 .npy");
}

TEST(DataStreamTokens, TextAsBytes) {
  TempFolder tmp("text");
  const std::string text = "Streams of bytes: caf\xc3\xa9, na\xc3\xafve, \xe2\x82\xac 5.\nAnd a second line.\n";
  std::vector<int64_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  LoadOptions bytes;
  bytes.tokenizer = "bytes";
  for (const std::string name : {"corpus.txt", "corpus.md"}) {
    write_file(tmp / name, text);
    for (int64_t seq : {8, 7})
      expect_token_slices(load_ok(tmp / name, token_spec(seq, 256), bytes), ids, seq, name + " T=" + std::to_string(seq));
  }
}

// ---------------------------------------------------------------------------------------------
// Refusals: an error status whose message names the path and the problem.

TEST(DataStreamRefusals, ImageFolders) {
  TempFolder tmp("refuse_images");
  const DataSpec spec = image_spec({3, 4, 4}, 3);

  // Images but no class subfolders.
  write_file(tmp / "loose/a.png", kPngBytes);
  write_file(tmp / "loose/b.png", kPngBytes);
  std::string e = load_error(tmp / "loose", spec);
  EXPECT_THAT(e, HasSubstr(tmp / "loose"));
  EXPECT_THAT(e, HasSubstr("2 images but no class subfolders"));

  // A class folder without images (a text file is none).
  write_file(tmp / "empty_class/cat/1.png", kPngBytes);
  write_file(tmp / "empty_class/dog/readme.txt", "no images here\n");
  e = load_error(tmp / "empty_class", spec);
  EXPECT_THAT(e, HasSubstr(tmp / "empty_class/dog"));
  EXPECT_THAT(e, HasSubstr("no JPEG or PNG images"));

  // More class folders than the model has classes.
  for (const char* c : {"a", "b", "c", "d"}) write_file(tmp / (std::string("many/") + c + "/1.png"), kPngBytes);
  e = load_error(tmp / "many", spec);
  EXPECT_THAT(e, HasSubstr(tmp / "many"));
  EXPECT_THAT(e, HasSubstr("4 class folders, but the model's output has 3 classes"));

  // A file of random bytes named .png: refused naming it, or left out with skip_bad.
  write_file(tmp / "bad/a/1.png", kPngBytes);
  write_file(tmp / "bad/a/2.png", kPngBytes);
  write_file(tmp / "bad/b/1.png", kPngBytes);
  std::string noise(300, '\0');
  std::mt19937_64 rng(7);
  for (char& c : noise) c = static_cast<char>(rng());
  noise[0] = 'x';  // no JPEG or PNG signature by chance
  write_file(tmp / "bad/b/noise.png", noise);
  e = load_error(tmp / "bad", spec);
  EXPECT_THAT(e, HasSubstr(tmp / "bad/b/noise.png"));
  EXPECT_THAT(e, HasSubstr("neither a JPEG nor a PNG"));
  EXPECT_THAT(e, HasSubstr("--on-bad-sample skip"));
  LoadOptions skip;
  skip.skip_bad = true;
  Dataset d = load_ok(tmp / "bad", spec, skip);
  ASSERT_EQ(d.size(), 3);
  ASSERT_TRUE(d.stats);
  EXPECT_EQ(d.stats->bad.load(), 1);
  EXPECT_THAT(d.stats->first_bad_message(), HasSubstr(tmp / "bad/b/noise.png"));
  const Batch b = gather(d, iota(3), 0, 3, 0);
  EXPECT_EQ(std::vector<int64_t>(b.y.as<int64_t>(), b.y.as<int64_t>() + 3), (std::vector<int64_t>{0, 0, 1}));
  for (int64_t i = 0; i < b.x.size(); ++i) {
    const float want[3] = {10 / 255.0f, 200 / 255.0f, 30 / 255.0f};
    ASSERT_NEAR(b.x.as<float>()[i], want[(i / 16) % 3], 1e-6) << "element " << i;
  }

  // A PNG whose header reads but whose data stops: found when gathered, the error naming the
  // file; with skip_bad the next image stands in and the loader counts it.
  write_file(tmp / "cut/a/1.png", kPngBytes);
  write_file(tmp / "cut/a/2.png", kPngBytes.substr(0, 40));
  write_file(tmp / "cut/b/1.png", kPngBytes);
  Dataset cut = load_ok(tmp / "cut", spec);
  ASSERT_EQ(cut.size(), 3);
  HostTensor x(DType::kFloat32, {3, 3, 4, 4});
  Status st = gather_batch(cut, iota(3), 0, -1, &x, nullptr);
  EXPECT_FALSE(st.is_ok());
  EXPECT_THAT(st.message(), HasSubstr(tmp / "cut/a/2.png"));
  EXPECT_THAT(st.message(), HasSubstr("truncated PNG"));
  Dataset cut_skip = load_ok(tmp / "cut", spec, skip);
  HostTensor y(DType::kInt64, {3});
  st = gather_batch(cut_skip, iota(3), 0, -1, &x, &y);
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_EQ(cut_skip.stats->bad.load(), 1);
  EXPECT_THAT(cut_skip.stats->first_bad_message(), HasSubstr(tmp / "cut/a/2.png"));
  EXPECT_EQ(y.as<int64_t>()[1], 1) << "the next image, of class b, stands in for the unreadable one";
  EXPECT_TRUE(same_row(x, 1, x, 0));
}

TEST(DataStreamRefusals, TokenFiles) {
  TempFolder tmp("refuse_tokens");
  // An id outside the vocabulary: the message names the position.
  std::vector<int64_t> ids = some_ids(30, 100, 8);
  ids[17] = 100;
  write_file(tmp / "big.bin", raw_ids<uint16_t>(ids));
  std::string e = load_error(tmp / "big.bin", token_spec(4, 100));
  EXPECT_THAT(e, HasSubstr(tmp / "big.bin"));
  EXPECT_THAT(e, HasSubstr("token 100 at position 17"));
  EXPECT_THAT(e, HasSubstr("vocabulary"));
  // Within the vocabulary but not within the output's classes.
  DataSpec fewer = token_spec(4, 200);
  fewer.num_classes = 100;
  e = load_error(tmp / "big.bin", fewer);
  EXPECT_THAT(e, HasSubstr("token 100 at position 17"));
  EXPECT_THAT(e, HasSubstr("classes"));

  // An empty text file.
  write_file(tmp / "empty.txt", "");
  LoadOptions bytes;
  bytes.tokenizer = "bytes";
  e = load_error(tmp / "empty.txt", token_spec(4, 256), bytes);
  EXPECT_THAT(e, HasSubstr(tmp / "empty.txt"));
  EXPECT_THAT(e, HasSubstr("empty"));

  // Fewer tokens than one sequence and its next token.
  write_file(tmp / "short.txt", "abcd");
  e = load_error(tmp / "short.txt", token_spec(4, 256), bytes);
  EXPECT_THAT(e, HasSubstr(tmp / "short.txt"));
  EXPECT_THAT(e, HasSubstr("fewer than one sequence"));

  // An odd number of bytes for uint16 ids.
  write_file(tmp / "odd.bin", raw_ids<uint16_t>(some_ids(20, 100, 9)) + "x");
  e = load_error(tmp / "odd.bin", token_spec(4, 100));
  EXPECT_THAT(e, HasSubstr(tmp / "odd.bin"));
  EXPECT_THAT(e, HasSubstr("41 bytes is not a whole number of uint16 token ids"));

  // Text without a tokenizer.
  write_file(tmp / "plain.txt", "some text for a language model\n");
  e = load_error(tmp / "plain.txt", token_spec(4, 256));
  EXPECT_THAT(e, HasSubstr(tmp / "plain.txt"));
  EXPECT_THAT(e, HasSubstr("needs a tokenizer"));

  // A model whose input is not [T] integer ids.
  e = load_error(tmp / "plain.txt", image_spec({3, 8, 8}, 256), bytes);
  EXPECT_THAT(e, HasSubstr(tmp / "plain.txt"));
  EXPECT_THAT(e, HasSubstr("token data feeds a language model"));
  DataSpec two_d = token_spec(4, 256);
  two_d.sample_dims = {2, 4};
  e = load_error(tmp / "plain.txt", two_d, bytes);
  EXPECT_THAT(e, HasSubstr(tmp / "plain.txt"));
  EXPECT_THAT(e, HasSubstr("[2, 4]"));
  // Labels that are not next tokens.
  DataSpec classes = token_spec(4, 256);
  classes.label_sample_dims = {};
  e = load_error(tmp / "plain.txt", classes, bytes);
  EXPECT_THAT(e, HasSubstr(tmp / "plain.txt"));
  EXPECT_THAT(e, HasSubstr("next-token labels"));
}

}  // namespace
}  // namespace pt
