// Shared by the fuzz targets: the loaders under test read paths, so each input is written to a
// file of this process first (a regular file in the temporary folder, removed at exit).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace pt::fuzz {

// The folder for scratch files: $TMPDIR when set, else /dev/shm when writable (memory: rewriting a
// file on a disk file system such as ext4 costs a flush per input, which made the model target
// spend most of its wall time waiting: 1,077 inputs replayed in 3-4 s from /tmp, 0.2-0.3 s from
// /dev/shm), else the system's temporary folder.
inline std::filesystem::path scratch_parent() {
  const char* tmpdir = std::getenv("TMPDIR");
  if ((tmpdir == nullptr || *tmpdir == '\0') && ::access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

// A folder of this process's own under scratch_parent(), created once, removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::filesystem::path d = scratch_parent() / ("pt_fuzz_" + std::to_string(getpid()));
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
