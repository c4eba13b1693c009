// Per-stage ONNX models: each stage's share of the source graph, cut at the boundary tensors of the
// plan, with the trained weights. Source nodes belong to the stage whose IR node they became; the
// shape subgraphs folded at import belong to no stage and go into every stage that can recompute
// them from its own inputs, and are replaced by their folded value where it cannot.
#include "importer/stage_export.h"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file.h"
#include <set>
#include <unordered_map>

#include "importer/onnx_model.h"
#include "importer/precision.h"

namespace pt {

namespace fs = std::filesystem;

namespace {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// The source graph by tensor name.
struct SourceIndex {
  explicit SourceIndex(const onnx::GraphProto& graph) : g(graph) {
    for (int i = 0; i < g.initializer_size(); ++i) initializer.emplace(g.initializer(i).name(), i);
    for (const auto& vi : g.input())
      if (!initializer.count(vi.name())) data_inputs.insert(vi.name());
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& o : g.node(i).output())
        if (!o.empty()) producer.emplace(o, i);
  }
  bool is_tensor(const std::string& name) const {
    return producer.count(name) || initializer.count(name) || data_inputs.count(name);
  }
  std::string label(int i) const {
    const auto& n = g.node(i);
    return n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
  }
  const onnx::GraphProto& g;
  std::unordered_map<std::string, int> producer;     // tensor -> index of the node writing it
  std::unordered_map<std::string, int> initializer;  // name -> index
  std::set<std::string> data_inputs;                 // graph inputs that are not initializers
};

// Types as ONNX shape inference of the whole source model sees them (symbolic batch dimension).
// `strict` tells whether the source passes strict shape inference (the full check), which the
// stage models are then held to.
std::unordered_map<std::string, onnx::TypeProto> source_types(const onnx::ModelProto& proto, bool* strict) {
  std::unordered_map<std::string, onnx::TypeProto> types;
  onnx::ModelProto m = proto;
  *strict = true;
  try {
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception&) {
    *strict = false;
    m = proto;
    try {
      onnx::shape_inference::InferShapes(m);
    } catch (const std::exception&) {
      // Without inference every boundary keeps its bound static dims.
    }
  }
  for (const auto* list : {&m.graph().input(), &m.graph().value_info(), &m.graph().output()})
    for (const auto& vi : *list) types[vi.name()] = vi.type();
  return types;
}

// The dim_params of the source's data inputs: the names a symbolic batch dimension goes by.
std::set<std::string> batch_names(const onnx::GraphProto& g, const SourceIndex& src) {
  std::set<std::string> names;
  for (const auto& vi : g.input())
    if (src.data_inputs.count(vi.name()) && vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
      for (const auto& d : vi.type().tensor_type().shape().dim())
        if (d.has_dim_param() && !d.dim_param().empty()) names.insert(d.dim_param());
  return names;
}

// One stage's share of the source graph.
struct StagePart {
  std::vector<std::string> inputs, outputs;
  std::set<int> nodes;                      // source node indices
  std::set<std::string> initializers;       // source initializers read
  std::vector<const Value*> folded;         // folded values written as initializers
};

class StageCutter {
 public:
  StageCutter(const SourceIndex& src, const Graph& ir, const std::vector<int>& owner, int stage,
              const std::set<std::string>& inputs)
      : src_(src), ir_(ir), owner_(owner), stage_(stage), inputs_(inputs) {}

  // Whether `name` can be computed on this stage from its inputs without nodes of other stages.
  bool available(const std::string& name) {
    if (inputs_.count(name) || src_.initializer.count(name)) return true;
    auto p = src_.producer.find(name);
    if (p == src_.producer.end()) return false;  // a data input this stage does not read
    const int owner = owner_[p->second];
    if (owner >= 0) return owner == stage_;
    auto memo = avail_.find(p->second);
    if (memo != avail_.end()) return memo->second;
    bool ok = true;
    for (const auto& in : src_.g.node(p->second).input()) ok = ok && (in.empty() || available(in));
    avail_[p->second] = ok;
    return ok;
  }

  // Adds what computing `name` needs: nodes, initializers, used inputs, folded constants.
  Status need(const std::string& name, StagePart* part) {
    if (!seen_.insert(name).second) return Status::ok();
    if (inputs_.count(name)) {
      used_inputs_.insert(name);
      return Status::ok();
    }
    if (src_.initializer.count(name)) {
      part->initializers.insert(name);
      return Status::ok();
    }
    auto p = src_.producer.find(name);
    if (p == src_.producer.end())
      return invalid_input("--export-stages: stage " + std::to_string(stage_) + " needs the model input '" + name +
                           "', which none of its nodes reads");
    const int i = p->second, owner = owner_[i];
    if (owner == stage_ || (owner < 0 && available(name))) {
      part->nodes.insert(i);
      for (const auto& in : src_.g.node(i).input())
        if (!in.empty()) RETURN_IF_ERROR(need(in, part));
      return Status::ok();
    }
    const Value* v = ir_.find_value(name);
    if (v && v->kind == ValueKind::kConstant && v->data && !v->producer) {
      part->folded.push_back(v);
      return Status::ok();
    }
    return invalid_input("--export-stages: stage " + std::to_string(stage_) + " needs '" + name + "', computed by " +
                         "node '" + src_.label(i) + "' (" + src_.g.node(i).op_type() + ")" +
                         (owner >= 0 ? " of stage " + std::to_string(owner) : "") + ", but does not receive it");
  }

  const std::set<std::string>& used_inputs() const { return used_inputs_; }

 private:
  const SourceIndex& src_;
  const Graph& ir_;
  const std::vector<int>& owner_;
  const int stage_;
  const std::set<std::string>& inputs_;
  std::unordered_map<int, bool> avail_;
  std::set<std::string> seen_, used_inputs_;
};

// The chosen nodes in source order, moved only where the source file is not topologically sorted.
std::vector<int> topological(const SourceIndex& src, const std::set<int>& nodes) {
  std::vector<int> order, pending(nodes.begin(), nodes.end());
  std::set<std::string> ready;
  std::set<std::string> produced;
  for (int i : nodes)
    for (const auto& o : src.g.node(i).output()) produced.insert(o);
  while (!pending.empty()) {
    std::vector<int> later;
    for (int i : pending) {
      bool ok = true;
      for (const auto& in : src.g.node(i).input()) ok = ok && (in.empty() || !produced.count(in) || ready.count(in));
      if (ok) {
        order.push_back(i);
        for (const auto& o : src.g.node(i).output()) ready.insert(o);
      } else {
        later.push_back(i);
      }
    }
    PT_CHECK(later.size() < pending.size()) << "stage nodes form a cycle";
    pending = std::move(later);
  }
  return order;
}

onnx::ValueInfoProto value_info(const std::string& name, const Value& v, const onnx::TypeProto* inferred,
                                const std::set<std::string>& batch, bool symbolic) {
  onnx::ValueInfoProto vi;
  vi.set_name(name);
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int>(v.dtype));
  auto* shape = tt->mutable_shape();
  const onnx::TensorShapeProto* is = nullptr;
  if (symbolic && inferred && inferred->has_tensor_type() && inferred->tensor_type().has_shape() &&
      inferred->tensor_type().shape().dim_size() == static_cast<int>(v.dims.size()))
    is = &inferred->tensor_type().shape();
  for (size_t d = 0; d < v.dims.size(); ++d) {
    auto* dim = shape->add_dim();
    if (is && is->dim(static_cast<int>(d)).has_dim_param() && batch.count(is->dim(static_cast<int>(d)).dim_param()))
      dim->set_dim_param(is->dim(static_cast<int>(d)).dim_param());
    else
      dim->set_dim_value(v.dims[d]);
  }
  return vi;
}

Status check_stage(const onnx::ModelProto& m, int k, bool strict) {
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto copy = m;  // the full check: shape inference with type checks, strict
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(strict, strict ? 1 : 0, false));
  } catch (const std::exception& e) {
    return internal_error("--export-stages: stage " + std::to_string(k) + ": onnx checker: " + one_line(e.what()));
  }
  return Status::ok();
}

}  // namespace

