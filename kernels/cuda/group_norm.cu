// GroupNormalization and InstanceNormalization (one channel per group) on the device, and their
// gradient (kernels/cpu/group_norm.cpp is the reference): one block of threads per (sample, group)
// for the statistics and the element-wise parts, one thread per parameter for dScale and dBias,
// summed in the CPU's order.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

__device__ __forceinline__ int64_t param_of(const GroupNormGeom& g, int64_t grp, int64_t i) {
  return g.per_group ? grp : grp * g.channels_per_group + i / g.spatial;
}

template <typename T>
__global__ void group_norm_kernel(GroupNormGeom g, T* y, const T* x, const T* scale, const T* bias) {
  __shared__ double shared[32];
  const int64_t blocks = g.n * g.g;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t grp = b % g.g;
    const T* xb = x + b * g.block;
    T* yb = y + b * g.block;
    double mean, rstd;
    block_mean_rstd(xb, g.block, g.eps, shared, &mean, &rstd);
    for (int64_t i = threadIdx.x; i < g.block; i += blockDim.x) {
      const int64_t p = param_of(g, grp, i);
      yb[i] = static_cast<T>((static_cast<double>(xb[i]) - mean) * rstd * static_cast<double>(scale[p]) +
                             static_cast<double>(bias[p]));
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void group_norm_grad_dx_kernel(GroupNormGeom g, T* dx, double* stats, const T* dy, const T* x,
                                          const T* scale) {
  __shared__ double shared[32];
  __shared__ double m1_shared, m2_shared;
  const int64_t blocks = g.n * g.g;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t grp = b % g.g;
    const T* xb = x + b * g.block;
    const T* dyb = dy + b * g.block;
    double mean, rstd;
    block_mean_rstd(xb, g.block, g.eps, shared, &mean, &rstd);
    double s1 = 0, s2 = 0;
    for (int64_t i = threadIdx.x; i < g.block; i += blockDim.x) {
      const double xhat = (static_cast<double>(xb[i]) - mean) * rstd;
      const double dxhat = static_cast<double>(dyb[i]) * static_cast<double>(scale[param_of(g, grp, i)]);
      s1 += dxhat;
      s2 += dxhat * xhat;
    }
    s1 = block_sum(s1, shared);
    s2 = block_sum(s2, shared);
    if (threadIdx.x == 0) {
      const double inv = g.block ? 1.0 / static_cast<double>(g.block) : 0.0;
      m1_shared = s1 * inv;
      m2_shared = s2 * inv;
      stats[2 * b] = mean;
      stats[2 * b + 1] = rstd;
    }
    __syncthreads();
    if (dx) {
      T* dxb = dx + b * g.block;
      for (int64_t i = threadIdx.x; i < g.block; i += blockDim.x) {
        const double xhat = (static_cast<double>(xb[i]) - mean) * rstd;
        dxb[i] = static_cast<T>(rstd * (static_cast<double>(dyb[i]) * static_cast<double>(scale[param_of(g, grp, i)]) -
                                        m1_shared - xhat * m2_shared));
      }
    }
    __syncthreads();
  }
}

// One thread per parameter p: its elements in every sample's block, in the CPU's order.
template <typename T>
__global__ void group_norm_grad_params_kernel(GroupNormGeom g, T* dscale, T* dbias, const double* stats, const T* dy,
                                              const T* x, int64_t params) {
  for (int64_t p = global_index(); p < params; p += global_stride()) {
    const int64_t grp = g.per_group ? p : p / g.channels_per_group;
    const int64_t first = g.per_group ? 0 : (p % g.channels_per_group) * g.spatial;
    const int64_t len = g.per_group ? g.block : g.spatial;
    double ds = 0, db = 0;
    for (int64_t nn = 0; nn < g.n; ++nn) {
      const int64_t b = nn * g.g + grp;
      const double mean = stats[2 * b], rstd = stats[2 * b + 1];
      const T* xb = x + b * g.block + first;
      const T* dyb = dy + b * g.block + first;
      for (int64_t i = 0; i < len; ++i) {
        const double d = static_cast<double>(dyb[i]);
        ds += d * ((static_cast<double>(xb[i]) - mean) * rstd);
        db += d;
      }
    }
    if (dscale) dscale[p] = static_cast<T>(ds);
    if (dbias) dbias[p] = static_cast<T>(db);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_group_norm(const GroupNormGeom& g, T* y, const T* x, const T* scale, const T* bias,
                              cudaStream_t stream) {
  if (g.n * g.g <= 0 || g.block <= 0) return cudaSuccess;
  group_norm_kernel<T><<<row_grid(g.n * g.g), kBlock, 0, stream>>>(g, y, x, scale, bias);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_group_norm_grad(const GroupNormGeom& g, T* dx, T* dscale, T* dbias, const T* dy, const T* x,
                                   const T* scale, double* stats, cudaStream_t stream) {
  const int64_t params = g.per_group ? g.g : g.g * g.channels_per_group;
  if (g.n * g.g <= 0 || g.block <= 0) {
    // No elements: the parameters' gradients are zeros, as the CPU writes them.
    if (dscale && params > 0) {
      const cudaError_t e = cudaMemsetAsync(dscale, 0, static_cast<size_t>(params) * sizeof(T), stream);
      if (e != cudaSuccess) return e;
    }
    if (dbias && params > 0) return cudaMemsetAsync(dbias, 0, static_cast<size_t>(params) * sizeof(T), stream);
    return cudaSuccess;
  }
  group_norm_grad_dx_kernel<T><<<row_grid(g.n * g.g), kBlock, 0, stream>>>(g, dx, stats, dy, x, scale);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || (!dscale && !dbias)) return e;
  group_norm_grad_params_kernel<T><<<grid_for(params), kBlock, 0, stream>>>(g, dscale, dbias, stats, dy, x, params);
  return cudaGetLastError();
}

template cudaError_t launch_group_norm<float>(const GroupNormGeom&, float*, const float*, const float*, const float*,
                                              cudaStream_t);
template cudaError_t launch_group_norm<double>(const GroupNormGeom&, double*, const double*, const double*,
                                               const double*, cudaStream_t);
template cudaError_t launch_group_norm_grad<float>(const GroupNormGeom&, float*, float*, float*, const float*,
                                                   const float*, const float*, double*, cudaStream_t);
template cudaError_t launch_group_norm_grad<double>(const GroupNormGeom&, double*, double*, double*, const double*,
                                                    const double*, const double*, double*, cudaStream_t);

}  // namespace pt::cuda
