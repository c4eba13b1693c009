// Analytic per-node costs (roofline: the larger of flops / peak and bytes / bandwidth, plus a
// kernel overhead), FLOP counts read from each node's attributes and dims (any rank, unknown dims
// tolerated), and the bytes backward keeps: the forward values backward nodes actually read.
#include "partitioner/cost_model.h"

#include <algorithm>
#include <set>

namespace pt {

double cost_value_bytes(const Value* v) {
  if (!v) return 0;
  double n = 1;
  for (int64_t d : v->dims) n *= static_cast<double>(d > 0 ? d : (d == 0 ? 0 : 1));
  const size_t size = dtype_size(v->dtype);
  return n * static_cast<double>(size ? size : 4);  // undefined dtype: assume float32
}

bool is_forward_phase(const Node& n) { return n.phase == Phase::kForward || n.phase == Phase::kLoss; }

int cost_phase(const Node& n) {
  if (is_forward_phase(n)) return 0;
  return n.op_type == "ConvGradWeight" ? 2 : 1;  // ConvTranspose's dW is a ConvGradWeight too
}

bool may_be_kept_for_backward(const Value* v) {
  if (!v) return false;
  if (v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel) return true;
  return v->kind == ValueKind::kActivation && v->producer && is_forward_phase(*v->producer);
}

namespace {

// Elements of a value; unknown (negative) dims count as 1 so that a half-inferred graph still
// gets finite, if rough, costs.
double elems(const Value* v) {
  if (!v) return 0;
  double n = 1;
  for (int64_t d : v->dims) n *= static_cast<double>(d > 0 ? d : (d == 0 ? 0 : 1));
  return n;
}

double value_bytes(const Value* v) { return cost_value_bytes(v); }

int64_t dim(const Value* v, size_t i, int64_t dflt = 1) {
  if (!v || i >= v->dims.size() || v->dims[i] <= 0) return dflt;
  return v->dims[i];
}

const Value* input(const Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : nullptr; }
const Value* output(const Node& n, size_t i) { return i < n.outputs.size() ? n.outputs[i] : nullptr; }

double out_elems(const Node& n) {
  double out = 0;
  for (const Value* v : n.outputs) out += elems(v);
  return out;
}

double product(const std::vector<int64_t>& v) {
  double p = 1;
  for (int64_t x : v) p *= static_cast<double>(std::max<int64_t>(x, 1));
  return p;
}

// Multiply-add FLOPs of a Conv without its bias: 2 * N * Cout * out_spatial * (Cin / group) * kernel,
// i.e. 2 * |Y| * |W| / Cout (W is [Cout, Cin / group, k...], any number of spatial dims).
double conv_core_flops(const Node& n) {
  const Value* w = input(n, 1);
  if (!w) return 0;
  return 2.0 * elems(output(n, 0)) * elems(w) / static_cast<double>(dim(w, 0));
}

// ConvTranspose scatters every input element through W ([Cin, Cout / group, k...]).
double conv_transpose_core_flops(const Node& n) {
  const Value* w = input(n, 1);
  if (!w) return 0;
  return 2.0 * elems(input(n, 0)) * elems(w) / static_cast<double>(dim(w, 0));
}

double pool_flops(const Node& n) {
  const std::vector<int64_t> k = n.attrs.get_ints("kernel_shape");
  return elems(output(n, 0)) * (k.empty() ? 1.0 : product(k));
}

const std::set<std::string>& data_movement_ops() {
  static const std::set<std::string> s = {"Reshape", "Flatten", "Identity", "Transpose", "Concat",
                                          "Split",   "Slice",   "Pad",      "Squeeze",   "Unsqueeze",
                                          "Gather",  "Shape",   "Expand",   "Tile",      "Cast"};
  return s;
}

// Backward ops of the heavy forward ops: every gradient output that has the shape of the
// forward's data or weight input costs one forward's multiply-adds; the bias gradient is a sum.
double heavy_grad_flops(const Node& n, double core, const Node& fwd) {
  double f = 0;
  for (const Value* o : n.outputs) {
    if (!o) continue;
    const bool big = (input(fwd, 0) && o->dims == input(fwd, 0)->dims) || (input(fwd, 1) && o->dims == input(fwd, 1)->dims);
    f += big ? core : elems(output(fwd, 0));
  }
  return f;
}

// FLOPs per element of the element-wise ops that evaluate a transcendental function (a polynomial
// or rational approximation each: GELU's erf, its gradient's erf and exp), so that they cost more
// than an Add of the same size; 1 for every other element-wise op.
double elementwise_flops_per_element(const std::string& op) {
  if (op == "GeluGrad") return 30;
  if (op == "Gelu") return 20;
  if (op == "Erf" || op == "Exp" || op == "Log" || op == "Tanh" || op == "Sigmoid" || op == "Softplus" ||
      op == "Pow" || op == "Sin" || op == "Cos" || op == "Elu" || op == "Selu" || op == "Mish")
    return 10;
  return 1;
}

// The product of a fused node of importer/fuse_epilogue.cpp ("FusedConv" -> "Conv"), else op.
std::string product_op(const std::string& op) {
  if (op == "FusedMatMul" || op == "FusedGemm" || op == "FusedConv") return op.substr(5);
  return op;
}

}  // namespace

double node_flops(const Node& n) {
  const std::string& op = n.op_type;
  const double out = out_elems(n);
  if (product_op(op) != op) {
    // The product's own count (the FusedMatMul bias counts as Gemm's C), plus one FLOP per output
    // element for the bias and for the activation.
    Node p = n;
    p.op_type = product_op(op);
    p.outputs.resize(1);
    const bool bias = op == "FusedMatMul" && input(n, 2);
    if (op == "FusedMatMul") p.inputs.resize(std::min<size_t>(p.inputs.size(), 2));
    const std::string activation = n.attrs.get_string("activation", "none");
    const double act = activation == "none" ? 0 : elementwise_flops_per_element(activation) * elems(output(n, 0));
    return node_flops(p) + (bias ? elems(output(n, 0)) : 0) + act;
  }
  if (op == "Gemm") {
    const Value* a = input(n, 0);
    const int64_t k = n.attrs.get_int("transA", 0) ? dim(a, 0) : dim(a, 1);
    return 2.0 * elems(output(n, 0)) * static_cast<double>(k) + (input(n, 2) ? elems(output(n, 0)) : 0);
  }
  if (op == "MatMul") {
    const Value* a = input(n, 0);
    const int64_t k = a && !a->dims.empty() ? std::max<int64_t>(a->dims.back(), 1) : 1;
    return 2.0 * elems(output(n, 0)) * static_cast<double>(k);
  }
  if (op == "Conv") return conv_core_flops(n) + (input(n, 2) ? elems(output(n, 0)) : 0);
  if (op == "ConvTranspose") return conv_transpose_core_flops(n) + (input(n, 2) ? elems(output(n, 0)) : 0);
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") return pool_flops(n);
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool" || op == "ReduceSum" || op == "ReduceMean" ||
      op == "ReduceMax" || op == "ReduceSumToShape")
    return elems(input(n, 0));
  if (op == "BatchNormalization") return 5.0 * elems(input(n, 0));
  if (op == "LRN") return elems(output(n, 0)) * (static_cast<double>(n.attrs.get_int("size", 5)) + 5.0);
  if (op == "FusedAttention" || op == "FusedAttentionGrad") {
    // Per head: scores Q @ Kt (2 T S Dk), softmax (5 T S), P @ V (2 T S Dv). The backward recomputes
    // the scores and makes dV, dP, dQ and dKt: 4 more products, 2 of each width.
    const Value* q = input(n, op == "FusedAttention" ? 0 : 1);
    const Value* v = input(n, op == "FusedAttention" ? 2 : 3);
    const Value* kt = input(n, op == "FusedAttention" ? 1 : 2);
    if (!q || !v || !kt || q->dims.size() < 2 || v->dims.empty() || kt->dims.empty()) return out;
    const double dk = static_cast<double>(q->dims.back()), dv = static_cast<double>(v->dims.back());
    const double ts = elems(q) / std::max(dk, 1.0) * static_cast<double>(kt->dims.back());  // heads * T * S
    return op == "FusedAttention" ? ts * (2 * dk + 2 * dv + 5) : ts * (4 * dk + 4 * dv + 2 * dk + 8);
  }
  if (op == "Softmax" || op == "LogSoftmax") return 5.0 * out;
  if (op == "SoftmaxGrad" || op == "LogSoftmaxGrad") return 4.0 * out;
  if (op == "SoftmaxCrossEntropyLoss") return 6.0 * elems(input(n, 0));
  if (op == "SoftmaxCrossEntropyLossGrad") return 3.0 * out;
  if (op == "MSELoss") return 3.0 * elems(input(n, 0));
  if (op == "MSELossGrad") return 2.0 * out;
  if (op == "Dropout") return 2.0 * elems(output(n, 0));
  if (op == "SGDMomentum") {
    const bool decay = n.attrs.get_float("weight_decay", 0.0f) != 0.0f;
    return (decay ? 7.0 : 5.0) * elems(input(n, 0));
  }
  if (op == "SGD") return 6.0 * elems(input(n, 0));
  if (op == "Adam") return 14.0 * elems(input(n, 0));
  if (data_movement_ops().count(op)) return 0;
  // Dedicated backward ops of the ops above (ConvGrad, MaxPoolGrad, ...), by the forward they serve.
  // (A fused product's backward emits its product's ops: ConvGradInput serves a FusedConv too.)
  const std::string fwd_op = n.forward ? product_op(n.forward->op_type) : std::string();
  if (n.forward && op.size() > fwd_op.size() && op.compare(0, fwd_op.size(), fwd_op) == 0 &&
      op.find("Grad") != std::string::npos) {
    const Node& f = *n.forward;
    if (fwd_op == "Conv") return heavy_grad_flops(n, conv_core_flops(f), f);
    if (f.op_type == "ConvTranspose") return heavy_grad_flops(n, conv_transpose_core_flops(f), f);
    if (f.op_type == "BatchNormalization") return 8.0 * elems(input(f, 0));
    if (fwd_op != "Gemm" && fwd_op != "MatMul") return std::max(node_flops(f), out);
  }
  return elementwise_flops_per_element(op) * out;  // element-wise
}

