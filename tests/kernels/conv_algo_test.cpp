// The CUDA convolutions' algorithm choice (kernels/conv_algo.h) without a GPU: exact FP32 runs
// take only direct algorithms in FMA math, the fastest that fits; TF32 takes the fastest of any;
// bf16 widened to float32 the fastest direct one in any math;
// the cache key tells every description apart.
#include <gtest/gtest.h>

#include "kernels/conv_algo.h"

namespace pt::kernels {
namespace {

using namespace conv_algo;

ConvAlgoResult row(int algo, float ms, bool fma = true, size_t ws = 0, bool ok = true) {
  ConvAlgoResult r;
  r.algo = algo;
  r.ok = ok;
  r.fma_math = fma;
  r.workspace = ws;
  r.time_ms = ms;
  return r;
}

TEST(ConvAlgo, DirectAlgorithmsArePerPass) {
  for (int a : {kFwdImplicitGemm, kFwdImplicitPrecompGemm, kFwdGemm, kFwdDirect})
    EXPECT_TRUE(conv_algo_is_direct(ConvPass::kForward, a)) << a;
  for (int a : {kFwdFft, kFwdFftTiling, kFwdWinograd, kFwdWinogradNonfused})
    EXPECT_FALSE(conv_algo_is_direct(ConvPass::kForward, a)) << a;
  EXPECT_TRUE(conv_algo_is_direct(ConvPass::kGradInput, kBwdData1));
  EXPECT_FALSE(conv_algo_is_direct(ConvPass::kGradInput, kBwdDataFftTiling));
  // The same number means different algorithms in different passes: 3 is direct for the forward
  // and for the filter gradient, FFT tiling for the data gradient.
  EXPECT_TRUE(conv_algo_is_direct(ConvPass::kGradWeight, kBwdFilter3));
  EXPECT_FALSE(conv_algo_is_direct(ConvPass::kGradInput, 3));
  EXPECT_FALSE(conv_algo_is_direct(ConvPass::kGradWeight, kBwdFilterWinogradNonfused));
  EXPECT_STREQ(conv_algo_name(ConvPass::kGradWeight, kBwdFilterFftTiling), "fft_tiling");
  EXPECT_STREQ(conv_algo_name(ConvPass::kForward, 99), "?");
}

TEST(ConvAlgo, ExactTakesTheFastestDirectFmaRow) {
  // Measured rows come fastest first: Winograd and FFT first, then a TF32 GEMM, then direct FMA ones.
  const std::vector<ConvAlgoResult> rows = {row(kFwdWinogradNonfused, 0.10f), row(kFwdFftTiling, 0.12f),
                                            row(kFwdImplicitPrecompGemm, 0.13f, /*fma=*/false),
                                            row(kFwdImplicitPrecompGemm, 0.20f), row(kFwdImplicitGemm, 0.30f)};
  EXPECT_EQ(pick_conv_algo(ConvPass::kForward, rows, exact_fp32_policy()), 3);
  EXPECT_EQ(pick_conv_algo(ConvPass::kForward, rows, tf32_policy()), 0);
  // bf16 widened to float32 on TF32 tensor cores: direct algorithms, any math.
  EXPECT_EQ(pick_conv_algo(ConvPass::kForward, rows, widened_bf16_policy()), 2);
}

TEST(ConvAlgo, FailedAndOversizedRowsAreSkipped) {
  const std::vector<ConvAlgoResult> rows = {row(kBwdFilter1, 0.1f, true, 0, /*ok=*/false),
                                            row(kBwdFilter0, 0.2f, true, size_t{2} << 30),
                                            row(kBwdFilter3, 0.3f, true, 1024)};
  ConvAlgoPolicy p;
  EXPECT_EQ(pick_conv_algo(ConvPass::kGradWeight, rows, p), 2);
  p.max_workspace = 512;
  EXPECT_EQ(pick_conv_algo(ConvPass::kGradWeight, rows, p), -1);
  EXPECT_EQ(pick_conv_algo(ConvPass::kGradWeight, {}, p), -1);
}

TEST(ConvAlgo, ExactFallsBackWhenNoDirectRowExists) {
  // Never refuse a convolution cuDNN can run: without a direct row the first usable one.
  const std::vector<ConvAlgoResult> rows = {row(kBwdDataFft, 0.1f, true, 0, false), row(kBwdDataWinograd, 0.2f)};
  EXPECT_EQ(pick_conv_algo(ConvPass::kGradInput, rows, exact_fp32_policy()), 1);
}

TEST(ConvAlgo, KeysTellDescriptionsApart) {
  ConvAlgoKeyParts a;
  a.x = {8, 64, 32, 32};
  a.w = {64, 64, 3, 3};
  a.pad = {1, 1};
  a.stride = {1, 1};
  a.dilation = {1, 1};
  const auto base = conv_algo_key(a);
  EXPECT_EQ(base, conv_algo_key(a));
  auto differs = [&](auto change) {
    ConvAlgoKeyParts b = a;
    change(b);
    return conv_algo_key(b) != base;
  };
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.pass = ConvPass::kGradInput; }));
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.tf32 = true; }));
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.direct_only = false; }));
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.device = 1; }));
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.dtype = 1; }));
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.group = 2; }));
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.max_workspace = 1; }));
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.x[0] = 16; }));
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) { b.stride = {2, 2}; }));
  // Lengths are part of the key: moving a number from one list to the next changes it.
  EXPECT_TRUE(differs([](ConvAlgoKeyParts& b) {
    b.pad = {1, 1, 1};
    b.stride = {1};
  }));
}

}  // namespace
}  // namespace pt::kernels
