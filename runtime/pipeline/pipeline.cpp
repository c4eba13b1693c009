// The pipelined trainer: splits the training graph into stage workers by the plan, wires the
// channels for activations (downstream) and gradients (upstream), runs one thread per stage and
// coordinates metrics, validation and the trace.
#include "runtime/pipeline/pipeline.h"

#include "runtime/dist/cluster.h"
#include "runtime/report/curves.h"
#include "runtime/report/progress.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "partitioner/partition.h"
#include "runtime/exec/optimizer.h"
#include "runtime/pipeline/stage.h"
#include "runtime/loop/rank_coordinator.h"
#include "runtime/loop/stage_set.h"
#include "runtime/loop/training_loop.h"
#include "runtime/pipeline/worker_threads.h"

namespace pt {

int PipelineTrainer::Impl::rank() const { return opts.cluster ? opts.cluster->rank() : 0; }

std::vector<int> PipelineTrainer::Impl::stages_of_device(int d) const {
  std::vector<int> out;
  for (int k = 0; k < static_cast<int>(stages.size()); ++k)
    if (device_of(k) == d) out.push_back(k);
  return out;
}

std::vector<Stage*> PipelineTrainer::Impl::local_stages() const {
  std::vector<Stage*> out;
  for (auto& st : stages)
    if (local(st->index)) out.push_back(st.get());
  for (auto& rep : more_replicas)
    for (auto& st : rep)
      if (local(st->index)) out.push_back(st.get());
  return out;
}

namespace {

// What a pipeline cannot be built for, before anything is made: inputs without one batch
// dimension, a plan without stages or layout, options the schedule does not take.
Status check_request(const Graph& g, const Plan& plan, const PipelineOptions& opts) {
  if (g.inputs.empty()) return unsupported("training needs a model with a data input; this one has none");
  for (const Value* in : g.inputs)
    if (in->dims.empty() || in->dims[0] != g.inputs[0]->dims.at(0))
      return unsupported("the model's data inputs do not share one batch dimension ('" + in->name + "' is " +
                         dims_str(in->dims) + ")");
  if (plan.stages.empty()) return invalid_input("the plan has no stages");
  if (opts.micro_batches < 1) return invalid_input("--micro-batches must be at least 1");
  if (!micro_batched(opts.schedule, opts.weights) && opts.micro_batches != 1)
    return invalid_input("--micro-batches applies to synchronous schedules (gpipe, zb-h1, 1f1b with --weights sync) and 2bw only");
  if (two_bw_family(opts.weights)) {
    if (opts.schedule != Schedule::k1F1B) return invalid_input("--weights 2bw runs the 1f1b schedule");
    if (opts.micro_batches < static_cast<int>(plan.stages.size()))
      return invalid_input("--weights 2bw: --micro-batches " + std::to_string(opts.micro_batches) + " is fewer than the " +
                           std::to_string(plan.stages.size()) + " stages; two weight versions need at least one micro-batch per stage");
  }
  const int V = std::max(1, opts.virtual_stages);
  const bool chunked = opts.schedule == Schedule::kInterleaved || opts.schedule == Schedule::kZBV;
  if (V > 1 || chunked) {
    if (!chunked) return invalid_input("--virtual-stages applies to --schedule interleaved only");
    if (opts.schedule == Schedule::kZBV && (V != 2 || plan.stages.size() < 4))
      return invalid_input("--schedule zbv runs 2 virtual stages on each of at least 2 stages; the plan has " +
                           std::to_string(plan.stages.size()) + " in " + std::to_string(V) + " per stage");
    if (plan.virtual_stages != V || plan.stages.size() % V != 0)
      return invalid_input("the plan has " + std::to_string(plan.stages.size()) + " stages in " +
                           std::to_string(plan.virtual_stages) + " virtual stages per device; training was asked for " +
                           std::to_string(V));
    if (const std::string why = interleaved_error(static_cast<int>(plan.stages.size()) / V, V, opts.micro_batches);
        opts.schedule == Schedule::kInterleaved && !why.empty())
      return invalid_input(why);
  }
  if (opts.program) {
    if (opts.program->virtual_stages() != static_cast<int>(plan.stages.size()))
      return invalid_input(opts.program->name + ": a schedule of " + std::to_string(opts.program->virtual_stages()) +
                           " stages; the plan has " + std::to_string(plan.stages.size()));
    if (opts.program->chunks != V)
      return invalid_input(opts.program->name + ": a schedule of " + std::to_string(opts.program->chunks) +
                           " virtual stages per stage; --virtual-stages is " + std::to_string(V));
    if (!opts.program->synchronous || !synchronous(opts.schedule, opts.weights))
      return invalid_input(opts.program->name + ": schedule files hold synchronous schedules (no warmup rows, no +offsets), run with --weights sync");
    if (opts.program->micro_batches != opts.micro_batches)
      return invalid_input(opts.program->name + ": a schedule of " + std::to_string(opts.program->micro_batches) +
                           " micro-batches; --micro-batches is " + std::to_string(opts.micro_batches));
  }
  // The plan's stage layout (partitioner/stage_layout.h) says who owns, keeps and sends what; a
  // plan training cannot run has none, and the reason is the partitioner's (so --plan-only refuses
  // what training would).
  if (!plan.layout_status.is_ok()) return plan.layout_status;
  if (!plan.layout.describes(plan))
    return internal_error("the plan's stage layout is not of its stages' nodes (call layout_plan after editing a plan)");
  if (!plan.layout.weights.empty() && synchronous(plan.schedule, plan.weights) != synchronous(opts.schedule, opts.weights))
    return invalid_input(std::string("the plan shares weights across stages for --schedule ") + schedule_name(plan.schedule) +
                         "; training was asked for " + schedule_name(opts.schedule));
  const int N = static_cast<int>(plan.stages.size()), R = opts.replicas;
  if (R < 1) return invalid_input("--replicas " + std::to_string(R) + ": must be at least 1");
  // A rank runs a device: one stage, or a device's virtual stages (interleaved, ZB-V).
  const int devices = N / std::max(1, opts.virtual_stages);
  if (opts.cluster && opts.cluster->size() != devices * R)
    return invalid_input("--gpus " + std::to_string(devices) + (R > 1 ? " x --replicas " + std::to_string(R) : "") +
                         ": the job has " + std::to_string(opts.cluster->size()) + " ranks; one rank runs one device" +
                         (R > 1 ? " of one replica" : "") + ", so --gpus" + (R > 1 ? " x --replicas" : "") +
                         " must equal the number of ranks");
  if (opts.cluster && R > 1 && g.inputs.size() > 1)
    return unsupported("--replicas " + std::to_string(R) + " under MPI: models with several data inputs are not supported yet ('" +
                       g.inputs[1]->name + "'); run the replicas in one process");
  return Status::ok();
}

// "stage k: first .. last (P parameters)" for each stage (Checkpoint::plan).
std::vector<std::string> stage_summaries(const Plan& plan) {
  std::vector<std::string> lines;
  for (const StagePlan& sp : plan.stages) {
    std::string first, last;
    for (const Node* n : sp.nodes)
      if (n->phase == Phase::kForward) {
        if (first.empty()) first = n->name;
        last = n->name;
      }
    int params = 0;
    for (const Node* n : sp.nodes) params += n->phase == Phase::kUpdate;
    lines.push_back("stage " + std::to_string(sp.index) + ": " + (first.empty() ? "(loss only)" : first + " .. " + last) +
                    " (" + std::to_string(params) + " parameters)");
  }
  return lines;
}

// The plan's rule for the update inside the backward (partition.h, stage_update_in_backward)
// must be this run's: a plan made for other options is refused.
Status check_update_in_backward(const StageLayout& layout, int stage, int N, const PipelineOptions& opts) {
  PartitionOptions po;
  po.update_in_backward = true;
  po.schedule = opts.schedule;
  po.weights = opts.weights;
  po.staleness = opts.staleness;
  po.micro_batches = opts.micro_batches;
  po.replicas = opts.replicas;
  bool shares = false;
  for (const WeightFlow& f : layout.weights) shares = shares || f.owner == stage || f.reader == stage;
  if (!stage_update_in_backward(stage, N, po) || shares)
    return internal_error("stage " + std::to_string(stage) +
                          ": the plan updates in the backward, which this run's schedule, weights or replicas do not allow");
  return Status::ok();
}

Status split_backward(const StageLayout& layout, Stage& st);

}  // namespace

PipelineTrainer::PipelineTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PipelineTrainer::~PipelineTrainer() = default;

// Stage ls of `replica`, described from the layout and the plan (no executor yet).
Expected<std::unique_ptr<Stage>> PipelineTrainer::Impl::describe_stage(const Plan& plan, const StageLayoutStage& ls,
                                                                       int replica) {
  const int N = static_cast<int>(plan.stages.size());
  auto st = std::make_unique<Stage>();
  st->index = ls.index;
  st->num_stages = N;
  st->replica = replica;
  st->opts = opts;
  if (replica > 0) st->opts.record_trace = false;  // the trace and the statistics are replica 0's
  st->nodes = ls.nodes;
  st->input = g.inputs[0];
  st->graph_more_inputs.assign(g.inputs.begin() + 1, g.inputs.end());
  st->labels = tg.loss.labels;
  st->lr = tg.lr;
  st->rng_step = g.rng_step;
  st->params = ls.params;
  st->grads = ls.grads;
  st->updates = ls.updates;
  st->opt_state = ls.opt_state;
  // --recompute (the plan decides per stage): only the stage's inputs are kept per pass.
  st->recompute = plan.stages.at(ls.index).recompute;
  st->update_in_backward = plan.stages.at(ls.index).update_in_backward;
  if (st->update_in_backward) RETURN_IF_ERROR(check_update_in_backward(plan.layout, ls.index, N, opts));
  st->saved = st->recompute ? ls.recompute_saved : ls.saved;
  st->state = ls.state;
  st->reads_input = ls.reads_input;
  st->reads_labels = ls.reads_labels;
  st->more_inputs = ls.more_inputs;
  for (const Node* n : ls.nodes)
    for (const Value* v : n->outputs)
      if (v && v == tg.loss.loss) st->loss = v;
  st->own_program = opts.program->chunk_program(ls.index);
  st->program = &st->own_program;
  if (opts.program->splits_backward()) RETURN_IF_ERROR(split_backward(plan.layout, *st));
  return st;
}

namespace {

// A zero-bubble stage's backward in two parts (importer/training.h, weight_gradient_nodes): the
// executor runs the forward, then I, then W (a topological order: I needs nothing of W), so that
// what W reads of the forward and of I is still whole when I ends and can be kept per pass.
Status split_backward(const StageLayout& layout, Stage& st) {
  if (st.update_in_backward) return internal_error("stage " + std::to_string(st.index) + ": a split backward cannot run the updates");
  std::vector<const Value*> sent;
  for (const ValueFlow& f : layout.gradients)
    if (f.from == st.index) sent.insert(sent.end(), f.values.begin(), f.values.end());
  const std::vector<const Node*> w = weight_gradient_nodes(st.nodes, sent);
  st.w_nodes = std::unordered_set<const Node*>(w.begin(), w.end());
  std::unordered_set<const Value*> by_w, state;
  for (const Node* n : w)
    for (const Value* v : n->outputs)
      if (v) by_w.insert(v);
  auto keeps = [](const Value* v) {
    return v && v->kind != ValueKind::kParameter && v->kind != ValueKind::kConstant && v->kind != ValueKind::kState &&
           v->kind != ValueKind::kHyper;
  };
  // What W reads of the saved activations it finds in the pass's slot of them, which a split stage
  // holds until W; the rest of what it reads is copied aside after I.
  const std::unordered_set<const Value*> saved(st.saved.begin(), st.saved.end());
  for (const Node* n : w)
    for (const Value* v : n->inputs)
      if (keeps(v) && !by_w.count(v) && !saved.count(v)) state.insert(v);
  for (const Value* g : st.grads)  // parameter gradients I computed (with an input gradient)
    if (!by_w.count(g)) state.insert(g);
  st.w_state.assign(state.begin(), state.end());
  std::sort(st.w_state.begin(), st.w_state.end(), [](const Value* a, const Value* b) { return a->id < b->id; });
  std::vector<const Node*> order, later, updates;
  for (const Node* n : st.nodes) {
    if (n->phase == Phase::kUpdate) updates.push_back(n);
    else if (st.w_nodes.count(n)) later.push_back(n);
    else order.push_back(n);
  }
  order.insert(order.end(), later.begin(), later.end());
  order.insert(order.end(), updates.begin(), updates.end());
  st.nodes = std::move(order);
  return Status::ok();
}

}  // namespace

// The executor of a stage this process runs, on its device: stage k of replica r on GPU r * N + k
// (wrapping around when --oversubscribe puts several stages on one), or this rank's under MPI.
Status PipelineTrainer::Impl::open_stage_executor(Stage& st, int N) {
  // Memory plan: the stage reads back its saved activations, gradients and loss between passes
  // (values sent to other stages are read outside its node list: kept by the plan). With the
  // update in the backward the gradients are transient: planned like any value.
  ExecutorOptions eo{true, std::vector<const Value*>(st.saved.begin(), st.saved.end())};
  eo.settings = opts.exec;
  if (!st.update_in_backward) eo.keep.insert(eo.keep.end(), st.grads.begin(), st.grads.end());
  if (st.loss) eo.keep.push_back(st.loss);
  // A split backward keeps W's state per pass in storages of its own (Stage::prepare): not planned.
  eo.keep.insert(eo.keep.end(), st.w_state.begin(), st.w_state.end());
  if (opts.adopt_initial_values && opts.replicas == 1) eo.adopt.assign(st.params.begin(), st.params.end());
  // GPipe's micro-batches read one weight version each: converted weights are kept for them.
  eo.weight_cache = micro_batched(opts.schedule, opts.weights) && opts.micro_batches > 1;
  std::shared_ptr<Device> dev;
  if (opts.device == DeviceKind::kCpu) {
    ASSIGN_OR_RETURN(dev, open_device(DeviceKind::kCpu));
  } else {
    const int gpus = std::max(1, cuda_device_count());
    // Virtual stages (interleaved, ZB-V) run on their device's GPU: slot replica x devices + device.
    const ScheduleIR& ir = *opts.program;
    const int slot = distributed() ? rank() : st.replica * static_cast<int>(ir.stages.size()) + ir.device_of(st.index);
    const int ordinal = opts.gpu_of_stage.empty() ? slot % gpus : opts.gpu_of_stage[slot % opts.gpu_of_stage.size()];
    ASSIGN_OR_RETURN(dev, open_device(opts.device, ordinal));
  }
  auto ex = Executor::create(g, dev, st.update_in_backward ? interleave_updates(st.nodes) : st.nodes, eo);
  if (!ex)
    return ex.status().with_context("stage " + std::to_string(st.index) +
                                    (st.replica > 0 ? " (replica " + std::to_string(st.replica) + ")" : "") + ": ");
  st.ex = std::move(*ex);
  return Status::ok();
}

// The stages of one replica of the pipeline, each with its executor where this process runs it.
Status PipelineTrainer::Impl::build_replica(const Plan& plan, int replica, std::vector<std::unique_ptr<Stage>>* out) {
  const int N = static_cast<int>(plan.stages.size());
  for (const StageLayoutStage& ls : plan.layout.stages) {
    ASSIGN_OR_RETURN(std::unique_ptr<Stage> st, describe_stage(plan, ls, replica));
    if (st->loss) loss_stage = ls.index;
    if (local(ls.index)) RETURN_IF_ERROR(open_stage_executor(*st, N));
    out->push_back(std::move(st));
  }
  return Status::ok();
}

// Both ends of a weight link: the owner's indices of the parameters it sends, the reader's link.
Status PipelineTrainer::Impl::attach_shared(std::vector<std::unique_ptr<Stage>>& of, const WeightFlow& f, Link* l) {
  if (local(f.owner)) {
    Stage& o = *of[f.owner];
    Stage::WeightLink w;
    w.link = l;
    w.reader = f.reader;
    w.backward = f.backward;
    for (const Value* v : f.values) {
      auto it = std::find(o.params.begin(), o.params.end(), v);
      if (it == o.params.end()) return internal_error("shared weight '" + v->name + "' is not updated by its owner stage");
      w.params.push_back(static_cast<size_t>(it - o.params.begin()));
    }
    o.weights_out.push_back(std::move(w));
  }
  if (local(f.reader)) (f.backward ? of[f.reader]->weights_bwd_in : of[f.reader]->weights_fwd_in).push_back(l);
  return Status::ok();
}

// One replica's own channels in this process (the replicas meet only where they average
// gradients): shared weights, activations downstream, gradients upstream.
Status PipelineTrainer::Impl::wire_replica(const StageLayout& layout, std::vector<std::unique_ptr<Stage>>& of, int capacity) {
  for (const WeightFlow& f : layout.weights) {
    ASSIGN_OR_RETURN(std::unique_ptr<Channel> ch, Channel::create(f.values, f.slots, of[f.reader]->ex->device()));
    channels.push_back(std::move(ch));
    RETURN_IF_ERROR(attach_shared(of, f, channels.back().get()));
  }
  auto wire = [&](const std::vector<ValueFlow>& flows, bool forward) -> Status {
    for (const ValueFlow& f : flows) {
      Stage& from = *of[f.from];
      Stage& to = *of[f.to];
      ASSIGN_OR_RETURN(std::unique_ptr<Channel> ch, Channel::create(f.values, capacity, to.ex->device()));
      ch->set_spin(std::chrono::microseconds(opts.handoff_spin_us));
      if (opts.trade_handoffs && from.ex->device()->host_memory() && to.ex->device()->host_memory())
        ch->trade(handed_over(from, layout, f.values), true);
      channels.push_back(std::move(ch));
      Link* c = channels.back().get();
      (forward ? from.fwd_out : from.bwd_out).push_back(c);
      (forward ? to.fwd_in : to.bwd_in).push_back(c);
    }
    return Status::ok();
  };
  RETURN_IF_ERROR(wire(layout.activations, true));
  return wire(layout.gradients, false);
}

// With replicas, one gradient reducer per stage: the ranks of one stage's replicas form a group
// under MPI; in one process the replicas' stages k share one reducer.
Status PipelineTrainer::Impl::attach_reducers(int N) {
  const int R = opts.replicas;
  if (R <= 1) return Status::ok();
  if (distributed()) {
    // One group per device (its replicas' ranks); the device's stages all-reduce through it in
    // their program's order, which every replica runs alike.
    RETURN_IF_ERROR(opts.cluster->split_groups(my_device()));
    reducers.push_back(make_rank_reducer(*opts.cluster, R));
    for (Stage* st : local_stages()) st->reducer = reducers.back().get();
    return Status::ok();
  }
  for (int k = 0; k < N; ++k) {
    reducers.push_back(std::make_unique<ReplicaReducer>(R));
    stages[k]->reducer = reducers.back().get();
    for (auto& rep : more_replicas) rep[k]->reducer = reducers.back().get();
  }
  return Status::ok();
}

// The whole forward on the device of stage 0 (the coordinator's own stage), for validation.
Status PipelineTrainer::Impl::make_evaluator() {
  std::vector<const Node*> fwd_nodes;
  for (auto& n : g.nodes())
    if (n->phase == Phase::kForward) fwd_nodes.push_back(n.get());
  // Activations share one arena: evaluation reads only the model output (and the loss).
  ExecutorOptions eo{true, {tg.loss.output}};
  eo.outside_reads = false;  // the backward nodes never run on the evaluator
  eo.weight_cache = true;    // every validation batch reads the same weights
  eo.settings = opts.exec;
  ASSIGN_OR_RETURN(eval, Executor::create(g, stages.at(0)->ex->device(), fwd_nodes, eo));
  return Status::ok();
}

Expected<std::unique_ptr<PipelineTrainer>> PipelineTrainer::create(const Graph& g, const TrainingGraph& tg,
                                                                   const Plan& plan, const PipelineOptions& opts) {
  RETURN_IF_ERROR(check_request(g, plan, opts));
  auto impl = std::make_unique<Impl>(g, tg);
  impl->opts = opts;
  if (!impl->opts.program) {
    const int V = std::max(1, opts.virtual_stages);
    impl->opts.program = std::make_shared<const ScheduleIR>(
        make_schedule(opts.schedule, opts.weights, static_cast<int>(plan.stages.size()) / V, opts.micro_batches, nullptr, V));
  }
  impl->plan_lines = stage_summaries(plan);
  impl->graph_batch = g.inputs[0]->dims.at(0);
  const int N = static_cast<int>(plan.stages.size());
  const StageLayout& layout = plan.layout;

  if (impl->opts.program->chunks > 1)
    for (int k = 0; k < N; ++k) impl->device_of_stage.push_back(impl->opts.program->device_of(k));
  RETURN_IF_ERROR(impl->build_replica(plan, 0, &impl->stages));
  if (impl->distributed())  // this rank's stages are its replica's
    for (Stage* st : impl->local_stages()) st->replica = impl->my_replica();
  for (int r = 1; r < opts.replicas && !impl->distributed(); ++r) {
    impl->more_replicas.emplace_back();
    RETURN_IF_ERROR(impl->build_replica(plan, r, &impl->more_replicas.back()));
  }
  if (impl->loss_stage < 0) return internal_error("no stage of the plan computes the loss");
  // Channels hold what is in flight between two stages at most: N - k mini-batches (asynchronous
  // 1F1B) or M micro-batches (synchronous schedules: a stage sends nothing of the next mini-batch
  // before its update, which waits for every backward of this one downstream).
  const int capacity = std::max(N, opts.micro_batches) + 1;
  if (impl->distributed()) {
    RETURN_IF_ERROR(impl->wire_ranks(layout, capacity));
    for (size_t i = 0; i < layout.weights.size(); ++i)
      if (impl->shared_links.at(i)) RETURN_IF_ERROR(impl->attach_shared(impl->stages, layout.weights[i], impl->shared_links[i]));
  } else {
    RETURN_IF_ERROR(impl->wire_replica(layout, impl->stages, capacity));
    for (auto& rep : impl->more_replicas) RETURN_IF_ERROR(impl->wire_replica(layout, rep, capacity));
  }
  RETURN_IF_ERROR(impl->attach_reducers(N));
  for (Stage* st : impl->local_stages()) RETURN_IF_ERROR(st->prepare());
  if (impl->coordinator()) RETURN_IF_ERROR(impl->make_evaluator());
  return std::unique_ptr<PipelineTrainer>(new PipelineTrainer(std::move(impl)));
}

namespace {

// A tensor for the const readers (parameters(), export): a device that cannot copy its memory
// back after training has failed beyond recovery.
HostTensor must(Expected<HostTensor> t, const std::string& name) {
  PT_CHECK(t.has_value()) << "reading '" << name << "' from the device: " << t.status().message();
  return std::move(t).value();
}

}  // namespace

int PipelineTrainer::num_stages() const { return static_cast<int>(impl_->stages.size()); }

int64_t PipelineTrainer::samples_per_step() const {
  return impl_->graph_batch * (micro_batched(impl_->opts.schedule, impl_->opts.weights) ? impl_->opts.micro_batches : 1) *
         impl_->opts.replicas;
}

int PipelineTrainer::replicas() const { return impl_->opts.replicas; }

std::map<std::string, HostTensor> PipelineTrainer::parameters() const {
  std::map<std::string, HostTensor> out;
  for (auto& st : impl_->stages)
    for (size_t i = 0; i < st->params.size(); ++i) {
      const std::string& name = st->params[i]->name;
      if (impl_->local(st->index)) out[name] = must(st->master(i), name);
      else if (auto it = impl_->remote_values.find(name); it != impl_->remote_values.end()) out[name] = it->second;
    }
  return out;
}

std::map<std::string, HostTensor> PipelineTrainer::trained_initializers() const {
  std::map<std::string, HostTensor> out = parameters();
  for (auto& st : impl_->stages)
    for (const Value* v : st->state) {
      if (impl_->local(st->index)) out[v->name] = must(st->ex->fetch(v), v->name);
      else if (auto it = impl_->remote_values.find(v->name); it != impl_->remote_values.end()) out[v->name] = it->second;
    }
  return out;
}

std::map<std::string, HostTensor> PipelineTrainer::take_trained_initializers() {
  impl_->eval.reset();  // a full copy of the weights on stage 0
  std::map<std::string, HostTensor> out;
  for (auto& st : impl_->stages) {
    const bool here = impl_->local(st->index);
    for (size_t i = 0; i < st->params.size(); ++i) {
      const std::string& name = st->params[i]->name;
      if (here) out[name] = must(st->take_master(i), name);
      else if (auto it = impl_->remote_values.find(name); it != impl_->remote_values.end()) out[name] = std::move(it->second);
    }
    for (const Value* v : st->state) {
      if (here) out[v->name] = must(st->ex->fetch(v), v->name);
      else if (auto it = impl_->remote_values.find(v->name); it != impl_->remote_values.end()) out[v->name] = std::move(it->second);
    }
  }
  return out;
}

namespace {

std::vector<std::string> names_of(const std::vector<const Value*>& vs) {
  std::vector<std::string> out;
  for (const Value* v : vs) out.push_back(v->name);
  return out;
}

}  // namespace

std::vector<PipelineTrainer::WiredLink> PipelineTrainer::wired_links() const {
  std::vector<WiredLink> out;
  for (auto& from : impl_->stages)
    for (auto& to : impl_->stages)
      for (const auto& [kind, outs, ins] : {std::tuple{"activations", &from->fwd_out, &to->fwd_in},
                                            std::tuple{"gradients", &from->bwd_out, &to->bwd_in}})
        for (Link* l : *outs)
          if (std::find(ins->begin(), ins->end(), l) != ins->end())
            out.push_back({kind, from->index, to->index, false, names_of(l->values())});
  for (auto& owner : impl_->stages)
    for (const Stage::WeightLink& w : owner->weights_out) {
      const Stage& reader = *impl_->stages.at(w.reader);
      const auto& ins = w.backward ? reader.weights_bwd_in : reader.weights_fwd_in;
      if (std::find(ins.begin(), ins.end(), w.link) == ins.end()) continue;
      std::vector<std::string> sent;  // what the owner sends: its parameters at w.params
      for (size_t i : w.params) sent.push_back(owner->params.at(i)->name);
      if (sent != names_of(w.link->values())) continue;  // a link that would mix up weights is not wired
      out.push_back({"weights", owner->index, w.reader, w.backward, sent});
    }
  return out;
}

std::vector<std::vector<std::string>> PipelineTrainer::stage_params() const {
  std::vector<std::vector<std::string>> out;
  for (auto& st : impl_->stages) out.push_back(names_of(st->params));
  return out;
}

std::vector<PassRecord> PipelineTrainer::trace() const {
  std::vector<PassRecord> out;
  for (auto& st : impl_->stages) {
    if (impl_->local(st->index)) out.insert(out.end(), st->trace.begin(), st->trace.end());
    for (const PassRecord& r : impl_->remote_trace)
      if (r.stage == st->index) out.push_back(r);
  }
  return out;
}

std::vector<StageStats> PipelineTrainer::stage_stats() const {
  std::vector<StageStats> out;
  for (auto& st : impl_->stages) {
    if (impl_->local(st->index)) out.push_back(st->stats);
    for (const StageStats& r : impl_->remote_stats)
      if (r.stage == st->index) out.push_back(r);
  }
  return out;
}

std::vector<int64_t> PipelineTrainer::stage_allocated_bytes() const {
  std::vector<int64_t> out(impl_->stages.size(), -1);
  for (auto& st : impl_->stages) {
    if (!impl_->local(st->index)) continue;
    out[st->index] = static_cast<int64_t>(st->ex->allocated_bytes().total() + st->held_bytes());
  }
  if (impl_->eval && !out.empty() && out[0] >= 0) out[0] += static_cast<int64_t>(impl_->eval->allocated_bytes().total());
  return out;
}

std::vector<GraphStats> PipelineTrainer::stage_graph_stats() const {
  std::vector<GraphStats> out;
  for (auto& st : impl_->stages) {
    if (!impl_->local(st->index) || !st->ex->graphs_on()) continue;
    if (out.size() <= static_cast<size_t>(st->index)) out.resize(st->index + 1);
    out[st->index] += st->ex->graph_stats();
  }
  return out;
}

std::vector<const MemoryPlan*> PipelineTrainer::stage_memory_plans() const {
  std::vector<const MemoryPlan*> out(impl_->stages.size(), nullptr);
  for (auto& st : impl_->stages)
    if (impl_->local(st->index)) out[st->index] = &st->ex->plan();
  return out;
}

Status PipelineTrainer::write_chrome_trace(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  const std::vector<PassRecord> all = trace();
  for (auto& st : impl_->stages) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", st->index},
                      {"args", {{"name", "stage " + std::to_string(st->index)}}}});
    for (const PassRecord& r : all) {
      if (r.stage != st->index) continue;
      char name[48];
      const char letter = r.part ? r.part : r.backward ? 'B' : 'F';
      if (micro_batched(impl_->opts.schedule, impl_->opts.weights))
        std::snprintf(name, sizeof name, "%c%lld.%d", letter, static_cast<long long>(r.mini_batch), r.micro_batch);
      else
        std::snprintf(name, sizeof name, "%c%lld", letter, static_cast<long long>(r.mini_batch));
      events.push_back({{"name", name},
                        {"cat", r.backward ? "backward" : "forward"},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", r.stage},
                        {"ts", 1e3 * r.start_ms},
                        {"dur", 1e3 * (r.end_ms - r.start_ms)},
                        {"args", {{"mini_batch", r.mini_batch}, {"micro_batch", r.micro_batch},
                                  {"version", r.version}, {"staleness", r.staleness},
                                  {"waiting_ms", r.run_ms - r.start_ms}}}});
    }
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  const std::string partial = path + ".partial";
  {
    std::ofstream f(partial, std::ios::trunc);
    if (!f) return invalid_input(path + ": cannot be written");
    f << doc.dump(1) << "\n";
    if (!f) return invalid_input(path + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) return invalid_input(path + ": rename failed: " + ec.message());
  return Status::ok();
}

