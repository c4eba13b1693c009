// TensorProto <-> HostTensor conversion and confined reading of external tensor data.
#include <filesystem>
#include <algorithm>
#include <fstream>

#include "importer/importer.h"
#include "importer/onnx_model.h"

namespace pt {

namespace fs = std::filesystem;

Expected<HostTensor> tensor_from_proto(const onnx::TensorProto& t, const std::string& what) {
  DType dt = static_cast<DType>(t.data_type());
  if (dtype_size(dt) == 0)
    return unsupported(what + ": tensor '" + t.name() + "' has unsupported data type " +
                       std::to_string(t.data_type()));
  Dims dims(t.dims().begin(), t.dims().end());
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) return invalid_input(what + ": tensor '" + t.name() + "' has a negative dimension");
    if (d > 0 && count > (int64_t{1} << 40) / d)
      return invalid_input(what + ": tensor '" + t.name() + "' has implausible dims " + dims_str(dims));
    count *= d;
  }
  // Check the stored size against the dims before allocating anything.
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dt);
  const int64_t stored = t.has_raw_data() ? static_cast<int64_t>(t.raw_data().size() / dtype_size(dt))
                         : std::max({t.float_data_size(), t.double_data_size(), t.int32_data_size(),
                                     t.int64_data_size(), t.uint64_data_size()});
  if (stored != count || (t.has_raw_data() && t.raw_data().size() != bytes))
    return invalid_input(what + ": tensor '" + t.name() + "' holds " + std::to_string(stored) + " values, its dims " +
                         dims_str(dims) + " need " + std::to_string(count));
  HostTensor out(dt, dims);
  auto mismatch = [&](size_t have) {
    return invalid_input(what + ": tensor '" + t.name() + "' holds " + std::to_string(have) +
                         " bytes, its dims " + dims_str(dims) + " need " + std::to_string(bytes));
  };
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes) return mismatch(t.raw_data().size());
    if (bytes) std::memcpy(out.data(), t.raw_data().data(), bytes);
    return out;
  }
  const int64_t n = out.size();
  auto check_count = [&](int64_t have) -> Status {
    if (have != n)
      return invalid_input(what + ": tensor '" + t.name() + "' has " + std::to_string(have) +
                           " values, its dims " + dims_str(dims) + " need " + std::to_string(n));
    return Status::ok();
  };
  switch (dt) {
    case DType::kFloat32:
      RETURN_IF_ERROR(check_count(t.float_data_size()));
      for (int64_t i = 0; i < n; ++i) out.as<float>()[i] = t.float_data(i);
      break;
    case DType::kFloat64:
      RETURN_IF_ERROR(check_count(t.double_data_size()));
      for (int64_t i = 0; i < n; ++i) out.as<double>()[i] = t.double_data(i);
      break;
    case DType::kInt64:
      RETURN_IF_ERROR(check_count(t.int64_data_size()));
      for (int64_t i = 0; i < n; ++i) out.as<int64_t>()[i] = t.int64_data(i);
      break;
    case DType::kUint64: case DType::kUint32:
      RETURN_IF_ERROR(check_count(t.uint64_data_size()));
      for (int64_t i = 0; i < n; ++i) {
        if (dt == DType::kUint64) static_cast<uint64_t*>(out.data())[i] = t.uint64_data(i);
        else static_cast<uint32_t*>(out.data())[i] = static_cast<uint32_t>(t.uint64_data(i));
      }
      break;
    case DType::kInt32: case DType::kInt16: case DType::kInt8: case DType::kUint8: case DType::kUint16:
    case DType::kBool: case DType::kFloat16: case DType::kBFloat16: {
      RETURN_IF_ERROR(check_count(t.int32_data_size()));
      size_t es = dtype_size(dt);
      auto* p = static_cast<unsigned char*>(out.data());
      for (int64_t i = 0; i < n; ++i) {
        int32_t v = t.int32_data(i);
        std::memcpy(p + i * es, &v, es);  // little-endian: the low bytes hold the value
      }
      break;
    }
    default:
      return unsupported(what + ": tensor '" + t.name() + "' of type " + dtype_name(dt));
  }
  return out;
}

void tensor_to_proto(const HostTensor& value, onnx::TensorProto* t) {
  t->clear_float_data();
  t->clear_double_data();
  t->clear_int32_data();
  t->clear_int64_data();
  t->clear_uint64_data();
  t->clear_external_data();
  t->set_data_location(onnx::TensorProto::DEFAULT);
  t->set_raw_data(value.data(), value.bytes());
}

Expected<HostTensor> read_tensor_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_input(path + ": cannot be opened");
  onnx::TensorProto t;
  if (!t.ParseFromIstream(&in)) return invalid_input(path + ": not a serialized TensorProto");
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return unsupported(path + ": tensor files with external data are not supported");
  return tensor_from_proto(t, path);
}

Expected<std::string> read_external_data(const onnx::TensorProto& t, const std::string& dir,
                                         const std::string& model_path) {
  std::string location;
  int64_t offset = 0, length = -1;
  bool has_length = false;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value()), has_length = true;
    } catch (const std::exception&) {
      return invalid_input(model_path + ": tensor '" + t.name() + "': external data " + kv.key() +
                           " '" + kv.value() + "' is not a number");
    }
  }
  const std::string who = model_path + ": tensor '" + t.name() + "': external data '" + location + "'";
  if (location.empty()) return invalid_input(model_path + ": tensor '" + t.name() + "' has external data without a location");
  fs::path loc(location);
  if (loc.is_absolute()) return invalid_input(who + " is an absolute path; locations must be relative to the model's folder");
  for (const auto& part : loc)
    if (part == "..") return invalid_input(who + " leaves the model's folder ('..')");
  std::error_code ec;
  fs::path base = fs::canonical(dir.empty() ? fs::path(".") : fs::path(dir), ec);
  if (ec) return invalid_input(who + ": cannot resolve the model's folder: " + ec.message());
  fs::path full = fs::canonical(base / loc, ec);
  if (ec) return invalid_input(who + " cannot be opened: " + ec.message());
  auto rel = full.lexically_relative(base);
  if (rel.empty() || *rel.begin() == "..")
    return invalid_input(who + " resolves (through a symbolic link) to " + full.string() + ", outside the model's folder");
  if (offset < 0) return invalid_input(who + ": negative offset");
  if (has_length && length < 0) return invalid_input(who + ": negative length " + std::to_string(length));
  uintmax_t fsize = fs::file_size(full, ec);
  if (ec) return invalid_input(who + " cannot be read: " + ec.message());
  if (static_cast<uintmax_t>(offset) > fsize)
    return invalid_input(who + ": offset " + std::to_string(offset) + " is beyond the file's end (" + std::to_string(fsize) + " bytes)");
  if (length < 0) length = static_cast<int64_t>(fsize) - offset;
  if (static_cast<uintmax_t>(length) > fsize - static_cast<uintmax_t>(offset))
    return invalid_input(who + ": offset " + std::to_string(offset) + " + length " + std::to_string(length) +
                         " is beyond the file's end (" + std::to_string(fsize) + " bytes)");
  std::ifstream in(full, std::ios::binary);
  if (!in) return invalid_input(who + " cannot be opened");
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (in.gcount() != length) return invalid_input(who + ": short read");
  return bytes;
}

}  // namespace pt
