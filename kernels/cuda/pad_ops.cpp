// The CUDA wrappers of Pad and PadGrad (pad.cu). PadGrad in reflect and edge modes, where several
// padded elements add into one input element, runs the CPU kernel through the host fallback (its
// summation order; these modes are rare in training graphs: the zoo's pads are all constant).
#include <string>
#include <vector>

#include "kernels/checks/pad.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fallback.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

namespace {

Status pad_geom(const char* op, const Dims& in, const Dims& out, const std::vector<int64_t>& pads,
                const std::string& mode, PadGeom* g) {
  if (in.size() > static_cast<size_t>(kMaxRank))
    return unsupported(std::string(op) + " (cuda): rank " + std::to_string(in.size()) + " above " +
                       std::to_string(kMaxRank));
  *g = PadGeom{};
  g->rank = static_cast<int>(in.size());
  g->mode = mode == "edge" ? PadMode::kEdge : mode == "reflect" ? PadMode::kReflect : PadMode::kConstant;
  const Dims rs = row_major_strides(in);
  for (size_t k = 0; k < in.size(); ++k) {
    g->in[k] = in[k];
    g->out[k] = out[k];
    g->begin[k] = pads[k];
    g->in_stride[k] = rs[k];
  }
  return Status::ok();
}

}  // namespace

template <typename T>
Status pad(const KernelCall& call) {
  std::vector<int64_t> pads;
  std::string mode;
  RETURN_IF_ERROR(kernels::check_pad(call, &pads, &mode));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  if (y.size() == 0) return Status::ok();
  if (x.rank() == 0) {
    PT_CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, sizeof(T), cudaMemcpyDeviceToDevice, stream_of(call)));
    return Status::ok();
  }
  PadGeom g;
  RETURN_IF_ERROR(pad_geom("Pad", x.dims, y.dims, pads, mode, &g));
  PT_CUDA_CHECK(launch_pad<T>(g, y.as<T>(), x.as<T>(), call.attrs.get_float("_value", 0.0f), y.size(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status pad_grad(const KernelCall& call) {
  std::vector<int64_t> pads;
  std::string mode;
  RETURN_IF_ERROR(kernels::check_pad_grad(call, &pads, &mode));
  const TensorView& dy = call.inputs[0];
  const TensorView& dx = call.outputs[0];
  if (mode != "constant") return run_on_host(&cpu::pad_grad<T>, call);
  if (dx.size() == 0) return Status::ok();
  if (dx.rank() == 0) {
    if (dy.size() == 0) PT_CUDA_CHECK(cudaMemsetAsync(dx.data, 0, sizeof(T), stream_of(call)));
    else PT_CUDA_CHECK(cudaMemcpyAsync(dx.data, dy.data, sizeof(T), cudaMemcpyDeviceToDevice, stream_of(call)));
    return Status::ok();
  }
  PadGeom g;
  RETURN_IF_ERROR(pad_geom("PadGrad", dx.dims, dy.dims, pads, mode, &g));
  PT_CUDA_CHECK(launch_pad_grad_constant<T>(g, dx.as<T>(), dy.as<T>(), dx.size(), dy.size(), stream_of(call)));
  return Status::ok();
}

template Status pad<float>(const KernelCall&);
template Status pad<double>(const KernelCall&);
template Status pad<int64_t>(const KernelCall&);
template Status pad<int32_t>(const KernelCall&);
template Status pad_grad<float>(const KernelCall&);
template Status pad_grad<double>(const KernelCall&);

}  // namespace pt::cuda
