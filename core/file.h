// Files the tool reads on a user's behalf (models, external data, data sets, checkpoints, device
// specs) must be regular files: a FIFO nobody writes would block the tool forever, a device could
// feed it without end. The check stats the path (following links) and never opens it.
#pragma once

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

// Writes `text` to path through path.tmp and a rename, so that a reader (or a full disk) never
// sees half a file; an error names the file.
inline Status write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return invalid_input(path + ": cannot be written");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return invalid_input(path + ": write failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return invalid_input(path + ": cannot be written: " + ec.message());
  return Status::ok();
}

}  // namespace pt
