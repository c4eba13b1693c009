// runtime/data/image.h against independent references written by tests/data/image_reference.py: PIL's
// decoded pixels, torch's antialiased bilinear interpolate, torchvision's RandomResizedCrop boxes;
// then corrupt files, which must come back as errors naming the file, with nothing printed.
#include "runtime/data/image.h"
#include "tests/python_interpreter.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;

namespace pt {
namespace {

// A .npy array as the reference script writes it: C order, |u1 or <f4, up to 3 dimensions.
struct Npy {
  std::vector<int64_t> shape;
  std::string descr;
  std::vector<char> data;
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data.data());
  }
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

Npy read_npy_file(const fs::path& p) {
  const std::string s = read_bytes(p);
  Npy a;
  EXPECT_TRUE(s.size() > 10 && s.compare(0, 6, "\x93NUMPY") == 0) << p;
  if (s.size() <= 10) return a;
  const size_t hlen = s[6] == 1 ? uint8_t(s[8]) | uint8_t(s[9]) << 8 : uint8_t(s[8]) | uint8_t(s[9]) << 8 | uint8_t(s[10]) << 16;
  const size_t start = s[6] == 1 ? 10 : 12;
  const std::string header = s.substr(start, hlen);
  const size_t d = header.find("'descr': '");
  a.descr = header.substr(d + 10, 3);
  EXPECT_EQ(header.find("'fortran_order': True"), std::string::npos) << p;
  std::string dims = header.substr(header.find('(') + 1);
  dims = dims.substr(0, dims.find(')'));
  std::stringstream ss(dims);
  for (std::string tok; std::getline(ss, tok, ',');)
    if (tok.find_first_not_of(' ') != std::string::npos) a.shape.push_back(std::stoll(tok));
  a.data.assign(s.begin() + start + hlen, s.end());
  return a;
}

std::vector<std::vector<std::string>> read_lines(const fs::path& p) {
  std::vector<std::vector<std::string>> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    std::stringstream ss(line);
    out.emplace_back();
    for (std::string w; ss >> w;) out.back().push_back(w);
  }
  return out;
}

bool is_jpeg_name(const std::string& name) { return name.size() > 4 && name.substr(name.size() - 4) == ".jpg"; }

// Runs the reference script once for the whole suite into a fresh temporary folder.
class ImageReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(::testing::TempDir()) / ("pipetrain_image_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    if (!pt::testing::have_python()) {
      skip_ = "no Python with numpy and onnx (tests/python_interpreter.h)";
      return;
    }
    const std::string cmd = pt::testing::python() + " " + PIPETRAIN_SOURCE_DIR + "/tests/data/image_reference.py " +
                            dir_.string() + " > " + (dir_ / "reference.log").string() + " 2>&1";
    const int rc = std::system(cmd.c_str());
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
      skip_ = "the reference script needs PIL, torch and torchvision: " + read_bytes(dir_ / "reference.log");
    } else if (rc != 0) {
      failure_ = cmd + " failed: " + read_bytes(dir_ / "reference.log");
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failure_.empty()) << failure_;
  }
  static fs::path dir_;
  static std::string skip_, failure_;
};
fs::path ImageReference::dir_;
std::string ImageReference::skip_, ImageReference::failure_;

