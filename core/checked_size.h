// Sizes read from files (models, data, checkpoints) before anything is allocated by them: a
// dimension or count is checked for sign and overflow here, then against what the file holds.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace pt {

// numel of dims read from a file: false when a dimension is negative or the product overflows
// int64 (*n is then left as it was).
inline bool checked_numel(const Dims& d, int64_t* n) {
  int64_t p = 1;
  for (int64_t x : d)
    if (x < 0 || __builtin_mul_overflow(p, x, &p)) return false;
  *n = p;
  return true;
}

}  // namespace pt
