// The deferred error words, one per device, and their pinned mirrors (deferred_error.h).
#include "kernels/cuda/deferred_error.h"

#include <array>
#include <mutex>

#include "kernels/cuda/common.cuh"

namespace pt::cuda {

namespace {

constexpr int kMaxDevices = 64;

struct Word {
  DeferredError* device = nullptr;
  DeferredError* mirror = nullptr;  // pinned host memory
  bool failed = false;
};

std::mutex g_mu;
std::array<Word, kMaxDevices>& words() {
  static auto* w = new std::array<Word, kMaxDevices>();
  return *w;
}

// The current device's word, made on first use (null when that fails or there is no device).
Word* current() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return nullptr;
  }
  // Every launch of a checking kernel asks for the word: once this thread has seen it made, no lock.
  thread_local std::array<Word*, kMaxDevices> seen{};
  if (seen[static_cast<size_t>(dev)]) return seen[static_cast<size_t>(dev)];
  std::lock_guard<std::mutex> lock(g_mu);
  Word& w = words()[static_cast<size_t>(dev)];
  if (w.device) seen[static_cast<size_t>(dev)] = &w;
  if (w.device || w.failed) return w.device ? &w : nullptr;
  void* d = nullptr;
  void* h = nullptr;
  // The zeroing runs on the legacy default stream, which the runtime's non-blocking streams do
  // not wait for: it must be done before a kernel on one of them can record into the word.
  if (cudaMalloc(&d, sizeof(DeferredError)) != cudaSuccess || cudaMemset(d, 0, sizeof(DeferredError)) != cudaSuccess ||
      cudaStreamSynchronize(nullptr) != cudaSuccess || cudaMallocHost(&h, sizeof(DeferredError)) != cudaSuccess) {
    (void)cudaGetLastError();
    if (d) (void)cudaFree(d);
    w.failed = true;
    return nullptr;
  }
  *static_cast<DeferredError*>(h) = DeferredError{};
  w.device = static_cast<DeferredError*>(d);
  w.mirror = static_cast<DeferredError*>(h);
  seen[static_cast<size_t>(dev)] = &w;
  return &w;
}

}  // namespace

DeferredError* deferred_error_word() {
  Word* w = current();
  return w ? w->device : nullptr;
}

cudaError_t queue_deferred_error_read(cudaStream_t stream) {
  Word* w = current();
  if (!w) return cudaSuccess;
  return cudaMemcpyAsync(w->mirror, w->device, sizeof(DeferredError), cudaMemcpyDeviceToHost, stream);
}

Status deferred_error_status() {
  Word* w = current();
  if (!w) return Status::ok();
  const DeferredError e = *w->mirror;
  if (e.code <= 0) return Status::ok();  // none, or a record still being written by another stream's kernel
  std::lock_guard<std::mutex> lock(g_mu);
  *w->mirror = DeferredError{};
  PT_CUDA_CHECK(cudaMemset(w->device, 0, sizeof(DeferredError)));
  // Done before the next read is queued on a non-blocking stream (which does not wait for the
  // legacy default stream): else that read can see this record again.
  PT_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return invalid_input(describe_deferred_error(e));
}

std::string describe_deferred_error(const DeferredError& e) {
  const char* op = e.op == kDeferredOpGather         ? "Gather"
                   : e.op == kDeferredOpGatherGrad   ? "GatherGrad"
                   : e.op == kDeferredOpSceLoss      ? "SoftmaxCrossEntropyLoss"
                   : e.op == kDeferredOpSceLossGrad  ? "SoftmaxCrossEntropyLossGrad"
                                                     : "a kernel";
  const std::string where = " (found on the device; reported at the next synchronisation)";
  if (e.code == kDeferredLabelOutOfRange)  // kernels/checks/loss.h's check_sce_labels, in the CPU's words
    return std::string(op) + " (cuda): label " + std::to_string(e.value) + " at index " + std::to_string(e.position) +
           " is outside [0, " + std::to_string(e.limit) + ")" + where;
  if (e.code == kDeferredIndexOutOfRange)
    return std::string(op) + " (cuda): index " + std::to_string(e.value) + " at position " + std::to_string(e.position) +
           " is out of range for a dimension of " + std::to_string(e.limit) + where;
  return std::string(op) + " (cuda): error code " + std::to_string(e.code) + where;
}

}  // namespace pt::cuda
