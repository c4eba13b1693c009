// Executor: the memory plan, buffer allocation, kernel resolution, the run loop.
#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

namespace pt {

MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& nodes, const std::vector<const Value*>& keep) {
  MemoryPlan p;
  const size_t nv = g.values().size();
  p.offset.assign(nv, MemoryPlan::kOwn);
  p.first.assign(nv, -1);
  p.last.assign(nv, -1);
  std::vector<int> pos(g.nodes().size() + 1, -1);  // [node id]: position in `nodes`
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (static_cast<size_t>(nodes[i]->id) >= pos.size()) pos.resize(nodes[i]->id + 1, -1);
    pos[nodes[i]->id] = static_cast<int>(i);
  }
  auto pos_of = [&](const Node* n) { return static_cast<size_t>(n->id) < pos.size() ? pos[n->id] : -1; };
  std::unordered_set<const Value*> kept(keep.begin(), keep.end());
  kept.insert(g.inputs.begin(), g.inputs.end());
  kept.insert(g.outputs.begin(), g.outputs.end());
  if (g.loss) kept.insert(g.loss);
  if (g.rng_step) kept.insert(g.rng_step);

  std::vector<const Value*> cand;
  for (const auto& up : g.values()) {
    const Value* v = up.get();
    if (v->kind != ValueKind::kActivation || v->data || v->dtype == DType::kUndefined || !v->producer) continue;
    if (kept.count(v) || v->bytes() == 0) continue;
    const int def = pos_of(v->producer);
    if (def < 0) continue;  // computed elsewhere (another stage): arrives from outside
    int last = def;
    bool inside = true;
    for (const Node* c : v->consumers) {
      const int u = pos_of(c);
      if (u < 0) inside = false;  // read outside this list (sent to another stage)
      last = std::max(last, u);
    }
    if (!inside || last < def) continue;
    p.first[v->id] = def;
    p.last[v->id] = last;
    cand.push_back(v);
  }
  // Greedy by size (largest first): each value takes the lowest offset that overlaps no placed
  // value whose lifetime overlaps its own.
  auto rounded = [](size_t b) { return (b + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment; };
  std::sort(cand.begin(), cand.end(), [&](const Value* a, const Value* b) {
    if (a->bytes() != b->bytes()) return a->bytes() > b->bytes();
    return p.first[a->id] < p.first[b->id];
  });
  std::vector<const Value*> placed;
  std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of live-overlapping placed values
  for (const Value* v : cand) {
    const size_t need = rounded(v->bytes());
    busy.clear();
    for (const Value* o : placed)
      if (p.first[o->id] <= p.last[v->id] && p.first[v->id] <= p.last[o->id])
        busy.emplace_back(static_cast<size_t>(p.offset[o->id]), static_cast<size_t>(p.offset[o->id]) + rounded(o->bytes()));
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [b, e] : busy) {
      if (at + need <= b) break;
      at = std::max(at, e);
    }
    p.offset[v->id] = static_cast<int64_t>(at);
    p.arena_bytes = std::max(p.arena_bytes, at + need);
    p.planned_bytes += need;
    ++p.planned_values;
    placed.push_back(v);
  }
  return p;
}

void Executor::FreeArena::operator()(void* p) const { std::free(p); }

Expected<std::unique_ptr<Executor>> Executor::create(const Graph& g, DeviceKind device, std::vector<const Node*> nodes,
                                                     const ExecutorOptions& opts) {
  if (device != DeviceKind::kCpu) return unsupported("the executor runs CPU stages only in this build");
  std::unique_ptr<Executor> ex(new Executor());
  if (nodes.empty())
    for (auto& n : g.nodes()) nodes.push_back(n.get());
  if (opts.plan_memory) {
    ex->plan_ = plan_memory(g, nodes, opts.keep);
  } else {
    ex->plan_.offset.assign(g.values().size(), MemoryPlan::kOwn);
    ex->plan_.first.assign(g.values().size(), -1);
    ex->plan_.last.assign(g.values().size(), -1);
  }
  if (ex->plan_.arena_bytes) {
    void* a = std::aligned_alloc(kPlanAlignment, ex->plan_.arena_bytes);  // a multiple of the alignment
    if (!a) return internal_error("out of memory for a " + std::to_string(ex->plan_.arena_bytes) + "-byte arena");
    std::memset(a, 0, ex->plan_.arena_bytes);
    ex->arena_.reset(a);
  }
  ex->bufs_.resize(g.values().size());
  // Buffers only for what this node list touches, the caller's keep values, the data values and
  // the per-step scalars: a pipeline stage does not hold the other stages' tensors.
  std::vector<char> used(g.values().size(), 0);
  for (const Node* n : nodes) {
    for (const Value* v : n->inputs)
      if (v) used[v->id] = 1;
    for (const Value* v : n->outputs)
      if (v) used[v->id] = 1;
  }
  for (const Value* v : opts.keep) used[v->id] = 1;
  for (auto& v : g.values())
    if (v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel || v->kind == ValueKind::kHyper) used[v->id] = 1;
  ex->allocated_.assign(g.values().size(), 0);
  for (auto& v : g.values()) {
    if (v->dtype == DType::kUndefined) continue;  // never computed (unused optional outputs)
    if (!used[v->id]) continue;
    ex->allocated_[v->id] = 1;
    if (ex->plan_.planned(v.get())) continue;
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
    for (Value* v : n->inputs) s.inputs.push_back(v ? ex->view(v) : TensorView{});
    for (Value* v : n->outputs) s.outputs.push_back(v ? ex->view(v) : TensorView{});
    while (!s.outputs.empty() && !s.outputs.back().data) s.outputs.pop_back();  // unused optional outputs
    ex->steps_.push_back(std::move(s));
  }
  return ex;
}

HostTensor& Executor::tensor(const Value* v) {
  PT_CHECK(!plan_.planned(v)) << "value '" << v->name
                              << "' shares storage under the memory plan; pass it in ExecutorOptions::keep to read it";
  if (!allocated_.at(v->id)) {  // not read by these nodes: its buffer exists from the first request on
    bufs_[v->id] = v->data ? *v->data : HostTensor(v->dtype, v->dims);
    allocated_[v->id] = 1;
  }
  return bufs_.at(v->id);
}

const HostTensor& Executor::tensor(const Value* v) const {
  PT_CHECK(!plan_.planned(v)) << "value '" << v->name
                              << "' shares storage under the memory plan; pass it in ExecutorOptions::keep to read it";
  PT_CHECK(allocated_.at(v->id)) << "value '" << v->name
                                 << "' is not used by this executor's nodes; pass it in ExecutorOptions::keep";
  return bufs_.at(v->id);
}

TensorView Executor::view(const Value* v) const {
  if (!plan_.planned(v)) return bufs_.at(v->id).view();
  return TensorView{static_cast<char*>(arena_.get()) + plan_.offset[v->id], v->dtype, v->dims};
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
