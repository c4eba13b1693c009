// Executor: the memory plan, buffer allocation, kernel resolution, the run loop.
#include "runtime/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unordered_set>

#include "core/hash.h"
#include "runtime/exec/memory.h"

namespace pt {

MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& nodes, const std::vector<const Value*>& keep,
                       bool outside_reads, bool alias) {
  MemoryPlan p;
  const size_t nv = g.values().size();
  p.offset.assign(nv, MemoryPlan::kOwn);
  p.first.assign(nv, -1);
  p.last.assign(nv, -1);
  p.alias_of.assign(nv, -1);
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
      if (u < 0 && outside_reads) inside = false;  // read outside this list (sent to another stage)
      last = std::max(last, u);
    }
    if (!inside || last < def) continue;
    p.first[v->id] = def;
    p.last[v->id] = last;
    cand.push_back(v);
  }
  // Aliases: the output of a copy joins the group of its input when both are planned and of one
  // size. Nodes in list order, so a group's root (the member that is no alias) comes first.
  std::vector<int> root(nv, -1);  // [value id]: the group's root (planned values)
  for (const Value* v : cand) root[v->id] = v->id;
  if (alias)
    for (const Node* n : nodes) {
      if (!is_copy_op(n->op_type) || n->inputs.empty() || n->outputs.empty()) continue;
      const Value* x = n->inputs[0];
      const Value* y = n->outputs[0];
      if (!x || !y || p.first[x->id] < 0 || p.first[y->id] < 0 || x->bytes() != y->bytes()) continue;
      if (y->producer != n || root[y->id] != y->id) continue;
      p.alias_of[y->id] = x->id;
      root[y->id] = root[x->id];
    }
  // A group's lifetime: the union of its members' (held at the root while placing).
  std::vector<int> gfirst(p.first), glast(p.last);
  for (const Value* v : cand) {
    const int r = root[v->id];
    gfirst[r] = std::min(gfirst[r], p.first[v->id]);
    glast[r] = std::max(glast[r], p.last[v->id]);
  }
  // Greedy by size (largest first): each group takes the lowest offset that overlaps no placed
  // group whose lifetime overlaps its own.
  auto rounded = [](size_t b) { return (b + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment; };
  std::vector<const Value*> roots;
  for (const Value* v : cand)
    if (root[v->id] == v->id) roots.push_back(v);
  std::sort(roots.begin(), roots.end(), [&](const Value* a, const Value* b) {
    if (a->bytes() != b->bytes()) return a->bytes() > b->bytes();
    return gfirst[a->id] < gfirst[b->id];
  });
  std::vector<const Value*> placed;
  std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of live-overlapping placed groups
  for (const Value* v : roots) {
    const size_t need = rounded(v->bytes());
    busy.clear();
    for (const Value* o : placed)
      if (gfirst[o->id] <= glast[v->id] && gfirst[v->id] <= glast[o->id])
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
    placed.push_back(v);
  }
  for (const Value* v : cand) {
    p.offset[v->id] = p.offset[root[v->id]];
    ++p.planned_values;
    if (root[v->id] != v->id) {
      ++p.aliased_values;
      p.aliased_bytes += rounded(v->bytes());
    }
  }
  return p;
}

Expected<std::unique_ptr<Executor>> Executor::create(const Graph& g, DeviceKind device, std::vector<const Node*> nodes,
                                                     const ExecutorOptions& opts) {
  ASSIGN_OR_RETURN(std::shared_ptr<Device> d, open_device(device, 0));
  return create(g, std::move(d), std::move(nodes), opts);
}

