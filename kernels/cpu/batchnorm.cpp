// BatchNormalization over [N, C, spatial...] in inference mode (running statistics) and training
// mode (batch statistics; attribute _training, set by the shape function from the opset's rules),
// and its backward op BatchNormalizationGrad (dY, X, scale[, mean, var]) -> dX, dScale, dBias.
// In training mode the running mean and variance INPUTS (3, 4) are updated in place, with the
// node's momentum (running = momentum * running + (1 - momentum) * batch) and the unbiased batch
// variance as PyTorch does; outputs 1, 2 (when present) receive the same updated values and
// outputs 3, 4 (opset < 14: saved mean, saved variance) the batch mean and biased variance.
// The backward recomputes the batch statistics from X rather than keeping them from the forward.
// Sums accumulate in double; threads own (n, c) planes, then channels.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/checks/batchnorm.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

using BnGeometry = kernels::BatchNormGeometry;  // checked by kernels/checks/batchnorm.h

bool par(const BnGeometry& g) { return g.n * g.c > 1 && g.n * g.c * g.s > kParallelThreshold; }

// Planes [p0, p1) of X (and dY): per plane the sums of x and x^2 (and of dy and dy * x) in double,
// into part[p * k ...]. float32 runs a copy built per ISA (target_clones: AVX-512, AVX2, baseline;
// the kernels' baseline is SSE2), so the sums' lane order, and with it the last bits, depend on
// the CPU, as LayerNorm's do; on one machine every run gives the same bits.
template <typename T>
[[gnu::always_inline]] inline void plane_sums(const T* x, const T* dy, int64_t s, int64_t p0, int64_t p1, int k,
                                              double* part) {
  for (int64_t p = p0; p < p1; ++p) {
    const T* xp = x + p * s;
    double s1 = 0, s2 = 0;
    if (dy) {
      const T* dyp = dy + p * s;
      double d = 0, dx = 0;
#pragma omp simd reduction(+ : s1, s2, d, dx)
      for (int64_t i = 0; i < s; ++i) {
        const double xi = xp[i], di = dyp[i];
        s1 += xi;
        s2 += xi * xi;
        d += di;
        dx += di * xi;
      }
      part[p * k + 2] = d;
      part[p * k + 3] = dx;
    } else {
#pragma omp simd reduction(+ : s1, s2)
      for (int64_t i = 0; i < s; ++i) {
        const double xi = xp[i];
        s1 += xi;
        s2 += xi * xi;
      }
    }
    part[p * k] = s1;
    part[p * k + 1] = s2;
  }
}

// Planes [p0, p1) of y = x * a[c] + b[c] (c = p % C), then Relu's x > 0 ? x : 0 when `relu` (the
// epilogue pass's BatchNormalization + Relu: the same bits as the separate Relu of the stored y).
template <typename T>
[[gnu::always_inline]] inline void plane_affine(const T* x, const T* a, const T* b, T* y, int64_t c_count, int64_t s,
                                                int64_t p0, int64_t p1, bool relu) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t c = p % c_count;
    const T ac = a[c], bc = b[c];
    const T* xp = x + p * s;
    T* yp = y + p * s;
    if (relu) {
#pragma omp simd
      for (int64_t i = 0; i < s; ++i) {
        const T v = xp[i] * ac + bc;
        yp[i] = v > T(0) ? v : T(0);
      }
    } else {
#pragma omp simd
      for (int64_t i = 0; i < s; ++i) yp[i] = xp[i] * ac + bc;
    }
  }
}

// Planes [p0, p1) of the input gradient: dx = k (dy - mdy - (x - mu) kx) in training mode, k dy
// otherwise, with the per-channel coefficients of coef (4 rows of C: k, mdy, kx, mu).
template <typename T>
[[gnu::always_inline]] inline void plane_dx(const T* dy, const T* x, const T* coef, T* dx, int64_t c_count, int64_t s,
                                            int64_t p0, int64_t p1, bool training) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t c = p % c_count;
    const T k = coef[c], mdy = coef[c_count + c], kx = coef[2 * c_count + c], mu = coef[3 * c_count + c];
    const T* dyp = dy + p * s;
    const T* xp = x + p * s;
    T* dxp = dx + p * s;
    if (training) {
#pragma omp simd
      for (int64_t i = 0; i < s; ++i) dxp[i] = k * (dyp[i] - mdy - (xp[i] - mu) * kx);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < s; ++i) dxp[i] = k * dyp[i];
    }
  }
}

