// The CUDA wrappers of Resize and ResizeGrad (resize.cu): the CPU's checks (kernels/checks/resize.h),
// then a geometry built from the dims and attributes alone (the scales and sizes inputs were
// consumed at import, so nothing is read back from the device). A map the kernels cannot follow
// exactly as the CPU does runs the CPU kernel through the host fallback: rank above kMaxRank after
// merging, an empty input, or a scale that is not a positive finite number or makes the source
// coordinates overflow (the backward's search needs a monotone map; importer-made nodes never are).
#include <cmath>
#include <string>

#include "kernels/checks/resize.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fallback.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

namespace {

// Whether the map of every dim that is not left alone is monotone and its coordinates fit int64
// (checked at both ends: each coordinate transform is monotone in the output coordinate).
bool kernel_can_map(const ResizeGeom& g) {
  for (int d = 0; d < g.rank; ++d) {
    const int64_t in = g.in[d], out = g.out[d];
    const float s = g.scale[d];
    if ((in == out && s == 1.0f) || out == 0) continue;
    if (!std::isfinite(s) || s <= 0) return false;
    if (g.coord == resize_map::Coord::kAlignCorners && out != 1) {
      const double len = static_cast<double>(in) * s;
      if (len != 1.0 && !(len - 1 > 0)) return false;
    }
    for (int64_t o : {int64_t{0}, out - 1}) {
      const double x = resize_map::source_coord(g.coord, static_cast<double>(o), in, out, s);
      if (!(std::fabs(x) < 1e18)) return false;
    }
  }
  return true;
}

// The geometry of a resize from `in` to `out` with neighbouring dims that the map leaves alone
// (same size, scale 1) merged; false when more than kMaxRank dims remain.
bool resize_geom(const kernels::ResizeArgs& a, const Dims& in, const Dims& out, ResizeGeom* g) {
  *g = ResizeGeom{};
  g->linear = a.linear;
  g->coord = a.coord;
  g->nearest = a.nearest;
  bool prev_alone = false;
  for (size_t d = 0; d < in.size(); ++d) {
    const bool alone = in[d] == out[d] && a.scales[d] == 1.0f;
    if (alone && prev_alone) {
      g->in[g->rank - 1] *= in[d];
      g->out[g->rank - 1] *= out[d];
      continue;
    }
    if (g->rank == kMaxRank) return false;
    g->in[g->rank] = in[d];
    g->out[g->rank] = out[d];
    g->scale[g->rank] = a.scales[d];
    ++g->rank;
    prev_alone = alone;
  }
  int64_t si = 1, so = 1;
  for (int d = g->rank - 1; d >= 0; --d) {
    g->in_stride[d] = si;
    g->out_stride[d] = so;
    si *= g->in[d];
    so *= g->out[d];
  }
  return kernel_can_map(*g);
}

}  // namespace

// (X, roi, scales, sizes) -> Y; only X is read.
template <typename T>
Status resize(const KernelCall& call) {
  kernels::ResizeArgs a;
  RETURN_IF_ERROR(kernels::check_resize(call, &a));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  if (y.size() == 0) return Status::ok();
  ResizeGeom g;
  if (x.size() == 0 || !resize_geom(a, x.dims, y.dims, &g)) return run_on_host(&cpu::resize<T>, call);
  PT_CUDA_CHECK(launch_resize<T>(g, y.as<T>(), x.as<T>(), y.size(), stream_of(call)));
  return Status::ok();
}

// (dY) -> dX, dX of the forward input's dims.
template <typename T>
Status resize_grad(const KernelCall& call) {
  kernels::ResizeArgs a;
  RETURN_IF_ERROR(kernels::check_resize_grad(call, &a));
  const TensorView& dy = call.inputs[0];
  const TensorView& dx = call.outputs[0];
  if (dx.size() == 0) return Status::ok();
  ResizeGeom g;
  if (!resize_geom(a, dx.dims, dy.dims, &g)) return run_on_host(&cpu::resize_grad<T>, call);
  PT_CUDA_CHECK(launch_resize_grad<T>(g, dx.as<T>(), dy.as<T>(), dx.size(), stream_of(call)));
  return Status::ok();
}

template Status resize<float>(const KernelCall&);
template Status resize<double>(const KernelCall&);
template Status resize_grad<float>(const KernelCall&);
template Status resize_grad<double>(const KernelCall&);

}  // namespace pt::cuda
