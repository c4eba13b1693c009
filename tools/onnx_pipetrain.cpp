// The onnx-pipetrain command line: parses its flags (CLI11) into one TrainingSpec, joins the MPI
// job when launched by mpirun / srun, and calls run_training (tools/run_training.h), which imports
// the model, builds the training graph, trains, and writes the run folder. Exit codes: 0 ok, 2 bad input or usage,
// 3 diverged (a non-finite loss, or weights that went non-finite: no model is written), 1 internal
// error, 130 stopped by SIGINT or SIGTERM (after writing a checkpoint and the model; under MPI also
// SIGUSR1, tools/mpi_job.h).
#include <CLI/CLI.hpp>
#include <dnnl_version.h>
#include <google/protobuf/stubs/common.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <string>
#include <utility>
#include <vector>

#include "importer/training.h"
#include "kernels/weight_cache.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/memory.h"
#include "tools/mpi_job.h"
#include "tools/omp_env.h"
#include "tools/run_training.h"
#include "tools/training_spec.h"

int main_impl(int argc, char** argv, pt::MpiJob& job);

namespace {

// A flag whose values name the members of an enum: CLI11 checks the name (its usual message for
// anything else), the callback stores the member.
template <class E>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, E* target, std::vector<std::pair<std::string, E>> names,
                        const std::string& help) {
  std::vector<std::string> keys;
  std::string current;
  for (const auto& [n, e] : names) {
    keys.push_back(n);
    if (e == *target) current = n;
  }
  auto* opt = app.add_option_function<std::string>(
      flag,
      [target, names](const std::string& v) {
        for (const auto& [n, e] : names)
          if (n == v) *target = e;
      },
      help);
  opt->check(CLI::IsMember(keys))->default_str(current);
  return opt;
}

// Ctrl-C or SIGTERM before training starts (importing, calibrating, planning): there is nothing to
// save yet, so the process ends at once with the documented code; training installs its own
// handler (StopRequests: finish the step, checkpoint, exit 130). Async-signal-safe.
extern "C" void on_early_stop(int) {
  static const char msg[] = "onnx-pipetrain: stopped before training started; nothing to save\n";
  ssize_t w = ::write(2, msg, sizeof msg - 1);
  (void)w;
  ::_exit(130);
}

// CLI11's messages where they read as its internals: a flag without its value ("--steps: 1 required
// INT:INT:POSITIVE missing") and a value of the wrong type ("Could not convert: --steps = 2.5").
std::string plain_parse_error(const CLI::ParseError& e) {
  const std::string m = e.what();
  const std::string convert = "Could not convert: ";
  if (m.rfind(convert, 0) == 0) {
    const size_t eq = m.find(" = ", convert.size());
    if (eq != std::string::npos)
      return m.substr(convert.size(), eq - convert.size()) + ": '" + m.substr(eq + 3) +
             "' is not a value of the flag's type (see --help)";
  }
  const size_t colon = m.find(": ");
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && colon != std::string::npos && m.size() > 8 &&
      m.compare(m.size() - 8, 8, " missing") == 0)
    return m.substr(0, colon) + ": needs a value";
  return m;
}

// The watchdog's verdict on a lost rank: one line naming it, then this rank exits, so that no
// rank waits for a stage that is gone.
void on_lost_rank(int me, int lost, const std::string& why) {
  if (lost >= 0)
    std::fprintf(stderr, "onnx-pipetrain: rank %d: error: lost %s; the pipeline needs every stage, so rank %d exits\n",
                 me, why.c_str(), me);
  else
    std::fprintf(stderr, "onnx-pipetrain: rank %d: %s; rank %d exits\n", me, why.c_str(), me);
  std::fflush(stderr);
  // The other survivors poll every 50 ms: staying a moment longer lets them name the rank that
  // was lost first rather than this one.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::_Exit(1);
}

