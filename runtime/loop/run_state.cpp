// The run's state shared by every trainer (runtime/loop/run_state.h): checkpoint values, meta and
// checks, resume, data checks and evaluation.
#include "runtime/loop/run_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "runtime/exec/optimizer.h"
#include "runtime/loop/training_loop.h"
#include "runtime/report/curves.h"

namespace pt {

Status check_dataset_inputs(const Dataset& d, const Graph& g) {
  if (d.inputs() != g.inputs.size())
    return invalid_input("the data holds " + std::to_string(d.inputs()) + " input array" + (d.inputs() == 1 ? "" : "s") +
                         ", the model has " + std::to_string(g.inputs.size()) + " data inputs");
  for (size_t k = 1; k < d.inputs(); ++k) {
    const Value* v = g.inputs[k];
    const SampleField f = d.field(k + 1);
    Dims dims = f.dims;
    dims.insert(dims.begin(), d.size());
    if (f.dtype != v->dtype || (!d.stream && (d.more[k - 1].dims().empty() || d.more[k - 1].dims()[0] != d.size())) ||
        numel(f.dims) != numel(Dims(v->dims.begin() + 1, v->dims.end())))
      return invalid_input("the data for input '" + v->name + "' is " +
                           dims_str(d.stream ? dims : d.more[k - 1].dims()) + " " + dtype_name(f.dtype) +
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
    RETURN_IF_ERROR(gather_batch(d, order, b, -1, x, y));  // no augmentation
    RETURN_IF_ERROR(gather_more(d, order, b, -1, more));
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

std::vector<const Value*> checkpoint_values(const Graph& g) {
  std::vector<const Value*> out;
  for (ValueKind k : {ValueKind::kParameter, ValueKind::kState})
    for (const Value* v : g.values_of_kind(k)) out.push_back(v);
  return out;
}

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
  // A stream's: its files' (names, sizes and sampled contents; runtime/data/source.h).
  uint64_t h = train.stream ? fnv1a64(train.fingerprint) : fnv1a64(train.x.data(), train.x.bytes());
  if (!train.stream) {
    h = fnv1a64(train.y.data(), train.y.bytes(), h);
    for (const HostTensor& t : train.more) h = fnv1a64(t.data(), t.bytes(), h);  // several inputs: every array
  }
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  m.data_hash = b;
  return m;
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

DataOrder::DataOrder(int64_t n, uint64_t seed) : order(n), rng(seed) { std::iota(order.begin(), order.end(), 0); }

std::string DataOrder::rng_text() const {
  std::ostringstream os;
  os << rng;
  return os.str();
}

Expected<Checkpoint> read_checked_resume(TrainingLoop& loop, const CheckpointMeta& meta,
                                         const std::vector<const Value*>& values, int64_t n, std::mt19937_64* rng,
                                         std::string* path) {
  ASSIGN_OR_RETURN(Checkpoint c, loop.read_resume(path));
  RETURN_IF_ERROR(check_checkpoint(c, meta, values, n, loop.per_epoch(), *path));
  std::istringstream is(c.rng);
  is >> *rng;
  if (is.fail()) return invalid_input(*path + ": the RNG state does not parse");
  return c;
}

}  // namespace pt
