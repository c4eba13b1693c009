// The onnx-pipetrain command line: parses flags (CLI11), then imports the model, builds the
// training graph, trains, and writes the run folder. Exit codes: 0 ok, 2 bad input or usage,
// 3 diverged (a non-finite loss, or weights that went non-finite: no model is written), 1 internal
// error, 130 stopped by SIGINT or SIGTERM (after writing a checkpoint and the model; under MPI also
// SIGUSR1, tools/mpi_job.h).
#include <CLI/CLI.hpp>
#include <dnnl_version.h>
#include <google/protobuf/stubs/common.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "importer/importer.h"
#include "kernels/device.h"
#include "importer/training.h"
#include "partitioner/plan.h"
#include "tools/mpi_job.h"
#include "tools/omp_env.h"
#include "tools/options.h"
#include "tools/plan_step.h"
#include "runtime/data.h"
#include "runtime/executor_memory.h"
#include "runtime/pipeline.h"
#include "runtime/trainer.h"

namespace fs = std::filesystem;

namespace {

using pt::Options;

constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report a run stopped by Ctrl-C

void say(const Options& o, const std::string& line) {
  if (!o.quiet) std::printf("%s\n", line.c_str());
}

std::string human_count(int64_t n) {
  char b[32];
  if (n >= 1000000) std::snprintf(b, sizeof b, "%.2fM", n / 1e6);
  else if (n >= 1000) std::snprintf(b, sizeof b, "%.1fk", n / 1e3);
  else std::snprintf(b, sizeof b, "%lld", static_cast<long long>(n));
  return b;
}

// The optimizer of --optimizer and its flags; a flag that does not apply to it is refused.
pt::Expected<pt::SgdOptions> optimizer_options(const Options& o) {
  using namespace pt;
  ASSIGN_OR_RETURN(const OptimizerKind kind, parse_optimizer(o.optimizer));
  auto applies = [&](const std::string& f) {
    if (f == "--momentum") return kind == OptimizerKind::kSgdPaper || kind == OptimizerKind::kSgd;
    if (f == "--dampening" || f == "--nesterov") return kind == OptimizerKind::kSgd;
    return kind == OptimizerKind::kAdam || kind == OptimizerKind::kAdamW;  // --beta1, --beta2, --eps
  };
  for (const std::string& f : o.optimizer_flags)
    if (!applies(f)) return invalid_input(f + ": does not apply to --optimizer " + o.optimizer);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    return invalid_input("--nesterov: needs --momentum > 0 and --dampening 0 (as torch.optim.SGD)");
  SgdOptions s;
  s.kind = kind;
  s.momentum = o.momentum;
  s.weight_decay = o.weight_decay;
  s.dampening = o.dampening;
  s.nesterov = o.nesterov;
  s.beta1 = o.beta1;
  s.beta2 = o.beta2;
  s.eps = o.eps;
  return s;
}

// The vocabulary of an integer input: the rows of the embedding the Gather that reads it indexes
// (through Cast / Identity / Reshape-like nodes); 0 when no Gather reads it.
int64_t token_vocabulary(const pt::Value& input) {
  std::vector<const pt::Value*> todo{&input};
  for (size_t k = 0; k < todo.size() && k < 64; ++k)
    for (const pt::Node* n : todo[k]->consumers) {
      if (n->op_type == "Gather" && n->inputs.size() > 1 && n->inputs[1] == todo[k] && !n->inputs[0]->dims.empty() &&
          n->attrs.get_int("axis", 0) == 0)
        return n->inputs[0]->dims[0];
      if ((n->op_type == "Cast" || n->op_type == "Identity" || n->op_type == "Reshape" || n->op_type == "Unsqueeze" ||
           n->op_type == "Squeeze" || n->op_type == "Flatten") &&
          n->inputs[0] == todo[k] && !n->outputs.empty() && n->outputs[0])
        todo.push_back(n->outputs[0]);
    }
  return 0;
}

int run(const Options& o) {
  using namespace pt;
  if (!o.plan_only && o.data == "synthetic")  // the first line, so that nobody mistakes the numbers
    say(o, std::string("notice: ") + (o.data_given ? "--data synthetic" : "no --data given") +
               ": training on synthetic random inputs and labels, so loss and accuracy mean nothing");
  if (o.gpus < 1) return fail_run(invalid_input("--gpus " + std::to_string(o.gpus) + ": must be at least 1"));
  // Bounds that keep the per-stage and per-sample arithmetic far from overflow (issue 17).
  if (o.gpus > 4096) return fail_run(invalid_input("--gpus " + std::to_string(o.gpus) + ": at most 4096 pipeline stages"));
  if (o.batch_size > (int64_t{1} << 31) - 1)
    return fail_run(invalid_input("--batch-size " + std::to_string(o.batch_size) + ": at most 2147483647 samples"));
  if (Status js = check_job_stages(o.gpus); !js.is_ok()) return fail_run(js);
  auto opt = optimizer_options(o);
  if (!opt) return fail_run(opt.status());
  const SgdOptions& sgd = *opt;
  // Devices: CUDA stages when asked for (or, with auto, when there is a GPU per stage: under MPI
  // a GPU per rank of this node), CPU stages otherwise. Stage k uses GPU k; under MPI, the GPU of
  // its local rank; --oversubscribe wraps several stages onto fewer GPUs.
  const int gpus_here = cuda_device_count();
  const int gpus_needed = cuda_devices_needed(o.gpus);
  if (o.device == "cuda" && !o.plan_only && (gpus_here == 0 || (gpus_here < gpus_needed && !o.oversubscribe))) {
    return fail_run(invalid_input("--gpus " + std::to_string(o.gpus) + ": this machine has " + std::to_string(gpus_here) +
                                  " CUDA device" + (gpus_here == 1 ? "" : "s") +
                                  (in_job() ? " for " + std::to_string(gpus_needed) + " ranks on this node" : "") +
                                  (gpus_here > 0 ? "; add --oversubscribe to place several stages on one GPU"
                                                 : ": " + cuda_unavailable_reason())));
  }
  const bool use_cuda = o.device == "cuda" || (o.device == "auto" && gpus_here >= gpus_needed && gpus_here > 0);
  const DeviceKind device = use_cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (o.device == "auto" && !o.plan_only)
    say(o, "notice: " + std::to_string(o.gpus) + (use_cuda ? " CUDA" : " CPU") + " stage" + (o.gpus > 1 ? "s" : "") +
               (use_cuda ? "" : " (" + (gpus_here > 0 ? std::to_string(gpus_here) + " CUDA device" +
                                                            (gpus_here == 1 ? "" : "s") + " for " +
                                                            std::to_string(gpus_needed) + " stages; --device cuda " +
                                                            "--oversubscribe shares them"
                                                      : cuda_unavailable_reason()) + ")"));

  ImportOptions io;
  // GPipe builds the graph for one micro-batch.
  const bool gpipe = o.schedule == "gpipe";
  if (!gpipe && o.micro_batches_given && o.micro_batches != 1)
    return fail_run(invalid_input("--micro-batches " + std::to_string(o.micro_batches) + ": micro-batches need --schedule gpipe"));
  const int micro = gpipe ? o.micro_batches : 1;
  if (o.batch_size % micro != 0)
    return fail_run(invalid_input("--batch-size " + std::to_string(o.batch_size) + " is not a multiple of --micro-batches " +
                                  std::to_string(micro)));
  io.batch_size = o.batch_size / micro;
  io.device = device;
  io.freeze = o.freeze;
  io.trainable = o.trainable;
  io.seed = o.seed;
  const size_t baseline_rss = process_rss_bytes();  // the memory report's process baseline
  auto imported = import_onnx(o.model, io);
  if (!imported) return fail_run(imported.status());
  ImportedModel& m = *imported;
  Graph& g = *m.graph;
  say(o, "model: " + o.model + " (opset " + std::to_string(m.source_opset) +
             (m.converted ? ", converted to " + std::to_string(g.opset) : "") +
             (m.producer.empty() ? "" : ", from " + m.producer) + "), " + std::to_string(g.nodes().size()) + " nodes");

  // Training reads whole samples: an input with no elements (a batch dimension fixed at 0) has
  // nothing to learn from (and would divide by zero in the epoch arithmetic).
  for (const Value* in : g.inputs)
    for (size_t d = 0; d < in->dims.size(); ++d)
      if (in->dims[d] <= 0)
        return fail_run(invalid_input(o.model + ": graph input '" + in->name + "' dimension " + std::to_string(d) +
                                      " is " + std::to_string(in->dims[d]) +
                                      "; every dimension of a data input must be at least 1" +
                                      (d == 0 ? " (make the batch dimension symbolic, or fix it at the --batch-size)" : "")));
  if (!g.inputs.empty() && !g.inputs[0]->dims.empty() && g.inputs[0]->dims[0] != io.batch_size)
    say(o, "notice: the model's batch dimension is fixed at " + std::to_string(g.inputs[0]->dims[0]) +
               "; training with batches of that size (--batch-size " + std::to_string(o.batch_size) + " ignored)");
  LossKind lk = o.loss == "mse" ? LossKind::kMse : o.loss == "cross-entropy" ? LossKind::kCrossEntropy : LossKind::kAuto;
  auto tg = build_training_graph(g, lk, sgd, o.ignore_index);
  if (!tg) return fail_run(tg.status().with_context(o.model + ": "));
  int64_t params = 0;
  for (Value* p : tg->params) params += p->size();
  say(o, "loss: " + tg->loss.description);
  {
    // What trains, and how many float initializers stay as they are (scalars, exponents,
    // epsilons, bounds; --freeze; --trainable).
    int64_t kept = 0;
    for (Value* v : g.values_of_kind(ValueKind::kConstant))
      if (v->from_initializer && is_floating(v->dtype) && !v->consumers.empty()) ++kept;
    say(o, "parameters: training " + human_count(params) + " in " + std::to_string(tg->params.size()) + " tensors" +
               (kept ? " (" + std::to_string(kept) + " float initializer" + (kept == 1 ? "" : "s") + " kept constant: " +
                           (o.trainable.empty() ? "scalars, exponents, bounds" : "not matched by --trainable") +
                           (o.freeze.empty() ? "" : ", --freeze") + ")"
                     : ""));
  }
  for (const auto& u : tg->unused_params) say(o, "notice: parameter '" + u + "' does not reach the loss; it stays as it is");
  const fs::path out_dir = o.out.empty() ? fs::path("runs") / m.stem : fs::path(o.out);
  std::error_code ec;
  if (!o.plan_only && !o.overwrite && !o.resume && leads_run()) {
    // A finished run is not overwritten by accident (rank 0 alone writes the run folder).
    std::string found;
    for (const fs::path& f : {out_dir / (m.stem + ".trained.onnx"), out_dir / "metrics.csv"})
      if (fs::exists(f, ec)) found += (found.empty() ? "" : ", ") + f.filename().string();
    if (!found.empty())
      return fail_run(invalid_input("--out " + out_dir.string() + ": the folder holds a finished run (" + found +
                                    "); add --overwrite to replace it, --resume to continue it, or choose another --out"));
  }
  fs::create_directories(out_dir, ec);
  if (ec) return fail_run(invalid_input("--out " + out_dir.string() + ": cannot create the folder: " + ec.message()));

  PlanFlags pf;
  pf.stages = o.gpus;
  pf.device = device;
  pf.device_specs = o.device_spec;
  pf.link = o.link;
  pf.schedule = o.schedule;
  pf.weights = o.weights;
  pf.optimizer_state_copies = sgd.kind == OptimizerKind::kAdam || sgd.kind == OptimizerKind::kAdamW ? 2 : sgd.nesterov ? 2 : 1;
  pf.micro_batches = o.micro_batches;
  pf.split_at = o.split_at;
  pf.balance = o.balance;
  pf.profile = o.profile;
  pf.whatif = o.whatif;
  pf.out_dir = out_dir.string();
  pf.quiet = o.quiet;
  if (in_job()) {
    set_job_plan_flags(&pf);
  } else if (o.ranks_per_node > 0) {
    for (int k = 0; k < o.gpus; ++k) pf.node_of_stage.push_back(k / o.ranks_per_node);
  }
  auto planned = plan_and_report(m, g, pf);
  if (!planned) return fail_run(planned.status());
  say(o, "reports: " + (out_dir / "partition.{txt,json,html,dot}").string() + ", " + (out_dir / "trace.json").string());
  if (o.plan_only) {
    if (int code = agree_job_start(o, m.hash, planned->plan); code != 0) return code;
    if (!leads_run()) return 0;  // rank 0 writes the run folder
    if (!o.export_stages) return 0;
    Status es = export_plan_stages(m, {}, planned->plan, (out_dir / "stages").string(), o.quiet);
    return es.is_ok() ? 0 : fail_run(es);
  }

  if (!use_cuda) release_zero_state(g);  // the CPU executors start optimizer state at zero themselves
  DataSpec spec;
  Value* in = g.inputs.at(0);
  spec.sample_dims.assign(in->dims.begin() + 1, in->dims.end());
  spec.input_dtype = in->dtype;
  spec.label_dtype = tg->loss.labels->dtype;
  spec.label_sample_dims.assign(tg->loss.labels->dims.begin() + 1, tg->loss.labels->dims.end());
  spec.num_classes = tg->loss.num_classes;
  spec.ignore_index = o.ignore_index;
  spec.input_vocab = token_vocabulary(*in);
  spec.input_name = in->name;
  for (size_t k = 1; k < g.inputs.size(); ++k) {
    const Value* v = g.inputs[k];
    InputSpec is;
    is.name = v->name;
    if (!v->dims.empty()) is.sample_dims.assign(v->dims.begin() + 1, v->dims.end());
    is.dtype = v->dtype;
    is.vocab = token_vocabulary(*v);
    spec.more_inputs.push_back(std::move(is));
  }
  spec.scale_pixels = !o.raw_pixels;
  Dataset train, val;
  if (!leads_run()) {
    // Rank 0 alone reads the data and sends every stage what it reads.
  } else if (o.data == "synthetic") {
    train = synthetic_dataset(spec, std::max<int64_t>(o.batch_size * 16, 512), o.seed);  // said on the first line
  } else {
    auto d = load_dataset(o.data, spec);
    if (!d) return fail_run(d.status().with_context("--data: "));
    train = std::move(*d);
  }
  if (!o.val_data.empty() && leads_run()) {
    auto d = load_dataset(o.val_data, spec);
    if (!d) return fail_run(d.status().with_context("--val-data: "));
    val = std::move(*d);
  } else if (o.val_split > 0 && train.size() > 0) {
    if (train.size() < 2) return fail_run(invalid_input("--val-split: the training set has fewer than 2 samples"));
    val = split_validation(&train, o.val_split, o.seed);
  }
  if (Status ns = normalize_dataset(&train, o.mean, o.std); !ns.is_ok()) return fail_run(ns);
  if (Status ns = normalize_dataset(&val, o.mean, o.std); !ns.is_ok()) return fail_run(ns);
  if (int code = agree_job_start(o, m.hash, planned->plan); code != 0) return code;
  say(o, "data: " + train.source + ", " + std::to_string(train.size()) + " samples" +
             (val.size() ? "; validation: " + val.source + ", " + std::to_string(val.size()) + " samples" : ""));

  TrainConfig tc;
  tc.epochs = o.epochs;
  tc.steps = o.steps;
  tc.lr = o.lr;
  parse_lr_schedule_kind(o.lr_schedule, &tc.lr_schedule.kind);
  tc.lr_schedule.warmup = o.warmup_steps;
  tc.lr_schedule.decay_every = o.lr_decay_every;
  tc.lr_schedule.gamma = o.lr_gamma;
  tc.lr_schedule.power = o.lr_power;
  tc.lr_schedule.min_lr = o.lr_min;
  tc.eval_every = o.eval_every;
  tc.clip_grad_norm = o.clip_grad_norm;
  tc.seed = o.seed;
  tc.shuffle = !o.no_shuffle;
  tc.log_every = o.log_every;
  tc.quiet = o.quiet;
  tc.metrics_path = (out_dir / "metrics.csv").string();
  tc.curves_path = (out_dir / "curves.svg").string();
  if (o.tensorboard) tc.tensorboard_dir = out_dir.string();
  tc.title = m.stem + ": " + tg->loss.description.substr(0, tg->loss.description.find(" on output"));
  tc.checkpoint.dir = (out_dir / "checkpoints").string();
  tc.checkpoint.every = o.checkpoint_every;
  tc.checkpoint.keep = o.keep_checkpoints;
  tc.checkpoint.model_hash = m.hash;
  if (o.resume) {
    fs::path from = o.resume_path.empty() ? fs::path(tc.checkpoint.dir) : fs::path(o.resume_path);
    // A run folder stands for its checkpoints folder.
    if (fs::is_directory(from) && fs::is_directory(from / "checkpoints")) from /= "checkpoints";
    if (!fs::exists(from) && leads_run())  // under MPI rank 0 alone reads it
      return fail_run(invalid_input(
          o.resume_path.empty()
              ? from.string() + ": no checkpoint to resume from (train with --checkpoint-every N first)"
              : "--resume " + o.resume_path + ": no such checkpoint file or folder"));
    tc.checkpoint.resume = from.string();
  }
  std::map<std::string, HostTensor> trained_values;
  std::unique_ptr<PipelineTrainer> pipeline;
  Expected<TrainResult> result = internal_error("not trained");
  if (o.gpus == 1 && !gpipe) {
    auto dev = open_device(device, use_cuda ? job_local_gpu(gpus_here) : 0);
    if (!dev) return fail_run(dev.status());
    auto trainer = Trainer::create(g, *tg, *dev);
    if (!trainer)
      return fail_run(with_batch_hint(trainer.status().with_context(is_out_of_memory(trainer.status()) ? "stage 0: " : ""),
                                      planned->plan, baseline_rss + train.bytes() + val.bytes()));
    if (!use_cuda) release_initial_values(g, {tg->unused_params.begin(), tg->unused_params.end()});
    {
      StopRequests stop;  // Ctrl-C: finish the mini-batch, checkpoint, exit 130
      tc.stop = stop.flag();
      result = (*trainer)->train(train, val.size() ? &val : nullptr, tc);
    }
    if (!result) return fail_run(result.status());
    trained_values = (*trainer)->trained_initializers();
    // Measured stage times beside the predicted ones: the trainer timed its own last steps.
    if (result->fwd_ms + result->bwd_ms > 0) {
      StagePlan& s0 = planned->plan.stages[0];
      s0.measured_fwd_ms = result->fwd_ms;
      s0.measured_bwd_ms = result->bwd_ms;
    }
    planned->plan.stages[0].measured_memory_bytes = static_cast<int64_t>((*trainer)->executor().allocated_bytes().total());
  } else {
    PipelineOptions po;
    po.schedule = gpipe ? Schedule::kGPipe : Schedule::k1F1B;
    po.weights = o.weights == "stash" ? WeightMode::kStash : o.weights == "stale" ? WeightMode::kStale : WeightMode::kSpecTrain;
    po.staleness = o.staleness == "exact" ? Staleness::kExact : Staleness::kPaper;
    po.micro_batches = micro;
    po.threads_per_stage = threads_per_stage(o.gpus);
    po.record_trace = o.trace;
    po.device = device;
    set_job_pipeline(&po, use_cuda, gpus_here, o.oversubscribe);
    auto pipe = PipelineTrainer::create(g, *tg, planned->plan, po);
    if (!pipe)
      return fail_run(with_batch_hint(pipe.status(), planned->plan,
                                      baseline_rss + train.bytes() + val.bytes()));
    if (!use_cuda) release_initial_values(g, {tg->unused_params.begin(), tg->unused_params.end()});
    say(o, std::string("training: ") + (gpipe ? "GPipe, " + std::to_string(micro) + " micro-batches" :
                                                "1F1B, " + o.weights + " weights" +
                                                    (o.weights == "spectrain" ? " (" + o.staleness + " staleness)" : "")) +
               ", " + std::to_string(o.gpus) + " stage" + (o.gpus > 1 ? "s" : ""));
    {
      StopRequests stop;  // Ctrl-C: finish the mini-batches started, drain, checkpoint, exit 130
      tc.stop = stop.flag();
      result = (*pipe)->train(train, val.size() ? &val : nullptr, tc);
    }
    if (!result) return fail_run(result.status());
    if (!leads_run()) return result->interrupted ? kExitInterrupted : 0;  // rank 0 writes the run folder
    trained_values = (*pipe)->trained_initializers();
    for (const StageStats& st : (*pipe)->stage_stats()) {
      char b[256];
      std::snprintf(b, sizeof b, "stage %d: busy %.0f%%, forward %.3f ms, backward %.3f ms per mini-batch", st.stage,
                    100 * st.busy_fraction, st.fwd_ms, st.bwd_ms);
      say(o, b);
      if (st.stage < static_cast<int>(planned->plan.stages.size())) {
        planned->plan.stages[st.stage].measured_fwd_ms = st.fwd_ms;
        planned->plan.stages[st.stage].measured_bwd_ms = st.bwd_ms;
      }
    }
    {
      // Pipeline efficiency: the throughput reached against the bound the slowest stage sets
      // (its measured forward + backward + update time per mini-batch), and the cost model's
      // prediction.
      double slowest = 0;
      int which = 0;
      for (const StageStats& st : (*pipe)->stage_stats()) {
        const double t = st.fwd_ms + st.bwd_ms + st.update_ms;
        if (t > slowest) { slowest = t; which = st.stage; }
      }
      if (slowest > 0 && result->samples_per_s > 0) {
        const double bound = static_cast<double>((*pipe)->samples_per_step()) / (slowest * 1e-3);
        char b[320];
        std::snprintf(b, sizeof b,
                      "pipeline efficiency: %.0f%% of the slowest stage's bound (stage %d, %.3f ms per mini-batch: "
                      "%.0f samples/s); the cost model predicted %.0f samples/s",
                      100 * result->samples_per_s / bound, which, slowest, bound, planned->plan.predicted_samples_per_s);
        say(o, b);
      }
    }
    const std::vector<int64_t> held = (*pipe)->stage_allocated_bytes();
    for (size_t k = 0; k < held.size() && k < planned->plan.stages.size(); ++k)
      planned->plan.stages[k].measured_memory_bytes = held[k];
    pipeline = std::move(*pipe);
  }
  {
    // Memory: each stage's buffers against the plan's model of them, and the process's peak
    // resident set against the stages' sum plus the process baseline and the data sets.
    Plan& p = planned->plan;
    p.baseline_bytes = static_cast<int64_t>(baseline_rss);
    p.data_bytes = static_cast<int64_t>(train.bytes() + val.bytes());
    p.measured_peak_rss_bytes = static_cast<int64_t>(process_peak_rss_bytes());
    int64_t stages_planned = 0;
    char b[256];
    for (const StagePlan& st : p.stages) {
      stages_planned += st.memory_bytes;
      if (st.measured_memory_bytes < 0) continue;
      std::snprintf(b, sizeof b, "memory: stage %d peak %.1f MB, planned %.1f MB", st.index,
                    static_cast<double>(st.measured_memory_bytes) / 1e6, static_cast<double>(st.memory_bytes) / 1e6);
      say(o, b);
    }
    std::snprintf(b, sizeof b, "memory: process peak %.1f MB, planned %.1f MB (stages %.1f MB + data %.1f MB + baseline %.1f MB)",
                  static_cast<double>(p.measured_peak_rss_bytes) / 1e6,
                  static_cast<double>(stages_planned + p.data_bytes + p.baseline_bytes) / 1e6,
                  static_cast<double>(stages_planned) / 1e6, static_cast<double>(p.data_bytes) / 1e6,
                  static_cast<double>(p.baseline_bytes) / 1e6);
    say(o, b);
  }
  // With --trace, trace.json holds the passes as they ran instead of the simulated schedule.
  const bool real_trace = o.trace && pipeline != nullptr;
  if (o.trace) {
    if (!pipeline) {
      say(o, "notice: --trace records pipelined runs; trace.json keeps the simulated schedule of this single-stage run");
    } else if (Status ts = pipeline->write_chrome_trace((out_dir / "trace.json").string()); !ts.is_ok()) {
      return fail_run(ts);
    }
  }
  pipeline.reset();  // the export below needs only the trained values: not the stages, not the data
  train = Dataset{};
  val = Dataset{};
  if (use_cuda) {  // the caching allocators: peak, cached, fragmentation, per GPU this process used
    const int first = in_job() ? job_local_gpu(gpus_here) : 0;
    const int count = in_job() ? 1 : std::min(gpus_here, o.gpus);
    for (int d = first; d < first + count; ++d)
      if (auto dev = open_device(DeviceKind::kCuda, d)) say(o, "memory: " + (*dev)->memory_summary());
  }
  // A loss can stay finite while weights went NaN (Relu maps NaN to 0): never write such a model.
  if (std::string bad = describe_non_finite(trained_values); !bad.empty()) {
    std::string last_good = result->last_checkpoint;
    if (last_good.empty() && !tc.checkpoint.resume.empty()) last_good = tc.checkpoint.resume;
    return fail_run(Status(StatusCode::kDiverged,
                           "training diverged: after step " + std::to_string(result->steps) + " " + bad +
                               "; the trained model was not written" +
                               (last_good.empty() ? " (try a smaller --lr)" : "; the last good checkpoint is in " + last_good)));
  }
  const fs::path trained = out_dir / (m.stem + ".trained.onnx");
  Status st = export_onnx(m, trained_values, trained.string(), ExportMode::kInference);
  if (!st.is_ok()) return fail_run(st);
  const fs::path training_model = out_dir / (m.stem + ".training.onnx");
  if (o.export_training) {
    st = export_onnx(m, trained_values, training_model.string(), ExportMode::kTraining);
    if (!st.is_ok()) return fail_run(st);
  }
  if (o.export_stages) {
    st = export_plan_stages(m, trained_values, planned->plan, (out_dir / "stages").string(), o.quiet);
    if (!st.is_ok()) return fail_run(st);
  }
  // The reports again, with measured stage times and throughput: after the model, so that a full
  // disk or any failure writing them never costs the trained model.
  planned->plan.measured_samples_per_s = result->samples_per_s;
  if (Status rs = rewrite_reports(*planned, g, out_dir.string(), !real_trace); !rs.is_ok()) return fail_run(rs);

  char line[512];
  std::snprintf(line, sizeof line, "done: %lld steps in %.2f s (%.0f samples/s), loss %.4f -> %.4f",
                static_cast<long long>(result->steps), result->seconds, result->samples_per_s, result->first_loss,
                result->last_loss);
  say(o, line);
  if (result->val.samples) {
    if (result->val.accuracy >= 0)
      std::snprintf(line, sizeof line, "validation: loss %.4f, accuracy %.2f%% on %lld samples", result->val.loss,
                    100 * result->val.accuracy, static_cast<long long>(result->val.samples));
    else
      std::snprintf(line, sizeof line, "validation: loss %.4f on %lld samples", result->val.loss,
                    static_cast<long long>(result->val.samples));
    say(o, line);
  }
  say(o, "wrote: " + trained.string() + (o.export_training ? ", " + training_model.string() : "") + ", " +
             (out_dir / "metrics.csv").string() + ", " +
             (out_dir / "curves.svg").string());
  if (!result->last_checkpoint.empty()) say(o, "checkpoint: " + result->last_checkpoint);
  if (result->interrupted) {
    std::fprintf(stderr, "onnx-pipetrain: interrupted at step %lld; wrote %s and the model; continue with --resume\n",
                 static_cast<long long>(result->steps), result->last_checkpoint.c_str());
    return kExitInterrupted;
  }
  return 0;
}

}  // namespace

