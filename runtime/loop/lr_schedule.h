// Learning-rate schedules (--lr-schedule): constant, step, cosine and polynomial decay, each with
// an optional linear warm-up. The rate of step t (1-based) depends on t and the run's total steps
// only, so a resumed run and a pipelined one use the rates an uninterrupted run would.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace pt {

struct LrSchedule {
  enum class Kind { kConstant, kStep, kCosine, kPoly };
  Kind kind = Kind::kConstant;
  double base = 0.05;        // --lr: the rate after warm-up
  int64_t warmup = 0;        // --warmup-steps: linear from base/warmup to base over steps 1..warmup
  int64_t decay_every = 0;   // step: multiply by gamma every N steps after warm-up
  double gamma = 0.1;        // step
  double power = 2.0;        // poly: (1 - progress)^power (the SpecTrain reproduction used 2)
  double min_lr = 0.0;       // cosine and poly approach it: progress is (t - warmup - 1) / (total - warmup)
  int64_t total = 0;         // steps of the whole run (the target, not what is left after a resume)

  // The rate of step t, 1 <= t <= total.
  double at(int64_t t) const;
  // "cosine (warm-up 100, to 0)": for logs and checkpoint comparison.
  std::string describe() const;
  // Refuses combinations that make no sense (step schedule without --lr-decay-every, warm-up
  // longer than the run, ...); messages name the flag.
  Status validate() const;
};

// "constant" | "step" | "cosine" | "poly"; false when unknown.
bool parse_lr_schedule_kind(const std::string& s, LrSchedule::Kind* kind);
// The flag value of `kind` ("constant", ...).
const char* lr_schedule_name(LrSchedule::Kind kind);

}  // namespace pt
