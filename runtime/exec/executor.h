// Runs a node list of a Graph on one device (kernels/device.h), on a stream of its own. Every value
// gets its storage once, at creation; the kernel of every node is resolved once; a step then only
// queues kernels (no allocation). With a memory plan, values whose lifetimes in the node order do
// not overlap share one arena.
//
// Host access. On the CPU the kernels' buffers are host tensors: tensor(v) / host(v) is the buffer
// itself and upload / download do nothing. On a device (CUDA), host(v) is a separate host copy:
// write it and upload(v) to change the value, download(v) to refresh it. The runtime uses only
// host / upload / download / fetch / copy_in / copy_out, so it drives both; ExecSettings::
// separate_host gives CPU executors separate host copies too, which is how the tests check,
// without a GPU, that the runtime transfers what it must.
//
// Weight versions. Every weight (a parameter or constant that is not planned) has a version, a
// number no buffer had before (kernels/weight_cache.h). Every non-const access to a value gives
// it a new version: host(), tensor(), upload(), copy_in(), set_scalar() and the non-const view(),
// and every update node (Phase::kUpdate, which writes its inputs in place) its inputs, after it
// ran. The const accessors (a const Executor&) are for reading only. So a writer cannot skip the
// bump unless it keeps a pointer from an earlier access and writes through it after a later run:
// don't. With the weight cache on, kernels get the versions of their inputs and the executor's
// WeightCache, and keep converted weights (oneDNN's layouts) while the version stays.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "importer/ir.h"
#include "kernels/device.h"
#include "kernels/registry.h"
#include "kernels/weight_cache.h"
#include "runtime/exec/graph_cache.h"

namespace pt {

// Where each value of a node list lives under a memory plan. A value is planned (shares the
// arena) when a node of the list computes it, every consumer is in the list, and it is none of:
// a model input or output, the graph's loss, a value with initial data (parameters, constants,
// state), or one of the caller's `keep` values. Its lifetime is [position of its producer,
// position of its last consumer] in the list, both ends included, so a node's output never shares
// storage with its inputs. Two planned values whose lifetimes overlap never overlap in the arena.
//
// The one exception, aliases: a pure byte copy (Identity, Reshape, Flatten, Squeeze, Unsqueeze)
// whose data input x and output y are both planned and of the same byte size makes y an alias of
// x (alias_of[y] = x): the same offset, and the executor does not run the node. Aliases chain and
// branch (x -> y -> z, x -> y1 and x -> y2): such a group is placed once, as one value whose
// lifetime is the union of its members' and whose size is theirs. Sharing is safe because the
// group's bytes are written once, by the producer of its root (the member that is no alias), and
// only read afterwards (only update nodes write inputs in place, and they write weights and state,
// which are never planned). A value that is not planned never aliases: its node copies.
// ExecSettings::reshape_alias false (--reshape-alias off) plans without aliases.
//
// Counts: planned_values counts every planned value, aliases included (they live in the arena);
// planned_bytes counts each group's bytes once (an alias takes no bytes of its own); the bytes the
// aliases would take as values of their own are aliased_bytes, so that planned_bytes +
// aliased_bytes is what the same plan without aliases would report as planned_bytes.
struct MemoryPlan {
  static constexpr int64_t kOwn = -1;
  std::vector<int64_t> offset;  // [value id]: byte offset into the arena, or kOwn (own buffer)
  std::vector<int> first, last;  // [value id]: lifetime in list positions (planned values only)
  std::vector<int> alias_of;     // [value id]: id of the value an alias shares bytes with, or -1
  size_t arena_bytes = 0;       // the planned peak: size of the shared arena
  size_t planned_bytes = 0;     // what the planned values would take without sharing (aliases: 0)
  size_t planned_values = 0;    // planned values, aliases included
  size_t aliased_values = 0;    // aliases: their nodes do not run
  size_t aliased_bytes = 0;     // what the aliases would take as values of their own