double node_bytes(const Node& n) {
  double b = 0;
  for (const Value* v : n.inputs) b += value_bytes(v);
  for (const Value* v : n.outputs) b += value_bytes(v);
  // In-place optimizer steps write the parameter and the momentum they read.
  if (n.phase == Phase::kUpdate) {
    b += value_bytes(input(n, 0));
    for (size_t i = 2; i < n.inputs.size(); ++i)
      if (n.inputs[i] && n.inputs[i]->kind == ValueKind::kState) b += value_bytes(n.inputs[i]);
  }
  return b;
}

RooflineTerms roofline_terms(const Node& n, const DeviceSpec& d) {
  return {d.peak_flops > 0 ? node_flops(n) / d.peak_flops : 0, d.mem_bandwidth > 0 ? node_bytes(n) / d.mem_bandwidth : 0};
}

double roofline_s(const Node& n, const DeviceSpec& d) {
  const RooflineTerms r = roofline_terms(n, d);
  return std::max(r.flops_s, r.bytes_s);
}

OpClass op_class(const Node& n) {
  std::string op = product_op(n.op_type);
  if (n.phase == Phase::kBackward) {
    // A backward node runs at the speed of what it computes: a convolution's gradients at their
    // convolution's (dense or depthwise, as the forward), a ReluGrad or a fused product's GeluGrad
    // at element-wise speed, a bias gradient's ReduceSumToShape at reduction speed, the products
    // of a MatMul's backward at GEMM speed.
    const size_t grad = op.find("Grad");
    if (grad != std::string::npos && grad > 0) op = op.substr(0, grad);
    if (n.forward && (op == "Conv" || op == "ConvTranspose")) return op_class(*n.forward);
  }
  if (op == "MatMul" || op == "Gemm") return OpClass::kGemm;
  if (op == "FusedAttention" || op == "Softmax" || op == "LogSoftmax" || op == "SoftmaxCrossEntropyLoss")
    return OpClass::kSoftmax;
  if (op == "Conv" || op == "ConvTranspose") {
    const Value* w = input(n, 1);
    const int64_t group = n.attrs.get_int("group", 1);
    // Depthwise: one input channel per group (MobileNet's 3x3s), far below a dense conv's speed.
    return group > 1 && w && dim(w, 1) == 1 ? OpClass::kDepthwise : OpClass::kConv;
  }
  if (op == "BatchNormalization" || op == "LayerNormalization" || op == "GroupNormalization" ||
      op == "InstanceNormalization" || op == "LRN")
    return OpClass::kNorm;
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool" || op == "GlobalAveragePool" || op == "GlobalMaxPool" ||
      op.rfind("Reduce", 0) == 0)
    return OpClass::kPool;
  if (data_movement_ops().count(op) || op == "Resize" || op == "Where" || op == "ScatterND" || op == "GatherElements")
    return OpClass::kMovement;
  return OpClass::kElementwise;
}

