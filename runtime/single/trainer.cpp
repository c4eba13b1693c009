// The single stage as a stage set of the training loop (runtime/loop/stage_set.h), and evaluation.
#include "runtime/single/trainer.h"

#include "runtime/report/curves.h"
#include "runtime/exec/optimizer.h"
#include "runtime/data/prefetch.h"
#include "runtime/report/progress.h"
#include "runtime/loop/stage_set.h"
#include "runtime/loop/training_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <unistd.h>

namespace pt {

namespace {

// A value's bytes for the trainer's const readers (parameters(), export): a device that cannot
// copy its memory back at this point has failed beyond recovery.
HostTensor must_fetch(const Executor& ex, const Value* v) {
  Expected<HostTensor> t = ex.fetch(v);
  PT_CHECK(t.has_value()) << "reading '" << v->name << "' from " << ex.device()->name() << ": " << t.status().message();
  return std::move(t).value();
}

}  // namespace

Expected<std::unique_ptr<Trainer>> Trainer::create(const Graph& g, const TrainingGraph& tg, DeviceKind device) {
  ASSIGN_OR_RETURN(std::shared_ptr<Device> d, open_device(device, 0));
  return create(g, tg, std::move(d));
}

Expected<std::unique_ptr<Trainer>> Trainer::create(const Graph& g, const TrainingGraph& tg, std::shared_ptr<Device> device) {
  return create(g, tg, std::move(device), Options{});
}

Expected<std::unique_ptr<Trainer>> Trainer::create(const Graph& g, const TrainingGraph& tg, std::shared_ptr<Device> device,
                                                   const Options& opts) {
  if (g.inputs.empty()) return unsupported("training needs a model with a data input; this one has none");
  for (const Value* in : g.inputs)
    if (in->dims.empty() || in->dims[0] != g.inputs[0]->dims.at(0))
      return unsupported("the model's data inputs do not share one batch dimension ('" + in->name + "' is " +
                         dims_str(in->dims) + ")");
  std::unique_ptr<Trainer> t(new Trainer(g, tg));
  // The memory plan shares activation and gradient buffers; the loss and the model output are
  // read after a step, everything else the trainer touches is an input, parameter or state.
  ExecutorOptions eo{opts.memory_plan, {tg.loss.loss, tg.loss.output}};
  if (opts.adopt_initial_values) eo.adopt.assign(tg.params.begin(), tg.params.end());
  eo.settings = opts.exec;
  std::vector<const Node*> order;
  if (opts.update_in_backward) {
    for (const auto& n : g.nodes()) order.push_back(n.get());
    order = interleave_updates(order);
  }
  ASSIGN_OR_RETURN(t->ex_, Executor::create(g, device, std::move(order), eo));
  t->update_in_backward_ = opts.update_in_backward;
  t->input_ = g.inputs[0];
  t->more_inputs_.assign(g.inputs.begin() + 1, g.inputs.end());
  t->batch_ = t->input_->dims.at(0);
  return t;
}

std::map<std::string, HostTensor> Trainer::parameters() const {
  std::map<std::string, HostTensor> out;
  for (Value* p : tg_.params) out[p->name] = must_fetch(*ex_, p);
  return out;
}

Status Trainer::set_step(int64_t step) {
  return g_.rng_step ? ex_->set_scalar(g_.rng_step, static_cast<double>(step)) : Status::ok();
}

Expected<HostTensor> Trainer::forward(const HostTensor& x) {
  HostTensor& in = ex_->host(input_);
  if (x.dims() != in.dims() || x.dtype() != in.dtype())
    return invalid_input("forward: input is " + dims_str(x.dims()) + " " + dtype_name(x.dtype()) + ", the model wants " +
                         dims_str(in.dims()) + " " + dtype_name(in.dtype()));
  std::memcpy(in.data(), x.data(), x.bytes());
  RETURN_IF_ERROR(ex_->upload(input_));
  RETURN_IF_ERROR(set_step(-1));
  RETURN_IF_ERROR(ex_->run([](Phase p) { return p == Phase::kForward; }));
  return ex_->fetch(tg_.loss.output);
}

std::map<std::string, HostTensor> Trainer::trained_initializers() const {
  std::map<std::string, HostTensor> out = parameters();
  for (const Value* v : g_.values_of_kind(ValueKind::kState))
    if (v->from_initializer) out[v->name] = must_fetch(*ex_, v);
  return out;
}

std::map<std::string, HostTensor> Trainer::take_trained_initializers() {
  std::map<std::string, HostTensor> out;
  for (Value* p : tg_.params) out[p->name] = ex_->direct() ? std::move(ex_->tensor(p)) : must_fetch(*ex_, p);
  for (const Value* v : g_.values_of_kind(ValueKind::kState))
    if (v->from_initializer) out[v->name] = must_fetch(*ex_, v);
  return out;
}

Expected<EvalResult> Trainer::evaluate(const Dataset& d) {
  RETURN_IF_ERROR(check_inputs(d));
  std::vector<HostTensor*> more;
  for (Value* v : more_inputs_) more.push_back(&ex_->host(v));
  // Every validation batch reads the same weights: their converted copies are kept meanwhile (the
  // copies stay allocated for the next validation; training converts into the scratch buffers).
  ex_->set_weight_cache(true);
  struct Off {
    Executor* ex;
    ~Off() { ex->set_weight_cache(false); }
  } off{ex_.get()};
  return evaluate_dataset(d, tg_, &ex_->host(input_), &ex_->host(tg_.loss.labels), ex_->host(tg_.loss.output),
                          [this] {
                            RETURN_IF_ERROR(ex_->upload(input_));
                            for (Value* v : more_inputs_) RETURN_IF_ERROR(ex_->upload(v));
                            RETURN_IF_ERROR(ex_->upload(tg_.loss.labels));
                            RETURN_IF_ERROR(set_step(-1));
                            RETURN_IF_ERROR(ex_->run([](Phase p) { return p == Phase::kForward; }));
                            return ex_->download(tg_.loss.output);
                          },
                          more);
}

Status Trainer::check_inputs(const Dataset& d) const {
  if (d.size() == 0) return Status::ok();
  return check_dataset_inputs(d, g_);
}

std::vector<const Value*> Trainer::persistent_values() const { return checkpoint_values(g_); }

CheckpointMeta Trainer::checkpoint_meta(const Dataset& train, const TrainConfig& cfg) const {
  return make_checkpoint_meta(g_, tg_, train, cfg, batch_, total_steps(train, cfg), "1 stage");
}

int64_t Trainer::total_steps(const Dataset& train, const TrainConfig& cfg) const {
  const int64_t per_epoch = std::max<int64_t>(1, train.size() / batch_);  // the last partial batch is dropped
  return cfg.steps > 0 ? cfg.steps : cfg.epochs * per_epoch;
}

// The single stage as the training loop drives it: each mini-batch runs when the loop asks for
// its loss, on this thread; the executor holds the weights the evaluator reads.
class OneStageSet final : public StageSet {
 public:
  OneStageSet(Trainer& t, const Dataset& train, const Dataset* val, const TrainConfig& cfg, TrainingLoop& loop,
           std::vector<int64_t>& order, std::mt19937_64& rng)
      : t_(t), train_(train), cfg_(cfg), loop_(loop), order_(order), rng_(rng),
        validate_(val && val->size() > 0),
        // The batches are gathered a step ahead on a background thread, which draws the same
        // shuffles from its own copy of the order and RNG; the stage keeps the originals for
        // checkpoints.
        prefetch_(&t.input_buffer(), &t.label_buffer(), loop.start() + 1, loop.total() + 1, 2,
                  [&train, p_order = order, p_rng = rng, per_epoch = loop.per_epoch(), batch = t.batch_,
                   shuffle = cfg.shuffle](int64_t step, HostTensor* px, HostTensor* py) mutable {
                    const int64_t in_epoch = (step - 1) % per_epoch;
                    if (in_epoch == 0 && shuffle) std::shuffle(p_order.begin(), p_order.end(), p_rng);
                    return gather_batch(train, p_order, in_epoch * batch, (step - 1) / per_epoch, px, py);
                  },
                  train.stats.get()) {}

