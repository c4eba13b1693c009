// Pooling: MaxPool (optional int64 Indices output, storage_order), AveragePool (count_include_pad),
// GlobalAveragePool, GlobalMaxPool, and their backward ops MaxPoolGrad (dY, X) -> dX,
// AveragePoolGrad (dY) -> dX, GlobalAveragePoolGrad (dY) -> dX, GlobalMaxPoolGrad (dY, X) -> dX.
// Windows come from kernels/window.h (pads explicit; ceil_mode only decides the output extent,
// which the caller's output dims carry). Threads own (n, c) planes.
// Max ties: the first maximum in the window's row-major scan wins, in the forward and in
// MaxPoolGrad alike (the backward recomputes the choice from X), so the subgradient is the one
// of the value the forward returned. Padding never wins; NaN never replaces a number.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/checks/pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/window.h"

namespace pt::cpu {
namespace {

// Valid kernel offsets [lo, hi) of output coordinate o along dim j: 0 <= o*s - pb + k*d < in.
inline void k_range(const Window& w, int j, int64_t o, int64_t* lo, int64_t* hi) {
  const int64_t start = o * w.s[j] - w.pb[j];
  const int64_t d = w.d[j];
  int64_t a = start >= 0 ? 0 : (-start + d - 1) / d;
  int64_t b = w.in[j] - start <= 0 ? 0 : (w.in[j] - start + d - 1) / d;
  *lo = std::min(a, w.k[j]);
  *hi = std::min(b, w.k[j]);
  if (*hi < *lo) *hi = *lo;
}

// Calls fn(o, first_in_index, lo[3], hi[3]) for every output position of one plane; the input
// index of offset (kd, kh, kw) is first + (kd*d0*in1 + kh*d1)*in2 + kw*d2 (first may be negative).
template <typename Fn>
inline void for_each_window(const Window& w, Fn&& fn) {
  int64_t o = 0;
  int64_t lo[3], hi[3];
  for (int64_t od = 0; od < w.out[0]; ++od) {
    k_range(w, 0, od, &lo[0], &hi[0]);
    for (int64_t oh = 0; oh < w.out[1]; ++oh) {
      k_range(w, 1, oh, &lo[1], &hi[1]);
      for (int64_t ow = 0; ow < w.out[2]; ++ow, ++o) {
        k_range(w, 2, ow, &lo[2], &hi[2]);
        const int64_t first = ((od * w.s[0] - w.pb[0]) * w.in[1] + (oh * w.s[1] - w.pb[1])) * w.in[2] +
                              (ow * w.s[2] - w.pb[2]);
        fn(o, first, lo, hi);
      }
    }
  }
}

// Index (within the plane) of the first maximum of a window, or -1 when it holds no input.
template <typename T>
inline int64_t window_argmax(const Window& w, const T* x, int64_t first, const int64_t* lo, const int64_t* hi) {
  int64_t arg = -1;
  T best = -std::numeric_limits<T>::infinity();
  for (int64_t kd = lo[0]; kd < hi[0]; ++kd)
    for (int64_t kh = lo[1]; kh < hi[1]; ++kh) {
      const int64_t row = first + (kd * w.d[0] * w.in[1] + kh * w.d[1]) * w.in[2];
      for (int64_t kw = lo[2]; kw < hi[2]; ++kw) {
        const int64_t i = row + kw * w.d[2];
        if (arg < 0 || x[i] > best) {
          best = x[i];
          arg = i;
        }
      }
    }
  return arg;
}

// Elements AveragePool divides by: the valid ones, or with count_include_pad every position of
// the window inside the padded input.
inline int64_t avg_count(const Window& w, int64_t o_linear, const int64_t* lo, const int64_t* hi,
                         bool include_pad) {
  if (!include_pad) return (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
  const int64_t oc[3] = {o_linear / (w.out[1] * w.out[2]), (o_linear / w.out[2]) % w.out[1], o_linear % w.out[2]};
  int64_t cnt = 1;
  for (int j = 0; j < 3; ++j) {
    const int64_t start = oc[j] * w.s[j] - w.pb[j];
    int64_t c = 0;
    for (int64_t k = 0; k < w.k[j]; ++k) {
      const int64_t i = start + k * w.d[j];
      c += i >= -w.pb[j] && i < w.in[j] + w.pe[j];
    }
    cnt *= c;
  }
  return cnt;
}

// Planar windows without dilation (1-D and 2-D pooling as CNNs use it): the window bounds of
// every output row and column are computed once per call, not per output and plane. The scan
// order and the comparison are window_argmax's, so the chosen maximum is the same.
struct PlanarWindows {
  std::vector<int64_t> h0, h1, w0, w1;  // [oh] / [ow]: input rows / columns [lo, hi) of the window
};
inline bool planar(const Window& w) {
  return w.k[0] == 1 && w.in[0] == 1 && w.out[0] == 1 && w.pb[0] == 0 && w.d[1] == 1 && w.d[2] == 1;
}
inline PlanarWindows planar_windows(const Window& w) {
  PlanarWindows p;
  for (int64_t oh = 0; oh < w.out[1]; ++oh) {
    const int64_t a = oh * w.s[1] - w.pb[1];
    p.h0.push_back(std::clamp<int64_t>(a, 0, w.in[1]));
    p.h1.push_back(std::clamp<int64_t>(a + w.k[1], p.h0.back(), w.in[1]));
  }
  for (int64_t ow = 0; ow < w.out[2]; ++ow) {
    const int64_t a = ow * w.s[2] - w.pb[2];
    p.w0.push_back(std::clamp<int64_t>(a, 0, w.in[2]));
    p.w1.push_back(std::clamp<int64_t>(a + w.k[2], p.w0.back(), w.in[2]));
  }
  return p;
}
// Calls fn(o, argmax index within the plane or -1) for every output of one plane.
template <typename T, typename Fn>
inline void planar_argmax(const Window& w, const PlanarWindows& p, const T* x, Fn&& fn) {
  const int64_t W = w.in[2], OW = w.out[2];
  for (int64_t oh = 0; oh < w.out[1]; ++oh)
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t h0 = p.h0[oh], h1 = p.h1[oh], w0 = p.w0[ow], w1 = p.w1[ow];
      if (h0 == h1 || w0 == w1) {
        fn(oh * OW + ow, int64_t{-1});
        continue;
      }
      // The first element starts the scan (as arg < 0 does in window_argmax); selects, not
      // branches, for the rest: the comparisons are data-dependent.
      int64_t arg = h0 * W + w0;
      T best = x[arg];
      for (int64_t ih = h0; ih < h1; ++ih) {
        const T* row = x + ih * W;
        for (int64_t iw = w0; iw < w1; ++iw) {
          const T v = row[iw];
          const bool gt = v > best;
          best = gt ? v : best;
          arg = gt ? ih * W + iw : arg;
        }
      }
      fn(oh * OW + ow, arg);
    }
}

inline bool par_planes(const Window& w) { return w.n * w.c > 1 && w.n * w.c * w.in_size() > kParallelThreshold; }

}  // namespace

template <typename T>
Status max_pool(const KernelCall& call) {
  Window w;
  RETURN_IF_ERROR(kernels::check_max_pool(call, &w));
  const TensorView& x = call.inputs[0];   // (N, C, in...)
  const TensorView& y = call.outputs[0];  // (N, C, out...)
  // (N, C, out...) flat input indices
  int64_t* idx = call.outputs.size() > 1 && call.outputs[1].data ? call.outputs[1].as<int64_t>() : nullptr;
  const bool col_major = call.attrs.get_int("storage_order", 0) != 0;
  const T* px = x.as<T>();
  T* py = y.as<T>();
  const int64_t in = w.in_size(), out = w.out_size();
  if (!idx && planar(w)) {
    const PlanarWindows pw = planar_windows(w);
#pragma omp parallel for if (par_planes(w))
    for (int64_t p = 0; p < w.n * w.c; ++p) {
      const T* xp = px + p * in;
      T* yp = py + p * out;
      planar_argmax(w, pw, xp, [&](int64_t o, int64_t a) { yp[o] = a < 0 ? -std::numeric_limits<T>::infinity() : xp[a]; });
    }
    return Status::ok();
  }
#pragma omp parallel for if (par_planes(w))
  for (int64_t p = 0; p < w.n * w.c; ++p) {
    const T* xp = px + p * in;
    T* yp = py + p * out;
    for_each_window(w, [&](int64_t o, int64_t first, const int64_t* lo, const int64_t* hi) {
      const int64_t a = window_argmax(w, xp, first, lo, hi);
      yp[o] = a < 0 ? -std::numeric_limits<T>::infinity() : xp[a];
      if (idx) {
        int64_t flat = a;
        if (col_major && a >= 0) {
          const int64_t id = a / (w.in[1] * w.in[2]), ih = (a / w.in[2]) % w.in[1], iw = a % w.in[2];
          flat = id + w.in[0] * (ih + w.in[1] * iw);
        }
        idx[p * out + o] = a < 0 ? -1 : p * in + flat;
      }
    });
  }
  return Status::ok();
}

template <typename T>
Status max_pool_grad(const KernelCall& call) {
  Window w;
  RETURN_IF_ERROR(kernels::check_max_pool_grad(call, &w));
  const TensorView& dy = call.inputs[0];  // (N, C, out...)
  const TensorView& x = call.inputs[1];   // (N, C, in...)
  const TensorView& dx = call.outputs[0];  // (N, C, in...)
  const T* px = x.as<T>();
  const T* pdy = dy.as<T>();
  T* pdx = dx.as<T>();
  const int64_t in = w.in_size(), out = w.out_size();
  if (planar(w)) {
    const PlanarWindows pw = planar_windows(w);
#pragma omp parallel for if (par_planes(w))
    for (int64_t p = 0; p < w.n * w.c; ++p) {
      const T* xp = px + p * in;
      const T* dyp = pdy + p * out;
      T* dxp = pdx + p * in;
      for (int64_t i = 0; i < in; ++i) dxp[i] = T(0);
      planar_argmax(w, pw, xp, [&](int64_t o, int64_t a) {
        if (a >= 0) dxp[a] += dyp[o];
      });
    }
    return Status::ok();
  }
#pragma omp parallel for if (par_planes(w))
  for (int64_t p = 0; p < w.n * w.c; ++p) {
    const T* xp = px + p * in;
    const T* dyp = pdy + p * out;
    T* dxp = pdx + p * in;
    for (int64_t i = 0; i < in; ++i) dxp[i] = T(0);
    for_each_window(w, [&](int64_t o, int64_t first, const int64_t* lo, const int64_t* hi) {
      const int64_t a = window_argmax(w, xp, first, lo, hi);
      if (a >= 0) dxp[a] += dyp[o];
    });
  }
  return Status::ok();
}

template <typename T>
Status average_pool(const KernelCall& call) {
  Window w;
  RETURN_IF_ERROR(kernels::check_average_pool(call, &w));
  const TensorView& x = call.inputs[0];   // (N, C, in...)
  const TensorView& y = call.outputs[0];  // (N, C, out...)
  const bool include_pad = call.attrs.get_int("count_include_pad", 0) != 0;
  const T* px = x.as<T>();
  T* py = y.as<T>();
  const int64_t in = w.in_size(), out = w.out_size();
#pragma omp parallel for if (par_planes(w))
  for (int64_t p = 0; p < w.n * w.c; ++p) {
    const T* xp = px + p * in;
    T* yp = py + p * out;
    for_each_window(w, [&](int64_t o, int64_t first, const int64_t* lo, const int64_t* hi) {
      T s = 0;
      for (int64_t kd = lo[0]; kd < hi[0]; ++kd)
        for (int64_t kh = lo[1]; kh < hi[1]; ++kh) {
          const T* row = xp + first + (kd * w.d[0] * w.in[1] + kh * w.d[1]) * w.in[2];
          for (int64_t kw = lo[2]; kw < hi[2]; ++kw) s += row[kw * w.d[2]];
        }
      const int64_t cnt = avg_count(w, o, lo, hi, include_pad);
      yp[o] = cnt > 0 ? s / static_cast<T>(cnt) : T(0);
    });
  }
  return Status::ok();
}

template <typename T>
Status average_pool_grad(const KernelCall& call) {
  Window w;
  RETURN_IF_ERROR(kernels::check_average_pool_grad(call, &w));
  const TensorView& dy = call.inputs[0];   // (N, C, out...)
  const TensorView& dx = call.outputs[0];  // (N, C, in...)
  const bool include_pad = call.attrs.get_int("count_include_pad", 0) != 0;
  const T* pdy = dy.as<T>();
  T* pdx = dx.as<T>();
  const int64_t in = w.in_size(), out = w.out_size();
#pragma omp parallel for if (par_planes(w))
  for (int64_t p = 0; p < w.n * w.c; ++p) {
    const T* dyp = pdy + p * out;
    T* dxp = pdx + p * in;
    for (int64_t i = 0; i < in; ++i) dxp[i] = T(0);
    for_each_window(w, [&](int64_t o, int64_t first, const int64_t* lo, const int64_t* hi) {
      const int64_t cnt = avg_count(w, o, lo, hi, include_pad);
      if (cnt == 0) return;
      const T g = dyp[o] / static_cast<T>(cnt);
      for (int64_t kd = lo[0]; kd < hi[0]; ++kd)
        for (int64_t kh = lo[1]; kh < hi[1]; ++kh) {
          T* row = dxp + first + (kd * w.d[0] * w.in[1] + kh * w.d[1]) * w.in[2];
          for (int64_t kw = lo[2]; kw < hi[2]; ++kw) row[kw * w.d[2]] += g;
        }
    });
  }
  return Status::ok();
}

template <typename T>
Status global_average_pool(const KernelCall& call) {
  int64_t planes, size;
  RETURN_IF_ERROR(kernels::check_global_pool(call, "GlobalAveragePool", &planes, &size));
  const T* px = call.inputs[0].as<T>();  // (planes, size)
  T* py = call.outputs[0].as<T>();       // (planes)
#pragma omp parallel for if (planes > 1 && planes * size > kParallelThreshold)
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = px + p * size;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < size; ++i) s += xp[i];
    py[p] = size ? s / static_cast<T>(size) : T(0);
  }
  return Status::ok();
}

