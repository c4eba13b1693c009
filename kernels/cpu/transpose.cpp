// Transpose CPU kernel. Dims are coalesced first (size-1 dims dropped, dims that stay adjacent
// merged), so most permutations reduce to a plain or batched 2-D transpose, done in cache blocks;
// anything else is a gather loop over the output. float tiles go through 4 x 4 register transposes
// (SSE, part of every x86-64): a [16, 2048] -> [2048, 16] transpose of a Transformer's attention
// heads took 46 us element by element.
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

constexpr int64_t kTile = 32;

// One tile: out[j, i] = in[i, j] for i in [i0, i1), j in [j0, j1); in is (rows, cols), out (cols, rows).
template <typename T>
inline void transpose_tile(const T* in, T* out, int64_t rows, int64_t cols, int64_t i0, int64_t i1, int64_t j0,
                           int64_t j1) {
  int64_t i = i0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 4 <= i1; i += 4) {
      int64_t j = j0;
      for (; j + 4 <= j1; j += 4) {
        __m128 r0 = _mm_loadu_ps(in + i * cols + j), r1 = _mm_loadu_ps(in + (i + 1) * cols + j);
        __m128 r2 = _mm_loadu_ps(in + (i + 2) * cols + j), r3 = _mm_loadu_ps(in + (i + 3) * cols + j);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        _mm_storeu_ps(out + j * rows + i, r0);
        _mm_storeu_ps(out + (j + 1) * rows + i, r1);
        _mm_storeu_ps(out + (j + 2) * rows + i, r2);
        _mm_storeu_ps(out + (j + 3) * rows + i, r3);
      }
      for (; j < j1; ++j)
        for (int64_t k = 0; k < 4; ++k) out[j * rows + i + k] = in[(i + k) * cols + j];
    }
  }
#endif
  for (; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) out[j * rows + i] = in[i * cols + j];
}

// out (cols, rows) = in (rows, cols)^T, tile by tile.
template <typename T>
void transpose_2d(const T* in, T* out, int64_t rows, int64_t cols, bool parallel) {
  const int64_t tr = (rows + kTile - 1) / kTile, tc = (cols + kTile - 1) / kTile;
#pragma omp parallel for if (parallel && tr * tc > 1)
  for (int64_t t = 0; t < tr * tc; ++t) {
    const int64_t i0 = (t / tc) * kTile, j0 = (t % tc) * kTile;
    transpose_tile(in, out, rows, cols, i0, std::min(i0 + kTile, rows), j0, std::min(j0 + kTile, cols));
  }
}

}  // namespace

template <typename T>
Status transpose(const KernelCall& call) {
  std::vector<int64_t> perm;
  RETURN_IF_ERROR(kernels::check_transpose(call, &perm));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const int r = x.rank();
  const T* px = x.as<T>();
  T* py = y.as<T>();
  const int64_t n = x.size();
  if (n == 0) return Status::ok();

  const Dims rs = row_major_strides(x.dims);
  Dims s(r);
  for (int k = 0; k < r; ++k) s[k] = rs[perm[k]];
  const StridedLoop<1> loop(y.dims, {s});  // y.dims: the permuted dims (checked)
  const Dims& sz = loop.sizes;
  const Dims& st = loop.strides[0];
  const bool par = n > kParallelThreshold;
  if (loop.rank() == 2 && st[0] == 1 && st[1] == sz[0]) {
    transpose_2d(px, py, sz[1], sz[0], par);
    return Status::ok();
  }
  if (loop.rank() == 3 && st[1] == 1 && st[2] == sz[1] && st[0] == sz[1] * sz[2]) {
    // A batch of matrices: one parallel region over every (matrix, tile) pair, so that many
    // small matrices do not each open a region of their own.
    const int64_t mat = sz[1] * sz[2], rows = sz[2], cols = sz[1];
    const int64_t tr = (rows + kTile - 1) / kTile, tc = (cols + kTile - 1) / kTile, tiles = tr * tc;
#pragma omp parallel for if (par)
    for (int64_t w = 0; w < sz[0] * tiles; ++w) {
      const int64_t b = w / tiles, t = w % tiles;
      const T* in = px + b * mat;
      T* o = py + b * mat;
      const int64_t i0 = (t / tc) * kTile, j0 = (t % tc) * kTile;
      transpose_tile(in, o, rows, cols, i0, std::min(i0 + kTile, rows), j0, std::min(j0 + kTile, cols));
    }
    return Status::ok();
  }
  const int64_t inner = loop.inner(), si = loop.inner_stride(0);
  loop.for_each_row(par, [&](int64_t row, const std::array<int64_t, 1>& o) {
    const T* src = px + o[0];
    T* dst = py + row * inner;
    if (si == 1 && inner <= 64) {  // short rows (heads of 16-64): a call to memmove costs more than the copy
#pragma omp simd
      for (int64_t j = 0; j < inner; ++j) dst[j] = src[j];
    } else if (si == 1) {
      std::copy(src, src + inner, dst);
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * si];
    }
  });
  return Status::ok();
}

template Status transpose<float>(const KernelCall& call);
template Status transpose<double>(const KernelCall& call);
template Status transpose<int64_t>(const KernelCall& call);

}  // namespace pt::cpu
