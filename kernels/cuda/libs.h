// cuBLAS and cuDNN for the host-side wrappers of the CUDA backend (kernels/cuda/*.cpp): checking
// macros that turn a failed library call into a pt::Status with file:line and the library's own
// error string, and the per-thread handles, bound to the call's stream before each use.
// Host-only; .cu files do not include it (they stay free of the library headers).
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <string>

#include "kernels/cuda/common.cuh"

namespace pt::cuda {

const char* cublas_status_name(cublasStatus_t s);

inline Status cublas_error_status(cublasStatus_t s, const char* what, const char* file, int line) {
  return internal_error(std::string(file) + ":" + std::to_string(line) + ": cublas error " +
                        cublas_status_name(s) + " in " + what);
}
inline Status cudnn_error_status(cudnnStatus_t s, const char* what, const char* file, int line) {
  return internal_error(std::string(file) + ":" + std::to_string(line) + ": cudnn error " +
                        cudnnGetErrorString(s) + " in " + what);
}

// The calling thread's cuBLAS handle for the current device, bound to `stream` with a workspace
// of its own for that stream (from the caching allocator: cuBLAS then allocates nothing itself),
// in the math mode the call asks for: tf32 (KernelCall::tf32) TF32 tensor-core products of
// float32, otherwise cuBLAS's default (exact FP32).
Status cublas_for(cudaStream_t stream, bool tf32, cublasHandle_t* h);
// The calling thread's cuDNN handle for the current device, bound to `stream`.
Status cudnn_for(cudaStream_t stream, cudnnHandle_t* h);

}  // namespace pt::cuda

#define PT_CUBLAS_CHECK(call)                                                              \
  do {                                                                                     \
    const cublasStatus_t pt_cublas_st_ = (call);                                           \
    if (pt_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                            \
      return ::pt::cuda::cublas_error_status(pt_cublas_st_, #call, __FILE__, __LINE__);    \
  } while (0)

#define PT_CUDNN_CHECK(call)                                                             \
  do {                                                                                   \
    const cudnnStatus_t pt_cudnn_st_ = (call);                                           \
    if (pt_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                            \
      return ::pt::cuda::cudnn_error_status(pt_cudnn_st_, #call, __FILE__, __LINE__);    \
  } while (0)