// --test-lose-rank RANK:STEP[:stop] (tests/mpi/test_mpi.py): after the update of step STEP
// (1-based) the stage of rank RANK leaves the job (exit 1) or hangs (SIGSTOP), so that the tests
// see the other ranks find it lost. Lives here, outside the library, which never exits or stops.
pt::Status set_lose_rank(pt::TrainingSpec* o, const pt::MpiJob& job) {
  if (o->test.lose_rank.empty()) return pt::Status::ok();
  int rank = -1;
  long long at = -1;
  char mode[16] = {0};
  if (std::sscanf(o->test.lose_rank.c_str(), "%d:%lld:%15s", &rank, &at, mode) < 2 || at < 1)
    return pt::invalid_input("--test-lose-rank " + o->test.lose_rank + ": expected RANK:STEP[:stop]");
  if (!job.in_job() || rank != job.rank()) return pt::Status::ok();
  const bool stop = std::string(mode) == "stop";
  o->test.after_update = [at, stop](int stage, int64_t step) {
    if (step != at - 1) return;
    std::fprintf(stderr, "onnx-pipetrain: stage %d: --test-lose-rank: %s after step %lld\n", stage,
                 stop ? "stopping (SIGSTOP)" : "leaving (exit 1)", static_cast<long long>(at));
    std::fflush(stderr);
    if (stop) std::raise(SIGSTOP);
    else std::_Exit(1);
  };
  return pt::Status::ok();
}

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
        // The values train in float32: one beyond its range would be infinite there.
        if (std::fabs(v) > 3.4028234663852886e38) return "Value " + s + " is beyond float32's range (3.4e38)";
        return std::string();
      },
      "FINITE", "finite");
}

// Bounds with plain messages (CLI11's PositiveNumber prints its range with 300 digits). A value that
// is no number passes here: the flag's type check says what it is not.
CLI::Validator zero_bound(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0' || (zero_allowed ? v >= 0 : v > 0)) return std::string();
        return "Value " + s + (zero_allowed ? " must be at least 0" : " must be above 0");
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE", zero_allowed ? "at least 0" : "above 0");
}
CLI::Validator positive() { return zero_bound(false); }
CLI::Validator non_negative() { return zero_bound(true); }

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

// --replicas: a positive integer, or "auto" (the cost model splits the --gpus devices).
pt::Status parse_replicas(const std::string& text, int gpus, pt::TrainingSpec* o) {
  if (text == "auto") {
    o->replicas_auto = true;
    o->replicas = 1;
    return pt::Status::ok();
  }
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE)
    return pt::invalid_input("--replicas " + text + ": expected a positive integer or 'auto'");
  if (v < 1) return pt::invalid_input("--replicas " + text + ": must be at least 1 (or 'auto')");
  if (v > 4096 || v * std::max(1, gpus) > 4096)
    return pt::invalid_input("--replicas " + text + ": at most 4096 devices in all (--gpus " + std::to_string(gpus) +
                             " x --replicas " + text + ")");
  o->replicas = static_cast<int>(v);
  return pt::Status::ok();
}

// The flags' handles that the parse step reads back (whether a flag was given), beside the spec.
struct FlagHandles {
  std::string replicas_text = "1";  // --replicas: a count or "auto" (parse_replicas)
  CLI::Option* data = nullptr;
  CLI::Option* micro_batches = nullptr;
  CLI::Option* resume = nullptr;
  CLI::Option* weights = nullptr;
  CLI::Option* schedule = nullptr;
  CLI::Option* staleness = nullptr;
};

