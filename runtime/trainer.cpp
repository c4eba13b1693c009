// The single stage as a stage set of the training loop (runtime/stage_set.h), and evaluation.
#include "runtime/trainer.h"

#include "runtime/curves.h"
#include "runtime/optimizer.h"
#include "runtime/prefetch.h"
#include "runtime/progress.h"
#include "runtime/stage_set.h"
#include "runtime/training_loop.h"

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
  ExecutorOptions eo{true, {tg.loss.loss, tg.loss.output}};
  if (opts.adopt_initial_values) eo.adopt.assign(tg.params.begin(), tg.params.end());
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

Status check_dataset_inputs(const Dataset& d, const Graph& g) {
  if (d.more.size() + 1 != g.inputs.size())
    return invalid_input("the data holds " + std::to_string(d.more.size() + 1) + " input array" +
                         (d.more.empty() ? "" : "s") + ", the model has " + std::to_string(g.inputs.size()) +
                         " data inputs");
  for (size_t k = 0; k < d.more.size(); ++k) {
    const Value* v = g.inputs[k + 1];
    const HostTensor& t = d.more[k];
    if (t.dtype() != v->dtype || t.dims().empty() || t.dims()[0] != d.size() ||
        numel(Dims(t.dims().begin() + 1, t.dims().end())) != numel(Dims(v->dims.begin() + 1, v->dims.end())))
      return invalid_input("the data for input '" + v->name + "' is " + dims_str(t.dims()) + " " + dtype_name(t.dtype()) +
                           ", the model wants " + dims_str(v->dims) + " " + dtype_name(v->dtype));
  }
  return Status::ok();
}

void continue_from(Checkpoint* c, const std::string& metrics_path, TrainResult* r, EvalResult* last_val,
                   MetricsTail* tail, std::vector<std::string>* rows, Curves* curves) {
  r->resumed_from = c->step;
  r->steps = c->step;
  r->first_loss = c->first_loss;
  r->last_loss = c->last_loss;
  r->val.samples = c->val_samples;
  r->val.loss = c->val_loss;
  r->val.accuracy = c->val_accuracy;
  *last_val = r->val;
  std::vector<std::string> notices;
  *rows = resume_metrics_rows(*c, metrics_path, &notices);
  for (std::string& s : notices) {
    std::fprintf(stderr, "notice: %s\n", s.c_str());  // even with --quiet: metrics.csv is incomplete
    r->notices.push_back(std::move(s));
  }
  *tail = c->metrics;
  curves_from_metrics_rows(*rows, curves);
}

