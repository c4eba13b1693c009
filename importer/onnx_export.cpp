// Writing the trained model: the source ModelProto with trainable initializers replaced, every
// other field untouched; external data stays external. Temporary files, then rename. The
// substitution and the atomic write are shared with the per-stage export (stage_export.cpp).
#include <filesystem>
#include <fstream>
#include <set>

#include "importer/importer.h"
#include "importer/onnx_model.h"

namespace pt {

namespace fs = std::filesystem;

Status write_atomically(const fs::path& path, const std::string& bytes) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return invalid_input(path.string() + ": cannot be written");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return invalid_input(path.string() + ": write failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return invalid_input(path.string() + ": cannot rename the temporary file: " + ec.message());
  return Status::ok();
}

Expected<onnx::ModelProto> trained_proto(const ImportedModel& model, const std::map<std::string, HostTensor>& values,
                                         std::set<std::string>* was_external) {
  onnx::ModelProto proto = model.source->proto;
  std::set<std::string> reread;  // stripped at import and not replaced: their data comes from the file
  for (const auto& name : model.source->stripped)
    if (!values.count(name)) reread.insert(name);
  ASSIGN_OR_RETURN(auto from_file, reread_initializers(model, reread));
  std::set<std::string> done;
  for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
    if (auto f = from_file.find(t.name()); f != from_file.end()) t = std::move(f->second);
    const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
    if (external && was_external) was_external->insert(t.name());
    auto it = values.find(t.name());
    if (it != values.end()) {
      const HostTensor& v = it->second;
      Dims dims(t.dims().begin(), t.dims().end());
      if (static_cast<DType>(t.data_type()) != v.dtype() || dims != v.dims())
        return internal_error("export: initializer '" + t.name() + "' is " + dims_str(dims) + ", the new value " +
                              dims_str(v.dims()));
      tensor_to_proto(v, &t);
      done.insert(t.name());
    } else if (external) {
      ASSIGN_OR_RETURN(std::string bytes, read_external_data(t, model.source->dir, model.path));
      t.clear_external_data();
      t.set_data_location(onnx::TensorProto::DEFAULT);
      t.set_raw_data(std::move(bytes));
    }
  }
  // Weights that came from Constant nodes go back into those nodes' value tensors.
  for (auto& n : *proto.mutable_graph()->mutable_node()) {
    if (n.op_type() != "Constant" || n.output_size() != 1) continue;
    auto it = values.find(n.output(0));
    if (it == values.end()) continue;
    for (auto& a : *n.mutable_attribute())
      if (a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR) {
        Dims dims(a.t().dims().begin(), a.t().dims().end());
        if (static_cast<DType>(a.t().data_type()) != it->second.dtype() || dims != it->second.dims())
          return internal_error("export: Constant '" + n.output(0) + "' is " + dims_str(dims) + ", the new value " +
                                dims_str(it->second.dims()));
        tensor_to_proto(it->second, a.mutable_t());
        done.insert(it->first);
      }
  }
  for (const auto& [name, v] : values)
    if (!done.count(name)) return internal_error("export: '" + name + "' is not an initializer of " + model.path);
  return proto;
}

Status export_onnx(const ImportedModel& model, const std::map<std::string, HostTensor>& values,
                   const std::string& out_path) {
  std::error_code ec;
  if (fs::exists(out_path, ec) && fs::equivalent(out_path, model.path, ec))
    return invalid_input(out_path + ": refusing to overwrite the input model");
  std::set<std::string> was_external;
  ASSIGN_OR_RETURN(onnx::ModelProto proto, trained_proto(model, values, &was_external));
  const fs::path out(out_path);
  const std::string data_name = out.filename().string() + ".data";
  std::string external;  // bytes of the new external data file
  for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
    if (!was_external.count(t.name())) continue;
    // Keep it external, in the new data file, 64-byte aligned.
    while (external.size() % 64) external.push_back('\0');
    const size_t offset = external.size();
    external += t.raw_data();
    const size_t length = t.raw_data().size();
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* k, const std::string& v) {
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", data_name);
    add("offset", std::to_string(offset));
    add("length", std::to_string(length));
  }
  if (!external.empty()) RETURN_IF_ERROR(write_atomically(out.parent_path() / data_name, external));
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) return internal_error("export: the model does not serialise (over 2 GB?)");
  return write_atomically(out, bytes);
}

}  // namespace pt
