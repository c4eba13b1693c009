// Resize (opsets 10 to 21; nearest and linear, the modes PyTorch exports) and its backward op on
// the CPU. The shape function leaves per-dim `_scales` (the scale each coordinate transform
// divides by), `_coord` (coordinate_transformation_mode) and `_nearest` (nearest_mode). Both
// passes use one table per dim of (source index, weight) pairs: linear interpolation is separable,
// so an output element is the weighted sum over the product of its dims' pairs, and the backward
// op adds dY into dX with the same weights.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

struct Tap {
  int64_t i0 = 0, i1 = 0;
  double w0 = 1, w1 = 0;
};

// x_original for output coordinate x along a dim of `in` -> `out` elements at scale `s`.
double source_coord(const std::string& mode, double x, int64_t in, int64_t out, double s) {
  if (mode == "half_pixel") return (x + 0.5) / s - 0.5;
  if (mode == "pytorch_half_pixel") return out > 1 ? (x + 0.5) / s - 0.5 : 0.0;
  if (mode == "align_corners") {  // over the resized length in * s, which scales make fractional
    const double len = static_cast<double>(in) * s;
    return out == 1 || len == 1.0 ? 0.0 : x * static_cast<double>(in - 1) / (len - 1);
  }
  if (mode == "tf_half_pixel_for_nn") return (x + 0.5) / s;
  if (mode == "half_pixel_symmetric") {
    const double width = s * static_cast<double>(in);
    const double adjustment = static_cast<double>(out) / width;
    const double center = static_cast<double>(in) / 2;
    return center * (1 - adjustment) + (x + 0.5) / s - 0.5;
  }
  return x / s;  // asymmetric
}

int64_t nearest_index(const std::string& mode, double x) {
  if (mode == "floor") return static_cast<int64_t>(std::floor(x));
  if (mode == "ceil") return static_cast<int64_t>(std::ceil(x));
  const double f = std::floor(x);
  if (x - f == 0.5) return static_cast<int64_t>(mode == "round_prefer_ceil" ? f + 1 : f);
  return static_cast<int64_t>(std::round(x));
}

Status taps(const KernelCall& call, const Dims& in, const Dims& out, std::vector<std::vector<Tap>>* t) {
  const std::vector<float> scales = call.attrs.get_floats("_scales");
  if (in.size() != out.size() || scales.size() != in.size())
    return invalid_input("Resize: input " + dims_str(in) + ", output " + dims_str(out) + " and scales disagree");
  const std::string mode = call.attrs.get_string("mode", "nearest");
  const std::string coord = call.attrs.get_string("_coord", "half_pixel");
  const std::string nearest = call.attrs.get_string("_nearest", "round_prefer_floor");
  if (mode != "nearest" && mode != "linear") return unsupported("Resize: mode '" + mode + "'");
  t->assign(in.size(), {});
  for (size_t d = 0; d < in.size(); ++d) {
    auto& v = (*t)[d];
    v.resize(static_cast<size_t>(out[d]));
    for (int64_t o = 0; o < out[d]; ++o) {
      Tap& tp = v[o];
      if (in[d] == out[d] && scales[d] == 1.0f) {
        tp.i0 = tp.i1 = o;
        continue;
      }
      const double x = source_coord(coord, static_cast<double>(o), in[d], out[d], scales[d]);
      if (mode == "nearest") {
        tp.i0 = tp.i1 = std::clamp<int64_t>(nearest_index(nearest, x), 0, in[d] - 1);
      } else {
        const double xc = std::clamp(x, 0.0, static_cast<double>(in[d] - 1));
        tp.i0 = static_cast<int64_t>(std::floor(xc));
        tp.i1 = std::min<int64_t>(tp.i0 + 1, in[d] - 1);
        tp.w1 = xc - static_cast<double>(tp.i0);
        tp.w0 = 1 - tp.w1;
      }
    }
  }
  return Status::ok();
}

// Calls fn(out_index, in_index, weight) for every (output element, source element) pair.
template <typename Fn>
void for_each_pair(const Dims& in, const Dims& out, const std::vector<std::vector<Tap>>& t, Fn&& fn) {
  const size_t r = in.size();
  const Dims is = row_major_strides(in);
  std::vector<int64_t> coord(r, 0);
  const int64_t n = numel(out);
  for (int64_t o = 0; o < n; ++o) {
    for (int64_t corner = 0; corner < (int64_t{1} << r); ++corner) {
      double w = 1;
      int64_t off = 0;
      for (size_t d = 0; d < r && w != 0; ++d) {
        const Tap& tp = t[d][coord[d]];
        const bool hi = (corner >> d) & 1;
        if (hi && tp.i1 == tp.i0) { w = 0; break; }  // one tap: counted once, by the low corner
        w *= hi ? tp.w1 : tp.w0;
        off += (hi ? tp.i1 : tp.i0) * is[d];
      }
      if (w != 0) fn(o, off, w);
    }
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++coord[d] == out[d]; --d) coord[d] = 0;
  }
}

}  // namespace

// (X, roi, scales, sizes) -> Y; only X is read (the shape function consumed the rest).
template <typename T>
Status resize(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Resize", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  std::vector<std::vector<Tap>> t;
  RETURN_IF_ERROR(taps(call, x.dims, y.dims, &t));
  const T* px = x.as<T>();
  T* py = y.as<T>();
  std::vector<double> acc(static_cast<size_t>(y.size()), 0.0);
  for_each_pair(x.dims, y.dims, t, [&](int64_t o, int64_t i, double w) { acc[o] += w * px[i]; });
  for (int64_t o = 0; o < y.size(); ++o) py[o] = static_cast<T>(acc[o]);
  return Status::ok();
}

// (dY) -> dX (the output's dims are X's): dY spread back with the forward's weights.
template <typename T>
Status resize_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ResizeGrad", 1, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& dx = call.outputs[0];
  std::vector<std::vector<Tap>> t;
  RETURN_IF_ERROR(taps(call, dx.dims, dy.dims, &t));
  const T* pdy = dy.as<T>();
  T* pdx = dx.as<T>();
  std::vector<double> acc(static_cast<size_t>(dx.size()), 0.0);
  for_each_pair(dx.dims, dy.dims, t, [&](int64_t o, int64_t i, double w) { acc[i] += w * pdy[o]; });
  for (int64_t i = 0; i < dx.size(); ++i) pdx[i] = static_cast<T>(acc[i]);
  return Status::ok();
}

template Status resize<float>(const KernelCall&);
template Status resize<double>(const KernelCall&);
template Status resize_grad<float>(const KernelCall&);
template Status resize_grad<double>(const KernelCall&);

}  // namespace pt::cpu
