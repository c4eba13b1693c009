// LRN across channels, y = x * (bias + alpha/size * sum of x^2 over the channel window)^-beta,
// the window of channel c being [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to [0, C),
// and its backward op LRNGrad (dY, X) -> dX, which recomputes the window sums from X.
// Threads own (n, c) planes; the spatial loops vectorise.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

struct LrnParams {
  int64_t n = 0, c = 0, s = 1;
  int64_t lo = 0, hi = 0;  // window [c - lo, c + hi]
  double alpha = 1e-4, beta = 0.75, bias = 1.0, size = 1;
};

Status lrn_params(const char* op, const KernelCall& call, const Dims& x, LrnParams* p) {
  if (x.size() < 2) return invalid_input(std::string(op) + ": X " + dims_str(x) + " has rank below 2");
  const int64_t size = call.attrs.get_int("size", 0);
  if (size < 1) return invalid_input(std::string(op) + ": attribute size must be a positive integer");
  p->n = x[0];
  p->c = x[1];
  p->s = 1;
  for (size_t i = 2; i < x.size(); ++i) p->s *= x[i];
  p->lo = (size - 1) / 2;
  p->hi = size - 1 - p->lo;
  p->alpha = call.attrs.get_float("alpha", 1e-4f);
  p->beta = call.attrs.get_float("beta", 0.75f);
  p->bias = call.attrs.get_float("bias", 1.0f);
  p->size = static_cast<double>(size);
  return Status::ok();
}

// sq[i] = bias + alpha/size * sum over the window of channel c of x^2, for one plane (n, c).
template <typename T>
void window_sums(const LrnParams& p, const T* x, int64_t n, int64_t c, T* sq) {
  const T k = static_cast<T>(p.alpha / p.size), b = static_cast<T>(p.bias);
#pragma omp simd
  for (int64_t i = 0; i < p.s; ++i) sq[i] = 0;
  for (int64_t cc = std::max<int64_t>(0, c - p.lo); cc <= std::min(p.c - 1, c + p.hi); ++cc) {
    const T* xp = x + (n * p.c + cc) * p.s;
#pragma omp simd
    for (int64_t i = 0; i < p.s; ++i) sq[i] += xp[i] * xp[i];
  }
#pragma omp simd
  for (int64_t i = 0; i < p.s; ++i) sq[i] = b + k * sq[i];
}

bool par(const LrnParams& p) { return p.n * p.c > 1 && p.n * p.c * p.s > kParallelThreshold / 4; }

}  // namespace

template <typename T>
Status lrn(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "LRN", 1, 1));
  const TensorView& x = call.inputs[0];   // (N, C, S)
  const TensorView& y = call.outputs[0];  // (N, C, S)
  RETURN_IF_ERROR(check_same_dims("LRN", "output", y.dims, x.dims));
  LrnParams p;
  RETURN_IF_ERROR(lrn_params("LRN", call, x.dims, &p));
  const T* px = x.as<T>();
  T* py = y.as<T>();
  const T nb = static_cast<T>(-p.beta);
#pragma omp parallel for if (par(p))
  for (int64_t pl = 0; pl < p.n * p.c; ++pl) {
    T* yp = py + pl * p.s;
    const T* xp = px + pl * p.s;
    window_sums(p, px, pl / p.c, pl % p.c, yp);  // y holds the sums until overwritten
#pragma omp simd
    for (int64_t i = 0; i < p.s; ++i) yp[i] = xp[i] * std::pow(yp[i], nb);
  }
  return Status::ok();
}

// dx_j = dy_j * s_j^-beta - (2 alpha beta / size) * x_j * sum_{i : j in window(i)} dy_i x_i s_i^(-beta-1)
// where i ranges over channels [j - hi, j + lo].
template <typename T>
Status lrn_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "LRNGrad", 2, 1));
  const TensorView& dy = call.inputs[0];  // (N, C, S)
  const TensorView& x = call.inputs[1];   // (N, C, S)
  const TensorView& dx = call.outputs[0];  // (N, C, S)
  RETURN_IF_ERROR(check_same_dims("LRNGrad", "dY", dy.dims, x.dims));
  RETURN_IF_ERROR(check_same_dims("LRNGrad", "output", dx.dims, x.dims));
  LrnParams p;
  RETURN_IF_ERROR(lrn_params("LRNGrad", call, x.dims, &p));
  const T* px = x.as<T>();
  const T* pdy = dy.as<T>();
  T* pdx = dx.as<T>();
  std::vector<T> t(static_cast<size_t>(x.size()));  // dy * x * s^(-beta-1)
  const T nb = static_cast<T>(-p.beta), nb1 = static_cast<T>(-p.beta - 1);
#pragma omp parallel for if (par(p))
  for (int64_t pl = 0; pl < p.n * p.c; ++pl) {
    T* dxp = pdx + pl * p.s;
    T* tp = t.data() + pl * p.s;
    const T* xp = px + pl * p.s;
    const T* dyp = pdy + pl * p.s;
    window_sums(p, px, pl / p.c, pl % p.c, tp);
#pragma omp simd
    for (int64_t i = 0; i < p.s; ++i) {
      const T s = tp[i];
      dxp[i] = dyp[i] * std::pow(s, nb);
      tp[i] = dyp[i] * xp[i] * std::pow(s, nb1);
    }
  }
  const T coef = static_cast<T>(2.0 * p.alpha * p.beta / p.size);
#pragma omp parallel for if (par(p))
  for (int64_t pl = 0; pl < p.n * p.c; ++pl) {
    const int64_t n = pl / p.c, c = pl % p.c;
    T* dxp = pdx + pl * p.s;
    const T* xp = px + pl * p.s;
    for (int64_t cc = std::max<int64_t>(0, c - p.hi); cc <= std::min(p.c - 1, c + p.lo); ++cc) {
      const T* tp = t.data() + (n * p.c + cc) * p.s;
#pragma omp simd
      for (int64_t i = 0; i < p.s; ++i) dxp[i] -= coef * xp[i] * tp[i];
    }
  }
  return Status::ok();
}

template Status lrn<float>(const KernelCall&);
template Status lrn<double>(const KernelCall&);
template Status lrn_grad<float>(const KernelCall&);
template Status lrn_grad<double>(const KernelCall&);

}  // namespace pt::cpu
