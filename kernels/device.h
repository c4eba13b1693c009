// Where a stage's tensors live and in what order its work runs: the memory, stream and event
// interface the runtime (runtime/exec/executor.h, the pipeline stages and their links) programs
// against, so that one runtime drives CPU stages and CUDA stages.
//
// CPU (kernels/cpu/device.cpp): memory is host memory, a "stream" is the calling thread (every
// call has finished when it returns), events are no-ops. CUDA (kernels/cuda/runtime_device.cpp):
// memory comes from the caching allocator of the device, work is queued on cudaStream_t streams,
// events are cudaEvent_t (timing disabled). Kernels never see this interface: they get raw
// pointers and the stream in KernelCall.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/registry.h"

namespace pt {

// An ordering point on a stream: record() marks "everything queued on the stream so far";
// block() makes another stream wait for that mark (no host wait); wait() waits on the host.
// A record() replaces the previous mark. Before the first record(), block() and wait() return
// at once.
class Event {
 public:
  virtual ~Event() = default;
  virtual Status record(void* stream) = 0;
  virtual Status block(void* stream) = 0;
  virtual Status wait() = 0;
};

// A captured sequence of kernels (a CUDA graph), replayed on a stream of the device it was
// captured on with the pointers and launch parameters of the capture.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual Status launch(void* stream) = 0;
};

// The hyper-parameters Device::predict_adam needs (the Adam node's attributes).
struct AdamPredict {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double decoupled_wd = 0;  // AdamW's weight decay; 0 for Adam (whose L2 term is in m and v)
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual int ordinal() const = 0;           // the CUDA device number; -1 on the CPU
  virtual std::string name() const = 0;      // "cpu", "cuda:0 (NVIDIA H200)"
  // True when kernels' buffers are host memory the runtime may read and write directly.
  bool host_memory() const { return kind() == DeviceKind::kCpu; }

  // Makes this device current for the calling thread (cudaSetDevice); every other call does it
  // too, this is for threads that then launch kernels themselves (the executor's run loop).
  virtual Status activate() const = 0;
  // A new stream on this device, owned by the device until it is destroyed (nullptr on the
  // CPU: work there runs on the calling thread).
  virtual Expected<void*> create_stream() = 0;
  // Waits for a stream of create_stream() and destroys it (with what the device keeps for it).
  virtual void destroy_stream(void* stream) = 0;
  virtual Expected<std::unique_ptr<Event>> create_event() = 0;

  // `bytes` of zero-filled memory for use on `stream`, 64-byte aligned (nullptr for 0 bytes).
  // deallocate() is stream-ordered: memory freed while kernels of `stream` still use it is not
  // handed out to another stream before they are done.
  virtual Expected<void*> allocate(size_t bytes, void* stream) = 0;
  virtual void deallocate(void* p) = 0;

  // Copies queued on `stream` (on the CPU: done on return). to_device reads `host` before it
  // returns (the caller may reuse it at once); to_host waits until the bytes have arrived.
  virtual Status to_device(void* dst, const void* host, size_t bytes, void* stream) = 0;
  virtual Status to_host(void* host, const void* src, size_t bytes, void* stream) = 0;
  // Device-to-device, queued on `stream` (a stream of this device); either end may be on this
  // device or on a peer of the same kind (CUDA: a peer copy).
  virtual Status copy(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t bytes,
                      void* stream) = 0;
  virtual Status synchronize(void* stream) = 0;

  // The vector arithmetic of a pipeline stage (float or double; operands of equal dtype and size):
  // SpecTrain's prediction out = w - (s * lr) * v, with lr a scalar tensor on this device;
  // acc += x (GPipe's gradient sum); x /= by (its mean).
  virtual Status predict(const TensorView& out, const TensorView& w, const TensorView& v, const TensorView& lr,
                         double s, void* stream) = 0;
  // SpecTrain's prediction for Adam / AdamW (kernels/optimizer_math.h): with t the int64 step
  // count on this device (the updates done), out = w - s * (step_size(t) * m / (sqrt(v) /
  // bc2_sqrt(t) + eps) + lr * decoupled_wd * w): s steps along the direction of the last update,
  // with that update's bias corrections (none when t = 0), plus AdamW's decoupled decay per step.
  virtual Status predict_adam(const TensorView& out, const TensorView& w, const TensorView& m, const TensorView& v,
                              const TensorView& step, const TensorView& lr, double s, const AdamPredict& h,
                              void* stream) = 0;
  virtual Status accumulate(const TensorView& acc, const TensorView& x, void* stream) = 0;
  virtual Status divide(const TensorView& x, double by, void* stream) = 0;

  // Graph capture (CUDA graphs; the CPU has none: capture_graphs() false, the rest refuse).
  // Between begin_capture and end_capture, work queued on `stream` by the calling thread is
  // recorded, not run; end_capture returns it as a graph, or the reason it cannot be one (a
  // synchronisation or a host fallback inside: the capture is then abandoned and nothing of it
  // ran). During the capture the stream's allocations come from private pool `pool` of
  // create_graph_pool() (see kernels/cuda/allocator.h), so the graph's scratch addresses stay its
  // own; release_graph_pool() after the pool's graphs are destroyed and the stream has finished.
  virtual bool capture_graphs() const { return false; }
  virtual uint64_t create_graph_pool() { return 0; }
  virtual void release_graph_pool(uint64_t /*pool*/) {}
  virtual Status begin_capture(void* /*stream*/, uint64_t /*pool*/) {
    return unsupported(name() + ": no graph capture on this device");
  }
  virtual Expected<std::unique_ptr<DeviceGraph>> end_capture(void* /*stream*/) {
    return unsupported(name() + ": no graph capture on this device");
  }

  // One line on this device's memory (CUDA: the caching allocator's peak, in use, cached,
  // fragmentation); "" on the CPU.
  virtual std::string memory_summary() const = 0;
};

// The CPU device (one per process) or CUDA device `ordinal` (one per device and process);
// unsupported() naming the reason when CUDA is not available.
Expected<std::shared_ptr<Device>> open_device(DeviceKind kind, int ordinal = 0);

// A tensor's worth of memory on a device, freed (stream-ordered) on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Expected<DeviceBuffer> allocate(std::shared_ptr<Device> device, DType dtype, Dims dims, void* stream);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : device_(std::move(o.device_)), data_(std::exchange(o.data_, nullptr)), dtype_(o.dtype_), dims_(std::move(o.dims_)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = std::move(o.device_);
      data_ = std::exchange(o.data_, nullptr);
      dtype_ = o.dtype_;
      dims_ = std::move(o.dims_);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  TensorView view() const { return TensorView{data_, dtype_, dims_}; }
  size_t bytes() const { return view().bytes(); }
  const Device& device() const { return *device_; }
  bool empty() const { return device_ == nullptr; }
  // The bytes, copied to a host tensor (waits for them on `stream`).
  Expected<HostTensor> to_host(void* stream) const;

 private:
  void reset() {
    if (device_ && data_) device_->deallocate(data_);
    data_ = nullptr;
  }
  std::shared_ptr<Device> device_;
  void* data_ = nullptr;
  DType dtype_ = DType::kUndefined;
  Dims dims_;
};

}  // namespace pt