Status PipelineTrainer::Impl::load_eval_weights() {
  for (auto& st : stages) {
    if (!local(st->index)) {
      for (const Value* v : st->params) eval->host(v) = remote_values.at(v->name);
      for (const Value* v : st->state) eval->host(v) = remote_values.at(v->name);
      continue;
    }
    for (size_t i = 0; i < st->params.size(); ++i) {
      ASSIGN_OR_RETURN(eval->host(st->params[i]), st->master(i));
    }
    for (const Value* v : st->state) {
      ASSIGN_OR_RETURN(eval->host(v), st->ex->fetch(v));
    }
  }
  return Status::ok();
}

Expected<EvalResult> PipelineTrainer::Impl::run_eval(const Dataset& d) {
  // The weights were written to the evaluator's host copies (load_eval_weights, snapshots).
  for (auto& st : stages) {
    for (const Value* v : st->params) RETURN_IF_ERROR(eval->upload(v));
    for (const Value* v : st->state) RETURN_IF_ERROR(eval->upload(v));
  }
  if (g.rng_step) RETURN_IF_ERROR(eval->set_scalar(g.rng_step, -1));
  if (d.size() > 0) RETURN_IF_ERROR(check_dataset_inputs(d, g));
  std::vector<HostTensor*> more;
  for (size_t k = 1; k < g.inputs.size(); ++k) more.push_back(&eval->host(g.inputs[k]));
  return evaluate_dataset(d, tg, &eval->host(g.inputs[0]), &eval->host(tg.loss.labels), eval->host(tg.loss.output),
                          [this] {
                            RETURN_IF_ERROR(eval->upload(g.inputs[0]));
                            for (size_t k = 1; k < g.inputs.size(); ++k) RETURN_IF_ERROR(eval->upload(g.inputs[k]));
                            RETURN_IF_ERROR(eval->upload(tg.loss.labels));
                            RETURN_IF_ERROR(eval->run());
                            return eval->download(tg.loss.output);
                          },
                          more);
}

