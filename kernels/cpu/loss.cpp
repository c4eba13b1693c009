// Loss CPU kernels: SoftmaxCrossEntropyLoss (ONNX opset 12/13: scores [N, C, d...], integer
// labels [N, d...], optional class weights [C], ignore_index, reductions mean/sum/none, optional
// log_prob output), its backward op SoftmaxCrossEntropyLossGrad, and MSELoss / MSELossGrad.
// "mean" over zero total weight (every sample ignored) gives 0, not NaN, so that such a batch
// does not stop training; the gradient is 0 to match.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/checks/loss.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/softmax_impl.h"

namespace pt::cpu {
namespace {

using kernels::LossReduction;
using kernels::SceGeometry;

// The per-sample data of a cross-entropy call (its shapes checked by kernels/checks/loss.h).
struct SceSamples {
  AxisGeometry g;              // outer = N, n = C, inner = D
  std::vector<int64_t> label;  // (N*D) class index, -1 when ignored
  std::vector<double> weight;  // (N*D) class weight, 0 when ignored
  double weight_sum = 0;       // over non-ignored samples
};

// Reads and checks the labels; `w` the class weights or nullptr.
template <typename T>
Status sce_samples(const char* op, const SceGeometry& geo, const TensorView& labels, const T* w, SceSamples* s) {
  s->g = AxisGeometry{geo.n, geo.c, geo.d};
  const int64_t ns = labels.size();
  s->label.resize(ns);
  s->weight.resize(ns);
  s->weight_sum = 0;
  RETURN_IF_ERROR(kernels::check_sce_labels(op, labels.data, labels.dtype, ns, geo, s->label.data()));
  for (int64_t i = 0; i < ns; ++i) {
    const int64_t l = s->label[i];
    s->weight[i] = l < 0 ? 0.0 : w ? static_cast<double>(w[l]) : 1.0;
    s->weight_sum += s->weight[i];
  }
  return Status::ok();
}

}  // namespace

template <typename T>
Status softmax_cross_entropy_loss(const KernelCall& call) {
  const char* op = "SoftmaxCrossEntropyLoss";
  LossReduction red;
  SceGeometry geo;
  RETURN_IF_ERROR(kernels::check_sce(call, op, 0, &red, &geo));
  const TensorView& scores = call.inputs[0];
  const TensorView& labels = call.inputs[1];
  const T* w = kernels::optional_input<T>(call, 2);
  SceSamples s;
  RETURN_IF_ERROR(sce_samples<T>(op, geo, labels, w, &s));
  RETURN_IF_ERROR(kernels::check_sce_loss_outputs(call, red));
  const TensorView& loss = call.outputs[0];
  std::vector<T> scratch;
  T* lp = nullptr;  // (N, C, D) log-probabilities
  if (call.outputs.size() > 1 && call.outputs[1].data) {
    lp = call.outputs[1].as<T>();
  } else {
    scratch.resize(static_cast<size_t>(scores.size()));
    lp = scratch.data();
  }
  softmax_forward<T, true>(scores.as<T>(), lp, s.g);

  const int64_t c = s.g.n, d = s.g.inner, ns = static_cast<int64_t>(s.label.size());
  T* pl = loss.as<T>();
  double total = 0;
  for (int64_t i = 0; i < ns; ++i) {
    double li = 0;
    if (s.label[i] >= 0) {
      const int64_t nn = i / d, dd = i % d;
      li = -s.weight[i] * static_cast<double>(lp[(nn * c + s.label[i]) * d + dd]);
    }
    if (red == LossReduction::kNone) pl[i] = static_cast<T>(li);
    total += li;
  }
  if (red == LossReduction::kSum) pl[0] = static_cast<T>(total);
  if (red == LossReduction::kMean) pl[0] = static_cast<T>(s.weight_sum != 0 ? total / s.weight_sum : 0.0);
  return Status::ok();
}

template <typename T>
Status softmax_cross_entropy_loss_grad(const KernelCall& call) {
  const char* op = "SoftmaxCrossEntropyLossGrad";
  LossReduction red;
  SceGeometry geo;
  RETURN_IF_ERROR(kernels::check_sce(call, op, 1, &red, &geo));
  const TensorView& dloss = call.inputs[0];
  const TensorView& logp = call.inputs[1];
  const TensorView& labels = call.inputs[2];
  const T* w = kernels::optional_input<T>(call, 3);
  SceSamples s;
  RETURN_IF_ERROR(sce_samples<T>(op, geo, labels, w, &s));
  RETURN_IF_ERROR(kernels::check_sce_loss_grad_outputs(call, red));
  const TensorView& ds = call.outputs[0];
  const T* pdl = dloss.as<T>();
  const T* plp = logp.as<T>();  // (N, C, D)
  T* pds = ds.as<T>();          // (N, C, D)
  const int64_t n = s.g.outer, c = s.g.n, d = s.g.inner, ns = n * d;
  // coef[i]: the factor on (softmax - onehot) for sample i.
  std::vector<T> coef(static_cast<size_t>(ns));
  const double scale = red == LossReduction::kMean
                           ? (s.weight_sum != 0 ? static_cast<double>(pdl[0]) / s.weight_sum : 0.0)
                           : (red == LossReduction::kSum ? static_cast<double>(pdl[0]) : 1.0);
  for (int64_t i = 0; i < ns; ++i) {
    const double g = red == LossReduction::kNone ? static_cast<double>(pdl[i]) : scale;
    coef[i] = static_cast<T>(s.weight[i] * g);
  }
#pragma omp parallel for if (logp.size() > kParallelThreshold && n > 1)
  for (int64_t nn = 0; nn < n; ++nn) {
    const T* cf = coef.data() + nn * d;
    for (int64_t cc = 0; cc < c; ++cc) {
      const T* src = plp + (nn * c + cc) * d;
      T* dst = pds + (nn * c + cc) * d;
      for (int64_t dd = 0; dd < d; ++dd) dst[dd] = std::exp(src[dd]) * cf[dd];
    }
    for (int64_t dd = 0; dd < d; ++dd) {
      const int64_t l = s.label[nn * d + dd];
      if (l >= 0) pds[(nn * c + l) * d + dd] -= cf[dd];
    }
  }
  return Status::ok();
}

template <typename T>
Status mse_loss(const KernelCall& call) {
  LossReduction red;
  RETURN_IF_ERROR(kernels::check_mse_loss(call, &red));
  const TensorView& pred = call.inputs[0];
  const TensorView& target = call.inputs[1];
  const T* pp = pred.as<T>();
  const T* pt = target.as<T>();
  const int64_t n = pred.size();
  double s = 0;
#pragma omp parallel for simd reduction(+ : s) if (parallel: n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(pp[i]) - static_cast<double>(pt[i]);
    s += e * e;
  }
  if (red == LossReduction::kMean) s = n > 0 ? s / static_cast<double>(n) : 0.0;
  call.outputs[0].as<T>()[0] = static_cast<T>(s);
  return Status::ok();
}

