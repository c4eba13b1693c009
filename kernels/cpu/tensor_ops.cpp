// Data-movement CPU kernels: Concat, Split, Slice (and SliceGrad), Expand, Tile, Pad (and PadGrad),
// Gather (and the scatter-add GatherGrad), Where, the comparisons Equal/Less/Greater, Not and Cast.
// They run on activations; with constant inputs the importer folds the same ops instead. Geometry
// comes from attributes the shape functions normalised (`_starts`, `_steps`, `_split`, `_repeats`,
// `_pads`, non-negative `axis`), so the kernels never read shape inputs.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/checks/pad.h"
#include "kernels/checks/tensor.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {
namespace {

// Per dim, the input coordinate each padded coordinate reads (-1: the constant value).
std::vector<std::vector<int64_t>> pad_maps(const Dims& in, const Dims& out, const std::vector<int64_t>& pads,
                                           const std::string& mode) {
  const size_t r = in.size();
  std::vector<std::vector<int64_t>> maps(r);
  for (size_t k = 0; k < r; ++k) {
    const int64_t d = in[k];
    maps[k].resize(static_cast<size_t>(out[k]));
    for (int64_t c = 0; c < out[k]; ++c) {
      int64_t s = c - pads[k];
      if (s < 0 || s >= d) {
        if (mode == "edge") {
          s = d == 0 ? -1 : std::clamp<int64_t>(s, 0, d - 1);
        } else if (mode == "reflect") {
          if (d == 1) {
            s = 0;
          } else {
            const int64_t period = 2 * (d - 1);
            s = ((s % period) + period) % period;
            if (s >= d) s = period - s;
          }
        } else {
          s = -1;
        }
      }
      maps[k][c] = s;
    }
  }
  return maps;
}


template <typename I>
Status gather_index(const void* idx, int64_t j, int64_t len, int64_t* k) {
  int64_t v = static_cast<const I*>(idx)[j];
  if (v < 0) v += len;
  if (v < 0 || v >= len)
    return invalid_input("Gather: index " + std::to_string(static_cast<const I*>(idx)[j]) + " out of range [-" +
                         std::to_string(len) + ", " + std::to_string(len) + ")");
  *k = v;
  return Status::ok();
}

// The gather indices as int64, range-checked and made non-negative.
Status gather_indices(const char* op, const TensorView& idx, int64_t len, std::vector<int64_t>* out) {
  out->resize(static_cast<size_t>(idx.size()));
  for (int64_t j = 0; j < idx.size(); ++j) {
    if (idx.dtype == DType::kInt64) {
      RETURN_IF_ERROR(gather_index<int64_t>(idx.data, j, len, &(*out)[j]));
    } else if (idx.dtype == DType::kInt32) {
      RETURN_IF_ERROR(gather_index<int32_t>(idx.data, j, len, &(*out)[j]));
    } else {
      return invalid_input(std::string(op) + ": indices must be int64 or int32, are " + dtype_name(idx.dtype));
    }
  }
  return Status::ok();
}

template <typename T>
Status where_typed(const KernelCall& call) {
  const TensorView& c = call.inputs[0];
  const TensorView& a = call.inputs[1];
  const TensorView& b = call.inputs[2];
  const TensorView& y = call.outputs[0];
  const bool* pc = c.as<bool>();
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  T* py = y.as<T>();
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  const StridedLoop<3> loop(y.dims, {broadcast_strides(c.dims, y.dims), broadcast_strides(a.dims, y.dims),
                                     broadcast_strides(b.dims, y.dims)});
  const int64_t inner = loop.inner(), sc = loop.inner_stride(0), sa = loop.inner_stride(1),
                sb = loop.inner_stride(2);
  loop.for_each_row(n > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 3>& o) {
    T* yr = py + row * inner;
    for (int64_t j = 0; j < inner; ++j) yr[j] = pc[o[0] + j * sc] ? pa[o[1] + j * sa] : pb[o[2] + j * sb];
  });
  return Status::ok();
}