Expected<std::unique_ptr<Executor>> Executor::create(const Graph& g, std::shared_ptr<Device> device,
                                                     std::vector<const Node*> nodes, const ExecutorOptions& opts) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->device_ = std::move(device);
  Device& dev = *ex->device_;
  ASSIGN_OR_RETURN(ex->stream_, dev.create_stream());
  ex->settings_ = opts.settings;
  ex->direct_ = dev.host_memory() && !opts.settings.separate_host;
  ex->adopt_.assign(g.values().size(), 0);
  for (const Value* v : opts.adopt)
    if (v && static_cast<size_t>(v->id) < ex->adopt_.size()) ex->adopt_[v->id] = 1;
  if (nodes.empty())
    for (auto& n : g.nodes()) nodes.push_back(n.get());
  if (opts.plan_memory) {
    ex->plan_ = plan_memory(g, nodes, opts.keep, opts.outside_reads, opts.settings.reshape_alias);
  } else {
    ex->plan_.offset.assign(g.values().size(), MemoryPlan::kOwn);
    ex->plan_.first.assign(g.values().size(), -1);
    ex->plan_.last.assign(g.values().size(), -1);
    ex->plan_.alias_of.assign(g.values().size(), -1);
  }
  // An arena that cannot be had is named by its largest value.
  auto arena_what = [&]() {
    const Value* big = nullptr;
    for (auto& v : g.values())
      if (ex->plan_.planned(v.get()) && (!big || v->bytes() > big->bytes())) big = v.get();
    std::string what = "the memory plan's arena";
    if (big) {
      char mb[32];
      std::snprintf(mb, sizeof mb, "%.1f MB", static_cast<double>(big->bytes()) / 1e6);
      what += " (its largest value '" + big->name + "' " + dims_str(big->dims) + " " + dtype_name(big->dtype) + ", " + mb + ")";
    }
    return what;
  };
  if (ex->plan_.arena_bytes) {
    if (ex->direct_) {
      void* a = std::aligned_alloc(kPlanAlignment, ex->plan_.arena_bytes);  // a multiple of the alignment
      if (!a) return internal_error(out_of_memory_message(arena_what(), ex->plan_.arena_bytes));
      std::memset(a, 0, ex->plan_.arena_bytes);
      ex->arena_ = a;
    } else {
      auto a = dev.allocate(ex->plan_.arena_bytes, ex->stream_);
      if (!a) return internal_error(out_of_memory_message(arena_what(), ex->plan_.arena_bytes) + ": " +
                                    a.status().message());
      ex->arena_ = *a;
    }
  }
  const size_t nv = g.values().size();
  ex->bufs_.resize(ex->direct_ ? nv : 0);
  ex->dptr_.assign(ex->direct_ ? 0 : nv, nullptr);
  ex->mirror_.resize(ex->direct_ ? 0 : nv);
  // Buffers only for what this node list touches, the caller's keep values, the data values and
  // the per-step scalars: a pipeline stage does not hold the other stages' tensors.
  std::vector<char> used(nv, 0);
  for (const Node* n : nodes) {
    for (const Value* v : n->inputs)
      if (v) used[v->id] = 1;
    for (const Value* v : n->outputs)
      if (v) used[v->id] = 1;
  }
  for (const Value* v : opts.keep) used[v->id] = 1;
  for (auto& v : g.values())
    if (v->kind == ValueKind::kInput || v->kind == ValueKind::kLabel || v->kind == ValueKind::kHyper) used[v->id] = 1;
  ex->allocated_.assign(nv, 0);
  ex->value_of_.assign(nv, nullptr);
  for (auto& v : g.values()) ex->value_of_[v->id] = v.get();
  for (auto& v : g.values()) {
    if (v->dtype == DType::kUndefined) continue;  // never computed (unused optional outputs)
    if (!used[v->id]) continue;
    ex->allocated_[v->id] = 1;
    if (ex->plan_.planned(v.get())) continue;
    RETURN_IF_ERROR(ex->allocate_value(v.get()));
  }
  // Weights get a version (parameters and constants with their own storage; see executor.h).
  ex->version_.assign(nv, 0);
  for (auto& v : g.values())
    if ((v->kind == ValueKind::kParameter || v->kind == ValueKind::kConstant) && !ex->plan_.planned(v.get()))
      ex->version_[v->id] = new_weight_version();
  ex->weight_cache_wanted_ = opts.weight_cache;
  for (const Node* n : nodes) {
    const DType dt = n->kernel_dtype();
    KernelFn fn = find_kernel(n->op_type, dev.kind(), dt);
    if (!fn)
      return unsupported(n->describe() + ": no " + std::string(device_kind_name(dev.kind())) + " kernel for " +
                         dtype_name(dt));
    Step s{n, fn, {}, {}, std::vector<uint64_t>(n->inputs.size(), 0)};
    // Updates with a multi-tensor kernel run as one launch where several follow each other.
    if (n->phase == Phase::kUpdate) s.group = find_group_kernel(n->op_type, dev.kind(), dt);
    s.on_host = dev.capture_graphs() && n->runs_on_host(dev.kind());  // read by graph captures only
    for (Value* v : n->inputs) s.inputs.push_back(v ? ex->view(v) : TensorView{});
    for (Value* v : n->outputs) s.outputs.push_back(v ? ex->view(v) : TensorView{});
    while (!s.outputs.empty() && !s.outputs.back().data) s.outputs.pop_back();  // unused optional outputs
    if (!n->outputs.empty() && ex->plan_.aliased(n->outputs[0])) {
      PT_CHECK(n->outputs[0]->producer == n && ex->plan_.alias_of[n->outputs[0]->id] == n->inputs.at(0)->id &&
               s.inputs[0].data == s.outputs[0].data)
          << n->describe() << ": an alias must share its input's bytes";
      s.alias = true;
    }
    ex->steps_.push_back(std::move(s));
  }
  if (opts.settings.cuda_graphs && dev.capture_graphs()) {
    ex->graphs_ = std::make_unique<GraphCache>();
    ex->graph_pool_ = dev.create_graph_pool();
  }
  return ex;
}