PT_CPU_CLONES void plane_sums_f32(const float* x, const float* dy, int64_t s, int64_t p0, int64_t p1, int k, double* part) {
  plane_sums(x, dy, s, p0, p1, k, part);
}
PT_CPU_CLONES void plane_affine_f32(const float* x, const float* a, const float* b, float* y, int64_t c_count, int64_t s,
                                   int64_t p0, int64_t p1, bool relu) {
  plane_affine(x, a, b, y, c_count, s, p0, p1, relu);
}
PT_CPU_CLONES void plane_dx_f32(const float* dy, const float* x, const float* coef, float* dx, int64_t c_count, int64_t s,
                               int64_t p0, int64_t p1, bool training) {
  plane_dx(dy, x, coef, dx, c_count, s, p0, p1, training);
}

// Channels [c0, c1) of maps with few elements per plane (s < kSmallPlane: the late layers of
// ResNets and MobileNets, [32, 512, 1, 1], [32, 576, 2, 2]): the sums of x and x^2 (and of dy and
// dy * x) along each image's row of channels, so that the loop runs along the row instead of paying
// a reduction per plane of 1-15 elements (10x faster at s = 1): per element position over the
// images first (`acc`, 4 (c1 - c0) s doubles), then the positions of each channel in order into its
// sums, which start at 0 (at s = 1 the planes in image order: the same sums as the plane-wise path).
constexpr int64_t kSmallPlane = 16;
template <typename T>
[[gnu::always_inline]] inline void channel_sums(const T* x, const T* dy, int64_t n_count, int64_t c_count, int64_t s,
                                                int64_t c0, int64_t c1, double* s1, double* s2, double* sd,
                                                double* sdx, double* acc) {
  // The channels' rows of s elements side by side, summed per element position across the images
  // (acc, 4 rows of (c1 - c0) * s), folded per channel after the last image.
  const int64_t j0 = c0 * s, len = (c1 - c0) * s;
  double *e1 = acc, *e2 = acc + len, *ed = acc + 2 * len, *edx = acc + 3 * len;
  for (int64_t n = 0; n < n_count; ++n) {
    const T* xr = x + n * c_count * s;
    const T* dyr = dy ? dy + n * c_count * s : nullptr;
    if (dyr) {
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) {
        const double xi = xr[j0 + j], di = dyr[j0 + j];
        e1[j] += xi;
        e2[j] += xi * xi;
        ed[j] += di;
        edx[j] += di * xi;
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) {
        const double xi = xr[j0 + j];
        e1[j] += xi;
        e2[j] += xi * xi;
      }
    }
  }
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t i = 0; i < s; ++i) {
      const int64_t j = (c - c0) * s + i;
      s1[c] += e1[j];
      s2[c] += e2[j];
      if (dy) {
        sd[c] += ed[j];
        sdx[c] += edx[j];
      }
    }
}

PT_CPU_CLONES void channel_sums_f32(const float* x, const float* dy, int64_t n_count, int64_t c_count, int64_t s,
                                    int64_t c0, int64_t c1, double* s1, double* s2, double* sd, double* sdx,
                                    double* acc) {
  channel_sums(x, dy, n_count, c_count, s, c0, c1, s1, s2, sd, sdx, acc);
}

// Runs fn(p0, p1) over the planes, split across the threads when the work is large enough.
template <typename F>
void over_planes(const BnGeometry& g, F fn) {
  const int64_t planes = g.n * g.c;
#pragma omp parallel if (par(g))
  {
    int64_t p0, p1;
    thread_share(planes, omp_get_thread_num(), omp_get_num_threads(), &p0, &p1);
    fn(p0, p1);
  }
}

