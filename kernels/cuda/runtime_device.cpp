// The CUDA device of the runtime (kernels/device.h): memory from the device's caching allocator,
// cudaStream_t streams and cudaEvent_t events (timing disabled), copies with cudaMemcpyAsync
// (cudaMemcpyPeerAsync between devices), and the pipeline stage's vector arithmetic as kernels.
// Every call first makes the device current for the calling thread, because the stage threads,
// the prefetch thread and the coordinator all touch device memory.
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/capture.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/launch.h"
#include "kernels/device.h"

namespace pt::cuda {

namespace {

constexpr int kMaxDevices = 64;

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

class CudaEvent : public Event {
 public:
  CudaEvent(int device, cudaEvent_t e) : device_(device), e_(e) {}
  ~CudaEvent() override {
    if (cudaSetDevice(device_) == cudaSuccess) (void)cudaEventDestroy(e_);
  }
  Status record(void* stream) override {
    PT_CUDA_CHECK(cudaSetDevice(device_));
    PT_CUDA_CHECK(cudaEventRecord(e_, as_stream(stream)));
    recorded_ = true;
    return Status::ok();
  }
  Status block(void* stream) override {
    if (!recorded_) return Status::ok();
    // The waiting stream may belong to another device: cudaStreamWaitEvent accepts that.
    PT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream), e_, 0));
    return Status::ok();
  }
  Status wait() override {
    if (!recorded_) return Status::ok();
    PT_CUDA_CHECK(cudaEventSynchronize(e_));
    return Status::ok();
  }

 private:
  int device_;
  cudaEvent_t e_;
  bool recorded_ = false;
};

// A captured run: the executable graph, launched on a stream of its device.
class CudaGraph : public DeviceGraph {
 public:
  CudaGraph(int device, cudaGraphExec_t exec) : device_(device), exec_(exec) {}
  ~CudaGraph() override {
    if (cudaSetDevice(device_) == cudaSuccess) (void)cudaGraphExecDestroy(exec_);
  }
  Status launch(void* stream) override {
    PT_CUDA_CHECK(cudaSetDevice(device_));
    PT_CUDA_CHECK(cudaGraphLaunch(exec_, as_stream(stream)));
    return Status::ok();
  }

 private:
  int device_;
  cudaGraphExec_t exec_;
};

Status check_float(const char* what, const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.size() != b.size())
    return internal_error(std::string(what) + ": operands differ (" + dtype_name(a.dtype) + " " + dims_str(a.dims) +
                          " vs " + dtype_name(b.dtype) + " " + dims_str(b.dims) + ")");
  if (a.dtype != DType::kFloat32 && a.dtype != DType::kFloat64)
    return internal_error(std::string(what) + ": " + dtype_name(a.dtype) + " is not a floating-point type");
  return Status::ok();
}

// A one-dimensional contiguous walk of n elements for `K` operands.
template <int K>
Strided<K> flat(int64_t n) {
  Strided<K> s;
  s.rank = 1;
  s.sizes[0] = n;
  for (int k = 0; k < K; ++k) s.strides[k][0] = 1;
  return s;
}

