// The fused optimizer step of a parameter group: SGD with momentum in the SpecTrain paper's form
// (kernels/cpu/optimizer.cpp) over up to kMaxGroupTensors tensors in one launch, optionally also
// writing SpecTrain's predicted weights W - s*lr*V for the next pass; and the prediction alone.
// The learning rate is read on the device (a schedule can change it without a host round trip).
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

// The tensor of group element e: the last t with begin[t] <= e (binary search; count <= 64).
template <typename T>
__device__ __forceinline__ int tensor_of(const SgdGroup<T>& g, int64_t e) {
  int lo = 0, hi = g.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (g.begin[mid] <= e) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <typename T>
__global__ void sgd_spectrain_kernel(const __grid_constant__ SgdGroup<T> group, const T* lr_dev, T lr_host,
                                     T gamma, T wd, T s_pred) {
  const T rate = lr_dev ? *lr_dev : lr_host;
  const T one_m = T(1) - gamma;
  const T pred_k = s_pred * rate;
  const int64_t total = group.begin[group.count];
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const int t = tensor_of(group, e);
    const int64_t i = e - group.begin[t];
    T* w = group.w[t];
    T* v = group.v[t];
    const T wi = w[i];
    const T gi = group.g[t][i] + wd * wi;
    const T vi = gamma * v[i] + one_m * gi;
    const T wn = wi - rate * vi;
    v[i] = vi;
    w[i] = wn;
    if (T* p = group.pred[t]) p[i] = wn - pred_k * vi;
  }
}

template <typename T>
__global__ void predict_kernel(T* out, const T* w, const T* v, const T* lr_dev, T lr_host, T s, int64_t n) {
  const T c = s * (lr_dev ? *lr_dev : lr_host);
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = w[i] - c * v[i];
}

}  // namespace

template <typename T>
cudaError_t launch_sgd_spectrain(const SgdGroup<T>& group, const T* lr_dev, double lr_host, double gamma, double wd,
                                 double s_pred, cudaStream_t stream) {
  if (group.count <= 0 || group.count > kMaxGroupTensors) return cudaErrorInvalidValue;
  const int64_t total = group.begin[group.count];
  if (total <= 0) return cudaSuccess;
  sgd_spectrain_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(group, lr_dev, static_cast<T>(lr_host),
                                                                  static_cast<T>(gamma), static_cast<T>(wd),
                                                                  static_cast<T>(s_pred));
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_spectrain_predict(T* out, const T* w, const T* v, const T* lr_dev, double lr_host, double s,
                                     int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  predict_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(out, w, v, lr_dev, static_cast<T>(lr_host),
                                                        static_cast<T>(s), n);
  return cudaGetLastError();
}

template cudaError_t launch_sgd_spectrain<float>(const SgdGroup<float>&, const float*, double, double, double, double,
                                                 cudaStream_t);
template cudaError_t launch_sgd_spectrain<double>(const SgdGroup<double>&, const double*, double, double, double,
                                                  double, cudaStream_t);
template cudaError_t launch_spectrain_predict<float>(float*, const float*, const float*, const float*, double, double,
                                                     int64_t, cudaStream_t);
template cudaError_t launch_spectrain_predict<double>(double*, const double*, const double*, const double*, double,
                                                      double, int64_t, cudaStream_t);

}  // namespace pt::cuda
