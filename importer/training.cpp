// Loss attachment, reverse-mode autodiff over the IR, and the optimizer's update nodes.
#include "importer/training.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "importer/grad/grad_registry.h"
#include "importer/shape_infer.h"

namespace pt {

namespace {

Value* scalar_one(Graph& g, DType dt) {
  Value* c = g.add_value("loss_grad_seed", dt, {}, ValueKind::kConstant);
  HostTensor t(dt, {});
  if (dt == DType::kFloat64) t.as<double>()[0] = 1.0;
  else t.as<float>()[0] = 1.0f;
  c->data = std::make_shared<HostTensor>(std::move(t));
  return c;
}

// Token-level cross-entropy for a sequence output: logits [N, T, V] (a [N*T, V] output is
// reshaped to it) are transposed to [N, V, T] so that SoftmaxCrossEntropyLoss reads labels [N, T].
Expected<LossInfo> attach_token_loss(Graph& g, Value* out, int64_t batch, int64_t ignore_index) {
  LossInfo info;
  info.kind = LossKind::kCrossEntropy;
  info.output = out;
  info.ignore_index = ignore_index;
  const bool flat = out->dims.size() == 2;
  const int64_t n = flat ? batch : out->dims[0];
  const int64_t t = flat ? out->dims[0] / batch : out->dims[1];
  const int64_t v = out->dims.back();
  Value* logits = out;
  if (flat) {
    Value* shape = g.add_value("loss/shape", DType::kInt64, {3}, ValueKind::kConstant);
    shape->data = std::make_shared<HostTensor>(DType::kInt64, Dims{3});
    int64_t* s = shape->data->as<int64_t>();
    s[0] = n, s[1] = t, s[2] = v;
    logits = g.add_value("loss/logits", out->dtype, {n, t, v}, ValueKind::kActivation);
    g.add_node("Reshape", "loss/Reshape", {out, shape}, {logits}, {}, Phase::kLoss);
  }
  Value* scores = g.add_value("loss/scores", out->dtype, {n, v, t}, ValueKind::kActivation);
  AttrMap tm;
  tm.set("perm", std::vector<int64_t>{0, 2, 1});
  g.add_node("Transpose", "loss/Transpose", {logits}, {scores}, tm, Phase::kLoss);
  info.logits = scores;
  info.num_classes = v;
  info.tokens = t;
  info.labels = g.add_value("labels", DType::kInt64, {n, t}, ValueKind::kLabel);
  Value* loss = g.add_value("loss", out->dtype, {}, ValueKind::kActivation);
  Value* logp = g.add_value("loss/log_prob", out->dtype, {n, v, t}, ValueKind::kActivation);
  AttrMap m;
  m.set("reduction", std::string("mean"));
  m.set("ignore_index", ignore_index);
  g.add_node("SoftmaxCrossEntropyLoss", "loss/SoftmaxCrossEntropyLoss", {scores, info.labels}, {loss, logp}, m,
             Phase::kLoss);
  info.loss = loss;
  info.description = "token-level softmax cross-entropy (mean over the tokens whose label is not " +
                     std::to_string(ignore_index) + ", int64 labels [N, " + std::to_string(t) + "] in [0, " +
                     std::to_string(v) + ")) on output '" + out->name + "' " + dims_str(out->dims);
  g.loss = loss;
  return info;
}

}  // namespace

Expected<LossInfo> attach_loss(Graph& g, LossKind kind, int64_t ignore_index, const std::string& output) {
  if (g.outputs.empty()) return invalid_input("the model has no outputs to attach a loss to");
  LossInfo info;
  Value* chosen = nullptr;  // --loss-output's
  if (!output.empty()) {
    std::string names;
    for (Value* v : g.outputs) {
      if (v->name == output) chosen = v;
      names += (names.empty() ? "'" : ", '") + v->name + "'";
    }
    if (!chosen) return invalid_input("--loss-output " + output + ": the model has no such output (its outputs: " + names + ")");
  }
  // A model that already computes its loss.
  for (Value* out : g.outputs) {
    if (chosen && out != chosen) continue;
    Node* p = out->producer;
    if (p && p->op_type == "SoftmaxCrossEntropyLoss" && out == p->outputs[0] && kind != LossKind::kMse) {
      if (!out->dims.empty()) return invalid_input("the model's SoftmaxCrossEntropyLoss '" + p->name + "' has reduction 'none'; a scalar loss is needed");
      Value* labels = p->inputs[1];
      if (labels->kind != ValueKind::kInput) return invalid_input("the model's SoftmaxCrossEntropyLoss '" + p->name + "' labels are not a graph input");
      labels->kind = ValueKind::kLabel;
      std::erase(g.inputs, labels);
      if (p->outputs.size() < 2 || !p->outputs[1]) {
        Value* lp = g.add_value(p->name + "/log_prob", p->inputs[0]->dtype, p->inputs[0]->dims, ValueKind::kActivation);
        p->outputs.resize(2);
        p->outputs[1] = lp;
        lp->producer = p;
      }
      p->phase = Phase::kLoss;
      info.kind = LossKind::kCrossEntropy;
      info.output = info.logits = p->inputs[0];
      info.labels = labels;
      info.loss = out;
      info.num_classes = p->inputs[0]->dims.at(1);
      info.description = "the model's own SoftmaxCrossEntropyLoss '" + p->name + "' (output '" + out->name + "')";
      g.loss = out;
      return info;
    }
  }
  // The first float output unless one is named (an argmax or a mask may come first).
  Value* out = chosen;
  for (Value* v : g.outputs)
    if (!out && is_floating(v->dtype)) out = v;
  if (!out) out = g.outputs[0];
  if (!is_floating(out->dtype))
    return invalid_input("model output '" + out->name + "' is " + dtype_name(out->dtype) + ", not a float tensor" +
                         (chosen ? "" : " (and no output is)"));
  // The loss compares each sample's output with its label: the output's first dimension is the batch.
  if (out->dims.empty())
    return invalid_input("model output '" + out->name + "' is a scalar ([]): the loss needs one output per sample, "
                         "with the batch as its first dimension; export the model before it reduces over the batch");
  const bool nc = out->dims.size() == 2;
  // Sequence outputs: [N, T, V], or [N*T, V] where N is the batch (the first input's first dimension).
  const int64_t batch = g.inputs.empty() || g.inputs[0]->dims.empty() ? 0 : g.inputs[0]->dims[0];
  const bool flat_tokens = nc && batch > 0 && out->dims[0] != batch && out->dims[0] % batch == 0;
  const bool seq = out->dims.size() == 3 || flat_tokens;
  if (kind == LossKind::kAuto) kind = nc || seq ? LossKind::kCrossEntropy : LossKind::kMse;
  if (kind == LossKind::kCrossEntropy && seq) return attach_token_loss(g, out, batch, ignore_index);
  info.kind = kind;
  info.output = info.logits = out;
  std::string note;
  if (kind == LossKind::kCrossEntropy) {
    if (!nc) return invalid_input("--loss cross-entropy needs an output shaped [N, C]; '" + out->name + "' is " + dims_str(out->dims));
    // Cross-entropy wants logits: read through a final Softmax / LogSoftmax.
    if (Node* p = out->producer; p && (p->op_type == "Softmax" || p->op_type == "LogSoftmax") &&
                                 p->attrs.get_int("axis", 1) == 1) {
      info.logits = p->inputs[0];
      note = " (reading logits '" + info.logits->name + "' before the final " + p->op_type + ")";
    }
    info.num_classes = out->dims[1];
    info.labels = g.add_value("labels", DType::kInt64, {out->dims[0]}, ValueKind::kLabel);
    Value* loss = g.add_value("loss", out->dtype, {}, ValueKind::kActivation);
    Value* logp = g.add_value("loss/log_prob", out->dtype, out->dims, ValueKind::kActivation);
    AttrMap m;
    m.set("reduction", std::string("mean"));
    g.add_node("SoftmaxCrossEntropyLoss", "loss/SoftmaxCrossEntropyLoss", {info.logits, info.labels}, {loss, logp}, m, Phase::kLoss);
    info.loss = loss;
    info.description = "softmax cross-entropy (mean over the batch, int64 labels in [0, " +
                       std::to_string(info.num_classes) + ")) on output '" + out->name + "' " + dims_str(out->dims) + note;
  } else {
    info.labels = g.add_value("targets", out->dtype, out->dims, ValueKind::kLabel);
    Value* loss = g.add_value("loss", out->dtype, {}, ValueKind::kActivation);
    AttrMap m;
    m.set("reduction", std::string("mean"));
    g.add_node("MSELoss", "loss/MSELoss", {out, info.labels}, {loss}, m, Phase::kLoss);
    info.loss = loss;
    info.description = "mean squared error on output '" + out->name + "' " + dims_str(out->dims);
  }
  g.loss = info.loss;
  return info;
}

Expected<std::map<Value*, Value*>> build_gradients(Graph& g, const std::vector<std::pair<Value*, Value*>>& seeds,
                                                  const std::vector<Value*>& wrt) {
  // Values that depend on `wrt` (forward reach), and nodes the seeds depend on (backward reach).
  std::set<const Value*> depends(wrt.begin(), wrt.end());
  const size_t n_fwd = g.nodes().size();
  std::vector<Node*> fwd;
  for (size_t i = 0; i < n_fwd; ++i) fwd.push_back(g.nodes()[i].get());
  for (Node* n : fwd) {
    bool any = false;
    for (Value* v : n->inputs) any |= v && depends.count(v);
    if (any)
      for (Value* v : n->outputs)
        if (v) depends.insert(v);
  }
  std::map<Value*, Value*> grad;  // accumulated gradient per value
  auto accumulate = [&](Value* v, Value* d, Node* fwd_node) {
    auto it = grad.find(v);
    if (it == grad.end()) {
      grad[v] = d;
      return;
    }
    // A slice's gradient (SliceGrad: zeros with dY in the slice) added to the gradient so far: the
    // SliceGrad starts from that gradient instead of zeros (no Add, no zero fill). Typical: the Q, K and
    // V slices of one packed projection.
    Node* sg = d->producer;
    if (sg && sg->op_type == "SliceGrad" && sg->domain == "pipetrain" && sg->inputs.size() == 1 && d->consumers.empty() &&
        it->second->dims == d->dims && it->second->dtype == d->dtype) {
      sg->inputs.push_back(it->second);
      it->second->consumers.push_back(sg);
      it->second = d;
      return;
    }
    Value* sum = g.add_value(v->name + "_grad/sum", d->dtype, v->dims, ValueKind::kActivation);
    Node* add = g.add_node("Add", v->name + "_grad/accumulate_" + std::to_string(sum->id), {it->second, d}, {sum}, {}, Phase::kBackward);
    add->forward = fwd_node;
    it->second = sum;
  };
  for (auto& [v, d] : seeds) {
    if (d->dims != v->dims) return internal_error("gradient seed for '" + v->name + "' has dims " + dims_str(d->dims));
    accumulate(v, d, v->producer);
  }
  for (size_t k = n_fwd; k-- > 0;) {
    Node* n = fwd[k];
    if (n->phase == Phase::kBackward || n->phase == Phase::kUpdate) continue;
    std::vector<Value*> dy;
    bool any_dy = false;
    for (Value* o : n->outputs) {
      Value* d = nullptr;
      if (o) {
        auto it = grad.find(o);
        if (it != grad.end()) d = it->second;
      }
      dy.push_back(d);
      any_dy |= d != nullptr;
    }
    if (!any_dy) continue;
    std::vector<bool> needs;
    bool any_need = false;
    for (Value* v : n->inputs) {
      bool need = v && depends.count(v) && is_floating(v->dtype);
      needs.push_back(need);
      any_need |= need;
    }
    if (!any_need) continue;
    GradBuilder b = find_grad_builder(n->op_type);
    if (!b) return unsupported(n->describe() + ": no gradient builder for op " + n->op_type);
    GradContext ctx(g, *n, dy, needs);
    RETURN_IF_ERROR(b(ctx).with_context(n->describe() + ": gradient: "));
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (ctx.dx()[i]) {
        if (ctx.dx()[i]->dims != n->inputs[i]->dims)
          return internal_error(n->describe() + ": gradient of input '" + n->inputs[i]->name + "' has dims " +
                                dims_str(ctx.dx()[i]->dims) + ", the input " + dims_str(n->inputs[i]->dims));
        accumulate(n->inputs[i], ctx.dx()[i], n);
      }
  }
  std::map<Value*, Value*> out;
  for (Value* w : wrt) {
    auto it = grad.find(w);
    if (it != grad.end()) out[w] = it->second;
  }
  return out;
}

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgdPaper: return "sgd-paper";
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

const char* update_op(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgdPaper: return "SGDMomentum";
    case OptimizerKind::kSgd: return "SGD";
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: return "Adam";
  }
  return "?";
}

