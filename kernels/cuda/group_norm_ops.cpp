// The CUDA wrappers of GroupNormalization, InstanceNormalization (the same kernel, one channel per
// group) and GroupNormalizationGrad (group_norm.cu). Checks: kernels/checks/group_norm.h.
#include "kernels/checks/group_norm.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

namespace {

GroupNormGeom geom_of(const kernels::GroupNormGeometry& k) {
  GroupNormGeom g;
  g.n = k.n;
  g.g = k.g;
  g.spatial = k.spatial;
  g.channels_per_group = k.per_group_channels;
  g.block = k.block;
  g.per_group = k.per_group;
  g.eps = k.epsilon;
  return g;
}

}  // namespace

template <typename T>
Status group_norm(const KernelCall& call) {
  kernels::GroupNormGeometry geo;
  RETURN_IF_ERROR(kernels::check_group_norm(call, &geo));
  PT_CUDA_CHECK(launch_group_norm<T>(geom_of(geo), call.outputs[0].as<T>(), call.inputs[0].as<T>(), call.inputs[1].as<T>(),
                                     call.inputs[2].as<T>(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status group_norm_grad(const KernelCall& call) {
  kernels::GroupNormGeometry geo;
  RETURN_IF_ERROR(kernels::check_group_norm_grad(call, &geo));
  auto out = [&](size_t i) { return call.outputs[i].data ? call.outputs[i].as<T>() : nullptr; };
  ScratchBuffer stats;  // per (sample, group): mean, 1/stddev
  RETURN_IF_ERROR(stats.allocate(static_cast<size_t>(2 * std::max<int64_t>(geo.n * geo.g, 1)) * sizeof(double),
                                 stream_of(call)));
  PT_CUDA_CHECK(launch_group_norm_grad<T>(geom_of(geo), out(0), out(1), out(2), call.inputs[0].as<T>(),
                                          call.inputs[1].as<T>(), call.inputs[2].as<T>(), stats.as<double>(),
                                          stream_of(call)));
  return Status::ok();
}

template Status group_norm<float>(const KernelCall&);
template Status group_norm<double>(const KernelCall&);
template Status group_norm_grad<float>(const KernelCall&);
template Status group_norm_grad<double>(const KernelCall&);

}  // namespace pt::cuda