namespace {

// A value's initial data, or null: none, or taken by an executor that adopted it (an empty tensor).
const HostTensor* initial_data(const Value* v) {
  if (!v->data || v->data->dims() != v->dims) return nullptr;
  return v->bytes() == 0 || v->data->data() ? v->data.get() : nullptr;
}

}  // namespace

Status Executor::allocate_value(const Value* v) {
  auto out_of_memory = [&](const std::string& why) {
    return internal_error(out_of_memory_message("'" + v->name + "' (" + dims_str(v->dims) + " " + dtype_name(v->dtype) + ")",
                                                v->bytes()) + (why.empty() ? "" : ": " + why));
  };
  if (direct_) {
    try {
      // (Not `init ? *init : HostTensor(...)`: a const operand makes the zeros a const temporary,
      // which is copied, not moved: twice the value's bytes for a moment.)
      const HostTensor* init = initial_data(v);
      if (init && adopt_[v->id]) bufs_[v->id] = std::move(*v->data);
      else if (init) bufs_[v->id] = *init;
      else bufs_[v->id] = HostTensor(v->dtype, v->dims);
    } catch (const std::bad_alloc&) {
      return out_of_memory("");
    }
    return Status::ok();
  }
  auto p = device_->allocate(v->bytes(), stream_);
  if (!p) return out_of_memory(p.status().message());
  dptr_[v->id] = *p;
  if (const HostTensor* init = initial_data(v); init && v->bytes())
    RETURN_IF_ERROR(device_->to_device(dptr_[v->id], init->data(), v->bytes(), stream_));
  return Status::ok();
}