// Pixels equal PIL's Image.open(f).convert(mode) for every file, mode and decoder path: JPEG within 1
// (PIL 9.4 links the same libjpeg-turbo 2.1.5 with the same settings, so they are equal here; another
// PIL build may differ by rounding), PNG exactly; image_size agrees with the decoded size.
TEST_F(ImageReference, DecodesAsPil) {
  const auto cases = read_lines(dir_ / "decode.txt");
  ASSERT_GE(cases.size(), 30u);
  int64_t jpeg_pixels = 0, jpeg_off_by_one = 0;
  for (const auto& c : cases) {
    const std::string path = (dir_ / c[0]).string();
    const int channels = c[1] == "L" ? 1 : 3;
    const Npy ref = read_npy_file(dir_ / c[2]);
    SCOPED_TRACE(c[0] + " as " + c[1]);
    auto im = read_image(path, channels);
    ASSERT_TRUE(im.has_value()) << im.status().message();
    ASSERT_EQ(im->channels, channels);
    ASSERT_EQ(ref.shape.size(), channels == 1 ? 2u : 3u);
    ASSERT_EQ(im->height, ref.shape[0]);
    ASSERT_EQ(im->width, ref.shape[1]);
    ASSERT_EQ(im->pixels.size(), ref.data.size());
    int max_diff = 0;
    for (size_t i = 0; i < ref.data.size(); ++i) {
      const int d = std::abs(int(im->pixels[i]) - int(ref.as<uint8_t>()[i]));
      max_diff = std::max(max_diff, d);
      if (is_jpeg_name(c[0])) jpeg_off_by_one += d != 0;
    }
    if (is_jpeg_name(c[0])) {
      jpeg_pixels += int64_t(ref.data.size());
      EXPECT_LE(max_diff, 1);
    } else {
      EXPECT_EQ(max_diff, 0);
    }
    const auto size = image_size(path);
    ASSERT_TRUE(size.has_value()) << size.status().message();
    EXPECT_EQ(size->first, im->width);
    EXPECT_EQ(size->second, im->height);
  }
  std::printf("JPEG samples differing from PIL's: %lld of %lld\n", (long long)jpeg_off_by_one, (long long)jpeg_pixels);
}

// crop_resize_chw equals torch's F.interpolate(bilinear, align_corners=False, antialias=True) / 255 on
// the crop (down by more than 2, up, non-square, mixed, same size, one pixel, gray, mirrored), and
// writes nothing outside its output.
TEST_F(ImageReference, ResizesAsTorch) {
  const auto cases = read_lines(dir_ / "crops.txt");
  ASSERT_GE(cases.size(), 6u);
  constexpr float kGuard = -12345.0f;
  for (const auto& c : cases) {
    SCOPED_TRACE(c[0] + " " + c[1] + " box " + c[2] + " " + c[3] + " " + c[4] + " " + c[5] + " to " + c[6] + "x" + c[7] +
                 (c[8] == "1" ? " mirrored" : ""));
    const int channels = c[1] == "L" ? 1 : 3;
    auto im = read_image((dir_ / c[0]).string(), channels);
    ASSERT_TRUE(im.has_value()) << im.status().message();
    const CropBox box{std::stoi(c[2]), std::stoi(c[3]), std::stoi(c[4]), std::stoi(c[5])};
    const int out_h = std::stoi(c[6]), out_w = std::stoi(c[7]);
    const Npy ref = read_npy_file(dir_ / c[9]);
    ASSERT_EQ(ref.descr, "<f4");
    const size_t n = size_t(channels) * out_h * out_w;
    ASSERT_EQ(ref.data.size(), n * sizeof(float));
    std::vector<float> out(n + 32, kGuard);
    crop_resize_chw(out.data() + 16, *im, box, out_h, out_w, c[8] == "1");
    double max_err = 0;
    for (size_t i = 0; i < n; ++i) max_err = std::max(max_err, double(std::fabs(out[16 + i] - ref.as<float>()[i])));
    EXPECT_LE(max_err, 1e-5);
    std::printf("  %-22s %s box (%s, %s, %sx%s) to %sx%s%s: max |error| %.2g\n", c[0].c_str(), c[1].c_str(), c[2].c_str(),
                c[3].c_str(), c[4].c_str(), c[5].c_str(), c[6].c_str(), c[7].c_str(), c[8] == "1" ? " mirrored" : "", max_err);
    for (int g = 0; g < 16; ++g) {
      EXPECT_EQ(out[g], kGuard);
      EXPECT_EQ(out[16 + n + g], kGuard);
    }
  }
}

// The same decode and resize from two threads at once give the single-thread results.
TEST_F(ImageReference, ThreadSafe) {
  const std::string path = (dir_ / "rgb_q90_200x150.jpg").string();
  auto work = [&](std::vector<float>* out) {
    for (int rep = 0; rep < 50; ++rep) {
      auto im = read_image(path, 3);
      if (!im) return;
      out->assign(3 * 32 * 32, 0.0f);
      crop_resize_chw(out->data(), *im, CropBox{5, 7, 120 - rep, 150}, 32, 32, rep % 2 == 1);
    }
  };
  std::vector<float> alone, a, b;
  work(&alone);
  std::thread ta(work, &a), tb(work, &b);
  ta.join();
  tb.join();
  ASSERT_EQ(alone.size(), 3u * 32 * 32);
  EXPECT_EQ(a, alone);
  EXPECT_EQ(b, alone);
}