template <typename T, typename F>
Status compare(const KernelCall& call, const char* op, F f) {
  Dims bd;
  RETURN_IF_ERROR(kernels::check_compare(call, op, &bd));
  const TensorView& a = call.inputs[0];
  const TensorView& b = call.inputs[1];
  const TensorView& y = call.outputs[0];
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  bool* py = y.as<bool>();
  const int64_t n = y.size();
  if (n == 0) return Status::ok();
  const StridedLoop<2> loop(bd, {broadcast_strides(a.dims, bd), broadcast_strides(b.dims, bd)});
  const int64_t inner = loop.inner(), sa = loop.inner_stride(0), sb = loop.inner_stride(1);
  loop.for_each_row(n > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 2>& o) {
    bool* yr = py + row * inner;
    for (int64_t j = 0; j < inner; ++j) yr[j] = f(pa[o[0] + j * sa], pb[o[1] + j * sb]);
  });
  return Status::ok();
}

template <typename In, typename Out>
void cast_loop(const void* src, void* dst, int64_t n) {
  const In* s = static_cast<const In*>(src);
  Out* d = static_cast<Out*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<Out, bool>) d[i] = s[i] != In(0);
    else d[i] = static_cast<Out>(s[i]);
  }
}

template <typename In>
bool cast_from(const void* src, DType to, void* dst, int64_t n) {
  switch (to) {
    case DType::kFloat32: cast_loop<In, float>(src, dst, n); return true;
    case DType::kFloat64: cast_loop<In, double>(src, dst, n); return true;
    case DType::kInt64: cast_loop<In, int64_t>(src, dst, n); return true;
    case DType::kInt32: cast_loop<In, int32_t>(src, dst, n); return true;
    case DType::kInt8: cast_loop<In, int8_t>(src, dst, n); return true;
    case DType::kUint8: cast_loop<In, uint8_t>(src, dst, n); return true;
    case DType::kBool: cast_loop<In, bool>(src, dst, n); return true;
    case DType::kBFloat16:  // float32 -> bfloat16 only (--precision bf16's casts)
      if constexpr (!std::is_same_v<In, float>) return false;
      else f32_to_bf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
      return true;
    default: return false;
  }
}

}  // namespace

bool cast_supported(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt64 || t == DType::kInt32 ||
         t == DType::kInt8 || t == DType::kUint8 || t == DType::kBool;
}

template <typename T>
Status concat(const KernelCall& call) {
  kernels::PartsGeometry g;
  RETURN_IF_ERROR(kernels::check_concat(call, &g));
  const int64_t outer = g.outer, inner = g.inner, ylen = g.len;
  T* py = call.outputs[0].as<T>();  // (outer, ylen, inner)
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const TensorView& x = call.inputs[i];
    const int64_t len = x.dims[g.axis], off = g.offset[i];
    const T* px = x.as<T>();  // (outer, len, inner)
    const int64_t row = len * inner;
#pragma omp parallel for if (outer * row > kParallelThreshold && outer > 1)
    for (int64_t a = 0; a < outer; ++a) std::copy(px + a * row, px + (a + 1) * row, py + (a * ylen + off) * inner);
  }
  return Status::ok();
}

template <typename T>
Status split(const KernelCall& call) {
  kernels::PartsGeometry g;
  RETURN_IF_ERROR(kernels::check_split(call, &g));
  const int64_t outer = g.outer, inner = g.inner, xlen = g.len;
  const T* px = call.inputs[0].as<T>();  // (outer, xlen, inner)
  for (size_t i = 0; i < call.outputs.size(); ++i) {
    const TensorView& y = call.outputs[i];
    const int64_t len = y.dims[g.axis], off = g.offset[i];
    if (y.data) {
      T* py = y.as<T>();  // (outer, len, inner)
      const int64_t row = len * inner;
#pragma omp parallel for if (outer * row > kParallelThreshold && outer > 1)
      for (int64_t a = 0; a < outer; ++a)
        std::copy(px + (a * xlen + off) * inner, px + (a * xlen + off + len) * inner, py + a * row);
    }
  }
  return Status::ok();
}

template <typename T>
Status slice(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Slice", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  int64_t base;
  Dims st;
  RETURN_IF_ERROR(kernels::slice_geometry("Slice", x.dims, y.dims, call.attrs, &base, &st));
  const T* px = x.as<T>();
  T* py = y.as<T>();
  if (y.size() == 0) return Status::ok();
  const StridedLoop<1> loop(y.dims, {st});
  const int64_t inner = loop.inner(), si = loop.inner_stride(0);
  loop.for_each_row(y.size() > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 1>& o) {
    const T* src = px + base + o[0];
    T* dst = py + row * inner;
    if (si == 1) std::copy(src, src + inner, dst);
    else for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * si];
  });
  return Status::ok();
}