// The flags, added in the order --help lists them within their groups (assign_groups).
// The model, the stages and their devices, the data.
void add_run_and_data_flags(CLI::App& app, pt::TrainingSpec& o, FlagHandles& f) {
  app.add_option("model", o.model, "the ONNX model to train")->required();
  app.set_version_flag("--version", version_text());
  app.add_option("--gpus", o.gpus, "pipeline stages, one device each (with --replicas auto: the devices to split into stages x replicas)")
      ->check(integer())->capture_default_str();
  app.add_option("--replicas", f.replicas_text,
                 "data-parallel copies of the pipeline, each on its share of every mini-batch (--gpus x --replicas "
                 "devices); auto: split the --gpus devices into stages x replicas by the cost model")
      ->capture_default_str();
  add_choice(app, "--device", &o.device, {{"auto", pt::DeviceChoice::kAuto}, {"cuda", pt::DeviceChoice::kCuda}, {"cpu", pt::DeviceChoice::kCpu}}, "auto | cuda | cpu");
  f.data = app.add_option("--data", o.local.data, "x.npy + y.npy folder, a folder of class subfolders of JPEG/PNG images, MNIST-style IDX (folder or prefix, .gz too), CIFAR-10/100 .bin, a token file (.bin/.npy ids) or text (.txt), or 'synthetic'")->capture_default_str();
  app.add_option("--augment", o.local.augment, "image folders: random augmentation of training images, comma-separated: crop (random resized crop), flip (horizontal)")
      ->delimiter(',')->check(CLI::IsMember({"crop", "flip"}));
  app.add_option("--on-bad-sample", o.local.on_bad_sample, "image folders: an image that does not read: skip (count, name and leave it out) or fail (exit 2)")
      ->check(CLI::IsMember({"skip", "fail"}))->capture_default_str();
  app.add_option("--tokenizer", o.local.tokenizer, "text --data: bytes (each byte a token id, vocabulary 256)")->check(CLI::IsMember({"bytes"}));
  app.add_option("--token-dtype", o.local.token_dtype, "raw token files (.bin): the ids' type, uint16 (nanoGPT's train.bin) or uint32")
      ->check(CLI::IsMember({"uint16", "uint32"}))->capture_default_str();
  app.add_option("--stream-data", o.local.stream_data, ".npy folders: read samples from disk as they are gathered (always), into memory (never), or auto (from disk when the arrays exceed a quarter of the memory)")
      ->check(CLI::IsMember({"auto", "always", "never"}))->capture_default_str();
  app.add_option("--loader-threads", o.local.loader_threads, "threads decoding image folders (0: auto, the cores the stages leave free, at least 1)")
      ->check(integer())->check(CLI::Range(0, 256))->capture_default_str();
  auto* vd = app.add_option("--val-data", o.local.val_data, "validation set (same formats as --data)");
  app.add_option("--val-split", o.val_split, "hold out this fraction of --data for validation (seeded)")->check(finite())
      ->check(CLI::Range(0.0, 0.9))->excludes(vd);
  app.add_option("--mean", o.mean, "subtract per channel (one value, or one per channel of [C,H,W] inputs), after scaling pixels")->check(finite())->delimiter(',');
  app.add_option("--std", o.std, "divide per channel, after --mean")->check(finite())->delimiter(',');
  app.add_flag("--raw-pixels", o.raw_pixels, "keep integer pixels (IDX, CIFAR, uint8/uint16 x.npy) as 0..255 / 0..65535 instead of scaling to [0, 1]");
  app.add_option("--eval-every", o.eval_every, "also validate every N steps (besides every epoch end)")->check(integer())->check(positive());
  auto* ep = app.add_option("--epochs", o.epochs, "passes over the training set")->check(integer())->check(positive())->capture_default_str();
  auto* sp = app.add_option("--steps", o.steps, "total mini-batch steps (instead of --epochs)")->check(integer())->check(positive());
  ep->excludes(sp);
  app.add_option("--batch-size", o.batch.mini_batch, "samples per mini-batch")->check(integer())->check(positive())->capture_default_str();
}

// The learning rate, its schedule and the optimizer.
void add_optimizer_flags(CLI::App& app, pt::TrainingSpec& o) {
  app.add_option("--lr", o.lr, "learning rate")->check(finite())->check(positive())->capture_default_str();
  add_choice(app, "--lr-schedule", &o.lr_schedule,
             {{"constant", pt::LrSchedule::Kind::kConstant}, {"step", pt::LrSchedule::Kind::kStep},
              {"cosine", pt::LrSchedule::Kind::kCosine}, {"poly", pt::LrSchedule::Kind::kPoly}},
             "constant | step | cosine | poly (decay over the run's total steps)");
  app.add_option("--warmup-steps", o.warmup_steps, "linear warm-up from lr/N to lr over the first N steps")->check(integer())->check(non_negative());
  app.add_option("--lr-decay-every", o.lr_decay_every, "step schedule: multiply the rate by --lr-gamma every N steps")->check(integer())->check(positive());
  app.add_option("--lr-gamma", o.lr_gamma, "step schedule: the decay factor")->check(finite())->capture_default_str();
  app.add_option("--lr-power", o.lr_power, "poly schedule: lr * (1 - progress)^P")->check(finite())->capture_default_str();
  app.add_option("--lr-min", o.lr_min, "cosine and poly schedules: the rate at the last step")->check(finite())->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay, added to the gradient (adamw: decoupled, w -= lr*wd*w each step)")->check(finite())->check(non_negative())->capture_default_str();
  // The optimizer and its flags.
  app.add_option_function<std::string>(
         "--optimizer",
         [&o](const std::string& v) {
           auto k = pt::parse_optimizer(v);
           if (!k) throw CLI::ValidationError(k.status().message());
           o.optimizer = *k;
         },
                 "sgd-paper (SpecTrain's v = gamma v + (1 - gamma) g, w -= lr v) | sgd (torch.optim.SGD) | adam "
                 "(torch.optim.Adam) | adamw (torch.optim.AdamW); SpecTrain predicts with each one's own step. --lr: "
                 "sgd-paper's rate is 1/(1-momentum) times torch SGD's; adam/adamw want ~1e-3")
      ->default_str("sgd-paper");
  app.add_option("--momentum", o.momentum, "sgd-paper: gamma of v = gamma v + (1 - gamma) g; sgd: torch's momentum")->check(finite())
      ->check(CLI::Range(0.0f, 0.999999f))->capture_default_str();
  app.add_option("--dampening", o.dampening, "sgd: torch's dampening")->check(finite())->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  app.add_flag("--nesterov", o.nesterov, "sgd: Nesterov momentum (needs --momentum > 0 and --dampening 0)");
  app.add_option("--beta1", o.beta1, "adam, adamw: decay of the first moment")->check(finite())->check(CLI::Range(0.0f, 0.999999f))->capture_default_str();
  app.add_option("--beta2", o.beta2, "adam, adamw: decay of the second moment")->check(finite())->check(CLI::Range(0.0f, 0.999999f))->capture_default_str();
  app.add_option("--eps", o.eps, "adam, adamw: added to sqrt(v_hat)")->check(finite())->check(positive())->capture_default_str();
  app.add_option("--clip-grad-norm", o.clip_grad_norm,
                 "scale the gradients by min(1, X/(norm+1e-6)) before each update (torch.nn.utils.clip_grad_norm_): "
                 "the global norm of the mini-batch on one stage and under GPipe (summed across stages); under "
                 "asynchronous 1F1B no update sees every stage's gradient of one mini-batch, so each stage clips by "
                 "its own norm")
      ->check(finite())->check(non_negative());
}

