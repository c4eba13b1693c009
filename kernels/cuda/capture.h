// Graph capture and the calls that must not overlap it. A CUDA graph is captured on one stream in
// relaxed mode (the capturing thread may still allocate: a private pool's first blocks come from
// cudaMalloc). What must not happen meanwhile is a convolution algorithm search (cudnnFind*Ex,
// with its cudaMalloc/cudaFree of the search workspace and its host-blocking runs) of another
// stage thread on the same device: the gate makes captures exclusive against searches, and a
// search asked for inside a capture is refused (the capture is then abandoned and the run done
// kernel by kernel, which searches).
#pragma once

#include <cuda_runtime_api.h>

#include <shared_mutex>

namespace pt::cuda {

// Held exclusively by a capture (begin to end), shared by an algorithm search.
std::shared_mutex& capture_gate();

// True when `stream` is being captured into a graph now.
bool stream_capturing(cudaStream_t stream);

}  // namespace pt::cuda
