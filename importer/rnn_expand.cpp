// LSTM and GRU as existing ops unrolled over the static sequence length. Per direction, one Gemm
// projects every time step's input at once (X W^T + biases), then each step is a Gemm against R
// and the gate arithmetic (Split, Sigmoid, Tanh, Mul, Add). W, R and B are read through Slice and
// Reshape of the node's own initializers, so their gradients are the ordinary ones of those ops.
#include "importer/rnn_expand.h"

#include <algorithm>
#include <variant>

#include "importer/shape_infer.h"
#include "importer/shape_util.h"

namespace pt {

namespace {

struct RnnSpec {
  bool lstm = true;
  int64_t gates = 4;  // LSTM: i, o, f, c; GRU: z, r, h (ONNX's order)
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  bool reverse_only = false;  // direction = reverse
  int64_t layout = 0;         // 0: [T, B, ...]; 1: [B, T, ...]
  bool linear_before_reset = false;
};

std::vector<std::string> strings_attr(const Node& n, const std::string& name) {
  auto it = n.attrs.all().find(name);
  if (it == n.attrs.all().end()) return {};
  if (auto* p = std::get_if<std::vector<std::string>>(&it->second)) return *p;
  return {};
}

Status refuse(const std::string& where, const std::string& what) {
  return unsupported(where + ": " + what +
                     " (supported: directions forward, reverse and bidirectional, layout 0 "
                     "or 1, the default activations, no clip, no peepholes, sequence_lens absent or all full)");
}

// Reads and checks the node; `n`'s input dims must be known.
Expected<RnnSpec> read_spec(const Node& n, const std::string& where) {
  RnnSpec s;
  s.lstm = n.op_type == "LSTM";
  s.gates = s.lstm ? 4 : 3;
  const size_t max_inputs = s.lstm ? 8 : 6;
  RETURN_IF_ERROR(shape::need_inputs(n, 3, max_inputs, where));
  const std::string dir = n.attrs.get_string("direction", "forward");
  if (dir == "bidirectional") {
    s.dirs = 2;
  } else if (dir == "reverse") {
    s.reverse_only = true;
  } else if (dir != "forward") {
    return refuse(where, "attribute 'direction' = '" + dir + "' is not supported");
  }
  if (n.attrs.has("clip")) return refuse(where, "attribute 'clip' is not supported");
  if (n.attrs.has("activation_alpha")) return refuse(where, "attribute 'activation_alpha' is not supported");
  if (n.attrs.has("activation_beta")) return refuse(where, "attribute 'activation_beta' is not supported");
  if (s.lstm && n.attrs.get_int("input_forget", 0) != 0) return refuse(where, "attribute 'input_forget' = 1 is not supported");
  if (n.attrs.has("activations")) {
    const std::vector<std::string> one =
        s.lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"} : std::vector<std::string>{"Sigmoid", "Tanh"};
    std::vector<std::string> want;
    for (int64_t d = 0; d < s.dirs; ++d) want.insert(want.end(), one.begin(), one.end());
    if (strings_attr(n, "activations") != want)
      return refuse(where, "attribute 'activations' other than the defaults is not supported");
  }
  s.layout = n.attrs.get_int("layout", 0);
  if (s.layout != 0 && s.layout != 1)
    return refuse(where, "attribute 'layout' = " + std::to_string(s.layout) + " is not supported");
  s.linear_before_reset = !s.lstm && n.attrs.get_int("linear_before_reset", 0) != 0;
  if (s.lstm && shape::present(n, 7)) return refuse(where, "input 'P' (peepholes) is not supported");

  const Dims& x = n.inputs[0]->dims;
  const Dims& w = n.inputs[1]->dims;
  const Dims& r = n.inputs[2]->dims;
  if (x.size() != 3) return invalid_input(where + ": X must be 3-D, is " + dims_str(x));
  s.seq = s.layout ? x[1] : x[0];
  s.batch = s.layout ? x[0] : x[1];
  s.input = x[2];
  if (r.size() != 3) return invalid_input(where + ": R must be 3-D, is " + dims_str(r));
  s.hidden = n.attrs.get_int("hidden_size", r[2]);
  const int64_t gh = s.gates * s.hidden;
  if (w != Dims{s.dirs, gh, s.input})
    return invalid_input(where + ": W is " + dims_str(w) + ", expected " + dims_str({s.dirs, gh, s.input}));
  if (r != Dims{s.dirs, gh, s.hidden})
    return invalid_input(where + ": R is " + dims_str(r) + ", expected " + dims_str({s.dirs, gh, s.hidden}));
  if (shape::present(n, 3) && n.inputs[3]->dims != Dims{s.dirs, 2 * gh})
    return invalid_input(where + ": B is " + dims_str(n.inputs[3]->dims) + ", expected " + dims_str({s.dirs, 2 * gh}));
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (n.inputs[i] && i != 4 && n.inputs[i]->dtype != n.inputs[0]->dtype)
      return invalid_input(where + ": input '" + n.inputs[i]->name + "' is " + dtype_name(n.inputs[i]->dtype) + ", X is " +
                           dtype_name(n.inputs[0]->dtype));
  if (shape::present(n, 4)) {
    const Value* sl = n.inputs[4];
    bool full = sl->is_constant() && sl->data && sl->dims == Dims{s.batch};
    for (int64_t b = 0; full && b < s.batch; ++b) full = sl->data->get_int(b) == s.seq;
    if (!full)
      return refuse(where, "input 'sequence_lens' ('" + sl->name +
                               "') must be absent or a constant equal to the "
                               "sequence length " +
                               std::to_string(s.seq) + " for every sample");
  }
  const Dims state = s.layout ? Dims{s.batch, s.dirs, s.hidden} : Dims{s.dirs, s.batch, s.hidden};
  for (size_t i : {size_t{5}, size_t{6}})
    if (shape::present(n, i) && (s.lstm || i == 5) && n.inputs[i]->dims != state)
      return invalid_input(where + ": " + (i == 5 ? "initial_h" : "initial_c") + " is " + dims_str(n.inputs[i]->dims) +
                           ", expected " + dims_str(state));
  if (s.seq < 1) return invalid_input(where + ": the sequence length is 0");
  return s;
}

// Builds the unrolled form of one node. New values are named after the node.
class Expander {
 public:
  Expander(Graph& g, Node& rnn, const RnnSpec& s, const std::string& where) : g_(g), rnn_(rnn), s_(s), where_(where) {}