// (dY[, Acc]) -> dX: Acc (the gradient accumulated so far, the input's dims), or zeros, with dY added
// where the slice read. The autodiff hands a second slice of the same tensor the first one's
// gradient as Acc instead of adding two mostly-zero tensors (importer/training.cpp).
template <typename T>
Status slice_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "SliceGrad", 1, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& dx = call.outputs[0];
  int64_t base;
  Dims st;
  RETURN_IF_ERROR(kernels::slice_geometry("SliceGrad", dx.dims, dy.dims, call.attrs, &base, &st));
  const bool acc = has_input(call, 1);
  if (acc) RETURN_IF_ERROR(check_same_dims("SliceGrad", "the accumulated gradient", call.inputs[1].dims, dx.dims));
  const T* pdy = dy.as<T>();
  T* pdx = dx.as<T>();
  if (acc) {
    const T* pacc = call.inputs[1].as<T>();
    std::copy(pacc, pacc + dx.size(), pdx);
  } else {
    std::fill(pdx, pdx + dx.size(), T(0));
  }
  if (dy.size() == 0) return Status::ok();
  const StridedLoop<1> loop(dy.dims, {st});
  const int64_t inner = loop.inner(), si = loop.inner_stride(0);
  loop.for_each_row(dy.size() > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 1>& o) {
    T* dst = pdx + base + o[0];
    const T* src = pdy + row * inner;
    if (acc) {
      for (int64_t j = 0; j < inner; ++j) dst[j * si] += src[j];
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j * si] = src[j];
    }
  });
  return Status::ok();
}

template <typename T>
Status expand(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_expand(call));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const T* px = x.as<T>();
  T* py = y.as<T>();
  if (y.size() == 0) return Status::ok();
  const StridedLoop<1> loop(y.dims, {broadcast_strides(x.dims, y.dims)});
  const int64_t inner = loop.inner(), si = loop.inner_stride(0);
  loop.for_each_row(y.size() > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 1>& o) {
    T* dst = py + row * inner;
    const T* src = px + o[0];
    if (si == 0) std::fill(dst, dst + inner, *src);
    else std::copy(src, src + inner, dst);
  });
  return Status::ok();
}

template <typename T>
Status tile(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Tile", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const std::vector<int64_t> rep = call.attrs.get_ints("_repeats");
  if (rep.size() != x.dims.size() || y.rank() != x.rank())
    return invalid_input("Tile: repeats do not match rank " + std::to_string(x.rank()));
  // Output [r0*d0, r1*d1, ...] seen as [r0, d0, r1, d1, ...]: a broadcast of the input.
  Dims od, st;
  const Dims rs = row_major_strides(x.dims);
  for (size_t k = 0; k < rep.size(); ++k) {
    if (y.dims[k] != rep[k] * x.dims[k]) return invalid_input("Tile: output dims do not match the repeats");
    od.push_back(rep[k]);
    od.push_back(x.dims[k]);
    st.push_back(0);
    st.push_back(rs[k]);
  }
  const T* px = x.as<T>();
  T* py = y.as<T>();
  if (y.size() == 0) return Status::ok();
  const StridedLoop<1> loop(od, {st});
  const int64_t inner = loop.inner(), si = loop.inner_stride(0);
  loop.for_each_row(y.size() > kParallelThreshold, [&](int64_t row, const std::array<int64_t, 1>& o) {
    T* dst = py + row * inner;
    const T* src = px + o[0];
    for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * si];
  });
  return Status::ok();
}

template <typename T>
Status pad(const KernelCall& call) {
  std::vector<int64_t> pads;
  std::string mode;
  RETURN_IF_ERROR(kernels::check_pad(call, &pads, &mode));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const T value = static_cast<T>(call.attrs.get_float("_value", 0.0f));
  const T* px = x.as<T>();
  T* py = y.as<T>();
  const int r = x.rank();
  if (y.size() == 0) return Status::ok();
  if (r == 0) {
    py[0] = px[0];
    return Status::ok();
  }
  const auto maps = pad_maps(x.dims, y.dims, pads, mode);
  const Dims rs = row_major_strides(x.dims);
  const int64_t inner = y.dims[r - 1], rows = y.size() / inner;
  const std::vector<int64_t>& last = maps[r - 1];
#pragma omp parallel for if (y.size() > kParallelThreshold)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, off = 0;
    bool valid = true;
    for (int k = r - 2; k >= 0; --k) {
      const int64_t s = maps[k][rem % y.dims[k]];
      rem /= y.dims[k];
      valid &= s >= 0;
      off += s * rs[k];
    }
    T* dst = py + row * inner;
    if (!valid) {
      std::fill(dst, dst + inner, value);
      continue;
    }
    for (int64_t j = 0; j < inner; ++j) dst[j] = last[j] >= 0 ? px[off + last[j]] : value;
  }
  return Status::ok();
}

