// Optimizer-step CPU kernels; every one updates W and its state in place through its input views.
// SGDMomentum(W, G, V, lr): the SpecTrain paper's form, g = G + wd*W; V = gamma*V + (1 - gamma)*g;
// W -= lr*V. SGD(W, G, B, lr, step [, D]): torch.optim.SGD. Adam(W, G, M, V, lr, step): torch.optim
// Adam (decoupled = 0) or AdamW (decoupled = 1). step is the int64 count of updates done, incremented
// here; the arithmetic follows torch 1.13's single-tensor loops, operation for operation, in T.
#include <cmath>

#include "kernels/checks/optimizer.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/optimizer_math.h"

namespace pt::cpu {

template <typename T>
Status sgd_momentum(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_sgd_momentum(call));
  const TensorView& w = call.inputs[0];
  const TensorView& g = call.inputs[1];
  const TensorView& v = call.inputs[2];
  const TensorView& lr = call.inputs[3];
  const T gamma = static_cast<T>(call.attrs.get_float("momentum", 0.9f));
  const T wd = static_cast<T>(call.attrs.get_float("weight_decay", 0.0f));
  const T rate = lr.as<T>()[0];
  T* pw = w.as<T>();
  const T* pg = g.as<T>();
  T* pv = v.as<T>();
  const int64_t n = w.size();
  const T one_m = T(1) - gamma;
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const T gi = pg[i] + wd * pw[i];
    const T vi = gamma * pv[i] + one_m * gi;
    pv[i] = vi;
    pw[i] -= rate * vi;
  }
  return Status::ok();
}

template <typename T>
Status sgd(const KernelCall& call) {
  bool nesterov;
  RETURN_IF_ERROR(kernels::check_sgd(call, &nesterov));
  const TensorView& w = call.inputs[0];
  const TensorView& g = call.inputs[1];
  const TensorView& b = call.inputs[2];
  const TensorView& lr = call.inputs[3];
  const TensorView& step = call.inputs[4];
  const T mom = static_cast<T>(call.attrs.get_float("momentum", 0.0f));
  const T damp1 = static_cast<T>(1.0 - static_cast<double>(call.attrs.get_float("dampening", 0.0f)));
  const T wd = static_cast<T>(call.attrs.get_float("weight_decay", 0.0f));
  const T rate = lr.as<T>()[0];
  int64_t* count = step.as<int64_t>();
  const bool first = *count == 0;  // torch: the first step sets buf = d_p
  ++*count;
  T* pw = w.as<T>();
  const T* pg = g.as<T>();
  T* pb = b.as<T>();
  T* pd = nesterov ? call.inputs[5].as<T>() : nullptr;
  const int64_t n = w.size();
  // Without momentum torch keeps no buffer; B then holds the step's direction d_p (what SpecTrain
  // predicts with). With nesterov D holds the direction d_p + momentum*buf.
  if (mom == T(0)) {
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      const T d = pg[i] + wd * pw[i];
      pb[i] = d;
      pw[i] = pw[i] - rate * d;
    }
  } else if (pd) {
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      const T d = pg[i] + wd * pw[i];
      const T bi = first ? d : pb[i] * mom + damp1 * d;
      pb[i] = bi;
      const T dir = d + mom * bi;
      pd[i] = dir;
      pw[i] = pw[i] - rate * dir;
    }
  } else {
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      const T d = pg[i] + wd * pw[i];
      const T bi = first ? d : pb[i] * mom + damp1 * d;
      pb[i] = bi;
      pw[i] = pw[i] - rate * bi;
    }
  }
  return Status::ok();
}

template <typename T>
Status adam(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_adam(call));
  const TensorView& w = call.inputs[0];
  const TensorView& g = call.inputs[1];
  const TensorView& m = call.inputs[2];
  const TensorView& v = call.inputs[3];
  const TensorView& lr = call.inputs[4];
  const TensorView& step = call.inputs[5];
  const bool decoupled = call.attrs.get_int("decoupled", 0) != 0;
  const float b1f = call.attrs.get_float("beta1", 0.9f), b2f = call.attrs.get_float("beta2", 0.999f);
  const float wdf = call.attrs.get_float("weight_decay", 0.0f);
  const T b1 = static_cast<T>(b1f), b2 = static_cast<T>(b2f);
  const T one_m_b1 = static_cast<T>(1.0 - b1f), one_m_b2 = static_cast<T>(1.0 - b2f);
  const T eps = static_cast<T>(call.attrs.get_float("epsilon", 1e-8f));
  const T wd = decoupled ? T(0) : static_cast<T>(wdf);  // Adam: L2 in the gradient
  int64_t* count = step.as<int64_t>();
  const AdamScalars c = adam_scalars(static_cast<double>(lr.as<T>()[0]), ++*count, b1f, b2f, wdf, decoupled);
  const T decay = static_cast<T>(c.decay), neg_step = static_cast<T>(-c.step_size), bc2s = static_cast<T>(c.bc2_sqrt);
  T* pw = w.as<T>();
  const T* pg = g.as<T>();
  T* pm = m.as<T>();
  T* pv = v.as<T>();
  const int64_t n = w.size();
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const T wi = decoupled ? pw[i] * decay : pw[i];
    const T gi = pg[i] + wd * wi;
    const T mi = pm[i] * b1 + one_m_b1 * gi;
    const T vi = pv[i] * b2 + one_m_b2 * gi * gi;
    pm[i] = mi;
    pv[i] = vi;
    const T denom = std::sqrt(vi) / bc2s + eps;
    pw[i] = wi + neg_step * mi / denom;
  }
  return Status::ok();
}

template Status sgd<float>(const KernelCall& call);
template Status sgd<double>(const KernelCall& call);
template Status adam<float>(const KernelCall& call);
template Status adam<double>(const KernelCall& call);
template Status sgd_momentum<float>(const KernelCall& call);
template Status sgd_momentum<double>(const KernelCall& call);

}  // namespace pt::cpu