  Status run() {
    Value* x = rnn_.inputs[0];
    prefix_ = rnn_.name;
    if (s_.layout) x = op("Transpose", {x}, perm({1, 0, 2}));
    Value* x2d = reshape(x, {s_.seq * s_.batch, s_.input});
    Value* init_h = in(5) ? state_input(in(5)) : nullptr;
    Value* init_c = s_.lstm && in(6) ? state_input(in(6)) : nullptr;
    std::vector<Value*> ys, yhs, ycs;
    for (int64_t d = 0; d < s_.dirs; ++d) {
      const bool reverse = s_.reverse_only || d == 1;
      prefix_ = rnn_.name + "/d" + std::to_string(d);
      direction(d, reverse, x2d, init_h, init_c, &ys, &yhs, &ycs);
    }
    const bool l = s_.layout != 0;
    auto join = [&](const std::vector<Value*>& parts, int64_t axis, Value* target, std::vector<int64_t> p) {
      if (!target) return;
      if (!l && parts.size() == 1) {
        reshape(parts[0], target->dims, target);
        return;
      }
      Value* v = parts.size() == 1 ? parts[0] : op("Concat", parts, axis_attr(axis), l ? nullptr : target);
      if (l) op("Transpose", {v}, perm(std::move(p)), target);
    };
    prefix_ = rnn_.name;
    join(ys, 1, out(0), {2, 0, 1, 3});
    join(yhs, 0, out(1), {1, 0, 2});
    if (s_.lstm) join(ycs, 0, out(2), {1, 0, 2});
    return x_status_;
  }

 private:
  Value* in(size_t i) const { return i < rnn_.inputs.size() ? rnn_.inputs[i] : nullptr; }
  Value* out(size_t i) const { return i < rnn_.outputs.size() ? rnn_.outputs[i] : nullptr; }

  static AttrMap perm(std::vector<int64_t> p) {
    AttrMap a;
    a.set("perm", std::move(p));
    return a;
  }
  static AttrMap axis_attr(int64_t axis) {
    AttrMap a;
    a.set("axis", axis);
    return a;
  }

  Value* ints(const std::vector<int64_t>& v) {
    Value* c = g_.add_value(prefix_ + "/const", DType::kInt64, {static_cast<int64_t>(v.size())}, ValueKind::kConstant);
    c->data = std::make_shared<HostTensor>(HostTensor::from<int64_t>(c->dims, v));
    return c;
  }

