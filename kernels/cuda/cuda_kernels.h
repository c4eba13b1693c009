// The CUDA backend as the rest of the tree sees it: its kernel table (merged into the registry by
// kernels/registry.cpp), declarations of the kernels (kernels/cuda/*.cu, templates instantiated
// for float and double) and the few device-memory helpers that tests and tools need.
// Plain C++ (no CUDA headers): included by g++-compiled code and by nvcc-compiled .cu files.
#pragma once

#include <cstddef>
#include <span>

#include "core/status.h"
#include "kernels/registry.h"

namespace pt::cuda {

// Every CUDA kernel of this build: {op, DeviceKind::kCuda, dtype, fn} (kernels/cuda/table.cpp).
std::span<const KernelEntry> kernel_table();

// Kernels: inputs and outputs are device pointers; outputs are preallocated by the caller; each
// launch goes on KernelCall::stream (a cudaStream_t; null is the default stream) and returns
// without synchronising.
#define PT_DECLARE_CUDA_KERNEL(name) \
  template <typename T>              \
  Status name(const KernelCall& call)

PT_DECLARE_CUDA_KERNEL(relu);       // Relu(X) -> Y = max(X, 0)
PT_DECLARE_CUDA_KERNEL(relu_grad);  // ReluGrad(dY, Y) -> dX = dY * (Y > 0)

#undef PT_DECLARE_CUDA_KERNEL

// Device memory on the current device, for tests and tools (the runtime has its own allocator).
// Each returns internal_error naming the CUDA error; the copies are synchronous with the host.
Status device_alloc(void** p, size_t bytes);  // *p = nullptr on failure
Status device_free(void* p);                  // p may be null
Status copy_to_device(void* dst_device, const void* src_host, size_t bytes);
Status copy_to_host(void* dst_host, const void* src_device, size_t bytes);
// Waits for all work on the current device; reports asynchronous kernel faults.
Status device_synchronize();

}  // namespace pt::cuda
