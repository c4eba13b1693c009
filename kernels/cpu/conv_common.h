// What the float32 (conv.cpp) and bfloat16 (conv_bf16.cpp) convolutions and the bfloat16 GEMM
// share: the convolution geometry and its checks, the CPU oneDNN engine, and the per-thread
// scratch buffers that hold oneDNN's blocked-layout copies. Not a public header.
#pragma once

#include <dnnl.hpp>

#include <array>
#include <cstdlib>
#include <string>

#include "kernels/cpu/cpu_util.h"
#include "kernels/window.h"

namespace pt::cpu {

enum class Pass { kForward, kGradInput, kGradWeight };

// Everything a convolution pass depends on.
struct ConvShape {
  Window w;          // input N, C, spatial extents; kernel, stride, dilation, pads; output extents
  int64_t m = 0;     // output channels
  int64_t g = 1;     // groups
  bool bias = false;
};

// Checks X [N, C, in...], W [M, C/g, k...] and Y [N, M, out...] against the attributes.
inline Status conv_shape(const char* op, const AttrMap& attrs, const Dims& x, const Dims& wd, const Dims& y,
                         ConvShape* cs) {
  if (wd.size() != x.size())
    return invalid_input(std::string(op) + ": W " + dims_str(wd) + " and X " + dims_str(x) + " differ in rank");
  const Dims kernel(wd.begin() + 2, wd.end());
  RETURN_IF_ERROR(window_from_attrs(op, attrs, x, &kernel, false, &cs->w));
  for (int i = 0; i < cs->w.nd; ++i)
    if (cs->w.k[kMaxSpatial - cs->w.nd + i] != kernel[i])
      return invalid_input(std::string(op) + ": kernel_shape does not match W " + dims_str(wd));
  cs->m = wd[0];
  cs->g = attrs.get_int("group", 1);
  if (cs->g < 1 || cs->w.c % cs->g != 0 || cs->m % cs->g != 0 || wd[1] * cs->g != cs->w.c)
    return invalid_input(std::string(op) + ": group " + std::to_string(cs->g) + " does not fit X " + dims_str(x) +
                         " and W " + dims_str(wd));
  return check_same_dims(op, "output", y, window_output_dims(cs->w, cs->m));
}

inline dnnl::engine& dnnl_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Per-thread buffers for the blocked-layout copies, grown to the largest seen: they serve every
// cached primitive, so memory does not grow with the number of convolution shapes.
class Scratch {
 public:
  ~Scratch() {
    for (void* p : p_) std::free(p);
  }
  void* get(int slot, size_t bytes) {
    if (bytes > n_[slot]) {
      std::free(p_[slot]);
      n_[slot] = (bytes + 63) / 64 * 64;
      p_[slot] = std::aligned_alloc(64, n_[slot]);
      PT_CHECK(p_[slot]) << "out of memory for a " << n_[slot] << "-byte convolution buffer";
    }
    return p_[slot];
  }

 private:
  std::array<void*, 4> p_{};
  std::array<size_t, 4> n_{};
};

}  // namespace pt::cpu
