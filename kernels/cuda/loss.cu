// Loss kernels: the per-sample part of SoftmaxCrossEntropyLoss (the log-softmax itself comes from
// cuDNN in nn_ops.cpp), its gradient, and MSELoss with its gradient. Labels are checked here, on
// the device, into the deferred error word (launch.h): no host round trip per step. Formulas and the "mean over
// zero total weight is 0" rule as kernels/cpu/loss.cpp. Totals are summed in double by one block
// of 1024 threads (a loss has N*D samples: small next to the step's other work).
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

constexpr int kLossThreads = 1024;

__device__ __forceinline__ int64_t label_at(const void* labels, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(labels)[i] : static_cast<const int32_t*>(labels)[i];
}

// Sample i's label (-1 when ignored) and weight (0 when ignored). A label outside [0, c) that is
// not ignored is recorded in err (when given) and counts as ignored.
template <typename T>
__device__ __forceinline__ int64_t sample(const void* labels, bool i64, const T* weights, bool has_ignore,
                                          int64_t ignore, int64_t c, int64_t i, double* w, DeferredError* err,
                                          int op) {
  const int64_t l = label_at(labels, i64, i);
  if ((has_ignore && l == ignore) || l < 0 || l >= c) {
    if (!(has_ignore && l == ignore)) record_deferred_error(err, kDeferredLabelOutOfRange, op, l, c, i);
    *w = 0.0;
    return -1;
  }
  *w = weights ? static_cast<double>(weights[l]) : 1.0;
  return l;
}

template <typename T>
__global__ void sce_loss_kernel(T* loss, const T* logp, const void* labels, bool i64, const T* weights,
                                bool has_ignore, int64_t ignore, int64_t n, int64_t c, int64_t d, int reduction,
                                DeferredError* err) {
  __shared__ double shared[32];
  const int64_t ns = n * d;
  double total = 0, wsum = 0;
  for (int64_t i = threadIdx.x; i < ns; i += blockDim.x) {
    double w;
    const int64_t l = sample(labels, i64, weights, has_ignore, ignore, c, i, &w, err, kDeferredOpSceLoss);
    double li = 0;
    if (l >= 0) {
      const int64_t nn = i / d, dd = i % d;
      li = -w * static_cast<double>(logp[(nn * c + l) * d + dd]);
    }
    if (reduction == 2) loss[i] = static_cast<T>(li);
    total += li;
    wsum += w;
  }
  if (reduction == 2) return;
  total = block_sum(total, shared);
  wsum = block_sum(wsum, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(reduction == 1 ? total : (wsum != 0 ? total / wsum : 0.0));
}

// scale[0]: the factor on every sample's (softmax - onehot) for reductions mean and sum.
template <typename T>
__global__ void sce_scale_kernel(double* scale, const T* dloss, const void* labels, bool i64, const T* weights,
                                 bool has_ignore, int64_t ignore, int64_t c, int64_t ns, int reduction) {
  __shared__ double shared[32];
  double wsum = 0;
  if (reduction == 0)
    for (int64_t i = threadIdx.x; i < ns; i += blockDim.x) {
      double w;
      (void)sample(labels, i64, weights, has_ignore, ignore, c, i, &w, static_cast<DeferredError*>(nullptr), 0);
      wsum += w;
    }
  wsum = block_sum(wsum, shared);
  if (threadIdx.x == 0) {
    const double dl = static_cast<double>(dloss[0]);
    scale[0] = reduction == 0 ? (wsum != 0 ? dl / wsum : 0.0) : dl;
  }
}

template <typename T>
__global__ void sce_grad_kernel(T* ds, const T* dloss, const double* scale, const T* logp, const void* labels,
                                bool i64, const T* weights, bool has_ignore, int64_t ignore, int64_t c, int64_t d,
                                int64_t total, int reduction, DeferredError* err) {
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const int64_t dd = e % d, cc = (e / d) % c, nn = e / (c * d), i = nn * d + dd;
    double w;
    // One record per sample: from the thread of its class 0.
    const int64_t l = sample(labels, i64, weights, has_ignore, ignore, c, i, &w, cc == 0 ? err : nullptr,
                             kDeferredOpSceLossGrad);
    const double g = reduction == 2 ? static_cast<double>(dloss[i]) : scale[0];
    const T cf = static_cast<T>(w * g);
    T v = exp(logp[e]) * cf;
    if (l == cc) v -= cf;
    ds[e] = v;
  }
}

