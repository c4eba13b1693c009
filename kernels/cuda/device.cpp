// The CUDA device as the host sees it: whether one is usable (pt::cuda_available, asked once per
// process) and synchronous device-memory helpers for tests and tools. Runtime API only: the
// driver library (-lcuda) is never linked, so the binary starts on machines without a GPU.
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/registry.h"

namespace pt {

namespace {

struct Probe {
  bool available = false;
  int count = 0;
  std::string reason;  // "" when available
};

Probe probe_devices() {
  int count = 0;  // left untouched when there is no driver or no GPU
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, so the next launch check does not report it
    return {false, 0, std::string("no CUDA device: ") + cudaGetErrorString(err)};
  }
  if (count <= 0) return {false, 0, "no CUDA device: cudaGetDeviceCount found 0 devices"};
  return {true, count, ""};
}

const Probe& probe() {
  static const Probe p = probe_devices();
  return p;
}

}  // namespace

bool cuda_available() { return probe().available; }
int cuda_device_count() { return probe().count; }
std::string cuda_unavailable_reason() { return probe().reason; }

std::string cuda_device_name(int ordinal) {
  if (ordinal < 0 || ordinal >= cuda_device_count()) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return prop.name;
}

int cuda_compute_capability(int ordinal) {
  if (ordinal < 0 || ordinal >= cuda_device_count()) return 0;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 10 * major + minor;
}

namespace cuda {

Status device_alloc(void** p, size_t bytes) {
  *p = nullptr;
  const cudaError_t err = cudaMalloc(p, bytes);
  if (err != cudaSuccess) {
    *p = nullptr;
    return cuda_error_status(err, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str(),
                             __FILE__, __LINE__);
  }
  return Status::ok();
}

Status device_free(void* p) {
  PT_CUDA_CHECK(cudaFree(p));
  return Status::ok();
}

Status copy_to_device(void* dst_device, const void* src_host, size_t bytes) {
  PT_CUDA_CHECK(cudaMemcpy(dst_device, src_host, bytes, cudaMemcpyHostToDevice));
  return Status::ok();
}

Status copy_to_host(void* dst_host, const void* src_device, size_t bytes) {
  PT_CUDA_CHECK(cudaMemcpy(dst_host, src_device, bytes, cudaMemcpyDeviceToHost));
  return Status::ok();
}

Status device_synchronize() {
  PT_CUDA_CHECK(cudaDeviceSynchronize());
  return Status::ok();
}

}  // namespace cuda

}  // namespace pt
