// Declarations of the gradient builders, one per forward op (see grad_registry.h).
#pragma once

#include "importer/grad/grad_registry.h"

namespace pt::grad {

Status gemm(GradContext& c);
Status matmul(GradContext& c);
// The products' gradients for a given dY of output 0 (inputs 0 and 1, and Gemm's C / Conv's B); the
// fused products of importer/fuse_epilogue.cpp pass the gradient of their pre-activation.
Status gemm_from(GradContext& c, Value* dy);
Status matmul_from(GradContext& c, Value* dy);
Status conv_from(GradContext& c, Value* dy);
// FusedMatMul, FusedGemm, FusedConv (epilogue_grad.cpp).
Status fused_product(GradContext& c);
Status add(GradContext& c);
Status sub(GradContext& c);
Status mul(GradContext& c);
Status div(GradContext& c);
// The element-wise unary ops of kernels/unary_ops.h (unary_grad.cpp): NameGrad(dY, X[, ...]) or
// NameGrad(dY, Y) with the forward node's attributes, or composed from existing ops (neg ...).
Status unary_from_x(GradContext& c);
Status unary_from_y(GradContext& c);
Status neg(GradContext& c);
Status exp(GradContext& c);
Status log(GradContext& c);
Status sqrt(GradContext& c);
Status reciprocal(GradContext& c);
Status softplus(GradContext& c);  // dY * Sigmoid(X)
Status sin(GradContext& c);       // dY * Cos(X)
Status sinh(GradContext& c);      // dY * Cosh(X)
Status cosh(GradContext& c);      // dY * Sinh(X)
Status softmax(GradContext& c);
Status log_softmax(GradContext& c);
Status reshape(GradContext& c);      // Reshape, Flatten, Identity (and any view of the same data)
Status transpose(GradContext& c);
Status softmax_cross_entropy(GradContext& c);
Status mse_loss(GradContext& c);
Status dropout(GradContext& c);
Status no_gradient(GradContext& c);  // comparisons, shape ops
Status fused_attention(GradContext& c);  // attention_grad.cpp (importer/fuse_attention.cpp)
// Activations, reductions, tensor ops and LayerNorm: activation_grad.cpp, reduce_grad.cpp,
// tensor_grad.cpp, layernorm_grad.cpp.
Status pow(GradContext& c);
Status prelu(GradContext& c);
Status reduce_sum(GradContext& c);
Status reduce_mean(GradContext& c);
Status reduce_max(GradContext& c);
Status sum(GradContext& c);
Status mean(GradContext& c);
Status concat(GradContext& c);
Status split(GradContext& c);
Status slice(GradContext& c);
Status expand(GradContext& c);
Status tile(GradContext& c);
Status pad(GradContext& c);
Status gather(GradContext& c);
Status where(GradContext& c);
Status cast(GradContext& c);
Status layer_norm(GradContext& c);
// Convolution, pooling, normalisation: conv_grad.cpp, pool_grad.cpp, batchnorm_grad.cpp, lrn_grad.cpp.
Status conv(GradContext& c);
Status max_pool(GradContext& c);
Status average_pool(GradContext& c);
Status global_average_pool(GradContext& c);
Status global_max_pool(GradContext& c);
Status batch_norm(GradContext& c);
Status lrn(GradContext& c);
// Ops of opsets 18 to 21 and the zoo's further ops: opset18_ops_grad.cpp.
Status reduce_min(GradContext& c);
Status reduce_sum_square(GradContext& c);
Status reduce_l2(GradContext& c);
Status reduce_l1(GradContext& c);
Status reduce_log_sum(GradContext& c);
Status reduce_log_sum_exp(GradContext& c);
Status reduce_prod(GradContext& c);
Status min_max(GradContext& c);
Status mod(GradContext& c);
Status cum_sum(GradContext& c);
Status trilu(GradContext& c);
Status gather_elements(GradContext& c);
Status group_norm(GradContext& c);  // also InstanceNormalization
Status conv_transpose(GradContext& c);  // conv_grad.cpp
Status resize(GradContext& c);
Status einsum(GradContext& c);
Status gather_nd(GradContext& c);         // scatter_grad.cpp
Status scatter_nd(GradContext& c);
Status scatter_elements(GradContext& c);

}  // namespace pt::grad