Executor::Allocated Executor::allocated_bytes() const {
  Allocated a;
  a.arena = plan_.arena_bytes;
  for (size_t id = 0; id < allocated_.size(); ++id) {
    if (!allocated_[id]) continue;
    const Value* v = value_of_[id];
    if (!v || plan_.planned(v)) continue;
    const size_t b = (v->bytes() + 63) / 64 * 64;
    if (v->data || v->kind == ValueKind::kParameter || v->kind == ValueKind::kState || v->kind == ValueKind::kConstant)
      a.params += b;
    else
      a.activations += b;
    if (!direct_ && !mirror_[id].empty()) a.host_copies += mirror_[id].bytes();
    if (id < parked_host_.size()) {  // pass slots (add_storages)
      const size_t slots = direct_ ? parked_host_[id].size() : parked_dev_[id].size();
      a.activations += slots * b;
    }
  }
  if (weight_cache_) a.weight_cache = weight_cache_->bytes();
  return a;
}

Status Executor::add_storages(const Value* v, int n) {
  PT_CHECK(!plan_.planned(v)) << "value '" << v->name << "' shares storage under the memory plan; keep it to give it storages";
  const size_t id = static_cast<size_t>(v->id);
  if (!allocated_.at(id)) {
    RETURN_IF_ERROR(allocate_value(v));
    allocated_[id] = 1;
  }
  build_uses();
  for (int k = 0; k < n; ++k) {
    if (direct_) {
      try {
        parked_host_[id].emplace_back(v->dtype, v->dims);
      } catch (const std::bad_alloc&) {
        return internal_error(out_of_memory_message("a pass slot of '" + v->name + "'", v->bytes()));
      }
    } else {
      ASSIGN_OR_RETURN(void* p, device_->allocate(v->bytes(), stream_));
      parked_dev_[id].push_back(p);
    }
  }
  return Status::ok();
}

void Executor::build_uses() {
  if (!uses_.empty()) return;
  uses_.resize(value_of_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Node* node = steps_[i].node;
    for (size_t j = 0; j < node->inputs.size(); ++j)
      if (node->inputs[j]) uses_[node->inputs[j]->id].push_back({i, j, false});
    for (size_t j = 0; j < node->outputs.size(); ++j)
      if (node->outputs[j]) uses_[node->outputs[j]->id].push_back({i, j, true});
  }
  parked_host_.resize(value_of_.size());
  parked_dev_.resize(value_of_.size());
  selected_.assign(value_of_.size(), -1);
}

void Executor::repoint(size_t id) {
  void* data = direct_ ? bufs_[id].data() : dptr_[id];
  for (const Use& u : uses_[id]) (u.output ? steps_[u.step].outputs : steps_[u.step].inputs)[u.index].data = data;
}

bool Executor::exchange(const Value* v, HostTensor& t) {
  if (!direct_ || plan_.planned(v) || t.dtype() != v->dtype || t.dims() != v->dims || t.bytes() == 0) return false;
  const size_t id = static_cast<size_t>(v->id);
  if (!allocated_.at(id)) (void)host(v);
  if (bufs_[id].dtype() != t.dtype() || bufs_[id].dims() != t.dims()) return false;
  build_uses();
  std::swap(bufs_[id], t);
  bump(v);
  repoint(id);
  return true;
}

void Executor::swap_storage(size_t id, int k) {
  if (direct_) std::swap(bufs_[id], parked_host_[id].at(static_cast<size_t>(k)));
  else std::swap(dptr_[id], parked_dev_[id].at(static_cast<size_t>(k)));
}

Status Executor::select_storage(const Value* v, int k) {
  const size_t id = static_cast<size_t>(v->id);
  PT_CHECK(id < selected_.size()) << "value '" << v->name << "' has no storages (add_storages)";
  const int n = static_cast<int>(direct_ ? parked_host_[id].size() : parked_dev_[id].size());
  PT_CHECK(k >= -1 && k < n) << "value '" << v->name << "': storage " << k << " of " << n;
  if (selected_[id] == k) return Status::ok();
  if (selected_[id] >= 0) swap_storage(id, selected_[id]);  // its own back in place
  if (k >= 0) swap_storage(id, k);
  selected_[id] = k;
  bump(v);  // a weight's other storage holds other data: cached reorders of the last one do not apply
  repoint(id);
  return Status::ok();
}

