// CPU kernels of the selection and scan ops of opsets 8 to 21: the broadcasting variadic Min and
// Max, Mod, ArgMax, CumSum, Trilu, GatherElements and its backward op (a scatter-add). Attributes are
// read as the shape functions left them: `_axis` (normalised), `_k` (Trilu's diagonal).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

// outer x n x inner around `axis` of `dims`.
void axis_geometry(const Dims& dims, int64_t axis, int64_t* outer, int64_t* n, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int64_t i = 0; i < axis; ++i) *outer *= dims[i];
  *n = dims[axis];
  for (size_t i = axis + 1; i < dims.size(); ++i) *inner *= dims[i];
}

Status axis_of(const KernelCall& call, const char* op, int64_t rank, int64_t* axis) {
  *axis = call.attrs.get_int("_axis", call.attrs.get_int("axis", 0));
  if (*axis < 0) *axis += rank;
  if (*axis < 0 || *axis >= rank) return invalid_input(std::string(op) + ": axis out of range for rank " + std::to_string(rank));
  return Status::ok();
}

// An index tensor's element i (int64 or int32), made non-negative against `dim`.
Expected<int64_t> index_at(const TensorView& idx, int64_t i, int64_t dim, const char* op) {
  int64_t v = idx.dtype == DType::kInt32 ? static_cast<const int32_t*>(idx.data)[i] : static_cast<const int64_t*>(idx.data)[i];
  if (v < 0) v += dim;
  if (v < 0 || v >= dim)
    return invalid_input(std::string(op) + ": index " + std::to_string(v) + " is out of range for a dimension of " +
                         std::to_string(dim));
  return v;
}

// y = min or max of the inputs broadcast to y's dims; NaN propagates.
template <typename T>
Status min_max(const KernelCall& call, const char* op, bool is_max) {
  RETURN_IF_ERROR(check_arity(call, op, 1, 1));
  const TensorView& y = call.outputs[0];
  T* py = y.as<T>();  // (y.dims)
  const int64_t n = y.size();
  bool first = true;
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    const TensorView& x = call.inputs[k];
    if (!x.data) continue;
    Dims bd;
    if (!broadcast_dims(x.dims, y.dims, &bd) || bd != y.dims)
      return invalid_input(std::string(op) + ": input " + std::to_string(k) + " " + dims_str(x.dims) +
                           " does not broadcast to the output " + dims_str(y.dims));
    if (n == 0) continue;
    const T* px = x.as<T>();
    const StridedLoop<1> loop(y.dims, {broadcast_strides(x.dims, y.dims)});
    const int64_t inner = loop.inner(), si = loop.inner_stride(0);
    loop.for_each_row(n > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 1>& o) {
      T* yr = py + row * inner;
      const T* xr = px + o[0];
      for (int64_t j = 0; j < inner; ++j) {
        const T v = xr[j * si];
        if (first || v != v) yr[j] = v;
        else if (is_max ? v > yr[j] : v < yr[j]) yr[j] = v;
      }
    });
    first = false;
  }
  if (first) return invalid_input(std::string(op) + ": no inputs");
  return Status::ok();
}

}  // namespace

template <typename T>
Status max_op(const KernelCall& call) { return min_max<T>(call, "Max", true); }
template <typename T>
Status min_op(const KernelCall& call) { return min_max<T>(call, "Min", false); }

// (X) -> int64 indices of the first (or, select_last_index, the last) maximum along `_axis`.
template <typename T>
Status arg_max(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ArgMax", 1, 1));
  const TensorView& x = call.inputs[0];
  int64_t axis, outer, n, inner;
  RETURN_IF_ERROR(axis_of(call, "ArgMax", x.rank(), &axis));
  axis_geometry(x.dims, axis, &outer, &n, &inner);
  if (call.outputs[0].size() != outer * inner) return invalid_input("ArgMax: output " + dims_str(call.outputs[0].dims) + " does not match");
  if (n == 0) return invalid_input("ArgMax: the axis is empty");
  const bool last = call.attrs.get_int("select_last_index", 0) != 0;
  const T* px = x.as<T>();                     // (outer, n, inner)
  int64_t* py = call.outputs[0].as<int64_t>();  // (outer, inner)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T* p = px + o * n * inner + i;
      int64_t best = 0;
      for (int64_t k = 1; k < n; ++k) {
        const T v = p[k * inner], b = p[best * inner];
        if (v > b || (last && v == b)) best = k;
      }
      py[o * inner + i] = best;
    }
  return Status::ok();
}

