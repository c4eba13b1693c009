// The cost model calibrated on this machine: small training graphs of each op class (GEMM,
// convolution, depthwise convolution, normalisation, softmax, pooling and reductions, data
// movement, element-wise), at a few sizes each, run forward, backward and update on the real
// device with its real kernels; every node's measured time against its roofline time fits its
// class's floor and scale (partitioner/device_spec.h, ClassCost). Cached per machine and build in
// the user's cache folder; a corrupt or foreign cache is ignored with a notice and rebuilt.
#pragma once

#include <string>

#include "core/status.h"
#include "partitioner/device_spec.h"

namespace pt {

struct CalibrationOptions {
  std::string cache_dir;  // empty: no cache
  int threads = 1;        // CPU: the stage's threads (its share of the cores)
  bool refresh = false;   // --calibrate: measure again even when a cache fits
  bool quiet = false;     // no notice lines
};

struct CalibrationResult {
  bool from_cache = false;
  double seconds = 0;         // measuring took (0 from the cache)
  int points = 0;             // nodes measured
  double median_error = 0;    // of the fit over those nodes, relative
  std::string cache_path;
};

// Fills spec->classes (and sets spec->calibrated) from a calibration of `spec->kind` at the spec's
// peak rates (the roofline the classes scale). Takes a few seconds on first use, nothing later.
Expected<CalibrationResult> calibrate_device(DeviceSpec* spec, const CalibrationOptions& opts);

}  // namespace pt