int Executor::selected_storage(const Value* v) const {
  const size_t id = static_cast<size_t>(v->id);
  return id < selected_.size() ? selected_[id] : -1;
}

TensorView Executor::storage_view(const Value* v, int k) const {
  const int sel = selected_storage(v);
  if (k == sel) return view(v);
  // select_storage swaps: the selected storage's place holds the value's own one.
  const size_t id = static_cast<size_t>(v->id), slot = static_cast<size_t>(k < 0 ? sel : k);
  if (direct_) return parked_host_.at(id).at(slot).view();
  return TensorView{parked_dev_.at(id).at(slot), v->dtype, v->dims};
}

Executor::~Executor() {
  if (!device_) return;
  (void)device_->synchronize(stream_);
  graphs_.reset();  // the graphs first, then the scratch they were captured with
  if (graph_pool_) device_->release_graph_pool(graph_pool_);
  for (void* p : dptr_) device_->deallocate(p);
  for (auto& ps : parked_dev_)
    for (void* p : ps) device_->deallocate(p);
  if (direct_) std::free(arena_);
  else device_->deallocate(arena_);
  device_->destroy_stream(stream_);
}

HostTensor& Executor::tensor(const Value* v) {
  PT_CHECK(direct_) << "value '" << v->name << "': tensor() is for host-memory executors; use host() with upload()/download()";
  return host(v);
}

const HostTensor& Executor::tensor(const Value* v) const {
  PT_CHECK(direct_) << "value '" << v->name << "': tensor() is for host-memory executors; use host() with upload()/download()";
  return host(v);
}

HostTensor& Executor::host(const Value* v) {
  PT_CHECK(!plan_.planned(v)) << "value '" << v->name
                              << "' shares storage under the memory plan; pass it in ExecutorOptions::keep to read it";
  bump(v);
  if (!allocated_.at(v->id)) {  // not read by these nodes: its storage exists from the first request on
    Status st = allocate_value(v);
    PT_CHECK(st.is_ok()) << "value '" << v->name << "': " << st.message();
    allocated_[v->id] = 1;
  }
  if (direct_) return bufs_.at(v->id);
  HostTensor& m = mirror_.at(v->id);
  if (m.empty()) {
    if (const HostTensor* init = initial_data(v)) m = *init;
    else m = HostTensor(v->dtype, v->dims);
  }
  return m;
}

const HostTensor& Executor::host(const Value* v) const {
  PT_CHECK(!plan_.planned(v)) << "value '" << v->name
                              << "' shares storage under the memory plan; pass it in ExecutorOptions::keep to read it";
  PT_CHECK(allocated_.at(v->id)) << "value '" << v->name
                                 << "' is not used by this executor's nodes; pass it in ExecutorOptions::keep";
  if (direct_) return bufs_.at(v->id);
  HostTensor& m = mirror_.at(v->id);
  if (m.empty()) {
    if (const HostTensor* init = initial_data(v)) m = *init;
    else m = HostTensor(v->dtype, v->dims);
  }
  return m;
}

Status Executor::upload(const Value* v) {
  bump(v);
  if (direct_) return Status::ok();
  const HostTensor& h = host(v);
  return device_->to_device(dptr_[v->id], h.data(), h.bytes(), stream_);
}

Status Executor::download(const Value* v) const {
  if (direct_) return Status::ok();
  const HostTensor& h = host(v);
  return device_->to_host(const_cast<void*>(h.data()), view(v).data, h.bytes(), stream_);
}

Status Executor::set_scalar(const Value* v, double x) {
  HostTensor& h = host(v);
  switch (h.dtype()) {
    case DType::kFloat64: h.as<double>()[0] = x; break;
    case DType::kFloat32: h.as<float>()[0] = static_cast<float>(x); break;
    case DType::kInt64: h.as<int64_t>()[0] = static_cast<int64_t>(x); break;
    default: return internal_error("value '" + v->name + "' is " + dtype_name(h.dtype()) + ", not a settable scalar");
  }
  return upload(v);
}

