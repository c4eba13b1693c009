// The capture gate and the capture test of capture.h.
#include "kernels/cuda/capture.h"

namespace pt::cuda {

std::shared_mutex& capture_gate() {
  static std::shared_mutex* gate = new std::shared_mutex();  // never destroyed (static teardown)
  return *gate;
}

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace pt::cuda