// (dY) -> dX: every padded element's gradient added to the input element it copied.
template <typename T>
Status pad_grad(const KernelCall& call) {
  std::vector<int64_t> pads;
  std::string mode;
  RETURN_IF_ERROR(kernels::check_pad_grad(call, &pads, &mode));
  const TensorView& dy = call.inputs[0];
  const TensorView& dx = call.outputs[0];
  const T* pdy = dy.as<T>();
  T* pdx = dx.as<T>();
  std::fill(pdx, pdx + dx.size(), T(0));
  const int r = dx.rank();
  if (dy.size() == 0 || dx.size() == 0) return Status::ok();
  if (r == 0) {
    pdx[0] = pdy[0];
    return Status::ok();
  }
  const auto maps = pad_maps(dx.dims, dy.dims, pads, mode);
  const Dims rs = row_major_strides(dx.dims);
  const int64_t inner = dy.dims[r - 1], rows = dy.size() / inner;
  const std::vector<int64_t>& last = maps[r - 1];
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, off = 0;
    bool valid = true;
    for (int k = r - 2; k >= 0; --k) {
      const int64_t s = maps[k][rem % dy.dims[k]];
      rem /= dy.dims[k];
      valid &= s >= 0;
      off += s * rs[k];
    }
    if (!valid) continue;
    const T* src = pdy + row * inner;
    for (int64_t j = 0; j < inner; ++j)
      if (last[j] >= 0) pdx[off + last[j]] += src[j];
  }
  return Status::ok();
}

template <typename T>
Status gather(const KernelCall& call) {
  kernels::GatherGeometry g;
  RETURN_IF_ERROR(kernels::check_gather(call, "Gather", &g));
  const TensorView& d = call.inputs[0];
  const TensorView& idx = call.inputs[1];
  const TensorView& y = call.outputs[0];
  const int64_t outer = g.outer, inner = g.inner, len = g.len, ni = g.ni;
  std::vector<int64_t> k;
  RETURN_IF_ERROR(gather_indices("Gather", idx, len, &k));
  const T* pd = d.as<T>();  // (outer, len, inner)
  T* py = y.as<T>();        // (outer, ni, inner)
#pragma omp parallel for if (y.size() > kParallelThreshold)
  for (int64_t t = 0; t < outer * ni; ++t) {
    const int64_t o = t / ni, j = t % ni;
    const T* src = pd + (o * len + k[j]) * inner;
    std::copy(src, src + inner, py + t * inner);
  }
  return Status::ok();
}

// (dY, indices) -> dData: zeros of data's dims (the output's) with each gathered row's gradient
// added back; repeated indices accumulate.
template <typename T>
Status gather_grad(const KernelCall& call) {
  kernels::GatherGeometry g;
  RETURN_IF_ERROR(kernels::check_gather(call, "GatherGrad", &g));
  const TensorView& dy = call.inputs[0];
  const TensorView& idx = call.inputs[1];
  const TensorView& dd = call.outputs[0];
  const int64_t outer = g.outer, inner = g.inner, len = g.len, ni = g.ni;
  std::vector<int64_t> k;
  RETURN_IF_ERROR(gather_indices("GatherGrad", idx, len, &k));
  const T* pdy = dy.as<T>();  // (outer, ni, inner)
  T* pdd = dd.as<T>();        // (outer, len, inner)
  std::fill(pdd, pdd + dd.size(), T(0));
  // Threads own blocks of the inner dim, so repeated indices never race.
  const int64_t nblk = (inner + 63) / 64;
#pragma omp parallel for collapse(2) if (dy.size() > kParallelThreshold)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t c0 = b * 64, c1 = std::min(inner, c0 + 64);
      for (int64_t j = 0; j < ni; ++j) {
        const T* src = pdy + (o * ni + j) * inner;
        T* dst = pdd + (o * len + k[j]) * inner;
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      }
    }
  return Status::ok();
}