// (X, axis) -> running sums along `_axis`; `exclusive` leaves out the element itself, `reverse`
// sums from the end. Sums accumulate in double for floats.
template <typename T>
Status cum_sum(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "CumSum", 1, 1));
  const TensorView& x = call.inputs[0];
  RETURN_IF_ERROR(check_same_dims("CumSum", "output", call.outputs[0].dims, x.dims));
  int64_t axis, outer, n, inner;
  RETURN_IF_ERROR(axis_of(call, "CumSum", x.rank(), &axis));
  axis_geometry(x.dims, axis, &outer, &n, &inner);
  const bool exclusive = call.attrs.get_int("exclusive", 0) != 0, reverse = call.attrs.get_int("reverse", 0) != 0;
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  const T* px = x.as<T>();               // (outer, n, inner)
  T* py = call.outputs[0].as<T>();       // (outer, n, inner)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      Acc s = 0;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t k = reverse ? n - 1 - j : j;
        const int64_t at = (o * n + k) * inner + i;
        if (exclusive) {
          py[at] = static_cast<T>(s);
          s += px[at];
        } else {
          s += px[at];
          py[at] = static_cast<T>(s);
        }
      }
    }
  return Status::ok();
}

// (X, k) -> X with the elements below (upper = 1) or above (upper = 0) diagonal `_k` of the last
// two dims zeroed.
template <typename T>
Status trilu(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Trilu", 1, 1));
  const TensorView& x = call.inputs[0];
  RETURN_IF_ERROR(check_same_dims("Trilu", "output", call.outputs[0].dims, x.dims));
  if (x.rank() < 2) return invalid_input("Trilu: the input must have rank 2 or more, has " + dims_str(x.dims));
  const int64_t rows = x.dims[x.rank() - 2], cols = x.dims[x.rank() - 1];
  const int64_t mats = rows * cols == 0 ? 0 : x.size() / (rows * cols);
  const int64_t k = call.attrs.get_int("_k", 0);
  const bool upper = call.attrs.get_int("upper", 1) != 0;
  const T* px = x.as<T>();          // (mats, rows, cols)
  T* py = call.outputs[0].as<T>();  // (mats, rows, cols)
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t at = (m * rows + r) * cols + c;
        const bool keep = upper ? c - r >= k : c - r <= k;
        py[at] = keep ? px[at] : T(0);
      }
  return Status::ok();
}

// (data, indices) -> out[i] = data[i with its `_axis` coordinate replaced by indices[i]].
template <typename T>
Status gather_elements(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "GatherElements", 2, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& idx = call.inputs[1];
  RETURN_IF_ERROR(check_same_dims("GatherElements", "output", call.outputs[0].dims, idx.dims));
  if (idx.rank() != x.rank()) return invalid_input("GatherElements: indices and data differ in rank");
  int64_t axis;
  RETURN_IF_ERROR(axis_of(call, "GatherElements", x.rank(), &axis));
  const Dims xs = row_major_strides(x.dims);
  const T* px = x.as<T>();
  T* py = call.outputs[0].as<T>();
  const int64_t r = idx.rank();
  std::vector<int64_t> coord(r, 0);
  for (int64_t i = 0; i < idx.size(); ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) {
      if (d == axis) {
        ASSIGN_OR_RETURN(const int64_t v, index_at(idx, i, x.dims[d], "GatherElements"));
        off += v * xs[d];
      } else {
        off += coord[d] * xs[d];
      }
    }
    py[i] = px[off];
    for (int64_t d = r - 1; d >= 0 && ++coord[d] == idx.dims[d]; --d) coord[d] = 0;
  }
  return Status::ok();
}

