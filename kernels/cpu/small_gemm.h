// Small float matrix products held in registers: FusedAttention's per-head products (a 32-token
// head: [32, 16] x [16, 32]) are too small for a BLAS call to pay off (packing and dispatch cost
// more than the 16K multiply-adds; OpenBLAS ran them at 17-24 GFLOP/s).
#pragma once

#include <cstdint>

namespace pt::cpu {

// Whether small_sgemm suits C[m, n] = op(A)[m, k] @ op(B)[k, n]: op(B) fits in the first caches.
bool small_sgemm_fits(int64_t m, int64_t n, int64_t k);

// C = alpha * op(A) @ op(B), row-major, C overwritten (BLAS with beta 0); op(A) is A^T when ta
// (A stored [k, m]), op(B) is B^T when tb (B stored [n, k]). Each C element sums its k products in
// order of k; the same call gives the same bits every time on one machine (the AVX-512, AVX2 and
// baseline builds of it may round differently).
void small_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float* c, int64_t ldc);

}  // namespace pt::cpu