  // One node with `outputs` new outputs (or `target` as its only output), shape-inferred.
  std::vector<Value*> ops(const std::string& op_type, std::vector<Value*> inputs, AttrMap attrs, size_t outputs,
                          Value* target = nullptr) {
    std::vector<Value*> outs;
    if (target) {
      target->producer = nullptr;
      outs.push_back(target);
    } else {
      for (size_t i = 0; i < outputs; ++i)
        outs.push_back(g_.add_value(prefix_ + "/" + op_type, DType::kUndefined, {}, ValueKind::kActivation));
    }
    attrs.set("_expanded_from", rnn_.name);  // the stage export maps the node to its source node
    Node* n = g_.add_node(op_type, g_.unique_name(prefix_ + "/" + op_type + std::to_string(count_++)), std::move(inputs), outs,
                          std::move(attrs));
    n->since_version = rnn_.since_version;
    n->domain = rnn_.domain;
    if (x_status_.is_ok()) x_status_ = infer_node(*n, where_ + " (expanded: " + n->describe() + ")");
    return outs;
  }
  Value* op(const std::string& op_type, std::vector<Value*> inputs, AttrMap attrs = {}, Value* target = nullptr) {
    return ops(op_type, std::move(inputs), std::move(attrs), 1, target)[0];
  }
  Value* reshape(Value* v, const Dims& dims, Value* target = nullptr) {
    return op("Reshape", {v, ints(std::vector<int64_t>(dims.begin(), dims.end()))}, {}, target);
  }
  Value* slice(Value* v, int64_t axis, int64_t start, int64_t end) {
    return op("Slice", {v, ints({start}), ints({end}), ints({axis})});
  }
  Value* gemm_bt(Value* a, Value* b, Value* c) {  // a b^T + c
    AttrMap t;
    t.set("transB", int64_t{1});
    std::vector<Value*> ins{a, b};
    if (c) ins.push_back(c);
    return op("Gemm", std::move(ins), std::move(t));
  }
  // [D, B, H] (or [B, D, H] in layout 1) -> [D, B, H].
  Value* state_input(Value* v) { return s_.layout ? op("Transpose", {v}, perm({1, 0, 2})) : v; }

  // One direction: appends its Y part [T, 1, B, H] and final states [1, B, H].
  void direction(int64_t d, bool reverse, Value* x2d, Value* init_h, Value* init_c, std::vector<Value*>* ys,
                 std::vector<Value*>* yhs, std::vector<Value*>* ycs) {
    const int64_t H = s_.hidden, GH = s_.gates * H, Bn = s_.batch;
    Value* w = reshape(slice(in(1), 0, d, d + 1), {GH, s_.input});
    Value* r = reshape(slice(in(2), 0, d, d + 1), {GH, H});
    Value *wb = nullptr, *rb = nullptr;
    if (in(3)) {
      Value* b = reshape(slice(in(3), 0, d, d + 1), {2 * GH});
      wb = slice(b, 0, 0, GH);
      rb = slice(b, 0, GH, 2 * GH);
    }
    // Every step's input projection at once; LSTM (and GRU's z, r gates) add both biases here.
    Value* xbias = wb;
    if (s_.lstm && wb) xbias = op("Add", {wb, rb});
    Value* xp = gemm_bt(x2d, w, xbias);  // [T*B, GH]
    // GRU: R split into the z/r rows and the h rows (their biases likewise) where the reset gate
    // applies before the product.
    Value *r_zr = nullptr, *r_h = nullptr, *rb_zr = nullptr, *rb_h = nullptr;
    if (!s_.lstm && !s_.linear_before_reset) {
      r_zr = slice(r, 0, 0, 2 * H);
      r_h = slice(r, 0, 2 * H, GH);
      if (rb) {
        rb_zr = slice(rb, 0, 0, 2 * H);
        rb_h = slice(rb, 0, 2 * H, GH);
      }
    }
    auto initial = [&](Value* v) -> Value* {
      if (v) return reshape(slice(v, 0, d, d + 1), {Bn, H});
      Value* z = g_.add_value(prefix_ + "/zeros", in(0)->dtype, {Bn, H}, ValueKind::kConstant);
      z->data = std::make_shared<HostTensor>(in(0)->dtype, z->dims);
      return z;
    };
    Value* h = initial(init_h);
    Value* c = s_.lstm ? initial(init_c) : nullptr;
    std::vector<Value*> hs(s_.seq);
    for (int64_t step = 0; step < s_.seq; ++step) {
      const int64_t t = reverse ? s_.seq - 1 - step : step;
      prefix_ = rnn_.name + "/d" + std::to_string(d) + "/t" + std::to_string(t);
      Value* xt = slice(xp, 0, t * Bn, (t + 1) * Bn);  // [B, GH]
      if (s_.lstm) {
        Value* gates = gemm_bt(h, r, xt);                                // H R^T + (X W^T + biases)
        std::vector<Value*> g = ops("Split", {gates}, axis_attr(1), 4);  // i, o, f, c
        Value* i = op("Sigmoid", {g[0]});
        Value* o = op("Sigmoid", {g[1]});
        Value* f = op("Sigmoid", {g[2]});
        Value* cc = op("Tanh", {g[3]});
        c = op("Add", {op("Mul", {f, c}), op("Mul", {i, cc})});
        h = op("Mul", {o, op("Tanh", {c})});
      } else {
        std::vector<Value*> xg = ops("Split", {xt}, axis_attr(1), 3);  // z, r, h
        Value *hz, *hr, *hh;
        if (s_.linear_before_reset) {
          std::vector<Value*> hg = ops("Split", {gemm_bt(h, r, rb)}, axis_attr(1), 3);
          hz = hg[0];
          hr = hg[1];
          hh = hg[2];
        } else {
          std::vector<Value*> hg = ops("Split", {gemm_bt(h, r_zr, rb_zr)}, axis_attr(1), 2);
          hz = hg[0];
          hr = hg[1];
          hh = nullptr;
        }
        Value* z = op("Sigmoid", {op("Add", {xg[0], hz})});
        Value* rg = op("Sigmoid", {op("Add", {xg[1], hr})});
        Value* pre = s_.linear_before_reset ? op("Mul", {rg, hh}) : gemm_bt(op("Mul", {rg, h}), r_h, rb_h);
        Value* hc = op("Tanh", {op("Add", {xg[2], pre})});
        // (1 - z) hc + z h, written as hc + z (h - hc).
        h = op("Add", {hc, op("Mul", {z, op("Sub", {h, hc})})});
      }
      hs[t] = h;
    }
    prefix_ = rnn_.name + "/d" + std::to_string(d);
    if (out(0)) {
      Value* all = s_.seq == 1 ? hs[0] : op("Concat", hs, axis_attr(0));  // [T*B, H]
      ys->push_back(reshape(all, {s_.seq, 1, Bn, H}));
    }
    yhs->push_back(out(1) ? reshape(h, {1, Bn, H}) : nullptr);
    if (s_.lstm) ycs->push_back(out(2) ? reshape(c, {1, Bn, H}) : nullptr);
  }

