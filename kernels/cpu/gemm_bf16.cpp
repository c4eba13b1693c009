// Gemm and MatMul on bfloat16 operands with float32 output and accumulation (--precision bf16):
// A and B bfloat16, Gemm's C and every output float32. One product runs oneDNN's matmul primitive
// (bf16 x bf16 -> f32: AVX512-BF16 / AMX kernels where the CPU has them), cached per thread and
// shape like the float32 convolutions' primitives; a batched MatMul runs the cached 2-D primitive
// once per batch matrix. alpha is oneDNN's output scale, beta * C is written into Y first and the
// product added by a sum post-op, so the float32 Gemm's semantics hold unchanged.
#include <dnnl.hpp>

#include <array>
#include <map>
#include <memory>
#include <string>

#include "kernels/checks/bf16.h"
#include "kernels/checks/gemm.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

struct MatmulPrim {
  dnnl::matmul prim;
  dnnl::memory a, b, c;
};

// ta, tb, m, n, k, lda, ldb, ldc, alpha's bits, accumulate
using Key = std::array<int64_t, 10>;

// The calling thread's primitive for C (M, N; row stride ldc, f32) [+]= alpha op(A) op(B), A and B
// bf16 with row strides lda, ldb; nullptr when oneDNN has none (remembered too).
MatmulPrim* matmul_prim(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                        float alpha, bool accumulate) {
  thread_local std::map<Key, std::unique_ptr<MatmulPrim>> cache;
  uint32_t abits;
  std::memcpy(&abits, &alpha, 4);
  const Key key{ta, tb, m, n, k, lda, ldb, ldc, abits, accumulate};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  using md = dnnl::memory::desc;
  using dt = dnnl::memory::data_type;
  auto entry = std::make_unique<MatmulPrim>();
  try {
    // op(A) is (M, K): A stored (M, K) with row stride lda, or (K, M) read transposed.
    const md a_md({m, k}, dt::bf16, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    const md b_md({k, n}, dt::bf16, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    const md c_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, dnnl_engine());
    entry->prim = dnnl::matmul(pd);
    entry->a = dnnl::memory(a_md, dnnl_engine(), DNNL_MEMORY_NONE);
    entry->b = dnnl::memory(b_md, dnnl_engine(), DNNL_MEMORY_NONE);
    entry->c = dnnl::memory(c_md, dnnl_engine(), DNNL_MEMORY_NONE);
  } catch (const dnnl::error&) {
    entry.reset();
  }
  MatmulPrim* p = entry.get();
  cache.emplace(key, std::move(entry));
  return p;
}

// The widened float32 copy of a bfloat16 operand, in the calling thread's buffer `slot`.
const float* widened(int slot, const uint16_t* src, int64_t n) {
  thread_local std::array<std::vector<float>, 2> bufs;
  if (bufs[slot].size() < static_cast<size_t>(n)) bufs[slot].resize(static_cast<size_t>(n));
  bf16_to_f32(src, bufs[slot].data(), n);
  return bufs[slot].data();
}

// C (M, N) = alpha op(A) op(B) + (accumulate ? C : 0). Products of two bfloat16 numbers are exact
// in float32, so the fallback (widen, float32 GEMM) computes the same sums as the primitive up to
// their order.
Status bf16_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                 const uint16_t* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  if (MatmulPrim* p = matmul_prim(ta, tb, m, n, k, lda, ldb, ldc, alpha, accumulate)) {
    thread_local dnnl::stream stream(dnnl_engine());
    try {
      p->a.set_data_handle(const_cast<uint16_t*>(a));
      p->b.set_data_handle(const_cast<uint16_t*>(b));
      p->c.set_data_handle(c);
      p->prim.execute(stream, {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}});
      stream.wait();
    } catch (const dnnl::error& err) {
      return internal_error(std::string("oneDNN bf16 matmul failed: ") + err.what());
    }
    return Status::ok();
  }
  const float* fa = widened(0, a, (ta ? k : m) * lda);
  const float* fb = widened(1, b, (tb ? n : k) * ldb);
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, fa, lda, fb, ldb,
                                      accumulate ? 1.0f : 0.0f, c, ldc);
  if (st != dnnl_success) return internal_error("dnnl_sgemm failed with status " + std::to_string(static_cast<int>(st)));
  return Status::ok();
}

}  // namespace