double node_time_s(const Node& n, const DeviceSpec& d) {
  if (!d.calibrated) return (roofline_s(n, d) + d.kernel_overhead_s) * d.share;
  // Copies: the executor aliases a Reshape's output to its input (no kernel runs), and a calibration
  // never sees them run, so they are free rather than priced at the class's floor.
  if (is_copy_op(n.op_type)) return 0;
  const ClassCost& c = d.classes[static_cast<int>(op_class(n))][cost_phase(n)];
  const RooflineTerms r = roofline_terms(n, d);
  return (c.floor_s + c.scale * r.flops_s + c.byte_scale * r.bytes_s) * d.share;
}

double weight_pass_s(double flops, double bytes, const DeviceSpec& d) {
  const RooflineTerms r{d.peak_flops > 0 ? flops / d.peak_flops : 0, d.mem_bandwidth > 0 ? bytes / d.mem_bandwidth : 0};
  if (!d.calibrated) return (std::max(r.flops_s, r.bytes_s) + d.kernel_overhead_s) * d.share;
  const ClassCost& c = d.classes[static_cast<int>(OpClass::kElementwise)][1];
  return (c.floor_s + c.scale * r.flops_s + c.byte_scale * r.bytes_s) * d.share;
}

static int64_t conv_workspace_bytes(const Node& n) {
  const std::string op = product_op(n.op_type);
  if (op != "Conv" && op != "ConvTranspose") return 0;
  const Value* w = input(n, 1);
  const Value* spatial = op == "Conv" ? output(n, 0) : input(n, 0);
  if (!w || !spatial || spatial->dims.size() < 3) return 0;
  // One image's im2col (or col2im) buffer: (Cin / group) * kernel * out_spatial elements.
  double per_col = elems(w) / static_cast<double>(dim(w, 0));
  double sp = 1;
  for (size_t i = 2; i < spatial->dims.size(); ++i) sp *= static_cast<double>(dim(spatial, i));
  return static_cast<int64_t>(per_col * sp * static_cast<double>(std::max<size_t>(dtype_size(w->dtype), 1)));
}

