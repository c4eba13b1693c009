// The fused optimizer step of a parameter group: SGD with momentum in the SpecTrain paper's form
// (kernels/cpu/optimizer.cpp) over up to kMaxGroupTensors tensors in one launch, optionally also
// writing SpecTrain's predicted weights W - s*lr*V for the next pass; and the prediction alone.
// torch.optim.SGD and Adam / AdamW per tensor, with the step count on the device, and Adam's
// SpecTrain prediction.
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

template <typename T>
__global__ void sgd_torch_kernel(T* w, const T* g, T* buf, T* d, const int64_t* step, const T* lr_dev, int64_t n,
                                 T mom, T damp1, T wd) {
  const T rate = *lr_dev;
  const bool first = *step == 0;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const T di = g[i] + wd * w[i];
    T dir = di;
    if (mom != T(0)) {
      const T bi = first ? di : buf[i] * mom + damp1 * di;
      buf[i] = bi;
      dir = d ? di + mom * bi : bi;
      if (d) d[i] = dir;
    } else {
      buf[i] = di;  // no momentum: the buffer keeps the step's direction (SpecTrain predicts with it)
    }
    w[i] = w[i] - rate * dir;
  }
}

__global__ void increment_kernel(int64_t* step) { ++*step; }

// kernels/optimizer_math.h's adam_scalars on the device (.cu files include only CUDA headers).
struct AdamDev {
  double step_size, bc2_sqrt, decay;
};
__device__ __forceinline__ AdamDev adam_dev(double lr, int64_t t, double b1, double b2, double wd, bool decoupled) {
  AdamDev c;
  c.step_size = t > 0 ? lr / (1.0 - pow(b1, static_cast<double>(t))) : 0.0;
  c.bc2_sqrt = t > 0 ? sqrt(1.0 - pow(b2, static_cast<double>(t))) : 1.0;
  c.decay = decoupled ? 1.0 - lr * wd : 1.0;
  return c;
}

template <typename T>
__global__ void adam_kernel(T* w, const T* g, T* m, T* v, const int64_t* step, const T* lr_dev, int64_t n, double b1d,
                            double b2d, T eps, double wdd, bool decoupled) {
  __shared__ AdamDev c;
  if (threadIdx.x == 0) c = adam_dev(static_cast<double>(*lr_dev), *step + 1, b1d, b2d, wdd, decoupled);
  __syncthreads();
  const T b1 = static_cast<T>(b1d), b2 = static_cast<T>(b2d);
  const T one_m_b1 = static_cast<T>(1.0 - b1d), one_m_b2 = static_cast<T>(1.0 - b2d);
  const T wd = decoupled ? T(0) : static_cast<T>(wdd);
  const T decay = static_cast<T>(c.decay), neg_step = static_cast<T>(-c.step_size), bc2s = static_cast<T>(c.bc2_sqrt);
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const T wi = decoupled ? w[i] * decay : w[i];
    const T gi = g[i] + wd * wi;
    const T mi = m[i] * b1 + one_m_b1 * gi;
    const T vi = v[i] * b2 + one_m_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi + neg_step * mi / (sqrt(vi) / bc2s + eps);
  }
}

template <typename T>
__global__ void adam_predict_kernel(T* out, const T* w, const T* m, const T* v, const int64_t* step, const T* lr_dev,
                                    int64_t n, double s, double b1d, double b2d, T eps, double dwd) {
  __shared__ AdamDev c;
  __shared__ double rate;
  if (threadIdx.x == 0) {
    rate = static_cast<double>(*lr_dev);
    c = adam_dev(rate, *step, b1d, b2d, 0.0, false);
  }
  __syncthreads();
  const T a = static_cast<T>(s * c.step_size), bc2s = static_cast<T>(c.bc2_sqrt), d = static_cast<T>(s * rate * dwd);
  for (int64_t i = global_index(); i < n; i += global_stride())
    out[i] = w[i] - a * m[i] / (sqrt(v[i]) / bc2s + eps) - d * w[i];
}

}  // namespace

template <typename T>
cudaError_t launch_sgd_torch(T* w, const T* g, T* buf, T* d, int64_t* step, const T* lr_dev, int64_t n, double momentum,
                             double dampening, double wd, cudaStream_t stream) {
  if (n > 0)
    sgd_torch_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(w, g, buf, d, step, lr_dev, n, static_cast<T>(momentum),
                                                            static_cast<T>(1.0 - dampening), static_cast<T>(wd));
  increment_kernel<<<1, 1, 0, stream>>>(step);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_adam(T* w, const T* g, T* m, T* v, int64_t* step, const T* lr_dev, int64_t n, double beta1,
                        double beta2, double eps, double wd, bool decoupled, cudaStream_t stream) {
  if (n > 0)
    adam_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(w, g, m, v, step, lr_dev, n, beta1, beta2, static_cast<T>(eps), wd,
                                                       decoupled);
  increment_kernel<<<1, 1, 0, stream>>>(step);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_adam_predict(T* out, const T* w, const T* m, const T* v, const int64_t* step, const T* lr_dev,
                                int64_t n, double s, double beta1, double beta2, double eps, double decoupled_wd,
                                cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  adam_predict_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(out, w, m, v, step, lr_dev, n, s, beta1, beta2,
                                                             static_cast<T>(eps), decoupled_wd);
  return cudaGetLastError();
}

#define PT_OPT_INST(T)                                                                                              \
  template cudaError_t launch_sgd_torch<T>(T*, const T*, T*, T*, int64_t*, const T*, int64_t, double, double, double, \
                                           cudaStream_t);                                                          \
  template cudaError_t launch_adam<T>(T*, const T*, T*, T*, int64_t*, const T*, int64_t, double, double, double, double, \
                                      bool, cudaStream_t);                                                         \
  template cudaError_t launch_adam_predict<T>(T*, const T*, const T*, const T*, const int64_t*, const T*, int64_t,     \
                                              double, double, double, double, double, cudaStream_t);
PT_OPT_INST(float)
PT_OPT_INST(double)
#undef PT_OPT_INST

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
