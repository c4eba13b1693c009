// The library entry point of a training run (tools/run_training.h), as a sequence of phases with
// typed hand-overs: check the spec and choose the devices; import the model and build its
// training graph; open the run folder; plan and report; open the data; configure the loop; train
// on one stage or a pipeline; account memory; check, export and report. Prints progress unless
// the spec is quiet.
#include "tools/run_training.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/cores.h"
#include "core/file.h"
#include "importer/fuse.h"
#include "importer/importer.h"
#include "importer/training.h"
#include "kernels/cpu_features.h"
#include "kernels/device.h"
#include "partitioner/plan.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/data.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/memory.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/single/trainer.h"
#include "tools/omp_env.h"
#include "tools/plan_step.h"

namespace fs = std::filesystem;

namespace pt {

namespace {

constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report a run stopped by Ctrl-C

void say(const TrainingSpec& s, const std::string& line) {
  // --replicas auto's first pass only chooses the layout (its "layout:" line); the run that
  // trains the chosen layout says the rest.
  if (!s.local.quiet && !s.replicas_auto) std::printf("%s\n", line.c_str());
}

std::string human_count(int64_t n) {
  char b[32];
  if (n >= 1000000) std::snprintf(b, sizeof b, "%.2fM", n / 1e6);
  else if (n >= 1000) std::snprintf(b, sizeof b, "%.1fk", n / 1e3);
  else std::snprintf(b, sizeof b, "%lld", static_cast<long long>(n));
  return b;
}

std::string plural(int64_t n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

// ---- Phase 1: the spec's bounds, the optimizer and the devices ----------------------------------

// The optimizer of --optimizer and its flags; a flag that does not apply to it is refused.
Expected<SgdOptions> optimizer_options(const TrainingSpec& o) {
  const OptimizerKind kind = o.optimizer;
  auto applies = [&](const std::string& f) {
    if (f == "--momentum") return kind == OptimizerKind::kSgdPaper || kind == OptimizerKind::kSgd;
    if (f == "--dampening" || f == "--nesterov") return kind == OptimizerKind::kSgd;
    return kind == OptimizerKind::kAdam || kind == OptimizerKind::kAdamW;  // --beta1, --beta2, --eps
  };
  for (const std::string& f : o.optimizer_flags)
    if (!applies(f)) return invalid_input(f + ": does not apply to --optimizer " + std::string(optimizer_name(o.optimizer)));
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

// Bounds that keep the per-stage and per-sample arithmetic far from overflow, and the stage
// count against the MPI job.
Status check_bounds(const TrainingSpec& o, const MpiJob& job) {
  if (o.gpus < 1) return invalid_input("--gpus " + std::to_string(o.gpus) + ": must be at least 1");
  if (o.gpus > 4096) return invalid_input("--gpus " + std::to_string(o.gpus) + ": at most 4096 pipeline stages");
  if (o.batch.mini_batch > (int64_t{1} << 31) - 1)
    return invalid_input("--batch-size " + std::to_string(o.batch.mini_batch) + ": at most 2147483647 samples");
  if (o.replicas < 1) return invalid_input("--replicas " + std::to_string(o.replicas) + ": must be at least 1");
  if (o.replicas > 4096 || int64_t{o.gpus} * o.replicas > 4096)
    return invalid_input("--gpus " + std::to_string(o.gpus) + " x --replicas " + std::to_string(o.replicas) +
                         ": at most 4096 devices");
  // A learning-rate flag of another schedule would be ignored: refused, as the optimizer's are.
  for (const std::string& f : o.local.schedule_flags) {
    const LrSchedule::Kind k = o.lr_schedule;
    const bool applies = (f == "--lr-decay-every" || f == "--lr-gamma") ? k == LrSchedule::Kind::kStep
                         : f == "--lr-power"                          ? k == LrSchedule::Kind::kPoly
                                                                       : k == LrSchedule::Kind::kCosine || k == LrSchedule::Kind::kPoly;
    if (!applies)
      return invalid_input(f + ": does not apply to --lr-schedule " + lr_schedule_name(k) + " (" +
                           (f == "--lr-min" ? "cosine and poly use it" : f == "--lr-power" ? "poly uses it" : "step uses it") + ")");
  }
  // --ranks-per-node describes the nodes of a job: one process has one node.
  if (o.ranks_per_node > 0 && !o.plan_only && !job.in_job())
    return invalid_input("--ranks-per-node " + std::to_string(o.ranks_per_node) +
                         ": plans a job across nodes; use it with --plan-only, or start the ranks with mpirun or srun");
  if (o.calibrate && !o.device_spec.empty())
    return invalid_input("--calibrate: the devices are described by --device-spec, so there is no device here to measure");
  if (o.calibrate && o.device == DeviceChoice::kCuda && !cuda_available())
    return invalid_input("--calibrate --device cuda: no GPU to measure (" + cuda_unavailable_reason() + ")");
  RETURN_IF_ERROR(job.check_stages(o.gpus, o.replicas));
  return job.check_ranks_per_node(o.ranks_per_node, int64_t{o.gpus} * o.replicas);
}

// Where the stages run.
struct Devices {
  DeviceKind kind = DeviceKind::kCpu;
  bool cuda = false;
  int gpus_here = 0;    // CUDA devices of this machine
  int gpus_needed = 0;  // one per stage (under MPI: per rank of this node)
};

// CUDA stages when asked for (or, with auto, when there is a GPU per stage: under MPI a GPU per
// rank of this node), CPU stages otherwise. Stage k uses GPU k; under MPI, the GPU of its local
// rank; --oversubscribe wraps several stages onto fewer GPUs. A precision the device cannot serve
// is refused here, before any work.
Expected<Devices> choose_devices(const TrainingSpec& o, const MpiJob& job) {
  Devices d;
  d.gpus_here = cuda_device_count();
  d.gpus_needed = job.cuda_devices_needed(o.gpus * o.replicas);
  const int here = d.gpus_here;
  if (o.device == DeviceChoice::kCuda && !o.plan_only && (here == 0 || (here < d.gpus_needed && !o.oversubscribe)))
    return invalid_input("--gpus " + std::to_string(o.gpus) + ": this machine has " + plural(here, "CUDA device") +
                         (job.in_job() ? " for " + std::to_string(d.gpus_needed) + " ranks on this node" : "") +
                         (here > 0 ? "; add --oversubscribe to place several stages on one GPU"
                                   : ": " + cuda_unavailable_reason()));
  d.cuda = o.device == DeviceChoice::kCuda || (o.device == DeviceChoice::kAuto && here >= d.gpus_needed && here > 0);
  d.kind = d.cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
  // --precision bf16 needs bfloat16 GEMM/convolution kernels on the stages' device: CUDA's (cuBLAS
  // and widened cuDNN convolutions on tensor cores) or a CPU with bfloat16 instructions.
  if (o.precision == Precision::kBf16 && !o.plan_only && !d.cuda) {
    if (!cpu_has_bf16())
      return invalid_input("--precision bf16: the CPU (" + cpu_model_name() + ", oneDNN ISA " + cpu_isa_name() +
                           ") lacks avx512_bf16/AMX, which bfloat16 GEMMs and convolutions need; use --precision fp32");
  }
  // bf16 and tf32 products on CUDA need the tensor cores of compute capability 8.0 (Ampere) on.
  if (d.cuda && !o.plan_only && (o.precision == Precision::kBf16 || o.precision == Precision::kTf32))
    for (int k = 0; k < std::min(here, o.gpus * o.replicas); ++k)
      if (const int cc = cuda_compute_capability(k); cc > 0 && cc < 80)
        return invalid_input(std::string("--precision ") + precision_name(o.precision) + ": CUDA device " +
                             std::to_string(k) + " (" + cuda_device_name(k) + ", compute capability " +
                             std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ") has no " +
                             (o.precision == Precision::kBf16 ? "bfloat16" : "TF32") +
                             " tensor cores (compute capability 8.0 or later); use --precision fp32");
  // --precision tf32 needs TF32 tensor cores: CUDA's, never the CPU's.
  if (o.precision == Precision::kTf32 && !d.cuda && !o.plan_only)
    return invalid_input("--precision tf32: the stages run on the CPU (" + cpu_model_name() +
                         "), which has no TF32 tensor cores; use --device cuda on a GPU, or --precision fp32");
  // --no-cuda-graphs turns off what only CUDA stages do.
  if (!o.cuda_graphs && !d.cuda && !o.plan_only)
    return invalid_input("--no-cuda-graphs: the stages run on the CPU (" + cpu_model_name() +
                         "), which has no CUDA graphs to turn off; drop the flag, or use --device cuda on a GPU");
  if (o.device == DeviceChoice::kAuto && !o.plan_only)
    say(o, "notice: " + std::to_string(o.gpus) + (d.cuda ? " CUDA" : " CPU") + " stage" + (o.gpus > 1 ? "s" : "") +
               (d.cuda ? "" : " (" + (here > 0 ? plural(here, "CUDA device") + " for " + std::to_string(d.gpus_needed) +
                                                    " stages; --device cuda --oversubscribe shares them"
                                              : cuda_unavailable_reason()) + ")"));
  if (!d.cuda && !o.plan_only)
    say(o, "threads: " + std::to_string(job.threads_per_stage(o.gpus * o.replicas)) + " per CPU stage; idle OpenMP " +
               "threads: " + omp_wait_description());
  return d;
}

// ---- Phase 2: the model and its training graph --------------------------------------------------

Expected<StepBatch> run_batch(const TrainingSpec& o) {
  const bool sync = micro_batched(o.schedule, o.weights);
  if (!sync && o.batch.micro_batches_given && o.batch.micro_batches != 1)
    return invalid_input("--micro-batches " + std::to_string(o.batch.micro_batches) +
                         ": micro-batches need a synchronous schedule (--schedule gpipe or zb-h1, or --weights sync) or --weights 2bw");
  StepBatch b{o.batch.mini_batch, sync ? o.batch.micro_batches : 1, o.replicas};  // the graph holds b.pass()
  // Each replica runs its share of the mini-batch (in micro-batches under GPipe).
  const int64_t passes = int64_t{b.micro} * b.replicas;
  if (b.mini % passes != 0)
    return invalid_input("--batch-size " + std::to_string(b.mini) + " is not a multiple of " +
                         (b.replicas > 1 ? "--replicas " + std::to_string(b.replicas) +
                                               (b.micro > 1 ? " x --micro-batches " + std::to_string(b.micro) + " = " +
                                                                  std::to_string(passes)
                                                            : "")
                                         : "--micro-batches " + std::to_string(b.micro)));
  return b;
}

struct Model {
  ImportedModel m;
  TrainingGraph tg;
  StepBatch batch;            // the step's: --batch-size, or the graph's fixed batch dimension
  bool update_fusion = true;  // --no-fusion update not given
  size_t baseline_rss = 0;    // the process before the import (the memory report's baseline)
  Graph& g() { return *m.graph; }
};

// "parameters: training 6.6k in 6 tensors (...)": what trains, and how many float initializers
// stay as they are (scalars, exponents, epsilons, bounds; --freeze; --trainable).
std::string parameters_line(const TrainingSpec& o, Model& md) {
  int64_t params = 0;
  for (Value* p : md.tg.params) params += p->size();
  int64_t kept = md.m.fused.absorbed_constants;
  for (Value* v : md.g().values_of_kind(ValueKind::kConstant))
    if (v->from_initializer && is_floating(v->dtype) && !v->consumers.empty()) ++kept;
  return "parameters: training " + human_count(params) + " in " + std::to_string(md.tg.params.size()) + " tensors" +
         (kept ? " (" + plural(kept, "float initializer") + " kept constant: " +
                     (o.trainable.empty() ? "scalars, exponents, bounds" : "not matched by --trainable") +
                     (o.freeze.empty() ? "" : ", --freeze") + ")"
               : "");
}

Expected<Model> import_model(const TrainingSpec& o, const Devices& dev, const SgdOptions& sgd) {
  Model md;
  ASSIGN_OR_RETURN(md.batch, run_batch(o));
  ImportOptions io;
  io.batch_size = md.batch.pass();  // GPipe builds the graph for one micro-batch
  io.device = dev.kind;
  io.freeze = o.freeze;
  io.trainable = o.trainable;
  io.seed = o.seed;
  RETURN_IF_ERROR(disable_fusions(o.no_fusion, &io.fuse));
  md.update_fusion = io.fuse.update;
  // A node --split-at names starts a stage: the epilogue pass leaves it a node of its own.
  io.fuse.keep.insert(o.split_at.begin(), o.split_at.end());
  md.baseline_rss = process_rss_bytes();
  ASSIGN_OR_RETURN(md.m, import_onnx(o.model, io));
  const ImportedModel& m = md.m;
  Graph& g = md.g();
  say(o, "model: " + o.model + " (opset " + std::to_string(m.source_opset) +
             (m.converted ? ", converted to " + std::to_string(g.opset) : "") +
             (m.producer.empty() ? "" : ", from " + m.producer) + "), " + std::to_string(g.nodes().size()) + " nodes");
  if (m.fused.rewrites > 0)  // the node count above is the fused graph's
    say(o, "fusions: " + std::to_string(m.fused.layernorm) + " LayerNorm, " + std::to_string(m.fused.attention) +
               " attention, " + std::to_string(m.fused.gelu) + " GELU, " + std::to_string(m.fused.dropout) +
               " identity Dropout removed, " + std::to_string(m.fused.epilogue) +
               " bias/activation epilogues (--no-fusion layernorm,attention,gelu,dropout,epilogue turns them off)");
  // Training reads whole samples: an input with no elements (a batch dimension fixed at 0) has
  // nothing to learn from (and would divide by zero in the epoch arithmetic).
  for (const Value* in : g.inputs) {
    if (in->dims.empty())
      return invalid_input(o.model + ": graph input '" + in->name + "' is a scalar ([]); a data input's first "
                           "dimension is the batch");
    for (size_t d = 0; d < in->dims.size(); ++d)
      if (in->dims[d] <= 0)
        return invalid_input(o.model + ": graph input '" + in->name + "' dimension " + std::to_string(d) + " is " +
                             std::to_string(in->dims[d]) + "; every dimension of a data input must be at least 1" +
                             (d == 0 ? " (make the batch dimension symbolic, or fix it at the --batch-size)" : ""));
  }
  if (!g.inputs.empty() && !g.inputs[0]->dims.empty() && g.inputs[0]->dims[0] != io.batch_size) {
    say(o, "notice: the model's batch dimension is fixed at " + std::to_string(g.inputs[0]->dims[0]) +
               "; training with batches of that size (--batch-size " + std::to_string(o.batch.mini_batch) + " ignored)");
    md.batch.mini = g.inputs[0]->dims[0] * md.batch.micro * md.batch.replicas;  // from here on the run's batch
  }
  // A NaN in a weight would surface as a divergence after the first step; it is the model file's.
  // (PIPETRAIN_TEST_NAN_WEIGHTS=1, for the tests of the divergence guard, lets such a model train.)
  const char* nan_ok = std::getenv("PIPETRAIN_TEST_NAN_WEIGHTS");
  for (const Value* v : g.values_of_kind(ValueKind::kParameter)) {
    if (nan_ok && std::string(nan_ok) == "1") break;
    if (!v->data || v->data->dtype() != DType::kFloat32) continue;
    const float* p = v->data->as<float>();
    for (int64_t i = 0; i < v->data->size(); ++i)
      if (std::isnan(p[i]))
        return invalid_input(o.model + ": initializer '" + v->name + "' holds NaN (element " + std::to_string(i) +
                             " of " + std::to_string(v->data->size()) + "); the model's weights must be numbers");
  }
  auto tg = build_training_graph(g, o.loss, sgd, o.ignore_index, o.loss_output);
  if (!tg) return tg.status().with_context(o.model + ": ");
  md.tg = std::move(*tg);
  if (o.precision == Precision::kBf16) {
    const PrecisionStats ps = apply_precision(g, o.precision);
    say(o, std::string("precision: ") + precision_name(o.precision) + ", " + std::to_string(ps.products) +
               " GEMM/convolution nodes read bfloat16 copies made by " + std::to_string(ps.casts) + " Cast nodes" +
               (ps.relu_grads ? " (and " + std::to_string(ps.relu_grads) + " ReluGrad)" : std::string()) +
               "; weights, gradients, optimizer state and accumulation float32");
  }
  say(o, "loss: " + md.tg.loss.description);
  say(o, parameters_line(o, md));
  for (const auto& u : md.tg.unused_params) say(o, "notice: parameter '" + u + "' does not reach the loss; it stays as it is");
  return md;
}

// ---- Phase 3: the run folder ---------------------------------------------------------------------

// Whether a metrics.csv holds a step's row (a run that failed before its first step leaves the
// header alone, and its folder is not a finished run).
bool metrics_has_rows(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (lines < 2 && std::getline(in, line))
    if (!line.empty()) ++lines;
  return lines >= 2;
}

// The run folder, created; a finished run is not overwritten by accident (rank 0 alone writes it).
Expected<fs::path> open_run_folder(const TrainingSpec& o, const ImportedModel& m, const MpiJob& job, bool* created) {
  const fs::path out_dir = o.local.out.empty() ? fs::path("runs") / m.stem : fs::path(o.local.out);
  std::error_code ec;
  *created = !fs::exists(out_dir, ec);
  if (!o.plan_only && !o.local.overwrite && !o.resume && job.leads_run()) {
    std::string found;
    if (fs::exists(out_dir / (m.stem + ".trained.onnx"), ec)) found = m.stem + ".trained.onnx";
    if (metrics_has_rows(out_dir / "metrics.csv")) found += (found.empty() ? "" : ", ") + std::string("metrics.csv");
    if (!found.empty())
      return invalid_input("--out " + out_dir.string() + ": the folder holds a finished run (" + found +
                           "); add --overwrite to replace it, --resume to continue it, or choose another --out");
  }
  fs::create_directories(out_dir, ec);
  if (ec) return invalid_input("--out " + out_dir.string() + ": cannot create the folder: " + ec.message());
  if (!o.plan_only && o.local.overwrite && !o.resume && job.leads_run()) {
    // Replacing a run: what would make the folder look finished or be resumed from goes first (a
    // failure before this run's first checkpoint must not leave the old run's to --resume, nor
    // may the old run's later steps outrank this run's checkpoints when they are pruned).
    int removed = 0;
    for (const std::string& c : list_checkpoints((out_dir / "checkpoints").string()))
      if (fs::remove(c, ec)) ++removed;
    std::string what = removed ? plural(removed, "checkpoint") : "";
    for (const fs::path& f : {out_dir / (m.stem + ".trained.onnx"), out_dir / "metrics.csv"})
      if (fs::remove(f, ec)) what += (what.empty() ? "" : ", ") + f.filename().string();
    if (!what.empty()) say(o, "notice: --overwrite: removed the previous run's " + what);
  }
  return out_dir;
}

// ---- Phase 4: the plan -----------------------------------------------------------------------------

// The planning step's flags from the spec. `layouts`: those --replicas auto chose from.
PlanFlags plan_flags(const TrainingSpec& o, const Model& md, const Devices& dev, const fs::path& out_dir,
                     const std::vector<LayoutOption>* layouts, MpiJob& job) {
  PlanFlags pf;
  pf.stages = o.gpus;
  pf.replicas = o.replicas;        // --replicas auto: 1 here (the layouts are chosen from this plan)
  pf.graph_replicas = o.replicas;  // the graph was imported at the replica's share of the mini-batch
  if (layouts) pf.layouts = *layouts;
  pf.device = dev.kind;
  pf.device_specs = o.device_spec;
  pf.link = o.link;
  pf.replica_link = o.replica_link;
  pf.network_link = o.network_link;
  pf.schedule = o.schedule;
  pf.weights = o.weights;
  pf.recompute = o.recompute;
  const bool two_states = o.optimizer == OptimizerKind::kAdam || o.optimizer == OptimizerKind::kAdamW || o.nesterov;
  pf.optimizer_state_copies = two_states ? 2 : 1;
  pf.micro_batches = o.batch.micro_batches;
  pf.virtual_stages = o.schedule == Schedule::kInterleaved || o.schedule == Schedule::kZBV ? o.virtual_stages : 1;
  pf.staleness = o.staleness;
  // The update inside the backward (--no-fusion update turns it off); clipping needs every gradient.
  pf.update_in_backward = md.update_fusion && !(o.clip_grad_norm > 0);
  pf.split_at = o.split_at;
  pf.balance = o.balance;
  pf.profile = o.profile;
  pf.calibrate = !o.no_calibrate;
  pf.recalibrate = o.calibrate;
  pf.whatif = o.whatif;
  pf.out_dir = out_dir.string();
  pf.quiet = o.local.quiet;
  if (job.in_job()) {
    job.set_plan_flags(&pf);
  } else if (o.ranks_per_node > 0) {
    for (int k = 0; k < o.gpus; ++k) pf.node_of_stage.push_back(k / o.ranks_per_node);
  }
  return pf;
}

// ---- Phase 5: the data -------------------------------------------------------------------------------

// The vocabulary of an integer input: the rows of the embedding the Gather that reads it indexes
// (through Cast / Identity / Reshape-like nodes); 0 when no Gather reads it.
int64_t token_vocabulary(const Value& input) {
  std::vector<const Value*> todo{&input};
  for (size_t k = 0; k < todo.size() && k < 64; ++k)
    for (const Node* n : todo[k]->consumers) {
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

// What the data must hold for this model: sample shapes and dtypes of every input and the labels.
DataSpec data_spec(const TrainingSpec& o, const Graph& g, const TrainingGraph& tg) {
  DataSpec spec;
  const Value* in = g.inputs.at(0);
  spec.sample_dims.assign(in->dims.begin() + 1, in->dims.end());
  spec.input_dtype = in->dtype;
  spec.label_dtype = tg.loss.labels->dtype;
  spec.label_sample_dims.assign(tg.loss.labels->dims.begin() + 1, tg.loss.labels->dims.end());
  spec.num_classes = tg.loss.num_classes;
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
  return spec;
}

struct Data {
  Dataset train, val;
  // The sets (a stream: what it keeps resident) and the shuffled order of the training set, of
  // which the training loop and the batch prefetcher each keep a copy.
  size_t bytes() const { return train.bytes() + val.bytes() + 2 * static_cast<size_t>(train.size()) * sizeof(int64_t); }
};

LoadOptions load_options(const TrainingSpec& o, bool cuda) {
  LoadOptions lo;
  const std::string& sd = o.local.stream_data;
  lo.stream = sd == "always" ? LoadOptions::Stream::kAlways : sd == "never" ? LoadOptions::Stream::kNever : LoadOptions::Stream::kAuto;
  for (const std::string& a : o.local.augment) {
    lo.crop |= a == "crop";
    lo.flip |= a == "flip";
  }
  lo.skip_bad = o.local.on_bad_sample == "skip";
  lo.tokenizer = o.local.tokenizer;
  lo.token_dtype = o.local.token_dtype == "uint32" ? DType::kUint32 : DType::kUint16;
  // Auto: CPU stages take every core (threads per stage x stages = cores), so one thread gathers
  // (the prefetching thread itself, sharing the cores); CUDA stages keep one host thread each,
  // and the loader takes the other cores.
  const int cores = usable_cores();
  lo.loader_threads = o.local.loader_threads > 0 ? o.local.loader_threads
                      : cuda                     ? std::max(1, cores - o.gpus * o.replicas)
                                                 : 1;
  lo.seed = o.seed;
  return lo;
}

// The training and validation sets (rank 0 alone reads them and sends every stage what it reads),
// normalised.
Expected<Data> open_data(const TrainingSpec& o, const Model& md, bool cuda, const MpiJob& job) {
  const DataSpec spec = data_spec(o, *md.m.graph, md.tg);
  Data d;
  const LoadOptions lo = load_options(o, cuda);
  if (!job.leads_run()) {
    // The followers receive their batches from rank 0.
  } else if (o.local.data == "synthetic") {
    const int64_t n = std::max<int64_t>(o.batch.mini_batch * 16, 512);
    try {
      d.train = synthetic_dataset(spec, n, o.seed);  // said on the first line
    } catch (const std::bad_alloc&) {
      const double bytes = static_cast<double>(n) * static_cast<double>(numel(spec.sample_dims)) *
                           static_cast<double>(dtype_size(spec.input_dtype));
      char gb[32];
      std::snprintf(gb, sizeof gb, "%.1f", bytes / 1e9);
      return invalid_input("--data synthetic: " + std::to_string(n) + " samples of input '" + spec.input_name + "' " +
                           dims_str(spec.sample_dims) + " " + dtype_name(spec.input_dtype) + " take " + gb +
                           " GB, which does not fit in memory");
    }
  } else {
    auto t = load_dataset(o.local.data, spec, lo);
    if (!t) return t.status().with_context("--data: ");
    d.train = std::move(*t);
  }
  if ((lo.crop || lo.flip) && job.leads_run() && d.train.classes.empty())
    return invalid_input("--augment: crops and flips apply to image folders; --data " + o.local.data + " is not one");
  if (!o.local.val_data.empty() && job.leads_run()) {
    LoadOptions vo = lo;
    vo.crop = vo.flip = false;  // validation images are resized, never augmented
    auto v = load_dataset(o.local.val_data, spec, vo);
    if (!v) return v.status().with_context("--val-data: ");
    if (!v->classes.empty() && !d.train.classes.empty() && v->classes != d.train.classes)
      return invalid_input("--val-data " + o.local.val_data + ": its classes differ from --data's (" +
                           std::to_string(v->classes.size()) + " and " + std::to_string(d.train.classes.size()) +
                           " folders, or other names): the labels would not match");
    d.val = std::move(*v);
  } else if (o.val_split > 0 && d.train.size() > 0) {
    if (d.train.size() < 2) return invalid_input("--val-split: the training set has fewer than 2 samples");
    d.val = split_validation(&d.train, o.val_split, o.seed);
    if (d.val.size() == 0) {
      char b[96];
      std::snprintf(b, sizeof b, "--val-split %g: of %lld samples, no validation sample (%g is one)", o.val_split,
                    static_cast<long long>(d.train.size()), 1.0 / static_cast<double>(d.train.size()));
      return invalid_input(b);
    }
  }
  if (job.leads_run() && o.local.eval_every_given && d.val.size() == 0)
    say(o, "notice: --eval-every: there is no validation set (--val-data or --val-split), so nothing is validated");
  // A step takes a whole mini-batch of distinct samples, after --val-split (an epoch is floor(samples / batch) steps).
  if (job.leads_run() && d.train.size() < md.batch.mini)
    return invalid_input("--batch-size " + std::to_string(md.batch.mini) + ": the training set (" + d.train.source +
                         ") has " + std::to_string(d.train.size()) + " samples, fewer than one mini-batch");
  RETURN_IF_ERROR(normalize_dataset(&d.train, o.mean, o.std));
  RETURN_IF_ERROR(normalize_dataset(&d.val, o.mean, o.std));
  return d;
}

// An image folder's classes, one per line in label order, as RUN/classes.txt.
Status write_classes(const Data& d, const fs::path& out_dir, const MpiJob& job) {
  if (d.train.classes.empty() || !job.leads_run()) return Status::ok();
  std::string text;
  for (const std::string& c : d.train.classes) text += c + "\n";
  return write_file_atomic((out_dir / "classes.txt").string(), text);
}

// ---- Phase 6: the training loop's configuration ----------------------------------------------------

Expected<TrainConfig> training_config(const TrainingSpec& o, const Model& md, const fs::path& out_dir, const MpiJob& job) {
  TrainConfig tc;
  tc.batch = md.batch;
  tc.epochs = o.epochs;
  tc.steps = o.steps;
  tc.lr = o.lr;
  tc.lr_schedule.kind = o.lr_schedule;
  tc.lr_schedule.warmup = o.warmup_steps;
  tc.lr_schedule.decay_every = o.lr_decay_every;
  tc.lr_schedule.gamma = o.lr_gamma;
  tc.lr_schedule.power = o.lr_power;
  tc.lr_schedule.min_lr = o.lr_min;
  tc.eval_every = o.eval_every;
  tc.clip_grad_norm = o.clip_grad_norm;
  tc.seed = o.seed;
  tc.shuffle = !o.no_shuffle;
  tc.log_every = o.local.log_every;
  tc.quiet = o.local.quiet;
  tc.metrics_path = (out_dir / "metrics.csv").string();
  tc.curves_path = (out_dir / "curves.svg").string();
  if (o.local.tensorboard) tc.tensorboard_dir = out_dir.string();
  const std::string& loss = md.tg.loss.description;
  tc.title = md.m.stem + ": " + loss.substr(0, loss.find(" on output"));
  tc.checkpoint.dir = (out_dir / "checkpoints").string();
  tc.checkpoint.every = o.checkpoint_every;
  tc.checkpoint.keep = o.local.keep_checkpoints;
  tc.checkpoint.model_hash = md.m.hash;
  if (o.resume) {
    fs::path from = o.local.resume_path.empty() ? fs::path(tc.checkpoint.dir) : fs::path(o.local.resume_path);
    // A run folder stands for its checkpoints folder.
    if (fs::is_directory(from) && fs::is_directory(from / "checkpoints")) from /= "checkpoints";
    if (!fs::exists(from) && job.leads_run())  // under MPI rank 0 alone reads it
      return invalid_input(o.local.resume_path.empty()
                               ? from.string() + ": no checkpoint to resume from (train with --checkpoint-every N first)"
                               : "--resume " + o.local.resume_path + ": no such checkpoint file or folder");
    tc.checkpoint.resume = from.string();
  }
  return tc;
}

// ---- Phase 7: training ---------------------------------------------------------------------------

// What training gives the later phases: the result, the trained values (moved out of the stages),
// the pipeline when there was one (for its trace), and each stage's memory plan aliases (copies
// not run, and the bytes they would take).
struct Trained {
  TrainResult result;
  std::map<std::string, HostTensor> values;
  std::unique_ptr<PipelineTrainer> pipeline;
  std::vector<std::pair<size_t, size_t>> aliased;
};

// One stage, one pass per step: the single-stage trainer (1F1B of one stage, synchronous or not).
bool runs_one_stage(const TrainingSpec& o) {
  return o.gpus == 1 && o.replicas == 1 && o.schedule == Schedule::k1F1B && o.schedule_file.empty() &&
         (!micro_batched(o.schedule, o.weights) || o.batch.micro_batches <= 1);
}

Expected<Trained> train_one_stage(const TrainingSpec& o, Model& md, const Devices& dev, const Data& data,
                                  TrainConfig tc, Plan& plan, MpiJob& job) {
  Graph& g = md.g();
  Trained out;
  ASSIGN_OR_RETURN(std::shared_ptr<Device> device, open_device(dev.kind, dev.cuda ? job.local_gpu(dev.gpus_here) : 0));
  Trainer::Options to;
  to.update_in_backward = plan.stages.at(0).update_in_backward;
  to.adopt_initial_values = !dev.cuda;  // released below anyway: held once, not twice, while it starts
  to.exec = exec_settings(o);
  auto trainer = Trainer::create(g, md.tg, device, to);
  if (!trainer)
    return with_batch_hint(trainer.status().with_context(is_out_of_memory(trainer.status()) ? "stage 0: " : ""), plan,
                           md.baseline_rss + data.bytes());
  if (!dev.cuda) release_initial_values(g, {md.tg.unused_params.begin(), md.tg.unused_params.end()});
  {
    StopRequests stop(job);  // Ctrl-C: finish the mini-batch, checkpoint, exit 130
    tc.stop = stop.flag();
    ASSIGN_OR_RETURN(out.result, (*trainer)->train(data.train, data.val.size() ? &data.val : nullptr, tc));
  }
  // Measured stage times beside the predicted ones: the trainer timed its own last steps.
  StagePlan& s0 = plan.stages[0];
  const TrainResult& res = out.result;
  if (res.fwd_ms + res.bwd_ms > 0) {
    // The node timers of the last steps split the stage's time; the steady state's step time (what
    // a pipeline stage's figures cover) sets it where the run had one: timing each node adds its
    // own cost (a third of a Transformer step of 2.4 ms) and three steps are noisy.
    const double timed = res.fwd_ms + res.bwd_ms + res.update_ms;
    const double scale = res.steady_samples_per_s > 0 && timed > 0
                             ? 1e3 * static_cast<double>(md.batch.mini) / res.steady_samples_per_s / timed
                             : 1.0;
    s0.measured_fwd_ms = scale * res.fwd_ms;
    // Updating in the backward, the stage measures its updates with it (as pipeline stages do).
    s0.measured_bwd_ms = scale * (res.bwd_ms + (s0.update_in_backward ? res.update_ms : 0));
    s0.measured_update_ms = s0.update_in_backward ? 0 : scale * res.update_ms;
  }
  s0.measured_memory_bytes = static_cast<int64_t>((*trainer)->executor().allocated_bytes().total());
  if ((*trainer)->executor().graphs_on()) say(o, "CUDA graphs: " + (*trainer)->executor().graph_stats().summary());
  const MemoryPlan& mp = (*trainer)->executor().plan();
  out.aliased = {{mp.aliased_values, mp.aliased_bytes}};
  // Last: taking the weights moves them out of the trainer (no second copy for the export).
  out.values = (*trainer)->take_trained_initializers();
  return out;
}

// "training: 1F1B, spectrain weights (paper staleness), 4 stages".
std::string pipeline_line(const TrainingSpec& o, const StepBatch& b) {
  const std::string sync_name = !o.schedule_file.empty() ? "schedule " + o.schedule_file
                                : o.schedule == Schedule::kGPipe ? "GPipe"
                                : o.schedule == Schedule::kZBH1  ? "ZB-H1 (zero bubble)"
                                : o.schedule == Schedule::kZBV   ? "ZB-V (zero bubble, 2 virtual stages per stage in a V)"
                                : o.schedule == Schedule::kInterleaved
                                    ? "interleaved 1F1B (" + std::to_string(o.virtual_stages) + " virtual stages per stage)"
                                                                 : "1F1B synchronous (a flush per mini-batch)";
  const std::string how =
      synchronous(o.schedule, o.weights)
          ? sync_name + ", " + std::to_string(b.micro) + " micro-batch" + (b.micro == 1 ? "" : "es")
          : "1F1B, " + std::string(weight_mode_name(o.weights)) + " weights" +
                (two_bw_family(o.weights) ? " (PipeDream-2BW), " + std::to_string(b.micro) + " micro-batches" : "") +
                (o.weights == WeightMode::kSpecTrain ? " (" + std::string(staleness_name(o.staleness)) + " staleness)" : "");
  return "training: " + how + ", " + std::to_string(o.gpus) + " stage" + (o.gpus > 1 ? "s" : "") +
         (o.replicas > 1 ? " x " + std::to_string(o.replicas) + " replicas (gradients averaged over the replicas of each stage)"
                         : "");
}

// Whether the stages share their cores and every stage's CPU time was measured: the plan then
// models each stage as `device_share` times slower than alone, and what is lost is the cores' idle
// time, not a stage's (a stage waiting lets the others run faster).
bool cpu_timed_on_shared_cores(const std::vector<StageStats>& stats, const Plan& plan) {
  if (plan.device_share <= 1.05 || stats.empty()) return false;
  for (const StageStats& st : stats)
    if (!st.cpu_timed) return false;
  return true;
}

// The throughput the stages' figures go with: the steady state's where they cover it.
double stages_rate(const std::vector<StageStats>& stats, const TrainResult& r) {
  return !stats.empty() && stats.front().window_s > 0 && r.steady_samples_per_s > 0 ? r.steady_samples_per_s
                                                                                    : r.samples_per_s;
}

// The devices the stages ran on (interleaved stages and ZB-V: a device's chunks share its thread).
size_t stage_devices(const std::vector<StageStats>& stats, const Plan& plan) {
  return std::max<size_t>(1, stats.size() / static_cast<size_t>(std::max(1, plan.virtual_stages)));
}

// On shared cores: the fraction of the cores' time (cores = devices x replicas / share) the stages'
// passes computed, by their CPU time, at `rate` samples/s (the replicas do alike, so one replica's
// stages over its share of the cores).
double cores_busy(const std::vector<StageStats>& stats, const Plan& plan, const StepBatch& batch, double rate) {
  double cpu_ms = 0;
  for (const StageStats& st : stats) cpu_ms += st.fwd_cpu_ms + st.bwd_cpu_ms + st.update_cpu_ms;
  const double period_ms = 1e3 * static_cast<double>(batch.mini) / rate;
  return cpu_ms * plan.device_share / (static_cast<double>(stage_devices(stats, plan)) * period_ms);
}

// Whether the cut in front of `stage` joins two nodes.
bool crosses_nodes(const Plan& plan, int stage) {
  return stage > 0 && stage < static_cast<int>(plan.stages.size()) && plan.stages[stage].cut_crosses_nodes;
}

// The runtime's own time between a device's passes (the stages' "between passes": claims, slot
// selections, the loop's bookkeeping) as StagePlan::pass_gap_ms, spread over the device's actions
// per mini-batch, where every device has its cores (on shared cores that time is the others' to
// use). Returns the devices' mean share of their time spent so (0 where not set).
double set_pass_gaps(Plan& m, const std::vector<StageStats>& stats, const StepBatch& batch, double rate) {
  const ScheduleIR ir = plan_schedule(m);
  const int D = static_cast<int>(ir.stages.size()), n = static_cast<int>(m.stages.size());
  if (rate <= 0 || D == 0 || ir.virtual_stages() != n) return 0;
  std::vector<double> between(D, 1.0);
  for (const StageStats& st : stats)
    if (st.stage < n) between[ir.device_of(st.stage)] -= st.busy_fraction + st.wait_fraction;
  const double period_ms = 1e3 * static_cast<double>(batch.mini) / rate;
  double mean = 0;
  for (int k = 0; k < n; ++k) {
    const int d = ir.device_of(k);
    const size_t actions = std::max<size_t>(1, ir.stages[d].steady.size());
    m.stages[k].pass_gap_ms = std::max(0.0, between[d]) * period_ms / static_cast<double>(actions);
  }
  for (double g : between) mean += std::max(0.0, g) / D;
  return mean;
}

// The schedule's program run again in the simulator with the pass times this run measured (the
// plan's prediction with the cost model's times is in the report): its bubble and throughput
// beside what the stages did. Plan stage times are per graph pass (a micro-batch), as measured
// per mini-batch / M. On shared cores the passes' CPU times (x share, as the plan's times include
// it) are the pass times, the simulation shares the cores among the stages, and the idle time
// compared is the cores': 1 - the stages' CPU time / (cores x the time), cores = devices x
// replicas / share.
std::string measured_schedule_line(const PipelineTrainer& pipe, const StepBatch& batch, const Plan& plan,
                                   const TrainResult& r) {
  Plan m = plan;
  double busy = 0;
  const std::vector<StageStats> stats = pipe.stage_stats();
  const bool cpu = cpu_timed_on_shared_cores(stats, plan);
  const double x = cpu ? plan.device_share : 1;
  m.processor_sharing = cpu;  // the CPU times say what each pass needs of a core
  for (const StageStats& st : stats) {
    if (st.stage >= static_cast<int>(m.stages.size())) continue;
    StagePlan& s = m.stages[st.stage];
    // A split backward's W passes were timed apart; else the plan's share of W.
    const double w_share = st.wgrad_ms > 0 && st.bwd_ms > 0 ? st.wgrad_ms / st.bwd_ms
                           : s.bwd_ms > 0                 ? s.wgrad_ms / s.bwd_ms
                                                          : 0;
    s.fwd_ms = x * (cpu ? st.fwd_cpu_ms : st.fwd_ms) / batch.micro;
    s.bwd_ms = x * (cpu ? st.bwd_cpu_ms : st.bwd_ms) / batch.micro;
    s.wgrad_ms = w_share * s.bwd_ms;
    s.update_ms = x * (cpu ? st.update_cpu_ms : st.update_ms);
    busy += st.busy_fraction;  // a device's chunks (interleaved stages) share its time
  }
  busy /= static_cast<double>(stage_devices(stats, plan));
  // The hand-offs as measured (sending to the receiver holding the message, its copy included)
  // replace the plan's link between stages of a node; a cut between nodes takes its own messages'.
  int64_t handoffs = 0, traded = 0;
  double handoff_s = 0;
  for (const StageStats& st : stats) {
    auto add = [&](const StageStats::Handoffs& h, bool cut_between_nodes) {
      traded += h.traded;
      if (cut_between_nodes) return;
      handoffs += h.count;
      handoff_s += 1e-6 * h.mean_us * static_cast<double>(h.count);
    };
    add(st.fwd_handoffs, crosses_nodes(plan, st.stage));
    add(st.bwd_handoffs, crosses_nodes(plan, st.stage + 1));
  }
  if (handoffs > 0) {
    const LinkSpec measured{"measured hand-off", 0, handoff_s / static_cast<double>(handoffs)};
    for (StagePlan& s : m.stages)
      if (!s.cut_crosses_nodes) s.link_in = measured;
    if (plan.num_nodes <= 1) m.link = measured;
  }
  for (StagePlan& s : m.stages) {
    if (!s.cut_crosses_nodes || s.measured_cut_messages <= 0) continue;
    // Both ways' mean; one way's where the other was never waited for (its time < 0).
    const double f = s.measured_cut_fwd_us, b = s.measured_cut_bwd_us;
    s.link_in = LinkSpec{"measured transfer", 0, 1e-6 * (f >= 0 && b >= 0 ? (f + b) / 2 : std::max(f, b))};
  }
  const int n = static_cast<int>(m.stages.size());
  const bool steady = !stats.empty() && stats.front().window_s > 0 && r.steady_samples_per_s > 0;
  const double rate = stages_rate(stats, r);
  Expected<SimResult> without = dry_run(m, plan_schedule(plan), std::max(8, 3 * n));
  const double gaps = cpu || !steady ? 0 : set_pass_gaps(m, stats, batch, rate);
  Expected<SimResult> sim = gaps > 0 ? dry_run(m, plan_schedule(plan), std::max(8, 3 * n)) : without;
  if (!sim || !without) return "";
  // On shared cores the simulation's bubble is the cores' idle time, and so is the one measured.
  const bool cores = cpu && rate > 0;
  const double idle = cores ? 1 - cores_busy(stats, plan, batch, rate) : 1 - busy;
  char b[400];
  std::string out;
  if (handoffs > 0) {
    std::snprintf(b, sizeof b,
                  "hand-offs: the %lld messages a stage waited for took %.1f us each on average from their sending to "
                  "the stage holding them (the plan's %s link: %.1f us + bytes / %.1f GB/s)",
                  static_cast<long long>(handoffs), 1e6 * handoff_s / static_cast<double>(handoffs), plan.link.name.c_str(),
                  1e6 * plan.link.latency_s, plan.link.bandwidth / 1e9);
    out = b;
    if (traded > 0) {  // Channel::trade: storages handed over instead of copied
      std::snprintf(b, sizeof b, "; %lld copies left out (values handed over with their storage)", static_cast<long long>(traded));
      out += b;
    }
    out += "\n";
  }
  std::snprintf(b, sizeof b,
                "schedule %s with the measured pass times%s: %s %.1f%%, %.0f samples/s predicted; measured: "
                "%s idle %.1f%% %s%s, %.0f samples/s",
                plan_schedule(plan).name.c_str(),
                cores ? " (their CPU time, the cores shared) and hand-offs" : handoffs > 0 ? " and hand-offs" : "",
                cores ? "cores idle" : "bubble", 100 * sim->bubble_fraction,
                sim->samples_per_s, cores ? "cores" : plan.virtual_stages > 1 ? "devices" : "stages", 100 * idle,
                steady ? "in the steady state" : "of the run", cores ? "" : " on average", rate);
  out += b;
  if (gaps > 0) {  // what the runtime's own time between passes adds to the program's bubble
    std::snprintf(b, sizeof b,
                  "\nthe runtime between passes: %.1f%% of each device's time, in the prediction above; without it "
                  "the program's bubble is %.1f%%",
                  100 * gaps, 100 * without->bubble_fraction);
    out += b;
  }
  return out;
}

// The cuts between nodes as their messages measured (StagePlan::measured_cut_*): the activations
// are stage s's messages from earlier stages, their gradients stage s-1's from later stages.
void measure_cuts(const std::vector<StageStats>& stats, Plan& plan) {
  for (const StageStats& st : stats) {
    if (crosses_nodes(plan, st.stage) && st.fwd_handoffs.count > 0) {
      StagePlan& s = plan.stages[st.stage];
      s.measured_cut_fwd_us = st.fwd_handoffs.mean_us;
      s.measured_cut_fwd_median_us = st.fwd_handoffs.median_us;
      s.measured_cut_messages += st.fwd_handoffs.count;
    }
    if (crosses_nodes(plan, st.stage + 1) && st.bwd_handoffs.count > 0) {
      StagePlan& s = plan.stages[st.stage + 1];
      s.measured_cut_bwd_us = st.bwd_handoffs.mean_us;
      s.measured_cut_bwd_median_us = st.bwd_handoffs.median_us;
      s.measured_cut_messages += st.bwd_handoffs.count;
    }
  }
}

// Per-stage busy fraction and pass times, and the pipeline's efficiency: the throughput reached
// against the bound the slowest stage sets (its measured forward + backward + update time per
// mini-batch), beside the cost model's prediction. The measured times go into the plan.
void report_stages(const TrainingSpec& o, const PipelineTrainer& pipe, const StepBatch& batch, const TrainResult& r,
                   Plan& plan) {
  double slowest = 0;
  int which = 0;
  const std::vector<StageStats> all = pipe.stage_stats();
  const bool cpu = cpu_timed_on_shared_cores(all, plan);
  const double M = static_cast<double>(std::max(1, batch.micro));
  for (const StageStats& st : all) {
    char b[320];
    std::snprintf(b, sizeof b,
                  "stage %d: busy %.0f%%, forward %.3f ms, backward %.3f ms per mini-batch; waiting for inputs %.0f%%, "
                  "between passes %.0f%%",
                  st.stage, 100 * st.busy_fraction, st.fwd_ms, st.bwd_ms, 100 * st.wait_fraction,
                  100 * std::max(0.0, 1 - st.busy_fraction - st.wait_fraction));
    std::string line = b;
    if (cpu) {  // what it computed, without the time its core served the other stages
      std::snprintf(b, sizeof b, "; CPU time %.3f + %.3f ms", st.fwd_cpu_ms, st.bwd_cpu_ms);
      line += b;
    }
    say(o, line);
    if (st.stage < static_cast<int>(plan.stages.size())) {  // per pass, as the plan's
      StagePlan& s = plan.stages[st.stage];
      s.measured_fwd_ms = st.fwd_ms / M;
      s.measured_bwd_ms = st.bwd_ms / M;
      s.measured_update_ms = st.update_ms;
      if (cpu) s.measured_cpu_ms = (st.fwd_cpu_ms + st.bwd_cpu_ms) / M + st.update_cpu_ms;
    }
    const double t = st.fwd_ms + st.bwd_ms + st.update_ms;
    if (t > slowest) {
      slowest = t;
      which = st.stage;
    }
  }
  // Interleaved stages and ZB-V: a device's stages share its thread, so its time is their sum.
  const int V = std::max(1, plan.virtual_stages), n = static_cast<int>(plan.stages.size());
  if (V > 1 && n % V == 0) {
    const int D = n / V;
    std::vector<double> busy(D, 0), wait(D, 0);
    std::vector<std::string> which(D);
    for (const StageStats& st : pipe.stage_stats()) {
      if (st.stage >= n) continue;
      const int d = virtual_device(st.stage, D, plan.schedule == Schedule::kZBV);
      busy[d] += st.busy_fraction;
      wait[d] += st.wait_fraction;
      which[d].append(which[d].empty() ? "" : ", ").append(std::to_string(st.stage));
    }
    for (int d = 0; d < D; ++d) {
      char b[256];
      std::snprintf(b, sizeof b, "device %d (stages %s): busy %.0f%%, waiting for inputs %.0f%%, between passes %.0f%%", d,
                    which[d].c_str(), 100 * busy[d], 100 * wait[d], 100 * std::max(0.0, 1 - busy[d] - wait[d]));
      say(o, b);
    }
  }
  const std::vector<GraphStats> graphs = pipe.stage_graph_stats();
  for (size_t k = 0; k < graphs.size(); ++k) say(o, "stage " + std::to_string(k) + ": CUDA graphs: " + graphs[k].summary());
  measure_cuts(all, plan);
  say(o, measured_schedule_line(pipe, batch, plan, r));
  // The stage times cover the steady state where the run had one: so does the rate compared.
  const double rate = stages_rate(all, r);
  if (cpu && rate > 0) {  // no stage's bound holds on shared cores: how busy the cores were
    char b[320];
    std::snprintf(b, sizeof b,
                  "pipeline efficiency: the shared cores computed the stages' passes %.0f%% of the time (their CPU time "
                  "/ (cores x time)); the cost model predicted %.0f samples/s",
                  100 * cores_busy(all, plan, batch, rate), plan.predicted_samples_per_s);
    say(o, b);
  } else if (slowest > 0 && rate > 0) {
    const double bound = static_cast<double>(batch.mini) / (slowest * 1e-3);
    char b[320];
    std::snprintf(b, sizeof b,
                  "pipeline efficiency: %.0f%% of the slowest stage's bound (stage %d, %.3f ms per mini-batch: "
                  "%.0f samples/s); the cost model predicted %.0f samples/s",
                  100 * rate / bound, which, slowest, bound, plan.predicted_samples_per_s);
    say(o, b);
  }
}

Expected<Trained> train_pipeline(const TrainingSpec& o, Model& md, const Devices& dev, const Data& data, TrainConfig tc,
                                 Plan& plan, MpiJob& job) {
  Graph& g = md.g();
  Trained out;
  PipelineOptions po;
  po.schedule = plan.schedule;  // --schedule auto: the planner's choice
  po.weights = plan.weights;
  po.staleness = o.staleness;
  po.after_update = o.test.after_update;
  po.micro_batches = md.batch.micro;
  po.virtual_stages = plan.virtual_stages;
  po.program = plan.program;
  po.replicas = o.replicas;
  po.threads_per_stage = job.threads_per_stage(o.gpus * o.replicas);
  // A stage waiting for another's message spins a while first where every stage thread has a core
  // of its own and the machine was idle at the start (as idle OpenMP threads do, tools/omp_env.h).
  if (o.gpus * o.replicas * po.threads_per_stage <= usable_cores() && spinning_allowed())
    po.handoff_spin_us = kHandoffSpinUs;
  // PIPETRAIN_HANDOFF_TRADE=0: hand-offs copied, as before trading (for measuring what trading saves).
  if (const char* e = std::getenv("PIPETRAIN_HANDOFF_TRADE"); e && std::string(e) == "0") po.trade_handoffs = false;
  po.record_trace = o.trace;
  po.device = dev.kind;
  po.adopt_initial_values = !dev.cuda;  // released below anyway: held once, not twice, while it starts
  po.exec = exec_settings(o);
  job.set_pipeline(&po, dev.cuda, dev.gpus_here, o.oversubscribe);
  auto pipe = PipelineTrainer::create(g, md.tg, plan, po);
  if (!pipe) return with_batch_hint(pipe.status(), plan, md.baseline_rss + data.bytes());
  if (!dev.cuda) release_initial_values(g, {md.tg.unused_params.begin(), md.tg.unused_params.end()});
  TrainingSpec shown = o;
  shown.schedule = plan.schedule;
  say(o, pipeline_line(shown, md.batch));
  {
    StopRequests stop(job);  // Ctrl-C: finish the mini-batches started, drain, checkpoint, exit 130
    tc.stop = stop.flag();
    ASSIGN_OR_RETURN(out.result, (*pipe)->train(data.train, data.val.size() ? &data.val : nullptr, tc));
  }
  if (!job.leads_run()) return out;  // rank 0 writes the run folder
  report_stages(o, **pipe, md.batch, out.result, plan);
  const std::vector<int64_t> held = (*pipe)->stage_allocated_bytes();
  for (size_t k = 0; k < held.size() && k < plan.stages.size(); ++k) plan.stages[k].measured_memory_bytes = held[k];
  for (const MemoryPlan* mp : (*pipe)->stage_memory_plans())
    out.aliased.push_back(mp ? std::pair<size_t, size_t>{mp->aliased_values, mp->aliased_bytes} : std::pair<size_t, size_t>{0, 0});
  // Last: taking the weights releases the stages' copies (the measurements above are done).
  out.values = (*pipe)->take_trained_initializers();
  out.pipeline = std::move(*pipe);
  return out;
}

// ---- Phase 8: memory ------------------------------------------------------------------------------

// Each stage's buffers against the plan's model of them, and the process's peak resident set
// against the stages' sum plus the process baseline and the data sets.
void report_memory(const TrainingSpec& o, const Trained& t, size_t baseline_rss, size_t data_bytes, bool in_job, Plan& p) {
  p.baseline_bytes = static_cast<int64_t>(baseline_rss);
  p.data_bytes = static_cast<int64_t>(data_bytes);
  p.measured_peak_rss_bytes = static_cast<int64_t>(process_peak_rss_bytes());
  int64_t stages_planned = 0;
  char b[256];
  for (const StagePlan& st : p.stages) {
    stages_planned += st.memory_bytes;
    if (st.measured_memory_bytes < 0) continue;
    const size_t k = static_cast<size_t>(st.index);
    const auto [copies, copy_bytes] = k < t.aliased.size() ? t.aliased[k] : std::pair<size_t, size_t>{0, 0};
    std::snprintf(b, sizeof b, "memory: stage %d peak %.1f MB, planned %.1f MB; %zu copies aliased (%.1f MB)", st.index,
                  static_cast<double>(st.measured_memory_bytes) / 1e6, static_cast<double>(st.memory_bytes) / 1e6, copies,
                  static_cast<double>(copy_bytes) / 1e6);
    say(o, b);
  }
  // Replicas in this process hold a copy of every stage each (under MPI a rank holds one stage).
  const int copies = in_job ? 1 : o.replicas;
  stages_planned *= copies;
  const std::string times = copies > 1 ? " x " + std::to_string(copies) + " replicas" : "";
  std::snprintf(b, sizeof b, "memory: process peak %.1f MB, planned %.1f MB (stages%s %.1f MB + data %.1f MB + baseline %.1f MB)",
                static_cast<double>(p.measured_peak_rss_bytes) / 1e6,
                static_cast<double>(stages_planned + p.data_bytes + p.baseline_bytes) / 1e6, times.c_str(),
                static_cast<double>(stages_planned) / 1e6, static_cast<double>(p.data_bytes) / 1e6,
                static_cast<double>(p.baseline_bytes) / 1e6);
  say(o, b);
}

// The caching allocators: peak, cached, fragmentation, per GPU this process used.
void report_gpu_memory(const TrainingSpec& o, const Devices& dev, const MpiJob& job) {
  if (!dev.cuda) return;
  const int first = job.in_job() ? job.local_gpu(dev.gpus_here) : 0;
  const int count = job.in_job() ? 1 : std::min(dev.gpus_here, o.gpus);
  for (int d = first; d < first + count; ++d)
    if (auto device = open_device(DeviceKind::kCuda, d)) say(o, "memory: " + (*device)->memory_summary());
}

// ---- Phase 9: check, export, report ----------------------------------------------------------------

// A loss can stay finite while weights went NaN (Relu maps NaN to 0): such a model is never
// written. Then the trained model (and --export-training, --export-stages), and the reports again
// with measured stage times and throughput: after the model, so that a full disk or any failure
// writing them never costs the trained model.
Status export_and_report(const TrainingSpec& o, Model& md, const Trained& t, const TrainConfig& tc,
                         const fs::path& out_dir, bool real_trace, PlanOutcome& planned) {
  const TrainResult& r = t.result;
  if (std::string bad = describe_non_finite(t.values); !bad.empty()) {
    std::string last_good = r.last_checkpoint;
    if (last_good.empty() && !tc.checkpoint.resume.empty()) last_good = tc.checkpoint.resume;
    return Status(StatusCode::kDiverged, "training diverged: after step " + std::to_string(r.steps) + " " + bad +
                                             "; the trained model was not written" +
                                             (last_good.empty() ? " (try a smaller --lr)"
                                                                : "; the last good checkpoint is in " + last_good));
  }
  const fs::path trained = out_dir / (md.m.stem + ".trained.onnx");
  RETURN_IF_ERROR(export_onnx(md.m, t.values, trained.string(), ExportMode::kInference));
  const fs::path training_model = out_dir / (md.m.stem + ".training.onnx");
  if (o.local.export_training) RETURN_IF_ERROR(export_onnx(md.m, t.values, training_model.string(), ExportMode::kTraining));
  if (o.local.export_stages)
    RETURN_IF_ERROR(export_plan_stages(md.m, t.values, planned.plan, (out_dir / "stages").string(), o.local.quiet));
  planned.plan.measured_samples_per_s = r.samples_per_s;
  planned.plan.measured_steady_samples_per_s = r.steady_samples_per_s;
  RETURN_IF_ERROR(rewrite_reports(planned, md.g(), out_dir.string(), !real_trace));

  char line[512];
  std::snprintf(line, sizeof line, "done: %lld steps in %.2f s (%.0f samples/s), loss %.4f -> %.4f",
                static_cast<long long>(r.steps), r.seconds, r.samples_per_s, r.first_loss, r.last_loss);
  say(o, line);
  if (r.val.samples) {
    if (r.val.accuracy >= 0)
      std::snprintf(line, sizeof line, "validation: loss %.4f, accuracy %.2f%% on %lld samples", r.val.loss,
                    100 * r.val.accuracy, static_cast<long long>(r.val.samples));
    else
      std::snprintf(line, sizeof line, "validation: loss %.4f on %lld samples", r.val.loss,
                    static_cast<long long>(r.val.samples));
    say(o, line);
  }
  say(o, "wrote: " + trained.string() + (o.local.export_training ? ", " + training_model.string() : "") + ", " +
             (out_dir / "metrics.csv").string() + ", " + (out_dir / "curves.svg").string());
  if (!r.last_checkpoint.empty()) say(o, "checkpoint: " + r.last_checkpoint);
  return Status::ok();
}

// The phases for one layout of the devices. `layouts`: the layouts --replicas auto chose this
// spec's stages and replicas from (for the reports). With o.replicas_auto, `choice` receives the
// chosen layout and the run stops there (returning 0) before planning.
int train_layout(const TrainingSpec& o, MpiJob& job, const std::vector<LayoutOption>* layouts, LayoutChoice* choice) {
  if (!o.plan_only && o.local.data == "synthetic")  // the first line, so that nobody mistakes the numbers
    say(o, std::string("notice: ") + (o.local.data_given ? "--data synthetic" : "no --data given") +
               ": training on synthetic random inputs and labels, so loss and accuracy mean nothing");
  if (Status s = check_bounds(o, job); !s.is_ok()) return job.fail(s);
  auto sgd = optimizer_options(o);
  if (!sgd) return job.fail(sgd.status());
  auto dev = choose_devices(o, job);
  if (!dev) return job.fail(dev.status());
  auto model = import_model(o, *dev, *sgd);
  if (!model) return job.fail(model.status());
  Model& md = *model;
  // The data before the run folder: a data set that cannot be read leaves nothing behind.
  Expected<Data> data = Data{};
  if (!o.plan_only && !o.replicas_auto) data = open_data(o, md, dev->cuda, job);
  if (!data) return job.fail(data.status());
  bool created = false;
  auto out_dir = open_run_folder(o, md.m, job, &created);
  // A run that fails before writing anything leaves no empty folder of its own behind.
  struct RemoveIfEmpty {
    fs::path dir;
    bool armed;
    ~RemoveIfEmpty() {
      std::error_code ec;
      if (armed && fs::is_empty(dir, ec) && !ec) fs::remove(dir, ec);
    }
  } cleanup{out_dir ? *out_dir : fs::path(), out_dir && created && job.leads_run()};
  if (!out_dir) return job.fail(out_dir.status());

  PlanFlags pf = plan_flags(o, md, *dev, *out_dir, layouts, job);
  auto program = schedule_file_program(o);
  if (!program) return job.fail(program.status());
  pf.program = *program;
  if (o.replicas_auto) {
    auto layout = choose_layout(md.g(), pf);
    if (!layout) return job.fail(layout.status());
    *choice = std::move(*layout);
    return 0;
  }
  auto planned = plan_and_report(md.m, md.g(), pf);
  if (!planned) return job.fail(planned.status());
  Plan& plan = planned->plan;
  say(o, "reports: " + (*out_dir / "partition.{txt,json,html,dot}").string() + ", " + (*out_dir / "trace.json").string());
  if (!o.schedule_out.empty() && job.leads_run()) {
    if (Status ws = write_file_atomic(o.schedule_out, schedule_csv(plan_schedule(plan))); !ws.is_ok()) return job.fail(ws);
    say(o, "schedule: " + o.schedule_out);
  }
  if (o.plan_only) {
    if (int code = job.agree_start(o, md.m.hash, plan); code != 0) return code;
    if (!job.leads_run() || !o.local.export_stages) return 0;  // rank 0 writes the run folder
    Status es = export_plan_stages(md.m, {}, plan, (*out_dir / "stages").string(), o.local.quiet);
    return es.is_ok() ? 0 : job.fail(es);
  }

  // --export-stages writes after training: a cut it cannot export is refused before any step.
  if (o.local.export_stages && job.leads_run())
    if (Status es = export_plan_stages(md.m, {}, plan, (*out_dir / "stages").string(), true, /*check_only=*/true);
        !es.is_ok())
      return job.fail(es);
  if (!dev->cuda) release_zero_state(md.g());  // the CPU executors start optimizer state at zero themselves
  if (Status cs = write_classes(*data, *out_dir, job); !cs.is_ok()) return job.fail(cs);
  if (int code = job.agree_start(o, md.m.hash, plan); code != 0) return code;
  say(o, "data: " + data->train.source + ", " + std::to_string(data->train.size()) + " samples" +
             (data->val.size() ? "; validation: " + data->val.source + ", " + std::to_string(data->val.size()) + " samples"
                               : ""));
  auto tc = training_config(o, md, *out_dir, job);
  if (!tc) return job.fail(tc.status());
  tc->loader = data->train.stats.get();

  auto trained = runs_one_stage(o) ? train_one_stage(o, md, *dev, *data, *tc, plan, job)
                                   : train_pipeline(o, md, *dev, *data, *tc, plan, job);
  if (!trained) return job.fail(trained.status());
  Trained& t = *trained;
  if (!job.leads_run()) return t.result.interrupted ? kExitInterrupted : 0;  // rank 0 writes the run folder
  if (LoaderStats* ls = data->train.stats.get(); ls && ls->bad > 0)  // --on-bad-sample skip, during training
    say(o, "data: " + plural(ls->bad.load(), "sample") + " failed to decode while training; the next image of the "
               "set stood in for each (--on-bad-sample skip); first: " + ls->first_bad_message());
  report_memory(o, t, md.baseline_rss, data->bytes(), job.in_job(), plan);
  // With --trace, trace.json holds the passes as they ran instead of the simulated schedule.
  const bool real_trace = o.trace && t.pipeline != nullptr;
  if (o.trace && !t.pipeline)
    say(o, "notice: --trace records pipelined runs; trace.json keeps the simulated schedule of this single-stage run");
  if (real_trace)
    if (Status ts = t.pipeline->write_chrome_trace((*out_dir / "trace.json").string()); !ts.is_ok()) return job.fail(ts);
  t.pipeline.reset();  // the export needs only the trained values: not the stages, not the data
  *data = Data{};
  report_gpu_memory(o, *dev, job);
  if (Status s = export_and_report(o, md, t, *tc, *out_dir, real_trace, *planned); !s.is_ok()) return job.fail(s);
  if (t.result.interrupted) {
    std::fprintf(stderr, "onnx-pipetrain: interrupted at step %lld; wrote %s and the model; continue with --resume\n",
                 static_cast<long long>(t.result.steps), t.result.last_checkpoint.c_str());
    return kExitInterrupted;
  }
  return 0;
}

}  // namespace

int run_training(const TrainingSpec& o, MpiJob& job) {
  if (!o.replicas_auto) return train_layout(o, job, nullptr, nullptr);
  // --replicas auto: every stages x replicas split of the --gpus devices, planned on the model at
  // the whole mini-batch; then the chosen one trains as if given --gpus N --replicas R (the model
  // imported again, the first import freed).
  LayoutChoice choice;
  if (int rc = train_layout(o, job, nullptr, &choice); rc != 0 || choice.layouts.empty()) return rc;
  TrainingSpec chosen = o;
  chosen.replicas_auto = false;
  chosen.gpus = choice.stages;
  chosen.replicas = choice.replicas;
  return train_layout(chosen, job, &choice.layouts, nullptr);
}

}  // namespace pt
