// What the CPU offers the kernels, as oneDNN sees it (its ISA detection honours ONEDNN_MAX_CPU_ISA,
// so a test can play a CPU without bfloat16 instructions).
#pragma once

#include <string>

namespace pt {

// True when oneDNN runs bfloat16 kernels natively here: AVX512-BF16 (avx512_core_bf16) or AMX.
bool cpu_has_bf16();
// oneDNN's effective ISA ("avx512_core_bf16", "avx2", ...).
std::string cpu_isa_name();
// /proc/cpuinfo's "model name" ("AMD EPYC 9654 96-Core Processor"), or "this CPU".
std::string cpu_model_name();

}  // namespace pt
