// The counter-based random numbers of Dropout, shared by the CPU and CUDA kernels (host/device
// inline): keep(element i) = uniform(hash(key, i)) >= ratio, key = hash(seed, step).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PT_HOST_DEVICE __host__ __device__
#else
#define PT_HOST_DEVICE
#endif

namespace pt {

// splitmix64's finaliser: a bijective mix with good avalanche.
PT_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

PT_HOST_DEVICE inline uint64_t dropout_key(uint64_t seed, uint64_t step) {
  return mix64(mix64(seed + 0x9e3779b97f4a7c15ULL) ^ (step * 0xd1b54a32d192ed03ULL));
}

PT_HOST_DEVICE inline bool dropout_keep(uint64_t key, uint64_t i, float ratio) {
  const uint64_t r = mix64(key ^ (i * 0x9e3779b97f4a7c15ULL));
  const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // 24 bits in [0, 1)
  return u >= ratio;
}

}  // namespace pt
