// Writing the trained model: the source ModelProto with trainable initializers replaced, every
// other field untouched but for the training-mode nodes, which the inference export turns into
// their inference form; external data stays external. Temporary files, then rename. The
// substitution, the inference rewrite and the atomic write are shared with the per-stage export.
#include <filesystem>
#include <fstream>
#include <set>

#include "core/file.h"
#include "importer/importer.h"
#include "importer/onnx_model.h"


namespace pt {

namespace fs = std::filesystem;

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

namespace {

int64_t proto_opset(const onnx::ModelProto& proto) {
  for (const auto& o : proto.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

std::string node_name(const onnx::NodeProto& n, int i) {
  return "node '" + (n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name()) + "' (" + n.op_type() + ")";
}

void set_int_attr(onnx::NodeProto* n, const std::string& name, int64_t value) {
  for (auto& a : *n->mutable_attribute())
    if (a.name() == name) {
      a.set_type(onnx::AttributeProto::INT);
      a.set_i(value);
      return;
    }
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

void erase_attr(onnx::NodeProto* n, const std::string& name) {
  auto* attrs = n->mutable_attribute();
  for (int i = attrs->size() - 1; i >= 0; --i)
    if (attrs->Get(i).name() == name) attrs->DeleteSubrange(i, 1);
}

// Sets a boolean tensor to false, keeping its name and dims.
void set_false(onnx::TensorProto* t) {
  int64_t n = 1;
  for (int64_t d : t->dims()) n *= d;
  t->clear_int32_data();
  t->clear_external_data();
  t->set_data_location(onnx::TensorProto::DEFAULT);
  t->set_data_type(onnx::TensorProto::BOOL);
  t->set_raw_data(std::string(static_cast<size_t>(n), '\0'));
}

// Dropout's training_mode inputs: where one is a constant (Constant node or initializer) that only
// training_mode inputs read, it becomes false in place, so that nothing is left unused; the others
// are dropped from their Dropout (absent means false). Returns the names set to false.
std::set<std::string> switch_off_dropout(onnx::GraphProto* g) {
  std::map<std::string, int> readers, mode_readers;
  for (const auto& n : g->node())
    for (int i = 0; i < n.input_size(); ++i) {
      ++readers[n.input(i)];
      if (n.op_type() == "Dropout" && i == 2) ++mode_readers[n.input(i)];
    }
  for (const auto& o : g->output()) ++readers[o.name()];
  std::set<std::string> off;
  for (auto& n : *g->mutable_node())
    if (n.op_type() == "Constant" && n.output_size() == 1 && mode_readers.count(n.output(0)) &&
        readers[n.output(0)] == mode_readers[n.output(0)])
      for (auto& a : *n.mutable_attribute())
        if (a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR) {
          set_false(a.mutable_t());
          off.insert(n.output(0));
        }
  for (auto& t : *g->mutable_initializer())
    if (mode_readers.count(t.name()) && readers[t.name()] == mode_readers[t.name()]) {
      set_false(&t);
      off.insert(t.name());
    }
  return off;
}

}  // namespace

Status to_inference(onnx::ModelProto* proto, const std::string& what) {
  const int64_t opset = proto_opset(*proto);
  onnx::GraphProto* g = proto->mutable_graph();
  const std::set<std::string> off = opset >= 12 ? switch_off_dropout(g) : std::set<std::string>{};
  std::set<std::string> dropped;  // outputs that only training computes
  for (int i = 0; i < g->node_size(); ++i) {
    onnx::NodeProto* n = g->mutable_node(i);
    if (!n->domain().empty() && n->domain() != "ai.onnx") continue;
    size_t keep = static_cast<size_t>(n->output_size());
    if (n->op_type() == "BatchNormalization") {
      // Opsets 7 to 13 say training by the extra outputs (running mean and variance, saved mean
      // and variance), 14+ by training_mode, 6 and older by is_test: one output, running statistics.
      keep = 1;
      if (opset >= 14) erase_attr(n, "training_mode");
      if (opset <= 6) set_int_attr(n, "is_test", 1);
    } else if (n->op_type() == "Dropout") {
      // Opset 12+: training_mode (input 2) absent means false; before, Dropout is the identity at
      // inference (6 and older: is_test). The mask output is training's.
      keep = 1;
      if (n->input_size() > 2 && !off.count(n->input(2))) n->mutable_input()->DeleteSubrange(2, n->input_size() - 2);
      if (opset <= 6) set_int_attr(n, "is_test", 1);
    }
    for (int k = static_cast<int>(keep); k < n->output_size(); ++k)
      if (!n->output(k).empty()) dropped.insert(n->output(k));
    if (static_cast<int>(keep) < n->output_size())
      n->mutable_output()->DeleteSubrange(static_cast<int>(keep), n->output_size() - static_cast<int>(keep));
  }
  if (dropped.empty()) return Status::ok();
  for (int i = 0; i < g->node_size(); ++i)
    for (const auto& in : g->node(i).input())
      if (dropped.count(in))
        return unsupported(what + ": " + node_name(g->node(i), i) + " reads '" + in +
                           "', which only a training-mode node computes: no inference model without it "
                           "(use --export-training)");
  auto erase_named = [&](auto* list) {
    for (int i = list->size() - 1; i >= 0; --i)
      if (dropped.count(list->Get(i).name())) list->DeleteSubrange(i, 1);
  };
  erase_named(g->mutable_output());
  erase_named(g->mutable_value_info());
  if (g->output_size() == 0) return unsupported(what + ": every graph output is a training statistic");
  return Status::ok();
}

Status export_onnx(const ImportedModel& model, const std::map<std::string, HostTensor>& values,
                   const std::string& out_path, ExportMode mode) {
  std::error_code ec;
  if (fs::exists(out_path, ec) && fs::equivalent(out_path, model.path, ec))
    return invalid_input(out_path + ": refusing to overwrite the input model");
  std::set<std::string> was_external;
  ASSIGN_OR_RETURN(onnx::ModelProto proto, trained_proto(model, values, &was_external));
  if (mode == ExportMode::kInference) RETURN_IF_ERROR(to_inference(&proto, out_path));
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
  if (!external.empty()) RETURN_IF_ERROR(write_file_atomic(out.parent_path() / data_name, external));
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) return internal_error("export: the model does not serialise (over 2 GB?)");
  return write_file_atomic(out, bytes);
}

}  // namespace pt