Expected<HostTensor> Executor::fetch(const Value* v) const {
  if (direct_) return host(v);
  PT_CHECK(allocated_.at(v->id)) << "value '" << v->name
                                 << "' is not used by this executor's nodes; pass it in ExecutorOptions::keep";
  HostTensor t(v->dtype, v->dims);
  RETURN_IF_ERROR(device_->to_host(t.data(), view(v).data, t.bytes(), stream_));
  return t;
}

Status Executor::copy_out(const Value* v, const TensorView& dst, const Device& other) const {
  const TensorView src = view(v);
  if (src.bytes() != dst.bytes())
    return internal_error("copy of '" + v->name + "' into a buffer of " + std::to_string(dst.bytes()) + " bytes");
  return device_->copy(dst.data, other, src.data, *device_, src.bytes(), stream_);
}

Status Executor::copy_in(const Value* v, const TensorView& src, const Device& other) {
  if (!plan_.planned(v) && !allocated_.at(v->id)) (void)host(v);
  const TensorView dst = view(v);  // the non-const view: a new version
  if (src.bytes() != dst.bytes())
    return internal_error("copy into '" + v->name + "' from a buffer of " + std::to_string(src.bytes()) + " bytes");
  return device_->copy(dst.data, *device_, src.data, other, dst.bytes(), stream_);
}

TensorView Executor::view(const Value* v) const {
  if (plan_.planned(v)) return TensorView{static_cast<char*>(arena_) + plan_.offset[v->id], v->dtype, v->dims};
  if (direct_) return bufs_.at(v->id).view();
  return TensorView{dptr_.at(v->id), v->dtype, v->dims};
}

TensorView Executor::view(const Value* v) {
  bump(v);
  return static_cast<const Executor*>(this)->view(v);
}

bool Executor::weight_cache_active() const {
  switch (settings_.weight_cache) {
    case WeightCachePolicy::kOff: return false;
    case WeightCachePolicy::kAll: return true;
    case WeightCachePolicy::kAuto: return weight_cache_wanted_;
  }
  return false;
}

Status Executor::call(Step& s) {
  KernelCall c{s.inputs, s.outputs, s.node->attrs, stream_};
  c.tf32 = settings_.tf32;
  if (weight_cache_active()) {
    if (!weight_cache_) weight_cache_ = std::make_unique<WeightCache>(settings_.weight_cache_checks);
    for (size_t i = 0; i < s.versions.size(); ++i) s.versions[i] = s.node->inputs[i] ? version_[s.node->inputs[i]->id] : 0;
    c.weight_cache = weight_cache_.get();
    c.versions = s.versions;
  }
  Status st = s.fn(c);
  if (s.node->phase == Phase::kUpdate)  // an update writes its inputs (weights, state) in place
    for (const Value* v : s.node->inputs)
      if (v) bump(v);
  return st;
}

Status Executor::call_group(size_t first, size_t last) {
  std::vector<KernelCall> calls;
  calls.reserve(last - first);
  for (size_t i = first; i < last; ++i) {
    Step& s = steps_[i];
    calls.push_back(KernelCall{s.inputs, s.outputs, s.node->attrs, stream_});
    calls.back().tf32 = settings_.tf32;
  }
  Status st = steps_[first].group(calls);
  for (size_t i = first; i < last; ++i)  // each update writes its inputs (weights, state) in place
    for (const Value* v : steps_[i].node->inputs)
      if (v) bump(v);
  if (!st.is_ok())
    return st.with_context(steps_[first].node->describe() + " .. " + steps_[last - 1].node->describe() + ": ");
  return Status::ok();
}

Status Executor::run(const std::function<bool(Phase)>& filter) {
  if (!filter) return run_nodes(nullptr);
  return run_nodes([&filter](const Node* n) { return filter(n->phase); });
}

