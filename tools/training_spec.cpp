// The training spec's names and its canonical serialization (tools/training_spec.h).
#include "tools/training_spec.h"

#include <nlohmann/json.hpp>

namespace pt {

const char* device_choice_name(DeviceChoice d) {
  switch (d) {
    case DeviceChoice::kAuto: return "auto";
    case DeviceChoice::kCpu: return "cpu";
    case DeviceChoice::kCuda: return "cuda";
  }
  return "?";
}

namespace {

using json = nlohmann::ordered_json;

// One serializer per struct. A field added to TrainingSpec changes its size, which stops the
// build here until the field is serialized too (or, if rank-local, put into RunLocal): so the
// agreement between ranks can never forget a flag. The sizes are this project's toolchain's
// (GCC, libstdc++, x86-64/aarch64 LP64).
static_assert(sizeof(BatchSpec) == 16, "BatchSpec changed: serialize the new field below");
static_assert(sizeof(TestHooks) == 72, "TestHooks changed: serialize the new field below");
static_assert(sizeof(TrainingSpec) == 688 + sizeof(TestHooks) + sizeof(RunLocal),
              "TrainingSpec changed: serialize the new field below (or move a rank-local one into RunLocal)");

json to_json_value(const BatchSpec& b) {
  return {{"mini_batch", b.mini_batch}, {"micro_batches", b.micro_batches}, {"micro_batches_given", b.micro_batches_given}};
}

json to_json_value(const TestHooks& t) {
  // after_update is what the command line made of lose_rank: the flag's text stands for it.
  return {{"separate_host", t.separate_host},
          {"weight_cache_verify", t.weight_cache_verify},
          {"weight_cache_ignore_versions", t.weight_cache_ignore_versions},
          {"lose_rank", t.lose_rank}};
}

json to_json_value(const TrainingSpec& s) {
  return {
      {"model", s.model},
      {"gpus", s.gpus},
      {"replicas", s.replicas},
      {"replicas_auto", s.replicas_auto},
      {"device", device_choice_name(s.device)},
      {"oversubscribe", s.oversubscribe},
      {"batch", to_json_value(s.batch)},
      {"schedule", schedule_name(s.schedule)},
      {"weights", weight_mode_name(s.weights)},
      {"schedule_file", s.schedule_file},
      {"schedule_out", s.schedule_out},
      {"virtual_stages", s.virtual_stages},
      {"staleness", staleness_name(s.staleness)},
      {"recompute", recompute_name(s.recompute)},
      {"precision", precision_name(s.precision)},
      {"reshape_alias", s.reshape_alias},
      {"cuda_graphs", s.cuda_graphs},
      {"weight_cache", weight_cache_policy_name(s.weight_cache)},
      {"epochs", s.epochs},
      {"steps", s.steps},
      {"lr", s.lr},
      {"lr_schedule", static_cast<int>(s.lr_schedule)},
      {"warmup_steps", s.warmup_steps},
      {"lr_decay_every", s.lr_decay_every},
      {"lr_gamma", s.lr_gamma},
      {"lr_power", s.lr_power},
      {"lr_min", s.lr_min},
      {"optimizer", optimizer_name(s.optimizer)},
      {"momentum", s.momentum},
      {"weight_decay", s.weight_decay},
      {"dampening", s.dampening},
      {"nesterov", s.nesterov},
      {"beta1", s.beta1},
      {"beta2", s.beta2},
      {"eps", s.eps},
      {"clip_grad_norm", s.clip_grad_norm},
      {"optimizer_flags", s.optimizer_flags},
      {"loss", static_cast<int>(s.loss)},
      {"ignore_index", s.ignore_index},
      {"loss_output", s.loss_output},
      {"freeze", s.freeze},
      {"trainable", s.trainable},
      {"no_fusion", s.no_fusion},
      {"eval_every", s.eval_every},
      {"val_split", s.val_split},
      {"mean", s.mean},
      {"std", s.std},
      {"raw_pixels", s.raw_pixels},
      {"seed", s.seed},
      {"no_shuffle", s.no_shuffle},
      {"plan_only", s.plan_only},
      {"whatif", s.whatif},
      {"profile", s.profile},
      {"trace", s.trace},
      {"calibrate", s.calibrate},
      {"no_calibrate", s.no_calibrate},
      {"device_spec", s.device_spec},
      {"link", s.link},
      {"replica_link", s.replica_link},
      {"network_link", s.network_link},
      {"split_at", s.split_at},
      {"balance", s.balance},
      {"ranks_per_node", s.ranks_per_node},
      {"checkpoint_every", s.checkpoint_every},
      {"resume", s.resume},
      {"test", to_json_value(s.test)},
  };
}

}  // namespace

std::string serialize_for_agreement(const TrainingSpec& spec) { return to_json_value(spec).dump(); }

Status resolve_schedule(bool schedule_given, bool weights_given, TrainingSpec* o) {
  const bool file = !o->schedule_file.empty();
  if (file && schedule_given)
    return invalid_input("--schedule-file " + o->schedule_file + " replaces --schedule; give one of them");
  if ((file || o->schedule != Schedule::k1F1B) && weights_given && o->weights != WeightMode::kSync)
    return invalid_input(std::string("--weights ") + weight_mode_name(o->weights) + ": " +
                         (file ? "a schedule file" : std::string("--schedule ") + schedule_name(o->schedule)) +
                         " is synchronous (one weight version per mini-batch); it takes --weights sync or no --weights");
  if (file || o->schedule != Schedule::k1F1B) o->weights = WeightMode::kSync;
  if (two_bw_family(o->weights)) {
    if (file || o->schedule != Schedule::k1F1B)
      return invalid_input(std::string("--weights ") + weight_mode_name(o->weights) + " runs the 1f1b schedule, not " +
                           (file ? "a schedule file" : std::string("--schedule ") + schedule_name(o->schedule)));
    if (o->batch.micro_batches < o->gpus)
      return invalid_input(std::string("--weights ") + weight_mode_name(o->weights) + ": --micro-batches " +
                           std::to_string(o->batch.micro_batches) + " is fewer than --gpus " +
                           std::to_string(o->gpus) + "; its two weight versions need at least one micro-batch per stage");
  }
  if (o->schedule == Schedule::kAuto && o->replicas_auto)
    return invalid_input("--schedule auto with --replicas auto: choose one of them (the schedule is chosen for a layout)");
  if (o->virtual_stages > 0 && (file || o->schedule != Schedule::kInterleaved))
    return invalid_input("--virtual-stages applies to --schedule interleaved only" +
                         std::string(file ? " (a schedule file's actions name their chunks: F0@1)"
                                     : o->schedule == Schedule::kZBV ? " (zbv runs 2 per stage)" : ""));
  if (o->schedule == Schedule::kZBV) {
    if (o->gpus < 2) return invalid_input("--schedule zbv needs at least 2 stages (--gpus)");
    if (o->replicas_auto) return invalid_input("--schedule zbv with --replicas auto: give --replicas R");
    o->virtual_stages = 2;
  }
  if (o->schedule == Schedule::kInterleaved) {
    if (o->virtual_stages == 0) o->virtual_stages = 2;
    if (o->replicas_auto) return invalid_input("--schedule interleaved with --replicas auto: give --replicas R");
    if (const std::string why = interleaved_error(o->gpus, o->virtual_stages, o->batch.micro_batches); !why.empty())
      return invalid_input(why);
  }
  if (!file) {
    if (o->virtual_stages == 0) o->virtual_stages = 1;
    return Status::ok();
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const ScheduleIR> ir, schedule_file_program(*o));
  if (static_cast<int>(ir->stages.size()) != o->gpus)
    return invalid_input(o->schedule_file + ": a schedule of " + std::to_string(ir->stages.size()) + " stages; --gpus is " +
                         std::to_string(o->gpus));
  if (o->batch.micro_batches_given && o->batch.micro_batches != ir->micro_batches)
    return invalid_input(o->schedule_file + ": a schedule of " + std::to_string(ir->micro_batches) +
                         " micro-batches per mini-batch; --micro-batches is " + std::to_string(o->batch.micro_batches));
  o->batch.micro_batches = ir->micro_batches;
  o->batch.micro_batches_given = true;
  o->schedule = ir->v_shape        ? Schedule::kZBV
                : ir->chunks > 1     ? Schedule::kInterleaved
                : ir->splits_backward() ? Schedule::kZBH1
                                        : Schedule::k1F1B;
  o->virtual_stages = ir->chunks;
  return Status::ok();
}

Expected<std::shared_ptr<const ScheduleIR>> schedule_file_program(const TrainingSpec& o) {
  if (o.schedule_file.empty()) return std::shared_ptr<const ScheduleIR>();
  ASSIGN_OR_RETURN(ScheduleIR ir, read_schedule_file(o.schedule_file));
  if (!ir.synchronous)
    return invalid_input(o.schedule_file + ": warmup rows and +offsets make an asynchronous program; schedule files hold "
                         "synchronous schedules (each steady row one mini-batch, ending in U)");
  return std::make_shared<const ScheduleIR>(std::move(ir));
}

ExecSettings exec_settings(const TrainingSpec& spec) {
  ExecSettings e;
  e.reshape_alias = spec.reshape_alias;
  e.tf32 = spec.precision == Precision::kTf32;
  e.cuda_graphs = spec.cuda_graphs;
  e.weight_cache = spec.weight_cache;
  e.weight_cache_checks.verify = spec.test.weight_cache_verify;
  e.weight_cache_checks.ignore_versions = spec.test.weight_cache_ignore_versions;
  e.separate_host = spec.test.separate_host;
  return e;
}

}  // namespace pt