  bool planned(const Value* v) const {
    return v && static_cast<size_t>(v->id) < offset.size() && offset[v->id] != kOwn;
  }
  // True when v is an alias (its producer is a copy the executor skips).
  bool aliased(const Value* v) const {
    return v && static_cast<size_t>(v->id) < alias_of.size() && alias_of[v->id] >= 0;
  }
};

// Offsets are multiples of kPlanAlignment (bytes), the arena's alignment.
constexpr size_t kPlanAlignment = 64;

// The plan for `nodes` (in run order) of `g`; `keep`: values the caller reads or writes between
// runs (values saved for a later backward pass, sent to another stage, read after the step).
// `outside_reads` false: nodes outside the list never run while this list does (an evaluator of
// the forward nodes), so a value read only by them is planned like any other.
// `alias`: make aliases of copies (see MemoryPlan).
MemoryPlan plan_memory(const Graph& g, const std::vector<const Node*>& nodes, const std::vector<const Value*>& keep,
                       bool outside_reads = true, bool alias = true);
// What a run chooses for every executor it makes: one value, carried unchanged from the training
// spec (tools/training_spec.h) through PipelineOptions / Trainer::Options into ExecutorOptions.
struct ExecSettings {
  // Plans make aliases of copies (MemoryPlan; --reshape-alias).
  bool reshape_alias = true;
  // CUDA matrix products and convolutions of float32 may use TF32 tensor cores (--precision tf32;
  // KernelCall::tf32). CPU executors never see it: the CLI refuses tf32 on CPU stages.
  bool tf32 = false;
  // Which executors keep converted weights (--weight-cache; kernels/weight_cache.h).
  WeightCachePolicy weight_cache = WeightCachePolicy::kAuto;
  // Test hooks (the CLI's hidden --test-* flags): every cache hit re-converts and compares; hits
  // ignore the version (a broken cache, to show the tests catch one).
  WeightCache::Checks weight_cache_checks;
  // Host copies separate from the kernels' buffers even on the CPU (tests of the transfers).
  bool separate_host = false;
  // On a device that captures graphs (CUDA), runs are captured once and replayed as CUDA graphs
  // (runtime/exec/graph_cache.h; --no-cuda-graphs turns it off). Bit for bit the same kernels.
  bool cuda_graphs = true;
};

struct ExecutorOptions {
  bool plan_memory = false;         // share storage between values with disjoint lifetimes
  std::vector<const Value*> keep;   // never shared (see plan_memory)
  bool outside_reads = true;        // see plan_memory
  // Keep weights converted to the kernels' layouts across runs while their version stays (set
  // where one version serves several runs: GPipe's micro-batches, validation). Subject to
  // settings.weight_cache: kOff turns it off, kAll on.
  bool weight_cache = false;
  // Values whose initial data (Value::data) this executor takes instead of copying, on the CPU
  // without separate host copies: the buffer moves out of the graph, which keeps an empty tensor
  // (the caller releases it; a later executor of the same graph treats it as no data and starts
  // the value at zero). So that a trainer holds its weights once, not beside the imported ones.
  std::vector<const Value*> adopt = {};
  ExecSettings settings = {};
};

class Executor {
 public:
  // Prepares `nodes` (a subset of g's nodes, in order; all nodes when empty) on `device`.
  // (CUDA: device 0.)
  static Expected<std::unique_ptr<Executor>> create(const Graph& g, DeviceKind device,
                                                    std::vector<const Node*> nodes = {},
                                                    const ExecutorOptions& opts = {});
  static Expected<std::unique_ptr<Executor>> create(const Graph& g, std::shared_ptr<Device> device,
                                                    std::vector<const Node*> nodes = {},
                                                    const ExecutorOptions& opts = {});
  ~Executor();  // waits for the executor's stream
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const std::shared_ptr<Device>& device() const { return device_; }
  void* stream() const { return stream_; }  // kernels and copies of this executor (null on the CPU)
  // True when host(v) is the kernels' buffer itself (the CPU without separate_host).
  bool direct() const { return direct_; }