// (dY, indices) -> dX (the output's dims: the forward data's): dY added at the gathered places.
template <typename T>
Status gather_elements_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "GatherElementsGrad", 2, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& idx = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims("GatherElementsGrad", "dY", dy.dims, idx.dims));
  if (idx.rank() != dx.rank()) return invalid_input("GatherElementsGrad: indices and dX differ in rank");
  int64_t axis;
  RETURN_IF_ERROR(axis_of(call, "GatherElementsGrad", dx.rank(), &axis));
  const Dims xs = row_major_strides(dx.dims);
  const T* pdy = dy.as<T>();
  T* pdx = dx.as<T>();
  std::fill(pdx, pdx + dx.size(), T(0));
  const int64_t r = idx.rank();
  std::vector<int64_t> coord(r, 0);
  for (int64_t i = 0; i < idx.size(); ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) {
      if (d == axis) {
        ASSIGN_OR_RETURN(const int64_t v, index_at(idx, i, dx.dims[d], "GatherElementsGrad"));
        off += v * xs[d];
      } else {
        off += coord[d] * xs[d];
      }
    }
    pdx[off] += pdy[i];
    for (int64_t d = r - 1; d >= 0 && ++coord[d] == idx.dims[d]; --d) coord[d] = 0;
  }
  return Status::ok();
}

// (A, B) -> A mod B under numpy broadcasting: fmod = 1 takes the dividend's sign (C's fmod, the only
// form ONNX allows for floats), fmod = 0 the divisor's (Python's %). Integer division by zero is refused.
template <typename T>
Status mod_op(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Mod", 2, 1));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  Dims bd;
  if (!broadcast_dims(a.dims, b.dims, &bd) || bd != y.dims)
    return invalid_input("Mod: shapes " + dims_str(a.dims) + " and " + dims_str(b.dims) + " do not broadcast to " +
                         dims_str(y.dims));
  const bool fmod = call.attrs.get_int("fmod", 0) != 0;
  if (std::is_floating_point_v<T> && !fmod) return invalid_input("Mod: floating-point inputs need fmod = 1");
  const Dims sa = broadcast_strides(a.dims, y.dims), sb = broadcast_strides(b.dims, y.dims);
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  T* py = y.as<T>();
  const size_t r = y.dims.size();
  std::vector<int64_t> coord(r, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < y.size(); ++i) {
    const T x = pa[oa], d = pb[ob];
    if constexpr (std::is_floating_point_v<T>) {
      py[i] = std::fmod(x, d);
    } else {
      if (d == 0) return invalid_input("Mod: integer division by zero");
      T m = x % d;
      if (!fmod && m != 0 && ((m < 0) != (d < 0))) m += d;
      py[i] = m;
    }
    for (int64_t k = static_cast<int64_t>(r) - 1; k >= 0; --k) {
      oa += sa[k];
      ob += sb[k];
      if (++coord[k] < y.dims[k]) break;
      oa -= sa[k] * y.dims[k];
      ob -= sb[k] * y.dims[k];
      coord[k] = 0;
    }
  }
  return Status::ok();
}

#define PT_INSTANTIATE(name, T) template Status name<T>(const KernelCall& call);
#define PT_ALL(name) PT_INSTANTIATE(name, float) PT_INSTANTIATE(name, double) PT_INSTANTIATE(name, int64_t) \
                     PT_INSTANTIATE(name, int32_t)
PT_ALL(max_op)
PT_ALL(min_op)
PT_ALL(arg_max)
PT_ALL(cum_sum)
PT_ALL(trilu)
PT_ALL(gather_elements)
PT_ALL(mod_op)
PT_INSTANTIATE(gather_elements_grad, float)
PT_INSTANTIATE(gather_elements_grad, double)
#undef PT_ALL
#undef PT_INSTANTIATE

}  // namespace pt::cpu
