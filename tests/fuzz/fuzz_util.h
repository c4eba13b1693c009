// Shared by the fuzz targets: the loaders under test read paths, so each input is written to a
// file of this process first (a regular file in the temporary folder, removed at exit).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace pt::fuzz {

// A folder of this process's own under the temporary folder, created once, removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("pt_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    static struct Remove {
      std::filesystem::path p;
      ~Remove() {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    } remove{d};
    return d.string();
  }();
  return dir;
}

// Writes bytes to scratch_dir()/name and returns the path.
inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace pt::fuzz
