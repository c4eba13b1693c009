// The CPU device (host memory, synchronous "streams", no-op events), open_device and
// DeviceBuffer. The CUDA device is kernels/cuda/runtime_device.cpp.
#include "kernels/device.h"

#include "kernels/optimizer_math.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace pt {

#if PIPETRAIN_HAVE_CUDA
namespace cuda {
Expected<std::shared_ptr<Device>> open_cuda_device(int ordinal);  // kernels/cuda/runtime_device.cpp
}
#endif

namespace {

class NoEvent : public Event {
 public:
  Status record(void*) override { return Status::ok(); }
  Status block(void*) override { return Status::ok(); }
  Status wait() override { return Status::ok(); }
};

template <typename T>
void predict_loop(T* out, const T* w, const T* v, int64_t n, double s_lr) {
  const T c = static_cast<T>(s_lr);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] - c * v[i];
}

template <typename T>
void predict_adam_loop(T* out, const T* w, const T* m, const T* v, int64_t n, double s, const AdamScalars& c,
                       double lr, const AdamPredict& h) {
  const T a = static_cast<T>(s * c.step_size), bc2s = static_cast<T>(c.bc2_sqrt), eps = static_cast<T>(h.eps);
  const T d = static_cast<T>(s * lr * h.decoupled_wd);
#pragma omp parallel for simd if (parallel: n > 32768)
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] - a * m[i] / (std::sqrt(v[i]) / bc2s + eps) - d * w[i];
}

