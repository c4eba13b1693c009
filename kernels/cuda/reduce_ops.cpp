// Host side of the CUDA reductions: ReduceSum / ReduceMean / ReduceMax over attr _axes,
// ReduceSumToShape (broadcasting undone), ConvGradBias, GlobalAveragePool and its gradient. All go
// through launch_reduce (reduce.cu) with walks built from the keep-dims shape.
#include <cuda_runtime_api.h>

#include <string>

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
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  Dims kd = x.dims;
  for (int64_t a : call.attrs.get_ints("_axes")) {
    if (a < 0 || a >= x.rank())
      return invalid_input(std::string(op) + ": axis " + std::to_string(a) + " out of range for rank " +
                           std::to_string(x.rank()));
    kd[a] = 1;
  }
  if (y.size() != numel(kd))
    return invalid_input(std::string(op) + ": output " + dims_str(y.dims) + " does not match the reduction of " +
                         dims_str(x.dims));
  return reduce_to<T>(call, op, r, x, kd, y.as<T>());
}

}  // namespace

template <typename T> Status reduce_sum(const KernelCall& c) { return onnx_reduce<T>(c, "ReduceSum", ReduceOp::kSum); }
template <typename T> Status reduce_mean(const KernelCall& c) { return onnx_reduce<T>(c, "ReduceMean", ReduceOp::kMean); }
template <typename T> Status reduce_max(const KernelCall& c) { return onnx_reduce<T>(c, "ReduceMax", ReduceOp::kMax); }

template <typename T>
Status reduce_sum_to_shape(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ReduceSumToShape", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const size_t rx = x.dims.size(), ry = y.dims.size();
  bool ok = ry <= rx;
  for (size_t i = 0; ok && i < ry; ++i) {
    const int64_t yd = y.dims[i], xd = x.dims[rx - ry + i];
    ok = yd == xd || yd == 1;
  }
  if (!ok)
    return invalid_input("ReduceSumToShape: output " + dims_str(y.dims) + " is not a broadcast source of input " +
                         dims_str(x.dims));
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
  RETURN_IF_ERROR(check_arity(call, "ConvGradBias", 1, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& db = call.outputs[0];
  if (dy.rank() < 2) return invalid_input("ConvGradBias: dY " + dims_str(dy.dims) + " has rank below 2");
  RETURN_IF_ERROR(check_same_dims("ConvGradBias", "output", db.dims, Dims{dy.dims[1]}));
  Dims kd(dy.dims.size(), 1);
  kd[1] = dy.dims[1];
  return reduce_to<T>(call, "ConvGradBias", ReduceOp::kSum, dy, kd, db.as<T>());
}

namespace {

Status global_geometry(const char* op, const Dims& x, const Dims& y, int64_t* planes, int64_t* size) {
  if (x.size() < 2) return invalid_input(std::string(op) + ": input " + dims_str(x) + " has rank below 2");
  Dims want = {x[0], x[1]};
  want.resize(x.size(), 1);
  RETURN_IF_ERROR(check_same_dims(op, "pooled tensor", y, want));
  *planes = x[0] * x[1];
  *size = *planes ? numel(x) / *planes : 0;
  return Status::ok();
}

}  // namespace

template <typename T>
Status global_average_pool(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "GlobalAveragePool", 1, 1));
  int64_t planes, size;
  const TensorView& x = call.inputs[0];
  RETURN_IF_ERROR(global_geometry("GlobalAveragePool", x.dims, call.outputs[0].dims, &planes, &size));
  Dims kd(x.dims.size(), 1);
  kd[0] = x.dims[0];
  kd[1] = x.dims[1];
  return reduce_to<T>(call, "GlobalAveragePool", ReduceOp::kMean, x, kd, call.outputs[0].as<T>());
}

template <typename T>
Status global_average_pool_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "GlobalAveragePoolGrad", 1, 1));
  int64_t planes, size;
  RETURN_IF_ERROR(
      global_geometry("GlobalAveragePoolGrad", call.outputs[0].dims, call.inputs[0].dims, &planes, &size));
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