// Same mean area fraction and mean aspect (w / h) as torchvision's get_params over 20,000 draws
// each, within 2 % (their standard errors are about 0.5 %), including a 500x60 image where many
// tries fail and small images where rounding shapes the distribution; the fallback box exactly.
TEST_F(ImageReference, RandomResizedCropAsTorchvision) {
  const auto lines = read_lines(dir_ / "rrc.txt");
  int stats = 0, fallbacks = 0;
  for (const auto& l : lines) {
    const int w = std::stoi(l[1]), h = std::stoi(l[2]);
    if (l[0] == "stats") {
      ++stats;
      const int draws = std::stoi(l[3]);
      std::mt19937_64 rng(1234);
      double area = 0, aspect = 0;
      for (int i = 0; i < draws; ++i) {
        const CropBox b = random_resized_crop(w, h, rng);
        area += double(b.height) * b.width / (double(h) * w);
        aspect += double(b.width) / b.height;
      }
      area /= draws;
      aspect /= draws;
      EXPECT_NEAR(area / std::stod(l[4]), 1.0, 0.02) << w << "x" << h << ": mean area " << area << ", torchvision " << l[4];
      EXPECT_NEAR(aspect / std::stod(l[5]), 1.0, 0.02) << w << "x" << h << ": mean aspect " << aspect << ", torchvision " << l[5];
    } else {
      ++fallbacks;
      std::mt19937_64 rng(7);
      const CropBox b = random_resized_crop(w, h, rng, std::stod(l[3]), std::stod(l[4]));
      EXPECT_EQ(b.top, std::stoi(l[5])) << w << "x" << h;
      EXPECT_EQ(b.left, std::stoi(l[6])) << w << "x" << h;
      EXPECT_EQ(b.height, std::stoi(l[7])) << w << "x" << h;
      EXPECT_EQ(b.width, std::stoi(l[8])) << w << "x" << h;
    }
  }
  EXPECT_EQ(stats, 4);
  EXPECT_EQ(fallbacks, 6);
}

// Every box lies inside the image and is either within the scale and ratio bounds (up to the
// rounding of its sides) or the central fallback box.
TEST(RandomResizedCrop, BoxesInsideAndWithinBounds) {
  std::mt19937_64 rng(42);
  for (const auto& [w, h] :
       std::vector<std::pair<int, int>>{{1, 1}, {1, 7}, {7, 1}, {2, 3}, {37, 23}, {32, 32}, {500, 60}, {4000, 3000}}) {
    std::mt19937_64 fallback_rng(0);
    const CropBox fb = random_resized_crop(w, h, fallback_rng, 2.0, 3.0);
    int fallbacks = 0;
    for (int i = 0; i < 10000; ++i) {
      const CropBox b = random_resized_crop(w, h, rng);
      ASSERT_TRUE(b.top >= 0 && b.left >= 0 && b.height > 0 && b.width > 0 && b.top + b.height <= h && b.left + b.width <= w)
          << w << "x" << h << ": box " << b.top << " " << b.left << " " << b.height << " " << b.width;
      if (b.top == fb.top && b.left == fb.left && b.height == fb.height && b.width == fb.width) {
        ++fallbacks;
        continue;
      }
      const double area = double(w) * h, bw = b.width, bh = b.height;
      EXPECT_GE((bw + 0.5) * (bh + 0.5), 0.08 * area) << w << "x" << h;
      EXPECT_LE((bw - 0.5) * (bh - 0.5), 1.0 * area) << w << "x" << h;
      EXPECT_GE((bw + 0.5) / std::max(bh - 0.5, 1e-9), 3.0 / 4) << w << "x" << h;
      EXPECT_LE((bw - 0.5) / (bh + 0.5), 4.0 / 3) << w << "x" << h;
    }
    if (w == 4000) {
      EXPECT_LT(fallbacks, 10);  // a 4:3 image almost never needs it
    }
  }
}