Expected<EvalResult> PipelineTrainer::evaluate(const Dataset& d) {
  if (!impl_->eval) return internal_error("evaluate() runs on rank 0 only");
  RETURN_IF_ERROR(impl_->load_eval_weights());
  return impl_->run_eval(d);
}

std::string PipelineTrainer::Impl::describe() const {
  const int N = static_cast<int>(stages.size());
  const std::string reps = opts.replicas > 1 ? " x " + std::to_string(opts.replicas) + " replicas" : "";
  // Under MPI on several machines (a resume on other machines says so).
  const int nodes = opts.cluster ? opts.cluster->num_nodes() : 1;
  const std::string on = nodes > 1 ? " on " + std::to_string(nodes) + " nodes" : "";
  char b[160];
  if (opts.schedule == Schedule::kGPipe) {
    std::snprintf(b, sizeof b, "%d stage%s%s, GPipe x%d%s", N, N == 1 ? "" : "s", reps.c_str(), opts.micro_batches,
                  on.c_str());
  } else if (opts.schedule == Schedule::kZBV) {
    std::snprintf(b, sizeof b, "%d stages%s, ZB-V x%d (2 virtual stages per stage in a V)%s", N / 2, reps.c_str(),
                  opts.micro_batches, on.c_str());
  } else if (opts.schedule == Schedule::kInterleaved) {
    std::snprintf(b, sizeof b, "%d stages%s, interleaved 1F1B x%d (%d virtual stages per stage)%s", N / opts.program->chunks,
                  reps.c_str(), opts.micro_batches, opts.program->chunks, on.c_str());
  } else if (synchronous(opts.schedule, opts.weights)) {
    const bool file = opts.program && opts.program->name != "1f1b-sync" && opts.program->name != "zb-h1";
    std::snprintf(b, sizeof b, "%d stage%s%s, %s x%d%s", N, N == 1 ? "" : "s", reps.c_str(),
                  file ? "schedule file" : opts.schedule == Schedule::kZBH1 ? "ZB-H1" : "1F1B sync", opts.micro_batches,
                  on.c_str());
  } else {
    const char* w = weight_mode_name(opts.weights);
    std::snprintf(b, sizeof b, "%d stage%s%s, 1F1B %s%s%s%s%s", N, N == 1 ? "" : "s", reps.c_str(), w,
                  opts.weights == WeightMode::kSpecTrain ? " (" : "",
                  opts.weights == WeightMode::kSpecTrain ? staleness_name(opts.staleness) : "",
                  opts.weights == WeightMode::kSpecTrain ? ")" : "", on.c_str());
  }
  return b;
}

