// BatchNormalization forward (training: batch statistics, running statistics updated in place;
// inference: running statistics) and BatchNormalizationGrad, with the formulas of
// kernels/cpu/batchnorm.cpp: two-pass mean / biased variance in double, PyTorch's unbiased running
// variance unless told otherwise, y = x*a + b with a, b per channel. One block per channel computes
// the statistics and per-channel coefficients, then an elementwise kernel applies them. Custom
// kernels rather than cuDNN's: cuDNN has no double-free eval/train switch on a device-side step
// counter, keeps inverse std rather than the variance, and the CPU's exact semantics matter more
// than the last few percent (both passes are bandwidth-bound).
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

constexpr int kStatThreads = 512;

// Elements of channel c: j in [0, n*s) -> x[(j / s * C + c) * s + j % s].
__device__ __forceinline__ int64_t chan_index(const BnGeom& g, int64_t c, int64_t j) {
  return (j / g.s * g.c + c) * g.s + j % g.s;
}

// Mean and biased variance of channel c (all threads of the block get them).
template <typename T>
__device__ void channel_stats(const BnGeom& g, const T* x, int64_t c, double* shared, double* mean, double* var) {
  const int64_t m = g.n * g.s;
  double s = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) s += static_cast<double>(x[chan_index(g, c, j)]);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) shared[32] = s / static_cast<double>(m > 1 ? m : 1);
  __syncthreads();
  const double mu = shared[32];
  double q = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const double dv = static_cast<double>(x[chan_index(g, c, j)]) - mu;
    q += dv * dv;
  }
  q = block_sum(q, shared);
  if (threadIdx.x == 0) shared[33] = q / static_cast<double>(m > 1 ? m : 1);
  __syncthreads();
  *mean = mu;
  *var = shared[33];
  __syncthreads();
}

template <typename T>
__global__ void bn_stats_kernel(BnGeom g, const T* x, const T* scale, const T* bias, T* run_mean, T* run_var,
                                T* out_mean, T* out_var, T* saved_mean, T* saved_var, const int64_t* step,
                                bool training_attr, double eps, double momentum, bool unbiased, T* coef) {
  __shared__ double shared[34];
  const bool training = training_attr && !(step && *step < 0);
  const int64_t m = g.n * g.s;
  for (int64_t c = blockIdx.x; c < g.c; c += gridDim.x) {
    double mean, var;
    if (training) {
      channel_stats(g, x, c, shared, &mean, &var);
    } else {
      mean = static_cast<double>(run_mean[c]);
      var = static_cast<double>(run_var[c]);
    }
    if (threadIdx.x == 0) {
      if (training) {
        const double unbias = unbiased && m > 1 ? static_cast<double>(m) / static_cast<double>(m - 1) : 1.0;
        run_mean[c] = static_cast<T>(momentum * static_cast<double>(run_mean[c]) + (1 - momentum) * mean);
        run_var[c] = static_cast<T>(momentum * static_cast<double>(run_var[c]) + (1 - momentum) * var * unbias);
        if (saved_mean) saved_mean[c] = static_cast<T>(mean);
        if (saved_var) saved_var[c] = static_cast<T>(var);
      }
      if (out_mean) out_mean[c] = run_mean[c];
      if (out_var) out_var[c] = run_var[c];
      const double istd = 1.0 / sqrt(var + eps);
      coef[c] = static_cast<T>(static_cast<double>(scale[c]) * istd);
      coef[g.c + c] = static_cast<T>(static_cast<double>(bias[c]) - mean * static_cast<double>(scale[c]) * istd);
    }
  }
}

template <typename T>
__global__ void bn_apply_kernel(BnGeom g, T* y, const T* x, const T* coef) {
  const int64_t total = g.n * g.c * g.s;
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const int64_t c = (e / g.s) % g.c;
    y[e] = x[e] * coef[c] + coef[g.c + c];
  }
}