// The loss and what trains, then the run folder, the plan-only modes and the profile.
void add_model_and_output_flags(CLI::App& app, pt::TrainingSpec& o) {
  add_choice(app, "--loss", &o.loss, {{"auto", pt::LossKind::kAuto}, {"cross-entropy", pt::LossKind::kCrossEntropy}, {"mse", pt::LossKind::kMse}}, "auto | cross-entropy | mse");
  app.add_option("--freeze", o.freeze, "initializers kept fixed: names or fnmatch globs such as 'encoder.*' (comma-separated)")->delimiter(',');
  app.add_option("--no-fusion", o.no_fusion, "fusion passes turned off (comma-separated): layernorm, attention, gelu, dropout, epilogue, update (the optimizer step inside the backward), or all")
      ->delimiter(',');
  app.add_option("--seed", o.seed, "seed for data order and synthetic data")->check(integer(false))->capture_default_str();
  app.add_option("--out", o.local.out, "run folder (default ./runs/<model stem>)");
  app.add_option("--log-every", o.local.log_every, "print the loss every N steps (default: 10 lines per run)")->check(integer())->check(positive());
  app.add_flag("--no-shuffle", o.no_shuffle, "keep the data order (no per-epoch shuffle)");
  app.add_flag("--oversubscribe", o.oversubscribe, "--device cuda: allow more stages than GPUs (several stages share a GPU)");
  app.add_flag_callback("--no-cuda-graphs", [&o] { o.cuda_graphs = false; },
                        "CUDA stages: run every pass kernel by kernel instead of replaying it as a CUDA graph "
                        "(captured on its second run; the results are bit for bit the same)");
  app.add_flag("--plan-only", o.plan_only, "partition and write the reports, no training");
  app.add_flag("--export-stages", o.local.export_stages,
               "also write RUN/stages/stage<k>.onnx, one ONNX model per pipeline stage (boundary tensors as inputs "
               "and outputs), and RUN/stages/stages.json; with --plan-only: the untrained weights");
  app.add_flag("--whatif", o.whatif, "with the plan: predicted throughput, bubble and memory for 1..N devices per scheme");
  app.add_flag("--profile", o.profile, "measure every node on the real device before partitioning (cached in the run folder)");
  auto* cal = app.add_flag("--calibrate", o.calibrate, "measure the cost model's op classes on this machine's device again (otherwise once, then cached in ~/.cache/onnx-pipetrain)");
  app.add_flag("--no-calibrate", o.no_calibrate, "plan with the analytic roofline model instead of the calibrated one")->excludes(cal);
}

