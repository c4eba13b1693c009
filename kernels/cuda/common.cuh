// Shared by the CUDA kernels (kernels/cuda/*.cu) and the device helpers: checking macros that turn
// a failed CUDA runtime call or kernel launch into a pt::Status naming file:line, the launch shape
// of elementwise kernels, and the argument checks every elementwise kernel makes before launching.
// Host-only code: it also compiles with the host compiler (device.cpp, table.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/registry.h"

namespace pt::cuda {

// internal_error("file:line: cuda error cudaErrorX (message) in <what>").
inline Status cuda_error_status(cudaError_t err, const char* what, const char* file, int line) {
  return internal_error(std::string(file) + ":" + std::to_string(line) + ": cuda error " +
                        cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") in " + what);
}

// Elementwise kernels: 256 threads a block, grid-stride loops, at most kMaxGridBlocks blocks
// (a few waves on a 132-SM H200: enough to saturate bandwidth without one thread per element).
constexpr int kElementwiseBlock = 256;
constexpr int64_t kMaxGridBlocks = 4096;
// Blocks for n > 0 elements.
inline unsigned elementwise_grid(int64_t n) {
  return static_cast<unsigned>(
      std::min<int64_t>((n + kElementwiseBlock - 1) / kElementwiseBlock, kMaxGridBlocks));
}

inline cudaStream_t stream_of(const KernelCall& call) {
  return static_cast<cudaStream_t>(call.stream);  // null: the legacy default stream
}

// Checks an elementwise call before launch, as the CPU kernels do (kernels/cpu/cpu_util.h): at
// least `n_inputs` inputs and one output, all with input 0's dims, plus what the CPU gets from
// TensorView::as: dtype `dtype` and data present. invalid_input naming the op otherwise.
inline Status check_elementwise(const KernelCall& call, const char* op, size_t n_inputs,
                                DType dtype) {
  const std::string who = std::string(op) + " (cuda): ";
  if (call.inputs.size() < n_inputs || call.outputs.empty())
    return invalid_input(who + "expected at least " + std::to_string(n_inputs) +
                         " inputs and 1 output, got " + std::to_string(call.inputs.size()) +
                         " and " + std::to_string(call.outputs.size()));
  const Dims& dims = call.inputs[0].dims;
  auto check = [&](const TensorView& t, const std::string& name) -> Status {
    if (t.dtype != dtype)
      return invalid_input(who + name + " is " + dtype_name(t.dtype) + ", kernel computes in " +
                           dtype_name(dtype));
    if (t.dims != dims)
      return invalid_input(who + name + " has dims " + dims_str(t.dims) + ", input 0 has " +
                           dims_str(dims));
    if (t.data == nullptr && t.size() != 0) return invalid_input(who + name + " has no data");
    return Status::ok();
  };
  for (size_t i = 0; i < n_inputs; ++i)
    RETURN_IF_ERROR(check(call.inputs[i], "input " + std::to_string(i)));
  return check(call.outputs[0], "output 0");
}

}  // namespace pt::cuda

// In a function returning pt::Status: evaluates a cudaError_t expression and returns
// internal_error("file:line: cuda error ...") when it is not cudaSuccess.
#define PT_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    const cudaError_t pt_cuda_err_ = (call);                                         \
    if (pt_cuda_err_ != cudaSuccess)                                                 \
      return ::pt::cuda::cuda_error_status(pt_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch (in a function returning pt::Status): a bad launch configuration or
// an earlier asynchronous fault surfaces here, with the launch's file:line.
#define PT_CUDA_LAUNCH_CHECK()                                                                 \
  do {                                                                                         \
    const cudaError_t pt_cuda_err_ = cudaGetLastError();                                       \
    if (pt_cuda_err_ != cudaSuccess)                                                           \
      return ::pt::cuda::cuda_error_status(pt_cuda_err_, "kernel launch", __FILE__, __LINE__); \
  } while (0)

// Where no Status can be returned (destructors, teardown): aborts with file:line instead.
#define PT_CUDA_CHECK_ABORT(call)                                             \
  do {                                                                        \
    const cudaError_t pt_cuda_err_ = (call);                                  \
    PT_CHECK(pt_cuda_err_ == cudaSuccess)                                     \
        << #call << ": cuda error " << cudaGetErrorName(pt_cuda_err_) << " (" \
        << cudaGetErrorString(pt_cuda_err_) << ")";                           \
  } while (0)
