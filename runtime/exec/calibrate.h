// The cost model calibrated on this machine: small training graphs of each op class (GEMM,
// convolution, depthwise convolution, normalisation, softmax, pooling and reductions, data
// movement, element-wise), at a few sizes each, run forward, backward and update on the real
// device with its real kernels; every node's measured time against its FLOPs and bytes fits its
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

// The user's cache folder for the CPU spec and the calibrations: $XDG_CACHE_HOME/onnx-pipetrain, else
// ~/.cache/onnx-pipetrain, else one in the temporary folder; created. Empty when it cannot be made
// (no cache then).
std::string user_cache_dir();

// One measured node of a calibration: its class and phase (0: forward and loss, 1: backward and
// update), the node count (1), flops / peak_flops, bytes / mem_bandwidth and the measured seconds.
struct CalibrationPoint {
  int cls = 0, phase = 0;
  double count = 1, flops_s = 0, bytes_s = 0, t = 0;
};

// floor + scale x flops_s + byte_scale x bytes_s fitted to `pts` by non-negative least squares, each
// point weighing 1 / t (between absolute errors, which only the largest nodes would decide, and
// relative ones, which the many tiny nodes would). No points: all zero.
ClassCost fit_class_cost(const std::vector<CalibrationPoint>& pts);

// Fills spec->classes (and sets spec->calibrated) from a calibration of `spec->kind` at the spec's
// peak rates (the roofline the classes scale). Takes a few seconds on first use, nothing later.
Expected<CalibrationResult> calibrate_device(DeviceSpec* spec, const CalibrationOptions& opts);

}  // namespace pt
