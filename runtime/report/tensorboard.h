// TensorBoard event files (--tensorboard): scalars per step, written as TensorFlow writes them
// (TFRecord framing with masked CRC-32C, Event / Summary protobuf messages), so that TensorBoard
// and its Python readers read them. No TensorFlow or TensorBoard code is needed to write them.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "core/status.h"

namespace pt {

// CRC-32C (Castagnoli) of `n` bytes, and the masked form TFRecord stores.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates DIR/events.out.tfevents.<seconds>.<host>.<pid> and writes its file_version record.
  static Expected<std::unique_ptr<TensorBoardWriter>> open(const std::string& dir);
  // One scalar at `step` (wall time: now). The file is flushed by flush().
  Status scalar(const std::string& tag, int64_t step, double value);
  Status flush();
  const std::string& path() const { return path_; }

 private:
  Status record(const std::string& bytes);
  std::string path_;
  std::ofstream f_;
};

}  // namespace pt
