#include "runtime/loop/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pt {

namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

bool parse_lr_schedule_kind(const std::string& s, LrSchedule::Kind* kind) {
  if (s == "constant") *kind = LrSchedule::Kind::kConstant;
  else if (s == "step") *kind = LrSchedule::Kind::kStep;
  else if (s == "cosine") *kind = LrSchedule::Kind::kCosine;
  else if (s == "poly") *kind = LrSchedule::Kind::kPoly;
  else return false;
  return true;
}

const char* lr_schedule_name(LrSchedule::Kind kind) {
  switch (kind) {
    case LrSchedule::Kind::kStep: return "step";
    case LrSchedule::Kind::kCosine: return "cosine";
    case LrSchedule::Kind::kPoly: return "poly";
    case LrSchedule::Kind::kConstant: break;
  }
  return "constant";
}

double LrSchedule::at(int64_t t) const {
  if (warmup > 0 && t <= warmup) return base * static_cast<double>(t) / static_cast<double>(warmup);
  const int64_t after = t - warmup;                       // 1-based step after the warm-up
  const int64_t span = std::max<int64_t>(1, total - warmup);  // steps the decay runs over
  // progress: 0 at the first step after warm-up, (span-1)/span at the last one (so that the last
  // update still moves; min_lr would be reached after the run).
  const double p = std::clamp(static_cast<double>(after - 1) / static_cast<double>(span), 0.0, 1.0);
  switch (kind) {
    case Kind::kConstant:
      return base;
    case Kind::kStep:
      return decay_every > 0 ? base * std::pow(gamma, static_cast<double>((after - 1) / decay_every)) : base;
    case Kind::kCosine:
      return min_lr + (base - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
    case Kind::kPoly:
      return min_lr + (base - min_lr) * std::pow(1.0 - p, power);
  }
  return base;
}

std::string LrSchedule::describe() const {
  std::string s;
  switch (kind) {
    case Kind::kConstant: s = "constant " + num(base); break;
    case Kind::kStep: s = "step " + num(base) + " x" + num(gamma) + " every " + std::to_string(decay_every); break;
    case Kind::kCosine: s = "cosine " + num(base) + " to " + num(min_lr); break;
    case Kind::kPoly: s = "poly " + num(base) + " to " + num(min_lr) + " power " + num(power); break;
  }
  if (warmup > 0) s += ", warm-up " + std::to_string(warmup);
  if (kind != Kind::kConstant) s += ", over " + std::to_string(total) + " steps";
  return s;
}

Status LrSchedule::validate() const {
  if (!(base > 0)) return invalid_input("--lr " + num(base) + ": must be positive");
  if (warmup < 0) return invalid_input("--warmup-steps " + std::to_string(warmup) + ": must not be negative");
  if (total > 0 && warmup >= total && warmup > 0)
    return invalid_input("--warmup-steps " + std::to_string(warmup) + ": the run has only " + std::to_string(total) +
                         " steps");
  if (kind == Kind::kStep && decay_every <= 0)
    return invalid_input("--lr-schedule step needs --lr-decay-every N (steps between decays)");
  if (kind == Kind::kStep && !(gamma > 0 && gamma <= 1))
    return invalid_input("--lr-gamma " + num(gamma) + ": must be in (0, 1]");
  if ((kind == Kind::kCosine || kind == Kind::kPoly) && !(min_lr >= 0 && min_lr < base))
    return invalid_input("--lr-min " + num(min_lr) + ": must be at least 0 and below --lr " + num(base));
  if (kind == Kind::kPoly && !(power > 0)) return invalid_input("--lr-power " + num(power) + ": must be positive");
  return Status::ok();
}

}  // namespace pt
