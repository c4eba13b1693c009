// Tensors as kernels see them (TensorView: pointer, dtype, dims; no ownership) and as the importer,
// tests and the runtime hold them on the host (HostTensor: owning, 64-byte aligned).
#pragma once

#include <cstring>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "core/status.h"

namespace pt {

struct TensorView {
  void* data = nullptr;  // null for an absent optional input
  DType dtype = DType::kUndefined;
  Dims dims;

  bool present() const { return data != nullptr || (dtype != DType::kUndefined && numel(dims) == 0); }
  int64_t size() const { return numel(dims); }
  int rank() const { return static_cast<int>(dims.size()); }
  size_t bytes() const { return static_cast<size_t>(size()) * dtype_size(dtype); }
  template <typename T>
  T* as() const {
    PT_CHECK(dtype == dtype_of<T>()) << "tensor is " << dtype_name(dtype) << ", asked as "
                                     << dtype_name(dtype_of<T>());
    return static_cast<T*>(data);
  }
};

// Owning host tensor. Copyable (deep copy); the buffer is 64-byte aligned for SIMD kernels.
// Assigning a tensor of the same dtype and dims (copy or move) copies into the existing storage,
// so views taken of it (the executor's prepared kernel calls) stay valid.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, Dims dims);  // zero-filled
  HostTensor(const HostTensor& o);
  HostTensor& operator=(const HostTensor& o);
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&& o) noexcept;

  template <typename T>
  static HostTensor from(Dims dims, std::span<const T> values) {
    HostTensor t(dtype_of<T>(), std::move(dims));
    PT_CHECK(static_cast<int64_t>(values.size()) == t.size()) << "value count does not match dims";
    if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(T));
    return t;
  }

  DType dtype() const { return dtype_; }
  const Dims& dims() const { return dims_; }
  int64_t size() const { return numel(dims_); }
  size_t bytes() const { return static_cast<size_t>(size()) * dtype_size(dtype_); }
  void* data() { return buf_.get(); }
  const void* data() const { return buf_.get(); }
  template <typename T>
  T* as() { return view().as<T>(); }
  template <typename T>
  const T* as() const { return view().as<T>(); }
  bool empty() const { return dtype_ == DType::kUndefined; }

  TensorView view() const { return TensorView{const_cast<void*>(data()), dtype_, dims_}; }
  // Same bytes, other dims (element count must agree).
  void reshape(Dims dims);
  // Element i converted to double / int64 (for any numeric dtype).
  double get_double(int64_t i) const;
  int64_t get_int(int64_t i) const;

 private:
  struct Free {
    void operator()(void* p) const;
  };
  DType dtype_ = DType::kUndefined;
  Dims dims_;
  std::unique_ptr<void, Free> buf_;
};

// Converts a numeric tensor to another dtype (used by Cast folding and tests).
HostTensor cast_tensor(const HostTensor& t, DType to);

}  // namespace pt
