// The argument checks of the matrix products (Gemm, MatMul), shared by kernels/cpu/gemm.cpp,
// kernels/cpu/gemm_bf16.cpp and the cuBLAS wrappers in kernels/cuda/gemm_ops.cpp: one definition,
// so every backend and precision refuses the same calls with the same messages.
#pragma once

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// unsupported when a matrix dimension does not fit the int the library takes (`range` names it:
// "BLAS int range", "int range").
inline Status check_matrix_dims(const char* op, std::initializer_list<int64_t> sizes, const char* range = "BLAS int range") {
  for (int64_t s : sizes)
    if (s > INT_MAX) return unsupported(std::string(op) + ": matrix dimension " + std::to_string(s) + " exceeds the " + range);
  return Status::ok();
}

// Gemm: Y [M, N] = alpha * op(A) @ op(B) + beta * C. cm, cn: C's rows and columns as a matrix (1
// where C broadcasts), filled by check_gemm_c.
struct GemmGeometry {
  bool ta = false, tb = false;  // transA, transB
  int64_t m = 0, n = 0, k = 0;
  int64_t cm = 1, cn = 1;
};

// Gemm (A, B[, C]) -> Y: A and B 2-D, op(A) [M, K] and op(B) [K, N], Y [M, N]. C, read only when
// beta != 0 and Y is not empty, is checked by check_gemm_c.
inline Status check_gemm(const KernelCall& call, GemmGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, "Gemm", 2, 1));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  *g = GemmGeometry{};
  g->ta = call.attrs.get_int("transA", 0) != 0;
  g->tb = call.attrs.get_int("transB", 0) != 0;
  if (a.rank() != 2 || b.rank() != 2)
    return invalid_input("Gemm: A " + dims_str(a.dims) + " and B " + dims_str(b.dims) + " must both be 2-D");
  g->m = g->ta ? a.dims[1] : a.dims[0];
  g->k = g->ta ? a.dims[0] : a.dims[1];
  const int64_t kb = g->tb ? b.dims[1] : b.dims[0];
  g->n = g->tb ? b.dims[0] : b.dims[1];
  if (g->k != kb)
    return invalid_input("Gemm: inner dimensions differ: op(A) is [" + std::to_string(g->m) + ", " + std::to_string(g->k) +
                         "], op(B) is [" + std::to_string(kb) + ", " + std::to_string(g->n) + "]");
  return check_same_dims("Gemm", "output", call.outputs[0].dims, Dims{g->m, g->n});
}

// Gemm's C: rank at most 2, broadcasting to [M, N]; fills g->cm, g->cn.
inline Status check_gemm_c(const TensorView& c, GemmGeometry* g) {
  if (c.rank() > 2) return invalid_input("Gemm: C " + dims_str(c.dims) + " has rank above 2");
  g->cm = c.rank() == 2 ? c.dims[0] : 1;
  g->cn = c.rank() >= 1 ? c.dims[c.rank() - 1] : 1;
  if ((g->cm != 1 && g->cm != g->m) || (g->cn != 1 && g->cn != g->n))
    return invalid_input("Gemm: C " + dims_str(c.dims) + " does not broadcast to [" + std::to_string(g->m) + ", " +
                         std::to_string(g->n) + "]");
  return Status::ok();
}

// MatMul (numpy matmul): A [batchA..., M, K] @ B [batchB..., K, N], a 1-D A promoted to [1, K]
// and a 1-D B to [K, 1] (the promoted dim then dropped from Y).
struct MatMulGeometry {
  int64_t m = 0, n = 0, k = 0;
  Dims abatch, bbatch;  // A's and B's batch dims
  Dims batch;           // their broadcast: Y's batch dims
};

// MatMul (A, B) -> Y: neither operand a scalar, inner dims equal, batch dims broadcasting, Y of
// the product's dims.
inline Status check_matmul(const KernelCall& call, MatMulGeometry* g) {
  RETURN_IF_ERROR(check_arity(call, "MatMul", 2, 1));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  if (a.rank() == 0 || b.rank() == 0) return invalid_input("MatMul: operands must not be scalars");
  const bool a1 = a.rank() == 1, b1 = b.rank() == 1;
  const Dims ad = a1 ? Dims{1, a.dims[0]} : a.dims;
  const Dims bd = b1 ? Dims{b.dims[0], 1} : b.dims;
  *g = MatMulGeometry{};
  g->m = ad[ad.size() - 2];
  g->k = ad.back();
  const int64_t kb = bd[bd.size() - 2];
  g->n = bd.back();
  if (g->k != kb) return invalid_input("MatMul: inner dimensions differ: A " + dims_str(a.dims) + ", B " + dims_str(b.dims));
  g->abatch.assign(ad.begin(), ad.end() - 2);
  g->bbatch.assign(bd.begin(), bd.end() - 2);
  if (!broadcast_dims(g->abatch, g->bbatch, &g->batch))
    return invalid_input("MatMul: batch dims of A " + dims_str(a.dims) + " and B " + dims_str(b.dims) + " do not broadcast");
  Dims out = g->batch;
  if (!a1) out.push_back(g->m);
  if (!b1) out.push_back(g->n);
  return check_same_dims("MatMul", "output", call.outputs[0].dims, out);
}

}  // namespace pt::kernels