  // The kernels' buffer of a value that is not planned, for CPU-only callers (tests, tools): aborts
  // unless direct(), and for a planned value (pass it in ExecutorOptions::keep to read it between
  // runs). Parameters, constants and state start from Value::data.
  HostTensor& tensor(const Value* v);
  const HostTensor& tensor(const Value* v) const;
  // The host copy of a value that is not planned (the buffer itself when direct()): after writing
  // it, upload(v); before reading what kernels wrote, download(v). Values these nodes do not use
  // get storage on first use.
  HostTensor& host(const Value* v);
  const HostTensor& host(const Value* v) const;
  Status upload(const Value* v);
  Status download(const Value* v) const;
  // Sets a scalar value (float, double or int64) in the host copy and on the device.
  Status set_scalar(const Value* v, double x);
  // A copy of the value's current bytes (waits for the stream).
  Expected<HostTensor> fetch(const Value* v) const;
  // Device-side copies on this executor's stream: the value into / from a buffer of the value's
  // size on `other` (this executor's device or a peer).
  Status copy_out(const Value* v, const TensorView& dst, const Device& other) const;
  Status copy_in(const Value* v, const TensorView& src, const Device& other);
  // The storage of any value (planned ones: valid only until a later node reuses it). The const
  // overload is for reading; the non-const one gives the value a new version (see the top).
  TensorView view(const Value* v) const;
  TensorView view(const Value* v);
  // The weight's current version; 0 for a value that is not a versioned weight.
  uint64_t version(const Value* v) const { return version_.at(v->id); }
  // Turns the weight cache on or off for the following runs (ExecutorOptions::weight_cache);
  // the copies it holds stay (and count in allocated_bytes) until the executor goes.
  void set_weight_cache(bool on) { weight_cache_wanted_ = on; }
  // True when the next run uses the cache (asked for, or ExecSettings::weight_cache kAll, and not kOff).
  bool weight_cache_active() const;
  // The cache (nullptr until a run used it).
  const WeightCache* weight_cache() const { return weight_cache_.get(); }

  // Storages of a value beside its own (a kept value, not planned): add_storages(v, n) allocates n
  // more; select_storage(v, k) makes storage k (0 <= k < n; -1: its own) the one the kernels read
  // and write and host, view, upload, copy_in and copy_out see, until the next selection. A
  // pipeline stage selects the slot of the pass it runs for the activations it keeps between
  // passes, so that they stay where the forward wrote them instead of being copied aside and back.
  // Selecting is O(uses of v); the data of every storage stays as it was.
  // Selecting another storage of a weight gives it a new version (the weight cache's key).
  Status add_storages(const Value* v, int n);
  Status select_storage(const Value* v, int k);
  // The storage selected for v (-1: its own, also for a value without storages).
  int selected_storage(const Value* v) const;
  // Storage k of v (-1: its own) whichever is selected; reading or writing it does not change v's
  // version (select it, or write through the non-const view(), for that).
  TensorView storage_view(const Value* v, int k) const;
  // Trades the storage v has now (the selected one) for `t`, a host tensor of v's type and shape:
  // the kernels and views see t's bytes from then on (a new version), and t holds what was v's
  // storage. How a stage takes a message out of a channel, or hands one over, without copying it.
  // False, with nothing done, where the storage cannot be traded: a planned value (the arena),
  // separate host copies or a device's memory, another type or shape.
  bool exchange(const Value* v, HostTensor& t);

