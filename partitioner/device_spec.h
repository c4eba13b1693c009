// What the cost model knows about hardware: device specs (peak FLOP/s, memory bandwidth and size,
// per-kernel overhead) and links between devices (bandwidth, latency).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/registry.h"

namespace pt {

// The classes of ops whose achieved speed a calibration measures apart (cost_model.h, op_class).
enum class OpClass { kGemm, kConv, kDepthwise, kNorm, kSoftmax, kPool, kMovement, kElementwise };
inline constexpr int kOpClasses = 8;
// The phases a class is fitted for: forward (and loss) nodes, backward and update nodes, and the
// weight gradients of convolutions (ConvGradWeight: its kernel runs at another speed than the
// input gradient's with the same FLOPs, 2.5x slower on ResNet-18's 4x4 maps at one thread).
inline constexpr int kCostPhases = 3;
const char* op_class_name(OpClass c);

// What a device achieves on one op class, fitted by a calibration (runtime/exec/calibrate.h): a
// node takes floor_s + scale x flops / peak_flops + byte_scale x bytes / mem_bandwidth. scale > 1
// where the kernels compute below peak, byte_scale > 1 where they move data below the measured
// bandwidth; the two add up because a kernel rarely hides one behind the other entirely (a
// product whose weights stream from memory at a small batch is slower than its FLOPs say, one with
// the same FLOPs on cached weights is not). floor_s is the launch, dispatch and OpenMP cost that
// small nodes cannot hide.
struct ClassCost {
  double floor_s = 0;
  double scale = 1;
  double byte_scale = 0;
  int points = 0;  // calibration measurements it was fitted to (0: not fitted)
};

struct DeviceSpec {
  std::string name;            // "H100-SXM", "cpu (measured)", ...
  DeviceKind kind = DeviceKind::kCpu;
  double peak_flops = 0;       // FP32 FLOP/s
  double mem_bandwidth = 0;    // bytes/s
  double memory_bytes = 0;     // usable device memory
  double kernel_overhead_s = 0;  // fixed cost per kernel launch
  // A calibrated device's per-class costs (calibrated: every node's time comes from them), for
  // forward nodes ([k][0], the loss too), backward and update nodes ([k][1]) and convolutions'
  // weight gradients ([k][2]): cost_phase().
  bool calibrated = false;
  ClassCost classes[kOpClasses][kCostPhases];
  // Stages that share this device's cores (more stage threads than cores): each runs `share` times
  // slower than alone while the others compute. 1: the device is the stage's own.
  double share = 1;
};

struct LinkSpec {
  std::string name;            // "pcie3", "nvlink4", "host", "network"
  double bandwidth = 0;        // bytes/s, one direction
  double latency_s = 0;
  // One message of `bytes` over it (bandwidth 0: too fast to matter, latency only).
  double seconds(double bytes) const { return (latency_s > 0 ? latency_s : 0) + (bandwidth > 0 ? bytes / bandwidth : 0); }
};

// Built-in GPU specs: H100, H200, A100, V100, RTX3090, RTX4090, GTX1080Ti (case-insensitive).
Expected<DeviceSpec> builtin_device_spec(const std::string& name);
std::vector<std::string> builtin_device_names();
// Reads a JSON device spec (--device-spec FILE): {"name", "peak_tflops", "mem_bandwidth_gbs", "memory_gb",
// "kernel_overhead_us"}. peak_tflops: FP32 10^12 FLOP/s; mem_bandwidth_gbs: 10^9 bytes/s;
// memory_gb: GiB (2^30 bytes, as vendors quote memory sizes); kernel_overhead_us optional (5);
// "name" optional (the file's stem); "kind" optional, "cuda" (default) or "cpu". Errors name the
// file and the field.
Expected<DeviceSpec> load_device_spec(const std::string& path);
// The CPU measured by a short micro-benchmark (GEMM FLOP/s, copy bandwidth), cached per machine in
// `cache_dir` (empty: no cache) as cpu_spec_<host>_<threads>t.json. `threads` is the stage's share
// of cores. memory_bytes is MemAvailable from /proc/meminfo, read fresh every call. Takes < 0.3 s
// when not cached.
DeviceSpec measure_cpu_spec(const std::string& cache_dir, int threads);

// Built-in links: pcie3, pcie4, pcie5 (x16), nvlink2, nvlink3, nvlink4, host (shared memory),
// network (100 Gb/s).
Expected<LinkSpec> builtin_link_spec(const std::string& name);
// A built-in link, or one described as "BANDWIDTH,LATENCY": GB/s (10^9 bytes/s, one direction) and
// microseconds, e.g. "1.25,50" for 10 Gb/s Ethernet with 50 us. Errors name the text.
Expected<LinkSpec> link_spec(const std::string& text);
std::vector<std::string> builtin_link_names();

}  // namespace pt