Status gemm_bf16(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Gemm", 2, 1));  // before the dtype check reads the operands
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(kernels::check_bf16_operands("Gemm", a, b, y));
  kernels::GemmGeometry g;
  RETURN_IF_ERROR(kernels::check_gemm(call, &g));
  const bool ta = g.ta, tb = g.tb;
  const int64_t m = g.m, n = g.n, k = g.k;
  const float alpha = call.attrs.get_float("alpha", 1.0f);
  const float beta = call.attrs.get_float("beta", 1.0f);
  RETURN_IF_ERROR(kernels::check_matrix_dims("Gemm", {m, n, k}, "int range"));
  float* py = y.as<float>();  // (M, N)
  if (m == 0 || n == 0) return Status::ok();
  bool y_set = false;
  if (has_input(call, 2) && beta != 0.0f) {
    const TensorView& c = call.inputs[2];
    if (c.dtype != DType::kFloat32)
      return invalid_input(std::string("Gemm (bfloat16): C must be float32, got ") + dtype_name(c.dtype));
    RETURN_IF_ERROR(kernels::check_gemm_c(c, &g));
    const float* pc = c.as<float>();
    const int64_t rs = g.cm == 1 ? 0 : g.cn, cs = g.cn == 1 ? 0 : 1;
#pragma omp parallel for if (m * n > kParallelThreshold)
    for (int64_t i = 0; i < m; ++i) {
      const float* crow = pc + i * rs;
      float* yrow = py + i * n;
      for (int64_t j = 0; j < n; ++j) yrow[j] = beta * crow[j * cs];
    }
    y_set = true;
  }
  if (k == 0 || alpha == 0.0f) {
    if (!y_set)
      for (int64_t i = 0; i < m * n; ++i) py[i] = 0.0f;
    return Status::ok();
  }
  return bf16_gemm(ta, tb, m, n, k, alpha, bf16_data(a), std::max<int64_t>(a.dims[1], 1), bf16_data(b),
                   std::max<int64_t>(b.dims[1], 1), y_set, py, n);
}

Status matmul_bf16(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "MatMul", 2, 1));  // before the dtype check reads the operands
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(kernels::check_bf16_operands("MatMul", a, b, y));
  kernels::MatMulGeometry g;
  RETURN_IF_ERROR(kernels::check_matmul(call, &g));
  const int64_t m = g.m, n = g.n, k = g.k;
  const Dims &abatch = g.abatch, &bbatch = g.bbatch, &batch = g.batch;
  const uint16_t* pa = bf16_data(a);  // (batchA..., M, K)
  const uint16_t* pb = bf16_data(b);  // (batchB..., K, N)
  float* py = y.as<float>();          // (batch..., M, N)
  const int64_t nbatch = numel(batch);
  if (y.size() == 0) return Status::ok();
  if (k == 0) {
    for (int64_t i = 0; i < y.size(); ++i) py[i] = 0.0f;
    return Status::ok();
  }
  if (numel(bbatch) == 1) {  // one B matrix: A's batch dims become extra rows
    RETURN_IF_ERROR(kernels::check_matrix_dims("MatMul", {nbatch * m, n, k}, "int range"));
    return bf16_gemm(false, false, nbatch * m, n, k, 1.0f, pa, k, pb, n, false, py, n);
  }
  RETURN_IF_ERROR(kernels::check_matrix_dims("MatMul", {m, n, k}, "int range"));
  const Dims sa = broadcast_strides(abatch, batch), sb = broadcast_strides(bbatch, batch);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    RETURN_IF_ERROR(bf16_gemm(false, false, m, n, k, 1.0f, pa + oa * m * k, k, pb + ob * k * n, n, false,
                              py + bi * m * n, n));
  }
  return Status::ok();
}

}  // namespace pt::cpu