Status Executor::run_nodes(const std::function<bool(const Node*)>& filter) {
  if (!device_->host_memory()) RETURN_IF_ERROR(device_->activate());
  run_.assign(steps_.size(), 0);
  bool any = false;
  for (size_t i = 0; i < steps_.size(); ++i)
    if (!steps_[i].alias && (!filter || filter(steps_[i].node))) {  // an alias: its bytes are its input's
      run_[i] = 1;
      any = true;
    }
  if (graphs_ && any) return run_graph(run_key());
  return run_marked();
}

Status Executor::run_marked() {
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (!run_[i]) continue;
    Step& s = steps_[i];
    if (s.group) {
      // The run of steps with the same multi-tensor kernel (and op) that follow this one.
      size_t j = i + 1;
      while (j < steps_.size() && run_[j] && steps_[j].group == s.group && steps_[j].node->op_type == s.node->op_type) ++j;
      if (j - i > 1) {
        RETURN_IF_ERROR(call_group(i, j));
        i = j - 1;
        continue;
      }
    }
    Status st = call(s);
    if (!st.is_ok()) return st.with_context(s.node->describe() + ": ");
  }
  return Status::ok();
}

uint64_t Executor::run_key() const {
  uint64_t h = kFnv1a64Offset;
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (!run_[i]) continue;
    h = fnv1a64(&i, sizeof i, h);
    for (const TensorView& t : steps_[i].inputs) h = fnv1a64(&t.data, sizeof t.data, h);
    for (const TensorView& t : steps_[i].outputs) h = fnv1a64(&t.data, sizeof t.data, h);
  }
  return h;
}

void Executor::bump_updates() {
  for (size_t i = 0; i < steps_.size(); ++i)
    if (run_[i] && steps_[i].node->phase == Phase::kUpdate)
      for (const Value* v : steps_[i].node->inputs)
        if (v) bump(v);
}

Status Executor::run_graph(uint64_t key) {
  switch (graphs_->next(key)) {
    case GraphCache::Action::kEager: return run_marked();
    case GraphCache::Action::kReplay: {
      RETURN_IF_ERROR(graphs_->graph(key)->launch(stream_));
      bump_updates();  // what the kernels' calls would have done
      return Status::ok();
    }
    case GraphCache::Action::kCapture: break;
  }
  for (size_t i = 0; i < steps_.size(); ++i)
    if (run_[i] && steps_[i].on_host) {
      graphs_->refuse(key, steps_[i].node->describe() + " runs on the host fallback");
      return run_marked();
    }
  // Nothing queued during the capture runs: a failed capture leaves the run to be done kernel by
  // kernel, as the following runs of this key will be.
  if (Status st = device_->begin_capture(stream_, graph_pool_); !st.is_ok()) {
    graphs_->refuse(key, st.message());
    return run_marked();
  }
  Status ran = run_marked();
  Expected<std::unique_ptr<DeviceGraph>> g = device_->end_capture(stream_);
  if (!ran.is_ok() || !g) {
    graphs_->refuse(key, !ran.is_ok() ? ran.message() : g.status().message());
    return run_marked();
  }
  graphs_->add(key, std::move(*g));
  return graphs_->graph(key)->launch(stream_);
}

Status Executor::run_timed(std::vector<double>* seconds) {
  using clock = std::chrono::steady_clock;
  if (!device_->host_memory()) RETURN_IF_ERROR(device_->activate());
  RETURN_IF_ERROR(device_->synchronize(stream_));
  for (Step& s : steps_) {
    if (s.alias) continue;  // not run (see run)
    const auto t0 = clock::now();
    Status st = call(s);
    if (!st.is_ok()) return st.with_context(s.node->describe() + ": ");
    RETURN_IF_ERROR(device_->synchronize(stream_));  // a device's kernels are timed to completion
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    if (static_cast<size_t>(s.node->id) >= seconds->size()) seconds->resize(s.node->id + 1, 0.0);
    (*seconds)[s.node->id] += dt;
  }
  return Status::ok();
}

}  // namespace pt
