// DType names and sizes, shape helpers, HostTensor storage.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <sstream>
#include <type_traits>

#include "core/tensor.h"

namespace pt {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: case DType::kUint32: return 4;
    case DType::kFloat64: case DType::kInt64: case DType::kUint64: return 8;
    case DType::kUint8: case DType::kInt8: case DType::kBool: return 1;
    case DType::kUint16: case DType::kInt16: case DType::kFloat16: case DType::kBFloat16: return 2;
    case DType::kUndefined: case DType::kString: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    case DType::kUint8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUint16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kUint32: return "uint32";
    case DType::kUint64: return "uint64";
    case DType::kString: return "string";
    case DType::kUndefined: return "undefined";
  }
  return "unknown";
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

std::string dims_str(const Dims& d) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) os << ", ";
    if (d[i] == kUnknownDim) os << "?"; else os << d[i];
  }
  os << "]";
  return os.str();
}

bool dims_known(const Dims& d) {
  for (int64_t x : d) if (x < 0) return false;
  return true;
}

Dims row_major_strides(const Dims& d) {
  Dims s(d.size());
  int64_t acc = 1;
  for (size_t i = d.size(); i-- > 0;) {
    s[i] = acc;
    acc *= d[i];
  }
  return s;
}

bool broadcast_dims(const Dims& a, const Dims& b, Dims* out) {
  size_t r = std::max(a.size(), b.size());
  Dims o(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) o[i] = da;
    else if (da == 1) o[i] = db;
    else return false;
  }
  *out = std::move(o);
  return true;
}

void HostTensor::Free::operator()(void* p) const { std::free(p); }

HostTensor::HostTensor(DType dtype, Dims dims) : dtype_(dtype), dims_(std::move(dims)) {
  size_t n = bytes();
  size_t alloc = ((n + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  if (!p) throw std::bad_alloc();  // callers that can report it (the executor) catch it
  std::memset(p, 0, alloc);
  buf_.reset(p);
}

HostTensor::HostTensor(const HostTensor& o) : HostTensor(o.dtype_, o.dims_) {
  if (o.buf_) std::memcpy(buf_.get(), o.buf_.get(), bytes());
}

HostTensor& HostTensor::operator=(const HostTensor& o) {
  if (this == &o) return *this;
  if (buf_ && dtype_ == o.dtype_ && dims_ == o.dims_) {
    if (o.buf_) std::memcpy(buf_.get(), o.buf_.get(), bytes());
    return *this;
  }
  HostTensor t(o);
  dtype_ = t.dtype_;
  dims_ = std::move(t.dims_);
  buf_ = std::move(t.buf_);
  return *this;
}

HostTensor& HostTensor::operator=(HostTensor&& o) noexcept {
  if (this == &o) return *this;
  if (buf_ && o.buf_ && dtype_ == o.dtype_ && dims_ == o.dims_) {
    std::memcpy(buf_.get(), o.buf_.get(), bytes());
    return *this;
  }
  dtype_ = o.dtype_;
  dims_ = std::move(o.dims_);
  buf_ = std::move(o.buf_);
  o.dtype_ = DType::kUndefined;
  return *this;
}

void HostTensor::reshape(Dims dims) {
  PT_CHECK(numel(dims) == size()) << "reshape " << dims_str(dims_) << " to " << dims_str(dims);
  dims_ = std::move(dims);
}

template <typename F>
static auto dispatch_get(const HostTensor& t, int64_t i, F f) {
  const void* p = t.data();
  switch (t.dtype()) {
    case DType::kFloat32: return f(static_cast<const float*>(p)[i]);
    case DType::kFloat64: return f(static_cast<const double*>(p)[i]);
    case DType::kInt64: return f(static_cast<const int64_t*>(p)[i]);
    case DType::kInt32: return f(static_cast<const int32_t*>(p)[i]);
    case DType::kUint8: return f(static_cast<const uint8_t*>(p)[i]);
    case DType::kInt8: return f(static_cast<const int8_t*>(p)[i]);
    case DType::kBool: return f(static_cast<const bool*>(p)[i]);
    case DType::kInt16: return f(static_cast<const int16_t*>(p)[i]);
    case DType::kUint16: return f(static_cast<const uint16_t*>(p)[i]);
    case DType::kUint32: return f(static_cast<const uint32_t*>(p)[i]);
    case DType::kUint64: return f(static_cast<const uint64_t*>(p)[i]);
    default: PT_CHECK(false) << "no numeric access for " << dtype_name(t.dtype());
  }
  return f(0);
}

double HostTensor::get_double(int64_t i) const {
  return dispatch_get(*this, i, [](auto v) { return static_cast<double>(v); });
}
// A float outside int64's range (or NaN) has no int64 value: converting it is undefined behaviour,
// and the values come from files (a folded Cast of a constant 1e30 to int64). It saturates, NaN
// gives 0.
static int64_t saturate_to_int64(double v) {
  if (std::isnan(v)) return 0;
  if (v <= -0x1p63) return std::numeric_limits<int64_t>::min();
  if (v >= 0x1p63) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(v);
}

int64_t HostTensor::get_int(int64_t i) const {
  return dispatch_get(*this, i, [](auto v) -> int64_t {
    if constexpr (std::is_floating_point_v<decltype(v)>) return saturate_to_int64(v);
    else return static_cast<int64_t>(v);
  });
}

HostTensor cast_tensor(const HostTensor& t, DType to) {
  HostTensor o(to, t.dims());
  int64_t n = t.size();
  void* p = o.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (to) {
      case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(t.get_double(i)); break;
      case DType::kFloat64: static_cast<double*>(p)[i] = t.get_double(i); break;
      case DType::kInt64: static_cast<int64_t*>(p)[i] = t.get_int(i); break;
      case DType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(t.get_int(i)); break;
      case DType::kBool: static_cast<bool*>(p)[i] = t.get_double(i) != 0.0; break;
      case DType::kUint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(t.get_int(i)); break;
      case DType::kInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(t.get_int(i)); break;
      default: PT_CHECK(false) << "cast to " << dtype_name(to) << " is not supported";
    }
  }
  return o;
}

}  // namespace pt
