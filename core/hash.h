// FNV-1a 64: the one content hash of the project (model files, data sets, checkpoints, the spec
// the ranks agree on). Stable across builds and machines, so values written to files and compared
// between ranks stay comparable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pt {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;

// FNV-1a 64 of n bytes at data, continuing from h.
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnv1a64Offset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1a64Offset) { return fnv1a64(s.data(), s.size(), h); }

}  // namespace pt
