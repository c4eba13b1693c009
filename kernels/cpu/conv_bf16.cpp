// Conv, ConvGradInput and ConvGradWeight on bfloat16 operands with float32 outputs (--precision
// bf16): X, W and dY bfloat16; Conv's bias and every output float32 (float32 accumulation). Each
// pass runs a oneDNN convolution primitive with bf16 src/weights/diff_dst and f32 dst/diff_src/
// diff_weights (AVX512-BF16 / AMX kernels), cached per thread, pass and shape, with oneDNN's
// preferred (blocked) layouts and reorders from and to the caller's plain tensors, as in the
// float32 path (kernels/cpu/conv.cpp). Shapes oneDNN refuses, and the single-output-position case
// the float32 path serves with one GEMM, widen the operands to float32 (exact) and run the float32
// kernel: products of two bfloat16 numbers are exact in float32, so both compute the same sums up
// to their order. Kept apart from conv.cpp so that its weight-reorder cache stays float32-only.
#include <dnnl.hpp>

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/checks/bf16.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/window.h"

namespace pt::cpu {
namespace {

struct Arg {
  int arg = 0;
  bool output = false;
  dnnl::memory user, inner;
  dnnl::reorder reorder;
  bool reordered = false;
  int slot = 0;
};

struct Prim {
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> exec_args;
  std::vector<Arg> args;  // in the order of run()'s pointers
};

void add_arg(Prim* e, int arg, const dnnl::memory::desc& user_md, const dnnl::memory::desc& prim_md, bool output) {
  Arg a;
  a.arg = arg;
  a.output = output;
  a.user = dnnl::memory(user_md, dnnl_engine(), DNNL_MEMORY_NONE);
  if (prim_md == user_md) {
    a.inner = a.user;
  } else {
    a.inner = dnnl::memory(prim_md, dnnl_engine(), DNNL_MEMORY_NONE);
    a.reorder = output ? dnnl::reorder(a.inner, a.user) : dnnl::reorder(a.user, a.inner);
    a.reordered = true;
    for (const Arg& b : e->args) a.slot += b.reordered;
  }
  e->args.push_back(std::move(a));
}

using Key = std::array<int64_t, 7 + 6 * kMaxSpatial>;

// The calling thread's primitive for (pass, shape), or nullptr when oneDNN has none (remembered).
Prim* prim_for(Pass pass, const ConvShape& cs) {
  thread_local std::map<Key, std::unique_ptr<Prim>> cache;
  const Window& w = cs.w;
  Key key{static_cast<int64_t>(pass), w.nd, w.n, w.c, cs.m, cs.g, cs.bias};
  size_t ki = 7;
  for (const auto* a : {&w.in, &w.k, &w.s, &w.d, &w.pb, &w.pe})
    for (int64_t v : *a) key[ki++] = v;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  using md = dnnl::memory::desc;
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const int off = kMaxSpatial - w.nd;
  dnnl::memory::dims xd = {w.n, w.c}, yd = {w.n, cs.m}, wd, strides, dil, pl, pr;
  if (cs.g > 1) wd = {cs.g, cs.m / cs.g, w.c / cs.g};
  else wd = {cs.m, w.c};
  for (int i = off; i < kMaxSpatial; ++i) {
    xd.push_back(w.in[i]);
    yd.push_back(w.out[i]);
    wd.push_back(w.k[i]);
    strides.push_back(w.s[i]);
    dil.push_back(w.d[i] - 1);
    pl.push_back(w.pb[i]);
    pr.push_back(w.pe[i]);
  }
  const tag act = w.nd == 1 ? tag::ncw : w.nd == 2 ? tag::nchw : tag::ncdhw;
  const tag wtag = cs.g > 1 ? (w.nd == 1 ? tag::goiw : w.nd == 2 ? tag::goihw : tag::goidhw)
                            : (w.nd == 1 ? tag::oiw : w.nd == 2 ? tag::oihw : tag::oidhw);
  // bf16 operands, f32 results; the forward's dst is f32 in every pass's hint.
  const md x16(xd, dt::bf16, act), x32(xd, dt::f32, act), y16(yd, dt::bf16, act), y32(yd, dt::f32, act);
  const md w16(wd, dt::bf16, wtag), w32(wd, dt::f32, wtag), b_md({cs.m}, dt::f32, tag::x);
  const md x16a(xd, dt::bf16, tag::any), x32a(xd, dt::f32, tag::any), y16a(yd, dt::bf16, tag::any),
      y32a(yd, dt::f32, tag::any), w16a(wd, dt::bf16, tag::any), w32a(wd, dt::f32, tag::any);
  auto entry = std::make_unique<Prim>();
  try {
    const auto algo = dnnl::algorithm::convolution_direct;
    const auto prop = dnnl::prop_kind::forward_training;
    auto fwd_d = cs.bias && pass == Pass::kForward
                     ? dnnl::convolution_forward::desc(prop, algo, x16a, w16a, b_md, y32a, strides, dil, pl, pr)
                     : dnnl::convolution_forward::desc(prop, algo, x16a, w16a, y32a, strides, dil, pl, pr);
    dnnl::convolution_forward::primitive_desc fwd_pd(fwd_d, dnnl_engine());
    switch (pass) {
      case Pass::kForward:
        entry->prim = dnnl::convolution_forward(fwd_pd);
        add_arg(entry.get(), DNNL_ARG_SRC, x16, fwd_pd.src_desc(), false);
        add_arg(entry.get(), DNNL_ARG_WEIGHTS, w16, fwd_pd.weights_desc(), false);
        if (cs.bias) add_arg(entry.get(), DNNL_ARG_BIAS, b_md, b_md, false);
        add_arg(entry.get(), DNNL_ARG_DST, y32, fwd_pd.dst_desc(), true);
        break;
      case Pass::kGradInput: {
        dnnl::convolution_backward_data::desc d(algo, x32a, w16a, y16a, strides, dil, pl, pr);
        dnnl::convolution_backward_data::primitive_desc pd(d, dnnl_engine(), fwd_pd);
        entry->prim = dnnl::convolution_backward_data(pd);
        add_arg(entry.get(), DNNL_ARG_DIFF_DST, y16, pd.diff_dst_desc(), false);
        add_arg(entry.get(), DNNL_ARG_WEIGHTS, w16, pd.weights_desc(), false);
        add_arg(entry.get(), DNNL_ARG_DIFF_SRC, x32, pd.diff_src_desc(), true);
        break;
      }
      case Pass::kGradWeight: {
        dnnl::convolution_backward_weights::desc d(algo, x16a, w32a, y16a, strides, dil, pl, pr);
        dnnl::convolution_backward_weights::primitive_desc pd(d, dnnl_engine(), fwd_pd);
        entry->prim = dnnl::convolution_backward_weights(pd);
        add_arg(entry.get(), DNNL_ARG_DIFF_DST, y16, pd.diff_dst_desc(), false);
        add_arg(entry.get(), DNNL_ARG_SRC, x16, pd.src_desc(), false);
        add_arg(entry.get(), DNNL_ARG_DIFF_WEIGHTS, w32, pd.diff_weights_desc(), true);
        break;
      }
    }
    // oneDNN's im2col + GEMM and reference convolutions are slower than the float32 path's jit
    // kernels (LeNet's first layer, one input channel: backward weights by gemm:jit took 4 ms per
    // step against 0.6 ms in float32): such shapes run the widened float32 path instead.
    const char* info = nullptr;
    dnnl_primitive_desc_query(entry->prim.get_primitive_desc(), dnnl_query_impl_info_str, 0, &info);
    const std::string impl = info ? info : "";
    if (impl.find("gemm") != std::string::npos || impl.find("ref") != std::string::npos) entry.reset();
  } catch (const dnnl::error&) {
    entry.reset();
  }
  Prim* p = entry.get();
  cache.emplace(key, std::move(entry));
  return p;
}

// Runs the cached primitive; false (nothing written) when oneDNN has none for this shape.
Expected<bool> run(Pass pass, const ConvShape& cs, std::initializer_list<const void*> ptrs) {
  if (cs.w.n == 0) return true;
  if (cs.g == 1 && cs.w.out_size() == 1) return false;  // the float32 path's one-GEMM case
  // oneDNN 2.6's bf16 backward-weights kernel (jit_bf16) is pathological on small maps: ResNet-18's
  // 3x3 convolutions over 4x4 and 2x2 outputs at batch 32 took 50-550 ms each (float32: 5-9 ms);
  // from 8x8 up it is level with float32 (measured 2026-12-03, step_bench --per-node). Below 64
  // output positions the widened float32 path runs.
  if (pass == Pass::kGradWeight && cs.w.out_size() < 64) return false;
  Prim* p = prim_for(pass, cs);
  if (!p) return false;
  thread_local dnnl::stream stream(dnnl_engine());
  thread_local Scratch scratch;
  PT_CHECK(ptrs.size() == p->args.size()) << "oneDNN bf16 convolution: " << ptrs.size() << " tensors for "
                                          << p->args.size() << " arguments";
  try {
    if (p->exec_args.empty())
      for (const Arg& a : p->args) p->exec_args[a.arg] = a.inner;
    size_t i = 0;
    for (const void* ptr : ptrs) {
      Arg& a = p->args[i++];
      a.user.set_data_handle(const_cast<void*>(ptr));
      if (a.reordered) a.inner.set_data_handle(scratch.get(a.slot, a.inner.get_desc().get_size()));
      if (a.reordered && !a.output) a.reorder.execute(stream, a.user, a.inner);
    }
    p->prim.execute(stream, p->exec_args);
    for (Arg& a : p->args)
      if (a.reordered && a.output) a.reorder.execute(stream, a.inner, a.user);
    stream.wait();
  } catch (const dnnl::error& err) {
    return internal_error(std::string("oneDNN bf16 convolution failed: ") + err.what());
  }
  return true;
}

// The fallback: the float32 kernel on widened copies of the bfloat16 inputs.
Status run_widened(Status (*fn)(const KernelCall&), const KernelCall& call) {
  thread_local std::array<std::vector<float>, 3> bufs;
  std::vector<TensorView> in(call.inputs.begin(), call.inputs.end());
  for (size_t i = 0; i < in.size() && i < bufs.size(); ++i) {
    if (in[i].dtype != DType::kBFloat16 || !in[i].data) continue;
    const int64_t n = in[i].size();
    if (bufs[i].size() < static_cast<size_t>(n)) bufs[i].resize(static_cast<size_t>(n));
    bf16_to_f32(bf16_data(in[i]), bufs[i].data(), n);
    in[i].data = bufs[i].data();
    in[i].dtype = DType::kFloat32;
  }
  return fn(KernelCall{in, call.outputs, call.attrs, call.stream});
}

}  // namespace

Status conv_bf16(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Conv", 2, 1));
  RETURN_IF_ERROR(kernels::check_bf16_conv_types("Conv", call, 2));
  const TensorView& x = call.inputs[0];   // (N, C, in...) bf16
  const TensorView& w = call.inputs[1];   // (M, C/g, k...) bf16
  const TensorView& y = call.outputs[0];  // (N, M, out...) f32
  ConvShape cs;
  RETURN_IF_ERROR(conv_shape("Conv", call.attrs, x.dims, w.dims, y.dims, &cs));
  const bool bias = has_input(call, 2);
  if (bias) {
    RETURN_IF_ERROR(check_same_dims("Conv", "B", call.inputs[2].dims, Dims{cs.m}));
    cs.bias = true;
  }
  Expected<bool> done = bias ? run(Pass::kForward, cs, {x.data, w.data, call.inputs[2].data, y.data})
                             : run(Pass::kForward, cs, {x.data, w.data, y.data});
  if (!done) return done.status();
  return *done ? Status::ok() : run_widened(&conv<float>, call);
}

Status conv_grad_input_bf16(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ConvGradInput", 2, 1));
  RETURN_IF_ERROR(kernels::check_bf16_conv_types("ConvGradInput", call, 2));
  const TensorView& dy = call.inputs[0];   // (N, M, out...) bf16
  const TensorView& w = call.inputs[1];    // (M, C/g, k...) bf16
  const TensorView& dx = call.outputs[0];  // (N, C, in...) f32
  ConvShape cs;
  RETURN_IF_ERROR(conv_shape("ConvGradInput", call.attrs, dx.dims, w.dims, dy.dims, &cs));
  Expected<bool> done = run(Pass::kGradInput, cs, {dy.data, w.data, dx.data});
  if (!done) return done.status();
  return *done ? Status::ok() : run_widened(&conv_grad_input<float>, call);
}

Status conv_grad_weight_bf16(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ConvGradWeight", 2, 1));
  RETURN_IF_ERROR(kernels::check_bf16_conv_types("ConvGradWeight", call, 2));
  const TensorView& dy = call.inputs[0];   // (N, M, out...) bf16
  const TensorView& x = call.inputs[1];    // (N, C, in...) bf16
  const TensorView& dw = call.outputs[0];  // (M, C/g, k...) f32
  ConvShape cs;
  RETURN_IF_ERROR(conv_shape("ConvGradWeight", call.attrs, x.dims, dw.dims, dy.dims, &cs));
  if (cs.w.n == 0) return run_widened(&conv_grad_weight<float>, call);
  Expected<bool> done = run(Pass::kGradWeight, cs, {dy.data, x.data, dw.data});
  if (!done) return done.status();
  return *done ? Status::ok() : run_widened(&conv_grad_weight<float>, call);
}

}  // namespace pt::cpu