template <typename T>
void add_loop(T* acc, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

template <typename T>
void divide_loop(T* x, int64_t n, double by) {
  const T c = static_cast<T>(by);
  for (int64_t i = 0; i < n; ++i) x[i] /= c;
}

Status same_shape(const char* what, const TensorView& a, const TensorView& b) {
  if (a.dtype != b.dtype || a.size() != b.size())
    return internal_error(std::string(what) + ": operands differ (" + dtype_name(a.dtype) + " " + dims_str(a.dims) +
                          " vs " + dtype_name(b.dtype) + " " + dims_str(b.dims) + ")");
  if (a.dtype != DType::kFloat32 && a.dtype != DType::kFloat64)
    return internal_error(std::string(what) + ": " + dtype_name(a.dtype) + " is not a floating-point type");
  return Status::ok();
}

double scalar_at(const TensorView& t) {
  return t.dtype == DType::kFloat64 ? static_cast<const double*>(t.data)[0] : static_cast<const float*>(t.data)[0];
}

class CpuDevice : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  int ordinal() const override { return -1; }
  std::string name() const override { return "cpu"; }
  Status activate() const override { return Status::ok(); }
  Expected<void*> create_stream() override { return static_cast<void*>(nullptr); }
  void destroy_stream(void*) override {}
  Expected<std::unique_ptr<Event>> create_event() override { return std::unique_ptr<Event>(new NoEvent()); }

  Expected<void*> allocate(size_t bytes, void*) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) return internal_error("out of host memory for a " + std::to_string(bytes) + "-byte buffer");
    std::memset(p, 0, rounded);
    return p;
  }
  void deallocate(void* p) override { std::free(p); }

  Status to_device(void* dst, const void* host, size_t bytes, void*) override {
    if (bytes) std::memcpy(dst, host, bytes);
    return Status::ok();
  }
  Status to_host(void* host, const void* src, size_t bytes, void*) override {
    if (bytes) std::memcpy(host, src, bytes);
    return Status::ok();
  }
  Status copy(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t bytes,
              void*) override {
    if (!src_device.host_memory() || !dst_device.host_memory())
      return internal_error("the CPU device cannot copy between " + src_device.name() + " and " + dst_device.name());
    if (bytes && dst != src) std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  Status synchronize(void*) override { return Status::ok(); }

  Status predict(const TensorView& out, const TensorView& w, const TensorView& v, const TensorView& lr, double s,
                 void*) override {
    RETURN_IF_ERROR(same_shape("predict", out, w));
    RETURN_IF_ERROR(same_shape("predict", out, v));
    const double s_lr = s * scalar_at(lr);
    if (out.dtype == DType::kFloat64)
      predict_loop(static_cast<double*>(out.data), static_cast<const double*>(w.data), static_cast<const double*>(v.data),
                   out.size(), s_lr);
    else
      predict_loop(static_cast<float*>(out.data), static_cast<const float*>(w.data), static_cast<const float*>(v.data),
                   out.size(), s_lr);
    return Status::ok();
  }
  Status predict_adam(const TensorView& out, const TensorView& w, const TensorView& m, const TensorView& v,
                      const TensorView& step, const TensorView& lr, double s, const AdamPredict& h, void*) override {
    RETURN_IF_ERROR(same_shape("predict_adam", out, w));
    RETURN_IF_ERROR(same_shape("predict_adam", out, m));
    RETURN_IF_ERROR(same_shape("predict_adam", out, v));
    if (step.dtype != DType::kInt64 || step.size() != 1) return internal_error("predict_adam: step is not an int64 scalar");
    const double rate = scalar_at(lr);
    const AdamScalars c = adam_scalars(rate, static_cast<const int64_t*>(step.data)[0], h.beta1, h.beta2, 0, false);
    if (out.dtype == DType::kFloat64)
      predict_adam_loop(static_cast<double*>(out.data), static_cast<const double*>(w.data),
                        static_cast<const double*>(m.data), static_cast<const double*>(v.data), out.size(), s, c, rate, h);
    else
      predict_adam_loop(static_cast<float*>(out.data), static_cast<const float*>(w.data), static_cast<const float*>(m.data),
                        static_cast<const float*>(v.data), out.size(), s, c, rate, h);
    return Status::ok();
  }
  Status accumulate(const TensorView& acc, const TensorView& x, void*) override {
    RETURN_IF_ERROR(same_shape("accumulate", acc, x));
    if (acc.dtype == DType::kFloat64)
      add_loop(static_cast<double*>(acc.data), static_cast<const double*>(x.data), acc.size());
    else
      add_loop(static_cast<float*>(acc.data), static_cast<const float*>(x.data), acc.size());
    return Status::ok();
  }
  Status divide(const TensorView& x, double by, void*) override {
    RETURN_IF_ERROR(same_shape("divide", x, x));
    if (x.dtype == DType::kFloat64) divide_loop(static_cast<double*>(x.data), x.size(), by);
    else divide_loop(static_cast<float*>(x.data), x.size(), by);
    return Status::ok();
  }
  std::string memory_summary() const override { return ""; }
};

}  // namespace

Expected<std::shared_ptr<Device>> open_device(DeviceKind kind, int ordinal) {
  if (kind == DeviceKind::kCpu) {
    static const std::shared_ptr<Device> cpu = std::make_shared<CpuDevice>();
    return cpu;
  }
#if PIPETRAIN_HAVE_CUDA
  return cuda::open_cuda_device(ordinal);
#else
  (void)ordinal;
  return unsupported("this build has no CUDA backend (configure with -DPIPETRAIN_CUDA=ON where nvcc exists)");
#endif
}

Expected<DeviceBuffer> DeviceBuffer::allocate(std::shared_ptr<Device> device, DType dtype, Dims dims, void* stream) {
  DeviceBuffer b;
  const size_t bytes = static_cast<size_t>(numel(dims)) * dtype_size(dtype);
  ASSIGN_OR_RETURN(b.data_, device->allocate(bytes, stream));
  b.device_ = std::move(device);
  b.dtype_ = dtype;
  b.dims_ = std::move(dims);
  return b;
}

Expected<HostTensor> DeviceBuffer::to_host(void* stream) const {
  HostTensor t(dtype_, dims_);
  if (t.bytes()) RETURN_IF_ERROR(device_->to_host(t.data(), data_, t.bytes(), stream));
  return t;
}

}  // namespace pt