template <typename T>
Status mse_loss_grad(const KernelCall& call) {
  LossReduction red;
  RETURN_IF_ERROR(kernels::check_mse_loss_grad(call, &red));
  const TensorView& dloss = call.inputs[0];
  const TensorView& pred = call.inputs[1];
  const TensorView& target = call.inputs[2];
  const TensorView& dp = call.outputs[0];
  const int64_t n = pred.size();
  const T k = static_cast<T>(2.0 * static_cast<double>(dloss.as<T>()[0]) /
                             (red == LossReduction::kMean && n > 0 ? static_cast<double>(n) : 1.0));
  const T* pp = pred.as<T>();
  const T* pt = target.as<T>();
  T* pd = dp.as<T>();
#pragma omp parallel for simd if (parallel: n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) pd[i] = k * (pp[i] - pt[i]);
  return Status::ok();
}

#define PT_INSTANTIATE(name)                             \
  template Status name<float>(const KernelCall& call);    \
  template Status name<double>(const KernelCall& call)

PT_INSTANTIATE(softmax_cross_entropy_loss);
PT_INSTANTIATE(softmax_cross_entropy_loss_grad);
PT_INSTANTIATE(mse_loss);
PT_INSTANTIATE(mse_loss_grad);

#undef PT_INSTANTIATE

}  // namespace pt::cpu
