// BatchNormalization forward (training: batch statistics, running statistics updated in place;
// inference: running statistics) and BatchNormalizationGrad, with the formulas of
// kernels/cpu/batchnorm.cpp: two-pass mean / biased variance in double, PyTorch's unbiased running
// variance unless told otherwise, y = x*a + b with a, b per channel. Statistics are summed over
// partitions of each channel (added in order: deterministic), then per-channel coefficients, then
// an elementwise kernel applies them. Custom kernels rather than cuDNN's: the train/eval switch is
// the runtime's step counter on the device, the CPU keeps the variance (cuDNN the inverse std),
// and the CPU's exact semantics matter more than the last few percent (all passes are
// bandwidth-bound).
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

constexpr int kStatThreads = 256;

// Statistics are summed in P partitions per channel (grid (P, C)), each partition's sum written to
// part[c * P + p] and the partitions added in order by a finalising kernel: enough blocks to keep
// the memory system busy when C is small (ResNet's 64 channels), and deterministic.
__device__ __forceinline__ int64_t chan_index(const BnGeom& g, int64_t c, int64_t j) {
  return (j / g.s * g.c + c) * g.s + j % g.s;  // element j in [0, n*s) of channel c
}

__device__ __forceinline__ bool is_training(bool training_attr, const int64_t* step) {
  return training_attr && !(step && *step < 0);
}

// Mode 0: sum of x; 1: sum of (x - mean[c])^2; 2: sums of dy and dy * (x - mean[c]) (into part
// and part2). Blocks do nothing when `gate` says the pass is not training (eval pass).
template <typename T>
__global__ void bn_partial_kernel(BnGeom g, int mode, const T* x, const T* dy, const double* mean, double* part,
                                  double* part2, int64_t parts, bool gate_attr, const int64_t* gate_step) {
  __shared__ double shared[32];
  if (gate_step && !is_training(gate_attr, gate_step)) return;
  const int64_t c = blockIdx.y, p = blockIdx.x;
  const int64_t m = g.n * g.s;
  const int64_t begin = m * p / parts, end = m * (p + 1) / parts;
  const double mu = mode == 0 ? 0.0 : mean[c];
  double a = 0, b = 0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t i = chan_index(g, c, j);
    const double xv = static_cast<double>(x[i]);
    if (mode == 0) {
      a += xv;
    } else if (mode == 1) {
      a += (xv - mu) * (xv - mu);
    } else {
      const double d = static_cast<double>(dy[i]);
      a += d;
      b += d * (xv - mu);
    }
  }
  a = block_sum(a, shared);
  if (mode == 2) b = block_sum(b, shared);
  if (threadIdx.x == 0) {
    part[c * parts + p] = a;
    if (mode == 2) part2[c * parts + p] = b;
  }
}

__device__ __forceinline__ double sum_parts(const double* part, int64_t c, int64_t parts) {
  double s = 0;
  for (int64_t p = 0; p < parts; ++p) s += part[c * parts + p];
  return s;
}

// mean[c] = sum / m (training passes only).
template <typename T>
__global__ void bn_mean_kernel(BnGeom g, const double* part, int64_t parts, double* mean, bool gate_attr,
                               const int64_t* gate_step) {
  if (gate_step && !is_training(gate_attr, gate_step)) return;
  const int64_t m = g.n * g.s;
  for (int64_t c = global_index(); c < g.c; c += global_stride())
    mean[c] = sum_parts(part, c, parts) / static_cast<double>(m > 1 ? m : 1);
}

