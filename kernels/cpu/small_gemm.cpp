// Register-blocked small float GEMM (small_gemm.h): C is computed 4 rows x 16 columns at a time in
// vector registers (GCC vector extensions: one AVX-512 register, two AVX2 or four SSE ones, the
// function built per ISA by target_clones), reading each op(B) row segment once per 4 rows of C.
// op(B) = B^T is first copied transposed into a per-thread scratch, so every B load is contiguous.
#include "kernels/cpu/small_gemm.h"

#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_util.h"  // PT_CPU_CLONES

// V travels between always-inlined helpers only, never through a call boundary.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace pt::cpu {
namespace {

constexpr int64_t kW = 16;  // columns per register block
typedef float V __attribute__((vector_size(kW * sizeof(float))));

[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }

// op(A)[i, p].
template <bool TA>
[[gnu::always_inline]] inline float at(const float* a, int64_t lda, int64_t i, int64_t p) {
  return TA ? a[p * lda + i] : a[i * lda + p];
}

// C[m, n] = alpha * op(A) @ B, B plain [k, n].
template <bool TA>
[[gnu::always_inline]] inline void gemm_plain_b(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                                                int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  int64_t j = 0;
  for (; j + kW <= n; j += kW) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      V c0 = {}, c1 = {}, c2 = {}, c3 = {};
      for (int64_t p = 0; p < k; ++p) {
        const V bv = load(b + p * ldb + j);
        c0 += at<TA>(a, lda, i, p) * bv;
        c1 += at<TA>(a, lda, i + 1, p) * bv;
        c2 += at<TA>(a, lda, i + 2, p) * bv;
        c3 += at<TA>(a, lda, i + 3, p) * bv;
      }
      store(c + i * ldc + j, c0 * alpha);
      store(c + (i + 1) * ldc + j, c1 * alpha);
      store(c + (i + 2) * ldc + j, c2 * alpha);
      store(c + (i + 3) * ldc + j, c3 * alpha);
    }
    for (; i < m; ++i) {
      V c0 = {};
      for (int64_t p = 0; p < k; ++p) c0 += at<TA>(a, lda, i, p) * load(b + p * ldb + j);
      store(c + i * ldc + j, c0 * alpha);
    }
  }
  if (j < n)  // the last n % 16 columns
    for (int64_t i = 0; i < m; ++i)
      for (int64_t jj = j; jj < n; ++jj) {
        float s = 0;
        for (int64_t p = 0; p < k; ++p) s += at<TA>(a, lda, i, p) * b[p * ldb + jj];
        c[i * ldc + jj] = s * alpha;
      }
}

PT_CPU_CLONES void gemm_clones(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                                 const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (ta) gemm_plain_b<true>(m, n, k, alpha, a, lda, b, ldb, c, ldc);
  else gemm_plain_b<false>(m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

}  // namespace

bool small_sgemm_fits(int64_t m, int64_t n, int64_t k) { return m > 0 && n > 0 && k > 0 && n * k <= 16384 && m <= 4096; }

void small_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (!tb) {
    gemm_clones(ta, m, n, k, alpha, a, lda, b, ldb, c, ldc);
    return;
  }
  thread_local std::vector<float> bt;  // B^T, plain [k, n]
  if (bt.size() < static_cast<size_t>(k * n)) bt.resize(static_cast<size_t>(k * n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) bt[static_cast<size_t>(p * n + j)] = b[j * ldb + p];
  gemm_clones(ta, m, n, k, alpha, a, lda, bt.data(), n, c, ldc);
}

}  // namespace pt::cpu
