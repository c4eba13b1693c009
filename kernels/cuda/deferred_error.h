// The device's deferred error word (launch.h's DeferredError): a kernel that finds bad input (a
// gather index or a cross-entropy label out of range) records it on the device instead of making the host copy the input
// back and wait to check it. The word is read where the host waits anyway: CudaDevice's to_host
// and synchronize queue a copy of it into a pinned mirror before they synchronise the stream and
// turn a record into the error the CPU kernel would have returned (kernels/cuda/runtime_device.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/status.h"
#include "kernels/cuda/launch.h"

namespace pt::cuda {

// The current device's word (allocated and zeroed on first use; null when that fails, and the
// kernels then record nothing).
DeferredError* deferred_error_word();
// Queues a copy of the current device's word into its pinned mirror on `stream`.
cudaError_t queue_deferred_error_read(cudaStream_t stream);
// After the stream that queued the read has synchronised: ok, or invalid_input describing the
// record (the device word is cleared, so each record is reported once).
Status deferred_error_status();
// The message of a record: "Gather (cuda): index 105 at position 3 is out of range for a dimension
// of 100 (found on the device; reported at the next synchronisation)".
std::string describe_deferred_error(const DeferredError& e);

}  // namespace pt::cuda
