// Reductions over arbitrary dims (ReduceSum / ReduceMean / ReduceMax, ReduceSumToShape,
// ConvGradBias, GlobalAveragePool): one block per output element with a block-wide combine, or
// one thread per output when each reduces 32 elements or fewer. Sums accumulate in double as the
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

template <ReduceOp kOp, typename T>
cudaError_t reduce_launch(const Strided<1>& kept, const Strided<1>& reduced, T* out, const T* x, int64_t n_out,
                          int64_t n_red, double scale, cudaStream_t stream) {
  if (n_red <= 32) {
    reduce_thread_kernel<kOp, T><<<grid_for(n_out), kBlock, 0, stream>>>(kept, reduced, out, x, n_out, n_red, scale);
  } else {
    const int threads = n_red >= 256 ? 256 : static_cast<int>((n_red + 31) / 32 * 32);
    const unsigned blocks = static_cast<unsigned>(n_out < 65535 * 4 ? n_out : 65535 * 4);
    reduce_block_kernel<kOp, T><<<blocks, threads, 0, stream>>>(kept, reduced, out, x, n_out, n_red, scale);
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_reduce(ReduceOp op, const Strided<1>& kept, const Strided<1>& reduced, T* out, const T* x,
                          int64_t n_out, int64_t n_red, double scale, cudaStream_t stream) {
  if (n_out <= 0) return cudaSuccess;
  switch (op) {
    case ReduceOp::kSum: return reduce_launch<ReduceOp::kSum, T>(kept, reduced, out, x, n_out, n_red, scale, stream);
    case ReduceOp::kMean: return reduce_launch<ReduceOp::kMean, T>(kept, reduced, out, x, n_out, n_red, scale, stream);
    case ReduceOp::kMax: return reduce_launch<ReduceOp::kMax, T>(kept, reduced, out, x, n_out, n_red, scale, stream);
  }
  return cudaErrorInvalidValue;
}

template cudaError_t launch_reduce<float>(ReduceOp, const Strided<1>&, const Strided<1>&, float*, const float*,
                                          int64_t, int64_t, double, cudaStream_t);
template cudaError_t launch_reduce<double>(ReduceOp, const Strided<1>&, const Strided<1>&, double*, const double*,
                                           int64_t, int64_t, double, cudaStream_t);

}  // namespace pt::cuda
