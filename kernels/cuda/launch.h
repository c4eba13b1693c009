// The launchers of the custom CUDA kernels (kernels/cuda/*.cu), as the host-side wrappers
// (kernels/cuda/*_ops.cpp) call them: plain structs and pointers, no framework types, so that the
// .cu files include only CUDA and this header and nvcc stays fast. Each launcher queues its
// kernels on `stream` without synchronising and returns cudaGetLastError() of its last launch
// (the caller wraps it in PT_CUDA_CHECK, which names its own file:line). T is float or double
// unless said otherwise; every size is int64_t, every loop grid-stride.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/checks/resize_map.h"
#include "kernels/unary_ops.h"

namespace pt::cuda {

// ---- strided index maps ---------------------------------------------------------------------
constexpr int kMaxRank = 8;

// A row-major walk over `sizes` (outermost first) where operand k steps by strides[k][d]
// elements along dim d. The host merges and drops dims first (rank <= kMaxRank).
template <int K>
struct Strided {
  int rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[K][kMaxRank] = {};
};

// ---- the deferred error word (kernels/cuda/deferred_error.h) --------------------------------
// What a kernel found wrong with its input, recorded on the device for the host to report at its
// next synchronisation: code 0 none (-1 while a kernel writes it), op which kernel, and the value,
// the limit it broke and its position.
constexpr int kDeferredIndexOutOfRange = 1, kDeferredLabelOutOfRange = 2;
constexpr int kDeferredOpGather = 1, kDeferredOpGatherGrad = 2, kDeferredOpSceLoss = 3, kDeferredOpSceLossGrad = 4;
struct DeferredError {
  int code = 0;
  int op = 0;
  long long value = 0, limit = 0, position = 0;
};

// ---- element-wise unary ops (elementwise.cu), generated from kernels/unary_ops.h ------------
enum class UnaryOp : int {
#define PT_UNARY_ENUM(Name, ...) k##Name,
  PT_UNARY_OPS(PT_UNARY_ENUM)
#undef PT_UNARY_ENUM
};
// y = f(x) with the op's parameters (p.lo / p.hi: Clip's bound inputs on the device, or null).
template <typename T>
cudaError_t launch_unary(UnaryOp op, unary::Args<T> p, T* y, const T* x, int64_t n, cudaStream_t stream);
// dX = g(dY, Z), Z the forward input or output as the op's list line says; an op without a
// dedicated backward op gives cudaErrorInvalidValue.
template <typename T>
cudaError_t launch_unary_grad(UnaryOp op, unary::Args<T> p, T* dx, const T* dy, const T* z, int64_t n,
                              cudaStream_t stream);

// ---- broadcasting binary ops (binary.cu); T also int64_t for kAdd, kSub, kMul ---------------
enum class BinaryOp : int { kAdd, kSub, kMul, kDiv, kPRelu };
// y[i] = f(a[offset_a(i)], b[offset_b(i)]) over the walk `s` (operand 0: a, operand 1: b); y is
// contiguous in walk order.
template <typename T>
cudaError_t launch_binary(BinaryOp op, const Strided<2>& s, T* y, const T* a, const T* b, int64_t n,
                          cudaStream_t stream);
// y[i] = scale * x[offset(i)]: Transpose, Expand, broadcasting copies (any 1, 2, 4 or 8-byte
// element: T is float, double, int64_t, int32_t, uint8_t; scale is ignored for integers).
template <typename T>
cudaError_t launch_gather_copy(const Strided<1>& s, T* y, const T* x, int64_t n, double scale, cudaStream_t stream);
// y[i] += x[offset(i)] (Sum and Mean over several inputs).
template <typename T>
cudaError_t launch_accumulate(const Strided<1>& s, T* y, const T* x, int64_t n, cudaStream_t stream);
// y[i] *= scale.
template <typename T>
cudaError_t launch_scale(T* y, int64_t n, double scale, cudaStream_t stream);
// PReluGrad: dx = x < 0 ? dy * slope[offset(i)] : dy; dslope = x < 0 ? dy * x : 0.
template <typename T>
cudaError_t launch_prelu_grad(const Strided<1>& slope, T* dx, T* dslope, const T* dy, const T* x,
                              const T* s, int64_t n, cudaStream_t stream);

// ---- data movement and layer normalisation (tensor.cu) ---------------------------------------
// y[offset(i)] = x[i] (add: +=), x contiguous in walk order: Concat's parts, SliceGrad. T as
// launch_gather_copy's.
template <typename T>
cudaError_t launch_scatter_copy(const Strided<1>& s, T* y, const T* x, int64_t n, bool add, cudaStream_t stream);
// Gather by rows: y (outer, ni, inner) = d (outer, len, inner) at rows idx (int64 or int32, negative
// from the end); a row out of range gives zeros and a record in err (may be null). T as
// launch_gather_copy's.
template <typename T>
cudaError_t launch_gather_rows(T* y, const T* d, const void* idx, bool idx_i64, int64_t outer, int64_t len, int64_t ni,
                               int64_t inner, DeferredError* err, cudaStream_t stream);
// GatherGrad: dd (outer, len, inner) = 0, then += dy (outer, ni, inner) at rows idx, repeated rows
// summed in index order (one thread per column: deterministic, no atomics).
template <typename T>
cudaError_t launch_gather_rows_grad(T* dd, const T* dy, const void* idx, bool idx_i64, int64_t outer, int64_t len,
                                    int64_t ni, int64_t inner, DeferredError* err, cudaStream_t stream);
// LayerNormalization of x (rows, cols) over each row: statistics in double (two passes), y =
// (x - mean) * inv_std * scale + bias (bias may be null); mean and inv_std (rows) may be null.
template <typename T>
cudaError_t launch_layer_norm(T* y, T* mean, T* inv_std, const T* x, const T* scale, const T* bias, int64_t rows,
                              int64_t cols, double eps, cudaStream_t stream);
// Its gradient: dx (may be null) per row, then dscale and dbias (each may be null) as column sums
// in row order, in double. stats: scratch of 2 * rows doubles.
template <typename T>
cudaError_t launch_layer_norm_grad(T* dx, T* dscale, T* dbias, const T* dy, const T* x, const T* scale, int64_t rows,
                                   int64_t cols, double eps, double* stats, cudaStream_t stream);

// Comparisons (Equal, Less, Greater) under broadcasting into bool (stored as bytes): y[i] =
// a[offset_a(i)] op b[offset_b(i)]. T: float, double, int64_t, int32_t, uint8_t (bool).
enum class CompareOp : int { kEqual, kLess, kGreater };
template <typename T>
cudaError_t launch_compare(CompareOp op, const Strided<2>& s, uint8_t* y, const T* a, const T* b, int64_t n,
                           cudaStream_t stream);
// Not: y = !x on bytes.
cudaError_t launch_not(uint8_t* y, const uint8_t* x, int64_t n, cudaStream_t stream);
// Where: y[i] = c[offset_c(i)] ? a[offset_a(i)] : b[offset_b(i)]. T as launch_compare's.
template <typename T>
cudaError_t launch_where(const Strided<3>& s, T* y, const uint8_t* c, const T* a, const T* b, int64_t n,
                         cudaStream_t stream);
// Cast between the element types the CPU's Cast has: numeric conversions as static_cast (to bool:
// x != 0), float32 -> bfloat16 rounded to nearest, ties to even (NaN kept), bfloat16 -> float32 exact.
enum class CastType : int { kF32, kF64, kI64, kI32, kI8, kU8, kBool, kBf16 };
// cudaErrorInvalidValue for a pair the CPU's Cast does not have (bfloat16 from anything but float32,
// bfloat16 to anything but float32).
cudaError_t launch_cast(CastType from, CastType to, void* y, const void* x, int64_t n, cudaStream_t stream);
// ReluGrad under --precision bf16: dx = dy where the bfloat16 copy of Y is positive, else 0.
cudaError_t launch_relu_grad_bf16(float* dx, const float* dy, const uint16_t* y, int64_t n, cudaStream_t stream);

// ---- GroupNormalization / InstanceNormalization (group_norm.cu) ---------------------------------
// X (N, G, C/G, spatial) as N*G blocks of `block` elements; scale/bias per group (per_group) or per
// channel. Statistics in double per block (two passes), as kernels/cpu/group_norm.cpp.
struct GroupNormGeom {
  int64_t n = 0, g = 0, spatial = 1, channels_per_group = 0, block = 0;
  bool per_group = false;
  double eps = 1e-5;
};
template <typename T>
cudaError_t launch_group_norm(const GroupNormGeom& g, T* y, const T* x, const T* scale, const T* bias,
                              cudaStream_t stream);
// dx (may be null) per block; dscale, dbias (each may be null) per parameter, summed over the
// batch in the CPU's order (batch, then channel, then position). stats: scratch of 2 * N * G doubles.
template <typename T>
cudaError_t launch_group_norm_grad(const GroupNormGeom& g, T* dx, T* dscale, T* dbias, const T* dy, const T* x,
                                   const T* scale, double* stats, cudaStream_t stream);

// ---- Pad (pad.cu) ------------------------------------------------------------------------------
enum class PadMode : int { kConstant, kEdge, kReflect };
// A pad of `in` to `out` (rank <= kMaxRank) with `begin` elements before each dim.
struct PadGeom {
  int rank = 0;
  PadMode mode = PadMode::kConstant;
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, begin[kMaxRank] = {}, in_stride[kMaxRank] = {};
};
// y (out) = x (in) padded; value where a constant pad reads outside. T: float, double, int64_t, int32_t.
template <typename T>
cudaError_t launch_pad(const PadGeom& g, T* y, const T* x, double value, int64_t n, cudaStream_t stream);
// PadGrad of a constant pad: dx (in, n_dx elements) = 0, then each dy (out) element that read
// an input element written back to it (one each: no sums). T: float, double.
template <typename T>
cudaError_t launch_pad_grad_constant(const PadGeom& g, T* dx, const T* dy, int64_t n_dx, int64_t n_dy,
                                     cudaStream_t stream);

// ---- Resize (resize.cu), kernels/checks/resize_map.h's map ------------------------------------
// A resize of `in` to `out` (rank <= kMaxRank; neighbouring dims the map leaves alone merged).
struct ResizeGeom {
  int rank = 0;
  bool linear = false;
  resize_map::Coord coord = resize_map::Coord::kHalfPixel;
  resize_map::Nearest nearest = resize_map::Nearest::kRoundPreferFloor;
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, in_stride[kMaxRank] = {}, out_stride[kMaxRank] = {};
  float scale[kMaxRank] = {};
};
// y (out, n_y elements) = x (in) resized: each output element sums its sources in the CPU's order,
// in double.
template <typename T>
cudaError_t launch_resize(const ResizeGeom& g, T* y, const T* x, int64_t n_y, cudaStream_t stream);
// ResizeGrad: dx (in, n_dx elements) = the sum, in output order, of each dy (out) element that read
// it times its weight: one thread per dX element walking the outputs that read it, found by binary
// search, so the map must be monotone in each dim (the caller checks; resize_ops.cpp).
template <typename T>
cudaError_t launch_resize_grad(const ResizeGeom& g, T* dx, const T* dy, int64_t n_dx, cudaStream_t stream);

// ---- reductions (reduce.cu) -----------------------------------------------------------------
enum class ReduceOp : int { kSum, kMean, kMax };
// out[o] = reduce over r of x[kept_offset(o) + reduced_offset(r)], accumulated in double (max in
// T; NaN propagates as the CPU's `v > best` scan does not: see reduce.cu). `kept` walks the
// outputs (n_out of them, out contiguous in that order), `reduced` the n_red elements of each.
// scale multiplies the result (1 / n for means).
// Partitions per output the launcher uses (1: none); with P > 1 it needs scratch of n_out * P doubles.
int64_t reduce_partitions(int64_t n_out, int64_t n_red);
template <typename T>
cudaError_t launch_reduce(ReduceOp op, const Strided<1>& kept, const Strided<1>& reduced, T* out, const T* x,
                          int64_t n_out, int64_t n_red, double scale, double* scratch, cudaStream_t stream);

// ---- softmax cross-entropy and MSE (loss.cu) ------------------------------------------------
// Per sample i = (n, d) of log_prob [N, C, D]: loss_i = -w_i * logp[n, label_i, d] where
// w_i = (weights ? weights[label_i] : 1), 0 for an ignored label (== ignore when has_ignore).
// A label outside [0, C) that is not ignored counts as ignored and is recorded in err (may be
// null): the host reports it at its next synchronisation. reduction: 0 mean, 1 sum, 2 none (loss
// has N*D entries).
template <typename T>
cudaError_t launch_sce_loss(T* loss, const T* logp, const void* labels, bool labels_i64, const T* weights,
                            bool has_ignore, int64_t ignore, int64_t n, int64_t c, int64_t d, int reduction,
                            DeferredError* err, cudaStream_t stream);
// scale: one device double of scratch (the factor of reductions mean and sum).
template <typename T>
cudaError_t launch_sce_loss_grad(T* dscores, double* scale, const T* dloss, const T* logp, const void* labels,
                                 bool labels_i64, const T* weights, bool has_ignore, int64_t ignore, int64_t n,
                                 int64_t c, int64_t d, int reduction, DeferredError* err, cudaStream_t stream);
// MSE: loss = sum((p - t)^2) (/ n when mean); grad dp = 2 * dloss / (mean ? n : 1) * (p - t).
template <typename T>
cudaError_t launch_mse_loss(T* loss, const T* p, const T* t, int64_t n, bool mean, cudaStream_t stream);
template <typename T>
cudaError_t launch_mse_loss_grad(T* dp, const T* dloss, const T* p, const T* t, int64_t n, bool mean,
                                 cudaStream_t stream);

// ---- dropout (dropout.cu), the masks of kernels/dropout_rng.h --------------------------------
// step: device int64 scalar or null; active iff training && step >= 0 && ratio > 0 (read on the
// device: no host round trip). mask may be null.
template <typename T>
cudaError_t launch_dropout(T* y, bool* mask, const T* x, const int64_t* step, int64_t n, float ratio,
                           bool training, uint64_t seed, cudaStream_t stream);
template <typename T>
cudaError_t launch_dropout_grad(T* dx, const T* dy, const bool* mask, int64_t n, float ratio, cudaStream_t stream);

// ---- optimizer (optimizer.cu) -----------------------------------------------------------------
// One fused launch for a parameter group: for every tensor t and element i,
//   g = G + wd*W; V = gamma*V + (1 - gamma)*g; W -= lr*V;  and, when pred[t] is set,
//   pred = W - s*lr*V  (SpecTrain's prediction for the next pass, from the updated W and V).
// lr is read from the device (lr_dev, a T scalar) when set, else lr_host is used.
constexpr int kMaxGroupTensors = 64;
template <typename T>
struct SgdGroup {
  int count = 0;
  T* w[kMaxGroupTensors] = {};
  const T* g[kMaxGroupTensors] = {};
  T* v[kMaxGroupTensors] = {};
  T* pred[kMaxGroupTensors] = {};
  int64_t begin[kMaxGroupTensors + 1] = {};  // prefix sums of the tensors' sizes
};
template <typename T>
cudaError_t launch_sgd_spectrain(const SgdGroup<T>& group, const T* lr_dev, double lr_host, double gamma,
                                 double wd, double s_pred, cudaStream_t stream);
// The tensors of a multi-tensor launch of torch's SGD or Adam, walked in chunks of kGroupChunk
// elements that never span two tensors (a block takes chunk b, b + gridDim.x, ...), so the values
// one tensor's elements share (its step count, Adam's bias corrections) are read once per chunk.
// add() appends a tensor of n elements: begin holds the prefix sums of the sizes, chunk those of the
// chunk counts.
constexpr int64_t kGroupChunk = 2048;
struct GroupLayout {
  int count = 0;
  int64_t begin[kMaxGroupTensors + 1] = {};
  int64_t chunk[kMaxGroupTensors + 1] = {};
  void add(int64_t n) {
    begin[count + 1] = begin[count] + n;
    chunk[count + 1] = chunk[count] + (n + kGroupChunk - 1) / kGroupChunk;
    ++count;
  }
};
// torch.optim.SGD (kernels/cpu/optimizer.cpp's sgd) over a group: W, G, the buffer B, D (nesterov's
// direction; null without nesterov) and step, the device int64 count of the tensor's updates done
// (0: B = d_p), incremented after the step. Each tensor has its own step (no two alike).
template <typename T>
struct SgdTorchGroup {
  GroupLayout layout;
  T* w[kMaxGroupTensors] = {};
  const T* g[kMaxGroupTensors] = {};
  T* buf[kMaxGroupTensors] = {};
  T* d[kMaxGroupTensors] = {};
  int64_t* step[kMaxGroupTensors] = {};
};
template <typename T>
cudaError_t launch_sgd_torch(const SgdTorchGroup<T>& group, const T* lr_dev, double momentum, double dampening,
                             double wd, cudaStream_t stream);
// torch.optim.Adam / AdamW (kernels/cpu/optimizer.cpp's adam) over a group: W, G, the moments M, V
// and step as SgdTorchGroup's; the bias corrections are computed on the device from each tensor's
// step and lr, in double, once per chunk.
template <typename T>
struct AdamGroup {
  GroupLayout layout;
  T* w[kMaxGroupTensors] = {};
  const T* g[kMaxGroupTensors] = {};
  T* m[kMaxGroupTensors] = {};
  T* v[kMaxGroupTensors] = {};
  int64_t* step[kMaxGroupTensors] = {};
};
template <typename T>
cudaError_t launch_adam(const AdamGroup<T>& group, const T* lr_dev, double beta1, double beta2, double eps, double wd,
                        bool decoupled, cudaStream_t stream);
// Device::predict_adam: out = w - s*(step_size(t)*m/(sqrt(v)/bc2_sqrt(t) + eps) + lr*decoupled_wd*w).
template <typename T>
cudaError_t launch_adam_predict(T* out, const T* w, const T* m, const T* v, const int64_t* step, const T* lr_dev,
                                int64_t n, double s, double beta1, double beta2, double eps, double decoupled_wd,
                                cudaStream_t stream);
// SpecTrain prediction alone: out = w - s * lr * v (lr from the device when lr_dev is set).
template <typename T>
cudaError_t launch_spectrain_predict(T* out, const T* w, const T* v, const T* lr_dev, double lr_host, double s,
                                     int64_t n, cudaStream_t stream);

// ---- pooling (pool.cu) ------------------------------------------------------------------------
// Spatial dims right-aligned into 3 slots as kernels/window.h's Window.
struct PoolGeom {
  int64_t planes = 0;  // N * C
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
};
template <typename T>
cudaError_t launch_max_pool(const PoolGeom& g, T* y, int64_t* indices, bool col_major, const T* x,
                            cudaStream_t stream);
// dx must be zeroed first (the launcher does it); windows scatter with atomicAdd.
template <typename T>
cudaError_t launch_max_pool_grad(const PoolGeom& g, T* dx, const T* dy, const T* x, cudaStream_t stream);
template <typename T>
cudaError_t launch_avg_pool(const PoolGeom& g, T* y, const T* x, bool include_pad, cudaStream_t stream);
template <typename T>
cudaError_t launch_avg_pool_grad(const PoolGeom& g, T* dx, const T* dy, bool include_pad, cudaStream_t stream);
// GlobalAveragePoolGrad: dx[p, i] = dy[p] / size.
template <typename T>
cudaError_t launch_global_avg_pool_grad(T* dx, const T* dy, int64_t planes, int64_t size, cudaStream_t stream);

// ---- batch normalisation (batchnorm.cu) -------------------------------------------------------
struct BnGeom {
  int64_t n = 0, c = 0, s = 1;
};
// Partitions per channel of the statistics sums, and the scratch (in doubles) both launchers need.
int64_t bn_partitions(const BnGeom& g);
size_t bn_scratch_doubles(const BnGeom& g);
// Training (batch statistics; running mean/var updated in place, saved mean / biased var written
// when given) unless `training` is false or *step < 0 (an evaluation pass, read on the device).
// out_mean / out_var (outputs 1, 2) receive the running statistics after the update. coef is
// scratch of 2*C T values, scratch of bn_scratch_doubles(g) doubles. C at most 65535.
template <typename T>
cudaError_t launch_batch_norm(const BnGeom& g, T* y, const T* x, const T* scale, const T* bias, T* run_mean,
                              T* run_var, T* out_mean, T* out_var, T* saved_mean, T* saved_var,
                              const int64_t* step, bool training, double eps, double momentum, bool unbiased,
                              bool relu, T* coef, double* scratch, cudaStream_t stream);
// dx, dscale, dbias each may be null. run_mean/run_var: running statistics (inference mode only).
// coef: scratch of 4*C T values, scratch of bn_scratch_doubles(g) doubles.
template <typename T>
cudaError_t launch_batch_norm_grad(const BnGeom& g, T* dx, T* dscale, T* dbias, const T* dy, const T* x,
                                   const T* scale, const T* run_mean, const T* run_var, bool training, double eps,
                                   T* coef, double* scratch, cudaStream_t stream);

// ---- fused attention (attention.cu; kernels/cpu/attention.cpp is the reference) ---------------
// The mask of FusedAttention broadcast to the scores [heads, T, S]: kind 0 none, 1 added (T values),
// 2 bool, the score replaced by `fill` where true. batch / batch_strides walk the heads' batch dims.
struct AttnMask {
  int kind = 0;
  const void* data = nullptr;
  int rank = 0;
  int64_t batch[kMaxRank] = {};
  int64_t batch_strides[kMaxRank] = {};
  int64_t row_stride = 0, col_stride = 0;
  double fill = 0;
};
// p: the scores (heads * t rows of s, scale already applied by the GEMM), in place: the mask, then
// the softmax. recompute false: inv_sum[row] = 1 / sum_j exp(s_j - max) is written; true: it is
// read, and p becomes exp(s - max) * inv_sum (the forward's probabilities, recomputed).
template <typename T>
cudaError_t launch_attention_softmax(T* p, T* inv_sum, const AttnMask& m, int64_t heads, int64_t t, int64_t s,
                                     bool recompute, cudaStream_t stream);
// ds (holding dP = dY @ V^T) becomes scale * P * (dP - sum_j P * dP), 0 where the mask filled the
// score.
template <typename T>
cudaError_t launch_attention_dscores(T* ds, const T* p, const AttnMask& m, int64_t heads, int64_t t, int64_t s,
                                     double scale, cudaStream_t stream);

// ---- the fused products' epilogue (epilogue.cu) -------------------------------------------

// act: 0 none, 1 Relu, 2 Gelu (exact). Over n elements of the product's output z, rows of `cols`:
// s = z + bias[i % cols] (bias may be null); with Gelu and a bias, z = s (kept for GeluGrad);
// y = act(s). y may be z. The arithmetic of the separate Add, Relu and Gelu kernels.
template <typename T>
cudaError_t launch_bias_activation(T* y, T* z, const T* bias, int64_t cols, int64_t n, int act, cudaStream_t stream);

}  // namespace pt::cuda
