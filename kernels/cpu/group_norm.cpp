// GroupNormalization (opsets 18 and 21) and InstanceNormalization (its case of one channel per
// group) on the CPU, with their backward op. X is (N, C, spatial...); each group's C/G channels
// are contiguous, so a group is one block of (C/G) * spatial elements. The shape function leaves
// `_groups` (G) and `_per_group` (1 when scale and bias have G entries, opset 18's form; else C).
// Statistics are computed in double; the backward recomputes them from X rather than saving them.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/checks/group_norm.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

using GroupGeometry = kernels::GroupNormGeometry;

template <typename T>
void moments(const T* p, int64_t len, double eps, double* mean, double* rstd) {
  double s = 0;
  for (int64_t i = 0; i < len; ++i) s += p[i];
  const double m = len ? s / static_cast<double>(len) : 0.0;
  double v = 0;
  for (int64_t i = 0; i < len; ++i) v += (p[i] - m) * (p[i] - m);
  *mean = m;
  *rstd = 1.0 / std::sqrt((len ? v / static_cast<double>(len) : 0.0) + eps);
}

}  // namespace

// (X, scale, bias) -> Y.
template <typename T>
Status group_norm(const KernelCall& call) {
  GroupGeometry geo;
  RETURN_IF_ERROR(kernels::check_group_norm(call, &geo));
  const TensorView& x = call.inputs[0];
  const T* px = x.as<T>();                   // (N, G, C/G, spatial)
  const T* scale = call.inputs[1].as<T>();   // (params)
  const T* bias = call.inputs[2].as<T>();    // (params)
  T* py = call.outputs[0].as<T>();           // (N, G, C/G, spatial)
  const int64_t blocks = geo.n * geo.g;
#pragma omp parallel for if (x.size() > kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t grp = b % geo.g;
    const T* xb = px + b * geo.block;
    T* yb = py + b * geo.block;
    double mean, rstd;
    moments(xb, geo.block, geo.epsilon, &mean, &rstd);
    for (int64_t ch = 0; ch < geo.per_group_channels; ++ch) {
      const int64_t p = geo.param_index(grp, grp * geo.per_group_channels + ch);
      const double s = scale[p], o = bias[p];
      for (int64_t i = ch * geo.spatial; i < (ch + 1) * geo.spatial; ++i)
        yb[i] = static_cast<T>((xb[i] - mean) * rstd * s + o);
    }
  }
  return Status::ok();
}

// (dY, X, scale) -> (dX, dScale, dBias); any output may be absent.
template <typename T>
Status group_norm_grad(const KernelCall& call) {
  GroupGeometry geo;
  RETURN_IF_ERROR(kernels::check_group_norm_grad(call, &geo));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const int64_t params = geo.params();
  const T* pdy = dy.as<T>();                // (N, G, C/G, spatial)
  const T* px = x.as<T>();                  // (N, G, C/G, spatial)
  const T* scale = call.inputs[2].as<T>();  // (params)
  T* pdx = call.outputs[0].data ? call.outputs[0].as<T>() : nullptr;
  T* pds = call.outputs[1].data ? call.outputs[1].as<T>() : nullptr;
  T* pdb = call.outputs[2].data ? call.outputs[2].as<T>() : nullptr;
  std::vector<double> dscale(params, 0.0), dbias(params, 0.0);
  const int64_t blocks = geo.n * geo.g;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t grp = b % geo.g;
    const T* xb = px + b * geo.block;
    const T* dyb = pdy + b * geo.block;
    double mean, rstd;
    moments(xb, geo.block, geo.epsilon, &mean, &rstd);
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t ch = 0; ch < geo.per_group_channels; ++ch) {
      const int64_t p = geo.param_index(grp, grp * geo.per_group_channels + ch);
      for (int64_t i = ch * geo.spatial; i < (ch + 1) * geo.spatial; ++i) {
        const double xhat = (xb[i] - mean) * rstd;
        const double dxhat = dyb[i] * static_cast<double>(scale[p]);
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        dscale[p] += dyb[i] * xhat;
        dbias[p] += dyb[i];
      }
    }
    if (!pdx) continue;
    const double inv = geo.block ? 1.0 / static_cast<double>(geo.block) : 0.0;
    const double m1 = sum_dxhat * inv, m2 = sum_dxhat_xhat * inv;
    T* dxb = pdx + b * geo.block;
    for (int64_t ch = 0; ch < geo.per_group_channels; ++ch) {
      const int64_t p = geo.param_index(grp, grp * geo.per_group_channels + ch);
      for (int64_t i = ch * geo.spatial; i < (ch + 1) * geo.spatial; ++i) {
        const double xhat = (xb[i] - mean) * rstd;
        dxb[i] = static_cast<T>(rstd * (dyb[i] * static_cast<double>(scale[p]) - m1 - xhat * m2));
      }
    }
  }
  for (int64_t p = 0; p < params; ++p) {
    if (pds) pds[p] = static_cast<T>(dscale[p]);
    if (pdb) pdb[p] = static_cast<T>(dbias[p]);
  }
  return Status::ok();
}

template Status group_norm<float>(const KernelCall&);
template Status group_norm<double>(const KernelCall&);
template Status group_norm_grad<float>(const KernelCall&);
template Status group_norm_grad<double>(const KernelCall&);

}  // namespace pt::cpu
