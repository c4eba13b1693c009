// Executor: buffer allocation, kernel resolution, the run loop.
#include "runtime/executor.h"

#include <chrono>

namespace pt {

Expected<std::unique_ptr<Executor>> Executor::create(const Graph& g, DeviceKind device,
                                                     std::vector<const Node*> nodes) {
  if (device != DeviceKind::kCpu) return unsupported("the executor runs CPU stages only in this build");
  std::unique_ptr<Executor> ex(new Executor());
  if (nodes.empty())
    for (auto& n : g.nodes()) nodes.push_back(n.get());
  ex->bufs_.resize(g.values().size());
  for (auto& v : g.values()) {
    if (v->dtype == DType::kUndefined) continue;  // never computed (unused optional outputs)
    if (v->data) ex->bufs_[v->id] = *v->data;
    else ex->bufs_[v->id] = HostTensor(v->dtype, v->dims);
  }
  for (const Node* n : nodes) {
    DType dt = n->inputs.empty() || !n->inputs[0] ? DType::kFloat32 : n->inputs[0]->dtype;
    KernelFn fn = find_kernel(n->op_type, device, dt);
    if (!fn)
      return unsupported(n->describe() + ": no " + std::string(device_kind_name(device)) + " kernel for " +
                         dtype_name(dt));
    Step s{n, fn, {}, {}};
    for (Value* v : n->inputs) s.inputs.push_back(v ? ex->bufs_[v->id].view() : TensorView{});
    for (Value* v : n->outputs) s.outputs.push_back(v ? ex->bufs_[v->id].view() : TensorView{});
    while (!s.outputs.empty() && !s.outputs.back().data) s.outputs.pop_back();  // unused optional outputs
    ex->steps_.push_back(std::move(s));
  }
  return ex;
}

Status Executor::run(const std::function<bool(Phase)>& filter) {
  for (const Step& s : steps_) {
    if (filter && !filter(s.node->phase)) continue;
    Status st = s.fn(KernelCall{s.inputs, s.outputs, s.node->attrs});
    if (!st.is_ok()) return st.with_context(s.node->describe() + ": ");
  }
  return Status::ok();
}

Status Executor::run_timed(std::vector<double>* seconds) {
  using clock = std::chrono::steady_clock;
  for (const Step& s : steps_) {
    const auto t0 = clock::now();
    Status st = s.fn(KernelCall{s.inputs, s.outputs, s.node->attrs});
    if (!st.is_ok()) return st.with_context(s.node->describe() + ": ");
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    if (static_cast<size_t>(s.node->id) >= seconds->size()) seconds->resize(s.node->id + 1, 0.0);
    (*seconds)[s.node->id] += dt;
  }
  return Status::ok();
}

}  // namespace pt
