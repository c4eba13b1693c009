// Files the tool reads on a user's behalf (models, external data, data sets, checkpoints, device
// specs) must be regular files: a FIFO nobody writes would block the tool forever, a device could
// feed it without end. The check stats the path (following links) and never opens it.
#pragma once

#include <filesystem>
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

}  // namespace pt
