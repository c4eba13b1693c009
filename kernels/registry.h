// The kernel registry: the single answer to "is this op supported on this device for this dtype",
// asked by the importer (unsupported-op report), the partitioner and the runtime. Kernels are
// plain functions registered from one explicit table (kernels/registry.cpp), no static
// initialisers. Kernels know tensors and attributes, never graphs or stages.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/attribute.h"
#include "core/status.h"
#include "core/tensor.h"

namespace pt {

class WeightCache;

enum class DeviceKind { kCpu, kCuda };
const char* device_kind_name(DeviceKind d);

// One kernel invocation. Outputs are preallocated by the caller with their inferred dims; an
// absent optional input has data == nullptr. Kernels that update state in place (optimizer
// steps) write through their input views.
struct KernelCall {
  std::span<const TensorView> inputs;
  std::span<const TensorView> outputs;
  const AttrMap& attrs;
  void* stream = nullptr;  // CUDA stream (cudaStream_t) for kCuda kernels; unused on the CPU
  // With a cache (kernels/weight_cache.h): versions[i] is the version of input i's contents, 0
  // for an input that is not a versioned weight (never cached). Empty without a cache.
  WeightCache* weight_cache = nullptr;
  std::span<const uint64_t> versions = {};
  uint64_t version(size_t i) const { return i < versions.size() ? versions[i] : 0; }
  // CUDA: float32 matrix products and convolutions may use TF32 tensor cores (--precision tf32,
  // ExecSettings::tf32); false: exact FP32 (FMA) math. CPU kernels ignore it.
  bool tf32 = false;
};

using KernelFn = Status (*)(const KernelCall&);

struct KernelEntry {
  const char* op;     // ONNX op type, or an internal op of the "pipetrain" domain (ReluGrad, ...)
  DeviceKind device;
  DType dtype;        // dtype of input 0: the type the kernel computes in
  KernelFn fn;
};

// The kernel for (op, device, dtype), or nullptr.
KernelFn find_kernel(std::string_view op, DeviceKind device, DType dtype);

// Several calls of one op at once (multi-tensor apply): the optimizer updates of a stage in one
// launch instead of one per parameter. Each call is what the op's kernel takes; the results are
// those of calling the kernel on each in order (calls the group cannot fuse, such as ones with
// other attributes, it runs one by one). nullptr where the backend has none: then the executor
// calls the kernel per node.
using KernelGroupFn = Status (*)(std::span<const KernelCall> calls);
KernelGroupFn find_group_kernel(std::string_view op, DeviceKind device, DType dtype);
bool has_kernel(std::string_view op, DeviceKind device, DType dtype);
// True when the kernel for (op, device, dtype) is the CPU kernel run through the device's host
// fallback (kernels/cuda/fallback.h: its inputs copied to the host and its outputs back, with a
// synchronisation, at every call). False for native kernels and on the CPU.
bool runs_on_host(std::string_view op, DeviceKind device, DType dtype);
// The same for one call, given its attributes and the dims of its inputs and outputs: also true
// where the native kernel itself runs the CPU kernel for these attributes (CUDA: convolutions with
// asymmetric pads, which cuDNN's descriptor cannot express; PadGrad in reflect or edge mode).
bool runs_on_host(std::string_view op, DeviceKind device, DType dtype, const AttrMap& attrs,
                  std::span<const Dims> inputs, std::span<const Dims> outputs);
// Every op with a kernel on `device` for some dtype, sorted (for "known ops" hints).
std::vector<std::string> supported_ops(DeviceKind device);
// All entries (CPU table, then CUDA table when built with CUDA).
std::span<const KernelEntry> all_kernels();

// Threads of the CPU kernels: OpenMP regions started by the calling thread, and OpenBLAS's
// process-wide pool (so that N pipeline stages sharing the cores do not oversubscribe them).
void set_cpu_kernel_threads(int threads);
// The calling thread's OpenMP thread count (what set_cpu_kernel_threads last set there).
int cpu_kernel_threads();

// True when this binary was built with the CUDA backend and a CUDA device is present.
bool cuda_available();
// CUDA devices this process sees (0 without the backend, a driver or a GPU).
int cuda_device_count();
// One line on why CUDA is not available (no backend compiled, no GPU found, driver error), or "".
std::string cuda_unavailable_reason();
// The name of CUDA device `ordinal` ("NVIDIA H200"), "" when there is none; creates no context.
std::string cuda_device_name(int ordinal);
// Its compute capability as 10 * major + minor (90 for an H100 or H200), 0 when there is none.
int cuda_compute_capability(int ordinal);

}  // namespace pt
