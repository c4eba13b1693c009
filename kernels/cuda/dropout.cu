// Dropout and DropoutGrad with the counter-based masks of kernels/dropout_rng.h, so that a CPU
// and a GPU run of the same (seed, step) drop the same elements. The step counter is read on the
// device: an evaluation pass (step < 0) needs no host round trip.
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/dropout_rng.h"

namespace pt::cuda {

namespace {

template <typename T>
__global__ void dropout_kernel(T* y, bool* mask, const T* x, const int64_t* step, int64_t n, float ratio,
                               bool training, uint64_t seed, T scale) {
  const int64_t st = step ? *step : -1;
  const bool active = training && st >= 0 && ratio > 0.0f;
  const uint64_t key = active ? dropout_key(seed, static_cast<uint64_t>(st)) : 0;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const bool keep = !active || dropout_keep(key, static_cast<uint64_t>(i), ratio);
    y[i] = active ? (keep ? x[i] * scale : T(0)) : x[i];
    if (mask) mask[i] = keep;
  }
}

template <typename T>
__global__ void dropout_grad_kernel(T* dx, const T* dy, const bool* mask, int64_t n, T scale) {
  for (int64_t i = global_index(); i < n; i += global_stride()) dx[i] = mask[i] ? dy[i] * scale : T(0);
}

}  // namespace

template <typename T>
cudaError_t launch_dropout(T* y, bool* mask, const T* x, const int64_t* step, int64_t n, float ratio, bool training,
                           uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const T scale = static_cast<T>(1.0 / (1.0 - static_cast<double>(ratio)));
  dropout_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(y, mask, x, step, n, ratio, training, seed, scale);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_dropout_grad(T* dx, const T* dy, const bool* mask, int64_t n, float ratio, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const T scale = static_cast<T>(1.0 / (1.0 - static_cast<double>(ratio)));
  dropout_grad_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(dx, dy, mask, n, scale);
  return cudaGetLastError();
}

template cudaError_t launch_dropout<float>(float*, bool*, const float*, const int64_t*, int64_t, float, bool, uint64_t,
                                           cudaStream_t);
template cudaError_t launch_dropout<double>(double*, bool*, const double*, const int64_t*, int64_t, float, bool,
                                            uint64_t, cudaStream_t);
template cudaError_t launch_dropout_grad<float>(float*, const float*, const bool*, int64_t, float, cudaStream_t);
template cudaError_t launch_dropout_grad<double>(double*, const double*, const bool*, int64_t, float, cudaStream_t);

}  // namespace pt::cuda