// coef: k (C), mdy (C), kx (C), mu (C).
template <typename T>
__global__ void bn_grad_stats_kernel(BnGeom g, T* dscale, T* dbias, const T* dy, const T* x, const T* scale,
                                     const T* run_mean, const T* run_var, bool training, double eps, T* coef) {
  __shared__ double shared[34];
  const int64_t m = g.n * g.s;
  const double inv_m = 1.0 / static_cast<double>(m > 1 ? m : 1);
  for (int64_t c = blockIdx.x; c < g.c; c += gridDim.x) {
    double mean, var;
    if (training) {
      channel_stats(g, x, c, shared, &mean, &var);
    } else {
      mean = static_cast<double>(run_mean[c]);
      var = static_cast<double>(run_var[c]);
    }
    const double istd = 1.0 / sqrt(var + eps);
    double sdy = 0, sdyx = 0;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      const int64_t i = chan_index(g, c, j);
      const double d = static_cast<double>(dy[i]);
      sdy += d;
      sdyx += d * (static_cast<double>(x[i]) - mean);
    }
    sdy = block_sum(sdy, shared);
    sdyx = block_sum(sdyx, shared);
    if (threadIdx.x == 0) {
      const double sdyxhat = sdyx * istd;
      if (dbias) dbias[c] = static_cast<T>(sdy);
      if (dscale) dscale[c] = static_cast<T>(sdyxhat);
      coef[c] = static_cast<T>(static_cast<double>(scale[c]) * istd);
      coef[g.c + c] = static_cast<T>(sdy * inv_m);
      coef[2 * g.c + c] = static_cast<T>(sdyxhat * inv_m * istd);
      coef[3 * g.c + c] = static_cast<T>(mean);
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void bn_grad_apply_kernel(BnGeom g, T* dx, const T* dy, const T* x, bool training, const T* coef) {
  const int64_t total = g.n * g.c * g.s;
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const int64_t c = (e / g.s) % g.c;
    const T k = coef[c];
    dx[e] = training ? k * (dy[e] - coef[g.c + c] - (x[e] - coef[3 * g.c + c]) * coef[2 * g.c + c]) : k * dy[e];
  }
}

unsigned channel_blocks(int64_t c) { return static_cast<unsigned>(c < 65535 ? c : 65535); }

}  // namespace

template <typename T>
cudaError_t launch_batch_norm(const BnGeom& g, T* y, const T* x, const T* scale, const T* bias, T* run_mean,
                              T* run_var, T* out_mean, T* out_var, T* saved_mean, T* saved_var, const int64_t* step,
                              bool training, double eps, double momentum, bool unbiased, T* coef,
                              cudaStream_t stream) {
  if (g.c <= 0) return cudaSuccess;
  bn_stats_kernel<T><<<channel_blocks(g.c), kStatThreads, 0, stream>>>(g, x, scale, bias, run_mean, run_var, out_mean,
                                                                      out_var, saved_mean, saved_var, step, training,
                                                                      eps, momentum, unbiased, coef);
  cudaError_t err = cudaGetLastError();
  const int64_t total = g.n * g.c * g.s;
  if (err != cudaSuccess || total <= 0) return err;
  bn_apply_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(g, y, x, coef);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_batch_norm_grad(const BnGeom& g, T* dx, T* dscale, T* dbias, const T* dy, const T* x,
                                   const T* scale, const T* run_mean, const T* run_var, bool training, double eps,
                                   T* coef, cudaStream_t stream) {
  if (g.c <= 0) return cudaSuccess;
  bn_grad_stats_kernel<T><<<channel_blocks(g.c), kStatThreads, 0, stream>>>(g, dscale, dbias, dy, x, scale, run_mean,
                                                                           run_var, training, eps, coef);
  cudaError_t err = cudaGetLastError();
  const int64_t total = g.n * g.c * g.s;
  if (err != cudaSuccess || !dx || total <= 0) return err;
  bn_grad_apply_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(g, dx, dy, x, training, coef);
  return cudaGetLastError();
}

#define PT_BN(T)                                                                                                 \
  template cudaError_t launch_batch_norm<T>(const BnGeom&, T*, const T*, const T*, const T*, T*, T*, T*, T*, T*, \
                                            T*, const int64_t*, bool, double, double, bool, T*, cudaStream_t);   \
  template cudaError_t launch_batch_norm_grad<T>(const BnGeom&, T*, T*, T*, const T*, const T*, const T*,        \
                                                 const T*, const T*, bool, double, T*, cudaStream_t);
PT_BN(float)
PT_BN(double)
#undef PT_BN

}  // namespace pt::cuda