// The schedule, the weights, the arithmetic and memory, the plan's devices, links and cuts.
void add_pipeline_flags(CLI::App& app, pt::TrainingSpec& o, FlagHandles& f) {
  f.schedule = add_choice(app, "--schedule", &o.schedule,
                          {{"1f1b", pt::Schedule::k1F1B}, {"gpipe", pt::Schedule::kGPipe}, {"zb-h1", pt::Schedule::kZBH1}, {"interleaved", pt::Schedule::kInterleaved}, {"zbv", pt::Schedule::kZBV}, {"auto", pt::Schedule::kAuto}},
                          "1f1b (one forward, one backward in turn; asynchronous unless --weights sync) | gpipe (all "
                          "micro-batches' forwards, then their backwards) | zb-h1 (zero bubble: synchronous 1F1B with each "
                          "backward split into its input-gradient part and its weight-gradient part, deferred into the bubbles) | "
                          "interleaved (synchronous 1F1B over --gpus x --virtual-stages model chunks, each GPU running "
                          "every --gpus-th one, Megatron-LM's order: the bubble divided by --virtual-stages) | zbv (ZB-V: --gpus x 2 "
                          "stages in a V, GPU d running stages d and 2 x --gpus - 1 - d, backwards split as zb-h1's: "
                          "close to no bubble from --micro-batches 2 x --gpus on) | "
                          "auto (the synchronous schedule with the best predicted throughput that fits; all of them train the same weights)");
  f.weights = add_choice(app, "--weights", &o.weights,
                         {{"spectrain", pt::WeightMode::kSpecTrain}, {"stash", pt::WeightMode::kStash},
                          {"stale", pt::WeightMode::kStale}, {"sync", pt::WeightMode::kSync}, {"2bw", pt::WeightMode::k2BW}, {"2bw-predict", pt::WeightMode::k2BWPredict}},
                         "spectrain | stash | stale | sync (one version per mini-batch, updated after all its micro-batches: "
                         "1F1B with a flush, PipeDream-Flush; the only weights of gpipe and zb-h1) | 2bw (PipeDream-2BW: asynchronous "
                         "1F1B over --micro-batches M >= --gpus, one update per mini-batch, each mini-batch on the weights "
                         "before the previous update: two versions) | 2bw-predict (the same schedule, each mini-batch on the weights "
                         "after its previous update: the master once it ran, else SpecTrain's prediction of it one step ahead)");
  app.add_option("--schedule-file", o.schedule_file,
                 "run the synchronous schedule in this CSV file (stage,part,actions rows, as --schedule-out writes) "
                 "instead of a built-in one; checked before any work");
  app.add_option("--schedule-out", o.schedule_out, "write the schedule's per-stage program (CSV) to this file");
  app.add_option("--virtual-stages", o.virtual_stages,
                 "--schedule interleaved: model chunks per GPU (default 2); the model is cut into --gpus x V stages, "
                 "stage k on GPU k % --gpus; --micro-batches must be a multiple of --gpus")
      ->check(CLI::Range(1, 64));
  add_choice(app, "--recompute", &o.recompute,
             {{"none", pt::Recompute::kNone}, {"stage", pt::Recompute::kStage}, {"auto", pt::Recompute::kAuto}},
             "none | stage (each stage with several passes in flight that would save memory so keeps only its "
             "inputs per pass and reruns its forward before the backward; trained weights identical) | auto (only "
             "the stages that would not fit their device's memory otherwise)");
  add_choice(app, "--precision", &o.precision,
             {{"fp32", pt::Precision::kFp32}, {"bf16", pt::Precision::kBf16}, {"tf32", pt::Precision::kTf32}},
             "fp32 | bf16 (float32 master weights, optimizer state and accumulation; the inputs of every "
             "GEMM and convolution, forward and backward, rounded to bfloat16; CPUs with AVX512-BF16 or AMX) | "
             "tf32 (float32 tensors, TF32 tensor-core matrix products and convolutions; CUDA stages only)");
  add_choice(app, "--reshape-alias", &o.reshape_alias, {{"on", true}, {"off", false}},
             "on | off: Reshape, Flatten, Squeeze, Unsqueeze and Identity share their input's bytes where both live "
             "in a stage's arena (off: they copy; for A/B checks)");
  add_choice(app, "--weight-cache", &o.weight_cache,
             {{"auto", pt::WeightCachePolicy::kAuto}, {"off", pt::WeightCachePolicy::kOff}, {"all", pt::WeightCachePolicy::kAll}},
             "auto | off | all: which executors keep convolution weights in oneDNN's layout while they are unchanged "
             "(auto: GPipe stages with micro-batches and the evaluators; all: every executor)");
  f.micro_batches = app.add_option("--micro-batches", o.batch.micro_batches, "synchronous schedules (gpipe, zb-h1, 1f1b --weights sync): micro-batches per mini-batch")->check(integer())->check(positive())->capture_default_str();
  f.staleness = add_choice(app, "--spectrain-staleness", &o.staleness, {{"paper", pt::Staleness::kPaper}, {"exact", pt::Staleness::kExact}},
             "paper: s_fwd = floor(k/2) + N-k-1, s_bwd = floor(k/2); exact: N-k-1 and 0");
  app.add_flag("--trace", o.trace, "write every stage's forward and backward passes (mini-batch, weight version, staleness) to trace.json");
  app.add_option("--device-spec", o.device_spec, "device per stage: a built-in GPU (H100, H200, A100, V100, RTX3090, RTX4090, GTX1080Ti) or a JSON file; one for all or one per stage")->delimiter(',');
  app.add_option("--replica-link", o.replica_link, "link between the replicas of a stage, for the all-reduce the plan charges (same names as --link; default: --link)");
  app.add_option("--link", o.link, "link between stages: pcie3|pcie4|pcie5|nvlink2|nvlink3|nvlink4|host|network, or GBPS,US (default: host for CPU stages, pcie4 for GPUs)");
  app.add_option("--network-link", o.network_link, "link between nodes, for cuts across machines (under MPI, or with --ranks-per-node): a built-in link, GBPS,US such as 1.25,50 for 10 Gb/s Ethernet, or measure (timed between two ranks on different nodes before planning; the default under MPI across nodes, else network: 12.5 GB/s, 20 us)");
  app.add_option("--ranks-per-node", o.ranks_per_node,
                 "with --plan-only: plan a multi-node job, R stages per node (cuts between nodes use the network "
                 "link); under mpirun/srun the nodes come from the job")->check(integer())
      ->check(positive());
  app.add_option("--split-at", o.split_at, "manual plan: the first node of stages 1..N-1 (comma-separated)")->delimiter(',');
  app.add_option("--balance", o.balance, "manual plan: forward nodes per stage, e.g. 3,5,4")->delimiter(',');
}

