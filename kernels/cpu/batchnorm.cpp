// BatchNormalization over [N, C, spatial...] in inference mode (running statistics) and training
// mode (batch statistics; attribute _training, set by the shape function from the opset's rules),
// and its backward op BatchNormalizationGrad (dY, X, scale[, mean, var]) -> dX, dScale, dBias.
// In training mode the running mean and variance INPUTS (3, 4) are updated in place, with the
// node's momentum (running = momentum * running + (1 - momentum) * batch) and the unbiased batch
// variance as PyTorch does; outputs 1, 2 (when present) receive the same updated values and
// outputs 3, 4 (opset < 14: saved mean, saved variance) the batch mean and biased variance.
// The backward recomputes the batch statistics from X rather than keeping them from the forward.
// Sums accumulate in double; threads own (n, c) planes, then channels.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

struct BnGeometry {
  int64_t n = 0, c = 0, s = 1;  // batch, channels, spatial size
  int64_t m() const { return n * s; }  // elements per channel
};

Status bn_geometry(const char* op, const KernelCall& call, size_t first_param, BnGeometry* g) {
  const Dims& x = call.inputs[first_param - 1].dims;
  if (x.size() < 2) return invalid_input(std::string(op) + ": X " + dims_str(x) + " has rank below 2");
  g->n = x[0];
  g->c = x[1];
  g->s = 1;
  for (size_t i = 2; i < x.size(); ++i) g->s *= x[i];
  for (size_t i = first_param; i < call.inputs.size() && i < first_param + 4; ++i)
    if (has_input(call, i)) RETURN_IF_ERROR(check_same_dims(op, "a per-channel input", call.inputs[i].dims, Dims{g->c}));
  return Status::ok();
}

bool par(const BnGeometry& g) { return g.n * g.c > 1 && g.n * g.c * g.s > kParallelThreshold; }

// Batch mean and biased variance per channel (two passes: sums, then centred squares).
template <typename T>
void batch_stats(const BnGeometry& g, const T* x, std::vector<double>* mean, std::vector<double>* var) {
  const int64_t planes = g.n * g.c;
  std::vector<double> part(static_cast<size_t>(planes));
  mean->assign(static_cast<size_t>(g.c), 0.0);
  var->assign(static_cast<size_t>(g.c), 0.0);
#pragma omp parallel for if (par(g))
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + p * g.s;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < g.s; ++i) s += xp[i];
    part[p] = s;
  }
  for (int64_t p = 0; p < planes; ++p) (*mean)[p % g.c] += part[p];
  for (auto& v : *mean) v /= static_cast<double>(std::max<int64_t>(g.m(), 1));
#pragma omp parallel for if (par(g))
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = x + p * g.s;
    const double mu = (*mean)[p % g.c];
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < g.s; ++i) s += (xp[i] - mu) * (xp[i] - mu);
    part[p] = s;
  }
  for (int64_t p = 0; p < planes; ++p) (*var)[p % g.c] += part[p];
  for (auto& v : *var) v /= static_cast<double>(std::max<int64_t>(g.m(), 1));
}

}  // namespace

template <typename T>
Status batch_normalization(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "BatchNormalization", 5, 1));
  BnGeometry g;
  RETURN_IF_ERROR(bn_geometry("BatchNormalization", call, 1, &g));
  RETURN_IF_ERROR(check_same_dims("BatchNormalization", "Y", call.outputs[0].dims, call.inputs[0].dims));
  // Input 5 (optional) is the runtime's step counter: -1 marks an evaluation pass, which uses
  // (and keeps) the running statistics even for a node that trains.
  const bool eval_pass = call.inputs.size() > 5 && call.inputs[5].data && call.inputs[5].dtype == DType::kInt64 &&
                         call.inputs[5].as<int64_t>()[0] < 0;
  const bool training = call.attrs.get_int("_training", 0) != 0 && !eval_pass;
  const double eps = call.attrs.get_float("epsilon", 1e-5f);
  const double momentum = call.attrs.get_float("momentum", 0.9f);
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
  for (size_t i = 1; i < call.outputs.size() && i < 5; ++i)
    if (call.outputs[i].data)
      RETURN_IF_ERROR(check_same_dims("BatchNormalization", "a statistics output", call.outputs[i].dims, Dims{g.c}));

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

  // y = x * a + b per channel.
  std::vector<T> a(static_cast<size_t>(g.c)), b(static_cast<size_t>(g.c));
  for (int64_t c = 0; c < g.c; ++c) {
    const double istd = 1.0 / std::sqrt(var[c] + eps);
    a[c] = static_cast<T>(scale[c] * istd);
    b[c] = static_cast<T>(bias[c] - mean[c] * scale[c] * istd);
  }
