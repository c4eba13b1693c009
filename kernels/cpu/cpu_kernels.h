// Declarations of the CPU kernels (kernels/cpu/*.cpp). Each is a template over the compute type,
// instantiated for float and double in its .cpp, and registered in kernels/registry.cpp.
#pragma once

#include "kernels/registry.h"
#include "kernels/unary_ops.h"

namespace pt::cpu {

#define PT_DECLARE_CPU_KERNEL(name) \
  template <typename T>             \
  Status name(const KernelCall& call)

// unary.cpp: the element-wise unary ops of kernels/unary_ops.h, fn_op (X) -> Y and, for a
// dedicated backward op, fn_grad (dY, Z[, ...]) -> dX (abs_op also int64).
#define PT_DECLARE_CPU_UNARY(Name, fn, args, fwd, kind, bwd, fast, fast_grad) \
  PT_DECLARE_CPU_KERNEL(fn##_op);                                            \
  PT_UNARY_IF_GRAD(kind, PT_DECLARE_CPU_KERNEL(fn##_grad);)
PT_UNARY_OPS(PT_DECLARE_CPU_UNARY)
#undef PT_DECLARE_CPU_UNARY

// elementwise.cpp: copies (Identity, Reshape, Flatten; also int64, int32, bool, uint8).
PT_DECLARE_CPU_KERNEL(copy_input);
// dropout.cpp
PT_DECLARE_CPU_KERNEL(dropout);
PT_DECLARE_CPU_KERNEL(dropout_grad);

// binary.cpp: numpy-broadcasting Add, Sub, Mul, Div (also int64; Div truncates toward zero).
PT_DECLARE_CPU_KERNEL(add);
PT_DECLARE_CPU_KERNEL(sub);
PT_DECLARE_CPU_KERNEL(mul);
PT_DECLARE_CPU_KERNEL(div_op);

// gemm.cpp: Gemm (alpha, beta, transA, transB; C broadcast to [M, N]) and numpy MatMul.
PT_DECLARE_CPU_KERNEL(gemm);
PT_DECLARE_CPU_KERNEL(matmul);

// softmax.cpp: along `axis`, or over dims[axis:] when _coerce2d = 1.
PT_DECLARE_CPU_KERNEL(softmax);
PT_DECLARE_CPU_KERNEL(log_softmax);
PT_DECLARE_CPU_KERNEL(softmax_grad);      // (dY, Y) -> dX = Y * (dY - sum(dY * Y))
PT_DECLARE_CPU_KERNEL(log_softmax_grad);  // (dY, Y) -> dX = dY - exp(Y) * sum(dY)

// transpose.cpp: attr perm (also int64).
PT_DECLARE_CPU_KERNEL(transpose);

// reduce.cpp: (X) -> Y, X summed over the dims along which Y's shape broadcasts to X's.
PT_DECLARE_CPU_KERNEL(reduce_sum_to_shape);

// loss.cpp
PT_DECLARE_CPU_KERNEL(softmax_cross_entropy_loss);       // (scores, labels[, weights]) -> loss[, log_prob]
PT_DECLARE_CPU_KERNEL(softmax_cross_entropy_loss_grad);  // (dLoss, log_prob, labels[, weights]) -> dScores
PT_DECLARE_CPU_KERNEL(mse_loss);                         // (pred, target) -> loss
PT_DECLARE_CPU_KERNEL(mse_loss_grad);                    // (dLoss, pred, target) -> dPred

// optimizer.cpp: (W, G, V, lr) -> nothing; W and V updated in place. SGD (W, G, B, lr, step[, D])
// and Adam (W, G, M, V, lr, step): W, the state and step updated in place.
PT_DECLARE_CPU_KERNEL(sgd_momentum);
PT_DECLARE_CPU_KERNEL(sgd);
PT_DECLARE_CPU_KERNEL(adam);

// activation.cpp: broadcasting PRelu and Pow (Pow also int64; exponent of any numeric type);
// PReluGrad (dY, X, slope) -> dX, dSlope unreduced.
PT_DECLARE_CPU_KERNEL(prelu);
PT_DECLARE_CPU_KERNEL(pow_op);
PT_DECLARE_CPU_KERNEL(prelu_grad);

// reduce_ops.cpp: ReduceSum/Mean/Max over attr _axes (ReduceSum, ReduceMax also int64);
// ReduceMaxGrad (dY, X, Y) -> dX; variadic broadcasting Sum (also int64) and Mean.
PT_DECLARE_CPU_KERNEL(reduce_sum);
PT_DECLARE_CPU_KERNEL(reduce_mean);
PT_DECLARE_CPU_KERNEL(reduce_max);
PT_DECLARE_CPU_KERNEL(reduce_max_grad);
PT_DECLARE_CPU_KERNEL(sum_op);
PT_DECLARE_CPU_KERNEL(mean_op);

// reduce_ops.cpp, the reductions of opset 18's family (axes as an input): ReduceMin (also int64;
// backward: ReduceMaxGrad, which matches Y by equality), ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSum, ReduceLogSumExp.
PT_DECLARE_CPU_KERNEL(reduce_min);
PT_DECLARE_CPU_KERNEL(reduce_prod);
PT_DECLARE_CPU_KERNEL(reduce_l1);
PT_DECLARE_CPU_KERNEL(reduce_l2);
PT_DECLARE_CPU_KERNEL(reduce_sum_square);
PT_DECLARE_CPU_KERNEL(reduce_log_sum);
PT_DECLARE_CPU_KERNEL(reduce_log_sum_exp);

// index_ops.cpp (float, double, int64, int32): broadcasting variadic Max and Min; ArgMax -> int64;
// CumSum, Trilu, GatherElements; GatherElementsGrad (dY, indices) -> dData (float, double).
PT_DECLARE_CPU_KERNEL(max_op);
PT_DECLARE_CPU_KERNEL(min_op);
PT_DECLARE_CPU_KERNEL(mod_op);  // broadcasting; attribute fmod
PT_DECLARE_CPU_KERNEL(arg_max);
PT_DECLARE_CPU_KERNEL(cum_sum);
PT_DECLARE_CPU_KERNEL(trilu);
PT_DECLARE_CPU_KERNEL(gather_elements);
PT_DECLARE_CPU_KERNEL(gather_elements_grad);

// group_norm.cpp: GroupNormalization and InstanceNormalization (X, scale, bias) -> Y;
// GroupNormalizationGrad (dY, X, scale) -> dX, dScale, dBias.
PT_DECLARE_CPU_KERNEL(group_norm);
PT_DECLARE_CPU_KERNEL(group_norm_grad);

// conv_transpose.cpp: ConvTranspose (X, W[, B]) -> Y, Conv's input gradient plus the bias.
PT_DECLARE_CPU_KERNEL(conv_transpose);

// resize.cpp: Resize (X, ...) -> Y (nearest, linear); ResizeGrad (dY) -> dX.
PT_DECLARE_CPU_KERNEL(resize);
PT_DECLARE_CPU_KERNEL(resize_grad);

// einsum.cpp: Einsum (attribute equation), naive loops.
PT_DECLARE_CPU_KERNEL(einsum);


// tensor_ops.cpp: data movement for float, double, int64, int32, bool (Pad: no bool); the
// backward ops SliceGrad (dY) -> dX, PadGrad (dY) -> dX, GatherGrad (dY, indices) -> dData for
// float and double. Comparisons take their input type and write bool.
PT_DECLARE_CPU_KERNEL(concat);
PT_DECLARE_CPU_KERNEL(split);
PT_DECLARE_CPU_KERNEL(slice);
PT_DECLARE_CPU_KERNEL(slice_grad);
PT_DECLARE_CPU_KERNEL(expand);
PT_DECLARE_CPU_KERNEL(tile);
PT_DECLARE_CPU_KERNEL(pad);
PT_DECLARE_CPU_KERNEL(pad_grad);
PT_DECLARE_CPU_KERNEL(gather);
PT_DECLARE_CPU_KERNEL(gather_grad);
PT_DECLARE_CPU_KERNEL(equal);
PT_DECLARE_CPU_KERNEL(less);
PT_DECLARE_CPU_KERNEL(greater);
Status where_op(const KernelCall& call);  // registered under bool (the condition); any value type
Status not_op(const KernelCall& call);    // bool
Status cast_op(const KernelCall& call);   // registered per input type; converts to the output's
bool cast_supported(DType t);             // the element types cast_op reads and writes

// layernorm.cpp: LayerNormalization (X, scale[, B]) -> Y[, mean, inv_std_dev] over dims[axis:];
// LayerNormalizationGrad (dY, X, scale) -> dX, dScale, dB (statistics recomputed from X).
PT_DECLARE_CPU_KERNEL(layer_norm);
PT_DECLARE_CPU_KERNEL(layer_norm_grad);

// attention.cpp (importer/fuse_attention.cpp): FusedAttention (Q, Kt, V[, mask]) -> Y, InvSum (attrs
// scale, mask_kind, mask_fill; kernels/attention_geometry.h); FusedAttentionGrad (dY, Q, Kt, V,
// mask or absent, InvSum) -> dQ, dKt, dV, the probabilities recomputed from Q, Kt and InvSum.
PT_DECLARE_CPU_KERNEL(fused_attention);
PT_DECLARE_CPU_KERNEL(fused_attention_grad);

// conv.cpp: Conv (X, W[, B]) -> Y (attrs kernel_shape, strides, dilations, pads explicit, group);
// ConvGradInput (dY, W) -> dX, ConvGradWeight (dY, X) -> dW, ConvGradBias (dY) -> dB.
PT_DECLARE_CPU_KERNEL(conv);
PT_DECLARE_CPU_KERNEL(conv_grad_input);
PT_DECLARE_CPU_KERNEL(conv_grad_weight);
PT_DECLARE_CPU_KERNEL(conv_grad_bias);

// gemm_bf16.cpp, conv_bf16.cpp (--precision bf16): the same ops on bfloat16 operands (A, B; X, W,
// dY) with float32 outputs, Gemm's C and Conv's bias float32; registered under kBFloat16.
Status gemm_bf16(const KernelCall& call);
Status matmul_bf16(const KernelCall& call);
Status conv_bf16(const KernelCall& call);
Status conv_grad_input_bf16(const KernelCall& call);
Status conv_grad_weight_bf16(const KernelCall& call);

// epilogue.cpp (importer/fuse_epilogue.cpp): FusedMatMul (A, B[, bias]), FusedGemm (A, B[, C]),
// FusedConv (X, W[, B]) -> Y[, Z]: the product, + bias, then activation ("none", "Relu", "Gelu"; a
// Gelu epilogue outputs the pre-activation Z too). One function for every operand dtype (the
// product's kernel is looked up by it); the epilogue computes in the output's float32 or float64.
Status fused_matmul(const KernelCall& call);
Status fused_gemm(const KernelCall& call);
Status fused_conv(const KernelCall& call);

// pool.cpp: MaxPool (X) -> Y[, Indices], AveragePool, GlobalAveragePool, GlobalMaxPool;
// MaxPoolGrad (dY, X) -> dX, AveragePoolGrad (dY) -> dX, GlobalAveragePoolGrad (dY) -> dX,
// GlobalMaxPoolGrad (dY, X) -> dX.
PT_DECLARE_CPU_KERNEL(max_pool);
PT_DECLARE_CPU_KERNEL(average_pool);
PT_DECLARE_CPU_KERNEL(global_average_pool);
PT_DECLARE_CPU_KERNEL(global_max_pool);
PT_DECLARE_CPU_KERNEL(max_pool_grad);
PT_DECLARE_CPU_KERNEL(average_pool_grad);
PT_DECLARE_CPU_KERNEL(global_average_pool_grad);
PT_DECLARE_CPU_KERNEL(global_max_pool_grad);

// batchnorm.cpp: BatchNormalization (X, scale, B, mean, var) -> Y[, mean, var, saved_mean,
// saved_var] (attr _training; running mean/var inputs updated in place when training);
// BatchNormalizationGrad (dY, X, scale[, mean, var]) -> dX, dScale, dB (each optional).
PT_DECLARE_CPU_KERNEL(batch_normalization);
PT_DECLARE_CPU_KERNEL(batch_normalization_grad);

// lrn.cpp: LRN (X) -> Y across channels; LRNGrad (dY, X) -> dX.
PT_DECLARE_CPU_KERNEL(lrn);
PT_DECLARE_CPU_KERNEL(lrn_grad);

// scatter_ops.cpp (float, double, int64, int32, bool): GatherND (attr batch_dims), ScatterND and
// ScatterElements (reduction none, attr _axis); GatherNDGrad (dY, indices) -> dData (float, double).
PT_DECLARE_CPU_KERNEL(gather_nd);
PT_DECLARE_CPU_KERNEL(gather_nd_grad);
PT_DECLARE_CPU_KERNEL(scatter_nd);
PT_DECLARE_CPU_KERNEL(scatter_elements);

#undef PT_DECLARE_CPU_KERNEL

}  // namespace pt::cpu
