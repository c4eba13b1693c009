// Device and link specs: the built-in GPU and link tables, JSON device specs (--device-spec), and
// the CPU measured by a short GEMM + copy micro-benchmark, cached per machine and thread count.
#include "partitioner/device_spec.h"

#include <cmath>
#include "core/file.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace pt {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Lower-case letters and digits only: "GTX 1080 Ti", "gtx-1080ti" and "GTX1080Ti" are one name.
std::string normalise(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct BuiltinDevice {
  const char* name;
  std::vector<const char*> aliases;  // normalised
  double tflops;                     // FP32, non-tensor-core, boost clock
  double bandwidth_gbs;              // 10^9 bytes/s
  double memory_gib;
};

// Vendor data sheets: FP32 peak (no tensor cores, no TF32), memory bandwidth and size.
const std::vector<BuiltinDevice>& builtin_devices() {
  static const std::vector<BuiltinDevice> t = {
      {"H100-SXM", {"h100", "h100sxm", "h100sxm5", "h10080gb"}, 66.9, 3350, 80},
      {"H200", {"h200", "h200sxm"}, 66.9, 4800, 141},
      {"A100-80GB-SXM", {"a100", "a100sxm", "a10080gb", "a10080gbsxm", "a100sxm80gb"}, 19.5, 2039, 80},
      {"V100-SXM2-32GB", {"v100", "v100sxm2", "v10032gb", "v100sxm232gb", "v100sxm"}, 15.7, 900, 32},
      {"RTX3090", {"rtx3090", "3090", "geforcertx3090"}, 35.6, 936, 24},
      {"RTX4090", {"rtx4090", "4090", "geforcertx4090"}, 82.6, 1008, 24},
      {"GTX1080Ti", {"gtx1080ti", "1080ti", "geforcegtx1080ti"}, 11.3, 484, 11},
  };
  return t;
}

constexpr double kGpuKernelOverhead = 5e-6;
constexpr double kCpuKernelOverhead = 3e-6;  // a dispatch and an OpenMP region, no launch

struct BuiltinLink {
  const char* name;
  double bandwidth_gbs;  // one direction
  double latency_us;
};

// Effective (not nominal) one-direction bandwidths: PCIe x16 after protocol overhead; NVLink as
// the aggregate of all links of the generation's flagship (V100: 6 x 25, A100: 12 x 25,
// H100: 18 x 25 GB/s).
const std::vector<BuiltinLink>& builtin_links() {
  static const std::vector<BuiltinLink> t = {
      {"pcie3", 12, 10}, {"pcie4", 25, 10},  {"pcie5", 50, 10},  {"nvlink2", 150, 5},
      {"nvlink3", 300, 5}, {"nvlink4", 450, 5}, {"host", 10, 2}, {"network", 12.5, 20},
  };
  return t;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<std::string> builtin_device_names() {
  std::vector<std::string> out;
  for (const auto& d : builtin_devices()) out.push_back(d.name);
  return out;
}

Expected<DeviceSpec> builtin_device_spec(const std::string& name) {
  const std::string key = normalise(name);
  for (const auto& d : builtin_devices()) {
    bool match = normalise(d.name) == key;
    for (const char* a : d.aliases) match |= key == a;
    if (!match) continue;
    DeviceSpec s;
    s.name = d.name;
    s.kind = DeviceKind::kCuda;
    s.peak_flops = d.tflops * 1e12;
    s.mem_bandwidth = d.bandwidth_gbs * 1e9;
    s.memory_bytes = d.memory_gib * kGiB;
    s.kernel_overhead_s = kGpuKernelOverhead;
    return s;
  }
  return invalid_input("unknown device '" + name + "' (known devices: " + join(builtin_device_names()) +
                       "; or describe it in a JSON file with --device-spec FILE)");
}

Expected<DeviceSpec> load_device_spec(const std::string& path) {
  if (Status st = check_regular_file(path); !st.is_ok())
    return invalid_input(st.message() + ": cannot open the device spec file");
  std::ifstream in(path);
  if (!in) return invalid_input(path + ": cannot open the device spec file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return invalid_input(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return invalid_input(path + ": a device spec is a JSON object with fields name, peak_tflops, mem_bandwidth_gbs, memory_gb, kernel_overhead_us");
  auto number = [&](const char* field, bool required, double dflt, double* out) -> Status {
    if (!j.contains(field)) {
      if (required) return invalid_input(path + ": field '" + field + "' is missing");
      *out = dflt;
      return Status::ok();
    }
    const auto& v = j[field];
    if (!v.is_number()) return invalid_input(path + ": field '" + field + "' must be a number, not " + v.dump());
    *out = v.get<double>();
    if (!(*out > 0) && !(std::string(field) == "kernel_overhead_us" && *out == 0))
      return invalid_input(path + ": field '" + field + "' must be positive, not " + v.dump());
    return Status::ok();
  };
  DeviceSpec s;
  s.kind = DeviceKind::kCuda;
  if (j.contains("name")) {
    if (!j["name"].is_string()) return invalid_input(path + ": field 'name' must be a string");
    s.name = j["name"].get<std::string>();
  } else {
    s.name = std::filesystem::path(path).stem().string();
  }
  if (j.contains("kind")) {
    const std::string k = j["kind"].is_string() ? j["kind"].get<std::string>() : "";
    if (k == "cpu") s.kind = DeviceKind::kCpu;
    else if (k != "cuda") return invalid_input(path + ": field 'kind' must be \"cpu\" or \"cuda\"");
  }
  double tflops = 0, gbs = 0, gb = 0, us = 0;
  RETURN_IF_ERROR(number("peak_tflops", true, 0, &tflops));
  RETURN_IF_ERROR(number("mem_bandwidth_gbs", true, 0, &gbs));
  RETURN_IF_ERROR(number("memory_gb", true, 0, &gb));
  RETURN_IF_ERROR(number("kernel_overhead_us", false, kGpuKernelOverhead * 1e6, &us));
  s.peak_flops = tflops * 1e12;
  s.mem_bandwidth = gbs * 1e9;
  s.memory_bytes = gb * kGiB;
  s.kernel_overhead_s = us * 1e-6;
  return s;
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of GEMM rate over ~40 ms: 512 x 512 x 512 single precision.
double measure_gemm_flops(int threads) {
  const int n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(std::max(1, threads));
  auto once = [&] {
    const double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    return now_s() - t0;
  };
  once();  // warm-up: thread pool, caches
  double best = 1e30;
  const double start = now_s();
  for (int i = 0; i < 200 && (i < 3 || now_s() - start < 0.04); ++i) best = std::min(best, once());
  openblas_set_num_threads(saved);
  return 2.0 * n * n * n / best;
}

// Best-of copy bandwidth (bytes read + written per second) over ~40 ms, `threads` copying
// disjoint slices of a 16 MiB buffer (beyond most last-level caches; larger buffers cost more
// in first-touch page faults than they add in accuracy).
double measure_copy_bandwidth(int threads) {
  const size_t bytes = size_t{16} << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  threads = std::max(1, threads);
  auto once = [&] {
    const double t0 = now_s();
    std::vector<std::thread> pool;
    const size_t slice = bytes / threads;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t off = t * slice, len = t + 1 == threads ? bytes - off : slice;
        std::memcpy(dst.data() + off, src.data() + off, len);
      });
    for (auto& th : pool) th.join();
    return now_s() - t0;
  };
  once();
  double best = 1e30;
  const double start = now_s();
  for (int i = 0; i < 100 && (i < 3 || now_s() - start < 0.04); ++i) best = std::min(best, once());
  return 2.0 * static_cast<double>(bytes) / best;
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0, total = 0, avail = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemTotal:") total = kb * 1024;
    if (key == "MemAvailable:") avail = kb * 1024;
  }
  if (avail > 0) return avail;
  if (total > 0) return total;
  return 8 * kGiB;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  std::string s;
  for (char c : std::string(buf)) s += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return s.empty() ? "unknown" : s;
}

}  // namespace

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::kGemm: return "gemm";
    case OpClass::kConv: return "conv";
    case OpClass::kDepthwise: return "depthwise";
    case OpClass::kNorm: return "norm";
    case OpClass::kSoftmax: return "softmax";
    case OpClass::kPool: return "pool";
    case OpClass::kMovement: return "movement";
    case OpClass::kElementwise: return "elementwise";
  }
  return "?";
}