#pragma omp parallel for if (par(g))
  for (int64_t p = 0; p < g.n * g.c; ++p) {
    const T ac = a[p % g.c], bc = b[p % g.c];
    const T* xp = x + p * g.s;
    T* yp = y + p * g.s;
#pragma omp simd
    for (int64_t i = 0; i < g.s; ++i) yp[i] = xp[i] * ac + bc;
  }
  return Status::ok();
}

template <typename T>
Status batch_normalization_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "BatchNormalizationGrad", 3, 1));
  BnGeometry g;
  RETURN_IF_ERROR(bn_geometry("BatchNormalizationGrad", call, 2, &g));
  RETURN_IF_ERROR(check_same_dims("BatchNormalizationGrad", "dY", call.inputs[0].dims, call.inputs[1].dims));
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
  if (dx) RETURN_IF_ERROR(check_same_dims("BatchNormalizationGrad", "dX", call.outputs[0].dims, call.inputs[1].dims));
  for (size_t i = 1; i < 3; ++i)
    if (out(i)) RETURN_IF_ERROR(check_same_dims("BatchNormalizationGrad", "a parameter gradient", call.outputs[i].dims, Dims{g.c}));

  std::vector<double> mean, var;
  if (training) {
    batch_stats(g, x, &mean, &var);
  } else {
    if (!has_input(call, 3) || !has_input(call, 4))
      return invalid_input("BatchNormalizationGrad: inference mode needs the running mean and variance inputs");
    const T* rm = call.inputs[3].as<T>();
    const T* rv = call.inputs[4].as<T>();
    mean.assign(rm, rm + g.c);
    var.assign(rv, rv + g.c);
  }
  std::vector<double> istd(static_cast<size_t>(g.c));
  for (int64_t c = 0; c < g.c; ++c) istd[c] = 1.0 / std::sqrt(var[c] + eps);

  // Per channel: sum(dy) and sum(dy * xhat).
  const int64_t planes = g.n * g.c;
  std::vector<double> pdy(static_cast<size_t>(planes)), pdyx(static_cast<size_t>(planes));
  const bool need_sums = training || dscale || dbias;
  if (need_sums) {
#pragma omp parallel for if (par(g))
    for (int64_t p = 0; p < planes; ++p) {
      const T* dyp = dy + p * g.s;
      const T* xp = x + p * g.s;
      const double mu = mean[p % g.c];
      double s = 0, sx = 0;
#pragma omp simd reduction(+ : s, sx)
      for (int64_t i = 0; i < g.s; ++i) {
        s += dyp[i];
        sx += dyp[i] * (xp[i] - mu);
      }
      pdy[p] = s;
      pdyx[p] = sx;
    }
  }
  std::vector<double> sdy(static_cast<size_t>(g.c), 0.0), sdyxhat(static_cast<size_t>(g.c), 0.0);
  for (int64_t p = 0; p < planes && need_sums; ++p) {
    sdy[p % g.c] += pdy[p];
    sdyxhat[p % g.c] += pdyx[p] * istd[p % g.c];
  }
  if (dbias)
    for (int64_t c = 0; c < g.c; ++c) dbias[c] = static_cast<T>(sdy[c]);
  if (dscale)
    for (int64_t c = 0; c < g.c; ++c) dscale[c] = static_cast<T>(sdyxhat[c]);
  if (!dx) return Status::ok();

  // training: dx = scale*istd * (dy - mean(dy) - xhat * mean(dy*xhat)); inference: scale*istd*dy.
  const double inv_m = 1.0 / static_cast<double>(std::max<int64_t>(g.m(), 1));
#pragma omp parallel for if (par(g))
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t c = p % g.c;
    const T* dyp = dy + p * g.s;
    const T* xp = x + p * g.s;
    T* dxp = dx + p * g.s;
    const T k = static_cast<T>(scale[c] * istd[c]);
    if (training) {
      const T mdy = static_cast<T>(sdy[c] * inv_m);
      const T kx = static_cast<T>(sdyxhat[c] * inv_m * istd[c]);  // multiplies (x - mean)
      const T mu = static_cast<T>(mean[c]);
#pragma omp simd
      for (int64_t i = 0; i < g.s; ++i) dxp[i] = k * (dyp[i] - mdy - (xp[i] - mu) * kx);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < g.s; ++i) dxp[i] = k * dyp[i];
    }
  }
  return Status::ok();
}

template Status batch_normalization<float>(const KernelCall&);
template Status batch_normalization<double>(const KernelCall&);
template Status batch_normalization_grad<float>(const KernelCall&);
template Status batch_normalization_grad<double>(const KernelCall&);

}  // namespace pt::cpu
