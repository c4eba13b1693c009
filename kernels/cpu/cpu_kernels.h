// Declarations of the CPU kernels (kernels/cpu/*.cpp). Each is a template over the compute type,
// instantiated for float and double in its .cpp, and registered in kernels/registry.cpp.
#pragma once

#include "kernels/registry.h"

namespace pt::cpu {

#define PT_DECLARE_CPU_KERNEL(name) \
  template <typename T>             \
  Status name(const KernelCall& call)

// elementwise.cpp: unary ops; dX = f(dY, Y) backward ops; copies (Identity, Reshape, Flatten).
PT_DECLARE_CPU_KERNEL(relu);
PT_DECLARE_CPU_KERNEL(sigmoid);
PT_DECLARE_CPU_KERNEL(tanh_op);
PT_DECLARE_CPU_KERNEL(neg);
PT_DECLARE_CPU_KERNEL(exp_op);
PT_DECLARE_CPU_KERNEL(log_op);
PT_DECLARE_CPU_KERNEL(sqrt_op);
PT_DECLARE_CPU_KERNEL(relu_grad);
PT_DECLARE_CPU_KERNEL(sigmoid_grad);
PT_DECLARE_CPU_KERNEL(tanh_grad);
PT_DECLARE_CPU_KERNEL(copy_input);  // also int64, int32

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

// optimizer.cpp: (W, G, V, lr) -> nothing; W and V updated in place.
PT_DECLARE_CPU_KERNEL(sgd_momentum);

#undef PT_DECLARE_CPU_KERNEL

}  // namespace pt::cpu