// Forward: statistics (batch or running), running update, statistics outputs, y = x*a + b's a, b.
template <typename T>
__global__ void bn_finish_kernel(BnGeom g, const double* part, int64_t parts, const double* mean, const T* scale,
                                 const T* bias, T* run_mean, T* run_var, T* out_mean, T* out_var, T* saved_mean,
                                 T* saved_var, const int64_t* step, bool training_attr, double eps, double momentum,
                                 bool unbiased, T* coef) {
  const bool training = is_training(training_attr, step);
  const int64_t m = g.n * g.s;
  for (int64_t c = global_index(); c < g.c; c += global_stride()) {
    double mu, var;
    if (training) {
      mu = mean[c];
      var = sum_parts(part, c, parts) / static_cast<double>(m > 1 ? m : 1);
      const double unbias = unbiased && m > 1 ? static_cast<double>(m) / static_cast<double>(m - 1) : 1.0;
      run_mean[c] = static_cast<T>(momentum * static_cast<double>(run_mean[c]) + (1 - momentum) * mu);
      run_var[c] = static_cast<T>(momentum * static_cast<double>(run_var[c]) + (1 - momentum) * var * unbias);
      if (saved_mean) saved_mean[c] = static_cast<T>(mu);
      if (saved_var) saved_var[c] = static_cast<T>(var);
    } else {
      mu = static_cast<double>(run_mean[c]);
      var = static_cast<double>(run_var[c]);
    }
    if (out_mean) out_mean[c] = run_mean[c];
    if (out_var) out_var[c] = run_var[c];
    const double istd = 1.0 / sqrt(var + eps);
    coef[c] = static_cast<T>(static_cast<double>(scale[c]) * istd);
    coef[g.c + c] = static_cast<T>(static_cast<double>(bias[c]) - mu * static_cast<double>(scale[c]) * istd);
  }
}

template <typename T>
__global__ void bn_apply_kernel(BnGeom g, T* y, const T* x, const T* coef, bool relu) {
  const int64_t total = g.n * g.c * g.s;
  for (int64_t e = global_index(); e < total; e += global_stride()) {
    const int64_t c = (e / g.s) % g.c;
    const T v = x[e] * coef[c] + coef[g.c + c];
    // The epilogue pass's BatchNormalization + Relu: Relu's x > 0 ? x : 0 of the stored y.
    y[e] = relu ? (v > T(0) ? v : T(0)) : v;
  }
}

