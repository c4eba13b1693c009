// The fused optimizer step of a parameter group: SGD with momentum in the SpecTrain paper's form
// (kernels/cpu/optimizer.cpp) over up to kMaxGroupTensors tensors in one launch, optionally also
// writing SpecTrain's predicted weights W - s*lr*V for the next pass; and the prediction alone.
// torch.optim.SGD and Adam / AdamW over up to kMaxGroupTensors tensors in one launch (a single
// tensor is a group of one), each with its step count on the device, and Adam's SpecTrain prediction.
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

// The tensor of chunk c: the last t with chunk[t] <= c (a tensor of no chunks never is: the one
// after it starts at the same chunk).
__device__ __forceinline__ int tensor_of_chunk(const GroupLayout& l, int64_t c) {
  int lo = 0, hi = l.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (l.chunk[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The elements [*lo, *hi) of tensor t that chunk c covers.
__device__ __forceinline__ void chunk_range(const GroupLayout& l, int t, int64_t c, int64_t* lo, int64_t* hi) {
  const int64_t n = l.begin[t + 1] - l.begin[t];
  *lo = (c - l.chunk[t]) * kGroupChunk;
  *hi = *lo + kGroupChunk < n ? *lo + kGroupChunk : n;
}

template <typename T>
__global__ void sgd_torch_kernel(const __grid_constant__ SgdTorchGroup<T> group, const T* lr_dev, T mom, T damp1,
                                 T wd) {
  const T rate = *lr_dev;
  const GroupLayout& l = group.layout;
  for (int64_t c = blockIdx.x; c < l.chunk[l.count]; c += gridDim.x) {
    const int t = tensor_of_chunk(l, c);
    int64_t lo, hi;
    chunk_range(l, t, c, &lo, &hi);
    T* w = group.w[t];
    const T* g = group.g[t];
    T* buf = group.buf[t];
    T* d = group.d[t];
    const bool first = *group.step[t] == 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
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
}

// After a group's update kernel (stream order): each tensor's step count, one thread each.
template <typename G>
__global__ void increment_steps_kernel(const __grid_constant__ G group) {
  if (static_cast<int>(threadIdx.x) < group.layout.count) ++*group.step[threadIdx.x];
}

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
__global__ void adam_kernel(const __grid_constant__ AdamGroup<T> group, const T* lr_dev, double b1d, double b2d,
                            T eps, double wdd, bool decoupled) {
  __shared__ AdamDev c;
  const T b1 = static_cast<T>(b1d), b2 = static_cast<T>(b2d);
  const T one_m_b1 = static_cast<T>(1.0 - b1d), one_m_b2 = static_cast<T>(1.0 - b2d);
  const T wd = decoupled ? T(0) : static_cast<T>(wdd);
  const GroupLayout& l = group.layout;
  int scalars_of = -1;  // the tensor whose scalars c holds (block-uniform, like t)
  for (int64_t k = blockIdx.x; k < l.chunk[l.count]; k += gridDim.x) {
    const int t = tensor_of_chunk(l, k);
    if (t != scalars_of) {
      __syncthreads();  // every thread is done with the previous tensor's scalars
      if (threadIdx.x == 0)
        c = adam_dev(static_cast<double>(*lr_dev), *group.step[t] + 1, b1d, b2d, wdd, decoupled);
      __syncthreads();
      scalars_of = t;
    }
    const T decay = static_cast<T>(c.decay), neg_step = static_cast<T>(-c.step_size);
    const T bc2s = static_cast<T>(c.bc2_sqrt);
    int64_t lo, hi;
    chunk_range(l, t, k, &lo, &hi);
    T* w = group.w[t];
    const T* g = group.g[t];
    T* m = group.m[t];
    T* v = group.v[t];
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      const T wi = decoupled ? w[i] * decay : w[i];
      const T gi = g[i] + wd * wi;
      const T mi = m[i] * b1 + one_m_b1 * gi;
      const T vi = v[i] * b2 + one_m_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      w[i] = wi + neg_step * mi / (sqrt(vi) / bc2s + eps);
    }
  }
}

// Blocks of a group's launch: one per chunk, at most kMaxBlocks.
inline unsigned group_grid(const GroupLayout& l) {
  const int64_t chunks = l.chunk[l.count];
  return static_cast<unsigned>(chunks < 1 ? 1 : (chunks > kMaxBlocks ? kMaxBlocks : chunks));
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
cudaError_t launch_sgd_torch(const SgdTorchGroup<T>& group, const T* lr_dev, double momentum, double dampening,
                             double wd, cudaStream_t stream) {
  const GroupLayout& l = group.layout;
  if (l.count <= 0 || l.count > kMaxGroupTensors) return cudaErrorInvalidValue;
  if (l.chunk[l.count] > 0)
    sgd_torch_kernel<T><<<group_grid(l), kBlock, 0, stream>>>(group, lr_dev, static_cast<T>(momentum),
                                                              static_cast<T>(1.0 - dampening), static_cast<T>(wd));
  increment_steps_kernel<<<1, kMaxGroupTensors, 0, stream>>>(group);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_adam(const AdamGroup<T>& group, const T* lr_dev, double beta1, double beta2, double eps, double wd,
                        bool decoupled, cudaStream_t stream) {
  const GroupLayout& l = group.layout;
  if (l.count <= 0 || l.count > kMaxGroupTensors) return cudaErrorInvalidValue;
  if (l.chunk[l.count] > 0)
    adam_kernel<T><<<group_grid(l), kBlock, 0, stream>>>(group, lr_dev, beta1, beta2, static_cast<T>(eps), wd,
                                                         decoupled);
  increment_steps_kernel<<<1, kMaxGroupTensors, 0, stream>>>(group);
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
  template cudaError_t launch_sgd_torch<T>(const SgdTorchGroup<T>&, const T*, double, double, double, cudaStream_t); \
  template cudaError_t launch_adam<T>(const AdamGroup<T>&, const T*, double, double, double, double, bool,            \
                                      cudaStream_t);                                                                  \
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