Expected<std::map<std::string, HostTensor>> PipelineTrainer::Impl::checkpoint_tensors() const {
  std::map<std::string, HostTensor> out;
  for (const Value* v : checkpoint_values(g)) {
    if (v->data) out[v->name] = *v->data;  // never updated (a parameter that does not reach the loss)
    else out[v->name] = HostTensor(v->dtype, v->dims);
  }
  for (auto& st : stages) {
    if (!local(st->index)) continue;  // under MPI: rank 0 gathers the other stages (train)
    for (size_t i = 0; i < st->params.size(); ++i) {
      ASSIGN_OR_RETURN(out[st->params[i]->name], st->master(i));
      for (const Value* v : st->opt_state[i]) {
        ASSIGN_OR_RETURN(out[v->name], st->ex->fetch(v));
      }
    }
    for (const Value* v : st->state) {
      ASSIGN_OR_RETURN(out[v->name], st->ex->fetch(v));
    }
  }
  return out;
}

Status PipelineTrainer::Impl::restore_tensors(const std::map<std::string, HostTensor>& t, int64_t step) {
  for (Stage* st : local_stages()) {  // every replica starts from the checkpoint's weights and state
    for (size_t i = 0; i < st->params.size(); ++i) {
      RETURN_IF_ERROR(st->set_master(i, t.at(st->params[i]->name)));
      for (const Value* v : st->opt_state[i]) {
        st->ex->host(v) = t.at(v->name);
        RETURN_IF_ERROR(st->ex->upload(v));
      }
    }
    for (const Value* v : st->state) {
      st->ex->host(v) = t.at(v->name);
      RETURN_IF_ERROR(st->ex->upload(v));
    }
    st->set_version(step);
    RETURN_IF_ERROR(st->restart_two_bw());
  }
  return Status::ok();
}

