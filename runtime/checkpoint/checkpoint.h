// Training checkpoints (single-stage and pipelined runs share the format): every persistent buffer plus the loop's position
// (step, data order, shuffle RNG), in one checksummed file written atomically (temporary file,
// fsync, rename), so a run killed at any moment resumes from its newest intact checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/status.h"
#include "core/tensor.h"

namespace pt {

// What must be the same to resume: a checkpoint of one run does not continue another.
struct CheckpointMeta {
  std::string model_hash;  // ImportedModel::hash
  int64_t batch_size = 0;
  float lr = 0;
  float momentum = 0;
  float weight_decay = 0;
  std::string optimizer = "sgd-paper";  // runtime/exec/optimizer.h's optimizer_description
  float clip_grad_norm = 0;
  uint64_t seed = 0;
  std::string loss;        // "cross-entropy" | "mse" (resolved, not "auto")
  bool shuffle = true;
  int64_t data_samples = 0;
  std::string data_hash;   // FNV-1a 64 of the training set's x and y bytes, hex
  std::string lr_schedule; // LrSchedule::describe() (empty in checkpoints older than schedules)
  // How the run was trained ("1 stage", "4 stages, 1F1B spectrain (paper)"): recorded, not
  // compared: a drained checkpoint resumes on another --gpus or schedule.
  std::string pipeline;
  // --precision ("fp32", "bf16"): compared, a resume in another precision is refused. Written only
  // when not fp32, so fp32 checkpoints are as before.
  std::string precision = "fp32";
};

// Empty when the two agree; otherwise one clause per difference, naming the flag and both values
// ("--batch-size: 32 in the checkpoint, 16 now").
std::string describe_mismatch(const CheckpointMeta& saved, const CheckpointMeta& now);

// The metrics.csv rows of steps 1..n as a checkpoint carries them, in constant space however long
// the run: metrics.csv holds the rows; a checkpoint keeps their count, the FNV-1a 64 of rows
// 1..n-1 (each with its '\n', as in the file) and row n itself, which the file of a run that ended
// there holds with the extra validation of its last step.
struct MetricsTail {
  int64_t rows = 0;
  uint64_t hash = kFnv1a64Offset;  // of rows 1..rows-1
  std::string last;                       // row `rows` (empty when rows == 0)
  void add(const std::string& row);
  bool operator==(const MetricsTail&) const = default;
};

struct Checkpoint {
  CheckpointMeta meta;
  int64_t step = 0;                  // steps completed
  int64_t epoch = 0;                 // 0-based epoch the next step belongs to
  std::vector<int64_t> order;        // the data order as it stands (reshuffled first when position is 0)
  int64_t position = 0;              // mini-batches of that epoch already done
  std::string rng;                   // the shuffle std::mt19937_64, as operator<< writes it
  double first_loss = 0, last_loss = 0;  // of step 1 and of step `step` (TrainResult)
  // The last end-of-epoch validation (TrainResult::val). The metrics rows, too, leave out the extra
  // validation a run does after its last step, so a resumed run writes what an uninterrupted one would.
  int64_t val_samples = 0;
  double val_loss = 0, val_accuracy = -1;
  MetricsTail metrics;               // the metrics.csv rows of steps 1..step
  // Checkpoints written before MetricsTail carried the rows themselves (read, never written).
  std::vector<std::string> legacy_metrics;
  std::map<std::string, HostTensor> tensors;  // parameters, momentum, BatchNorm running stats
  // The plan that wrote it, one line per stage: "stage 1: fc2 .. out (2 parameters)"; a resume
  // on another plan re-partitions (the checkpoint is drained) and says so.
  std::vector<std::string> plan;
  std::string source;  // the file read_checkpoint read it from (not stored)
};

// The metrics.csv rows of steps 1..c.step, for a resumed run to write again: from the checkpoint
// when it carries them (legacy_metrics), else the first c.step - 1 rows of metrics.csv.partial (a
// run killed) or metrics.csv, checked against c.metrics, then c.metrics.last. The files looked at:
// `metrics_path` (this run's), then the metrics.csv of the run folder that holds the checkpoint's
// checkpoints/ folder. When no file holds them, a notice says so and only the last row is returned.
std::vector<std::string> resume_metrics_rows(const Checkpoint& c, const std::string& metrics_path,
                                             std::vector<std::string>* notices);

// File layout (little-endian): "PTCKPT\r\n" (8 bytes), u32 version (1), u32 0, u64 JSON bytes,
// u64 tensor bytes, u64 FNV-1a 64 of everything after the header; then the JSON section (meta,
// loop state, the metrics tail, and per tensor its name, dtype, dims, offset and bytes); then the raw
// tensor bytes. Written to PATH.tmp, fsync'ed, renamed to PATH, and the folder fsync'ed.
Status write_checkpoint(const std::string& path, const Checkpoint& c);
// Reads and verifies (magic, version, sizes, checksum) a checkpoint; a truncated or torn file is
// an error naming the file and what is wrong.
Expected<Checkpoint> read_checkpoint(const std::string& path);

// "DIR/step-<step>.ckpt".
std::string checkpoint_path(const std::string& dir, int64_t step);
// The step-<k>.ckpt files of dir, oldest (lowest step) first; temporary files are not listed.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The newest checkpoint of dir that reads back intact; each damaged newer one is skipped with a
// line in *notices. No intact one: an error naming the folder.
Expected<Checkpoint> read_newest_checkpoint(const std::string& dir, std::vector<std::string>* notices,
                                            std::string* path = nullptr);
// Writes c as DIR/step-<c.step>.ckpt (creating DIR), then keeps the newest `keep`; returns the path.
Expected<std::string> save_checkpoint(const std::string& dir, int keep, const Checkpoint& c);

// The first float32/float64 tensor of `tensors` holding a NaN or an infinity, described as
// "'fc.weight' holds NaN (element 3 of 640)"; empty when every one is finite. save_checkpoint
// refuses such a state (StatusCode::kDiverged), so the newest checkpoint is always a good one,
// and the command line will not write a trained model from it.
std::string describe_non_finite(const std::map<std::string, HostTensor>& tensors);
// Removes all but the newest `keep` checkpoints of dir, and leftover temporary files.
Status prune_checkpoints(const std::string& dir, int keep);


}  // namespace pt