Expected<std::vector<StageModelInfo>> export_stages(const ImportedModel& model,
                                                    const std::map<std::string, HostTensor>& values,
                                                    const std::vector<StageCut>& stages, const std::string& dir,
                                                    bool check_only) {
  const Graph& ir = *model.graph;
  // Stage models follow the trained model's rule: inference form (BatchNorm with running
  // statistics, Dropout off); node indices are unchanged by the rewrite.
  ASSIGN_OR_RETURN(onnx::ModelProto full, trained_proto(model, values, nullptr));
  RETURN_IF_ERROR(to_inference(&full, "--export-stages"));
  const onnx::GraphProto& g = full.graph();
  const SourceIndex src(g);
  const int num_stages = static_cast<int>(stages.size());
  auto stage_name = [](int k) { return "stage " + std::to_string(k); };

  // Owner of every source node: the stage of the forward IR node it became (-1: folded, Constant).
  std::unordered_map<const Node*, int> stage_of;
  for (int k = 0; k < num_stages; ++k)
    for (const Node* n : stages[k].nodes)
      if (n->phase == Phase::kForward) stage_of[n] = k;
  std::vector<int> owner(g.node_size(), -1);
  std::set<const Node*> matched;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) {
      const Value* v = o.empty() ? nullptr : ir.find_value(o);
      if (!v || !v->producer || v->producer->phase != Phase::kForward) continue;
      auto it = stage_of.find(v->producer);
      if (it == stage_of.end())
        return internal_error("--export-stages: " + v->producer->describe() + " is on no stage of the plan");
      owner[i] = it->second;
      matched.insert(v->producer);
      break;
    }
  // Nodes of an expanded LSTM / GRU (importer/rnn_expand.h) belong to their source node, which
  // must then lie whole on one stage.
  std::unordered_map<std::string, int> by_label;
  for (int i = 0; i < g.node_size(); ++i) by_label.emplace(src.label(i), i);
  for (const auto& [n, k] : stage_of) {
    if (matched.count(n) || is_precision_cast(*n)) continue;
    const std::string from = n->attrs.get_string("_expanded_from", "");
    auto s = from.empty() ? by_label.end() : by_label.find(from);
    if (s == by_label.end())
      return unsupported("--export-stages: " + stage_name(k) + ": " + n->describe() +
                         " was made by the importer and is no node of the source model");
    if (owner[s->second] != k)
      return unsupported("--export-stages: node '" + from + "' (" + g.node(s->second).op_type() + ") is split between " +
                         stage_name(k) + " and " +
                         (owner[s->second] < 0 ? std::string("no stage") : stage_name(owner[s->second])) +
                         "; a stage model needs it whole (move the cut with --split-at or --balance)");
  }
  if (check_only) return std::vector<StageModelInfo>{};

  std::set<std::string> batch = batch_names(g, src);
  bool strict = true;
  const auto types = source_types(full, &strict);
  std::vector<StageModelInfo> infos;
  std::vector<std::string> files;
  for (int k = 0; k < num_stages; ++k) {
    const StageCut& cut = stages[k];
    // Inputs: the data inputs its own nodes read, then the activations it receives.
    std::set<std::string> reads_data;
    for (const Node* n : cut.nodes)
      if (n->phase == Phase::kForward)
        for (const Value* v : n->inputs)
          if (v && v->kind == ValueKind::kInput) reads_data.insert(v->name);
    std::vector<std::string> inputs;
    for (const Value* v : ir.inputs)
      if (reads_data.count(v->name)) inputs.push_back(v->name);
    for (const Value* v : cut.recv) {
      v = precision_source(v);  // --precision bf16: a bfloat16 copy stands for its float32 source
      if (!v->producer || v->producer->phase != Phase::kForward) continue;
      if (std::find(inputs.begin(), inputs.end(), v->name) != inputs.end()) continue;
      if (!src.is_tensor(v->name))
        return invalid_input("--export-stages: " + stage_name(k) + " receives '" + v->name +
                             "', which is not a tensor of the source model (the importer made it)");
      inputs.push_back(v->name);
    }
    // Outputs: what it sends, then the model outputs its nodes compute.
    std::vector<std::string> outputs;
    auto add_output = [&](const std::string& name) {
      if (std::find(outputs.begin(), outputs.end(), name) == outputs.end()) outputs.push_back(name);
    };
    for (const Value* v : cut.send) {
      v = precision_source(v);
      if (!v->producer || v->producer->phase != Phase::kForward) continue;
      if (!src.is_tensor(v->name))
        return invalid_input("--export-stages: " + stage_name(k) + " sends '" + v->name +
                             "', which is not a tensor of the source model (the importer made it)");
      add_output(v->name);
    }
    for (const Value* v : ir.outputs)
      if (v->producer && stage_of.count(v->producer) && stage_of.at(v->producer) == k) add_output(v->name);

    const std::set<std::string> input_set(inputs.begin(), inputs.end());
    StageCutter cutter(src, ir, owner, k, input_set);
    StagePart part;
    for (const auto& o : outputs) RETURN_IF_ERROR(cutter.need(o, &part));
    if (outputs.empty()) {
      // A stage without forward work (the loss alone): it passes what it receives through.
      outputs = inputs;
    } else {
      std::vector<std::string> used;
      for (const auto& in : inputs)
        if (cutter.used_inputs().count(in)) used.push_back(in);
      inputs = std::move(used);
    }
    const bool symbolic = !batch.empty() && part.folded.empty();

    onnx::ModelProto m;
    m.set_ir_version(full.ir_version());
    *m.mutable_opset_import() = full.opset_import();
    m.set_producer_name(full.producer_name());
    m.set_producer_version(full.producer_version());
    m.set_domain(full.domain());
    m.set_model_version(full.model_version());
    *m.mutable_functions() = full.functions();
    onnx::GraphProto* sg = m.mutable_graph();
    sg->set_name((g.name().empty() ? model.stem : g.name()) + "_stage" + std::to_string(k));
    StageModelInfo info;
    info.file = "stage" + std::to_string(k) + ".onnx";
    for (int i : topological(src, part.nodes)) {
      *sg->add_node() = g.node(i);
      info.nodes.push_back(src.label(i));
    }
    for (const auto& t : g.initializer())
      if (part.initializers.count(t.name())) *sg->add_initializer() = t;
    for (const Value* v : part.folded) {
      onnx::TensorProto* t = sg->add_initializer();
      t->set_name(v->name);
      t->set_data_type(static_cast<int>(v->data->dtype()));
      for (int64_t d : v->data->dims()) t->add_dims(d);
      tensor_to_proto(*v->data, t);
      info.folded_constants.push_back(v->name);
    }
    auto typed = [&](const std::string& name) -> Expected<onnx::ValueInfoProto> {
      const Value* v = ir.find_value(name);
      if (!v || v->dtype == DType::kUndefined)
        return internal_error("--export-stages: " + stage_name(k) + ": no type for '" + name + "'");
      auto t = types.find(name);
      return value_info(name, *v, t == types.end() ? nullptr : &t->second, batch, symbolic);
    };
    for (const auto& name : inputs) {
      ASSIGN_OR_RETURN(*sg->add_input(), typed(name));
    }
    if (full.ir_version() < 4)  // old IR: initializers are graph inputs as well
      for (const auto& t : sg->initializer()) {
        onnx::ValueInfoProto* vi = sg->add_input();
        vi->set_name(t.name());
        auto* tt = vi->mutable_type()->mutable_tensor_type();
        tt->set_elem_type(t.data_type());
        auto* shape = tt->mutable_shape();
        for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
      }
    for (const auto& name : outputs) {
      ASSIGN_OR_RETURN(*sg->add_output(), typed(name));
    }
    RETURN_IF_ERROR(check_stage(m, k, strict));
    std::string bytes;
    if (!m.SerializeToString(&bytes))
      return internal_error("--export-stages: " + stage_name(k) + " does not serialise (over 2 GB?)");
    files.push_back(std::move(bytes));
    info.inputs = inputs;
    info.outputs = outputs;
    info.strict_check = strict;
    info.batch = symbolic ? *batch.begin()
                          : (ir.inputs.empty() || ir.inputs[0]->dims.empty() ? std::string("1")
                                                                             : std::to_string(ir.inputs[0]->dims[0]));
    infos.push_back(std::move(info));
  }

  // Everything checked: write the files.
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return invalid_input("--export-stages: " + dir + ": cannot create the folder: " + ec.message());
  for (int k = 0; k < num_stages; ++k) RETURN_IF_ERROR(write_file_atomic(fs::path(dir) / infos[k].file, files[k]));
  for (int k = num_stages;; ++k) {  // a previous run's extra stages
    const fs::path stale = fs::path(dir) / ("stage" + std::to_string(k) + ".onnx");
    if (!fs::exists(stale, ec)) break;
    fs::remove(stale, ec);
  }
  nlohmann::ordered_json j;
  j["model"] = model.path;
  j["check"] = strict ? "onnx.checker and strict shape inference"
                      : "onnx.checker and shape inference, not strict: the source model fails strict shape inference";
  j["model_inputs"] = nlohmann::json::array();
  for (const Value* v : ir.inputs) j["model_inputs"].push_back(v->name);
  j["model_outputs"] = nlohmann::json::array();
  for (const Value* v : ir.outputs) j["model_outputs"].push_back(v->name);
  j["stages"] = nlohmann::json::array();
  for (int k = 0; k < num_stages; ++k) {
    const StageModelInfo& s = infos[k];
    nlohmann::ordered_json e;
    e["index"] = k;
    e["file"] = s.file;
    e["inputs"] = s.inputs;
    e["outputs"] = s.outputs;
    e["batch"] = s.batch;
    e["folded_constants"] = s.folded_constants;
    e["nodes"] = s.nodes;
    j["stages"].push_back(std::move(e));
  }
  RETURN_IF_ERROR(write_file_atomic(fs::path(dir) / "stages.json", j.dump(2) + "\n"));
  return infos;
}

}  // namespace pt