int main_impl(int argc, char** argv);

namespace {

// --version: this tool's version and those of the libraries it was built with.
std::string version_text() {
  std::string s = std::string("onnx-pipetrain ") + PIPETRAIN_VERSION + "\n";
  s += std::string("  ONNX ") + PIPETRAIN_ONNX_VERSION + "\n";
  s += "  protobuf " + google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION) + "\n";
  s += "  oneDNN " + std::to_string(DNNL_VERSION_MAJOR) + "." + std::to_string(DNNL_VERSION_MINOR) + "." +
       std::to_string(DNNL_VERSION_PATCH) + "\n";
#ifdef PIPETRAIN_CUDA_VERSION
  s += std::string("  CUDA ") + PIPETRAIN_CUDA_VERSION + "\n";
#else
  s += "  CUDA: not built with it\n";
#endif
  s.pop_back();  // CLI11 ends the text with a newline
  return s;
}

// Real-valued flags refuse NaN and infinities (CLI11's ranges compare with < and >, which NaN passes) and
// anything that is not a number, with a message that says so.
CLI::Validator finite() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0') return "Value " + s + " is not a number";
        if (!std::isfinite(v)) return "Value " + s + " is not a finite number";
        return std::string();
      },
      "FINITE", "finite");
}

// Integer flags refuse values beyond 64 bits (CLI11 saturates them) and, for the unsigned --seed,
// negative ones (which would wrap around).
CLI::Validator integer(bool allow_negative = true) {
  return CLI::Validator(
      [allow_negative](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        (void)std::strtoll(s.c_str(), &end, 0);
        if (end == s.c_str() || *end != '\0') return std::string();  // CLI11 says what it is not
        if (errno == ERANGE) return "Value " + s + " is out of range (64-bit integers)";
        if (!allow_negative && s.find('-') != std::string::npos) return "Value " + s + " is negative";
        return std::string();
      },
      "INT", "integer");
}

}  // namespace

