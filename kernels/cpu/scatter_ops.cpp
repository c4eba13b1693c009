// CPU kernels of the index ops of Swin's masks and their relatives: GatherND (batch_dims), its
// backward op GatherNDGrad (a scatter-add of dY into zeros), ScatterND and ScatterElements
// (reduction none; the shape functions refuse the others). Indices are int64 or int32, negative
// ones count from the end; an index out of range is an error, never a wild write.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

int64_t raw_index(const TensorView& idx, int64_t i) {
  return idx.dtype == DType::kInt32 ? static_cast<const int32_t*>(idx.data)[i] : static_cast<const int64_t*>(idx.data)[i];
}

Expected<int64_t> checked_index(const TensorView& idx, int64_t i, int64_t dim, const char* op) {
  int64_t v = raw_index(idx, i);
  if (v < 0) v += dim;
  if (v < 0 || v >= dim)
    return invalid_input(std::string(op) + ": index " + std::to_string(raw_index(idx, i)) +
                         " is out of range for a dimension of " + std::to_string(dim));
  return v;
}

// The geometry shared by GatherND and ScatterND: data [b..., d..., s...] (batch dims, the k
// indexed dims, the slice), indices [b..., q..., k]. Element offsets of each (batch, tuple) pair.
struct NdGeometry {
  int64_t batch = 1;      // product of the batch dims
  int64_t tuples = 1;     // index tuples per batch entry (product of q...)
  int64_t k = 0;          // tuple length
  int64_t slice = 1;      // elements per indexed slice
  int64_t per_batch = 1;  // data elements per batch entry
};

Expected<NdGeometry> nd_geometry(const Dims& data, const Dims& idx, int64_t batch_dims, const char* op) {
  NdGeometry g;
  if (idx.empty()) return invalid_input(std::string(op) + ": indices must have rank >= 1");
  g.k = idx.back();
  if (batch_dims < 0 || batch_dims + g.k > static_cast<int64_t>(data.size()) || batch_dims >= static_cast<int64_t>(idx.size()))
    return invalid_input(std::string(op) + ": indices " + dims_str(idx) + " do not fit data " + dims_str(data));
  for (int64_t d = 0; d < batch_dims; ++d) g.batch *= data[d];
  for (size_t d = batch_dims; d + 1 < idx.size(); ++d) g.tuples *= idx[d];
  for (size_t d = batch_dims + g.k; d < data.size(); ++d) g.slice *= data[d];
  for (size_t d = batch_dims; d < data.size(); ++d) g.per_batch *= data[d];
  return g;
}

// Offset (within a batch entry) of the slice that tuple t of batch entry b names.
Expected<int64_t> nd_offset(const TensorView& idx, const Dims& data, const NdGeometry& g, int64_t batch_dims, int64_t b,
                            int64_t t, const char* op) {
  int64_t off = 0;
  const int64_t base = (b * g.tuples + t) * g.k;
  for (int64_t j = 0; j < g.k; ++j) {
    ASSIGN_OR_RETURN(const int64_t v, checked_index(idx, base + j, data[batch_dims + j], op));
    off = off * data[batch_dims + j] + v;
  }
  return off * g.slice;
}

}  // namespace

// (data, indices) -> out [b..., q..., s...]: the slices of data that the index tuples name.
template <typename T>
Status gather_nd(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "GatherND", 2, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& idx = call.inputs[1];
  const int64_t bd = call.attrs.get_int("batch_dims", 0);
  ASSIGN_OR_RETURN(const NdGeometry g, nd_geometry(x.dims, idx.dims, bd, "GatherND"));
  if (call.outputs[0].size() != g.batch * g.tuples * g.slice)
    return invalid_input("GatherND: output " + dims_str(call.outputs[0].dims) + " does not match the indices");
  const T* px = x.as<T>();
  T* py = call.outputs[0].as<T>();
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t t = 0; t < g.tuples; ++t) {
      ASSIGN_OR_RETURN(const int64_t off, nd_offset(idx, x.dims, g, bd, b, t, "GatherND"));
      std::copy_n(px + b * g.per_batch + off, g.slice, py + (b * g.tuples + t) * g.slice);
    }
  return Status::ok();
}