namespace {

// The pipeline's stages as the training loop drives them: one thread per stage of this process,
// meeting the loop in RunShared (losses, snapshots, claims).
class PipelineStageSet final : public StageSet {
 public:
  PipelineStageSet(const PipelineTrainer& trainer, PipelineTrainer::Impl& impl, RunShared& sh, int local_stages)
      : trainer_(trainer), impl_(impl), sh_(sh), local_stages_(local_stages) {}
  ~PipelineStageSet() override { join(); }

  void launch(int64_t first, int64_t end) override {
    sh_.set_segment(first, end);
    std::vector<std::function<void()>> jobs;
    const ScheduleIR& ir = *impl_.opts.program;
    if (ir.chunks <= 1) {
      for (Stage* st : impl_.local_stages()) jobs.push_back([&sh = sh_, st] { st->run(sh); });
    } else {  // interleaved stages: one thread per device (of each replica) runs its chunks
      std::vector<std::vector<Stage*>> devices;
      for (Stage* st : impl_.local_stages()) {
        const size_t r = static_cast<size_t>(st->replica) * ir.stages.size() + static_cast<size_t>(ir.device_of(st->index));
        if (devices.size() <= r) devices.resize(r + 1);
        devices[r].resize(static_cast<size_t>(ir.chunks));
        devices[r][static_cast<size_t>(ir.chunk_of(st->index))] = st;
      }
      for (size_t r = 0; r < devices.size(); ++r)
        if (!devices[r].empty())  // under MPI: this rank's device only
          jobs.push_back([&sh = sh_, chunks = devices[r], &p = ir.stages[r % ir.stages.size()]] { run_device(sh, chunks, p); });
    }
    threads_.start(std::move(jobs));
  }
  void join() override { threads_.wait(); }
  int64_t segment_end() override { return sh_.end_step(); }
  void stop_early() override { sh_.stop_early(); }
  Status error() override { return sh_.error; }
  void fail(Status s) override { sh_.fail(std::move(s)); }