int main(int argc, char** argv) {
  pt::ensure_passive_omp_wait(argv);
  return pt::run_job(argc, argv, main_impl);
}

int main_impl(int argc, char** argv) {
  Options o;
  CLI::App app{"onnx-pipetrain: train an ONNX model with pipelined model parallelism (SpecTrain)", "onnx-pipetrain"};
  app.add_option("model", o.model, "the ONNX model to train")->required();
  app.set_version_flag("--version", version_text());
  app.add_option("--gpus", o.gpus, "pipeline stages, one device each")->check(integer())->capture_default_str();
  app.add_option("--device", o.device, "auto | cuda | cpu")->check(CLI::IsMember({"auto", "cuda", "cpu"}))->capture_default_str();
  auto* data_opt = app.add_option("--data", o.data, "x.npy + y.npy folder, MNIST-style IDX (folder or prefix, .gz too), CIFAR-10/100 .bin, or 'synthetic'")->capture_default_str();
  auto* vd = app.add_option("--val-data", o.val_data, "validation set (same formats as --data)");
  app.add_option("--val-split", o.val_split, "hold out this fraction of --data for validation (seeded)")->check(finite())
      ->check(CLI::Range(0.0, 0.9))->excludes(vd);
  app.add_option("--mean", o.mean, "subtract per channel (one value, or one per channel of [C,H,W] inputs), after scaling pixels")->check(finite())->delimiter(',');
  app.add_option("--std", o.std, "divide per channel, after --mean")->check(finite())->delimiter(',');
  app.add_flag("--raw-pixels", o.raw_pixels, "keep integer pixels (IDX, CIFAR, uint8/uint16 x.npy) as 0..255 / 0..65535 instead of scaling to [0, 1]");
  app.add_option("--eval-every", o.eval_every, "also validate every N steps (besides every epoch end)")->check(integer())->check(CLI::PositiveNumber);
  auto* ep = app.add_option("--epochs", o.epochs, "passes over the training set")->check(integer())->check(CLI::PositiveNumber)->capture_default_str();
  auto* sp = app.add_option("--steps", o.steps, "total mini-batch steps (instead of --epochs)")->check(integer())->check(CLI::PositiveNumber);
  ep->excludes(sp);
  app.add_option("--batch-size", o.batch_size, "samples per mini-batch")->check(integer())->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")->check(finite())->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr-schedule", o.lr_schedule, "constant | step | cosine | poly (decay over the run's total steps)")
      ->check(CLI::IsMember({"constant", "step", "cosine", "poly"}))->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "linear warm-up from lr/N to lr over the first N steps")->check(integer())->check(CLI::NonNegativeNumber);
  app.add_option("--lr-decay-every", o.lr_decay_every, "step schedule: multiply the rate by --lr-gamma every N steps")->check(integer())->check(CLI::PositiveNumber);
  app.add_option("--lr-gamma", o.lr_gamma, "step schedule: the decay factor")->check(finite())->capture_default_str();
  app.add_option("--lr-power", o.lr_power, "poly schedule: lr * (1 - progress)^P")->check(finite())->capture_default_str();
  app.add_option("--lr-min", o.lr_min, "cosine and poly schedules: the rate at the last step")->check(finite())->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay, added to the gradient (adamw: decoupled, w -= lr*wd*w each step)")->check(finite())->check(CLI::NonNegativeNumber)->capture_default_str();
  // The optimizer and its flags.
  app.add_option("--optimizer", o.optimizer,
                 "sgd-paper (SpecTrain's v = gamma v + (1 - gamma) g, w -= lr v) | sgd (torch.optim.SGD) | adam "
                 "(torch.optim.Adam) | adamw (torch.optim.AdamW); SpecTrain predicts with each one's own step. --lr: "
                 "sgd-paper's rate is 1/(1-momentum) times torch SGD's; adam/adamw want ~1e-3")
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "sgd-paper: gamma of v = gamma v + (1 - gamma) g; sgd: torch's momentum")->check(finite())
      ->check(CLI::Range(0.0f, 0.999999f))->capture_default_str();
  app.add_option("--dampening", o.dampening, "sgd: torch's dampening")->check(finite())->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "sgd: Nesterov momentum (needs --momentum > 0 and --dampening 0)");
  app.add_option("--beta1", o.beta1, "adam, adamw: decay of the first moment")->check(finite())->check(CLI::Range(0.0f, 0.999999f))->capture_default_str();
  app.add_option("--beta2", o.beta2, "adam, adamw: decay of the second moment")->check(finite())->check(CLI::Range(0.0f, 0.999999f))->capture_default_str();
  app.add_option("--eps", o.eps, "adam, adamw: added to sqrt(v_hat)")->check(finite())->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--clip-grad-norm", o.clip_grad_norm,
                 "scale the gradients by min(1, X/(norm+1e-6)) before each update (torch.nn.utils.clip_grad_norm_): "
                 "the global norm of the mini-batch on one stage and under GPipe (summed across stages); under "
                 "asynchronous 1F1B no update sees every stage's gradient of one mini-batch, so each stage clips by "
                 "its own norm")
      ->check(finite())->check(CLI::NonNegativeNumber);
  app.add_option("--loss", o.loss, "auto | cross-entropy | mse")->check(CLI::IsMember({"auto", "cross-entropy", "mse"}))->capture_default_str();
  app.add_option("--freeze", o.freeze, "initializers kept fixed: names or fnmatch globs such as 'encoder.*' (comma-separated)")->delimiter(',');
  app.add_option("--seed", o.seed, "seed for data order and synthetic data")->check(integer(false))->capture_default_str();
  app.add_option("--out", o.out, "run folder (default ./runs/<model stem>)");
  app.add_option("--log-every", o.log_every, "print the loss every N steps (default: 10 lines per run)")->check(integer());
  app.add_flag("--no-shuffle", o.no_shuffle, "keep the data order (no per-epoch shuffle)");
  app.add_flag("--oversubscribe", o.oversubscribe, "--device cuda: allow more stages than GPUs (several stages share a GPU)");
  app.add_flag("--plan-only", o.plan_only, "partition and write the reports, no training");
  app.add_flag("--export-stages", o.export_stages,
               "also write RUN/stages/stage<k>.onnx, one ONNX model per pipeline stage (boundary tensors as inputs "
               "and outputs), and RUN/stages/stages.json; with --plan-only: the untrained weights");
  app.add_flag("--whatif", o.whatif, "with the plan: predicted throughput, bubble and memory for 1..N devices per scheme");
  app.add_flag("--profile", o.profile, "measure every node on the real device before partitioning (cached in the run folder)");
  app.add_option("--schedule", o.schedule, "1f1b | gpipe")->check(CLI::IsMember({"1f1b", "gpipe"}))->capture_default_str();
  app.add_option("--weights", o.weights, "spectrain | stash | stale")->check(CLI::IsMember({"spectrain", "stash", "stale"}))->capture_default_str();
  auto* mb = app.add_option("--micro-batches", o.micro_batches, "GPipe: micro-batches per mini-batch")->check(integer())->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--spectrain-staleness", o.staleness, "paper: s_fwd = floor(k/2) + N-k-1, s_bwd = floor(k/2); exact: N-k-1 and 0")
      ->check(CLI::IsMember({"paper", "exact"}))->capture_default_str();
  app.add_flag("--trace", o.trace, "write every stage's forward and backward passes (mini-batch, weight version, staleness) to trace.json");
  app.add_option("--device-spec", o.device_spec, "device per stage: a built-in GPU (H100, H200, A100, V100, RTX3090, RTX4090, GTX1080Ti) or a JSON file; one for all or one per stage")->delimiter(',');
  app.add_option("--link", o.link, "link between stages: pcie3|pcie4|pcie5|nvlink2|nvlink3|nvlink4|host|network (default: host for CPU stages, pcie4 for GPUs)");
  app.add_option("--ranks-per-node", o.ranks_per_node,
                 "with --plan-only: plan a multi-node job, R stages per node (cuts between nodes use the network "
                 "link); under mpirun/srun the nodes come from the job")->check(integer())
      ->check(CLI::PositiveNumber);
  app.add_option("--split-at", o.split_at, "manual plan: the first node of stages 1..N-1 (comma-separated)")->delimiter(',');
  app.add_option("--balance", o.balance, "manual plan: forward nodes per stage, e.g. 3,5,4")->delimiter(',');
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "write RUN/checkpoints/step-<k>.ckpt every N steps and after the last (pipelined runs drain there)")->check(integer())
      ->check(CLI::PositiveNumber);
  app.add_option("--keep-checkpoints", o.keep_checkpoints, "keep the newest K checkpoints")->check(integer())
      ->check(CLI::PositiveNumber)->capture_default_str();
  auto* resume = app.add_option("--resume", o.resume_path,
                                "continue from the newest intact checkpoint of the run folder, or from PATH (a .ckpt "
                                "file or a folder); --steps/--epochs stay totals; write --resume=PATH before the model")
                     ->expected(0, 1)->type_name("[PATH]");
  app.add_flag("--quiet", o.quiet, "print errors only");
  // ---- trainer-ux flags (exports, parameters, run folder, data, TensorBoard) ----
  app.add_flag("--overwrite", o.overwrite,
               "train into a run folder that holds a finished run (a trained model or metrics.csv), replacing it; "
               "without it such a folder is refused");
  app.add_option("--trainable", o.trainable,
                 "train only the float initializers matching these names or fnmatch globs (comma-separated; default: "
                 "the weights: rank >= 1 and feeding the data path, never scalars, exponents, epsilons, clip bounds)")
      ->delimiter(',');
  app.add_flag("--tensorboard", o.tensorboard,
               "also write the metrics (train/loss, train/lr, train/samples_per_s, val/loss, val/accuracy) as a "
               "TensorBoard event file into the run folder (tensorboard --logdir RUN)");
  app.add_option("--ignore-index", o.ignore_index,
                 "cross-entropy: labels equal to this count for nothing (token-level labels [N, T] of sequence "
                 "outputs [N, T, V] or [N*T, V]; padding)")->check(integer())->capture_default_str();
  app.add_flag("--export-training", o.export_training,
               "also write RUN/<stem>.training.onnx: the trained weights in the source's training-mode graph "
               "(BatchNorm on batch statistics, Dropout on); <stem>.trained.onnx is always the inference model");
  app.footer("Ctrl-C (SIGINT) or SIGTERM (how Slurm, Kubernetes and docker stop a job) stops a run at the next mini-batch boundary (pipelined runs: after the mini-batches "
             "already started), writes a checkpoint and the trained model, and exits 130. Under mpirun: kill -USR1 "
             "<mpirun's pid> (mpirun exits 130), or Ctrl-C (mpirun sends SIGTERM, then SIGKILL after "
             "--mca odls_base_sigkill_timeout seconds, 1 by default, and exits 1).\nExit codes: 0 done, 1 internal error, 2 bad input or usage (also a refused "
             "resume), 3 diverged (a non-finite loss, or weights that went non-finite: no model is written, the newest "
             "checkpoint is the last good one), 130 stopped by SIGINT or SIGTERM.");
  try {
    app.parse(argc, argv);
    o.micro_batches_given = mb->count() > 0;
    o.resume = resume->count() > 0;
    for (const char* f : {"--momentum", "--dampening", "--nesterov", "--beta1", "--beta2", "--eps"})
      if (app.count(f) > 0) o.optimizer_flags.push_back(f);
    o.data_given = data_opt->count() > 0;
    if (o.overwrite && o.resume) throw CLI::ExcludesError("--overwrite", "--resume");
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (pt::leads_run()) {
      std::fprintf(stderr, "onnx-pipetrain: error: %s\n", e.what());
      std::fprintf(stderr, "run 'onnx-pipetrain --help' for the flags\n");
    }
    return 2;
  }
  if (!pt::leads_run()) o.quiet = true;  // rank 0 prints progress and reports
  try {
    return run(o);
  } catch (const std::exception& e) {
    if (pt::in_job()) return pt::fail_run(pt::internal_error(e.what()));
    std::fprintf(stderr, "onnx-pipetrain: internal error: %s\n", e.what());
    return 1;
  }
}