// Checkpoints, and the run folder's and the exports' extras.
void add_checkpoint_and_export_flags(CLI::App& app, pt::TrainingSpec& o, FlagHandles& f) {
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "write RUN/checkpoints/step-<k>.ckpt every N steps and after the last (pipelined runs drain there)")->check(integer())
      ->check(positive());
  app.add_option("--keep-checkpoints", o.local.keep_checkpoints, "keep the newest K checkpoints")->check(integer())
      ->check(positive())->capture_default_str();
  f.resume = app.add_option("--resume", o.local.resume_path,
                                "continue from the newest intact checkpoint of the run folder, or from PATH (a .ckpt "
                                "file or a folder); --steps/--epochs stay totals; write --resume=PATH before the model")
                     ->expected(0, 1)->type_name("[PATH]");
  app.add_flag("--quiet", o.local.quiet, "print errors only");
  // ---- trainer-ux flags (exports, parameters, run folder, data, TensorBoard) ----
  app.add_flag("--overwrite", o.local.overwrite,
               "train into a run folder that holds a finished run (a trained model or metrics.csv), replacing it; "
               "without it such a folder is refused");
  app.add_option("--trainable", o.trainable,
                 "train only the float initializers matching these names or fnmatch globs (comma-separated; default: "
                 "the weights: rank >= 1 and feeding the data path, never scalars, exponents, epsilons, clip bounds)")
      ->delimiter(',');
  app.add_flag("--tensorboard", o.local.tensorboard,
               "also write the metrics (train/loss, train/lr, train/samples_per_s, val/loss, val/accuracy) as a "
               "TensorBoard event file into the run folder (tensorboard --logdir RUN)");
  app.add_option("--loss-output", o.loss_output,
                 "the model output the loss reads, by name (default: the first float output)");
  app.add_option("--ignore-index", o.ignore_index,
                 "cross-entropy: labels equal to this count for nothing (token-level labels [N, T] of sequence "
                 "outputs [N, T, V] or [N*T, V]; padding)")->check(integer())->capture_default_str();
  app.add_flag("--export-training", o.local.export_training,
               "also write RUN/<stem>.training.onnx: the trained weights in the source's training-mode graph "
               "(BatchNorm on batch statistics, Dropout on); <stem>.trained.onnx is always the inference model");
}