// (dY, indices) -> dData (the output's dims: the forward data's): dY added at the gathered slices.
template <typename T>
Status gather_nd_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "GatherNDGrad", 2, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& idx = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  const int64_t bd = call.attrs.get_int("batch_dims", 0);
  ASSIGN_OR_RETURN(const NdGeometry g, nd_geometry(dx.dims, idx.dims, bd, "GatherNDGrad"));
  if (dy.size() != g.batch * g.tuples * g.slice)
    return invalid_input("GatherNDGrad: dY " + dims_str(dy.dims) + " does not match the indices");
  const T* pdy = dy.as<T>();
  T* pdx = dx.as<T>();
  std::fill(pdx, pdx + dx.size(), T(0));
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t t = 0; t < g.tuples; ++t) {
      ASSIGN_OR_RETURN(const int64_t off, nd_offset(idx, dx.dims, g, bd, b, t, "GatherNDGrad"));
      T* dst = pdx + b * g.per_batch + off;
      const T* src = pdy + (b * g.tuples + t) * g.slice;
      for (int64_t e = 0; e < g.slice; ++e) dst[e] += src[e];
    }
  return Status::ok();
}

// (data, indices, updates) -> data with the named slices replaced by updates (in index order, so
// the last of repeated indices wins).
template <typename T>
Status scatter_nd(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ScatterND", 3, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& idx = call.inputs[1];
  const TensorView& upd = call.inputs[2];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims("ScatterND", "output", y.dims, x.dims));
  ASSIGN_OR_RETURN(const NdGeometry g, nd_geometry(x.dims, idx.dims, 0, "ScatterND"));
  if (upd.size() != g.tuples * g.slice)
    return invalid_input("ScatterND: updates " + dims_str(upd.dims) + " do not match the indices");
  T* py = y.as<T>();
  if (py != x.as<T>()) std::copy_n(x.as<T>(), x.size(), py);
  const T* pu = upd.as<T>();
  for (int64_t t = 0; t < g.tuples; ++t) {
    ASSIGN_OR_RETURN(const int64_t off, nd_offset(idx, x.dims, g, 0, 0, t, "ScatterND"));
    std::copy_n(pu + t * g.slice, g.slice, py + off);
  }
  return Status::ok();
}

// (data, indices, updates) -> data with out[i with its axis coordinate replaced by indices[i]] =
// updates[i].
template <typename T>
Status scatter_elements(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ScatterElements", 3, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& idx = call.inputs[1];
  const TensorView& upd = call.inputs[2];
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(check_same_dims("ScatterElements", "output", y.dims, x.dims));
  RETURN_IF_ERROR(check_same_dims("ScatterElements", "updates", upd.dims, idx.dims));
  const int64_t r = x.rank();
  if (idx.rank() != r) return invalid_input("ScatterElements: indices and data differ in rank");
  int64_t axis = call.attrs.get_int("_axis", 0);
  if (axis < 0 || axis >= r) return invalid_input("ScatterElements: axis out of range");
  const Dims xs = row_major_strides(x.dims);
  T* py = y.as<T>();
  if (py != x.as<T>()) std::copy_n(x.as<T>(), x.size(), py);
  const T* pu = upd.as<T>();
  std::vector<int64_t> coord(r, 0);
  for (int64_t i = 0; i < idx.size(); ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) {
      if (d == axis) {
        ASSIGN_OR_RETURN(const int64_t v, checked_index(idx, i, x.dims[d], "ScatterElements"));
        off += v * xs[d];
      } else {
        off += coord[d] * xs[d];
      }
    }
    py[off] = pu[i];
    for (int64_t d = r - 1; d >= 0 && ++coord[d] == idx.dims[d]; --d) coord[d] = 0;
  }
  return Status::ok();
}

#define PT_INSTANTIATE(name, T) template Status name<T>(const KernelCall& call);
#define PT_ALL(name)          \
  PT_INSTANTIATE(name, float) \
  PT_INSTANTIATE(name, double) PT_INSTANTIATE(name, int64_t) PT_INSTANTIATE(name, int32_t) PT_INSTANTIATE(name, bool)
PT_ALL(gather_nd)
PT_ALL(scatter_nd)
PT_ALL(scatter_elements)
PT_INSTANTIATE(gather_nd_grad, float)
PT_INSTANTIATE(gather_nd_grad, double)
#undef PT_ALL
#undef PT_INSTANTIATE

}  // namespace pt::cpu
