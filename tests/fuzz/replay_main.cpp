// Replays fuzz inputs without libFuzzer (the regular gcc build): every file of the folders given
// (after --onnx-only, its .onnx files) goes through the target's LLVMFuzzerTestOneInput once. A reproducer that crashed the target
// once must now pass; a crash fails the ctest entry, and the file being run is printed first.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  bool onnx_only = false;  // --onnx-only: from the folders after it, only the .onnx files
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--onnx-only") {
      onnx_only = true;
    } else if (fs::is_directory(a)) {
      for (const auto& e : fs::recursive_directory_iterator(a)) {
        if (e.is_regular_file() && (!onnx_only || e.path().extension() == ".onnx"))
          files.push_back(e.path());
      }
    } else if (fs::exists(a)) {  // a folder without reproducers yet is not in git: skipped
      files.emplace_back(a);
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::fprintf(stderr, "replay: %s\n", f.c_str());
    std::ifstream in(f, std::ios::binary);
    std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return files.empty() ? 1 : 0;
}
