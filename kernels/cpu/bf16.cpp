// Array conversions between float32 and bfloat16 (kernels/cpu/bf16.h), the Cast kernel's and the
// bf16 GEMM/convolution fallbacks'. The element formula is branch-free apart from the NaN test,
// which compiles to a blend, so `omp simd` vectorises it. Also the CPU feature queries of
// kernels/cpu_features.h (oneDNN is linked here).
#include "kernels/cpu/bf16.h"

#include <dnnl.hpp>

#include <algorithm>
#include <fstream>
#include <string>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu_features.h"

namespace pt::cpu {

namespace {

// One thread's block, built for each ISA (PT_CPU_CLONES: the baseline's SSE2 took about 2 cycles an
// element, so a weight's cast ran at a third of the memory's speed in a step; AVX-512 does 16 lanes
// at once). The element formulas are inline: nothing is called out of a clone (vzeroupper).
PT_CPU_CLONES void f32_to_bf16_block(const float* src, uint16_t* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

PT_CPU_CLONES void bf16_to_f32_block(const uint16_t* src, float* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

constexpr int64_t kBlock = 16384;  // elements a thread converts per block

template <typename In, typename Out>
void convert(const In* src, Out* dst, int64_t n, void (*block)(const In*, Out*, int64_t)) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i = b * kBlock;
    block(src + i, dst + i, std::min(kBlock, n - i));
  }
}

}  // namespace

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) { convert(src, dst, n, &f32_to_bf16_block); }

void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) { convert(src, dst, n, &bf16_to_f32_block); }

}  // namespace pt::cpu

namespace pt {

bool cpu_has_bf16() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

std::string cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::all: return "all";
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    default: return "other";
  }
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  return "this CPU";
}

}  // namespace pt
