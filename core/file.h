// Files the tool reads on a user's behalf (models, external data, data sets, checkpoints, device
// specs) must be regular files: a FIFO nobody writes would block the tool forever, a device could
// feed it without end. The check stats the path (following links) and never opens it.
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/status.h"

namespace pt {

// OK for a regular file (or a link to one); otherwise an invalid-input error naming the path and
// what it is instead.
inline Status check_regular_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return invalid_input(path + ": no such file");
  if (fs::is_directory(st)) return invalid_input(path + ": is a folder, not a file");
  if (!fs::is_regular_file(st))
    return invalid_input(path + ": not a regular file (" + (fs::is_fifo(st) ? std::string("a FIFO") :
                                                            fs::is_socket(st) ? std::string("a socket") :
                                                            std::string("a device")) +
                         "); give a file");
  return Status::ok();
}

// Writes `bytes` to path + ".tmp", then renames it onto `path`, so that a reader never sees half
// a file and a failure never costs the previous one. A failure (a full disk, permissions) is one
// line naming the file and the reason, exit code 2 as for any input the user controls, and leaves
// no temporary file behind. The one writer of whole files: models, stage files, reports.
inline Status write_file_atomic(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  auto failed = [&](const std::string& what) {
    const int err = errno;
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return invalid_input(path.string() + ": " + what + (err ? ": " + std::string(std::strerror(err)) : std::string()));
  };
  {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return invalid_input(path.string() + ": is a folder, not a file");
    if (std::filesystem::is_directory(tmp, ec))
      return invalid_input(path.string() + ": cannot be written: " + tmp.string() + " is a folder in the way");
  }
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return failed("cannot be written");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return failed("write failed");
    out.close();
    if (!out) return failed("write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return invalid_input(path.string() + ": cannot be written: " + ec.message());
  }
  return Status::ok();
}

}  // namespace pt
