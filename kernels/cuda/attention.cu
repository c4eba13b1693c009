// FusedAttention's custom kernels (the GEMMs are cuBLAS, kernels/cuda/attention_ops.cpp): the
// masked row softmax that also keeps (or, in the backward, reads) each row's 1 / sum, and the score
// gradient dS = scale * P * (dP - rowsum(P * dP)). One block per score row; the same formulas as
// kernels/cpu/attention.cpp.
#include <cuda_runtime.h>

#include <cfloat>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

constexpr int kRowThreads = 128;

// Element offset of (row i of head h)'s mask row.
__device__ __forceinline__ int64_t mask_row(const AttnMask& m, int64_t h, int64_t i) {
  int64_t off = 0;
  for (int d = m.rank - 1; d >= 0; --d) {
    off += (h % m.batch[d]) * m.batch_strides[d];
    h /= m.batch[d];
  }
  return off + i * m.row_stride;
}

__device__ __forceinline__ bool filled_at(const AttnMask& m, int64_t row_off, int64_t j) {
  return m.kind == 2 && static_cast<const bool*>(m.data)[row_off + j * m.col_stride];
}

template <typename A>
__device__ A block_max(A v, A* shared) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : -A(INFINITY);
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

template <typename T>
__global__ void attention_softmax_kernel(T* p,        // (heads * t, s)
                                         T* inv_sum,  // (heads * t)
                                         AttnMask m, int64_t t, int64_t s, bool recompute) {
  __shared__ T shared_t[32];
  __shared__ T total;
  const int64_t row = blockIdx.x;
  T* pr = p + row * s;
  const int64_t moff = m.kind ? mask_row(m, row / t, row % t) : 0;
  T mx = -T(INFINITY);
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
    T v = pr[j];
    if (m.kind == 1)
      v += static_cast<const T*>(m.data)[moff + j * m.col_stride];
    else if (filled_at(m, moff, j))
      v = static_cast<T>(m.fill);
    pr[j] = v;
    mx = max(mx, v);
  }
  mx = block_max(mx, shared_t);
  if (recompute) {
    const T inv = inv_sum[row];
    for (int64_t j = threadIdx.x; j < s; j += blockDim.x) pr[j] = exp(pr[j] - mx) * inv;
    return;
  }
  T sum = 0;
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
    const T e = exp(pr[j] - mx);
    pr[j] = e;
    sum += e;
  }
  sum = block_sum(sum, shared_t);
  if (threadIdx.x == 0) total = T(1) / sum;
  __syncthreads();
  const T inv = total;
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) pr[j] *= inv;
  if (threadIdx.x == 0) inv_sum[row] = inv;
}

template <typename T>
__global__ void attention_dscores_kernel(T* ds,       // (heads * t, s): dP in, dS out
                                         const T* p,  // (heads * t, s)
                                         AttnMask m, int64_t t, int64_t s, T scale) {
  __shared__ T shared_t[32];
  __shared__ T dot;
  const int64_t row = blockIdx.x;
  T d = 0;
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) d += p[row * s + j] * ds[row * s + j];
  d = block_sum(d, shared_t);
  if (threadIdx.x == 0) dot = d;
  __syncthreads();
  d = dot;
  const int64_t moff = m.kind ? mask_row(m, row / t, row % t) : 0;
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
    const int64_t e = row * s + j;
    ds[e] = filled_at(m, moff, j) ? T(0) : scale * p[e] * (ds[e] - d);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_attention_softmax(T* p, T* inv_sum, const AttnMask& m, int64_t heads, int64_t t, int64_t s, bool recompute,
                                     cudaStream_t stream) {
  if (heads * t == 0) return cudaSuccess;
  attention_softmax_kernel<T><<<static_cast<unsigned>(heads * t), kRowThreads, 0, stream>>>(p, inv_sum, m, t, s, recompute);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_attention_dscores(T* ds, const T* p, const AttnMask& m, int64_t heads, int64_t t, int64_t s, double scale,
                                     cudaStream_t stream) {
  if (heads * t == 0) return cudaSuccess;
  attention_dscores_kernel<T>
      <<<static_cast<unsigned>(heads * t), kRowThreads, 0, stream>>>(ds, p, m, t, s, static_cast<T>(scale));
  return cudaGetLastError();
}

#define PT_INSTANTIATE(T)                                                                                                   \
  template cudaError_t launch_attention_softmax<T>(T*, T*, const AttnMask&, int64_t, int64_t, int64_t, bool, cudaStream_t); \
  template cudaError_t launch_attention_dscores<T>(T*, const T*, const AttnMask&, int64_t, int64_t, int64_t, double,        \
                                                   cudaStream_t);
PT_INSTANTIATE(float)
PT_INSTANTIATE(double)
#undef PT_INSTANTIATE

}  // namespace pt::cuda
