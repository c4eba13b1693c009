// The host fallback of fallback.h: pinned staging buffers, asynchronous copies on the call's
// stream, one synchronisation before the CPU kernel runs and one after the results are queued
// back (the pinned buffers are reused only once their copies are done).
#include "kernels/cuda/fallback.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/common.cuh"

namespace pt::cuda {

namespace {

// Host twins of device views; a tensor without bytes keeps a non-null dummy pointer when it had
// one, so that present() answers alike.
Status stage(std::span<const TensorView> device, cudaStream_t stream, std::vector<PinnedBuffer>* bufs,
             std::vector<TensorView>* host) {
  static char dummy[64];
  host->clear();
  for (const TensorView& d : device) {
    TensorView h = d;
    if (d.data != nullptr) {
      const size_t bytes = d.bytes();
      if (bytes == 0) {
        h.data = dummy;
      } else {
        bufs->emplace_back();
        RETURN_IF_ERROR(bufs->back().allocate(bytes));
        PT_CUDA_CHECK(cudaMemcpyAsync(bufs->back().get(), d.data, bytes, cudaMemcpyDeviceToHost, stream));
        h.data = bufs->back().get();
      }
    }
    host->push_back(h);
  }
  return Status::ok();
}

}  // namespace

Status run_on_host(KernelFn cpu_kernel, const KernelCall& call) {
  const cudaStream_t stream = stream_of(call);
  std::vector<PinnedBuffer> bufs;
  bufs.reserve(call.inputs.size() + call.outputs.size());
  std::vector<TensorView> in, out;
  RETURN_IF_ERROR(stage(call.inputs, stream, &bufs, &in));
  // Outputs too: a kernel may leave some untouched (optional results), and those must keep
  // their device contents when copied back.
  RETURN_IF_ERROR(stage(call.outputs, stream, &bufs, &out));
  PT_CUDA_CHECK(cudaStreamSynchronize(stream));
  RETURN_IF_ERROR(cpu_kernel(KernelCall{in, out, call.attrs, nullptr}));
  Status copied;
  for (size_t i = 0; i < out.size() && copied.is_ok(); ++i) {
    const TensorView& d = call.outputs[i];
    if (d.data == nullptr || d.bytes() == 0) continue;
    const cudaError_t err = cudaMemcpyAsync(d.data, out[i].data, d.bytes(), cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) copied = cuda_error_status(err, "cudaMemcpyAsync (fallback result)", __FILE__, __LINE__);
  }
  // Also after a failed copy: the ones already queued read the pinned buffers, which go back to
  // the cache when this returns.
  PT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return copied;
}

}  // namespace pt::cuda
