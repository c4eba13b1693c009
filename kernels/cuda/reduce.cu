// Reductions over arbitrary dims (ReduceSum / ReduceMean / ReduceMax, ReduceSumToShape,
// ConvGradBias, GlobalAveragePool): one block per output element with a block-wide combine, one
// thread per output when each reduces 32 elements or fewer, or partitions of each output's
// elements over several blocks when there are few outputs with many elements each. Sums accumulate in double as the
// CPU's do; max combines as the CPU's scan `v > a || v != v` (NaN wins), which is associative.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

template <ReduceOp kOp, typename T>
struct Combine {
  using Acc = double;
  __device__ static Acc init() { return 0.0; }
  __device__ static Acc fold(Acc a, T v) { return a + static_cast<Acc>(v); }
  __device__ static Acc join(Acc a, Acc b) { return a + b; }
  __device__ static T finish(Acc a, double scale) { return static_cast<T>(a * scale); }
};
template <typename T>
struct Combine<ReduceOp::kMax, T> {
  using Acc = T;
  __device__ static Acc init() { return -static_cast<T>(INFINITY); }
  __device__ static Acc fold(Acc a, T v) { return v > a || v != v ? v : a; }
  __device__ static Acc join(Acc a, Acc b) { return fold(a, b); }
  __device__ static T finish(Acc a, double) { return a; }
};

template <ReduceOp kOp, typename T>
__global__ void reduce_block_kernel(Strided<1> kept, Strided<1> reduced, T* out, const T* x, int64_t n_out,
                                    int64_t n_red, double scale) {
  using C = Combine<kOp, T>;
  using Acc = typename C::Acc;
  __shared__ Acc shared[32];
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    int64_t base[1];
    strided_offsets(kept, o, base);
    Acc a = C::init();
    for (int64_t r = threadIdx.x; r < n_red; r += blockDim.x) {
      int64_t off[1];
      strided_offsets(reduced, r, off);
      a = C::fold(a, x[base[0] + off[0]]);
    }
    for (int w = 16; w > 0; w >>= 1) a = C::join(a, __shfl_down_sync(0xffffffffu, a, w));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = a;
    __syncthreads();
    if (warp == 0) {
      const int warps = (blockDim.x + 31) >> 5;
      a = lane < warps ? shared[lane] : C::init();
      for (int w = 16; w > 0; w >>= 1) a = C::join(a, __shfl_down_sync(0xffffffffu, a, w));
      if (lane == 0) out[o] = C::finish(a, scale);
    }
    __syncthreads();  // shared is reused by the next output
  }
}

template <ReduceOp kOp, typename T>
__global__ void reduce_thread_kernel(Strided<1> kept, Strided<1> reduced, T* out, const T* x, int64_t n_out,
                                     int64_t n_red, double scale) {
  using C = Combine<kOp, T>;
  for (int64_t o = global_index(); o < n_out; o += global_stride()) {
    int64_t base[1];
    strided_offsets(kept, o, base);
    typename C::Acc a = C::init();
    for (int64_t r = 0; r < n_red; ++r) {
      int64_t off[1];
      strided_offsets(reduced, r, off);
      a = C::fold(a, x[base[0] + off[0]]);
    }
    out[o] = C::finish(a, scale);
  }
}

// Few outputs, many elements each: grid (P, n_out), partition p of output o folds its share of
// the reduced elements into part[o * P + p] (as double: exact for max too), then one thread per
// output folds the P partials in order (deterministic).
template <ReduceOp kOp, typename T>
__global__ void reduce_partial_kernel(Strided<1> kept, Strided<1> reduced, double* part, const T* x, int64_t n_red,
                                      int64_t parts) {
  using C = Combine<kOp, T>;
  using Acc = typename C::Acc;
  __shared__ Acc shared[32];
  const int64_t o = blockIdx.y, p = blockIdx.x;
  const int64_t begin = n_red * p / parts, end = n_red * (p + 1) / parts;
  int64_t base[1];
  strided_offsets(kept, o, base);
  Acc a = C::init();
  for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
    int64_t off[1];
    strided_offsets(reduced, r, off);
    a = C::fold(a, x[base[0] + off[0]]);
  }
  for (int w = 16; w > 0; w >>= 1) a = C::join(a, __shfl_down_sync(0xffffffffu, a, w));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = a;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    a = lane < warps ? shared[lane] : C::init();
    for (int w = 16; w > 0; w >>= 1) a = C::join(a, __shfl_down_sync(0xffffffffu, a, w));
    if (lane == 0) part[o * parts + p] = static_cast<double>(a);
  }
}

