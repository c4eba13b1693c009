// The kernel table: every (op, device, dtype) this build can run, in one explicit list.
#include "kernels/registry.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <set>

#include "kernels/cpu/cpu_table.h"
#ifdef PIPETRAIN_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace pt {

void set_cpu_kernel_threads(int threads) {
  if (threads < 1) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int cpu_kernel_threads() { return omp_get_max_threads(); }

const char* device_kind_name(DeviceKind d) { return d == DeviceKind::kCpu ? "cpu" : "cuda"; }

namespace {

std::vector<KernelEntry> build_table() {
  std::vector<KernelEntry> t(std::begin(cpu::kCpuTable), std::end(cpu::kCpuTable));
#ifdef PIPETRAIN_HAVE_CUDA
  for (const KernelEntry& e : cuda::kernel_table()) t.push_back(e);
#endif
  return t;
}

const std::vector<KernelEntry>& table() {
  static const std::vector<KernelEntry> t = build_table();
  return t;
}

}  // namespace

std::span<const KernelEntry> all_kernels() { return table(); }

KernelFn find_kernel(std::string_view op, DeviceKind device, DType dtype) {
  for (const KernelEntry& e : table())
    if (e.device == device && e.dtype == dtype && op == e.op) return e.fn;
  return nullptr;
}

bool has_kernel(std::string_view op, DeviceKind device, DType dtype) {
  return find_kernel(op, device, dtype) != nullptr;
}

KernelGroupFn find_group_kernel(std::string_view op, DeviceKind device, DType dtype) {
#ifdef PIPETRAIN_HAVE_CUDA
  if (device == DeviceKind::kCuda) return cuda::group_kernel(op, dtype);
#endif
  (void)op, (void)device, (void)dtype;
  return nullptr;
}

bool runs_on_host(std::string_view op, DeviceKind device, DType dtype) {
#ifdef PIPETRAIN_HAVE_CUDA
  if (device == DeviceKind::kCuda) return cuda::is_host_fallback(op, dtype);
#endif
  (void)op, (void)device, (void)dtype;
  return false;
}

bool runs_on_host(std::string_view op, DeviceKind device, DType dtype, const AttrMap& attrs,
                  std::span<const Dims> inputs, std::span<const Dims> outputs) {
#ifdef PIPETRAIN_HAVE_CUDA
  if (device == DeviceKind::kCuda) return cuda::call_takes_host(op, dtype, attrs, inputs, outputs);
#endif
  (void)op, (void)device, (void)dtype, (void)attrs, (void)inputs, (void)outputs;
  return false;
}

std::vector<std::string> supported_ops(DeviceKind device) {
  std::set<std::string> s;
  for (const KernelEntry& e : table())
    if (e.device == device) s.insert(e.op);
  return {s.begin(), s.end()};
}

#ifndef PIPETRAIN_HAVE_CUDA
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "this build has no CUDA backend (PIPETRAIN_CUDA=OFF or no nvcc)"; }
std::string cuda_device_name(int) { return ""; }
int cuda_compute_capability(int) { return 0; }
#endif

}  // namespace pt