// A seed gives the same boxes; another seed other boxes.
TEST(RandomResizedCrop, DeterministicForASeed) {
  auto draw = [](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int> v;
    for (int i = 0; i < 100; ++i) {
      const CropBox b = random_resized_crop(224, 160, rng);
      v.insert(v.end(), {b.top, b.left, b.height, b.width});
    }
    return v;
  };
  EXPECT_EQ(draw(5), draw(5));
  EXPECT_NE(draw(5), draw(6));
}

// Reads a file through both entry points; both must fail with a message that starts with the name
// given, and print nothing.
void expect_refused(const fs::path& path, const std::string& what) {
  SCOPED_TRACE(what);
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const auto from_file = read_image(path.string(), 3);
  const std::string bytes = read_bytes(path);
  const auto from_memory = decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 1, "memory:" + what);
  const std::string printed = ::testing::internal::GetCapturedStderr() + ::testing::internal::GetCapturedStdout();
  ASSERT_FALSE(from_file.has_value());
  ASSERT_FALSE(from_memory.has_value());
  EXPECT_EQ(from_file.status().message().rfind(path.string() + ": ", 0), 0u) << from_file.status().message();
  EXPECT_EQ(from_memory.status().message().rfind("memory:" + what + ": ", 0), 0u) << from_memory.status().message();
  EXPECT_EQ(from_file.status().message().find('\n'), std::string::npos) << from_file.status().message();
  EXPECT_EQ(printed, "");
  std::printf("  %-26s %s\n", what.c_str(), from_file.status().message().c_str());
}

// The byte offset of a PNG chunk's CRC (the first chunk of that type).
size_t png_crc_offset(const std::string& png, const std::string& type) {
  size_t pos = 8;
  while (pos + 8 <= png.size()) {
    const uint32_t len =
        uint32_t(uint8_t(png[pos])) << 24 | uint8_t(png[pos + 1]) << 16 | uint8_t(png[pos + 2]) << 8 | uint8_t(png[pos + 3]);
    if (png.compare(pos + 4, 4, type) == 0) return pos + 8 + len;
    pos += 12 + len;
  }
  return std::string::npos;
}

TEST_F(ImageReference, CorruptFilesAreErrorsNamingTheFile) {
  const fs::path bad = dir_ / "bad";
  fs::create_directories(bad);
  const std::string jpeg = read_bytes(dir_ / "rgb_q90_200x150.jpg"), progressive = read_bytes(dir_ / "rgb_progressive_61x45.jpg");
  const std::string png = read_bytes(dir_ / "rgb_200x150.png");
  std::mt19937_64 rng(3);
  std::string noise(4096, '\0');
  for (char& ch : noise) ch = char(rng() & 0xff);
  std::string idat_crc = png, ihdr_crc = png;
  idat_crc[png_crc_offset(png, "IDAT")] ^= 0x55;
  ihdr_crc[png_crc_offset(png, "IHDR")] ^= 0x55;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"truncated.jpg", jpeg.substr(0, jpeg.size() / 2)},
      {"truncated_header.jpg", jpeg.substr(0, 40)},
      {"truncated_progressive.jpg", progressive.substr(0, progressive.size() * 2 / 3)},
      {"idat_crc.png", idat_crc},
      {"ihdr_crc.png", ihdr_crc},
      {"truncated.png", png.substr(0, png.size() / 2)},
      {"truncated_header.png", png.substr(0, 20)},
      {"noise.jpg", noise},
      {"noise_after_soi.jpg", "\xff\xd8\xff" + noise},
      {"noise_after_sig.png", png.substr(0, 8) + noise},
      {"empty.jpg", ""},
      {"text.jpg", "This is not a picture, only some text.\n"},
  };
  for (const auto& [name, content] : files) {
    write_bytes(bad / name, content);
    expect_refused(bad / name, name);
  }
  expect_refused(dir_ / "missing.png", "missing file");
  // A FIFO nobody writes: refused at once, not waited on.
  const fs::path fifo = bad / "fifo.png";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const Status& s : {read_image(fifo.string(), 3).status(), image_size(fifo.string()).status()})
    EXPECT_EQ(s.message().rfind(fifo.string() + ": not a regular file", 0), 0u) << s.message();
  EXPECT_FALSE(read_image(bad.string(), 3).has_value());
  EXPECT_EQ(read_image(bad.string(), 3).status().message().rfind(bad.string() + ": ", 0), 0u);
  for (const char* name : {"truncated_header.jpg", "truncated_header.png", "noise.jpg", "empty.jpg", "text.jpg"}) {
    const auto size = image_size((bad / name).string());
    ASSERT_FALSE(size.has_value()) << name;
    EXPECT_EQ(size.status().message().rfind((bad / name).string() + ": ", 0), 0u) << size.status().message();
  }
  // Without its EOI marker a JPEG is refused, as PIL refuses it ("image file is truncated"): libjpeg
  // reads ahead for the marker. A PNG without IEND decodes (PIL reads it too).
  write_bytes(bad / "no_eoi.jpg", jpeg.substr(0, jpeg.size() - 2));
  expect_refused(bad / "no_eoi.jpg", "no_eoi.jpg");
  write_bytes(bad / "no_iend.png", png.substr(0, png.size() - 12));
  EXPECT_TRUE(read_image((bad / "no_iend.png").string(), 3).has_value());
}

