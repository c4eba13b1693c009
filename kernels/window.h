// Window geometry of Conv and the pooling ops, shared by their shape functions (which resolve
// auto_pad and ceil_mode into explicit attributes) and their CPU kernels (which read only those).
// Spatial dims are right-aligned into three slots (D, H, W), unused leading slots being 1, so that
// 1-D, 2-D and 3-D windows run through the same loops.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/attribute.h"
#include "core/dtype.h"
#include "core/status.h"

namespace pt {

constexpr int kMaxSpatial = 3;

struct Window {
  int nd = 0;                      // spatial rank of the op (1..3)
  int64_t n = 1, c = 1;            // batch and channels of the input
  using Ext = std::array<int64_t, kMaxSpatial>;
  Ext in{1, 1, 1}, out{1, 1, 1};   // spatial extents of input and output
  Ext k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1};  // kernel, stride, dilation
  Ext pb{0, 0, 0}, pe{0, 0, 0};    // padding at the begin / end of each dim

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};

// Output extent of one dim: floor (or ceil) of (in + pads - dilated kernel) / stride, plus one.
// In ceil mode a last window that would start in the end padding is dropped (as PyTorch does).
inline int64_t window_out_extent(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                                 bool ceil_mode) {
  const int64_t span = in + pb + pe - (d * (k - 1) + 1);
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pb) --out;
  return out;
}

// Reads the normalised attributes (kernel_shape, strides, dilations, pads: explicit, auto_pad
// already resolved) for input dims `x` ([N, C, spatial...], 1 to 3 spatial dims). `kernel` gives
// the kernel extents when the op has no kernel_shape attribute (Conv: from W's dims; null
// otherwise). Fills `w->out` from the formula; errors name `op`.
inline Status window_from_attrs(const char* op, const AttrMap& attrs, const Dims& x, const Dims* kernel,
                                bool ceil_mode, Window* w) {
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank < 3 || rank > 2 + kMaxSpatial)
    return unsupported(std::string(op) + ": input " + dims_str(x) +
                       " must be [N, C, D1...] with 1 to 3 spatial dims");
  *w = Window{};
  w->nd = static_cast<int>(rank - 2);
  w->n = x[0];
  w->c = x[1];
  const int nd = w->nd, off = kMaxSpatial - nd;
  std::vector<int64_t> ks = attrs.get_ints("kernel_shape");
  if (ks.empty() && kernel) ks.assign(kernel->begin(), kernel->end());
  const std::vector<int64_t> ss = attrs.get_ints("strides", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> ds = attrs.get_ints("dilations", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> ps = attrs.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  auto bad = [&](const char* what, size_t got, size_t want) {
    return invalid_input(std::string(op) + ": " + what + " has " + std::to_string(got) + " entries, the input " +
                         dims_str(x) + " needs " + std::to_string(want));
  };
  if (ks.size() != static_cast<size_t>(nd)) return bad("kernel_shape", ks.size(), nd);
  if (ss.size() != static_cast<size_t>(nd)) return bad("strides", ss.size(), nd);
  if (ds.size() != static_cast<size_t>(nd)) return bad("dilations", ds.size(), nd);
  if (ps.size() != static_cast<size_t>(2 * nd)) return bad("pads", ps.size(), 2 * nd);
  for (int i = 0; i < nd; ++i) {
    const int j = off + i;
    w->in[j] = x[2 + i];
    w->k[j] = ks[i];
    w->s[j] = ss[i];
    w->d[j] = ds[i];
    w->pb[j] = ps[i];
    w->pe[j] = ps[nd + i];
    if (w->k[j] < 1 || w->s[j] < 1 || w->d[j] < 1 || w->pb[j] < 0 || w->pe[j] < 0)
      return invalid_input(std::string(op) + ": kernel_shape, strides and dilations must be positive and pads "
                           "non-negative");
    w->out[j] = window_out_extent(w->in[j], w->k[j], w->s[j], w->d[j], w->pb[j], w->pe[j], ceil_mode);
    if (w->out[j] < 1)
      return invalid_input(std::string(op) + ": the (dilated) kernel is larger than the padded input " + dims_str(x));
  }
  return Status::ok();
}

// The [N, C_out, out...] dims of a window's output.
inline Dims window_output_dims(const Window& w, int64_t c_out) {
  Dims d = {w.n, c_out};
  for (int i = kMaxSpatial - w.nd; i < kMaxSpatial; ++i) d.push_back(w.out[i]);
  return d;
}

}  // namespace pt
