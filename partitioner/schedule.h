// Pipeline schedules as data: per stage, the ordered actions it runs (forward F, backward B, or
// the backward split into its input-gradient part I and its weight-gradient part W, and the
// update U), written by one generator per schedule or read from a file. The stage worker
// (runtime/pipeline/stage.cpp) executes a stage's program, the simulator (simulator.h) times it,
// the memory model counts its passes in flight; none of them has a schedule of its own.
//
// A program is a warm-up that runs once and a steady part that runs once per iteration i =
// 0, 1, ...; every action names its micro-batch j and a mini-batch offset: warm-up actions work
// on mini-batch `offset`, steady actions of iteration i on mini-batch i + offset. Running
// mini-batches [first, end) skips every action of a mini-batch outside that range, so a segment
// that ends early drains itself: the same program serves any number of steps.
//
// Asynchronous 1F1B, stage k of N: warm-up F0, F0+1, ..., F0+(N-k-2); steady F0+(N-k-1) B0 U.
// Synchronous schedules (every micro-batch's backward before one update per mini-batch, a flush)
// have no warm-up and offsets 0: their steady part is one mini-batch.
//
// Interleaved stages (Megatron-LM's interleaved 1F1B): the model is cut into N x V virtual stages
// and device d of N runs virtual stages d, d + N, ..., d + (V-1) N (its chunks 0 .. V-1, round
// robin). Its program is one list over all of its chunks, each action naming its chunk; the
// program of one virtual stage alone is chunk_program(). ZB-V places its 2 N virtual stages in a
// V instead (v_shape): device d runs virtual stages d and 2N-1-d, so the forward runs down the
// devices and back up, and the loss is on device 0.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace pt {

// Pass order: asynchronous or synchronous 1F1B (--weights), GPipe, or zero-bubble ZB-H1
// (synchronous 1F1B with each backward split into I and W, W deferred to fill the bubbles).
// kAuto (--schedule auto) stands for the synchronous schedule the planner picks (the best
// predicted throughput that fits); it is resolved before partitioning and never runs.
// kInterleaved: synchronous 1F1B over N x V virtual stages, V per device (Narayanan et al., SC 2021):
// the bubble of 1F1B divided by V, for V times the activation transfers.
// kZBV: ZB-V (Qi et al., ICLR 2024): 2 N virtual stages in a V over N devices, each backward split
// into I and W as ZB-H1's, ordered by the same greedy scheduler over the devices' chunks.
enum class Schedule { k1F1B, kGPipe, kZBH1, kInterleaved, kZBV, kAuto };
// The weights a pass reads: SpecTrain's prediction, the forward's stashed version, the current
// ones (stale), or one version per mini-batch (sync: GPipe, ZB-H1, 1F1B with a flush).
// k2BW: PipeDream-2BW (Narayanan et al., ICML 2021): asynchronous 1F1B over micro-batches, one
// update per mini-batch of M >= N micro-batches, every pass of mini-batch i on the weights after
// update i-1 (a constant delay of 1: W(i+1) = W(i) - lr grad(W(i-1))), so two versions suffice.
// k2BWPredict: the same schedule, every pass of mini-batch i on the weights after update i (the
// master once that update ran, else SpecTrain's prediction of it one step ahead), one version.
enum class WeightMode { kSpecTrain, kStash, kStale, kSync, k2BW, k2BWPredict };
inline bool two_bw_family(WeightMode w) { return w == WeightMode::k2BW || w == WeightMode::k2BWPredict; }
const char* schedule_name(Schedule s);
const char* weight_mode_name(WeightMode w);
// Every micro-batch of a mini-batch finishes its backward before one update of that mini-batch:
// the gradients of GPipe, whatever the order of the passes.
inline bool synchronous(Schedule s, WeightMode w) { return s != Schedule::k1F1B || w == WeightMode::kSync; }
// A mini-batch runs as M micro-batches (one graph pass each) with one update: the synchronous
// schedules and 2BW.
inline bool micro_batched(Schedule s, WeightMode w) { return synchronous(s, w) || two_bw_family(w); }
// Several virtual stages per device (interleaved stages, ZB-V).
inline bool chunked_schedule(Schedule s) { return s == Schedule::kInterleaved || s == Schedule::kZBV; }

enum class ActionKind : uint8_t { kForward, kBackward, kInputGrad, kWeightGrad, kUpdate };

struct Action {
  ActionKind kind = ActionKind::kForward;
  int micro = 0;   // micro-batch in its mini-batch (0 for U)
  int offset = 0;  // mini-batch offset (see the top)
  int chunk = 0;   // interleaved stages: which of the device's virtual stages runs it (0 .. V-1)
  bool operator==(const Action& o) const {
    return kind == o.kind && micro == o.micro && offset == o.offset && chunk == o.chunk;
  }
};
// "F0", "B3", "I1", "W1", "U"; "+k" appended when the offset is not 0 ("F0+2"), "@c" when the
// chunk is not 0 ("F3@1": micro-batch 3's forward on the device's chunk 1).
std::string action_token(const Action& a);

struct StageProgram {
  std::vector<Action> warmup, steady;
};

// The device of virtual stage v of `devices` x chunks: v % devices (round robin), or in a V
// (ZB-V: chunk 1 runs back up the devices).
inline int virtual_device(int v, int devices, bool v_shape) {
  const int c = v / devices, d = v % devices;
  return v_shape && c % 2 == 1 ? devices - 1 - d : d;
}