void assign_groups(CLI::App& app) {
  // --help prints the flags in these groups (a group's place: where its first flag was added).
  // get_option throws on a name that is not a flag; a flag left out stays under "Options", which
  // tests/cli/test_docs.py refuses, as it refuses --help and docs/cli.md drifting apart.
  const std::vector<std::pair<std::string, std::vector<std::string>>> groups = {
      {"Pipeline",
       {"--gpus", "--replicas", "--schedule", "--weights", "--schedule-file", "--schedule-out", "--virtual-stages", "--spectrain-staleness", "--micro-batches", "--recompute",
        "--plan-only", "--whatif", "--profile", "--calibrate", "--no-calibrate", "--split-at", "--balance",
        "--ranks-per-node"}},
      {"Devices", {"--device", "--oversubscribe", "--no-cuda-graphs", "--device-spec", "--link", "--replica-link", "--network-link"}},
      {"Data",
       {"--data", "--val-data", "--val-split", "--mean", "--std", "--raw-pixels", "--augment", "--on-bad-sample",
        "--tokenizer", "--token-dtype", "--stream-data", "--loader-threads", "--no-shuffle", "--seed", "--epochs",
        "--steps", "--batch-size", "--eval-every"}},
      {"Optimizer",
       {"--optimizer", "--lr", "--lr-schedule", "--warmup-steps", "--lr-decay-every", "--lr-gamma", "--lr-power",
        "--lr-min", "--weight-decay", "--momentum", "--dampening", "--nesterov", "--beta1", "--beta2", "--eps",
        "--clip-grad-norm"}},
      {"Model",
       {"--loss", "--loss-output", "--ignore-index", "--trainable", "--freeze", "--no-fusion", "--precision", "--reshape-alias",
        "--weight-cache"}},
      {"Output",
       {"--out", "--overwrite", "--log-every", "--quiet", "--trace", "--export-stages", "--export-training",
        "--tensorboard"}},
      {"Checkpoints", {"--checkpoint-every", "--keep-checkpoints", "--resume"}},
  };
  for (const auto& [group, flags] : groups)
    for (const std::string& flag : flags) app.get_option(flag)->group(group);
}

// The hidden test flags and the text after the flags.
void add_test_flags_and_footer(CLI::App& app, pt::TrainingSpec& o) {
  // Test-only switches (tests/CMakeLists.txt, tests/mpi/test_mpi.py), hidden from --help.
  app.add_flag("--test-separate-host", o.test.separate_host)->group("");
  app.add_flag("--test-weight-cache-verify", o.test.weight_cache_verify)->group("");
  app.add_flag("--test-weight-cache-ignore-versions", o.test.weight_cache_ignore_versions)->group("");
  app.add_option("--test-lose-rank", o.test.lose_rank)->group("");
  app.footer("Ctrl-C (SIGINT) or SIGTERM (how Slurm, Kubernetes and docker stop a job) stops a run at the next mini-batch boundary (pipelined runs: after the mini-batches "
             "already started), writes a checkpoint and the trained model, and exits 130. Under mpirun: kill -USR1 "
             "<mpirun's pid> (mpirun exits 130), or Ctrl-C (mpirun sends SIGTERM, then SIGKILL after "
             "--mca odls_base_sigkill_timeout seconds, 1 by default, and exits 1).\nExit codes: 0 done, 1 internal error, 2 bad input or usage (also a refused "
             "resume), 3 diverged (a non-finite loss, or weights that went non-finite: no model is written, the newest "
             "checkpoint is the last good one), 130 stopped by SIGINT or SIGTERM.");
}

