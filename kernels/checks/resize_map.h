// Resize's coordinate map, one definition for kernels/cpu/resize.cpp and kernels/cuda/resize.cu:
// which input elements (at most two per dim) and weights an output coordinate reads. Plain C++ that
// nvcc compiles for the device too (no framework types); every product that an addition follows is
// an explicitly rounded multiply, so the device (where nvcc would fuse it into an FMA) computes the
// host's bits and a nearest-mode tie falls on the same side on both.
#pragma once

#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define PT_RESIZE_HD __host__ __device__ __forceinline__
#else
#define PT_RESIZE_HD inline
#endif

namespace pt::resize_map {

// coordinate_transformation_mode (an unknown name maps as asymmetric, as the CPU always did).
enum class Coord : int { kAsymmetric, kHalfPixel, kPytorchHalfPixel, kAlignCorners, kTfHalfPixelForNn, kHalfPixelSymmetric };
// nearest_mode (an unknown name rounds ties down, as round_prefer_floor).
enum class Nearest : int { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };

// Input elements i0, i1 of one dim with weights w0, w1; i1 == i0 (w1 = 0) when only one is read.
struct Tap {
  int64_t i0 = 0, i1 = 0;
  double w0 = 1, w1 = 0;
};

// a * b rounded once, never fused with a following addition.
PT_RESIZE_HD double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// x_original for output coordinate x along a dim of `in` -> `out` elements at scale `s`.
PT_RESIZE_HD double source_coord(Coord mode, double x, int64_t in, int64_t out, double s) {
  switch (mode) {
    case Coord::kHalfPixel:
      return (x + 0.5) / s - 0.5;
    case Coord::kPytorchHalfPixel:
      return out > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case Coord::kAlignCorners: {  // over the resized length in * s, which scales make fractional
      const double len = mul_rn(static_cast<double>(in), s);
      return out == 1 || len == 1.0 ? 0.0 : mul_rn(x, static_cast<double>(in - 1)) / (len - 1);
    }
    case Coord::kTfHalfPixelForNn:
      return (x + 0.5) / s;
    case Coord::kHalfPixelSymmetric: {
      const double width = mul_rn(s, static_cast<double>(in));
      const double adjustment = static_cast<double>(out) / width;
      const double center = static_cast<double>(in) / 2;
      return mul_rn(center, 1 - adjustment) + (x + 0.5) / s - 0.5;
    }
    case Coord::kAsymmetric:
      break;
  }
  return x / s;
}

PT_RESIZE_HD int64_t nearest_index(Nearest mode, double x) {
  if (mode == Nearest::kFloor) return static_cast<int64_t>(::floor(x));
  if (mode == Nearest::kCeil) return static_cast<int64_t>(::ceil(x));
  const double f = ::floor(x);
  if (x - f == 0.5) return static_cast<int64_t>(mode == Nearest::kRoundPreferCeil ? f + 1 : f);
  return static_cast<int64_t>(::round(x));
}

// v clamped to [lo, hi] as std::clamp does it (a NaN stays NaN).
template <typename V>
PT_RESIZE_HD V clamp(V v, V lo, V hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

// The tap of output coordinate o along a dim of `in` -> `out` elements at scale `s` (a dim with
// in == out at scale 1 reads o alone).
PT_RESIZE_HD Tap tap(bool linear, Coord coord, Nearest nearest, int64_t o, int64_t in, int64_t out, float s) {
  Tap tp;
  if (in == out && s == 1.0f) {
    tp.i0 = tp.i1 = o;
    return tp;
  }
  const double x = source_coord(coord, static_cast<double>(o), in, out, s);
  if (!linear) {
    tp.i0 = tp.i1 = clamp<int64_t>(nearest_index(nearest, x), 0, in - 1);
    return tp;
  }
  const double xc = clamp(x, 0.0, static_cast<double>(in - 1));
  tp.i0 = static_cast<int64_t>(::floor(xc));
  tp.i1 = tp.i0 + 1 < in - 1 ? tp.i0 + 1 : in - 1;
  tp.w1 = xc - static_cast<double>(tp.i0);
  tp.w0 = 1 - tp.w1;
  return tp;
}

}  // namespace pt::resize_map

#undef PT_RESIZE_HD