  void launch(int64_t, int64_t end) override { end_ = end; }
  void join() override {}
  int64_t segment_end() override { return end_; }
  void stop_early() override { end_ = std::min(end_, done_); }  // nothing is in flight
  Status error() override { return error_; }
  void fail(Status s) override {
    if (error_.is_ok()) error_ = std::move(s);
  }
  Settled settle(int64_t) override { return Settled::kClaimed; }  // one process: it leads
  bool losses(int64_t s0, std::vector<double>* out) override {
    Expected<double> l = run(s0 + 1);
    if (!l) {
      fail(l.status());
      return false;
    }
    (*out)[0] = *l;
    done_ = s0 + 1;
    return true;
  }
  bool snapshot_due(int64_t s0) const override { return validate_ && loop_.eval_due(s0 + 1); }
  bool take_snapshot(int64_t, RankCoordinator::Snapshot*) override { return true; }  // the executor holds them
  Expected<EvalResult> evaluate_snapshot(const Dataset& val) override { return t_.evaluate(val); }
  Expected<Tensors> checkpoint_tensors() override {
    Tensors out;
    for (const Value* v : t_.persistent_values()) {
      ASSIGN_OR_RETURN(HostTensor x, t_.ex_->fetch(v));
      out.emplace(v->name, std::move(x));
    }
    return out;
  }
  void account(TrainResult* r) override {
    if (timed_steps_ == 0) return;
    for (const auto& n : t_.g_.nodes()) {
      if (static_cast<size_t>(n->id) >= node_seconds_.size()) continue;
      const double ms = 1e3 * node_seconds_[n->id] / static_cast<double>(timed_steps_);
      if (n->phase == Phase::kForward || n->phase == Phase::kLoss) r->fwd_ms += ms;
      else if (n->phase == Phase::kBackward) r->bwd_ms += ms;
      else if (n->phase == Phase::kUpdate) r->update_ms += ms;
    }
  }
  Status add_scalars(TrainingLoop& loop, int64_t step) override {
    if (timed_steps_ == 0) return Status::ok();
    // TensorBoard (--tensorboard): the one stage's pass times, as pipelines report theirs.
    RETURN_IF_ERROR(loop.add_scalar("stage/0/forward_ms", step, loop.result().fwd_ms));
    return loop.add_scalar("stage/0/backward_ms", step, loop.result().bwd_ms);
  }

