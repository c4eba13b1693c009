// Loss CPU kernels: SoftmaxCrossEntropyLoss (ONNX opset 12/13: scores [N, C, d...], integer
// labels [N, d...], optional class weights [C], ignore_index, reductions mean/sum/none, optional
// log_prob output), its backward op SoftmaxCrossEntropyLossGrad, and MSELoss / MSELossGrad.
// "mean" over zero total weight (every sample ignored) gives 0, not NaN, so that such a batch
// does not stop training; the gradient is 0 to match.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/softmax_impl.h"

namespace pt::cpu {
namespace {

enum class Reduction { kMean, kSum, kNone };

Status parse_reduction(const KernelCall& call, const char* op, bool allow_none, Reduction* r) {
  const std::string s = call.attrs.get_string("reduction", "mean");
  if (s == "mean") *r = Reduction::kMean;
  else if (s == "sum") *r = Reduction::kSum;
  else if (s == "none" && allow_none) *r = Reduction::kNone;
  else
    return invalid_input(std::string(op) + ": unsupported reduction '" + s + "' (expected mean, sum" +
                         (allow_none ? ", none)" : ")"));
  return Status::ok();
}

// Shapes and per-sample data of a cross-entropy call: scores viewed as [N, C, D].
template <typename T>
struct SceSamples {
  AxisGeometry g;              // outer = N, n = C, inner = D
  std::vector<int64_t> label;  // (N*D) class index, -1 when ignored
  std::vector<double> weight;  // (N*D) class weight, 0 when ignored
  double weight_sum = 0;       // over non-ignored samples
};

template <typename T>
Status sce_samples(const KernelCall& call, const char* op, const TensorView& scores,
                   const TensorView& labels, size_t weights_index, SceSamples<T>* s) {
  if (scores.rank() < 2)
    return invalid_input(std::string(op) + ": scores " + dims_str(scores.dims) +
                         " must have rank >= 2 ([N, C, d...])");
  Dims want(scores.dims);
  want.erase(want.begin() + 1);
  RETURN_IF_ERROR(check_same_dims(op, "labels", labels.dims, want));
  if (labels.dtype != DType::kInt64 && labels.dtype != DType::kInt32)
    return invalid_input(std::string(op) + ": labels must be int64 or int32, got " +
                         dtype_name(labels.dtype));
  const int64_t c = scores.dims[1];
  s->g = AxisGeometry{scores.dims[0], c, 1};
  for (int d = 2; d < scores.rank(); ++d) s->g.inner *= scores.dims[d];
  const T* w = nullptr;
  if (has_input(call, weights_index)) {
    const TensorView& wv = call.inputs[weights_index];
    RETURN_IF_ERROR(check_same_dims(op, "weights", wv.dims, Dims{c}));
    w = wv.as<T>();
  }
  const bool has_ignore = call.attrs.has("ignore_index");
  const int64_t ignore = call.attrs.get_int("ignore_index", 0);
  const int64_t ns = labels.size();
  s->label.resize(ns);
  s->weight.resize(ns);
  s->weight_sum = 0;
  for (int64_t i = 0; i < ns; ++i) {
    const int64_t l = labels.dtype == DType::kInt64 ? static_cast<const int64_t*>(labels.data)[i]
                                                     : static_cast<const int32_t*>(labels.data)[i];
    if (has_ignore && l == ignore) {
      s->label[i] = -1;
      s->weight[i] = 0;
      continue;
    }
    if (l < 0 || l >= c)
      return invalid_input(std::string(op) + ": label " + std::to_string(l) + " at index " +
                           std::to_string(i) + " is outside [0, " + std::to_string(c) + ")");
    s->label[i] = l;
    s->weight[i] = w ? static_cast<double>(w[l]) : 1.0;
    s->weight_sum += s->weight[i];
  }
  return Status::ok();
}

}  // namespace

template <typename T>
Status softmax_cross_entropy_loss(const KernelCall& call) {
  const char* op = "SoftmaxCrossEntropyLoss";
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  Reduction red;
  RETURN_IF_ERROR(parse_reduction(call, op, true, &red));
  const TensorView& scores = call.inputs[0];
  const TensorView& labels = call.inputs[1];
  SceSamples<T> s;
  RETURN_IF_ERROR(sce_samples<T>(call, op, scores, labels, 2, &s));
  const TensorView& loss = call.outputs[0];
  if (red == Reduction::kNone) {
    RETURN_IF_ERROR(check_same_dims(op, "loss", loss.dims, labels.dims));
  } else if (loss.size() != 1) {
    return invalid_input(std::string(op) + ": loss output " + dims_str(loss.dims) +
                         " must be a scalar for reduction mean/sum");
  }
  std::vector<T> scratch;
  T* lp = nullptr;  // (N, C, D) log-probabilities
  if (call.outputs.size() > 1 && call.outputs[1].data) {
    RETURN_IF_ERROR(check_same_dims(op, "log_prob", call.outputs[1].dims, scores.dims));
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
    if (red == Reduction::kNone) pl[i] = static_cast<T>(li);
    total += li;
  }
  if (red == Reduction::kSum) pl[0] = static_cast<T>(total);
  if (red == Reduction::kMean) pl[0] = static_cast<T>(s.weight_sum != 0 ? total / s.weight_sum : 0.0);
  return Status::ok();
}

template <typename T>
Status softmax_cross_entropy_loss_grad(const KernelCall& call) {
  const char* op = "SoftmaxCrossEntropyLossGrad";
  RETURN_IF_ERROR(check_arity(call, op, 3, 1));
  Reduction red;
  RETURN_IF_ERROR(parse_reduction(call, op, true, &red));
  const TensorView& dloss = call.inputs[0];
  const TensorView& logp = call.inputs[1];
  const TensorView& labels = call.inputs[2];
  SceSamples<T> s;
  RETURN_IF_ERROR(sce_samples<T>(call, op, logp, labels, 3, &s));
  const TensorView& ds = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims(op, "output", ds.dims, logp.dims));
  if (red == Reduction::kNone) {
    RETURN_IF_ERROR(check_same_dims(op, "dLoss", dloss.dims, labels.dims));
  } else if (dloss.size() != 1) {
    return invalid_input(std::string(op) + ": dLoss " + dims_str(dloss.dims) +
                         " must be a scalar for reduction mean/sum");
  }
  const T* pdl = dloss.as<T>();
  const T* plp = logp.as<T>();  // (N, C, D)
  T* pds = ds.as<T>();          // (N, C, D)
  const int64_t n = s.g.outer, c = s.g.n, d = s.g.inner, ns = n * d;
  // coef[i]: the factor on (softmax - onehot) for sample i.
  std::vector<T> coef(static_cast<size_t>(ns));
  const double scale = red == Reduction::kMean
                           ? (s.weight_sum != 0 ? static_cast<double>(pdl[0]) / s.weight_sum : 0.0)
                           : (red == Reduction::kSum ? static_cast<double>(pdl[0]) : 1.0);
  for (int64_t i = 0; i < ns; ++i) {
    const double g = red == Reduction::kNone ? static_cast<double>(pdl[i]) : scale;
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
  const char* op = "MSELoss";
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  Reduction red;
  RETURN_IF_ERROR(parse_reduction(call, op, false, &red));
  const TensorView& pred = call.inputs[0];
  const TensorView& target = call.inputs[1];
  RETURN_IF_ERROR(check_same_dims(op, "target", target.dims, pred.dims));
  if (call.outputs[0].size() != 1)
    return invalid_input(std::string(op) + ": loss output " + dims_str(call.outputs[0].dims) +
                         " must be a scalar");
  const T* pp = pred.as<T>();
  const T* pt = target.as<T>();
  const int64_t n = pred.size();
  double s = 0;
#pragma omp parallel for simd reduction(+ : s) if (parallel: n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(pp[i]) - static_cast<double>(pt[i]);
    s += e * e;
  }
  if (red == Reduction::kMean) s = n > 0 ? s / static_cast<double>(n) : 0.0;
  call.outputs[0].as<T>()[0] = static_cast<T>(s);
  return Status::ok();
}

template <typename T>
Status mse_loss_grad(const KernelCall& call) {
  const char* op = "MSELossGrad";
  RETURN_IF_ERROR(check_arity(call, op, 3, 1));
  Reduction red;
  RETURN_IF_ERROR(parse_reduction(call, op, false, &red));
  const TensorView& dloss = call.inputs[0];
  const TensorView& pred = call.inputs[1];
  const TensorView& target = call.inputs[2];
  const TensorView& dp = call.outputs[0];
  if (dloss.size() != 1)
    return invalid_input(std::string(op) + ": dLoss " + dims_str(dloss.dims) + " must be a scalar");
  RETURN_IF_ERROR(check_same_dims(op, "target", target.dims, pred.dims));
  RETURN_IF_ERROR(check_same_dims(op, "output", dp.dims, pred.dims));
  const int64_t n = pred.size();
  const T k = static_cast<T>(2.0 * static_cast<double>(dloss.as<T>()[0]) /
                             (red == Reduction::kMean && n > 0 ? static_cast<double>(n) : 1.0));
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