// Batch mean and biased variance per channel in one pass over X: per-plane sums of x and x^2 in
// double (var = E[x^2] - mean^2; the double sums keep the cancellation far below float
// resolution for activations). With dy, also the sums of dy and dy * x that the backward needs
// (`sdy`, `sdyx` per channel; dy * (x - mean) sums to sdyx - mean * sdy).
template <typename T>
void batch_stats(const BnGeometry& g, const T* x, std::vector<double>* mean, std::vector<double>* var, const T* dy = nullptr,
                 std::vector<double>* sdy = nullptr, std::vector<double>* sdyx = nullptr) {
  const int64_t planes = g.n * g.c;
  const int k = dy ? 4 : 2;
  mean->assign(static_cast<size_t>(g.c), 0.0);
  var->assign(static_cast<size_t>(g.c), 0.0);
  if (dy) {
    sdy->assign(static_cast<size_t>(g.c), 0.0);
    sdyx->assign(static_cast<size_t>(g.c), 0.0);
  }
  if (g.s < kSmallPlane) {
    double *s1 = mean->data(), *s2 = var->data();
    double *sd = dy ? sdy->data() : nullptr, *sdx = dy ? sdyx->data() : nullptr;
#pragma omp parallel if (par(g))
    {
      int64_t c0, c1;
      thread_share(g.c, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
      thread_local std::vector<double> acc;  // each thread's own (channel_sums)
      acc.assign(static_cast<size_t>(4 * (c1 - c0) * g.s), 0.0);
      if constexpr (std::is_same_v<T, float>)
        channel_sums_f32(x, dy, g.n, g.c, g.s, c0, c1, s1, s2, sd, sdx, acc.data());
      else
        channel_sums(x, dy, g.n, g.c, g.s, c0, c1, s1, s2, sd, sdx, acc.data());
    }
  } else {
    // Every entry is written below: grown once, never cleared (no allocation per call once warm).
    // The calling thread's buffer: the parallel loop writes it through `part` (a pointer; the name
    // of a thread_local would be each worker's own).
    thread_local std::vector<double> buf;
    if (buf.size() < static_cast<size_t>(planes * k)) buf.resize(static_cast<size_t>(planes * k));
    double* part = buf.data();
    over_planes(g, [&](int64_t p0, int64_t p1) {
      if constexpr (std::is_same_v<T, float>)
        plane_sums_f32(x, dy, g.s, p0, p1, k, part);
      else
        plane_sums(x, dy, g.s, p0, p1, k, part);
    });
    // Plane p = n * C + c, in the order of p (so the same sums as a loop over p with c = p % C,
    // without a division per plane: [32, 960, 1, 1] maps have one element per plane).
    for (int64_t n = 0, p = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c, ++p) {
        (*mean)[c] += part[p * k];
        (*var)[c] += part[p * k + 1];
        if (dy) {
          (*sdy)[c] += part[p * k + 2];
          (*sdyx)[c] += part[p * k + 3];
        }
      }
  }
  const double inv_m = 1.0 / static_cast<double>(std::max<int64_t>(g.m(), 1));
  for (int64_t c = 0; c < g.c; ++c) {
    (*mean)[c] *= inv_m;
    (*var)[c] = std::max((*var)[c] * inv_m - (*mean)[c] * (*mean)[c], 0.0);
  }
}

}  // namespace

