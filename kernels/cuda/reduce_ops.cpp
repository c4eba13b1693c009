// Host side of the CUDA reductions: ReduceSum / ReduceMean / ReduceMax over attr _axes,
// ReduceSumToShape (broadcasting undone), ConvGradBias, GlobalAveragePool and its gradient. All go
// through launch_reduce (reduce.cu) with walks built from the keep-dims shape, after the CPU
// kernels' checks (kernels/checks/reduce.h, kernels/checks/pool.h).
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/checks/pool.h"
#include "kernels/checks/reduce.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

namespace {

// x reduced to the keep-dims shape kd into y (y.size() == numel(kd)); empty x gives the
// reduction's identity, as the CPU's `finish(init, 0)`.
template <typename T>
Status reduce_to(const KernelCall& call, const char* op, ReduceOp r, const TensorView& x, const Dims& kd, T* y) {
  const int64_t n = x.size(), m = numel(kd);
  if (m == 0) return Status::ok();
  Strided<1> kept, reduced;
  int64_t n_red = 0;
  if (n == 0) {
    // No element to read: every output gets the identity (0, or -inf for max).
    kept = Strided<1>{};
    kept.rank = 1;
    kept.sizes[0] = m;
    reduced = kept;
    reduced.sizes[0] = 1;
    n_red = 0;
  } else {
    RETURN_IF_ERROR(reduce_walks(op, x.dims, kd, &kept, &reduced, &n_red));
  }
  const double scale = r == ReduceOp::kMean && n_red > 0 ? 1.0 / static_cast<double>(n_red) : 1.0;
  ScratchBuffer scratch;
  const int64_t parts = reduce_partitions(m, n_red);
  if (parts > 1) RETURN_IF_ERROR(scratch.allocate(static_cast<size_t>(m * parts) * sizeof(double), call.stream));
  PT_CUDA_CHECK(launch_reduce<T>(r, kept, reduced, y, n == 0 ? y : x.as<T>(), m, n_red, scale, scratch.as<double>(),
                                 stream_of(call)));
  return Status::ok();
}

template <typename T>
Status onnx_reduce(const KernelCall& call, const char* op, ReduceOp r) {
  Dims kd;
  RETURN_IF_ERROR(kernels::check_reduce(call, op, &kd));
  return reduce_to<T>(call, op, r, call.inputs[0], kd, call.outputs[0].as<T>());
}

}  // namespace

template <typename T> Status reduce_sum(const KernelCall& c) { return onnx_reduce<T>(c, "ReduceSum", ReduceOp::kSum); }
template <typename T> Status reduce_mean(const KernelCall& c) { return onnx_reduce<T>(c, "ReduceMean", ReduceOp::kMean); }
template <typename T> Status reduce_max(const KernelCall& c) { return onnx_reduce<T>(c, "ReduceMax", ReduceOp::kMax); }

template <typename T>
Status reduce_sum_to_shape(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_reduce_sum_to_shape(call));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const size_t rx = x.dims.size(), ry = y.dims.size();
  if (x.size() == y.size()) {
    if (x.size() > 0 && x.data != y.data)
      PT_CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, stream_of(call)));
    return Status::ok();
  }
  Dims kd(rx, 1);
  for (size_t i = 0; i < ry; ++i) kd[rx - ry + i] = y.dims[i];
  return reduce_to<T>(call, "ReduceSumToShape", ReduceOp::kSum, x, kd, y.as<T>());
}

template <typename T>
Status conv_grad_bias(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_conv_grad_bias(call));
  const TensorView& dy = call.inputs[0];
  const TensorView& db = call.outputs[0];
  Dims kd(dy.dims.size(), 1);
  kd[1] = dy.dims[1];
  return reduce_to<T>(call, "ConvGradBias", ReduceOp::kSum, dy, kd, db.as<T>());
}

template <typename T>
Status global_average_pool(const KernelCall& call) {
  int64_t planes, size;
  RETURN_IF_ERROR(kernels::check_global_pool(call, "GlobalAveragePool", &planes, &size));
  const TensorView& x = call.inputs[0];
  Dims kd(x.dims.size(), 1);
  kd[0] = x.dims[0];
  kd[1] = x.dims[1];
  return reduce_to<T>(call, "GlobalAveragePool", ReduceOp::kMean, x, kd, call.outputs[0].as<T>());
}

template <typename T>
Status global_average_pool_grad(const KernelCall& call) {
  int64_t planes, size;
  RETURN_IF_ERROR(kernels::check_global_average_pool_grad(call, &planes, &size));
  PT_CUDA_CHECK(launch_global_avg_pool_grad<T>(call.outputs[0].as<T>(), call.inputs[0].as<T>(), planes, size,
                                               stream_of(call)));
  return Status::ok();
}

#define PT_F(name)                                  \
  template Status name<float>(const KernelCall&);   \
  template Status name<double>(const KernelCall&);
PT_F(reduce_sum) PT_F(reduce_mean) PT_F(reduce_max) PT_F(reduce_sum_to_shape) PT_F(conv_grad_bias)
PT_F(global_average_pool) PT_F(global_average_pool_grad)
#undef PT_F

}  // namespace pt::cuda
