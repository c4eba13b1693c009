// A file that streams read from: positioned reads (pread) from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace pt {

class StreamFile {
 public:
  static Expected<std::shared_ptr<StreamFile>> open(const std::string& path);
  StreamFile() = default;
  ~StreamFile();
  StreamFile(const StreamFile&) = delete;
  StreamFile& operator=(const StreamFile&) = delete;
  // Reads bytes at offset; an error names the file and the offset.
  Status read(uint64_t offset, void* dst, size_t bytes) const;
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // A hash of the file's size and of samples of its bytes from `from` on (the checkpoint's data hash).
  std::string fingerprint(uint64_t from) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace pt
