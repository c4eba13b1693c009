// TensorBoard event files: TFRecord records (length, masked CRC-32C of the length, data, masked
// CRC-32C of the data) holding Event messages compiled by protoc from tensorboard_event.proto.
#include "runtime/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>

#include "tensorboard_event.pb.h"

namespace pt {

namespace {

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

Expected<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return invalid_input("--tensorboard: " + dir + ": cannot create the folder: " + ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  auto w = std::unique_ptr<TensorBoardWriter>(new TensorBoardWriter());
  w->path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_s())) +
                                            "." + host + "." + std::to_string(getpid())))
                 .string();
  w->f_.open(w->path_, std::ios::binary | std::ios::trunc);
  if (!w->f_) return invalid_input("--tensorboard: " + w->path_ + ": cannot be written");
  tensorboard::Event e;
  e.set_wall_time(now_s());
  e.set_file_version("brain.Event:2");
  RETURN_IF_ERROR(w->record(e.SerializeAsString()));
  RETURN_IF_ERROR(w->flush());
  return w;
}

Status TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value) {
  tensorboard::Event e;
  e.set_wall_time(now_s());
  e.set_step(step);
  tensorboard::SummaryValue* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  return record(e.SerializeAsString());
}

Status TensorBoardWriter::record(const std::string& bytes) {
  char header[12];
  const uint64_t len = bytes.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((len >> (8 * i)) & 0xFF);  // little-endian
  const uint32_t len_crc = masked_crc32c(header, 8);
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>((len_crc >> (8 * i)) & 0xFF);
  const uint32_t data_crc = masked_crc32c(bytes.data(), bytes.size());
  char footer[4];
  for (int i = 0; i < 4; ++i) footer[i] = static_cast<char>((data_crc >> (8 * i)) & 0xFF);
  f_.write(header, sizeof header);
  f_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f_.write(footer, sizeof footer);
  if (!f_) return invalid_input(path_ + ": write failed (disk full?)");
  return Status::ok();
}

Status TensorBoardWriter::flush() {
  f_.flush();
  if (!f_) return invalid_input(path_ + ": write failed (disk full?)");
  return Status::ok();
}

}  // namespace pt
