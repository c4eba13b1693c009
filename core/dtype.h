// Element types and shapes shared by the IR, the kernels and the runtime. The numeric values of
// DType match ONNX's TensorProto::DataType so that conversion is a cast, not a table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pt {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUint32 = 12,
  kUint64 = 13,
  kBFloat16 = 16,
};

// Bytes per element; 0 for kUndefined and kString.
size_t dtype_size(DType t);
// "float32", "int64", ...
const char* dtype_name(DType t);
inline bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <> constexpr DType dtype_of<double>() { return DType::kFloat64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kInt64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kInt32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kUint8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::kInt8; }
template <> constexpr DType dtype_of<bool>() { return DType::kBool; }

// A static shape: every dimension known. kUnknownDim marks a dimension not yet resolved.
using Dims = std::vector<int64_t>;
constexpr int64_t kUnknownDim = -1;

int64_t numel(const Dims& d);           // 1 for a scalar ([])
std::string dims_str(const Dims& d);    // "[64, 10]"
bool dims_known(const Dims& d);         // no kUnknownDim
// Row-major strides in elements.
Dims row_major_strides(const Dims& d);
// numpy broadcasting of two shapes; false when they do not broadcast.
bool broadcast_dims(const Dims& a, const Dims& b, Dims* out);

}  // namespace pt