template <typename T>
Status batch_normalization(const KernelCall& call) {
  BnGeometry g;
  RETURN_IF_ERROR(kernels::check_batch_norm(call, &g));
  // Input 5 (optional) is the runtime's step counter: -1 marks an evaluation pass, which uses
  // (and keeps) the running statistics even for a node that trains.
  const bool eval_pass = call.inputs.size() > 5 && call.inputs[5].data && call.inputs[5].dtype == DType::kInt64 &&
                         call.inputs[5].as<int64_t>()[0] < 0;
  const bool training = call.attrs.get_int("_training", 0) != 0 && !eval_pass;
  const double eps = call.attrs.get_float("epsilon", 1e-5f);
  const double momentum = call.attrs.get_float("momentum", 0.9f);
  bool relu = false;
  RETURN_IF_ERROR(kernels::check_batch_norm_activation(call, &relu));
  const T* x = call.inputs[0].as<T>();          // (N, C, S)
  const T* scale = call.inputs[1].as<T>();      // (C)
  const T* bias = call.inputs[2].as<T>();       // (C)
  T* run_mean = call.inputs[3].as<T>();         // (C), updated in place in training mode
  T* run_var = call.inputs[4].as<T>();          // (C), updated in place in training mode
  T* y = call.outputs[0].as<T>();               // (N, C, S)
  auto out = [&](size_t i) -> T* {
    if (call.outputs.size() <= i || !call.outputs[i].data) return nullptr;
    return call.outputs[i].as<T>();
  };
  RETURN_IF_ERROR(kernels::check_batch_norm_stats(call, g));

  std::vector<double> mean(static_cast<size_t>(g.c)), var(static_cast<size_t>(g.c));
  if (training) {
    batch_stats(g, x, &mean, &var);
    // _unbiased_running_var = 0 gives ONNX's reference (biased variance) instead of PyTorch's.
    const bool unbiased = call.attrs.get_int("_unbiased_running_var", 1) != 0;
    const double unbias =
        unbiased && g.m() > 1 ? static_cast<double>(g.m()) / static_cast<double>(g.m() - 1) : 1.0;
    for (int64_t c = 0; c < g.c; ++c) {
      run_mean[c] = static_cast<T>(momentum * run_mean[c] + (1 - momentum) * mean[c]);
      run_var[c] = static_cast<T>(momentum * run_var[c] + (1 - momentum) * var[c] * unbias);
    }
    if (T* p = out(3))
      for (int64_t c = 0; c < g.c; ++c) p[c] = static_cast<T>(mean[c]);
    if (T* p = out(4))
      for (int64_t c = 0; c < g.c; ++c) p[c] = static_cast<T>(var[c]);
  } else {
    for (int64_t c = 0; c < g.c; ++c) {
      mean[c] = run_mean[c];
      var[c] = run_var[c];
    }
  }
  if (T* p = out(1))
    for (int64_t c = 0; c < g.c; ++c) p[c] = run_mean[c];
  if (T* p = out(2))
    for (int64_t c = 0; c < g.c; ++c) p[c] = run_var[c];

  // y = x * a + b per channel; for the rows below (few elements per plane) each channel's a and b
  // repeated for its S positions.
  const int64_t reps = g.s < kSmallPlane ? g.s : 1;
  std::vector<T> a(static_cast<size_t>(g.c * reps)), b(static_cast<size_t>(g.c * reps));
  for (int64_t c = 0; c < g.c; ++c) {
    const double istd = 1.0 / std::sqrt(var[c] + eps);
    std::fill_n(a.begin() + c * reps, reps, static_cast<T>(scale[c] * istd));
    std::fill_n(b.begin() + c * reps, reps, static_cast<T>(bias[c] - mean[c] * scale[c] * istd));
  }
  if (g.s < kSmallPlane) {  // few elements per plane: rows of C x S
    const int64_t row = g.c * g.s;
#pragma omp parallel for if (par(g))
    for (int64_t n = 0; n < g.n; ++n) {
      const T* xr = x + n * row;
      T* yr = y + n * row;
#pragma omp simd
      for (int64_t j = 0; j < row; ++j) yr[j] = xr[j] * a[j] + b[j];
      if (relu)
#pragma omp simd
        for (int64_t j = 0; j < row; ++j) yr[j] = yr[j] > T(0) ? yr[j] : T(0);
    }
    return Status::ok();
  }
  const T *pa = a.data(), *pb = b.data();
  over_planes(g, [&](int64_t p0, int64_t p1) {
    if constexpr (std::is_same_v<T, float>) plane_affine_f32(x, pa, pb, y, g.c, g.s, p0, p1, relu);
    else plane_affine(x, pa, pb, y, g.c, g.s, p0, p1, relu);
  });
  return Status::ok();
}