 private:
  // Forward, loss, backward and update of 1-based `step`; its loss. The last steps are timed
  // node by node: the measured stage times come from the run itself, with no second executor
  // (which would double the memory) after training.
  Expected<double> run(int64_t step) {
    constexpr int64_t kTimedSteps = 3;
    const int64_t in_epoch = (step - 1) % loop_.per_epoch();
    if (in_epoch == 0 && cfg_.shuffle) std::shuffle(order_.begin(), order_.end(), rng_);
    RETURN_IF_ERROR(prefetch_.take(step, &t_.input_buffer(), &t_.label_buffer()));
    // Further inputs are gathered here, from the same order the prefetcher draws.
    if (!t_.more_inputs_.empty())
      RETURN_IF_ERROR(gather_more(train_, order_, in_epoch * t_.batch_, (step - 1) / loop_.per_epoch(), t_.more_input_buffers()));
    const bool timed = !(cfg_.clip_grad_norm > 0) && step > loop_.total() - kTimedSteps;
    if (timed) ++timed_steps_;
    return t_.step(step, loop_.schedule().at(step), cfg_.clip_grad_norm, timed ? &node_seconds_ : nullptr);
  }

  Trainer& t_;
  const Dataset& train_;
  const TrainConfig& cfg_;
  TrainingLoop& loop_;
  std::vector<int64_t>& order_;
  std::mt19937_64& rng_;
  bool validate_;
  BatchPrefetcher prefetch_;
  int64_t end_ = 0, done_ = 0;
  Status error_ = Status::ok();
  std::vector<double> node_seconds_;
  int64_t timed_steps_ = 0;
};

Expected<TrainResult> Trainer::train(const Dataset& train, const Dataset* val, const TrainConfig& cfg) {
  const int64_t n = train.size();
  if (n == 0) return invalid_input("the training set is empty");
  if (update_in_backward_ && cfg.clip_grad_norm > 0)
    return internal_error("--clip-grad-norm needs every gradient before the first update; this trainer updates in the backward");
  RETURN_IF_ERROR(check_inputs(train));
  if (cfg.batch.mini > 0 && (cfg.batch.micro != 1 || cfg.batch.replicas != 1 || cfg.batch.mini != batch_))
    return internal_error("a single stage runs one pass of " + std::to_string(batch_) + " samples per step, not " +
                          std::to_string(cfg.batch.mini) + " in " + std::to_string(cfg.batch.micro) + " x " +
                          std::to_string(cfg.batch.replicas) + " passes");
  TrainingLoop loop(cfg);
  RETURN_IF_ERROR(loop.plan(n, batch_));

  // Hashing the training set costs a pass over it: only done when a checkpoint is read or written.
  std::optional<CheckpointMeta> meta;
  auto run_meta = [&]() -> const CheckpointMeta& {
    if (!meta) meta = checkpoint_meta(train, cfg);
    return *meta;
  };
  DataOrder data(n, cfg.seed);
  TrainResult& r = loop.result();
  if (!cfg.checkpoint.resume.empty()) {
    std::string path;
    ASSIGN_OR_RETURN(Checkpoint c, read_checked_resume(loop, run_meta(), persistent_values(), n, &data.rng, &path));
    RETURN_IF_ERROR(restore(c));
    data.order = c.order;
    loop.continue_from(&c);
    loop.announce_resume(path, "", "");
  }
  auto save = [&](int64_t step, std::map<std::string, HostTensor> tensors) -> Status {
    Checkpoint c = loop.checkpoint_at(step, run_meta());
    c.order = data.order;
    c.rng = data.rng_text();
    c.plan = {"stage 0: the whole model"};
    c.tensors = std::move(tensors);
    return loop.save(c);
  };

  if (loop.nothing_left()) {
    // Nothing left to train: metrics.csv and curves.svg stay as the finished run wrote them (the
    // checkpoint's rows leave out the validation after the last step).
    r.val = EvalResult{};
    RETURN_IF_ERROR(loop.finish_without_steps());
    return r;
  }
  RETURN_IF_ERROR(loop.begin(cfg.metrics_path));
  OneStageSet stage(*this, train, val, cfg, loop, data.order, data.rng);
  const std::unique_ptr<RankCoordinator> co = make_local_coordinator(1);
  RETURN_IF_ERROR(drive_stages(stage, *co, loop, val, 1, [&](int64_t step, StageSet::Tensors t) {
    return save(step, std::move(t));
  }));
  return r;
}

Expected<double> Trainer::step(int64_t step, double lr, double clip_grad_norm, std::vector<double>* node_seconds) {
  Executor& ex = *ex_;
  for (Value* v : more_inputs_) RETURN_IF_ERROR(ex.upload(v));
  RETURN_IF_ERROR(ex.upload(input_));
  RETURN_IF_ERROR(ex.upload(tg_.loss.labels));
  RETURN_IF_ERROR(set_step(step));
  RETURN_IF_ERROR(ex.set_scalar(tg_.lr, lr));
  if (clip_grad_norm > 0) {
    RETURN_IF_ERROR(ex.run([](Phase p) { return p != Phase::kUpdate; }));
    std::vector<const Value*> grads;
    for (Value* p : tg_.params) grads.push_back(tg_.grads.at(p));
    ASSIGN_OR_RETURN(const double sq, grad_sum_squares(ex, grads));
    RETURN_IF_ERROR(scale_grads(ex, grads, clip_coefficient(clip_grad_norm, sq)));
    RETURN_IF_ERROR(ex.run([](Phase p) { return p == Phase::kUpdate; }));
  } else if (node_seconds) {
    RETURN_IF_ERROR(ex.run_timed(node_seconds));
  } else {
    RETURN_IF_ERROR(ex.run());
  }
  RETURN_IF_ERROR(ex.download(tg_.loss.loss));
  return ex.host(tg_.loss.loss).get_double(0);
}

std::vector<HostTensor*> Trainer::more_input_buffers() {
  std::vector<HostTensor*> out;
  for (Value* v : more_inputs_) out.push_back(&ex_->host(v));
  return out;
}

Status Trainer::restore(const Checkpoint& c) {
  for (const Value* v : persistent_values()) {
    const HostTensor& src = c.tensors.at(v->name);
    if (src.bytes()) std::memcpy(ex_->host(v).data(), src.data(), src.bytes());
    RETURN_IF_ERROR(ex_->upload(v));
  }
  return Status::ok();
}

}  // namespace pt