template <typename T>
Status global_average_pool_grad(const KernelCall& call) {
  int64_t planes, size;
  RETURN_IF_ERROR(kernels::check_global_average_pool_grad(call, &planes, &size));
  const T* pdy = call.inputs[0].as<T>();  // (planes)
  T* pdx = call.outputs[0].as<T>();       // (planes, size)
#pragma omp parallel for if (planes > 1 && planes * size > kParallelThreshold)
  for (int64_t p = 0; p < planes; ++p) {
    const T g = pdy[p] / static_cast<T>(size);
    T* dxp = pdx + p * size;
#pragma omp simd
    for (int64_t i = 0; i < size; ++i) dxp[i] = g;
  }
  return Status::ok();
}

namespace {

template <typename T>
inline int64_t plane_argmax(const T* x, int64_t size) {
  int64_t arg = size ? 0 : -1;
  for (int64_t i = 1; i < size; ++i)
    if (x[i] > x[arg]) arg = i;
  return arg;
}

}  // namespace

template <typename T>
Status global_max_pool(const KernelCall& call) {
  int64_t planes, size;
  RETURN_IF_ERROR(kernels::check_global_pool(call, "GlobalMaxPool", &planes, &size));
  const T* px = call.inputs[0].as<T>();  // (planes, size)
  T* py = call.outputs[0].as<T>();       // (planes)
#pragma omp parallel for if (planes > 1 && planes * size > kParallelThreshold)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t a = plane_argmax(px + p * size, size);
    py[p] = a < 0 ? -std::numeric_limits<T>::infinity() : px[p * size + a];
  }
  return Status::ok();
}

