// Shared by the host-side wrappers of the CUDA kernels (kernels/cuda/*_ops.cpp): the argument
// checks the CPU kernels make (kernels/kernel_checks.h, one definition for both backends, so they
// refuse alike), and the building of launch.h's Strided walks from broadcast shapes, with size-1
// dims dropped and mergeable neighbours merged (as kernels/cpu/cpu_util.h's StridedLoop does).
#pragma once

#include <array>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/kernel_checks.h"
#include "kernels/registry.h"

namespace pt::cuda {

// The argument checks and helpers shared with the CPU kernels (kernels/kernel_checks.h).
using kernels::AxisGeometry;
using kernels::axis_geometry;
using kernels::broadcast_strides;
using kernels::check_arity;
using kernels::check_same_dims;
using kernels::has_input;

// A walk over `dims` with K operands' strides, compacted; unsupported when more than kMaxRank
// dims remain.
template <int K>
Status make_strided(const char* op, const Dims& dims, const std::array<Dims, K>& strides, Strided<K>* out) {
  Strided<K> s;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool merge = s.rank > 0;
    for (int k = 0; k < K && merge; ++k) merge = s.strides[k][s.rank - 1] == strides[k][d] * dims[d];
    if (merge) {
      s.sizes[s.rank - 1] *= dims[d];
      for (int k = 0; k < K; ++k) s.strides[k][s.rank - 1] = strides[k][d];
      continue;
    }
    if (s.rank == kMaxRank)
      return unsupported(std::string(op) + " (cuda): more than " + std::to_string(kMaxRank) +
                         " non-mergeable dims in " + dims_str(dims));
    s.sizes[s.rank] = dims[d];
    for (int k = 0; k < K; ++k) s.strides[k][s.rank] = strides[k][d];
    ++s.rank;
  }
  if (s.rank == 0) {
    s.rank = 1;
    s.sizes[0] = 1;
    for (int k = 0; k < K; ++k) s.strides[k][0] = 0;
  }
  *out = s;
  return Status::ok();
}

// The walks of a reduction of x (dims) to keep-dims shape kd: `kept` over the output elements in
// row-major order (strides into x), `reduced` over the elements that fold into one output.
inline Status reduce_walks(const char* op, const Dims& x, const Dims& kd, Strided<1>* kept, Strided<1>* reduced,
                           int64_t* n_red) {
  const Dims xs = row_major_strides(x);
  Dims kept_dims, kept_strides, red_dims, red_strides;
  *n_red = 1;
  for (size_t d = 0; d < x.size(); ++d) {
    if (kd[d] == 1 && x[d] != 1) {
      red_dims.push_back(x[d]);
      red_strides.push_back(xs[d]);
      *n_red *= x[d];
    } else {
      kept_dims.push_back(x[d]);
      kept_strides.push_back(xs[d]);
    }
  }
  RETURN_IF_ERROR(make_strided<1>(op, kept_dims, {kept_strides}, kept));
  return make_strided<1>(op, red_dims, {red_strides}, reduced);
}

}  // namespace pt::cuda
