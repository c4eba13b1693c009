// Helpers shared by the CPU kernels (not a public header): argument checks, the OpenMP threshold,
// strided loop nests for broadcasting / transposing / reducing, and the outer x n x inner geometry
// of ops that work along one axis (Softmax and friends).
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/registry.h"

namespace pt::cpu {

// Below this many elements a loop runs on one thread: forking costs more than it saves.
constexpr int64_t kParallelThreshold = 32768;

inline bool has_input(const KernelCall& call, size_t i) {
  return call.inputs.size() > i && call.inputs[i].data != nullptr;
}

// invalid_input unless the call has at least `n_in` inputs and `n_out` outputs.
inline Status check_arity(const KernelCall& call, const char* op, size_t n_in, size_t n_out) {
  if (call.inputs.size() < n_in || call.outputs.size() < n_out)
    return invalid_input(std::string(op) + ": expected at least " + std::to_string(n_in) +
                         " inputs and " + std::to_string(n_out) + " outputs, got " +
                         std::to_string(call.inputs.size()) + " and " +
                         std::to_string(call.outputs.size()));
  return Status::ok();
}

inline Status check_same_dims(const char* op, const char* what, const Dims& got, const Dims& want) {
  if (got != want)
    return invalid_input(std::string(op) + ": " + what + " has dims " + dims_str(got) +
                         ", expected " + dims_str(want));
  return Status::ok();
}

// y = f(x) elementwise over same-shape input 0 and output 0.
template <typename T, typename F>
Status map_unary(const KernelCall& call, const char* op, F f) {
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims(op, "output", y.dims, x.dims));
  const T* px = x.as<T>();  // (n)
  T* py = y.as<T>();        // (n)
  const int64_t n = x.size();
#pragma omp parallel for simd if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) py[i] = f(px[i]);
  return Status::ok();
}

// dX = f(dY, Z) elementwise; inputs (dY, Z), output dX, all the same shape. Z is the forward
// output Y or input X, as the op's backward needs.
template <typename T, typename F>
Status map_grad(const KernelCall& call, const char* op, F f) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& z = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims(op, "the second input", z.dims, dy.dims));
  RETURN_IF_ERROR(check_same_dims(op, "output", dx.dims, dy.dims));
  const T* pdy = dy.as<T>();  // (n)
  const T* pz = z.as<T>();    // (n)
  T* pdx = dx.as<T>();        // (n)
  const int64_t n = dy.size();
#pragma omp parallel for simd if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) pdx[i] = f(pdy[i], pz[i]);
  return Status::ok();
}

// Element strides of `in` broadcast (right-aligned) to `out`: 0 on broadcast dims. `in` must be
// broadcast-compatible with `out`.
inline Dims broadcast_strides(const Dims& in, const Dims& out) {
  Dims s(out.size(), 0);
  Dims rs = row_major_strides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    s[off + i] = (in[i] == 1 && out[off + i] != 1) ? 0 : rs[i];
  return s;
}

// A loop nest over a row-major "driver" shape with K operands that each step through memory with
// their own element strides. Size-1 dims are dropped and adjacent dims merged where every operand
// allows it, so the innermost dim is as long as possible (and usually stride 0 or 1).
template <size_t K>
struct StridedLoop {
  Dims sizes;                       // outermost first, at least one entry
  std::array<Dims, K> strides;      // per operand, same length as sizes

  StridedLoop(const Dims& dims, const std::array<Dims, K>& operand_strides) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d] == 1) continue;
      bool merge = !sizes.empty();
      for (size_t k = 0; k < K && merge; ++k)
        merge = strides[k].back() == operand_strides[k][d] * dims[d];
      if (merge) {
        sizes.back() *= dims[d];
        for (size_t k = 0; k < K; ++k) strides[k].back() = operand_strides[k][d];
      } else {
        sizes.push_back(dims[d]);
        for (size_t k = 0; k < K; ++k) strides[k].push_back(operand_strides[k][d]);
      }
    }
    if (sizes.empty()) {
      sizes.push_back(1);
      for (size_t k = 0; k < K; ++k) strides[k].push_back(0);
    }
  }

  int rank() const { return static_cast<int>(sizes.size()); }
  int64_t inner() const { return sizes.back(); }
  int64_t rows() const {
    int64_t r = 1;
    for (size_t d = 0; d + 1 < sizes.size(); ++d) r *= sizes[d];
    return r;
  }
  int64_t inner_stride(size_t k) const { return strides[k].back(); }

  // Calls fn(row, offs) for every row (all dims but the innermost), where offs[k] is operand k's
  // element offset of the row's first element; rows are split over threads when `parallel`.
  template <typename Fn>
  void for_each_row(bool parallel, Fn&& fn) const {
    const int64_t nrows = rows();
    const int outer_rank = rank() - 1;
#pragma omp parallel if (parallel && nrows > 1)
    {
      const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
      const int64_t begin = nrows * tid / nth, end = nrows * (tid + 1) / nth;
      if (begin < end) {
        std::vector<int64_t> idx(std::max(outer_rank, 1), 0);
        std::array<int64_t, K> offs{};
        int64_t rem = begin;
        for (int d = outer_rank - 1; d >= 0; --d) {
          idx[d] = rem % sizes[d];
          rem /= sizes[d];
          for (size_t k = 0; k < K; ++k) offs[k] += idx[d] * strides[k][d];
        }
        for (int64_t r = begin; r < end; ++r) {
          fn(r, offs);
          for (int d = outer_rank - 1; d >= 0; --d) {
            for (size_t k = 0; k < K; ++k) offs[k] += strides[k][d];
            if (++idx[d] < sizes[d]) break;
            for (size_t k = 0; k < K; ++k) offs[k] -= strides[k][d] * sizes[d];
            idx[d] = 0;
          }
        }
      }
    }
  }
};

// An op along one axis: data viewed as [outer, n, inner].
struct AxisGeometry {
  int64_t outer = 1, n = 1, inner = 1;
};

// coerce2d (opset < 13): [prod(dims[:axis]), prod(dims[axis:])], inner = 1. Otherwise the single
// dim `axis`. A scalar is one row of one element.
inline Status axis_geometry(const char* op, const Dims& dims, int64_t axis, bool coerce2d,
                            AxisGeometry* g) {
  const int64_t r = static_cast<int64_t>(dims.size());
  *g = AxisGeometry{};
  if (r == 0) return Status::ok();
  if (axis < 0 || axis >= r)
    return invalid_input(std::string(op) + ": axis " + std::to_string(axis) +
                         " out of range for input of rank " + std::to_string(r));
  for (int64_t d = 0; d < axis; ++d) g->outer *= dims[d];
  if (coerce2d) {
    for (int64_t d = axis; d < r; ++d) g->n *= dims[d];
  } else {
    g->n = dims[axis];
    for (int64_t d = axis + 1; d < r; ++d) g->inner *= dims[d];
  }
  return Status::ok();
}

}  // namespace pt::cpu
