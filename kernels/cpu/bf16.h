// bfloat16 as stored by the kernels: the upper 16 bits of an IEEE float32 in a uint16_t. The
// conversions of --precision bf16 (importer/precision.h): float32 -> bfloat16 rounds to nearest,
// ties to even, keeps NaN a (quiet) NaN and Inf an Inf, and keeps denormals (no flush to zero);
// bfloat16 -> float32 is exact.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/tensor.h"

namespace pt::cpu {

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even (may carry into Inf)
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Whole arrays, vectorised (OpenMP simd; threads above kParallelThreshold elements).
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n);

// The bfloat16 data of a view (checked to be bfloat16).
inline const uint16_t* bf16_data(const TensorView& v) {
  PT_CHECK(v.dtype == DType::kBFloat16) << "tensor is " << dtype_name(v.dtype) << ", asked as bfloat16";
  return static_cast<const uint16_t*>(v.data);
}

}  // namespace pt::cpu
