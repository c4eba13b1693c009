// Plan helpers and single-stage plans.
#include "partitioner/plan.h"

#include <algorithm>

#include "partitioner/cost_model.h"

namespace pt {

const char* staleness_name(Staleness s) { return s == Staleness::kExact ? "exact" : "paper"; }

int spectrain_staleness(int stage, int num_stages, bool backward, Staleness mode) {
  const int gap = num_stages - stage - 1;
  if (mode == Staleness::kExact) return backward ? 0 : gap;
  return backward ? stage / 2 : stage / 2 + gap;
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kStage: return "stage";
    case Recompute::kAuto: return "auto";
  }
  return "?";
}

}  // namespace pt