DeviceSpec measure_cpu_spec(const std::string& cache_dir, int threads) {
  threads = std::max(1, threads);
  DeviceSpec s;
  s.kind = DeviceKind::kCpu;
  s.name = "cpu (measured, " + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
  s.kernel_overhead_s = kCpuKernelOverhead;
  s.memory_bytes = available_memory_bytes();  // always fresh: it changes, the speed does not
  const std::string host = hostname();
  std::filesystem::path file;
  if (!cache_dir.empty()) {
    file = std::filesystem::path(cache_dir) / ("cpu_spec_" + host + "_" + std::to_string(threads) + "t.json");
    std::ifstream in(file);
    if (in) {
      try {
        nlohmann::json j = nlohmann::json::parse(in);
        if (j.value("version", 0) == 1 && j.value("host", "") == host && j.value("threads", 0) == threads &&
            j.value("peak_flops", 0.0) > 0 && j.value("mem_bandwidth", 0.0) > 0) {
          s.peak_flops = j["peak_flops"].get<double>();
          s.mem_bandwidth = j["mem_bandwidth"].get<double>();
          return s;
        }
      } catch (const std::exception&) {
        // A damaged cache is measured again and rewritten.
      }
    }
  }
  s.peak_flops = measure_gemm_flops(threads);
  s.mem_bandwidth = measure_copy_bandwidth(threads);
  if (!file.empty()) {
    // Best effort: a cache that cannot be written only costs the next start-up ~0.2 s.
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    nlohmann::json j = {{"version", 1}, {"host", host}, {"threads", threads},
                        {"peak_flops", s.peak_flops}, {"mem_bandwidth", s.mem_bandwidth}};
    const std::filesystem::path tmp = file.string() + ".tmp" + std::to_string(getpid());
    {
      std::ofstream out(tmp);
      out << j.dump(2) << "\n";
    }
    std::filesystem::rename(tmp, file, ec);
    if (ec) std::filesystem::remove(tmp, ec);
  }
  return s;
}