template <typename T>
Status global_max_pool_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "GlobalMaxPoolGrad", 2, 1));
  int64_t planes, size;
  RETURN_IF_ERROR(check_same_dims("GlobalMaxPoolGrad", "output", call.outputs[0].dims, call.inputs[1].dims));
  RETURN_IF_ERROR(
      kernels::global_pool_geometry("GlobalMaxPoolGrad", call.inputs[1].dims, call.inputs[0].dims, &planes, &size));
  const T* pdy = call.inputs[0].as<T>();  // (planes)
  const T* px = call.inputs[1].as<T>();   // (planes, size)
  T* pdx = call.outputs[0].as<T>();       // (planes, size)
#pragma omp parallel for if (planes > 1 && planes * size > kParallelThreshold)
  for (int64_t p = 0; p < planes; ++p) {
    T* dxp = pdx + p * size;
    for (int64_t i = 0; i < size; ++i) dxp[i] = T(0);
    const int64_t a = plane_argmax(px + p * size, size);
    if (a >= 0) dxp[a] = pdy[p];
  }
  return Status::ok();
}

template Status max_pool<float>(const KernelCall&);
template Status max_pool<double>(const KernelCall&);
template Status max_pool_grad<float>(const KernelCall&);
template Status max_pool_grad<double>(const KernelCall&);
template Status average_pool<float>(const KernelCall&);
template Status average_pool<double>(const KernelCall&);
template Status average_pool_grad<float>(const KernelCall&);
template Status average_pool_grad<double>(const KernelCall&);
template Status global_average_pool<float>(const KernelCall&);
template Status global_average_pool<double>(const KernelCall&);
template Status global_average_pool_grad<float>(const KernelCall&);
template Status global_average_pool_grad<double>(const KernelCall&);
template Status global_max_pool<float>(const KernelCall&);
template Status global_max_pool<double>(const KernelCall&);
template Status global_max_pool_grad<float>(const KernelCall&);
template Status global_max_pool_grad<double>(const KernelCall&);

}  // namespace pt::cpu