// Random byte changes to a JPEG and a PNG: each decode gives pixels or an error naming the input,
// never a crash, an exit or output.
TEST_F(ImageReference, MutatedFilesNeverCrash) {
  std::mt19937_64 rng(11);
  int errors = 0, decoded = 0;
  for (const char* file : {"rgb_q90_37x23.jpg", "rgb_progressive_61x45.jpg", "palette4_37x23.png", "rgb_interlaced_37x23.png"}) {
    const std::string original = read_bytes(dir_ / file);
    for (int trial = 0; trial < 300; ++trial) {
      std::string s = original;
      const int flips = 1 + int(rng() % 8);
      for (int f = 0; f < flips; ++f) s[2 + rng() % (s.size() - 2)] = char(rng() & 0xff);
      if (trial % 5 == 0) s.resize(2 + rng() % (s.size() - 2));
      ::testing::internal::CaptureStderr();
      const auto im = decode_image(reinterpret_cast<const uint8_t*>(s.data()), s.size(), trial % 2 ? 1 : 3, "mutant");
      EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
      if (im.has_value()) {
        ++decoded;
        EXPECT_EQ(im->pixels.size(), size_t(im->width) * im->height * im->channels);
      } else {
        ++errors;
        EXPECT_EQ(im.status().message().rfind("mutant: ", 0), 0u) << im.status().message();
      }
    }
  }
  std::printf("mutated files: %d decoded, %d refused\n", decoded, errors);
  EXPECT_GT(errors, 0);
}

// Throughput of what a data loader does per sample on one thread: read the file, decode, random
// resized crop, resize with a random flip. Not a test (timings vary with the machine): run with
// --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'.
TEST_F(ImageReference, DISABLED_Throughput) {
  for (const int side : {32, 64}) {
    const std::string path = (dir_ / ("bench_" + std::to_string(side) + "x" + std::to_string(side) + ".jpg")).string();
    std::mt19937_64 rng(0);
    std::vector<float> out(3 * side * side);
    auto run = [&](int n) {
      for (int i = 0; i < n; ++i) {
        auto im = read_image(path, 3);
        ASSERT_TRUE(im.has_value()) << im.status().message();
        const CropBox box = random_resized_crop(im->width, im->height, rng);
        crop_resize_chw(out.data(), *im, box, side, side, (rng() & 1) != 0);
      }
    };
    run(200);
    const int n = side == 32 ? 50000 : 20000;
    const auto t0 = std::chrono::steady_clock::now();
    run(n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The decode alone, from memory, for the split.
    const std::string bytes = read_bytes(path);
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      auto im = decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 3, path);
      ASSERT_TRUE(im.has_value());
    }
    const double d = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf(
        "%dx%d JPEG (%zu bytes), read + decode + random resized crop + flip to %dx%d: %.0f images/s on one thread "
        "(decode from memory alone: %.0f/s)\n",
        side, side, bytes.size(), side, side, n / s, n / d);
  }
}

}  // namespace
}  // namespace pt
