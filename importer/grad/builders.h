// Declarations of the gradient builders, one per forward op (see grad_registry.h).
#pragma once

#include "importer/grad/grad_registry.h"

namespace pt::grad {

Status gemm(GradContext& c);
Status matmul(GradContext& c);
Status add(GradContext& c);
Status sub(GradContext& c);
Status mul(GradContext& c);
Status div(GradContext& c);
Status relu(GradContext& c);
Status sigmoid(GradContext& c);
Status tanh(GradContext& c);
Status neg(GradContext& c);
Status exp(GradContext& c);
Status log(GradContext& c);
Status sqrt(GradContext& c);
Status softmax(GradContext& c);
Status log_softmax(GradContext& c);
Status reshape(GradContext& c);      // Reshape, Flatten, Identity (and any view of the same data)
Status transpose(GradContext& c);
Status softmax_cross_entropy(GradContext& c);
Status mse_loss(GradContext& c);
Status no_gradient(GradContext& c);  // comparisons, shape ops

}  // namespace pt::grad