Expected<OptimizerKind> parse_optimizer(const std::string& name) {
  for (OptimizerKind k : {OptimizerKind::kSgdPaper, OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW})
    if (name == optimizer_name(k)) return k;
  return invalid_input("--optimizer " + name + ": unknown optimizer (valid: sgd-paper, sgd, adam, adamw)");
}

Expected<TrainingGraph> build_training_graph(Graph& g, LossKind kind, const SgdOptions& sgd, int64_t ignore_index,
                                             const std::string& loss_output) {
  TrainingGraph tg;
  ASSIGN_OR_RETURN(tg.loss, attach_loss(g, kind, ignore_index, loss_output));
  // The gradient seed, the learning rate and the updates are made in the loss's type: a float16
  // scalar output used as the loss reached scalar_one's float32 write (an abort; fuzz_model).
  const DType loss_dt = tg.loss.loss->dtype;
  if (loss_dt != DType::kFloat32 && loss_dt != DType::kFloat64)
    return unsupported("the loss '" + tg.loss.loss->name + "'" +
                       (tg.loss.output ? " (of the model output '" + tg.loss.output->name + "')" : std::string()) +
                       " is " + dtype_name(loss_dt) + "; training needs a float32 or float64 loss");
  std::vector<Value*> params = g.values_of_kind(ValueKind::kParameter);
  Value* seed = scalar_one(g, loss_dt);
  ASSIGN_OR_RETURN(tg.grads, build_gradients(g, {{tg.loss.loss, seed}}, params));
  for (Value* p : params) {
    if (tg.grads.count(p)) tg.params.push_back(p);
    else tg.unused_params.push_back(p->name);
  }
  if (tg.params.empty()) return invalid_input("the model has no trainable parameters that reach the loss");
  tg.lr = g.add_value("lr", tg.loss.loss->dtype, {}, ValueKind::kHyper);
  for (Value* p : tg.params) {
    auto state = [&](const std::string& suffix, DType dt, const Dims& dims) {
      Value* v = g.add_value(p->name + suffix, dt, dims, ValueKind::kState);
      v->data = std::make_shared<HostTensor>(dt, dims);
      tg.opt_state[p].push_back(v);
      return v;
    };
    AttrMap m;
    m.set("weight_decay", sgd.weight_decay);
    const std::string op = update_op(sgd.kind);
    std::vector<Value*> in{p, tg.grads[p]};
    switch (sgd.kind) {
      case OptimizerKind::kSgdPaper:
        m.set("momentum", sgd.momentum);
        in.push_back(state(".momentum", p->dtype, p->dims));
        in.push_back(tg.lr);
        break;
      case OptimizerKind::kSgd:
        m.set("momentum", sgd.momentum);
        m.set("dampening", sgd.dampening);
        m.set("nesterov", static_cast<int64_t>(sgd.nesterov));
        in.push_back(state(".momentum", p->dtype, p->dims));
        in.push_back(tg.lr);
        in.push_back(state(".step", DType::kInt64, {}));
        if (sgd.nesterov) in.push_back(state(".direction", p->dtype, p->dims));
        break;
      case OptimizerKind::kAdam:
      case OptimizerKind::kAdamW:
        m.set("beta1", sgd.beta1);
        m.set("beta2", sgd.beta2);
        m.set("epsilon", sgd.eps);
        m.set("decoupled", static_cast<int64_t>(sgd.kind == OptimizerKind::kAdamW));
        in.push_back(state(".exp_avg", p->dtype, p->dims));
        in.push_back(state(".exp_avg_sq", p->dtype, p->dims));
        in.push_back(tg.lr);
        in.push_back(state(".step", DType::kInt64, {}));
        break;
    }
    tg.momentum[p] = tg.opt_state[p].front();
    Node* u = g.add_node(op, p->name + "/update", in, {}, m, Phase::kUpdate);
    u->domain = "pipetrain";
  }
  if (const std::string broken = g.broken_link(); !broken.empty())
    return internal_error("the training graph has a broken link: " + broken);
  return tg;
}

std::vector<const Node*> weight_gradient_nodes(const std::vector<const Node*>& nodes,
                                               const std::vector<const Value*>& sent) {
  std::unordered_set<const Value*> needed(sent.begin(), sent.end());
  std::unordered_set<const Node*> input_part;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node* n = *it;
    if (n->phase != Phase::kBackward) continue;
    if (std::none_of(n->outputs.begin(), n->outputs.end(), [&](const Value* v) { return v && needed.count(v); })) continue;
    input_part.insert(n);
    for (const Value* v : n->inputs)
      if (v) needed.insert(v);
  }
  std::vector<const Node*> w;
  for (const Node* n : nodes)
    if (n->phase == Phase::kBackward && !input_part.count(n)) w.push_back(n);
  return w;
}

}  // namespace pt