std::vector<std::string> builtin_link_names() {
  std::vector<std::string> out;
  for (const auto& l : builtin_links()) out.push_back(l.name);
  return out;
}

Expected<LinkSpec> link_spec(const std::string& text) {
  const size_t comma = text.find(',');
  if (comma == std::string::npos) {
    auto b = builtin_link_spec(text);
    if (b) return b;
  }
  double gbs = 0, us = 0;
  size_t a = 0, b = 0;
  try {
    if (comma != std::string::npos) {
      gbs = std::stod(text.substr(0, comma), &a);
      us = std::stod(text.substr(comma + 1), &b);
    }
  } catch (const std::exception&) {
    a = b = 0;
  }
  if (comma == std::string::npos || a != comma || b != text.size() - comma - 1 || !(gbs > 0) || !(us >= 0) || !std::isfinite(gbs) || !std::isfinite(us))
    return invalid_input("link '" + text + "': expected a built-in link (" + join(builtin_link_names()) +
                         ") or BANDWIDTH,LATENCY in GB/s and microseconds, such as 1.25,50");
  LinkSpec s;
  s.name = text;
  s.bandwidth = gbs * 1e9;
  s.latency_s = us * 1e-6;
  return s;
}

Expected<LinkSpec> builtin_link_spec(const std::string& name) {
  const std::string key = normalise(name);
  for (const auto& l : builtin_links())
    if (key == l.name) {
      LinkSpec s;
      s.name = l.name;
      s.bandwidth = l.bandwidth_gbs * 1e9;
      s.latency_s = l.latency_us * 1e-6;
      return s;
    }
  return invalid_input("unknown link '" + name + "' (known links: " + join(builtin_link_names()) + ")");
}

}  // namespace pt
