// The CUDA backends of the caching allocator (cudaMalloc / cudaHostAlloc), the per-device and
// pinned-host allocator instances, and the per-thread cuBLAS / cuDNN handles of libs.h.
#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <string>
#include <unordered_map>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/libs.h"

namespace pt::cuda {

namespace {

struct DeviceBackend final : CachingAllocator::Backend {
  Status alloc(void** p, size_t bytes) override {
    *p = nullptr;
    const cudaError_t err = cudaMalloc(p, bytes);
    if (err != cudaSuccess) {
      *p = nullptr;
      (void)cudaGetLastError();  // an OOM is not sticky: clear it for the launch checks
      return cuda_error_status(err, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str(), __FILE__,
                               __LINE__);
    }
    return Status::ok();
  }
  Status free(void* p) override {
    PT_CUDA_CHECK(cudaFree(p));
    return Status::ok();
  }
  const char* name() const override { return "cudaMalloc"; }
};

struct PinnedBackend final : CachingAllocator::Backend {
  Status alloc(void** p, size_t bytes) override {
    *p = nullptr;
    const cudaError_t err = cudaHostAlloc(p, bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      *p = nullptr;
      (void)cudaGetLastError();
      return cuda_error_status(err, ("cudaHostAlloc of " + std::to_string(bytes) + " bytes").c_str(), __FILE__,
                               __LINE__);
    }
    return Status::ok();
  }
  Status free(void* p) override {
    PT_CUDA_CHECK(cudaFreeHost(p));
    return Status::ok();
  }
  const char* name() const override { return "cudaHostAlloc"; }
};

constexpr int kMaxDevices = 64;

// Deliberately never destroyed: kernels may run during static destruction of other objects, and
// the driver frees everything at process exit anyway.
struct Allocators {
  DeviceBackend device_backend;
  PinnedBackend pinned_backend;
  std::mutex mu;
  std::array<std::unique_ptr<CachingAllocator>, kMaxDevices> device;
  CachingAllocator pinned{&pinned_backend};
};

Allocators& allocators() {
  static Allocators* a = new Allocators();
  return *a;
}

int current_device() {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    d = 0;
  }
  return d >= 0 && d < kMaxDevices ? d : 0;
}

}  // namespace

CachingAllocator& device_allocator() {
  Allocators& a = allocators();
  const int d = current_device();
  std::lock_guard<std::mutex> lock(a.mu);
  if (!a.device[d]) a.device[d] = std::make_unique<CachingAllocator>(&a.device_backend);
  return *a.device[d];
}

CachingAllocator& pinned_host_allocator() { return allocators().pinned; }

// ---- handles ----------------------------------------------------------------------------------

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (no GPU or driver?)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cublasStatus_t";
}

namespace {

// cuBLAS wants 32 MiB of workspace per stream on Hopper for its fastest kernels.
constexpr size_t kCublasWorkspace = size_t{32} << 20;

struct ThreadHandles {
  int device = -1;
  cublasHandle_t blas = nullptr;
  cudaStream_t blas_stream = nullptr;
  bool blas_bound = false;
  int blas_math = -1;  // the handle's math mode: -1 not set yet, 0 default, 1 TF32
  std::unordered_map<cudaStream_t, void*> blas_workspace;  // from `alloc`, kept while the thread lives
  CachingAllocator* alloc = nullptr;
  cudnnHandle_t dnn = nullptr;
  ~ThreadHandles() {
    // At thread exit; errors are ignored (the context may already be gone at process exit).
    if (blas) (void)cublasDestroy(blas);
    for (auto& [stream, p] : blas_workspace)
      if (alloc) alloc->deallocate(p);
    if (dnn) (void)cudnnDestroy(dnn);
  }
};

// Handles per (thread, device): a pipeline stage's thread drives one device.
ThreadHandles& thread_handles(int device) {
  thread_local std::unordered_map<int, std::unique_ptr<ThreadHandles>> per_device;
  std::unique_ptr<ThreadHandles>& h = per_device[device];
  if (!h) {
    h = std::make_unique<ThreadHandles>();
    h->device = device;
  }
  return *h;
}

}  // namespace

Status cublas_for(cudaStream_t stream, bool tf32, cublasHandle_t* out) {
  ThreadHandles& t = thread_handles(current_device());
  if (!t.blas) PT_CUBLAS_CHECK(cublasCreate(&t.blas));
  const int mode = tf32 ? 1 : 0;
  if (t.blas_math != mode) {
    PT_CUBLAS_CHECK(cublasSetMathMode(t.blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    t.blas_math = mode;
  }
  if (!t.blas_bound || t.blas_stream != stream) {
    // cublasSetStream resets the workspace to cuBLAS's own pool: set ours again after it.
    PT_CUBLAS_CHECK(cublasSetStream(t.blas, stream));
    void*& ws = t.blas_workspace[stream];
    if (!ws) {
      t.alloc = &device_allocator();
      RETURN_IF_ERROR(t.alloc->allocate(kCublasWorkspace, stream, &ws));
    }
    PT_CUBLAS_CHECK(cublasSetWorkspace(t.blas, ws, kCublasWorkspace));
    t.blas_stream = stream;
    t.blas_bound = true;
  }
  *out = t.blas;
  return Status::ok();
}

std::string library_versions() {
  int rt = 0, drv = 0, major = 0, minor = 0, patch = 0;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  (void)cudaGetLastError();
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS) major = 0;
  if (cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS) minor = 0;
  if (cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) patch = 0;
  return "CUDA runtime " + std::to_string(rt) + ", driver " + std::to_string(drv) + ", cuBLAS " +
         std::to_string(major * 10000 + minor * 100 + patch) + ", cuDNN " + std::to_string(cudnnGetVersion());
}

Status cudnn_for(cudaStream_t stream, cudnnHandle_t* out) {
  ThreadHandles& t = thread_handles(current_device());
  if (!t.dnn) PT_CUDNN_CHECK(cudnnCreate(&t.dnn));
  PT_CUDNN_CHECK(cudnnSetStream(t.dnn, stream));
  *out = t.dnn;
  return Status::ok();
}

}  // namespace pt::cuda
