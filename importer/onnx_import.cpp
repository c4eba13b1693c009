// Loading an ONNX file into the IR: parsing, structural checks, onnx::checker, opset conversion,
// external data, batch binding, then shape inference, folding and the unsupported-op report.
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <map>
#include <set>
#include <unordered_map>

#include "core/file.h"
#include "core/hash.h"
#include "importer/grad/grad_registry.h"
#include "importer/importer.h"
#include "importer/onnx_model.h"
#include "importer/rnn_expand.h"
#include "importer/shape_infer.h"

namespace pt {

namespace fs = std::filesystem;

// Initializers smaller than this keep their data in the source proto after import.
constexpr size_t kKeepInlineBytes = 4096;

namespace {

constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 21;
constexpr int64_t kConvertTarget = 13;

// ONNX's ConvertVersion builds a DefaultVersionConverter for every call, which copies every
// operator schema with its history (about 6 ms, 14 ms under ASan, against well under 1 ms for the
// rest of a small model's import); one converter serves every import (convert_version is const).
const onnx::version_conversion::DefaultVersionConverter& version_converter() {
  static const onnx::version_conversion::DefaultVersionConverter converter;
  return converter;
}

// The newest default-domain opset the system's ONNX library (Debian's 1.12) knows. Models of a
// newer opset are checked by check_newer_opset below instead of onnx::checker::check_model.
constexpr int64_t kCheckerOpset = 17;

// Default-domain ops that appeared or changed in opsets 18 to 21 (ONNX's docs/Changelog.md). The
// 1.12 checker knows only their opset-17 form or nothing, so it must not judge them: our own
// shape functions check their inputs and attributes, per opset, when the op is supported.
const std::set<std::string>& ops_changed_after_checker() {
  static const std::set<std::string> s = {
      // 18
      "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "CenterCropPad", "Col2Im", "GroupNormalization",
      "LpPool", "Mish", "OptionalGetElement", "OptionalHasElement", "Pad", "ReduceL1", "ReduceL2", "ReduceLogSum",
      "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSumSquare", "Resize",
      "ScatterElements", "ScatterND", "Split",
      // 19
      "AveragePool", "Cast", "CastLike", "Constant", "DeformConv", "DequantizeLinear", "Equal", "Identity", "If",
      "Loop", "QuantizeLinear", "Reshape", "Scan", "Shape", "Size",
      // 20
      "AffineGrid", "ConstantOfShape", "DFT", "Gelu", "GridSample", "ImageDecoder", "IsInf", "IsNaN",
      "RegexFullMatch", "StringConcat", "StringSplit",
      // 21
      "Flatten", "QLinearMatMul", "Squeeze", "Transpose", "Unsqueeze"};
  return s;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string node_label(const onnx::NodeProto& n, int index) {
  std::string name = n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
  return "node '" + name + "' (" + n.op_type() + ")";
}

Expected<onnx::ModelProto> parse_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return invalid_input(path + ": no such file");
  if (fs::is_directory(path, ec)) return invalid_input(path + ": is a directory, not an ONNX file");
  RETURN_IF_ERROR(check_regular_file(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_input(path + ": cannot be read (permission denied?)");
  google::protobuf::io::IstreamInputStream zin(&in);
  google::protobuf::io::CodedInputStream cin(&zin);
  cin.SetTotalBytesLimit(INT32_MAX);
  onnx::ModelProto m;
  if (!m.ParseFromCodedStream(&cin) || !cin.ConsumedEntireMessage())
    return invalid_input(path + ": not an ONNX model (the bytes do not parse as a ModelProto)");
  if (!m.has_graph() || m.ir_version() == 0)
    return invalid_input(path + ": not an ONNX model (no graph or no IR version)");
  return m;
}

std::string file_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t h = kFnv1a64Offset;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) h = fnv1a64(buf, static_cast<size_t>(in.gcount()), h);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// Names go into one-line messages and the JSON reports: a name with bytes that are not UTF-8, or
// with control characters (a newline), is refused, shown with those bytes escaped as \xNN.
Status check_name(const std::string& name, const std::string& what, const std::string& path) {
  std::string shown;
  bool bad = false;
  for (size_t i = 0; i < name.size();) {
    const auto c = static_cast<unsigned char>(name[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= name.size() && c >= 0x20 && c != 0x7f;
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(name[i + k]) >> 6) == 2;
    if (ok) {
      shown.append(name, i, len);
      i += len;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      shown += hex;
      bad = true;
      ++i;
    }
  }
  if (bad) return invalid_input(path + ": " + what + " '" + shown + "' is not printable UTF-8");
  return Status::ok();
}

// Duplicate outputs, dangling inputs and cycles, named precisely (the checker only says
// "not topologically sorted"). Reorders the nodes topologically when they are not.
Status check_structure(onnx::GraphProto* g, const std::string& path) {
  for (const auto& i : g->input()) RETURN_IF_ERROR(check_name(i.name(), "graph input", path));
  for (const auto& o : g->output()) RETURN_IF_ERROR(check_name(o.name(), "graph output", path));
  for (const auto& t : g->initializer()) RETURN_IF_ERROR(check_name(t.name(), "initializer", path));
  for (const auto& n : g->node()) {
    RETURN_IF_ERROR(check_name(n.name(), "node", path));
    RETURN_IF_ERROR(check_name(n.domain() + "::" + n.op_type(), "operator", path));
    for (const auto& a : n.attribute()) RETURN_IF_ERROR(check_name(a.name(), "attribute", path));
    for (const auto& v : n.input()) RETURN_IF_ERROR(check_name(v, "tensor", path));
    for (const auto& v : n.output()) RETURN_IF_ERROR(check_name(v, "tensor", path));
  }
  std::map<std::string, std::string> defined;  // name -> who defines it
  for (const auto& i : g->input()) defined[i.name()] = "graph input";
  for (const auto& t : g->initializer()) defined[t.name()] = "initializer";
  std::map<std::string, int> producer;
  for (int i = 0; i < g->node_size(); ++i) {
    for (const auto& o : g->node(i).output()) {
      if (o.empty()) continue;
      if (producer.count(o))
        return invalid_input(path + ": " + node_label(g->node(i), i) + " writes output '" + o +
                             "', which " + node_label(g->node(producer[o]), producer[o]) + " also writes");
      if (defined.count(o) && defined[o] == "initializer")
        return invalid_input(path + ": " + node_label(g->node(i), i) + " writes '" + o + "', which is also an initializer");
      producer[o] = i;
    }
  }
  for (int i = 0; i < g->node_size(); ++i)
    for (const auto& in : g->node(i).input())
      if (!in.empty() && !defined.count(in) && !producer.count(in))
        return invalid_input(path + ": " + node_label(g->node(i), i) + " reads '" + in +
                             "', which no node, graph input or initializer defines");
  for (const auto& o : g->output())
    if (!defined.count(o.name()) && !producer.count(o.name()))
      return invalid_input(path + ": graph output '" + o.name() + "' is not produced by any node");
  // Kahn's algorithm; leftovers are on a cycle.
  const int n = g->node_size();
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i)
    for (const auto& in : g->node(i).input()) {
      auto it = producer.find(in);
      if (!in.empty() && it != producer.end() && !defined.count(in)) {
        ++indeg[i];
        users[it->second].push_back(i);
      }
    }
  std::vector<int> order, ready;
  for (int i = n - 1; i >= 0; --i)
    if (indeg[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    std::sort(ready.begin(), ready.end(), std::greater<>());  // keep the file's order when possible
    int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (int u : users[i])
      if (--indeg[u] == 0) ready.push_back(u);
  }
  if (static_cast<int>(order.size()) != n) {
    std::string names;
    int shown = 0;
    for (int i = 0; i < n && shown < 6; ++i)
      if (indeg[i] > 0) {
        names += (shown++ ? ", " : "") + node_label(g->node(i), i);
      }
    return invalid_input(path + ": the graph has a cycle through " + names);
  }
  bool sorted = true;
  for (int i = 0; i < n; ++i) sorted &= order[i] == i;
  if (!sorted) {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (int i : order) *nodes.Add() = g->node(i);
    g->mutable_node()->Swap(&nodes);
  }
  return Status::ok();
}

// The checks of onnx::checker::check_model for a model of opset 18 to 21, which the 1.12 checker
// refuses: initializers and graph inputs/outputs as the checker checks them, and every node of an
// op unchanged since opset 17 against its opset-17 schema. Ops new or changed in 18 to 21 are left
// to our shape functions; the graph's structure was checked by check_structure.
// Models below opset 7 go through ONNX's shape inference and version converter, which trust the
// graph: a Conv stride of 0 divides by zero (SIGFPE); the inference functions of Gemm and MatMul
// (versions below 7), of RNN, LSTM and GRU (versions 1 to 6) and of Conv and ConvTranspose (version
// 1) index dimensions of their inputs
// without checking the rank (a rank-0 or rank-1 operand: SIGSEGV, or a read past the end). What
// they would crash on is refused here first. The ranks are those ONNX's inference sees
// at the node: declared (graph inputs, initializers, outputs, value_info; a name declared twice
// with different ranks is refused, as ONNX would read one where the other was checked) or, for a
// value made by an earlier node, inferred by ONNX from the nodes before it (fuzz_model found both).
namespace {

// The ranks of the values of g with a shape, by name; a second declaration must agree.
Status declared_ranks(const onnx::GraphProto& g, const std::string& path, std::map<std::string, int>* rank) {
  auto add = [&](const std::string& name, int r, const char* as) -> Status {
    auto [it, fresh] = rank->emplace(name, r);
    if (!fresh && it->second != r)
      return invalid_input(path + ": '" + name + "' is declared with rank " + std::to_string(it->second) + " and, as " +
                           as + ", with rank " + std::to_string(r));
    return Status::ok();
  };
  auto shaped = [](const onnx::ValueInfoProto& vi) {
    return vi.type().has_tensor_type() && vi.type().tensor_type().has_shape();
  };
  for (const auto& vi : g.input())
    if (shaped(vi)) RETURN_IF_ERROR(add(vi.name(), vi.type().tensor_type().shape().dim_size(), "a graph input"));
  for (const auto& t : g.initializer()) RETURN_IF_ERROR(add(t.name(), t.dims_size(), "an initializer"));
  for (const auto& vi : g.output())
    if (shaped(vi)) RETURN_IF_ERROR(add(vi.name(), vi.type().tensor_type().shape().dim_size(), "a graph output"));
  for (const auto& vi : g.value_info())
    if (shaped(vi)) RETURN_IF_ERROR(add(vi.name(), vi.type().tensor_type().shape().dim_size(), "a value_info"));
  return Status::ok();
}

// The inputs (by position) whose rank an old inference function relies on, and the ranks it
// needs: Gemm's A and B 2, MatMul's 1 or more, the recurrent ops' X 3, ConvTranspose's W 2 or more.
// (Audited against ONNX 1.12's old.cc: the other inference functions of versions below 7 check
// the ranks they index, or index only below the rank.)
struct RankRule {
  int input;
  int min, max;
};
std::vector<RankRule> old_rank_rules(const std::string& op) {
  if (op == "Gemm") return {{0, 2, 2}, {1, 2, 2}};
  if (op == "MatMul") return {{0, 1, INT32_MAX}, {1, 1, INT32_MAX}};
  if (op == "RNN" || op == "LSTM" || op == "GRU") return {{0, 3, 3}};
  if (op == "ConvTranspose") return {{1, 2, INT32_MAX}};  // version 1 reads W's dim 1 unchecked
  return {};
}

// Pairs of inputs that must have the same rank: Conv's version-1 inference takes the kernel shape
// from W's dims 2.. when there is no kernel_shape attribute and then indexes X's dims, dilations and
// pads (all sized by X's rank) by W's spatial dims (fuzz_model: W of rank 5 beside X of rank 4,
// SIGSEGV in convPoolShapeInference1); ConvTranspose's version 1 does the same.
std::vector<std::pair<int, int>> old_same_rank_rules(const std::string& op) {
  if (op == "Conv" || op == "ConvTranspose") return {{0, 1}};
  return {};
}

}  // namespace

Status check_old_opset_model(const onnx::ModelProto& m, const std::string& path) {
  const onnx::GraphProto& g = m.graph();
  std::map<std::string, int> rank;
  RETURN_IF_ERROR(declared_ranks(g, path, &rank));
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    const std::string where = path + ": " + node_label(n, i);
    for (const auto& a : n.attribute()) {
      const bool positive = a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape";
      if (!positive && a.name() != "pads") continue;
      for (int64_t v : a.ints())
        if (positive ? v < 1 : v < 0)
          return invalid_input(where + ": attribute " + a.name() + " holds " + std::to_string(v) +
                               (positive ? "; every value must be at least 1" : "; pads must not be negative"));
    }
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    const std::vector<RankRule> rules = old_rank_rules(n.op_type());
    const std::vector<std::pair<int, int>> same = old_same_rank_rules(n.op_type());
    std::map<std::string, int> at = rank;  // the ranks ONNX's inference knows when it reaches node i
    bool inferred = false;
    // The rank of input k as ONNX's inference sees it at node i, or -1 (absent or unknown).
    auto rank_of = [&](int k) -> Expected<int> {
      if (k >= n.input_size() || n.input(k).empty()) return -1;
      const std::string& name = n.input(k);
      if (!at.count(name) && !inferred) {  // made by an earlier node: infer the nodes before this one
        onnx::ModelProto prefix = m;
        prefix.mutable_graph()->mutable_node()->DeleteSubrange(i, g.node_size() - i);
        try {
          onnx::shape_inference::InferShapes(prefix);
        } catch (const std::exception&) {
        }
        at.clear();
        RETURN_IF_ERROR(declared_ranks(prefix.graph(), path, &at));
        inferred = true;
      }
      auto it = at.find(name);
      return it == at.end() ? -1 : it->second;
    };
    for (const RankRule& r : rules) {
      ASSIGN_OR_RETURN(const int got, rank_of(r.input));
      if (got >= 0 && (got < r.min || got > r.max))
        return invalid_input(where + ": input '" + n.input(r.input) + "' has rank " + std::to_string(got) + "; " +
                             n.op_type() + " wants rank " + std::to_string(r.min) + (r.min == r.max ? "" : " or more"));
    }
    for (const auto& [a, b] : same) {
      ASSIGN_OR_RETURN(const int ra, rank_of(a));
      ASSIGN_OR_RETURN(const int rb, rank_of(b));
      if (ra >= 0 && rb >= 0 && ra != rb)
        return invalid_input(where + ": input '" + n.input(a) + "' has rank " + std::to_string(ra) + " and input '" +
                             n.input(b) + "' rank " + std::to_string(rb) + "; " + n.op_type() +
                             " wants them of the same rank");
    }
  }
  return Status::ok();
}

Status check_newer_opset(const onnx::ModelProto& m, const std::string& path) {
  onnx::checker::CheckerContext ctx;
  ctx.set_ir_version(static_cast<int>(std::min<int64_t>(m.ir_version(), static_cast<int64_t>(onnx::IR_VERSION))));
  std::unordered_map<std::string, int> imports;
  for (const auto& o : m.opset_import())
    imports[o.domain() == "ai.onnx" ? "" : o.domain()] = static_cast<int>(o.version());
  imports[""] = static_cast<int>(kCheckerOpset);
  ctx.set_opset_imports(imports);
  onnx::checker::LexicalScopeContext lex;
  const auto& g = m.graph();
  try {
    for (const auto& t : g.initializer()) onnx::checker::check_tensor(t, ctx);
    for (const auto& vi : g.input()) onnx::checker::check_value_info(vi, ctx);
    for (const auto& vi : g.output()) onnx::checker::check_value_info(vi, ctx);
    for (const auto& n : g.node()) {
      const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
      if (default_domain && !ops_changed_after_checker().count(n.op_type())) onnx::checker::check_node(n, ctx, lex);
    }
  } catch (const std::exception& e) {
    return invalid_input(path + ": onnx checker (opset-" + std::to_string(kCheckerOpset) +
                         " schemas of ops unchanged since): " + one_line(e.what()));
  }
  return Status::ok();
}

int64_t default_opset(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

Expected<Attribute> convert_attribute(const onnx::AttributeProto& a, const std::string& where) {
  switch (a.type()) {
    case onnx::AttributeProto::INT: return Attribute(a.i());
    case onnx::AttributeProto::FLOAT: return Attribute(a.f());
    case onnx::AttributeProto::STRING: return Attribute(a.s());
    case onnx::AttributeProto::INTS: return Attribute(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case onnx::AttributeProto::FLOATS: return Attribute(std::vector<float>(a.floats().begin(), a.floats().end()));
    case onnx::AttributeProto::STRINGS: return Attribute(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    case onnx::AttributeProto::TENSOR: {
      ASSIGN_OR_RETURN(HostTensor t, tensor_from_proto(a.t(), where));
      return Attribute(std::make_shared<const HostTensor>(std::move(t)));
    }
    default:
      return unsupported(where + ": attribute '" + a.name() + "' has a kind this tool does not read (graphs, sparse tensors)");
  }
}

// Constant node -> its value.
Expected<HostTensor> constant_value(const Node& n, const std::string& where) {
  if (const HostTensor* t = n.attrs.get_tensor("value")) return *t;
  const auto& all = n.attrs.all();
  if (all.count("value_float")) { float v = n.attrs.get_float("value_float", 0); return HostTensor::from<float>({}, std::span<const float>(&v, 1)); }
  if (all.count("value_int")) { int64_t v = n.attrs.get_int("value_int", 0); return HostTensor::from<int64_t>({}, std::span<const int64_t>(&v, 1)); }
  if (all.count("value_floats")) { auto v = n.attrs.get_floats("value_floats"); return HostTensor::from<float>({static_cast<int64_t>(v.size())}, v); }
  if (all.count("value_ints")) { auto v = n.attrs.get_ints("value_ints"); return HostTensor::from<int64_t>({static_cast<int64_t>(v.size())}, v); }
  return unsupported(where + ": Constant without a tensor, float(s) or int(s) value (sparse and string constants are not supported)");
}

Status bind_input_dims(const onnx::ValueInfoProto& vi, int64_t batch, const std::string& path, Dims* dims, DType* dtype) {
  if (!vi.type().has_tensor_type())
    return unsupported(path + ": graph input '" + vi.name() + "' is not a tensor");
  const auto& tt = vi.type().tensor_type();
  *dtype = static_cast<DType>(tt.elem_type());
  if (!tt.has_shape()) return invalid_input(path + ": graph input '" + vi.name() + "' has no shape");
  dims->clear();
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto& dim = tt.shape().dim(d);
    if (dim.has_dim_value()) {
      dims->push_back(dim.dim_value());
    } else if (d == 0) {
      dims->push_back(batch);  // the symbolic batch dimension
    } else {
      return invalid_input(path + ": graph input '" + vi.name() + "' dimension " + std::to_string(d) +
                           " is symbolic ('" + dim.dim_param() + "'); only the first (batch) dimension may be symbolic: "
                           "export the model with a fixed size there (for a sequence, the length you train at)");
    }
  }
  return Status::ok();
}

// Dropout nodes read the runtime's step counter (their masks are a function of seed, step and
// element index) instead of their constant ratio / training_mode inputs, which became attributes;
// each gets a mask output for its gradient.
// BatchNormalization nodes that train read it too (input 5), to use their running statistics in
// evaluation passes (step -1).
Value* step_value(Graph& g) {
  if (!g.rng_step) {
    g.rng_step = g.add_value("rng_step", DType::kInt64, {}, ValueKind::kHyper);
    g.rng_step->data = std::make_shared<HostTensor>(DType::kInt64, Dims{});
    g.rng_step->data->as<int64_t>()[0] = 0;  // the graph's own semantics until a runtime says -1 (evaluation)
  }
  return g.rng_step;
}

void lower_random_ops(Graph& g, uint64_t seed) {
  for (auto& up : g.nodes()) {
    Node* n = up.get();
    if (n->op_type == "BatchNormalization" && n->attrs.get_int("_training", 0)) {
      n->inputs.resize(6);
      n->inputs[5] = step_value(g);
      g.rng_step->consumers.push_back(n);
      continue;
    }
    if (n->op_type != "Dropout") continue;
    step_value(g);
    for (size_t i = 1; i < n->inputs.size(); ++i)
      if (n->inputs[i]) std::erase(n->inputs[i]->consumers, n);
    n->inputs.resize(2);
    n->inputs[1] = g.rng_step;
    g.rng_step->consumers.push_back(n);
    if (n->outputs.size() < 2 || !n->outputs[1]) {
      Value* mask = g.add_value(n->name + "/mask", DType::kBool, n->inputs[0]->dims, ValueKind::kActivation);
      n->outputs.resize(2);
      n->outputs[1] = mask;
      mask->producer = n;
    }
    n->attrs.set("seed", static_cast<int64_t>((seed * 0x9e3779b97f4a7c15ULL) ^ static_cast<uint64_t>(n->id + 1)));
  }
}

// Inputs of an op that are not data: exponents, bounds, shapes, axes, indices, pads, masks,
// labels, running statistics. No gradient flows through them into a weight worth training.
bool is_data_slot(const Node& n, size_t i) {
  static const std::map<std::string, std::set<size_t>> kNotData = {
      {"Pow", {1}}, {"Clip", {1, 2}}, {"Reshape", {1}}, {"Expand", {1}}, {"Tile", {1}},
      {"Slice", {1, 2, 3, 4}}, {"Pad", {1, 2, 3}}, {"Unsqueeze", {1}}, {"Squeeze", {1}},
      {"ReduceSum", {1}}, {"ReduceMean", {1}}, {"ReduceMax", {1}}, {"ReduceMin", {1}}, {"ReduceProd", {1}},
      {"Split", {1}}, {"Gather", {1}}, {"Resize", {1, 2, 3}}, {"Upsample", {1}}, {"ConstantOfShape", {0}},
      {"Range", {0, 1, 2}}, {"Dropout", {1, 2}}, {"BatchNormalization", {3, 4, 5}},
      {"SoftmaxCrossEntropyLoss", {1, 2}}, {"MSELoss", {1}}, {"Where", {0}}, {"TopK", {1}}, {"CumSum", {1}},
      {"Shape", {0}}, {"Size", {0}}, {"Equal", {0, 1}}, {"Less", {0, 1}}, {"Greater", {0, 1}}, {"Not", {0}},
      {"OneHot", {0, 1, 2}}};
  auto it = kNotData.find(n.op_type);
  return it == kNotData.end() || !it->second.count(i);
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns)
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

// A weight holds no infinity; an initializer with -inf in it is a mask (a causal attention mask
// registered as a buffer: triu of -inf), which a gradient step would turn to NaN. NaN is left to
// training, which reports it as divergence naming the weight (a corrupt file, not a mask).
bool holds_no_infinity(const Value* v) {
  if (!v->data) return true;
  const HostTensor& t = *v->data;
  auto none = [](const auto* p, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      if (std::isinf(p[i])) return false;
    return true;
  };
  if (t.dtype() == DType::kFloat32) return none(t.as<float>(), t.size());
  if (t.dtype() == DType::kFloat64) return none(t.as<double>(), t.size());
  return true;
}

// Which float initializers train. By default the weights: rank >= 1 and flowing, through data
// inputs, into a node that also reads something computed from the model's inputs (so never a
// scalar, an exponent, an epsilon, a clip bound, a shape or an index) and holding no infinity
// (never a mask of -inf). --trainable PATTERNS
// replaces the default by the float initializers whose names match (fnmatch globs); --freeze
// PATTERNS then removes matches.
// Patterns that match none of `candidates` (the initializers and Constant-node tensors) are refused.
Status choose_trainable(Graph& g, const std::set<std::string>& candidates, const ImportOptions& opts,
                        const std::string& path) {
  for (const auto* list : {&opts.trainable, &opts.freeze})
    for (const auto& p : *list) {
      bool any = false;
      for (const auto& c : candidates) any = any || fnmatch(p.c_str(), c.c_str(), 0) == 0;
      if (!any)
        return invalid_input(std::string(list == &opts.freeze ? "--freeze" : "--trainable") + ": '" + p +
                             "' matches no initializer of " + path);
    }
  // Values computed from the model's inputs (token ids through Gather's indices too).
  std::set<const Value*> data;
  for (const Value* v : g.inputs) data.insert(v);
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& up : g.nodes()) {
      bool reads = false;
      for (const Value* in : up->inputs) reads = reads || (in && data.count(in));
      if (!reads) continue;
      for (Value* o : up->outputs)
        if (o && data.insert(o).second) changed = true;
    }
  }
  auto is_weight = [&](const Value* p) {
    if (p->dims.empty()) return false;
    std::set<const Value*> seen{p};
    std::vector<const Value*> todo{p};
    while (!todo.empty()) {
      const Value* v = todo.back();
      todo.pop_back();
      for (const Node* n : v->consumers) {
        bool through = false, meets_data = false;
        for (size_t i = 0; i < n->inputs.size(); ++i) {
          if (!n->inputs[i]) continue;
          through = through || (n->inputs[i] == v && is_data_slot(*n, i));
          meets_data = meets_data || (n->inputs[i] != v && data.count(n->inputs[i]));
        }
        if (!through) continue;
        if (meets_data) return true;
        for (const Value* o : n->outputs)
          if (o && seen.insert(o).second) todo.push_back(o);
      }
    }
    return false;
  };
  for (auto& up : g.values()) {
    Value* v = up.get();
    if (!v->from_initializer || !candidates.count(v->name)) continue;
    if (v->kind != ValueKind::kParameter && v->kind != ValueKind::kConstant) continue;
    if (!is_floating(v->dtype) || v->consumers.empty()) continue;
    bool train = opts.trainable.empty() ? is_weight(v) && holds_no_infinity(v) : matches_any(v->name, opts.trainable);
    if (matches_any(v->name, opts.freeze)) train = false;
    v->kind = train ? ValueKind::kParameter : ValueKind::kConstant;
  }
  return Status::ok();
}

// Float initializers read only as settings, never as data (Resize's roi and scales, Pad's
// constant_value), are constants: exporters fold such values into initializers, and the shape
// functions need them known before training.
void mark_setting_initializers(Graph& g) {
  static const std::map<std::string, std::set<size_t>> kSettingInputs = {{"Resize", {1, 2}}, {"Pad", {2}}};
  // Ops that only move values: a training-mode export (no constant folding) builds Resize's scales
  // as Concat(Constant [1, 1], Constant [2, 2]), so the constants reach the setting through them.
  static const std::set<std::string> kPassThrough = {"Concat", "Cast", "Unsqueeze", "Squeeze", "Reshape",
                                                     "Identity", "Slice", "Gather"};
  std::function<bool(const Value*, int)> only_settings = [&](const Value* v, int depth) {
    if (depth > 16 || v->consumers.empty()) return false;
    for (const Node* n : v->consumers) {
      auto it = kSettingInputs.find(n->op_type);
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        if (n->inputs[i] != v) continue;
        if (it != kSettingInputs.end() && it->second.count(i)) continue;
        if (!kPassThrough.count(n->op_type) || (n->op_type != "Concat" && i != 0)) return false;
        for (const Value* o : n->outputs)
          if (o && !only_settings(o, depth + 1)) return false;
      }
    }
    return true;
  };
  for (auto& up : g.values()) {
    Value* v = up.get();
    if (v->kind == ValueKind::kParameter && only_settings(v, 0)) v->kind = ValueKind::kConstant;
  }
}

}  // namespace

void lower_stateful_ops(Graph& g, uint64_t seed) {
  lower_random_ops(g, seed);
  // Training BatchNormalization updates its running statistics in place: state, not parameters.
  for (auto& n : g.nodes())
    if (n->op_type == "BatchNormalization" && n->attrs.get_int("_training", 0))
      for (size_t i = 3; i < 5 && i < n->inputs.size(); ++i)
        if (n->inputs[i] && n->inputs[i]->from_initializer) n->inputs[i]->kind = ValueKind::kState;
}

Expected<std::vector<std::string>> onnx_input_names(const std::string& path) {
  ASSIGN_OR_RETURN(onnx::ModelProto proto, parse_file(path));
  std::set<std::string> inits;
  for (const auto& t : proto.graph().initializer()) inits.insert(t.name());
  std::vector<std::string> names;
  for (const auto& vi : proto.graph().input())
    if (!inits.count(vi.name())) names.push_back(vi.name());
  return names;
}

Expected<std::map<std::string, onnx::TensorProto>> reread_initializers(const ImportedModel& model,
                                                                       const std::set<std::string>& names) {
  std::map<std::string, onnx::TensorProto> out;
  if (names.empty()) return out;
  if (file_hash(model.path) != model.hash)
    return invalid_input(model.path + ": the model file changed since it was imported; its initializers cannot be "
                         "re-read for export");
  ASSIGN_OR_RETURN(onnx::ModelProto proto, parse_file(model.path));
  for (auto& t : *proto.mutable_graph()->mutable_initializer())
    if (names.count(t.name())) out[t.name()] = std::move(t);
  for (const auto& n : names)
    if (!out.count(n)) return internal_error("export: initializer '" + n + "' is no longer in " + model.path);
  return out;
}

namespace {

// The data fields of a tensor, swapped between two TensorProtos (containers swapped, not copied).
void swap_tensor_data(onnx::TensorProto* a, onnx::TensorProto* b) {
  a->mutable_raw_data()->swap(*b->mutable_raw_data());
  a->mutable_float_data()->Swap(b->mutable_float_data());
  a->mutable_int32_data()->Swap(b->mutable_int32_data());
  a->mutable_int64_data()->Swap(b->mutable_int64_data());
  a->mutable_double_data()->Swap(b->mutable_double_data());
  a->mutable_uint64_data()->Swap(b->mutable_uint64_data());
  a->mutable_string_data()->Swap(b->mutable_string_data());
}

// A copy of `proto` in which every inline initializer of kKeepInlineBytes or more has no data (its
// name in *stripped); `proto` keeps everything. The data is moved aside, not copied, meanwhile.
onnx::ModelProto copy_without_large_initializers(onnx::ModelProto& proto, std::set<std::string>* stripped) {
  auto* inits = proto.mutable_graph()->mutable_initializer();
  std::vector<std::pair<onnx::TensorProto*, onnx::TensorProto>> aside;
  for (auto& t : *inits) {
    if (t.data_location() == onnx::TensorProto::EXTERNAL || t.ByteSizeLong() < kKeepInlineBytes) continue;
    aside.emplace_back(&t, onnx::TensorProto{});
    swap_tensor_data(&aside.back().second, &t);
    stripped->insert(t.name());
  }
  onnx::ModelProto copy = proto;
  for (auto& [t, data] : aside) swap_tensor_data(t, &data);
  return copy;
}

}  // namespace

Expected<ImportedModel> import_onnx(const std::string& path, const ImportOptions& opts) {
  ASSIGN_OR_RETURN(onnx::ModelProto proto, parse_file(path));
  auto src = std::make_shared<OnnxModel>();
  // The source as it came, exported with new initializer values: copied without the bytes of its
  // large inline initializers (the graph will hold them; export re-reads what it does not
  // replace), so that import never holds every weight a third time. Small tensors stay.
  onnx::ModelProto original = copy_without_large_initializers(proto, &src->stripped);
  src->dir = fs::path(path).parent_path().string();
  ImportedModel out;
  out.path = path;
  out.stem = fs::path(path).stem().string();
  out.hash = file_hash(path);
  out.producer = proto.producer_name() + (proto.producer_version().empty() ? "" : " " + proto.producer_version());
  RETURN_IF_ERROR(check_structure(proto.mutable_graph(), path));
  // External data is read (confined to the model's folder) before the checker, which would
  // otherwise look for it relative to the working directory.
  for (auto& tp : *proto.mutable_graph()->mutable_initializer()) {
    if (tp.data_location() != onnx::TensorProto::EXTERNAL) continue;
    ASSIGN_OR_RETURN(std::string bytes, read_external_data(tp, src->dir, path));
    tp.clear_external_data();
    tp.set_data_location(onnx::TensorProto::DEFAULT);
    tp.set_raw_data(std::move(bytes));
  }
  out.source_opset = default_opset(proto);
  if (out.source_opset == 0) return invalid_input(path + ": the model imports no opset of the default ONNX domain");
  if (out.source_opset > kMaxOpset)
    return unsupported(path + ": opset " + std::to_string(out.source_opset) + " is newer than this tool supports (" +
                       std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
  if (out.source_opset > kCheckerOpset) {
    RETURN_IF_ERROR(check_newer_opset(proto, path));
  } else {
    try {
      onnx::checker::check_model(proto);
    } catch (const std::exception& e) {
      return invalid_input(path + ": onnx checker: " + one_line(e.what()));
    }
  }
  if (out.source_opset < kMinOpset) {
    RETURN_IF_ERROR(check_old_opset_model(proto, path));
    // The converter's broadcast adapters need static dims: bind the batch dimension first.
    std::set<std::string> inits;
    for (const auto& t : proto.graph().initializer()) inits.insert(t.name());
    for (auto& vi : *proto.mutable_graph()->mutable_input()) {
      if (inits.count(vi.name()) || !vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) continue;
      auto* shape = vi.mutable_type()->mutable_tensor_type()->mutable_shape();
      if (shape->dim_size() > 0 && !(shape->dim(0).has_dim_value() && shape->dim(0).dim_value() > 0))
        shape->mutable_dim(0)->set_dim_value(opts.batch_size);
    }
    try {
      onnx::shape_inference::InferShapes(proto);  // the adapters read intermediate shapes
      proto = version_converter().convert_version(proto, onnx::OpSetID(out.source_opset), onnx::OpSetID(kConvertTarget));
    } catch (const std::exception& e) {
      return unsupported(path + ": opset " + std::to_string(out.source_opset) + " model could not be converted to opset " +
                         std::to_string(kConvertTarget) + " by ONNX's version converter: " + one_line(e.what()));
    }
    out.converted = true;
  }
  const int64_t opset = default_opset(proto);
  std::map<std::string, int64_t> domain_opset;
  for (const auto& o : proto.opset_import()) domain_opset[o.domain().empty() ? "ai.onnx" : o.domain()] = o.version();

  // Early unsupported-op report, before any work: every offending node at once.
  {
    std::vector<std::string> bad;
    std::set<std::string> bad_ops;
    for (int i = 0; i < proto.graph().node_size(); ++i) {
      const auto& n = proto.graph().node(i);
      const std::string& op = n.op_type();
      const std::string domain = n.domain().empty() ? "ai.onnx" : n.domain();
      bool ok = op == "Constant" || is_foldable_op(op) || is_expanded_op(op) ||
                (has_shape_fn(op) && !supported_dtypes(op, opts.device).empty());
      if (ok && opts.for_training && !is_foldable_op(op) && !is_expanded_op(op) && op != "Constant")
        ok = has_grad_builder(op);
      if (domain != "ai.onnx") ok = false;  // no other domain's ops are implemented
      if (is_fusion_op(op)) ok = false;     // internal ops of the fusion passes (importer/fuse.h)
      if (!ok) {
        std::string name = n.name().empty() ? op + "_" + std::to_string(i) : n.name();
        bad.push_back("'" + name + "' (" + op + ", opset " + std::to_string(domain_opset[domain]) + ", domain " +
                      domain + ")");
        bad_ops.insert(domain == "ai.onnx" ? op : domain + "." + op);
      }
    }
    if (!bad.empty()) {
      std::string list;
      for (size_t i = 0; i < bad.size() && i < 20; ++i) list += (i ? ", " : "") + bad[i];
      if (bad.size() > 20) list += ", ... (" + std::to_string(bad.size() - 20) + " more)";
      std::string ops;
      for (const auto& o : bad_ops) ops += (ops.empty() ? "" : ", ") + o;
      return unsupported(path + ": " + std::to_string(bad.size()) + " node(s) use ops not supported " +
                         (opts.for_training ? "for training " : "") + "on " + device_kind_name(opts.device) +
                         " (" + ops + "): " + list);
    }
  }

  auto g = std::make_unique<Graph>();
  g->opset = opset;
  const auto& gp = proto.graph();
  std::set<std::string> init_names;
  for (const auto& t : gp.initializer()) init_names.insert(t.name());
  std::set<std::string> trainable_names = init_names;  // initializers and Constant-node tensors
  for (const auto& n : gp.node())
    if (n.op_type() == "Constant" && n.output_size() == 1) trainable_names.insert(n.output(0));

  for (const auto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;  // old models list initializers as inputs
    if (auto c = opts.constant_inputs.find(vi.name()); c != opts.constant_inputs.end()) {
      Value* v = g->add_value(vi.name(), c->second.dtype(), c->second.dims(), ValueKind::kConstant);
      v->data = std::make_shared<HostTensor>(c->second);
      continue;
    }
    Dims dims;
    DType dt;
    RETURN_IF_ERROR(bind_input_dims(vi, opts.batch_size, path, &dims, &dt));
    g->inputs.push_back(g->add_value(vi.name(), dt, dims, ValueKind::kInput));
  }
  for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
    ASSIGN_OR_RETURN(HostTensor ht, tensor_from_proto(t, path));
    bool trainable = is_floating(ht.dtype());  // until choose_trainable decides
    Value* v = g->add_value(t.name(), ht.dtype(), ht.dims(), trainable ? ValueKind::kParameter : ValueKind::kConstant);
    v->data = std::make_shared<HostTensor>(std::move(ht));
    v->from_initializer = true;
    // The graph holds it now: the parsed bytes go at once, not when the import ends (swapped with
    // empty containers: protobuf's clear_*() would keep the capacity).
    onnx::TensorProto empty;
    swap_tensor_data(&empty, &t);
  }
  for (int i = 0; i < gp.node_size(); ++i) {
    const auto& np = gp.node(i);
    std::string where = path + ": " + node_label(np, i);
    std::vector<Value*> ins;
    for (const auto& in : np.input()) {
      if (in.empty()) { ins.push_back(nullptr); continue; }
      Value* v = g->find_value(in);
      PT_CHECK(v) << "structure check missed '" << in << "'";
      ins.push_back(v);
    }
    AttrMap attrs;
    for (const auto& a : np.attribute()) {
      ASSIGN_OR_RETURN(Attribute av, convert_attribute(a, where));
      attrs.set(a.name(), std::move(av));
    }
    std::vector<Value*> outs;
    for (const auto& o : np.output())
      outs.push_back(o.empty() ? nullptr : g->add_value(o, DType::kUndefined, {}, ValueKind::kActivation));
    Node* n = g->add_node(np.op_type(), np.name().empty() ? np.op_type() + "_" + std::to_string(i) : np.name(),
                          std::move(ins), std::move(outs), std::move(attrs));
    n->since_version = static_cast<int>(opset);
    if (n->op_type == "Constant") {
      ASSIGN_OR_RETURN(HostTensor c, constant_value(*n, where));
      Value* v = n->outputs.at(0);
      v->dtype = c.dtype();
      v->dims = c.dims();
      // Weights that converters feed through Constant nodes train like initializers; scalars
      // (the constants of formulas such as Gelu's 0.5) stay constants.
      const bool weight = is_floating(c.dtype()) && c.size() > 1;
      v->kind = weight ? ValueKind::kParameter : ValueKind::kConstant;
      v->from_initializer = weight;
      v->data = std::make_shared<HostTensor>(std::move(c));
    }
  }
  for (const auto& o : gp.output()) g->outputs.push_back(g->find_value(o.name()));
  mark_setting_initializers(*g);

  RETURN_IF_ERROR(infer_and_fold(*g, path, opts.device));
  lower_stateful_ops(*g, opts.seed);

  // Aliases of weights: opset-13 PyTorch exports read a shared initializer through an Identity
  // node per extra reader. Readers read the weight itself instead, so that a reader in another
  // pipeline stage is served the weight's version for its own pass (its SpecTrain prediction or
  // stash) rather than the version of the stage that held the Identity. The source model keeps its
  // Identity nodes: export rewrites initializers only, stage export recomputes them where needed.
  {
    std::vector<bool> alias(g->nodes().size(), false);
    for (auto& n : g->nodes()) {
      if (n->op_type != "Identity" || n->inputs.size() != 1 || n->outputs.size() != 1) continue;
      Value* w = n->inputs[0];
      Value* a = n->outputs[0];
      if (!w || !a || w->producer || !w->from_initializer || w->data == nullptr) continue;
      if (std::find(g->outputs.begin(), g->outputs.end(), a) != g->outputs.end()) continue;
      g->replace_uses(a, w);
      alias[n->id] = true;
    }
    g->remove_nodes(alias);
  }

  // Float initializers that feed no computation after folding are constants, not parameters.
  for (Value* v : g->values_of_kind(ValueKind::kParameter))
    if (v->consumers.empty()) v->kind = ValueKind::kConstant;
  RETURN_IF_ERROR(choose_trainable(*g, trainable_names, opts, path));
  if (opts.for_training) {
    FuseOptions fuse = opts.fuse;
    // The attention fusion's dropout: the CUDA FusedAttention kernel has none. (The epilogues fuse
    // on both devices: kernels/cuda/epilogue_ops.cpp and batchnorm.cu run them on CUDA.)
    if (opts.device == DeviceKind::kCuda) fuse.attention_dropout = false;
    out.fused = apply_fusions(*g, fuse);
  }

  if (const std::string broken = g->broken_link(); !broken.empty())
    return internal_error(path + ": import left a broken link in its graph: " + broken);
  src->proto = std::move(original);
  out.graph = std::move(g);
  out.source = std::move(src);
  return out;
}

}  // namespace pt
