// Device-side helpers of the custom kernels (.cu files only): launch shapes, the grid-stride
// index, the strided offset of kernels/cuda/launch.h's Strided walks, and a block-wide sum.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace pt::cuda {

constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = 4096;  // a few waves on a 132-SM H200; loops stride over the rest

inline unsigned grid_for(int64_t n) {
  const int64_t b = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

__device__ __forceinline__ int64_t global_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() {
  return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

// Element offsets of walk position i for each of the K operands.
template <int K>
__device__ __forceinline__ void strided_offsets(const Strided<K>& s, int64_t i, int64_t (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t sz = s.sizes[d];
    const int64_t idx = i % sz;
    i /= sz;
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] += idx * s.strides[k][d];
  }
}

// Records what a kernel found wrong with its input in the device's deferred error word (launch.h;
// err may be null): the first record of a run wins, the host reads it after its next sync.
__device__ __forceinline__ void record_deferred_error(DeferredError* err, int code, int op, int64_t value,
                                                      int64_t limit, int64_t position) {
  if (!err) return;
  if (atomicCAS(&err->code, 0, -1) == 0) {  // claim it, then fill in the details
    err->op = op;
    err->value = value;
    err->limit = limit;
    err->position = position;
    __threadfence();
    atomicExch(&err->code, code);
  }
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in
// thread 0. `shared` holds 32 values. Ends with the block synchronised.
template <typename A>
__device__ A block_sum(A v, A* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : A(0);
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

// Blocks for kernels that give one block to each of `rows` rows (looping over the rest).
inline unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 65535 ? 65535 : rows));
}

// The mean and 1/stddev of the len elements at p, in double, two passes (the CPU's order of
// operations for LayerNorm and GroupNorm); valid in every thread. Every thread of the block calls it.
template <typename T>
__device__ void block_mean_rstd(const T* p, int64_t len, double eps, double* shared, double* mean, double* rstd) {
  __shared__ double m_shared, r_shared;
  double s = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += static_cast<double>(p[i]);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) m_shared = len ? s / static_cast<double>(len) : 0.0;
  __syncthreads();
  const double m = m_shared;
  double v = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const double d = static_cast<double>(p[i]) - m;
    v += d * d;
  }
  v = block_sum(v, shared);
  if (threadIdx.x == 0) r_shared = 1.0 / sqrt((len ? v / static_cast<double>(len) : 0.0) + eps);
  __syncthreads();
  *mean = m;
  *rstd = r_shared;
}

}  // namespace pt::cuda