  Settled settle(int64_t s0) override {
    std::unique_lock<std::mutex> lock(sh_.mu);
    sh_.cv.wait(lock, [&] { return sh_.abort || sh_.settled(s0); });
    if (sh_.abort) return Settled::kAborted;
    return sh_.past_end(s0) ? Settled::kPastEnd : Settled::kClaimed;
  }
  bool losses(int64_t s0, std::vector<double>* out) override {
    sh_.consumed(s0);  // the loop is at s0: the stages may run up to sh_.lead mini-batches ahead
    if (!impl_.local(impl_.loss_stage)) return true;
    const int M = static_cast<int>(out->size());
    const int R = sh_.local_replicas;  // under MPI the other replicas' losses come through pass_losses
    // Micro-batch j's loss: the mean over the replicas (each the mean over its share), in replica order.
    auto id = [&](int j, int r) { return (s0 * M + j) * R + r; };
    std::unique_lock<std::mutex> lock(sh_.mu);
    sh_.cv.wait(lock, [&] {
      if (sh_.abort) return true;
      for (int j = 0; j < M; ++j)
        for (int r = 0; r < R; ++r)
          if (!sh_.losses.count(id(j, r))) return false;
      return true;
    });
    if (sh_.abort) return false;
    for (int j = 0; j < M; ++j) {
      double l = 0;
      for (int r = 0; r < R; ++r) {
        l += sh_.losses.at(id(j, r));
        sh_.losses.erase(id(j, r));
      }
      (*out)[j] = l / R;
    }
    return true;
  }
  // Replica 0's stages alone send weights for validation (the replicas' are equal).
  bool snapshot_due(int64_t s0) const override { return sh_.snapshot_at(s0) && impl_.my_replica() == 0; }
  bool take_snapshot(int64_t s0, RankCoordinator::Snapshot* mine) override {
    std::vector<RankCoordinator::Snapshot> snap;
    {
      std::unique_lock<std::mutex> lock(sh_.mu);
      sh_.cv.wait(lock, [&] { return sh_.abort || sh_.snapshot_count[s0] == local_stages_; });
      if (sh_.abort) return false;
      snap = std::move(sh_.snapshots[s0]);
      sh_.snapshots.erase(s0);
      sh_.snapshot_count.erase(s0);
    }
    if (mine) {  // this rank's stages, in stage order
      mine->clear();
      for (int k : impl_.stages_of_device(impl_.my_device()))
        for (auto& entry : snap[static_cast<size_t>(k)]) mine->push_back(std::move(entry));
      return true;
    }
    for (auto& per_stage : snap)
      for (auto& [v, t] : per_stage) impl_.eval->host(v) = t;
    return true;
  }
  Expected<EvalResult> evaluate_snapshot(const Dataset& val) override { return impl_.run_eval(val); }
  Expected<Tensors> checkpoint_tensors() override { return impl_.checkpoint_tensors(); }
  void account(TrainResult* r) override {
    for (auto& st : impl_.stages)  // without a steady state: busy time over the whole run, not the stage's own end
      if (r->seconds > 0 && impl_.local(st->index) && st->stats.window_s == 0) {
        const double busy_s = 1e-3 * (st->stats.fwd_ms + st->stats.bwd_ms + st->stats.update_ms) *
                              static_cast<double>(std::max<int64_t>(1, st->stats.updates));
        st->stats.busy_fraction = busy_s / r->seconds;
        st->stats.wait_fraction = 1e-3 * st->stats.wait_ms * static_cast<double>(std::max<int64_t>(1, st->stats.updates)) / r->seconds;
      }
  }
  Status add_scalars(TrainingLoop& loop, int64_t step) override {
    for (const StageStats& st : trainer_.stage_stats()) {  // TensorBoard (--tensorboard): each stage's balance
      const std::string tag = "stage/" + std::to_string(st.stage) + "/";
      RETURN_IF_ERROR(loop.add_scalar(tag + "busy_fraction", step, st.busy_fraction));
      RETURN_IF_ERROR(loop.add_scalar(tag + "forward_ms", step, st.fwd_ms));
      RETURN_IF_ERROR(loop.add_scalar(tag + "backward_ms", step, st.bwd_ms));
    }
    return Status::ok();
  }