// Parses the command line into `o`: -1 to go on, or the exit code (help, version, a usage error).
int parse_into_spec(CLI::App& app, int argc, char** argv, const FlagHandles& f, pt::TrainingSpec& o,
                    const pt::MpiJob& job) {
  try {
    app.parse(argc, argv);
    o.batch.micro_batches_given = f.micro_batches->count() > 0;
    o.resume = f.resume->count() > 0;
    for (const char* flag : {"--momentum", "--dampening", "--nesterov", "--beta1", "--beta2", "--eps"})
      if (app.count(flag) > 0) o.optimizer_flags.push_back(flag);
    o.local.data_given = f.data->count() > 0;
    if (app.count("--out") > 0 && o.local.out.empty()) throw CLI::ValidationError("--out", "needs a folder (it is empty)");
    for (const char* flag : {"--lr-decay-every", "--lr-gamma", "--lr-power", "--lr-min"})
      if (app.count(flag) > 0) o.local.schedule_flags.push_back(flag);
    o.local.eval_every_given = app.count("--eval-every") > 0;
    if (o.local.overwrite && o.resume) throw CLI::ExcludesError("--overwrite", "--resume");
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (job.leads_run()) {
      std::fprintf(stderr, "onnx-pipetrain: error: %s\n", plain_parse_error(e).c_str());
      std::fprintf(stderr, "run 'onnx-pipetrain --help' for the flags\n");
    }
    return 2;
  }
  return -1;
}

// The checks CLI11 cannot make, after the parse: -1 to go on, or the exit code.
int check_parsed(const FlagHandles& f, pt::TrainingSpec& o, pt::MpiJob& job) {
  if (pt::Status st = parse_replicas(f.replicas_text, o.gpus, &o); !st.is_ok()) return job.fail(st);
  if (pt::Status st = pt::resolve_schedule(f.schedule->count() > 0, f.weights->count() > 0, &o); !st.is_ok()) return job.fail(st);
  if (f.staleness->count() > 0 && o.weights != pt::WeightMode::kSpecTrain)
    return job.fail(pt::invalid_input(std::string("--spectrain-staleness: the run does not use SpecTrain's weights (--weights ") +
                                      pt::weight_mode_name(o.weights) + ")"));
  if (!job.leads_run()) o.local.quiet = true;  // rank 0 prints progress and reports
  if (pt::Status st = set_lose_rank(&o, job); !st.is_ok()) return job.fail(st);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  pt::configure_allocator();
  pt::configure_omp_wait(argv);
  auto job = pt::MpiJob::join(&argc, &argv, on_lost_rank);
  if (!job) {
    std::fprintf(stderr, "onnx-pipetrain: error: %s\n", job.status().message().c_str());
    return pt::exit_code_for(job.status());
  }
  if (!(*job)->cluster()) {  // under MPI, mpirun owns the signals (StopRequests shares the stop)
    std::signal(SIGINT, on_early_stop);
    std::signal(SIGTERM, on_early_stop);
  }
  // Lines reach a log file as they are printed, not when a buffer fills (or never, when the
  // process is stopped).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int code = main_impl(argc, argv, **job);
  if (pt::Status s = (*job)->leave(); !s.is_ok() && code == 0) {
    std::fprintf(stderr, "onnx-pipetrain: rank %d: error: %s\n", (*job)->rank(), s.message().c_str());
    code = 1;
  }
  return code;
}

int main_impl(int argc, char** argv, pt::MpiJob& job) {
  pt::TrainingSpec o;
  FlagHandles f;
  CLI::App app{"onnx-pipetrain: train an ONNX model with pipelined model parallelism (SpecTrain)", "onnx-pipetrain"};
  add_run_and_data_flags(app, o, f);
  add_optimizer_flags(app, o);
  add_model_and_output_flags(app, o);
  add_pipeline_flags(app, o, f);
  add_checkpoint_and_export_flags(app, o, f);
  assign_groups(app);
  add_test_flags_and_footer(app, o);
  if (const int rc = parse_into_spec(app, argc, argv, f, o, job); rc >= 0) return rc;
  if (const int rc = check_parsed(f, o, job); rc >= 0) return rc;
  try {
    const int rc = pt::run_training(o, job);
    // A diagnostic print, not a switch: it changes nothing the run computes, so it stays an
    // environment variable (tests/cli/test_weight_cache.py reads the counts).
    if (const char* e = std::getenv("PIPETRAIN_WEIGHT_CACHE_STATS"); e && *e && std::string(e) != "0") {
      const pt::WeightCacheStats s = pt::weight_cache_stats();
      std::fprintf(stderr, "weight cache: %llu hits, %llu reorders\n", static_cast<unsigned long long>(s.hits),
                   static_cast<unsigned long long>(s.reorders));
    }
    return rc;
  } catch (const std::exception& e) {
    if (job.in_job()) return job.fail(pt::internal_error(e.what()));
    std::fprintf(stderr, "onnx-pipetrain: internal error: %s\n", e.what());
    return 1;
  }
}
