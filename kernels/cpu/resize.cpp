// Resize (opsets 10 to 21; nearest and linear, the modes PyTorch exports) and its backward op on
// the CPU. The shape function leaves per-dim `_scales` (the scale each coordinate transform
// divides by), `_coord` (coordinate_transformation_mode) and `_nearest` (nearest_mode), checked and
// mapped by kernels/checks/resize.h and resize_map.h (shared with CUDA). Both passes use one table
// per dim of (source index, weight) pairs: linear interpolation is separable,
// so an output element is the weighted sum over the product of its dims' pairs, and the backward
// op adds dY into dX with the same weights.
#include <vector>

#include "kernels/checks/resize.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

using resize_map::Tap;

// One table per dim of the taps of its output coordinates (kernels/checks/resize_map.h).
std::vector<std::vector<Tap>> taps(const kernels::ResizeArgs& a, const Dims& in, const Dims& out) {
  std::vector<std::vector<Tap>> t(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    t[d].resize(static_cast<size_t>(out[d]));
    for (int64_t o = 0; o < out[d]; ++o)
      t[d][o] = resize_map::tap(a.linear, a.coord, a.nearest, o, in[d], out[d], a.scales[d]);
  }
  return t;
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
  kernels::ResizeArgs a;
  RETURN_IF_ERROR(kernels::check_resize(call, &a));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const std::vector<std::vector<Tap>> t = taps(a, x.dims, y.dims);
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
  kernels::ResizeArgs a;
  RETURN_IF_ERROR(kernels::check_resize_grad(call, &a));
  const TensorView& dy = call.inputs[0];
  const TensorView& dx = call.outputs[0];
  const std::vector<std::vector<Tap>> t = taps(a, dx.dims, dy.dims);
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
