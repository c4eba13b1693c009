// How the CUDA convolutions choose a cuDNN algorithm (kernels/cuda/dnn_ops.cpp), as plain data, so
// the choice and its cache key are tested without a GPU (tests/kernels/conv_algo_test.cpp). The
// algorithm numbers are cuDNN's (cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t; dnn_ops.cpp checks
// at compile time that they match).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pt::kernels {

enum class ConvPass { kForward = 0, kGradInput = 1, kGradWeight = 2 };

// cuDNN's algorithm numbers, per pass.
namespace conv_algo {
// cudnnConvolutionFwdAlgo_t
constexpr int kFwdImplicitGemm = 0, kFwdImplicitPrecompGemm = 1, kFwdGemm = 2, kFwdDirect = 3, kFwdFft = 4,
              kFwdFftTiling = 5, kFwdWinograd = 6, kFwdWinogradNonfused = 7;
// cudnnConvolutionBwdDataAlgo_t
constexpr int kBwdData0 = 0, kBwdData1 = 1, kBwdDataFft = 2, kBwdDataFftTiling = 3, kBwdDataWinograd = 4,
              kBwdDataWinogradNonfused = 5;
// cudnnConvolutionBwdFilterAlgo_t
constexpr int kBwdFilter0 = 0, kBwdFilter1 = 1, kBwdFilterFft = 2, kBwdFilter3 = 3, kBwdFilterWinograd = 4,
              kBwdFilterWinogradNonfused = 5, kBwdFilterFftTiling = 6;
}  // namespace conv_algo

// True for the algorithms that form each output as a sum of products of the inputs (implicit or
// explicit GEMM, direct): their rounding error is that of a direct convolution, bounded by
// K * u * sum |products| for K terms. FFT and Winograd transform the operands first; their error
// is relative to the whole tensor, and cuDNN's FP32 FFT reaches ~1e-3 relative on some layers.
inline bool conv_algo_is_direct(ConvPass pass, int algo) {
  using namespace conv_algo;
  switch (pass) {
    case ConvPass::kForward:
      return algo == kFwdImplicitGemm || algo == kFwdImplicitPrecompGemm || algo == kFwdGemm || algo == kFwdDirect;
    case ConvPass::kGradInput:
      return algo == kBwdData0 || algo == kBwdData1;
    case ConvPass::kGradWeight:
      return algo == kBwdFilter0 || algo == kBwdFilter1 || algo == kBwdFilter3;
  }
  return false;
}

inline const char* conv_algo_name(ConvPass pass, int algo) {
  static const char* const kFwd[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct",
                                     "fft", "fft_tiling", "winograd", "winograd_nonfused"};
  static const char* const kData[] = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd", "winograd_nonfused"};
  static const char* const kFilter[] = {"algo_0", "algo_1", "fft", "algo_3", "winograd", "winograd_nonfused",
                                        "fft_tiling"};
  switch (pass) {
    case ConvPass::kForward: return algo >= 0 && algo < 8 ? kFwd[algo] : "?";
    case ConvPass::kGradInput: return algo >= 0 && algo < 6 ? kData[algo] : "?";
    case ConvPass::kGradWeight: return algo >= 0 && algo < 7 ? kFilter[algo] : "?";
  }
  return "?";
}

// One row of cudnnFind*Ex (measured, fastest first) or cudnnGet*_v7 (heuristics, best first).
struct ConvAlgoResult {
  int algo = 0;
  bool ok = false;         // status CUDNN_STATUS_SUCCESS
  bool fma_math = false;   // math type CUDNN_FMA_MATH (no tensor-core rounding of the operands)
  int math_type = 0;       // cudnnMathType_t, set on the descriptor before the run
  size_t workspace = 0;    // bytes
  float time_ms = -1;      // measured time; < 0 for a heuristic row
};

struct ConvAlgoPolicy {
  // Only direct algorithms (conv_algo_is_direct): FP32 without --precision tf32, and --precision
  // bf16's widened convolutions (whose products TF32 keeps exact only in a direct algorithm).
  bool direct = true;
  // Only FMA math (no tensor-core rounding of the operands): FP32 without --precision tf32.
  bool fma = true;
  size_t max_workspace = size_t{1} << 30;
  bool strict() const { return direct || fma; }
};

// The policies of the three kinds of float convolution.
inline ConvAlgoPolicy exact_fp32_policy() { return {true, true}; }
inline ConvAlgoPolicy tf32_policy() { return {false, false}; }
inline ConvAlgoPolicy widened_bf16_policy() { return {true, false}; }

// The index in `rows` of the algorithm to run: the first row (rows are best first) that succeeded,
// fits the workspace limit and meets the policy (direct, FMA math); without such a row the first
// that succeeded and fits. -1 when none did.
inline int pick_conv_algo(ConvPass pass, const std::vector<ConvAlgoResult>& rows, const ConvAlgoPolicy& policy) {
  for (int strict = policy.strict() ? 1 : 0; strict >= 0; --strict)
    for (size_t i = 0; i < rows.size(); ++i) {
      const ConvAlgoResult& r = rows[i];
      if (!r.ok || r.workspace > policy.max_workspace) continue;
      if (strict && policy.direct && !conv_algo_is_direct(pass, r.algo)) continue;
      if (strict && policy.fma && !r.fma_math) continue;
      return static_cast<int>(i);
    }
  return -1;
}

// The algorithm cache's key: everything the choice depends on. Lists are written out with their
// lengths, so two different descriptions never give one key.
struct ConvAlgoKeyParts {
  ConvPass pass = ConvPass::kForward;
  int dtype = 0;       // cudnnDataType_t
  int device = 0;      // CUDA ordinal
  bool tf32 = false;   // math: TF32 tensor cores allowed
  bool direct_only = true;  // ConvAlgoPolicy::direct
  int64_t group = 1;
  std::vector<int64_t> x, w;                // [N, C, spatial...], [M, C/g, k...]
  std::vector<int> pad, stride, dilation;
  size_t max_workspace = 0;
};

inline std::vector<int64_t> conv_algo_key(const ConvAlgoKeyParts& p) {
  std::vector<int64_t> k = {static_cast<int64_t>(p.pass), p.dtype, p.device, p.tf32 ? 1 : 0, p.direct_only ? 1 : 0,
                            p.group, static_cast<int64_t>(p.max_workspace)};
  auto add = [&k](const auto& v) {
    k.push_back(static_cast<int64_t>(v.size()));
    k.insert(k.end(), v.begin(), v.end());
  };
  add(p.x);
  add(p.w);
  add(p.pad);
  add(p.stride);
  add(p.dilation);
  return k;
}

}  // namespace pt::kernels
