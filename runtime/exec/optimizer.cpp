// SpecTrain's weight prediction per optimizer and the optimizer's description (runtime/exec/optimizer.h).
#include "runtime/exec/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

namespace pt {

Status predict_weights(const Executor& ex, const Node& u, const TensorView& out, const TensorView& master,
                       const Value* lr, double s) {
  Device& dev = *ex.device();
  if (u.op_type == "Adam") {
    AdamPredict h;
    h.beta1 = u.attrs.get_float("beta1", 0.9f);
    h.beta2 = u.attrs.get_float("beta2", 0.999f);
    h.eps = u.attrs.get_float("epsilon", 1e-8f);
    if (u.attrs.get_int("decoupled", 0) != 0) h.decoupled_wd = u.attrs.get_float("weight_decay", 0.0f);
    return dev.predict_adam(out, master, ex.view(u.inputs.at(2)), ex.view(u.inputs.at(3)), ex.view(u.inputs.at(5)),
                            ex.view(lr), s, h, ex.stream());
  }
  if (u.op_type == "SGD") {
    const bool nesterov = u.attrs.get_int("nesterov", 0) != 0;
    return dev.predict(out, master, ex.view(u.inputs.at(nesterov ? 5 : 2)), ex.view(lr), s, ex.stream());
  }
  if (u.op_type == "SGDMomentum") return dev.predict(out, master, ex.view(u.inputs.at(2)), ex.view(lr), s, ex.stream());
  return internal_error(u.describe() + ": no SpecTrain prediction for this optimizer");
}

namespace {

template <typename T>
double sum_squares(const T* p, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * static_cast<double>(p[i]);
  return s;
}

template <typename T>
void scale(T* p, int64_t n, double coef) {
  const T c = static_cast<T>(coef);
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) p[i] *= c;
}

}  // namespace

Expected<double> grad_sum_squares(const Executor& ex, const std::vector<const Value*>& grads) {
  double s = 0;
  for (const Value* g : grads) {
    HostTensor copy;
    const void* data = ex.view(g).data;
    if (!ex.device()->host_memory()) {
      ASSIGN_OR_RETURN(copy, ex.fetch(g));
      data = copy.data();
    }
    if (g->dtype == DType::kFloat64) s += sum_squares(static_cast<const double*>(data), g->size());
    else if (g->dtype == DType::kFloat32) s += sum_squares(static_cast<const float*>(data), g->size());
    else return internal_error("--clip-grad-norm: gradient '" + g->name + "' is " + dtype_name(g->dtype));
  }
  return s;
}

double clip_coefficient(double max_norm, double sum_squares) {
  return std::min(1.0, max_norm / (std::sqrt(sum_squares) + 1e-6));
}

Status scale_grads(Executor& ex, const std::vector<const Value*>& grads, double coef) {
  if (coef >= 1.0) return Status::ok();
  const bool host = ex.device()->host_memory();
  for (const Value* g : grads) {
    void* data = ex.view(g).data;
    HostTensor copy;
    if (!host) {
      ASSIGN_OR_RETURN(copy, ex.fetch(g));
      data = copy.data();
    }
    if (g->dtype == DType::kFloat64) scale(static_cast<double*>(data), g->size(), coef);
    else scale(static_cast<float*>(data), g->size(), coef);
    if (!host) {
      ex.host(g) = std::move(copy);
      RETURN_IF_ERROR(ex.upload(g));
    }
  }
  return Status::ok();
}

std::string optimizer_description(const Graph& g) {
  for (const auto& n : g.nodes()) {
    if (n->phase != Phase::kUpdate) continue;
    const AttrMap& a = n->attrs;
    char b[160];
    if (n->op_type == "SGD") {
      std::snprintf(b, sizeof b, "sgd (dampening %g, nesterov %s)", a.get_float("dampening", 0),
                    a.get_int("nesterov", 0) ? "on" : "off");
      return b;
    }
    if (n->op_type == "Adam") {
      std::snprintf(b, sizeof b, "%s (betas %g, %g, eps %g)", a.get_int("decoupled", 0) ? "adamw" : "adam",
                    a.get_float("beta1", 0.9f), a.get_float("beta2", 0.999f), a.get_float("epsilon", 1e-8f));
      return b;
    }
    return "sgd-paper";
  }
  return "";
}

std::vector<const Node*> interleave_updates(const std::vector<const Node*>& nodes) {
  // last[value]: position, in the list without the updates, of the last node that touches it.
  std::unordered_map<const Value*, int> last;
  std::vector<const Node*> others;
  for (const Node* n : nodes) {
    if (n->phase == Phase::kUpdate) continue;
    const int pos = static_cast<int>(others.size());
    for (const Value* v : n->inputs)
      if (v) last[v] = pos;
    for (const Value* v : n->outputs)
      if (v) last[v] = pos;
    others.push_back(n);
  }
  // after[pos + 1]: the updates that follow others[pos]; after[0] those before every node (none
  // in practice: an update always has a gradient), after.back() those left at the end.
  std::vector<std::vector<const Node*>> after(others.size() + 2);
  for (const Node* n : nodes) {
    if (n->phase != Phase::kUpdate) continue;
    int dep = -1;
    bool touched = false;
    for (const Value* v : n->inputs) {
      auto it = v ? last.find(v) : last.end();
      if (it == last.end()) continue;
      dep = std::max(dep, it->second);
      touched = true;
    }
    after[touched ? dep + 1 : others.size() + 1].push_back(n);
  }
  std::vector<const Node*> out;
  out.reserve(nodes.size());
  for (const Node* u : after[0]) out.push_back(u);
  for (size_t i = 0; i < others.size(); ++i) {
    out.push_back(others[i]);
    for (const Node* u : after[i + 1]) out.push_back(u);
  }
  for (const Node* u : after.back()) out.push_back(u);
  return out;
}

}  // namespace pt