struct ScheduleIR {
  std::string name;       // "1f1b", "1f1b-sync", "gpipe", "zb-h1", or the file it was read from
  int micro_batches = 1;  // per mini-batch
  bool synchronous = false;
  // Virtual stages per device (interleaved stages; 1 otherwise): stages[d] is device d's program
  // over its chunks, chunk c of device d is virtual stage c * stages.size() + d.
  int chunks = 1;
  bool v_shape = false;  // ZB-V's placement (2 chunks): chunk 1 of device d is virtual stage 2N-1-d
  std::vector<StageProgram> stages;
  // True when some stage runs I and W instead of B (the executor then splits its backward).
  bool splits_backward() const;
  int virtual_stages() const { return static_cast<int>(stages.size()) * chunks; }
  int device_of(int virtual_stage) const { return virtual_device(virtual_stage, static_cast<int>(stages.size()), v_shape); }
  int chunk_of(int virtual_stage) const { return virtual_stage / static_cast<int>(stages.size()); }
  int virtual_of(int device, int chunk) const {
    const int n = static_cast<int>(stages.size());
    return v_shape && chunk % 2 == 1 ? (chunk + 1) * n - 1 - device : chunk * n + device;
  }
  // The actions of virtual stage `v` alone, in its device's order, as a program of one chunk
  // (chunk fields 0): what that stage keeps in flight and checks against its own data.
  StageProgram chunk_program(int v) const;
};

// The times of one stage's F, I and W (any unit), for schedules whose order depends on them.
using PassTimes = std::array<double, 3>;
// The program of schedule `s` with weight mode `w` over `stages` stages and `micro_batches`
// micro-batches per mini-batch (asynchronous 1F1B: 1). `times` ([stage]): ZB-H1's order fits
// them (null: every F, I and W takes one unit); the other schedules ignore them. kInterleaved:
// `stages` devices with `chunks` virtual stages each (Megatron-LM's order, which needs
// micro_batches a multiple of stages: interleaved_error says so first). kZBV: `stages` devices,
// 2 chunks each in a V (chunks is ignored).
ScheduleIR make_schedule(Schedule s, WeightMode w, int stages, int micro_batches,
                         const std::vector<PassTimes>* times = nullptr, int chunks = 1);
// Why interleaved stages cannot run `micro_batches` on `stages` devices with `chunks` each
// (empty when they can): the flag to change and what would work.
std::string interleaved_error(int stages, int chunks, int micro_batches);

// One action of an expanded program, with its mini-batch.
struct Step {
  Action action;
  int64_t mini_batch = 0;
};

// Walks stage program `p` over mini-batches [first, end); set_end() lowers the end while walking
// (a segment stopped early): later actions of mini-batches at or past it are skipped.
class ProgramCursor {
 public:
  ProgramCursor(const StageProgram& p, int64_t first, int64_t end);
  bool next(Step* s);  // false when the program is done
  void set_end(int64_t end) { end_ = std::min(end_, end); }

 private:
  const StageProgram& p_;
  int64_t first_, end_;
  size_t pos_ = 0;        // in warmup, then in steady
  int64_t iteration_ = 0;  // of steady (relative to first)
  bool in_warmup_ = true;
  int min_offset_ = 0;    // of steady
};

// Every action of stage program `p` for mini-batches [0, mini_batches).
std::vector<Step> expand(const StageProgram& p, int64_t mini_batches);

// Refuses a program that misses or repeats a pass, or orders one against its own data: every
// micro-batch of every mini-batch gets one F and either one B or one I then one W, after its F;
// every mini-batch one U, after its backward work on that stage (synchronous: after all of it).
// `where` starts the message ("schedule.csv: "); it names the stage, the mini-batch and the action.
// Interleaved programs are checked per virtual stage (chunk_program) and for chunks in range.
Status check_schedule(const ScheduleIR& ir, const std::string& where);

// The most passes stage k (a virtual stage of an interleaved schedule) keeps at once between
// their F and the end of their backward (B, or W when split): the saved-activation slots it needs. `after_input_grad`: count a split pass only
// until its I (what it keeps after I is the smaller W state, counted by w_state_in_flight).
int program_in_flight(const ScheduleIR& ir, int stage, bool after_input_grad = false);
// The most split passes stage k holds between their I and their W.
int w_state_in_flight(const ScheduleIR& ir, int stage);
// program_in_flight of make_schedule(s, w, stages, micro_batches) (memoised): what the memory
// model charges stage k's saved activations for. ZB-H1: the bound its caps set on any order,
// min(M, N-k before I + N waiting for W). Interleaved and ZB-V: `stages` virtual stages, `chunks` per
// device (ZB-V: 2, its unit-time order, the one it runs).
int schedule_in_flight(Schedule s, WeightMode w, int stages, int stage, int micro_batches, int chunks = 1);

// The file form (--schedule-file, --schedule-out): a CSV with the header "stage,part,actions",
// one row per stage and part ("warmup" or "steady"), the actions space-separated tokens of
// action_token; lines starting with '#' are comments. Files hold synchronous schedules. A file
// whose actions name chunks ("F0@1") is interleaved: its chunks are the highest named plus one.
std::string schedule_csv(const ScheduleIR& ir);
Expected<ScheduleIR> parse_schedule_csv(const std::string& text, const std::string& path);
Expected<ScheduleIR> read_schedule_file(const std::string& path);

}  // namespace pt
