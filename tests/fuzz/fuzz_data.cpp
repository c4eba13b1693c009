// Fuzz target: data files. The first byte chooses the reader: a lone .npy file, an x.npy of a
// folder (beside a valid y.npy), or the images or the labels file of an IDX pair (beside a valid
// other half); the rest of the input is the file.
#include <cstdint>
#include <filesystem>

#include "runtime/data/data.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// Valid halves the fuzzed one is paired with: 2 samples of 8x8 pixels and their labels.
const uint8_t kIdxImages[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 8, 0, 0, 0, 8};  // + 128 pixels
const uint8_t kIdxLabels[] = {0, 0, 8, 1, 0, 0, 0, 2, 3, 7};

std::string idx_images() {
  std::string s(reinterpret_cast<const char*>(kIdxImages), sizeof kIdxImages);
  for (int i = 0; i < 128; ++i) s.push_back(static_cast<char>(i * 2));
  return s;
}

void write(const std::string& path, const std::string& bytes) {
  (void)pt::fuzz::write_file(path, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 4;
  ++data;
  --size;
  namespace fs = std::filesystem;
  const std::string dir = pt::fuzz::scratch_dir();
  pt::DataSpec spec;
  spec.sample_dims = {8, 8};
  spec.num_classes = 10;
  if (mode == 0) {
    (void)pt::read_npy(pt::fuzz::write_file("lone.npy", data, size));
    return 0;
  }
  if (mode == 1) {
    fs::create_directories(dir + "/npy");
    (void)pt::fuzz::write_file("npy/x.npy", data, size);
    static const bool y_written = [] {
      pt::HostTensor y(pt::DType::kInt64, {2});
      return pt::write_npy(pt::fuzz::scratch_dir() + "/npy/y.npy", y).is_ok();
    }();
    if (!y_written) std::abort();
    (void)pt::load_dataset(dir + "/npy", spec);
    return 0;
  }
  fs::create_directories(dir + "/idx");
  if (mode == 2) {
    (void)pt::fuzz::write_file("idx/train-images-idx3-ubyte", data, size);
    write("idx/train-labels-idx1-ubyte", std::string(reinterpret_cast<const char*>(kIdxLabels), sizeof kIdxLabels));
  } else {
    write("idx/train-images-idx3-ubyte", idx_images());
    (void)pt::fuzz::write_file("idx/train-labels-idx1-ubyte", data, size);
  }
  (void)pt::load_dataset(dir + "/idx", spec);
  return 0;
}