std::vector<std::pair<const Node*, NodeCost>> node_costs(const Graph& g, const DeviceSpec& d, const Profile* profile) {
  std::vector<std::pair<const Node*, NodeCost>> out;
  std::map<const Node*, size_t> index;
  for (auto& n : g.nodes())
    if (is_forward_phase(*n)) {
      index[n.get()] = out.size();
      NodeCost c;
      c.fwd_flops = node_flops(*n);
      c.fwd_s = node_time_s(*n, d);
      if (profile) {
        auto it = profile->fwd_s.find(n->name);
        if (it != profile->fwd_s.end()) c.fwd_s = it->second * d.share;  // measured alone
      }
      c.workspace_bytes = conv_workspace_bytes(*n);
      out.emplace_back(n.get(), c);
    }
  // Parameters (and loader-fed inputs kept for backward) are charged to their first forward consumer;
  // so is the parameter's update.
  std::map<const Value*, const Node*> first_use;
  for (auto& [n, c] : out)
    for (const Value* v : n->inputs)
      if (v && !first_use.count(v) &&
          (v->kind == ValueKind::kParameter || v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel)) {
        first_use[v] = n;
        if (v->kind == ValueKind::kParameter) {
          c.param_bytes += static_cast<int64_t>(value_bytes(v));
          c.param_count += static_cast<int64_t>(elems(v));
        }
      }
  // Values the optimizer consumes are parameter gradients: counted with the parameters, not as
  // workspace.
  std::set<const Value*> param_grads;
  for (auto& n : g.nodes())
    if (n->phase == Phase::kUpdate)
      for (const Value* v : n->inputs) param_grads.insert(v);
  std::set<const Value*> saved;  // forward values some backward node reads
  for (auto& n : g.nodes()) {
    if (n->phase == Phase::kBackward) {
      for (const Value* v : n->inputs)
        if (may_be_kept_for_backward(v)) saved.insert(v);
      if (!n->forward || !index.count(n->forward)) continue;
      NodeCost& c = out[index[n->forward]].second;
      c.bwd_flops += node_flops(*n);
      c.bwd_s += node_time_s(*n, d);
      for (const Value* v : n->outputs)
        if (v && !param_grads.count(v)) c.workspace_bytes += static_cast<int64_t>(value_bytes(v));
    } else if (n->phase == Phase::kUpdate && !n->inputs.empty() && first_use.count(n->inputs[0])) {
      out[index[first_use[n->inputs[0]]]].second.update_s += node_time_s(*n, d);
    }
  }
  for (auto& [n, c] : out) {
    for (const Value* v : n->outputs)
      if (v) {
        if (saved.count(v)) c.saved_bytes += static_cast<int64_t>(value_bytes(v));
        else c.workspace_bytes += static_cast<int64_t>(value_bytes(v));
      }
    for (const Value* v : n->inputs)
      if (v && (v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel) && saved.count(v) && first_use[v] == n)
        c.saved_bytes += static_cast<int64_t>(value_bytes(v));
  }
  if (profile)
    for (auto& [n, c] : out) {
      auto it = profile->bwd_s.find(n->name);
      if (it != profile->bwd_s.end()) c.bwd_s = it->second * d.share;
    }
  return out;
}

}  // namespace pt