template <typename T>
__global__ void mse_loss_kernel(T* loss, const T* p, const T* t, int64_t n, bool mean) {
  __shared__ double shared[32];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double e = static_cast<double>(p[i]) - static_cast<double>(t[i]);
    s += e * e;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(mean ? (n > 0 ? s / static_cast<double>(n) : 0.0) : s);
}

template <typename T>
__global__ void mse_grad_kernel(T* dp, const T* dloss, const T* p, const T* t, int64_t n, bool mean) {
  const T k = static_cast<T>(2.0 * static_cast<double>(dloss[0]) / (mean && n > 0 ? static_cast<double>(n) : 1.0));
  for (int64_t i = global_index(); i < n; i += global_stride()) dp[i] = k * (p[i] - t[i]);
}

}  // namespace

template <typename T>
cudaError_t launch_sce_loss(T* loss, const T* logp, const void* labels, bool labels_i64, const T* weights,
                            bool has_ignore, int64_t ignore, int64_t n, int64_t c, int64_t d, int reduction,
                            DeferredError* err, cudaStream_t stream) {
  sce_loss_kernel<T><<<1, kLossThreads, 0, stream>>>(loss, logp, labels, labels_i64, weights, has_ignore, ignore, n,
                                                     c, d, reduction, err);
  return cudaGetLastError();
}

// scale: a device double of scratch (the factor of reductions mean and sum).
template <typename T>
cudaError_t launch_sce_loss_grad(T* dscores, double* scale, const T* dloss, const T* logp,
                                         const void* labels, bool labels_i64, const T* weights, bool has_ignore,
                                         int64_t ignore, int64_t n, int64_t c, int64_t d, int reduction,
                                         DeferredError* err, cudaStream_t stream) {
  const int64_t total = n * c * d;
  if (total <= 0) return cudaSuccess;
  if (reduction != 2) {
    sce_scale_kernel<T><<<1, kLossThreads, 0, stream>>>(scale, dloss, labels, labels_i64, weights, has_ignore,
                                                        ignore, c, n * d, reduction);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  sce_grad_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(dscores, dloss, scale, logp, labels, labels_i64,
                                                             weights, has_ignore, ignore, c, d, total, reduction, err);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_mse_loss(T* loss, const T* p, const T* t, int64_t n, bool mean, cudaStream_t stream) {
  mse_loss_kernel<T><<<1, kLossThreads, 0, stream>>>(loss, p, t, n, mean);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_mse_loss_grad(T* dp, const T* dloss, const T* p, const T* t, int64_t n, bool mean,
                                 cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  mse_grad_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(dp, dloss, p, t, n, mean);
  return cudaGetLastError();
}

#define PT_LOSS(T)                                                                                                \
  template cudaError_t launch_sce_loss<T>(T*, const T*, const void*, bool, const T*, bool, int64_t, int64_t,       \
                                          int64_t, int64_t, int, DeferredError*, cudaStream_t);                   \
  template cudaError_t launch_sce_loss_grad<T>(T*, double*, const T*, const T*, const void*, bool,         \
                                                       const T*, bool, int64_t, int64_t, int64_t, int64_t, int,    \
                                                       DeferredError*, cudaStream_t);                             \
  template cudaError_t launch_mse_loss<T>(T*, const T*, const T*, int64_t, bool, cudaStream_t);                    \
  template cudaError_t launch_mse_loss_grad<T>(T*, const T*, const T*, const T*, int64_t, bool, cudaStream_t);
PT_LOSS(float)
PT_LOSS(double)
#undef PT_LOSS

}  // namespace pt::cuda