Expected<EvalResult> evaluate_dataset(const Dataset& d, const TrainingGraph& tg, HostTensor* x, HostTensor* y,
                                      const HostTensor& out, const std::function<Status()>& forward,
                                      const std::vector<HostTensor*>& more) {
  EvalResult r;
  const int64_t n = d.size();
  if (n == 0) return r;
  const int64_t batch = x->dims()[0];
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  double loss_sum = 0;
  int64_t correct = 0;
  const bool ce = tg.loss.kind == LossKind::kCrossEntropy;
  // Probabilities when the model ends in Softmax; a final LogSoftmax gives log-probabilities,
  // whose log-softmax below is themselves.
  const bool probs = tg.loss.tokens == 0 && tg.loss.output != tg.loss.logits && tg.loss.output->producer &&
                     tg.loss.output->producer->op_type == "Softmax";
  const int64_t per = out.size() / batch;
  // Cross-entropy: one label per sample, or per token (tg.loss.tokens labels of per / tokens
  // classes each); labels equal to ignore_index are skipped, as the loss skips them.
  const int64_t tokens = std::max<int64_t>(tg.loss.tokens, 1);
  const int64_t classes = per / tokens;
  int64_t counted = 0;
  for (int64_t b = 0; b < n; b += batch) {
    gather_batch(d, order, b, x, y);
    gather_more(d, order, b, more);
    RETURN_IF_ERROR(forward());
    const int64_t real = std::min(batch, n - b);
    for (int64_t i = 0; i < real; ++i) {
      if (ce) {
        for (int64_t t = 0; t < tokens; ++t) {
          const int64_t label = y->as<int64_t>()[i * tokens + t];
          if (label == tg.loss.ignore_index) continue;
          const int64_t base = (i * tokens + t) * classes;
          // log-softmax in double on the model output (probabilities when it ended in Softmax).
          double mx = -INFINITY;
          int64_t arg = 0;
          for (int64_t c = 0; c < classes; ++c) {
            const double v = out.get_double(base + c);
            if (v > mx) {
              mx = v;
              arg = c;
            }
          }
          double lp;
          if (probs) {
            lp = std::log(std::max(out.get_double(base + label), 1e-30));
          } else {
            double s = 0;
            for (int64_t c = 0; c < classes; ++c) s += std::exp(out.get_double(base + c) - mx);
            lp = out.get_double(base + label) - mx - std::log(s);
          }
          loss_sum += -lp;
          correct += arg == label;
          ++counted;
        }
      } else {
        double s = 0;
        for (int64_t c = 0; c < per; ++c) {
          const double e = out.get_double(i * per + c) - y->get_double(i * per + c);
          s += e * e;
        }
        loss_sum += s / per;
      }
    }
  }
  r.samples = n;
  if (!ce) counted = n;
  r.loss = counted ? loss_sum / counted : 0;
  r.accuracy = ce ? (counted ? static_cast<double>(correct) / counted : 0) : -1;
  return r;
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

std::vector<const Value*> checkpoint_values(const Graph& g) {
  std::vector<const Value*> out;
  for (ValueKind k : {ValueKind::kParameter, ValueKind::kState})
    for (const Value* v : g.values_of_kind(k)) out.push_back(v);
  return out;
}

std::vector<const Value*> Trainer::persistent_values() const { return checkpoint_values(g_); }

CheckpointMeta make_checkpoint_meta(const Graph& g, const TrainingGraph& tg, const Dataset& train,
                                    const TrainConfig& cfg, int64_t samples_per_step, int64_t total_steps,
                                    const std::string& pipeline) {
  CheckpointMeta m;
  m.model_hash = cfg.checkpoint.model_hash;
  m.batch_size = samples_per_step;
  m.lr = cfg.lr;
  m.lr_schedule = schedule_of(cfg, total_steps).describe();
  m.pipeline = pipeline;
  // --precision bf16 (importer/precision.h) is the only maker of bfloat16 values.
  for (const auto& v : g.values())
    if (v->dtype == DType::kBFloat16) {
      m.precision = "bf16";
      break;
    }
  m.optimizer = optimizer_description(g);
  m.clip_grad_norm = static_cast<float>(cfg.clip_grad_norm);
  for (const auto& n : g.nodes()) {
    if (n->phase != Phase::kUpdate) continue;
    m.momentum = n->attrs.get_float("momentum", 0);
    m.weight_decay = n->attrs.get_float("weight_decay", 0);
    break;
  }
  m.seed = cfg.seed;
  m.loss = tg.loss.kind == LossKind::kMse ? "mse" : "cross-entropy";
  m.shuffle = cfg.shuffle;
  m.data_samples = train.size();
  uint64_t h = fnv1a64(train.x.data(), train.x.bytes());
  h = fnv1a64(train.y.data(), train.y.bytes(), h);
  for (const HostTensor& t : train.more) h = fnv1a64(t.data(), t.bytes(), h);  // several inputs: every array
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  m.data_hash = b;
  return m;
}

CheckpointMeta Trainer::checkpoint_meta(const Dataset& train, const TrainConfig& cfg) const {
  return make_checkpoint_meta(g_, tg_, train, cfg, batch_, total_steps(train, cfg), "1 stage");
}

Status check_checkpoint(const Checkpoint& c, const CheckpointMeta& now, const std::vector<const Value*>& values,
                        int64_t n, int64_t per_epoch, const std::string& path) {
  if (std::string d = describe_mismatch(c.meta, now); !d.empty())
    return invalid_input(path + ": this checkpoint is of another run: " + d);
  if (static_cast<int64_t>(c.order.size()) != n || c.step < 0 || c.position != c.step % per_epoch ||
      c.epoch != c.step / per_epoch)
    return invalid_input(path + ": the data order or position does not fit " + std::to_string(n) + " samples");
  std::vector<bool> seen(n, false);
  for (int64_t i : c.order) {
    if (i < 0 || i >= n || seen[i]) return invalid_input(path + ": the data order is not a permutation");
    seen[i] = true;
  }
  for (const Value* v : values) {
    auto it = c.tensors.find(v->name);
    if (it == c.tensors.end())
      return invalid_input(path + ": the checkpoint lacks '" + v->name + "' (trained with another --freeze?)");
    if (it->second.dtype() != v->dtype || it->second.dims() != v->dims)
      return invalid_input(path + ": '" + v->name + "' is " + dims_str(it->second.dims()) + " " +
                           dtype_name(it->second.dtype()) + " in the checkpoint, " + dims_str(v->dims) + " " +
                           dtype_name(v->dtype) + " in the model");
  }
  if (c.tensors.size() != values.size()) {
    for (const auto& entry : c.tensors) {
      const std::string& name = entry.first;  // a named variable: clang 14 cannot capture structured bindings
      if (std::none_of(values.begin(), values.end(), [&](const Value* v) { return v->name == name; }))
        return invalid_input(path + ": the checkpoint holds '" + name +
                             "', which this model does not train (trained with another --freeze?)");
    }
  }
  return Status::ok();
}

Expected<Checkpoint> read_resume_checkpoint(const CheckpointOptions& ck, bool quiet, std::vector<std::string>* notices,
                                            std::string* path) {
  Checkpoint c;
  *path = ck.resume;
  if (std::filesystem::is_directory(ck.resume)) {
    ASSIGN_OR_RETURN(c, read_newest_checkpoint(ck.resume, notices, path));
  } else {
    ASSIGN_OR_RETURN(c, read_checkpoint(ck.resume));
  }
  for (const std::string& s : *notices)
    if (!quiet) std::printf("notice: %s\n", s.c_str());
  return c;
}

int64_t Trainer::total_steps(const Dataset& train, const TrainConfig& cfg) const {
  const int64_t per_epoch = std::max<int64_t>(1, train.size() / batch_);  // the last partial batch is dropped
  return cfg.steps > 0 ? cfg.steps : cfg.epochs * per_epoch;
}

Expected<TrainResult> Trainer::train(const Dataset& train, const Dataset* val, const TrainConfig& cfg) {
  const int64_t n = train.size();
  if (n == 0) return invalid_input("the training set is empty");
  if (update_in_backward_ && cfg.clip_grad_norm > 0)
    return internal_error("--clip-grad-norm needs every gradient before the first update; this trainer updates in the backward");
  RETURN_IF_ERROR(check_inputs(train));
  TrainingLoop loop(cfg);
  RETURN_IF_ERROR(loop.plan(n, batch_));
  const int64_t per_epoch = loop.per_epoch();

  const CheckpointOptions& ck = cfg.checkpoint;
  // Hashing the training set costs a pass over it: only done when a checkpoint is read or written.
  std::optional<CheckpointMeta> meta;
  auto run_meta = [&]() -> const CheckpointMeta& {
    if (!meta) meta = checkpoint_meta(train, cfg);
    return *meta;
  };
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(cfg.seed);
  TrainResult& r = loop.result();
  if (!ck.resume.empty()) {
    std::string path;
    ASSIGN_OR_RETURN(Checkpoint c, loop.read_resume(&path));
    RETURN_IF_ERROR(restore(c, run_meta(), n, per_epoch, path));
    order = c.order;
    std::istringstream is(c.rng);
    is >> rng;
    if (is.fail()) return invalid_input(path + ": the RNG state does not parse");
    loop.continue_from(&c);
    loop.announce_resume(path, "", "");
  }
  auto save = [&](int64_t step, std::map<std::string, HostTensor> tensors) -> Status {
    Checkpoint c = loop.checkpoint_at(step, run_meta());
    c.order = order;
    std::ostringstream os;
    os << rng;
    c.rng = os.str();
    c.plan = {"stage 0: the whole model"};
    c.tensors = std::move(tensors);
    return loop.save(c);
  };

  if (loop.nothing_left()) {
    // Nothing left to train: metrics.csv and curves.svg stay as the finished run wrote them (the
    // checkpoint's rows leave out the validation after the last step).
    r.val = EvalResult{};
    return r;
  }
  RETURN_IF_ERROR(loop.begin(cfg.metrics_path));

  // The single stage as the training loop drives it: each mini-batch runs when the loop asks for
  // its loss, on this thread; the executor holds the weights the evaluator reads.
  class OneStage final : public StageSet {
   public:
    OneStage(Trainer& t, const Dataset& train, const Dataset* val, const TrainConfig& cfg, TrainingLoop& loop,
             std::vector<int64_t>& order, std::mt19937_64& rng)
        : t_(t), train_(train), cfg_(cfg), loop_(loop), order_(order), rng_(rng),
          validate_(val && val->size() > 0),
          // The batches are gathered a step ahead on a background thread, which draws the same
          // shuffles from its own copy of the order and RNG; the stage keeps the originals for
          // checkpoints.
          prefetch_(&t.ex_->host(t.input_), &t.ex_->host(t.tg_.loss.labels), loop.start() + 1, loop.total() + 1, 2,
                    [&train, p_order = order, p_rng = rng, per_epoch = loop.per_epoch(), batch = t.batch_,
                     shuffle = cfg.shuffle](int64_t step, HostTensor* px, HostTensor* py) mutable {
                      const int64_t in_epoch = (step - 1) % per_epoch;
                      if (in_epoch == 0 && shuffle) std::shuffle(p_order.begin(), p_order.end(), p_rng);
                      gather_batch(train, p_order, in_epoch * batch, px, py);
                    }) {}

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
    // Forward, loss, backward and update of 1-based `step`; its loss.
    Expected<double> run(int64_t step) {
      constexpr int64_t kTimedSteps = 3;
      Executor& ex = *t_.ex_;
      const int64_t in_epoch = (step - 1) % loop_.per_epoch();
      if (in_epoch == 0 && cfg_.shuffle) std::shuffle(order_.begin(), order_.end(), rng_);
      prefetch_.take(step, &ex.host(t_.input_), &ex.host(t_.tg_.loss.labels));
      if (!t_.more_inputs_.empty()) {
        // Further inputs are gathered here, from the same order the prefetcher draws.
        std::vector<HostTensor*> more;
        for (Value* v : t_.more_inputs_) more.push_back(&ex.host(v));
        gather_more(train_, order_, in_epoch * t_.batch_, more);
        for (Value* v : t_.more_inputs_) RETURN_IF_ERROR(ex.upload(v));
      }
      RETURN_IF_ERROR(ex.upload(t_.input_));
      RETURN_IF_ERROR(ex.upload(t_.tg_.loss.labels));
      RETURN_IF_ERROR(t_.set_step(step));
      RETURN_IF_ERROR(ex.set_scalar(t_.tg_.lr, loop_.schedule().at(step)));
      if (cfg_.clip_grad_norm > 0) {
        RETURN_IF_ERROR(ex.run([](Phase p) { return p != Phase::kUpdate; }));
        std::vector<const Value*> grads;
        for (Value* p : t_.tg_.params) grads.push_back(t_.tg_.grads.at(p));
        ASSIGN_OR_RETURN(const double sq, grad_sum_squares(ex, grads));
        RETURN_IF_ERROR(scale_grads(ex, grads, clip_coefficient(cfg_.clip_grad_norm, sq)));
        RETURN_IF_ERROR(ex.run([](Phase p) { return p == Phase::kUpdate; }));
      } else if (step > loop_.total() - kTimedSteps) {
        // The last steps are timed node by node: the measured stage times come from the run
        // itself, with no second executor (which would double the memory) after training.
        RETURN_IF_ERROR(ex.run_timed(&node_seconds_));
        ++timed_steps_;
      } else {
        RETURN_IF_ERROR(ex.run());
      }
      RETURN_IF_ERROR(ex.download(t_.tg_.loss.loss));
      return ex.host(t_.tg_.loss.loss).get_double(0);
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
  OneStage stage(*this, train, val, cfg, loop, order, rng);
  const std::unique_ptr<RankCoordinator> co = make_local_coordinator(1);
  RETURN_IF_ERROR(drive_stages(stage, *co, loop, val, 1, [&](int64_t step, StageSet::Tensors t) {
    return save(step, std::move(t));
  }));
  return r;
}

Status Trainer::restore(const Checkpoint& c, const CheckpointMeta& now, int64_t n, int64_t per_epoch,
                        const std::string& path) {
  const std::vector<const Value*> values = persistent_values();
  RETURN_IF_ERROR(check_checkpoint(c, now, values, n, per_epoch, path));
  for (const Value* v : values) {
    const HostTensor& src = c.tensors.at(v->name);
    if (src.bytes()) std::memcpy(ex_->host(v).data(), src.data(), src.bytes());
    RETURN_IF_ERROR(ex_->upload(v));
  }
  return Status::ok();
}

}  // namespace pt