  // Runs the prepared nodes whose phase passes `filter` (all when null), in order. Aliases' nodes
  // (MemoryPlan::alias_of) never run: their output is their input's bytes. With graphs on
  // (ExecSettings::cuda_graphs, on a device that captures them), a run whose nodes and pointers
  // were seen before is captured as a graph once and replayed from then on (graph_cache.h): the
  // same kernels on the same bytes, so the results are those of a run kernel by kernel.
  Status run(const std::function<bool(Phase)>& filter = nullptr);
  // The same, for the nodes `filter` passes (a zero-bubble stage runs its backward in two parts).
  Status run_nodes(const std::function<bool(const Node*)>& filter);
  // Runs every prepared node once (aliases' nodes not), adding each node's wall time (seconds) to
  // seconds[node->id].
  Status run_timed(std::vector<double>* seconds);
  size_t node_count() const { return steps_.size(); }
  // What the graphs did so far (all zero when graphs are off or the device has none).
  GraphStats graph_stats() const { return graphs_ ? graphs_->stats() : GraphStats{}; }
  bool graphs_on() const { return graphs_ != nullptr; }
  // The memory plan (all values kOwn when created without one).
  const MemoryPlan& plan() const { return plan_; }
  // Bytes this executor holds now: its own buffers (host copies included) and the arena.
  struct Allocated {
    size_t arena = 0;
    size_t params = 0;       // parameters, optimizer state, constants (values with initial data)
    size_t activations = 0;  // unplanned activations, gradients, inputs, labels, scalars
    size_t host_copies = 0;  // separate host copies (CUDA, separate_host)
    size_t weight_cache = 0;  // weights kept in the kernels' layouts (ExecutorOptions::weight_cache)
    size_t total() const { return arena + params + activations + host_copies + weight_cache; }
  };
  Allocated allocated_bytes() const;

 private:
  struct Step {
    const Node* node;
    KernelFn fn;
    std::vector<TensorView> inputs;
    std::vector<TensorView> outputs;
    std::vector<uint64_t> versions;  // of the inputs, filled before each call with the cache on
    bool alias = false;              // the output aliases the input under the plan: not run
    KernelGroupFn group = nullptr;   // the op's multi-tensor kernel on this device, where it has one
    bool on_host = false;            // the kernel is the host fallback (synchronises: never in a graph)
  };
  Executor() = default;
  Status allocate_value(const Value* v);  // the value's own storage (not planned)
  Status call(Step& s);                  // one kernel call, with versions and the bumps of an update
  // steps_[first, last): consecutive runs of one op with a multi-tensor kernel, in one call of it.
  Status call_group(size_t first, size_t last);
  // Runs the steps marked in run_ (kernel by kernel), and the graph paths around it.
  Status run_marked();
  uint64_t run_key() const;           // the key of the marked run (graph_cache.h)
  Status run_graph(uint64_t key);     // capture (first time) or replay the marked run
  void bump_updates();                // the version bumps of the marked run's updates
  void bump(const Value* v) {
    if (version_[v->id]) version_[v->id] = new_weight_version();
  }
  std::shared_ptr<Device> device_;
  void* stream_ = nullptr;
  bool direct_ = true;
  std::vector<HostTensor> bufs_;         // direct: [value id] the kernels' buffers; empty for planned values
  std::vector<void*> dptr_;              // otherwise: [value id] device buffers (null for planned values)
  mutable std::vector<HostTensor> mirror_;  // otherwise: [value id] host copies, made on first use
  // [value id]: has storage (used by the node list, kept, or asked for through host() since).
  std::vector<char> allocated_;
  std::vector<char> adopt_;  // [value id]: take the initial data (ExecutorOptions::adopt)
  std::vector<const Value*> value_of_;   // [value id]
  void* arena_ = nullptr;                // aligned_alloc'ed (direct) or from the device
  MemoryPlan plan_;
  std::vector<Step> steps_;
  std::vector<uint64_t> version_;        // [value id]: the weight's version, 0 for other values
  // add_storages: [value id] the storages not selected now (storage k's place holds the value's
  // own while k is selected), which is selected (-1: its own), and where the steps hold its views.
  std::vector<std::vector<HostTensor>> parked_host_;  // direct
  std::vector<std::vector<void*>> parked_dev_;        // otherwise
  std::vector<int> selected_;
  struct Use {
    size_t step;
    size_t index;
    bool output;
  };
  std::vector<std::vector<Use>> uses_;  // built by the first add_storages or exchange (build_uses)
  void build_uses();
  void swap_storage(size_t id, int k);
  void repoint(size_t id);  // the steps' views of value id at its storage now
  bool weight_cache_wanted_ = false;
  ExecSettings settings_;
  std::unique_ptr<WeightCache> weight_cache_;
  std::vector<char> run_;                 // [step]: part of the current run
  std::unique_ptr<GraphCache> graphs_;    // with graphs on
  uint64_t graph_pool_ = 0;               // the device's private pool of this executor's graphs
};

}  // namespace pt