// Backward, after the batch mean (training) or with the running statistics (inference): var from
// the partitions of mode 1 (training) and the dy sums from mode 2; dbias, dscale and
// coef = k (C), mdy (C), kx (C), mu (C).
template <typename T>
__global__ void bn_grad_finish_kernel(BnGeom g, const double* var_part, const double* dy_part,
                                      const double* dyx_part, int64_t parts, const double* mean, T* dscale, T* dbias,
                                      const T* scale, const T* run_var, bool training, double eps, T* coef) {
  const int64_t m = g.n * g.s;
  const double inv_m = 1.0 / static_cast<double>(m > 1 ? m : 1);
  for (int64_t c = global_index(); c < g.c; c += global_stride()) {
    const double var = training ? sum_parts(var_part, c, parts) * inv_m : static_cast<double>(run_var[c]);
    const double istd = 1.0 / sqrt(var + eps);
    const double sdy = sum_parts(dy_part, c, parts);
    const double sdyxhat = sum_parts(dyx_part, c, parts) * istd;
    if (dbias) dbias[c] = static_cast<T>(sdy);
    if (dscale) dscale[c] = static_cast<T>(sdyxhat);
    coef[c] = static_cast<T>(static_cast<double>(scale[c]) * istd);
    coef[g.c + c] = static_cast<T>(sdy * inv_m);
    coef[2 * g.c + c] = static_cast<T>(sdyxhat * inv_m * istd);
    coef[3 * g.c + c] = static_cast<T>(mean[c]);
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

template <typename T>
__global__ void copy_running_mean_kernel(int64_t c, const T* run_mean, double* mean) {
  for (int64_t i = global_index(); i < c; i += global_stride()) mean[i] = static_cast<double>(run_mean[i]);
}

dim3 partial_grid(const BnGeom& g) {
  return dim3(static_cast<unsigned>(bn_partitions(g)), static_cast<unsigned>(g.c));
}

}  // namespace

int64_t bn_partitions(const BnGeom& g) {
  // About 1024 blocks in all, none with fewer than 4096 elements, at most 64 per channel.
  const int64_t m = g.n * g.s;
  int64_t p = g.c > 0 ? 1024 / g.c : 1;
  p = p < 1 ? 1 : (p > 64 ? 64 : p);
  const int64_t by_size = m / 4096 > 1 ? m / 4096 : 1;
  return p < by_size ? p : by_size;
}

size_t bn_scratch_doubles(const BnGeom& g) {
  return static_cast<size_t>(g.c) * (3 * static_cast<size_t>(bn_partitions(g)) + 1);
}

template <typename T>
cudaError_t launch_batch_norm(const BnGeom& g, T* y, const T* x, const T* scale, const T* bias, T* run_mean,
                              T* run_var, T* out_mean, T* out_var, T* saved_mean, T* saved_var, const int64_t* step,
                              bool training, double eps, double momentum, bool unbiased, bool relu, T* coef,
                              double* scratch, cudaStream_t stream) {
  if (g.c <= 0 || g.c > 65535) return g.c <= 0 ? cudaSuccess : cudaErrorInvalidConfiguration;
  const int64_t parts = bn_partitions(g);
  double* part = scratch;                   // (C, P)
  double* mean = scratch + g.c * parts;     // (C)
  const unsigned cgrid = grid_for(g.c);
  if (training) {
    // The step gate makes the three kernels no-ops on an evaluation pass (step < 0).
    bn_partial_kernel<T><<<partial_grid(g), kStatThreads, 0, stream>>>(g, 0, x, nullptr, nullptr, part, nullptr,
                                                                       parts, true, step);
    bn_mean_kernel<T><<<cgrid, kBlock, 0, stream>>>(g, part, parts, mean, true, step);
    bn_partial_kernel<T><<<partial_grid(g), kStatThreads, 0, stream>>>(g, 1, x, nullptr, mean, part, nullptr,
                                                                       parts, true, step);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  bn_finish_kernel<T><<<cgrid, kBlock, 0, stream>>>(g, part, parts, mean, scale, bias, run_mean, run_var, out_mean,
                                                    out_var, saved_mean, saved_var, step, training, eps, momentum,
                                                    unbiased, coef);
  cudaError_t err = cudaGetLastError();
  const int64_t total = g.n * g.c * g.s;
  if (err != cudaSuccess || total <= 0) return err;
  bn_apply_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(g, y, x, coef, relu);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_batch_norm_grad(const BnGeom& g, T* dx, T* dscale, T* dbias, const T* dy, const T* x,
                                   const T* scale, const T* run_mean, const T* run_var, bool training, double eps,
                                   T* coef, double* scratch, cudaStream_t stream) {
  if (g.c <= 0 || g.c > 65535) return g.c <= 0 ? cudaSuccess : cudaErrorInvalidConfiguration;
  const int64_t parts = bn_partitions(g);
  double* var_part = scratch;                  // (C, P)
  double* dy_part = scratch + g.c * parts;     // (C, P)
  double* dyx_part = dy_part + g.c * parts;    // (C, P)
  double* mean = dyx_part + g.c * parts;       // (C)
  const unsigned cgrid = grid_for(g.c);
  if (training) {
    bn_partial_kernel<T><<<partial_grid(g), kStatThreads, 0, stream>>>(g, 0, x, nullptr, nullptr, var_part, nullptr,
                                                                       parts, true, nullptr);
    bn_mean_kernel<T><<<cgrid, kBlock, 0, stream>>>(g, var_part, parts, mean, true, nullptr);
    bn_partial_kernel<T><<<partial_grid(g), kStatThreads, 0, stream>>>(g, 1, x, nullptr, mean, var_part, nullptr,
                                                                       parts, true, nullptr);
  } else {
    copy_running_mean_kernel<T><<<cgrid, kBlock, 0, stream>>>(g.c, run_mean, mean);
  }
  bn_partial_kernel<T><<<partial_grid(g), kStatThreads, 0, stream>>>(g, 2, x, dy, mean, dy_part, dyx_part, parts,
                                                                     true, nullptr);
  bn_grad_finish_kernel<T><<<cgrid, kBlock, 0, stream>>>(g, var_part, dy_part, dyx_part, parts, mean, dscale, dbias,
                                                         scale, run_var, training, eps, coef);
  cudaError_t err = cudaGetLastError();
  const int64_t total = g.n * g.c * g.s;
  if (err != cudaSuccess || !dx || total <= 0) return err;
  bn_grad_apply_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(g, dx, dy, x, training, coef);
  return cudaGetLastError();
}

#define PT_BN(T)                                                                                                 \
  template cudaError_t launch_batch_norm<T>(const BnGeom&, T*, const T*, const T*, const T*, T*, T*, T*, T*, T*, \
                                            T*, const int64_t*, bool, double, double, bool, bool, T*, double*,   \
                                            cudaStream_t);                                                       \
  template cudaError_t launch_batch_norm_grad<T>(const BnGeom&, T*, T*, T*, const T*, const T*, const T*,        \
                                                 const T*, const T*, bool, double, T*, double*, cudaStream_t);
PT_BN(float)
PT_BN(double)
#undef PT_BN

}  // namespace pt::cuda
