// Fuzz target: checkpoint files. A checkpoint carries a checksum of everything after its 40-byte
// header; the target recomputes it over the fuzzed bytes, so that mutations reach the JSON section
// and the tensor table instead of stopping at the checksum test.
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> b(data, data + size);
  constexpr size_t kHeader = 40, kSumAt = 32;
  if (b.size() >= kHeader && std::memcmp(b.data(), "PTCKPT\r\n", 8) == 0) {
    const uint64_t sum = pt::fnv1a64(b.data() + kHeader, b.size() - kHeader);
    std::memcpy(b.data() + kSumAt, &sum, sizeof sum);  // little-endian hosts only, as the format
  }
  (void)pt::read_checkpoint(pt::fuzz::write_file("step-1.ckpt", b.data(), b.size()));
  return 0;
}