 private:
  const PipelineTrainer& trainer_;
  PipelineTrainer::Impl& impl_;
  RunShared& sh_;
  int local_stages_;
  WorkerThreads threads_;  // the stages' threads, kept from one segment to the next
};

}  // namespace

Expected<TrainResult> PipelineTrainer::train(const Dataset& train, const Dataset* val, const TrainConfig& cfg) {
  Impl& I = *impl_;
  // What the processes of the run tell each other (one process: nothing); the leader alone reads
  // the data, computes metrics, validates and writes the run folder.
  const std::unique_ptr<RankCoordinator> co =
      I.distributed() ? make_mpi_coordinator(I) : make_local_coordinator(static_cast<int>(I.stages.size()));
  const bool coord = co->leads();
  int64_t n = train.size();
  bool validate = val && val->size() > 0;
  RETURN_IF_ERROR(co->agree_data(&n, &validate));
  const int M = micro_batched(I.opts.schedule, I.opts.weights) ? I.opts.micro_batches : 1;
  const StepBatch& given = cfg.batch;
  if (given.mini > 0 && (given.micro != M || given.replicas != I.opts.replicas || given.pass() != I.graph_batch ||
                         given.mini != given.pass() * M * I.opts.replicas))
    return internal_error("the step's batch (" + std::to_string(given.mini) + " samples in " + std::to_string(given.micro) +
                          " x " + std::to_string(given.replicas) + " passes) is not this pipeline's (passes of " +
                          std::to_string(I.graph_batch) + ", " + std::to_string(M) + " x " +
                          std::to_string(I.opts.replicas) + ")");
  const int64_t batch = given.mini > 0 ? given.mini : samples_per_step();
  if (n == 0) return invalid_input("the training set is empty");
  if (train.size() > 0) RETURN_IF_ERROR(check_dataset_inputs(train, I.g));  // under MPI rank 0 holds the data
  TrainingLoop loop(cfg);
  RETURN_IF_ERROR(loop.plan(n, batch));
  const int64_t per_epoch = loop.per_epoch();
  const int64_t total = loop.total();
  const CheckpointOptions& ck = cfg.checkpoint;
  std::optional<CheckpointMeta> meta;
  auto run_meta = [&]() -> const CheckpointMeta& {
    if (!meta) meta = make_checkpoint_meta(I.g, I.tg, train, cfg, batch, total, I.describe());
    return *meta;
  };

  TrainResult& r = loop.result();
  int64_t start = 0;
  DataOrder data(n, cfg.seed);
  std::vector<int64_t>& order = data.order;
  std::mt19937_64& rng = data.rng;
  EpochOrders orders;
  int64_t draw_from = 0;
  bool mid_epoch = false;
  std::map<std::string, HostTensor> resume_tensors;  // the leader: the checkpoint's, for the other processes
  auto resume = [&]() -> Status {
    std::string path;
    ASSIGN_OR_RETURN(Checkpoint c, read_checked_resume(loop, run_meta(), checkpoint_values(I.g), n, &rng, &path));
    RETURN_IF_ERROR(I.restore_tensors(c.tensors, c.step));
    resume_tensors = std::move(c.tensors);
    order = c.order;
    draw_from = c.epoch;
    // The checkpoint's epoch under way (position > 0): its order stands; otherwise it is drawn next.
    if (c.position > 0) mid_epoch = true;
    loop.continue_from(&c);
    start = loop.start();
    loop.announce_resume(path, c.meta.pipeline, run_meta().pipeline);
    if (I.opts.weights == WeightMode::k2BW && !cfg.quiet)
      std::printf("notice: --weights 2bw: the first mini-batch after the resume reads the checkpoint's weights (a "
                  "checkpoint holds no earlier version), so from here the run is not bit for bit the uninterrupted one\n");
    return Status::ok();
  };
  // The leader alone reads the checkpoint; every process learns from it whether and where it resumes.
  Status resumed = Status::ok();
  if (!ck.resume.empty() && coord) resumed = resume();
  if (!ck.resume.empty()) RETURN_IF_ERROR(co->share_resume(resumed, &start, resume_tensors));
  loop.start_at(start);
  // Stages may be up to N mini-batches apart, which can span as many epochs of a tiny data set.
  orders.init(order, rng, draw_from, cfg.shuffle, static_cast<int64_t>(I.stages.size()) + kPrefetchDepth + 2);
  if (mid_epoch) orders.set_drawn(draw_from, order, rng);
  auto save = [&](int64_t step, std::map<std::string, HostTensor> tensors) -> Status {
    Checkpoint c = loop.checkpoint_at(step, run_meta());
    // The epoch of the last step done: its shuffle is the last the single-stage trainer would have drawn.
    std::tie(c.order, c.rng) = orders.state((step - 1) / per_epoch);
    c.tensors = std::move(tensors);
    c.plan = I.plan_lines;
    return loop.save(c);
  };

  RunShared sh;
  sh.data = &train;
  sh.orders = &orders;
  sh.per_epoch = per_epoch;
  sh.total_steps = total;
  sh.mini_batch = batch;
  sh.graph_batch = I.graph_batch;
  sh.lr = loop.schedule();
  sh.validate = validate;
  sh.eval_every = cfg.eval_every;
  sh.clip_grad_norm = cfg.clip_grad_norm;
  if (cfg.clip_grad_norm > 0)
    for (Stage* st : I.local_stages())
      if (st->update_in_backward)
        return internal_error("--clip-grad-norm needs every gradient before the first update; stage " +
                              std::to_string(st->index) + " was planned to update in the backward");
  for (auto& c : I.channels) sh.channels.push_back(c.get());
  co->relay_claims(sh);
  sh.replicas = I.opts.replicas;
  sh.local_replicas = I.distributed() ? 1 : I.opts.replicas;
  // Far enough for every schedule (1F1B: stage 0 is N - 1 mini-batches ahead of the loss stage,
  // and a validation waits for stage 0's update of its step, N - 1 forwards later).
  sh.lead = 2 * static_cast<int64_t>(I.stages.size()) + kPrefetchDepth + 2;
  for (Stage* st : I.local_stages()) st->begin_train(loop.start(), loop.total());
  const int local_stages = co->local_stages();

  if (loop.nothing_left() && !co->distributed()) {
    // Nothing left to train: metrics.csv and curves.svg stay as the finished run wrote them (the
    // checkpoint's rows leave out the validation after the last step).
    r.val = EvalResult{};
    RETURN_IF_ERROR(loop.finish_without_steps());
    return r;
  }
  RETURN_IF_ERROR(loop.begin(coord ? cfg.metrics_path : std::string()));  // the leader alone writes metrics
  sh.t0 = loop.t0();
  // The stages run segment by segment; a segment ends with the pipeline drained, at a checkpoint
  // step or where a stop request cut it short.
  PipelineStageSet stages(*this, I, sh, local_stages);
  RETURN_IF_ERROR(drive_stages(stages, *co, loop, val, M, [&](int64_t step, StageSet::Tensors t) {
    return save(step, std::move(t));
  }));
  return r;
}

}  // namespace pt