template <ReduceOp kOp, typename T>
__global__ void reduce_finish_kernel(T* out, const double* part, int64_t n_out, int64_t parts, double scale) {
  for (int64_t o = global_index(); o < n_out; o += global_stride()) {
    double a = kOp == ReduceOp::kMax ? -static_cast<double>(INFINITY) : 0.0;
    for (int64_t p = 0; p < parts; ++p) {
      const double v = part[o * parts + p];
      a = kOp == ReduceOp::kMax ? (v > a || v != v ? v : a) : a + v;
    }
    out[o] = kOp == ReduceOp::kMax ? static_cast<T>(a) : static_cast<T>(a * scale);
  }
}

template <ReduceOp kOp, typename T>
cudaError_t reduce_launch(const Strided<1>& kept, const Strided<1>& reduced, T* out, const T* x, int64_t n_out,
                          int64_t n_red, double scale, double* scratch, cudaStream_t stream) {
  const int64_t parts = reduce_partitions(n_out, n_red);
  if (parts > 1) {
    if (!scratch) return cudaErrorInvalidValue;
    reduce_partial_kernel<kOp, T><<<dim3(static_cast<unsigned>(parts), static_cast<unsigned>(n_out)), 256, 0, stream>>>(
        kept, reduced, scratch, x, n_red, parts);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    reduce_finish_kernel<kOp, T><<<grid_for(n_out), kBlock, 0, stream>>>(out, scratch, n_out, parts, scale);
  } else if (n_red <= 32) {
    reduce_thread_kernel<kOp, T><<<grid_for(n_out), kBlock, 0, stream>>>(kept, reduced, out, x, n_out, n_red, scale);
  } else {
    const int threads = n_red >= 256 ? 256 : static_cast<int>((n_red + 31) / 32 * 32);
    const unsigned blocks = static_cast<unsigned>(n_out < 65535 * 4 ? n_out : 65535 * 4);
    reduce_block_kernel<kOp, T><<<blocks, threads, 0, stream>>>(kept, reduced, out, x, n_out, n_red, scale);
  }
  return cudaGetLastError();
}

}  // namespace

int64_t reduce_partitions(int64_t n_out, int64_t n_red) {
  // Worth it when the outputs alone give under ~256 blocks and each folds over 64k elements:
  // about 1024 blocks in all, at least 8192 elements each, at most 256 per output.
  if (n_out <= 0 || n_out > 256 || n_red < 65536) return 1;
  int64_t p = 1024 / n_out;
  if (p > 256) p = 256;
  const int64_t by_size = n_red / 8192;
  return p < by_size ? (p < 1 ? 1 : p) : by_size;
}

template <typename T>
cudaError_t launch_reduce(ReduceOp op, const Strided<1>& kept, const Strided<1>& reduced, T* out, const T* x,
                          int64_t n_out, int64_t n_red, double scale, double* scratch, cudaStream_t stream) {
  if (n_out <= 0) return cudaSuccess;
  switch (op) {
    case ReduceOp::kSum: return reduce_launch<ReduceOp::kSum, T>(kept, reduced, out, x, n_out, n_red, scale, scratch, stream);
    case ReduceOp::kMean: return reduce_launch<ReduceOp::kMean, T>(kept, reduced, out, x, n_out, n_red, scale, scratch, stream);
    case ReduceOp::kMax: return reduce_launch<ReduceOp::kMax, T>(kept, reduced, out, x, n_out, n_red, scale, scratch, stream);
  }
  return cudaErrorInvalidValue;
}

template cudaError_t launch_reduce<float>(ReduceOp, const Strided<1>&, const Strided<1>&, float*, const float*,
                                          int64_t, int64_t, double, double*, cudaStream_t);
template cudaError_t launch_reduce<double>(ReduceOp, const Strided<1>&, const Strided<1>&, double*, const double*,
                                           int64_t, int64_t, double, double*, cudaStream_t);

}  // namespace pt::cuda
