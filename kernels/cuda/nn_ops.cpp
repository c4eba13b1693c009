// Host side of the CUDA pooling, BatchNormalization, Dropout, loss and optimizer kernels: the CPU
// kernels' checks (kernels/checks/*.h, one definition for both backends), then launches of pool.cu,
// batchnorm.cu, dropout.cu, loss.cu, optimizer.cu on the call's stream, none synchronising: the
// cross-entropy loss checks its label values on the device into the deferred error word
// (deferred_error.h), which the host reads at its next synchronisation (the step's loss read).
#include <cuda_runtime_api.h>

#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/checks/batchnorm.h"
#include "kernels/checks/loss.h"
#include "kernels/checks/optimizer.h"
#include "kernels/checks/pool.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops_util.h"

namespace pt::cuda {

template <typename T>
Status softmax_rows(cudaStream_t stream, const char* op, bool log, int64_t outer, int64_t n, int64_t inner,
                    const T* x, T* y);  // dnn_ops.cpp

namespace {

PoolGeom pool_geom(const Window& w) {
  PoolGeom g;
  g.planes = w.n * w.c;
  for (int j = 0; j < 3; ++j) {
    g.in[j] = w.in[j];
    g.out[j] = w.out[j];
    g.k[j] = w.k[j];
    g.s[j] = w.s[j];
    g.d[j] = w.d[j];
    g.pb[j] = w.pb[j];
    g.pe[j] = w.pe[j];
  }
  return g;
}

}  // namespace

// ---- pooling ------------------------------------------------------------------------------------

template <typename T>
Status max_pool(const KernelCall& call) {
  Window w;
  RETURN_IF_ERROR(kernels::check_max_pool(call, &w));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  int64_t* idx = call.outputs.size() > 1 && call.outputs[1].data ? call.outputs[1].as<int64_t>() : nullptr;
  const bool col_major = call.attrs.get_int("storage_order", 0) != 0;
  PT_CUDA_CHECK(launch_max_pool<T>(pool_geom(w), y.as<T>(), idx, col_major, x.as<T>(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status max_pool_grad(const KernelCall& call) {
  Window w;
  RETURN_IF_ERROR(kernels::check_max_pool_grad(call, &w));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  PT_CUDA_CHECK(launch_max_pool_grad<T>(pool_geom(w), dx.as<T>(), dy.as<T>(), x.as<T>(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status average_pool(const KernelCall& call) {
  Window w;
  RETURN_IF_ERROR(kernels::check_average_pool(call, &w));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const bool include_pad = call.attrs.get_int("count_include_pad", 0) != 0;
  PT_CUDA_CHECK(launch_avg_pool<T>(pool_geom(w), y.as<T>(), x.as<T>(), include_pad, stream_of(call)));
  return Status::ok();
}

template <typename T>
Status average_pool_grad(const KernelCall& call) {
  Window w;
  RETURN_IF_ERROR(kernels::check_average_pool_grad(call, &w));
  const TensorView& dy = call.inputs[0];
  const TensorView& dx = call.outputs[0];
  const bool include_pad = call.attrs.get_int("count_include_pad", 0) != 0;
  PT_CUDA_CHECK(launch_avg_pool_grad<T>(pool_geom(w), dx.as<T>(), dy.as<T>(), include_pad, stream_of(call)));
  return Status::ok();
}

// ---- BatchNormalization -------------------------------------------------------------------------

namespace {

BnGeom bn_geom(const kernels::BatchNormGeometry& b) {
  BnGeom g;
  g.n = b.n;
  g.c = b.c;
  g.s = b.s;
  return g;
}

template <typename T>
T* optional_out(const KernelCall& call, size_t i) {
  if (call.outputs.size() <= i || !call.outputs[i].data) return nullptr;
  return call.outputs[i].as<T>();
}

}  // namespace

template <typename T>
Status batch_normalization(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "BatchNormalization", 5, 1));
  bool relu = false;
  RETURN_IF_ERROR(kernels::check_batch_norm_activation(call, &relu));
  kernels::BatchNormGeometry bg;
  RETURN_IF_ERROR(kernels::check_batch_norm(call, &bg));
  RETURN_IF_ERROR(kernels::check_batch_norm_stats(call, bg));
  const BnGeom g = bn_geom(bg);
  // Input 5 (optional): the runtime's step counter, read on the device (-1: an evaluation pass).
  const int64_t* step = call.inputs.size() > 5 && call.inputs[5].data && call.inputs[5].dtype == DType::kInt64
                            ? call.inputs[5].as<int64_t>()
                            : nullptr;
  const bool training = call.attrs.get_int("_training", 0) != 0;
  const double eps = call.attrs.get_float("epsilon", 1e-5f);
  const double momentum = call.attrs.get_float("momentum", 0.9f);
  const bool unbiased = call.attrs.get_int("_unbiased_running_var", 1) != 0;
  if (g.c == 0) return Status::ok();
  if (g.c > 65535)
    return unsupported("BatchNormalization (cuda): " + std::to_string(g.c) + " channels (at most 65535)");
  ScratchBuffer coef, scratch;
  RETURN_IF_ERROR(coef.allocate(2 * static_cast<size_t>(g.c) * sizeof(T), call.stream));
  RETURN_IF_ERROR(scratch.allocate(bn_scratch_doubles(g) * sizeof(double), call.stream));
  PT_CUDA_CHECK(launch_batch_norm<T>(g, call.outputs[0].as<T>(), call.inputs[0].as<T>(), call.inputs[1].as<T>(),
                                     call.inputs[2].as<T>(), call.inputs[3].as<T>(), call.inputs[4].as<T>(),
                                     optional_out<T>(call, 1), optional_out<T>(call, 2), optional_out<T>(call, 3),
                                     optional_out<T>(call, 4), step, training, eps, momentum, unbiased, relu,
                                     coef.as<T>(), scratch.as<double>(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status batch_normalization_grad(const KernelCall& call) {
  kernels::BatchNormGeometry bg;
  RETURN_IF_ERROR(kernels::check_batch_norm_grad(call, &bg));
  const BnGeom g = bn_geom(bg);
  const bool training = call.attrs.get_int("_training", 0) != 0;
  const double eps = call.attrs.get_float("epsilon", 1e-5f);
  T* dx = optional_out<T>(call, 0);
  T* dscale = optional_out<T>(call, 1);
  T* dbias = optional_out<T>(call, 2);
  const T* rm = nullptr;
  const T* rv = nullptr;
  if (!training) {  // the running mean and variance (checked present)
    rm = call.inputs[3].as<T>();
    rv = call.inputs[4].as<T>();
  }
  if (g.c == 0) return Status::ok();
  if (g.c > 65535)
    return unsupported("BatchNormalizationGrad (cuda): " + std::to_string(g.c) + " channels (at most 65535)");
  ScratchBuffer coef, scratch;
  RETURN_IF_ERROR(coef.allocate(4 * static_cast<size_t>(g.c) * sizeof(T), call.stream));
  RETURN_IF_ERROR(scratch.allocate(bn_scratch_doubles(g) * sizeof(double), call.stream));
  PT_CUDA_CHECK(launch_batch_norm_grad<T>(g, dx, dscale, dbias, call.inputs[0].as<T>(), call.inputs[1].as<T>(),
                                          call.inputs[2].as<T>(), rm, rv, training, eps, coef.as<T>(),
                                          scratch.as<double>(), stream_of(call)));
  return Status::ok();
}

// ---- Dropout ------------------------------------------------------------------------------------

template <typename T>
Status dropout(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Dropout", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  bool* mask = call.outputs.size() > 1 && call.outputs[1].data ? call.outputs[1].as<bool>() : nullptr;
  const int64_t* step =
      has_input(call, 1) && call.inputs[1].dtype == DType::kInt64 ? call.inputs[1].as<int64_t>() : nullptr;
  const float ratio = call.attrs.get_float("ratio", 0.5f);
  const bool training = call.attrs.get_int("_training", 0) != 0;
  if (training && ratio >= 1.0f && step) {
    // The CPU refuses only an active pass (step >= 0); knowing that needs the step on the host.
    // A ratio of 1 in training is a model error, so this path is never a hot one.
    int64_t st = -1;
    PT_CUDA_CHECK(cudaMemcpyAsync(&st, step, sizeof st, cudaMemcpyDeviceToHost, stream_of(call)));
    PT_CUDA_CHECK(cudaStreamSynchronize(stream_of(call)));
    if (st >= 0) RETURN_IF_ERROR(kernels::check_dropout_ratio(ratio));
  }
  const float run_ratio = ratio >= 1.0f ? 0.0f : ratio;  // ratio >= 1 reaches here only when inactive
  PT_CUDA_CHECK(launch_dropout<T>(y.as<T>(), mask, x.as<T>(), step, x.size(), run_ratio, training,
                                  static_cast<uint64_t>(call.attrs.get_int("seed", 0)), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status dropout_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "DropoutGrad", 2, 1));
  PT_CUDA_CHECK(launch_dropout_grad<T>(call.outputs[0].as<T>(), call.inputs[0].as<T>(), call.inputs[1].as<bool>(),
                                       call.inputs[0].size(), call.attrs.get_float("ratio", 0.5f), stream_of(call)));
  return Status::ok();
}

// ---- losses -------------------------------------------------------------------------------------

using kernels::LossReduction;
using kernels::SceGeometry;

template <typename T>
Status softmax_cross_entropy_loss(const KernelCall& call) {
  const char* op = "SoftmaxCrossEntropyLoss";
  LossReduction red;
  SceGeometry s;
  RETURN_IF_ERROR(kernels::check_sce(call, op, 0, &red, &s));
  const TensorView& scores = call.inputs[0];
  const TensorView& labels = call.inputs[1];
  const T* weights = kernels::optional_input<T>(call, 2);
  RETURN_IF_ERROR(kernels::check_sce_loss_outputs(call, red));
  const TensorView& loss = call.outputs[0];
  T* lp = nullptr;
  ScratchBuffer scratch;
  if (call.outputs.size() > 1 && call.outputs[1].data) {
    lp = call.outputs[1].as<T>();
  } else {
    RETURN_IF_ERROR(scratch.allocate(scores.bytes(), call.stream));
    lp = scratch.as<T>();
  }
  const cudaStream_t stream = stream_of(call);
  RETURN_IF_ERROR(softmax_rows<T>(stream, op, true, s.n, s.c, s.d, scores.as<T>(), lp));
  PT_CUDA_CHECK(launch_sce_loss<T>(loss.as<T>(), lp, labels.data, labels.dtype == DType::kInt64, weights, s.has_ignore,
                                   s.ignore, s.n, s.c, s.d, static_cast<int>(red), deferred_error_word(), stream));
  return Status::ok();
}

template <typename T>
Status softmax_cross_entropy_loss_grad(const KernelCall& call) {
  const char* op = "SoftmaxCrossEntropyLossGrad";
  LossReduction red;
  SceGeometry s;
  RETURN_IF_ERROR(kernels::check_sce(call, op, 1, &red, &s));
  const TensorView& dloss = call.inputs[0];
  const TensorView& logp = call.inputs[1];
  const TensorView& labels = call.inputs[2];
  const T* weights = kernels::optional_input<T>(call, 3);
  RETURN_IF_ERROR(kernels::check_sce_loss_grad_outputs(call, red));
  const TensorView& ds = call.outputs[0];
  ScratchBuffer scale;
  RETURN_IF_ERROR(scale.allocate(sizeof(double), call.stream));
  PT_CUDA_CHECK(launch_sce_loss_grad<T>(ds.as<T>(), scale.as<double>(), dloss.as<T>(), logp.as<T>(), labels.data,
                                        labels.dtype == DType::kInt64, weights, s.has_ignore, s.ignore, s.n, s.c, s.d,
                                        static_cast<int>(red), deferred_error_word(), stream_of(call)));
  return Status::ok();
}

template <typename T>
Status mse_loss(const KernelCall& call) {
  LossReduction red;
  RETURN_IF_ERROR(kernels::check_mse_loss(call, &red));
  const TensorView& pred = call.inputs[0];
  PT_CUDA_CHECK(launch_mse_loss<T>(call.outputs[0].as<T>(), pred.as<T>(), call.inputs[1].as<T>(), pred.size(),
                                   red == LossReduction::kMean, stream_of(call)));
  return Status::ok();
}

template <typename T>
Status mse_loss_grad(const KernelCall& call) {
  LossReduction red;
  RETURN_IF_ERROR(kernels::check_mse_loss_grad(call, &red));
  const TensorView& pred = call.inputs[1];
  PT_CUDA_CHECK(launch_mse_loss_grad<T>(call.outputs[0].as<T>(), call.inputs[0].as<T>(), pred.as<T>(),
                                        call.inputs[2].as<T>(), pred.size(), red == LossReduction::kMean,
                                        stream_of(call)));
  return Status::ok();
}

// ---- optimizer ----------------------------------------------------------------------------------

namespace {

// Runs consecutive calls in groups of up to kMaxGroupTensors tensors. A call joins the group of
// `first` when it passes its check, has first's stream and joins(first, call, group) says it shares
// the group's learning rate and attributes; add(&group, call) puts its tensors in, launch(group,
// first) runs the group.
// A call that fails its check ends the group: the group before it runs first, and the next round
// reports the failure, as one call per tensor in order would. G: a launch.h group.
template <typename G, typename Check, typename Joins, typename Add, typename Launch>
Status for_each_group(std::span<const KernelCall> calls, Check check, Joins joins, Add add, Launch launch) {
  size_t i = 0;
  while (i < calls.size()) {
    RETURN_IF_ERROR(check(calls[i]));
    const KernelCall& first = calls[i];
    G group;
    for (int count = 0; i < calls.size() && count < kMaxGroupTensors; ++i, ++count) {
      const KernelCall& c = calls[i];
      if (count > 0 && (!check(c).is_ok() || c.stream != first.stream || !joins(first, c, group))) break;
      add(&group, c);
    }
    RETURN_IF_ERROR(launch(group, first));
  }
  return Status::ok();
}

// Whether the float attributes `names` of a and b are equal (with the defaults the kernels use).
bool same_floats(const KernelCall& a, const KernelCall& b, std::initializer_list<std::pair<const char*, float>> names) {
  for (const auto& [name, dflt] : names)
    if (a.attrs.get_float(name, dflt) != b.attrs.get_float(name, dflt)) return false;
  return true;
}

// Whether `step` is already one of the group's first `count` step counts: each call increments its
// own, so a second call on the same count would see it incremented (it starts a group of its own).
bool has_step(int64_t* const* steps, int count, const void* step) {
  for (int t = 0; t < count; ++t)
    if (steps[t] == step) return true;
  return false;
}

template <typename T>
void add_sgd_momentum(SgdGroup<T>* g, const KernelCall& c) {
  const int k = g->count++;
  g->w[k] = c.inputs[0].as<T>();
  g->g[k] = c.inputs[1].as<T>();
  g->v[k] = c.inputs[2].as<T>();
  g->begin[k + 1] = g->begin[k] + c.inputs[0].size();
}

// The SGDMomentum group of `first` onwards: its attributes, rounded to float first, as the CPU's
// static_cast<T>(get_float(...)).
template <typename T>
Status launch_sgd_momentum(const SgdGroup<T>& group, const KernelCall& first) {
  const double gamma = static_cast<T>(first.attrs.get_float("momentum", 0.9f));
  const double wd = static_cast<T>(first.attrs.get_float("weight_decay", 0.0f));
  PT_CUDA_CHECK(launch_sgd_spectrain<T>(group, first.inputs[3].as<T>(), 0.0, gamma, wd, 0.0, stream_of(first)));
  return Status::ok();
}

Status check_sgd_torch(const KernelCall& c) {
  bool nesterov;
  return kernels::check_sgd(c, &nesterov);
}

template <typename T>
void add_sgd_torch(SgdTorchGroup<T>* g, const KernelCall& c) {
  const int k = g->layout.count;
  g->w[k] = c.inputs[0].as<T>();
  g->g[k] = c.inputs[1].as<T>();
  g->buf[k] = c.inputs[2].as<T>();
  g->step[k] = c.inputs[4].as<int64_t>();
  g->d[k] = c.attrs.get_int("nesterov", 0) != 0 ? c.inputs[5].as<T>() : nullptr;
  g->layout.add(c.inputs[0].size());
}

template <typename T>
Status launch_sgd_torch_group(const SgdTorchGroup<T>& group, const KernelCall& first) {
  const double mom = static_cast<T>(first.attrs.get_float("momentum", 0.0f));
  const double damp = first.attrs.get_float("dampening", 0.0f);
  const double wd = static_cast<T>(first.attrs.get_float("weight_decay", 0.0f));
  PT_CUDA_CHECK(launch_sgd_torch<T>(group, first.inputs[3].as<T>(), mom, damp, wd, stream_of(first)));
  return Status::ok();
}

template <typename T>
void add_adam(AdamGroup<T>* g, const KernelCall& c) {
  const int k = g->layout.count;
  g->w[k] = c.inputs[0].as<T>();
  g->g[k] = c.inputs[1].as<T>();
  g->m[k] = c.inputs[2].as<T>();
  g->v[k] = c.inputs[3].as<T>();
  g->step[k] = c.inputs[5].as<int64_t>();
  g->layout.add(c.inputs[0].size());
}

template <typename T>
Status launch_adam_group(const AdamGroup<T>& group, const KernelCall& first) {
  const AttrMap& a = first.attrs;
  PT_CUDA_CHECK(launch_adam<T>(group, first.inputs[4].as<T>(), a.get_float("beta1", 0.9f), a.get_float("beta2", 0.999f),
                               a.get_float("epsilon", 1e-8f), a.get_float("weight_decay", 0.0f),
                               a.get_int("decoupled", 0) != 0, stream_of(first)));
  return Status::ok();
}

}  // namespace

template <typename T>
Status sgd_momentum(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_sgd_momentum(call));
  SgdGroup<T> group;
  add_sgd_momentum<T>(&group, call);
  return launch_sgd_momentum<T>(group, call);
}

template <typename T>
Status sgd_momentum_group(std::span<const KernelCall> calls) {
  auto joins = [](const KernelCall& first, const KernelCall& c, const SgdGroup<T>&) {
    return c.inputs[3].data == first.inputs[3].data &&
           same_floats(first, c, {{"momentum", 0.9f}, {"weight_decay", 0.0f}});
  };
  return for_each_group<SgdGroup<T>>(calls, &kernels::check_sgd_momentum, joins, &add_sgd_momentum<T>,
                                     &launch_sgd_momentum<T>);
}

template <typename T>
Status sgd(const KernelCall& call) {
  RETURN_IF_ERROR(check_sgd_torch(call));
  SgdTorchGroup<T> group;
  add_sgd_torch<T>(&group, call);
  return launch_sgd_torch_group<T>(group, call);
}

template <typename T>
Status sgd_group(std::span<const KernelCall> calls) {
  auto joins = [](const KernelCall& first, const KernelCall& c, const SgdTorchGroup<T>& g) {
    return c.inputs[3].data == first.inputs[3].data &&
           same_floats(first, c, {{"momentum", 0.0f}, {"dampening", 0.0f}, {"weight_decay", 0.0f}}) &&
           c.attrs.get_int("nesterov", 0) == first.attrs.get_int("nesterov", 0) &&
           !has_step(g.step, g.layout.count, c.inputs[4].data);
  };
  return for_each_group<SgdTorchGroup<T>>(calls, &check_sgd_torch, joins, &add_sgd_torch<T>,
                                          &launch_sgd_torch_group<T>);
}

template <typename T>
Status adam(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_adam(call));
  AdamGroup<T> group;
  add_adam<T>(&group, call);
  return launch_adam_group<T>(group, call);
}

template <typename T>
Status adam_group(std::span<const KernelCall> calls) {
  auto joins = [](const KernelCall& first, const KernelCall& c, const AdamGroup<T>& g) {
    return c.inputs[4].data == first.inputs[4].data &&
           same_floats(first, c, {{"beta1", 0.9f}, {"beta2", 0.999f}, {"epsilon", 1e-8f}, {"weight_decay", 0.0f}}) &&
           c.attrs.get_int("decoupled", 0) == first.attrs.get_int("decoupled", 0) &&
           !has_step(g.step, g.layout.count, c.inputs[5].data);
  };
  return for_each_group<AdamGroup<T>>(calls, &kernels::check_adam, joins, &add_adam<T>, &launch_adam_group<T>);
}

#define PT_GROUP(name)                                             \
  template Status name<float>(std::span<const KernelCall>);        \
  template Status name<double>(std::span<const KernelCall>);
PT_GROUP(sgd_momentum_group) PT_GROUP(sgd_group) PT_GROUP(adam_group)
#undef PT_GROUP

template <typename T>
Status adam_predict(void* out, const void* w, const void* m, const void* v, const void* step, int64_t n,
                    const void* lr_device, double s, double beta1, double beta2, double eps, double decoupled_wd,
                    void* stream) {
  PT_CUDA_CHECK(launch_adam_predict<T>(static_cast<T*>(out), static_cast<const T*>(w), static_cast<const T*>(m),
                                       static_cast<const T*>(v), static_cast<const int64_t*>(step),
                                       static_cast<const T*>(lr_device), n, s, beta1, beta2, eps, decoupled_wd,
                                       static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

template <typename T>
Status sgd_spectrain_step(std::span<const SgdTensor> tensors, const void* lr_device, double gamma, double weight_decay,
                          double s_predict, void* stream) {
  SgdGroup<T> group;
  for (size_t first = 0; first < tensors.size(); first += kMaxGroupTensors) {
    group = SgdGroup<T>{};
    const size_t end = std::min(tensors.size(), first + kMaxGroupTensors);
    for (size_t i = first; i < end; ++i) {
      const SgdTensor& t = tensors[i];
      const int k = group.count++;
      group.w[k] = static_cast<T*>(t.w);
      group.g[k] = static_cast<const T*>(t.g);
      group.v[k] = static_cast<T*>(t.v);
      group.pred[k] = static_cast<T*>(t.pred);
      group.begin[k + 1] = group.begin[k] + t.n;
    }
    PT_CUDA_CHECK(launch_sgd_spectrain<T>(group, static_cast<const T*>(lr_device), 0.0, gamma, weight_decay,
                                          s_predict, static_cast<cudaStream_t>(stream)));
  }
  return Status::ok();
}

template <typename T>
Status spectrain_predict(void* out, const void* w, const void* v, int64_t n, const void* lr_device, double s,
                         void* stream) {
  PT_CUDA_CHECK(launch_spectrain_predict<T>(static_cast<T*>(out), static_cast<const T*>(w), static_cast<const T*>(v),
                                            static_cast<const T*>(lr_device), 0.0, s, n,
                                            static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

#define PT_F(name)                                  \
  template Status name<float>(const KernelCall&);   \
  template Status name<double>(const KernelCall&);
PT_F(max_pool) PT_F(max_pool_grad) PT_F(average_pool) PT_F(average_pool_grad) PT_F(batch_normalization)
PT_F(batch_normalization_grad) PT_F(dropout) PT_F(dropout_grad) PT_F(softmax_cross_entropy_loss)
PT_F(softmax_cross_entropy_loss_grad) PT_F(mse_loss) PT_F(mse_loss_grad) PT_F(sgd_momentum) PT_F(sgd) PT_F(adam)
#undef PT_F
template Status sgd_spectrain_step<float>(std::span<const SgdTensor>, const void*, double, double, double, void*);
template Status sgd_spectrain_step<double>(std::span<const SgdTensor>, const void*, double, double, double, void*);
template Status adam_predict<float>(void*, const void*, const void*, const void*, const void*, int64_t, const void*,
                                    double, double, double, double, double, void*);
template Status adam_predict<double>(void*, const void*, const void*, const void*, const void*, int64_t, const void*,
                                     double, double, double, double, double, void*);
template Status spectrain_predict<float>(void*, const void*, const void*, int64_t, const void*, double, void*);
template Status spectrain_predict<double>(void*, const void*, const void*, int64_t, const void*, double, void*);

}  // namespace pt::cuda