Status where_op(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_where(call));
  switch (call.outputs[0].dtype) {
    case DType::kFloat32: return where_typed<float>(call);
    case DType::kFloat64: return where_typed<double>(call);
    case DType::kInt64: return where_typed<int64_t>(call);
    case DType::kInt32: return where_typed<int32_t>(call);
    case DType::kBool: return where_typed<bool>(call);
    default: return internal_error("Where: check_where let a value type through");
  }
}

template <typename T>
Status equal(const KernelCall& call) {
  return compare<T>(call, "Equal", [](T a, T b) { return a == b; });
}
template <typename T>
Status less(const KernelCall& call) {
  return compare<T>(call, "Less", [](T a, T b) { return a < b; });
}
template <typename T>
Status greater(const KernelCall& call) {
  return compare<T>(call, "Greater", [](T a, T b) { return a > b; });
}

Status not_op(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_not(call));
  const bool* px = call.inputs[0].as<bool>();
  bool* py = call.outputs[0].as<bool>();
  for (int64_t i = 0; i < call.inputs[0].size(); ++i) py[i] = !px[i];
  return Status::ok();
}

Status cast_op(const KernelCall& call) {
  RETURN_IF_ERROR(kernels::check_cast(call));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const int64_t n = x.size();
  bool ok = false;
  switch (x.dtype) {
    case DType::kFloat32: ok = cast_from<float>(x.data, y.dtype, y.data, n); break;
    case DType::kFloat64: ok = cast_from<double>(x.data, y.dtype, y.data, n); break;
    case DType::kInt64: ok = cast_from<int64_t>(x.data, y.dtype, y.data, n); break;
    case DType::kInt32: ok = cast_from<int32_t>(x.data, y.dtype, y.data, n); break;
    case DType::kInt8: ok = cast_from<int8_t>(x.data, y.dtype, y.data, n); break;
    case DType::kUint8: ok = cast_from<uint8_t>(x.data, y.dtype, y.data, n); break;
    case DType::kBool: ok = cast_from<bool>(x.data, y.dtype, y.data, n); break;
    case DType::kBFloat16:  // bfloat16 -> float32 only (exact)
      ok = y.dtype == DType::kFloat32;
      if (ok) bf16_to_f32(static_cast<const uint16_t*>(x.data), static_cast<float*>(y.data), n);
      break;
    default: break;
  }
  if (!ok)
    return unsupported(std::string("Cast: ") + dtype_name(x.dtype) + " to " + dtype_name(y.dtype) +
                       " is not supported");
  return Status::ok();
}

#define PT_INSTANTIATE_MOVE(name)                        \
  template Status name<float>(const KernelCall& call);   \
  template Status name<double>(const KernelCall& call);  \
  template Status name<int64_t>(const KernelCall& call); \
  template Status name<int32_t>(const KernelCall& call); \
  template Status name<bool>(const KernelCall& call)

PT_INSTANTIATE_MOVE(concat);
PT_INSTANTIATE_MOVE(split);
PT_INSTANTIATE_MOVE(slice);
PT_INSTANTIATE_MOVE(expand);
PT_INSTANTIATE_MOVE(tile);
PT_INSTANTIATE_MOVE(gather);
template Status pad<float>(const KernelCall& call);
template Status pad<double>(const KernelCall& call);
template Status pad<int64_t>(const KernelCall& call);
template Status pad<int32_t>(const KernelCall& call);
template Status slice_grad<float>(const KernelCall& call);
template Status slice_grad<double>(const KernelCall& call);
template Status pad_grad<float>(const KernelCall& call);
template Status pad_grad<double>(const KernelCall& call);
template Status gather_grad<float>(const KernelCall& call);
template Status gather_grad<double>(const KernelCall& call);
template Status equal<float>(const KernelCall& call);
template Status equal<double>(const KernelCall& call);
template Status equal<int64_t>(const KernelCall& call);
template Status equal<int32_t>(const KernelCall& call);
template Status equal<bool>(const KernelCall& call);
template Status less<float>(const KernelCall& call);
template Status less<double>(const KernelCall& call);
template Status less<int64_t>(const KernelCall& call);
template Status less<int32_t>(const KernelCall& call);
template Status greater<float>(const KernelCall& call);
template Status greater<double>(const KernelCall& call);
template Status greater<int64_t>(const KernelCall& call);
template Status greater<int32_t>(const KernelCall& call);

#undef PT_INSTANTIATE_MOVE

}  // namespace pt::cpu
