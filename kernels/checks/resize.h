// The argument checks of Resize and ResizeGrad, shared by kernels/cpu/resize.cpp and the CUDA
// wrappers in kernels/cuda/resize_ops.cpp: one definition, so both backends refuse the same calls
// with the same messages. The shape function (importer/shapes_tensor.cpp) leaves per-dim `_scales`
// (the scale each coordinate transform divides by), `_coord` and `_nearest`; the map they define is
// kernels/checks/resize_map.h.
#pragma once

#include <string>
#include <vector>

#include "kernels/checks/resize_map.h"
#include "kernels/kernel_checks.h"

namespace pt::kernels {

struct ResizeArgs {
  bool linear = false;  // mode: linear, else nearest
  resize_map::Coord coord = resize_map::Coord::kHalfPixel;
  resize_map::Nearest nearest = resize_map::Nearest::kRoundPreferFloor;
  std::vector<float> scales;  // one per dim
};

inline resize_map::Coord parse_resize_coord(const std::string& s) {
  using resize_map::Coord;
  if (s == "half_pixel") return Coord::kHalfPixel;
  if (s == "pytorch_half_pixel") return Coord::kPytorchHalfPixel;
  if (s == "align_corners") return Coord::kAlignCorners;
  if (s == "tf_half_pixel_for_nn") return Coord::kTfHalfPixelForNn;
  if (s == "half_pixel_symmetric") return Coord::kHalfPixelSymmetric;
  return Coord::kAsymmetric;
}

inline resize_map::Nearest parse_resize_nearest(const std::string& s) {
  using resize_map::Nearest;
  if (s == "floor") return Nearest::kFloor;
  if (s == "ceil") return Nearest::kCeil;
  if (s == "round_prefer_ceil") return Nearest::kRoundPreferCeil;
  return Nearest::kRoundPreferFloor;
}

// The attributes of a resize from `in` to `out` (Resize: X -> Y; ResizeGrad: dX <- dY).
inline Status resize_args(const KernelCall& call, const Dims& in, const Dims& out, ResizeArgs* a) {
  a->scales = call.attrs.get_floats("_scales");
  if (in.size() != out.size() || a->scales.size() != in.size())
    return invalid_input("Resize: input " + dims_str(in) + ", output " + dims_str(out) + " and scales disagree");
  const std::string mode = call.attrs.get_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear") return unsupported("Resize: mode '" + mode + "'");
  a->linear = mode == "linear";
  a->coord = parse_resize_coord(call.attrs.get_string("_coord", "half_pixel"));
  a->nearest = parse_resize_nearest(call.attrs.get_string("_nearest", "round_prefer_floor"));
  return Status::ok();
}

// Resize (X, roi, scales, sizes) -> Y: only X is read (the shape function consumed the rest).
inline Status check_resize(const KernelCall& call, ResizeArgs* a) {
  RETURN_IF_ERROR(check_arity(call, "Resize", 1, 1));
  return resize_args(call, call.inputs[0].dims, call.outputs[0].dims, a);
}

// ResizeGrad (dY) -> dX, dX of the forward input's dims.
inline Status check_resize_grad(const KernelCall& call, ResizeArgs* a) {
  RETURN_IF_ERROR(check_arity(call, "ResizeGrad", 1, 1));
  return resize_args(call, call.outputs[0].dims, call.inputs[0].dims, a);
}

}  // namespace pt::kernels