class CudaDevice : public Device {
 public:
  CudaDevice(int ordinal, std::string label) : ordinal_(ordinal), label_(std::move(label)) {}
  ~CudaDevice() override {
    if (cudaSetDevice(ordinal_) != cudaSuccess) return;
    for (auto& [stream, ring] : staging_)
      for (Staging& st : ring.slots) {
        if (st.done) {
          (void)cudaEventSynchronize(st.done);
          (void)cudaEventDestroy(st.done);
        }
        pinned_host_allocator().deallocate(st.p);
      }
    for (cudaStream_t s : streams_) {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
  }
  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int ordinal() const override { return ordinal_; }
  std::string name() const override { return label_; }
  Status activate() const override {
    PT_CUDA_CHECK(cudaSetDevice(ordinal_));
    return Status::ok();
  }
  Expected<void*> create_stream() override {
    RETURN_IF_ERROR(activate());
    cudaStream_t s = nullptr;
    PT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::lock_guard<std::mutex> lock(mu_);
    streams_.push_back(s);
    return static_cast<void*>(s);
  }
  void destroy_stream(void* stream) override {
    if (!stream || cudaSetDevice(ordinal_) != cudaSuccess) return;
    (void)cudaStreamSynchronize(as_stream(stream));
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = staging_.find(stream); it != staging_.end()) {
      for (Staging& st : it->second.slots) {
        if (st.done) (void)cudaEventDestroy(st.done);
        pinned_host_allocator().deallocate(st.p);
      }
      staging_.erase(it);
    }
    for (auto it = streams_.begin(); it != streams_.end(); ++it)
      if (*it == as_stream(stream)) {
        (void)cudaStreamDestroy(*it);
        streams_.erase(it);
        break;
      }
  }
  Expected<std::unique_ptr<Event>> create_event() override {
    RETURN_IF_ERROR(activate());
    cudaEvent_t e = nullptr;
    PT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return std::unique_ptr<Event>(new CudaEvent(ordinal_, e));
  }
  Expected<void*> allocate(size_t bytes, void* stream) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    RETURN_IF_ERROR(activate());
    void* p = nullptr;
    RETURN_IF_ERROR(device_allocator().allocate(bytes, stream, &p));
    PT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, as_stream(stream)));
    return p;
  }
  void deallocate(void* p) override {
    if (!p) return;
    PT_CUDA_CHECK_ABORT(cudaSetDevice(ordinal_));
    device_allocator().deallocate(p);
  }
  Status to_device(void* dst, const void* host, size_t bytes, void* stream) override {
    if (!bytes) return Status::ok();
    RETURN_IF_ERROR(activate());
    // Through a ring of pinned buffers per stream: the copy runs asynchronously (at full
    // bandwidth for batches) while `host` is free to be refilled at once. A pageable source would
    // let the driver synchronise the stream, and the runtime uploads scalars (lr, step) every pass.
    // A stream is used by one thread at a time (its executor's or its channel's), so the slot
    // picked here is not reused by another thread before this call returns.
    Staging* st = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& ring = staging_[stream];
      st = &ring.slots[ring.next++ % ring.slots.size()];
    }
    if (st->done) PT_CUDA_CHECK(cudaEventSynchronize(st->done));  // its last copy has left
    else PT_CUDA_CHECK(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
    if (st->bytes < bytes) {
      pinned_host_allocator().deallocate(st->p);
      st->p = nullptr;
      st->bytes = 0;
      RETURN_IF_ERROR(pinned_host_allocator().allocate(bytes, nullptr, &st->p));
      st->bytes = bytes;
    }
    std::memcpy(st->p, host, bytes);
    PT_CUDA_CHECK(cudaMemcpyAsync(dst, st->p, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
    PT_CUDA_CHECK(cudaEventRecord(st->done, as_stream(stream)));
    return Status::ok();
  }
  Status to_host(void* host, const void* src, size_t bytes, void* stream) override {
    if (!bytes) return Status::ok();
    RETURN_IF_ERROR(activate());
    PT_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
    PT_CUDA_CHECK(queue_deferred_error_read(as_stream(stream)));
    PT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
    return deferred_error_status();
  }
  Status copy(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t bytes,
              void* stream) override {
    if (!bytes || dst == src) return Status::ok();
    RETURN_IF_ERROR(activate());
    if (src_device.host_memory() && dst_device.host_memory()) {
      PT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToHost, as_stream(stream)));
    } else if (src_device.host_memory()) {
      PT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
    } else if (dst_device.host_memory()) {
      PT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
    } else if (src_device.ordinal() == dst_device.ordinal()) {
      PT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)));
    } else {
      // Direct over NVLink / PCIe once peer access is on (enabled at the first copy between two
      // GPUs, so a process touches no GPU it does not copy to); staged by the driver otherwise.
      const int other = dst_device.ordinal() == ordinal_ ? src_device.ordinal() : dst_device.ordinal();
      RETURN_IF_ERROR(enable_peer(other));
      PT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.ordinal(), src, src_device.ordinal(), bytes, as_stream(stream)));
    }
    return Status::ok();
  }
  Status synchronize(void* stream) override {
    RETURN_IF_ERROR(activate());
    PT_CUDA_CHECK(queue_deferred_error_read(as_stream(stream)));
    PT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
    return deferred_error_status();
  }
  Status predict(const TensorView& out, const TensorView& w, const TensorView& v, const TensorView& lr, double s,
                 void* stream) override {
    RETURN_IF_ERROR(check_float("predict", out, w));
    RETURN_IF_ERROR(check_float("predict", out, v));
    if (lr.dtype != out.dtype) return internal_error("predict: the learning rate is not " + std::string(dtype_name(out.dtype)));
    RETURN_IF_ERROR(activate());
    if (out.dtype == DType::kFloat64) return spectrain_predict<double>(out.data, w.data, v.data, out.size(), lr.data, s, stream);
    return spectrain_predict<float>(out.data, w.data, v.data, out.size(), lr.data, s, stream);
  }
  Status predict_adam(const TensorView& out, const TensorView& w, const TensorView& m, const TensorView& v,
                      const TensorView& step, const TensorView& lr, double s, const AdamPredict& h,
                      void* stream) override {
    RETURN_IF_ERROR(check_float("predict_adam", out, w));
    RETURN_IF_ERROR(check_float("predict_adam", out, m));
    RETURN_IF_ERROR(check_float("predict_adam", out, v));
    if (lr.dtype != out.dtype) return internal_error("predict_adam: the learning rate is not " + std::string(dtype_name(out.dtype)));
    if (step.dtype != DType::kInt64 || step.size() != 1) return internal_error("predict_adam: step is not an int64 scalar");
    RETURN_IF_ERROR(activate());
    if (out.dtype == DType::kFloat64)
      return adam_predict<double>(out.data, w.data, m.data, v.data, step.data, out.size(), lr.data, s, h.beta1, h.beta2,
                                  h.eps, h.decoupled_wd, stream);
    return adam_predict<float>(out.data, w.data, m.data, v.data, step.data, out.size(), lr.data, s, h.beta1, h.beta2,
                               h.eps, h.decoupled_wd, stream);
  }
  Status accumulate(const TensorView& acc, const TensorView& x, void* stream) override {
    RETURN_IF_ERROR(check_float("accumulate", acc, x));
    RETURN_IF_ERROR(activate());
    const int64_t n = acc.size();
    if (acc.dtype == DType::kFloat64)
      PT_CUDA_CHECK(launch_binary<double>(BinaryOp::kAdd, flat<2>(n), static_cast<double*>(acc.data),
                                          static_cast<const double*>(acc.data), static_cast<const double*>(x.data), n,
                                          as_stream(stream)));
    else
      PT_CUDA_CHECK(launch_binary<float>(BinaryOp::kAdd, flat<2>(n), static_cast<float*>(acc.data),
                                         static_cast<const float*>(acc.data), static_cast<const float*>(x.data), n,
                                         as_stream(stream)));
    return Status::ok();
  }
  Status divide(const TensorView& x, double by, void* stream) override {
    RETURN_IF_ERROR(check_float("divide", x, x));
    RETURN_IF_ERROR(activate());
    const int64_t n = x.size();
    if (x.dtype == DType::kFloat64)
      PT_CUDA_CHECK(launch_gather_copy<double>(flat<1>(n), static_cast<double*>(x.data), static_cast<const double*>(x.data),
                                               n, 1.0 / by, as_stream(stream)));
    else
      PT_CUDA_CHECK(launch_gather_copy<float>(flat<1>(n), static_cast<float*>(x.data), static_cast<const float*>(x.data),
                                              n, 1.0 / by, as_stream(stream)));
    return Status::ok();
  }
  bool capture_graphs() const override { return true; }
  uint64_t create_graph_pool() override {
    PT_CUDA_CHECK_ABORT(cudaSetDevice(ordinal_));
    return device_allocator().create_pool();
  }
  void release_graph_pool(uint64_t pool) override {
    if (pool && cudaSetDevice(ordinal_) == cudaSuccess) device_allocator().release_pool(pool);
  }
  // Relaxed mode: the capturing thread may still allocate (its private pool's first blocks come
  // from cudaMalloc, which stream capture does not record: the pool keeps them for the graph).
  Status begin_capture(void* stream, uint64_t pool) override {
    RETURN_IF_ERROR(activate());
    capture_gate().lock();
    device_allocator().route_stream(stream, pool);
    const cudaError_t e = cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      device_allocator().route_stream(stream, 0);
      capture_gate().unlock();
      return cuda_error_status(e, "cudaStreamBeginCapture", __FILE__, __LINE__);
    }
    return Status::ok();
  }
  Expected<std::unique_ptr<DeviceGraph>> end_capture(void* stream) override {
    (void)cudaSetDevice(ordinal_);
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(as_stream(stream), &graph);
    device_allocator().route_stream(stream, 0);
    capture_gate().unlock();
    if (e != cudaSuccess || !graph) {
      (void)cudaGetLastError();  // an invalidated capture is not a sticky error
      if (graph) (void)cudaGraphDestroy(graph);
      return cuda_error_status(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (ie != cudaSuccess) {
      (void)cudaGetLastError();
      return cuda_error_status(ie, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    return std::unique_ptr<DeviceGraph>(new CudaGraph(ordinal_, exec));
  }
  std::string memory_summary() const override {
    if (activate().is_ok()) return label_ + ": " + device_allocator().stats().summary();
    return "";
  }

 private:
  int ordinal_;
  std::string label_;
  struct Staging {
    void* p = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the copy out of p
  };
  struct Ring {
    std::array<Staging, 8> slots;
    size_t next = 0;
  };
  // Lets this device's context reach `peer`'s memory directly where the hardware allows.
  Status enable_peer(int peer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (peers_.count(peer)) return Status::ok();
    peers_.insert(peer);
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, ordinal_, peer) != cudaSuccess || !can) {
      (void)cudaGetLastError();
      return Status::ok();
    }
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
      return cuda_error_status(e, "cudaDeviceEnablePeerAccess", __FILE__, __LINE__);
    (void)cudaGetLastError();
    return Status::ok();
  }

  std::mutex mu_;
  std::set<int> peers_;
  std::vector<cudaStream_t> streams_;
  std::map<void*, Ring> staging_;  // [stream]
};

}  // namespace

Expected<std::shared_ptr<Device>> open_cuda_device(int ordinal) {
  if (!cuda_available()) return unsupported(cuda_unavailable_reason());
  if (ordinal < 0 || ordinal >= cuda_device_count() || ordinal >= kMaxDevices)
    return invalid_input("CUDA device " + std::to_string(ordinal) + " does not exist (this machine has " +
                         std::to_string(cuda_device_count()) + ")");
  static std::mutex mu;
  static std::array<std::shared_ptr<Device>, kMaxDevices> open;
  std::lock_guard<std::mutex> lock(mu);
  if (!open[ordinal]) {
    cudaDeviceProp prop{};
    PT_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    open[ordinal] = std::make_shared<CudaDevice>(ordinal, "cuda:" + std::to_string(ordinal) + " (" + prop.name + ")");
  }
  return open[ordinal];
}

}  // namespace pt::cuda