  Graph& g_;
  Node& rnn_;
  const RnnSpec& s_;
  std::string where_;
  std::string prefix_;
  int count_ = 0;
  Status x_status_ = Status::ok();
};

}  // namespace

bool is_expanded_op(const std::string& op) { return op == "LSTM" || op == "GRU"; }

Status rnn_shape(Node& n, const std::string& where) {
  ASSIGN_OR_RETURN(RnnSpec s, read_spec(n, where));
  const DType dt = n.inputs[0]->dtype;
  const Dims y = s.layout ? Dims{s.batch, s.seq, s.dirs, s.hidden} : Dims{s.seq, s.dirs, s.batch, s.hidden};
  const Dims st = s.layout ? Dims{s.batch, s.dirs, s.hidden} : Dims{s.dirs, s.batch, s.hidden};
  if (n.outputs.size() > (s.lstm ? 3u : 2u))
    return invalid_input(where + ": has " + std::to_string(n.outputs.size()) + " outputs, at most " + (s.lstm ? "3" : "2"));
  shape::set_out(n, 0, dt, y);
  shape::set_out(n, 1, dt, st);
  shape::set_out(n, 2, dt, st);
  return Status::ok();
}

Status expand_recurrent(Graph& g, const std::string& path) {
  bool any = false;
  for (const auto& n : g.nodes()) any = any || is_expanded_op(n->op_type);
  if (!any) return Status::ok();
  // Every node is appended again in order (the recurrent ones as their expansion), then the
  // originals are removed: the graph stays topologically ordered without an insert operation.
  std::vector<Node*> old;
  for (const auto& n : g.nodes()) old.push_back(n.get());
  for (Node* n : old) {
    if (is_expanded_op(n->op_type)) {
      const std::string where = path + ": " + n->describe();
      ASSIGN_OR_RETURN(RnnSpec s, read_spec(*n, where));
      Expander e(g, *n, s, where);
      RETURN_IF_ERROR(e.run());
      continue;
    }
    for (Value* v : n->outputs)
      if (v) v->producer = nullptr;
    Node* c = g.add_node(n->op_type, n->name, n->inputs, n->outputs, n->attrs, n->phase);
    c->domain = n->domain;
    c->forward = n->forward;
    c->since_version = n->since_version;
  }
  std::vector<bool> remove(g.nodes().size(), false);
  for (size_t i = 0; i < old.size(); ++i) remove[i] = true;
  g.remove_nodes(remove);
  return Status::ok();
}

}  // namespace pt