template <typename T>
Status batch_normalization_grad(const KernelCall& call) {
  BnGeometry g;
  RETURN_IF_ERROR(kernels::check_batch_norm_grad(call, &g));
  const bool training = call.attrs.get_int("_training", 0) != 0;
  const double eps = call.attrs.get_float("epsilon", 1e-5f);
  const T* dy = call.inputs[0].as<T>();     // (N, C, S)
  const T* x = call.inputs[1].as<T>();      // (N, C, S)
  const T* scale = call.inputs[2].as<T>();  // (C)
  auto out = [&](size_t i) -> T* {
    if (call.outputs.size() <= i || !call.outputs[i].data) return nullptr;
    return call.outputs[i].as<T>();
  };
  T* dx = out(0);      // (N, C, S)
  T* dscale = out(1);  // (C)
  T* dbias = out(2);   // (C)

  // Per channel: sum(dy) and sum(dy * xhat); in training mode with the batch statistics, in the
  // same pass over X.
  std::vector<double> mean, var, sdy, sdyx;
  const bool need_sums = training || dscale || dbias;
  if (training) {
    batch_stats(g, x, &mean, &var, dy, &sdy, &sdyx);
  } else {  // the running mean and variance (checked present)
    const T* rm = call.inputs[3].as<T>();
    const T* rv = call.inputs[4].as<T>();
    mean.assign(rm, rm + g.c);
    var.assign(rv, rv + g.c);
    if (need_sums) {
      const int64_t planes = g.n * g.c;
      std::vector<double> pdy(static_cast<size_t>(planes)), pdyx(static_cast<size_t>(planes));
#pragma omp parallel for if (par(g))
      for (int64_t p = 0; p < planes; ++p) {
        const T* dyp = dy + p * g.s;
        const T* xp = x + p * g.s;
        double s = 0, sx = 0;
#pragma omp simd reduction(+ : s, sx)
        for (int64_t i = 0; i < g.s; ++i) {
          s += dyp[i];
          sx += static_cast<double>(dyp[i]) * xp[i];
        }
        pdy[p] = s;
        pdyx[p] = sx;
      }
      sdy.assign(static_cast<size_t>(g.c), 0.0);
      sdyx.assign(static_cast<size_t>(g.c), 0.0);
      for (int64_t n = 0, p = 0; n < g.n; ++n)
        for (int64_t c = 0; c < g.c; ++c, ++p) {
          sdy[c] += pdy[p];
          sdyx[c] += pdyx[p];
        }
    }
  }
  std::vector<double> istd(static_cast<size_t>(g.c));
  for (int64_t c = 0; c < g.c; ++c) istd[c] = 1.0 / std::sqrt(var[c] + eps);
  std::vector<double> sdyxhat(static_cast<size_t>(g.c), 0.0);
  if (need_sums)
    for (int64_t c = 0; c < g.c; ++c) sdyxhat[c] = (sdyx[c] - mean[c] * sdy[c]) * istd[c];
  if (dbias)
    for (int64_t c = 0; c < g.c; ++c) dbias[c] = static_cast<T>(sdy[c]);
  if (dscale)
    for (int64_t c = 0; c < g.c; ++c) dscale[c] = static_cast<T>(sdyxhat[c]);
  if (!dx) return Status::ok();

  // training: dx = scale*istd * (dy - mean(dy) - xhat * mean(dy*xhat)); inference: scale*istd*dy.
  const double inv_m = 1.0 / static_cast<double>(std::max<int64_t>(g.m(), 1));
  // Per channel: dx = k dy - k mdy - k kx (x - mu), as T (the same values for every plane); for the
  // rows below (few elements per plane) each channel's values repeated for its S positions.
  const int64_t reps = g.s < kSmallPlane ? g.s : 1, width = g.c * reps;
  thread_local std::vector<T> coef;  // (4, C x reps): k, mdy, kx, mu
  coef.resize(static_cast<size_t>(4 * width));
  T *ck = coef.data(), *cmdy = ck + width, *ckx = cmdy + width, *cmu = ckx + width;
  for (int64_t c = 0; c < g.c; ++c) {
    std::fill_n(ck + c * reps, reps, static_cast<T>(scale[c] * istd[c]));
    std::fill_n(cmdy + c * reps, reps, training ? static_cast<T>(sdy[c] * inv_m) : T(0));
    std::fill_n(ckx + c * reps, reps, training ? static_cast<T>(sdyxhat[c] * inv_m * istd[c]) : T(0));
    std::fill_n(cmu + c * reps, reps, training ? static_cast<T>(mean[c]) : T(0));
  }
  if (g.s < kSmallPlane) {  // few elements per plane: rows of C x S
    const int64_t row = width;
#pragma omp parallel for if (par(g))
    for (int64_t n = 0; n < g.n; ++n) {
      const T* dyr = dy + n * row;
      const T* xr = x + n * row;
      T* dxr = dx + n * row;
      if (training) {
#pragma omp simd
        for (int64_t j = 0; j < row; ++j) dxr[j] = ck[j] * (dyr[j] - cmdy[j] - (xr[j] - cmu[j]) * ckx[j]);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < row; ++j) dxr[j] = ck[j] * dyr[j];
      }
    }
    return Status::ok();
  }
  const T* pc = coef.data();
  over_planes(g, [&](int64_t p0, int64_t p1) {
    if constexpr (std::is_same_v<T, float>) plane_dx_f32(dy, x, pc, dx, g.c, g.s, p0, p1, training);
    else plane_dx(dy, x, pc, dx, g.c, g.s, p0, p1, training);
  });
  return Status::ok();
}

template Status batch_normalization<float>(const KernelCall&);
template Status batch_normalization<double>(const KernelCall&);
template Status batch_normalization_grad<float>(const KernelCall&);
template Status batch_normalization_grad<double>(const KernelCall&);

}  // namespace pt::cpu
