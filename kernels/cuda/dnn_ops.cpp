// The cuDNN-backed CUDA kernels: Conv, ConvGradInput (backward data), ConvGradWeight (backward
// filter), Softmax / LogSoftmax and their gradients. Each convolution's algorithm is chosen once per
// shape by measuring (cudnnFind*Ex on the call's own buffers, within a 256 MiB workspace; cuDNN's v7
// heuristics where measuring fails) and cached; kernels/conv_algo.h says which algorithms qualify.
// Float convolutions run in FMA math with a direct algorithm (GEMM-like: the error of a direct
// convolution, comparable with the CPU) unless the call allows TF32 tensor cores (KernelCall::tf32,
// --precision tf32), which also admits FFT and Winograd. Workspaces come from the caching
// allocator. Windows with asymmetric pads, which cuDNN's convolution descriptor cannot express, run
// the CPU kernel through the host fallback (fallback.h).
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/checks/bf16.h"
#include "kernels/checks/conv.h"
#include "kernels/checks/softmax.h"
#include "kernels/conv_algo.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/capture.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fallback.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/libs.h"
#include "kernels/cuda/ops_util.h"
#include "kernels/window.h"

namespace pt::cuda {

namespace {

template <typename T>
constexpr cudnnDataType_t dnn_type() {
  return std::is_same_v<T, float> ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

// RAII for the descriptors; each create/set is checked by the caller.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  ~TensorDesc() {
    if (d) (void)cudnnDestroyTensorDescriptor(d);
  }
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  ~FilterDesc() {
    if (d) (void)cudnnDestroyFilterDescriptor(d);
  }
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ~ConvDesc() {
    if (d) (void)cudnnDestroyConvolutionDescriptor(d);
  }
};

Status to_int_dims(const char* op, const Dims& dims, std::vector<int>* out) {
  out->clear();
  for (int64_t v : dims) {
    if (v > INT_MAX) return unsupported(std::string(op) + " (cuda): dim " + std::to_string(v) + " exceeds cuDNN's int");
    out->push_back(static_cast<int>(v));
  }
  if (numel(dims) > INT_MAX)
    return unsupported(std::string(op) + " (cuda): tensor " + dims_str(dims) + " exceeds cuDNN's 2^31 elements");
  return Status::ok();
}

// A fully packed NCHW / NCDHW tensor descriptor (at least 4 dims: cuDNN's minimum).
Status make_tensor(const char* op, cudnnDataType_t t, Dims dims, TensorDesc* desc) {
  while (dims.size() < 4) dims.push_back(1);
  std::vector<int> d;
  RETURN_IF_ERROR(to_int_dims(op, dims, &d));
  std::vector<int> st(d.size());
  int64_t s = 1;
  for (size_t i = d.size(); i-- > 0;) {
    st[i] = static_cast<int>(s);
    s *= d[i];
  }
  PT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc->d));
  PT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc->d, t, static_cast<int>(d.size()), d.data(), st.data()));
  return Status::ok();
}

using kernels::ConvAlgoPolicy;
using kernels::ConvAlgoResult;
using Pass = kernels::ConvPass;

// kernels/conv_algo.h names cuDNN's algorithms by number.
static_assert(kernels::conv_algo::kFwdImplicitGemm == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM &&
              kernels::conv_algo::kFwdImplicitPrecompGemm == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM &&
              kernels::conv_algo::kFwdGemm == CUDNN_CONVOLUTION_FWD_ALGO_GEMM &&
              kernels::conv_algo::kFwdDirect == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT &&
              kernels::conv_algo::kFwdFft == CUDNN_CONVOLUTION_FWD_ALGO_FFT &&
              kernels::conv_algo::kFwdFftTiling == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
              kernels::conv_algo::kFwdWinograd == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD &&
              kernels::conv_algo::kFwdWinogradNonfused == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
static_assert(kernels::conv_algo::kBwdData0 == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 &&
              kernels::conv_algo::kBwdData1 == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 &&
              kernels::conv_algo::kBwdDataFft == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT &&
              kernels::conv_algo::kBwdDataFftTiling == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING &&
              kernels::conv_algo::kBwdDataWinograd == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD &&
              kernels::conv_algo::kBwdDataWinogradNonfused == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED);
static_assert(kernels::conv_algo::kBwdFilter0 == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
              kernels::conv_algo::kBwdFilter1 == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 &&
              kernels::conv_algo::kBwdFilterFft == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT &&
              kernels::conv_algo::kBwdFilter3 == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 &&
              kernels::conv_algo::kBwdFilterWinograd == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD &&
              kernels::conv_algo::kBwdFilterWinogradNonfused == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED &&
              kernels::conv_algo::kBwdFilterFftTiling == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING);

// Everything a convolution depends on, as cuDNN sees it (1-D convolutions become 2-D, H = 1).
struct ConvSetup {
  Dims x, w, y;              // [N, C, spatial...], [M, C/g, k...], [N, M, out...]
  std::vector<int> pad, stride, dil;
  int64_t group = 1;
  bool symmetric = true;
};

// Checks as kernels/cpu/conv.cpp's conv_shape (same messages), then fills `cs`.
Status conv_setup(const char* op, const AttrMap& attrs, const Dims& x, const Dims& wd, const Dims& y, ConvSetup* cs) {
  if (wd.size() != x.size())
    return invalid_input(std::string(op) + ": W " + dims_str(wd) + " and X " + dims_str(x) + " differ in rank");
  const Dims kernel(wd.begin() + 2, wd.end());
  Window w;
  RETURN_IF_ERROR(window_from_attrs(op, attrs, x, &kernel, false, &w));
  for (int i = 0; i < w.nd; ++i)
    if (w.k[kMaxSpatial - w.nd + i] != kernel[i])
      return invalid_input(std::string(op) + ": kernel_shape does not match W " + dims_str(wd));
  const int64_t m = wd[0];
  const int64_t g = attrs.get_int("group", 1);
  if (g < 1 || w.c % g != 0 || m % g != 0 || wd[1] * g != w.c)
    return invalid_input(std::string(op) + ": group " + std::to_string(g) + " does not fit X " + dims_str(x) +
                         " and W " + dims_str(wd));
  RETURN_IF_ERROR(check_same_dims(op, "output", y, window_output_dims(w, m)));
  cs->x = x;
  cs->w = wd;
  cs->y = y;
  cs->group = g;
  cs->pad.clear();
  cs->stride.clear();
  cs->dil.clear();
  if (w.nd == 1) {  // [N, C, W] -> [N, C, 1, W]
    cs->x.insert(cs->x.begin() + 2, 1);
    cs->w.insert(cs->w.begin() + 2, 1);
    cs->y.insert(cs->y.begin() + 2, 1);
    cs->pad.push_back(0);
    cs->stride.push_back(1);
    cs->dil.push_back(1);
  }
  for (int j = kMaxSpatial - w.nd; j < kMaxSpatial; ++j) {
    if (w.pb[j] != w.pe[j]) cs->symmetric = false;
    if (w.pb[j] > INT_MAX || w.s[j] > INT_MAX || w.d[j] > INT_MAX)
      return unsupported(std::string(op) + " (cuda): window parameter exceeds cuDNN's int");
    cs->pad.push_back(static_cast<int>(w.pb[j]));
    cs->stride.push_back(static_cast<int>(w.s[j]));
    cs->dil.push_back(static_cast<int>(w.d[j]));
  }
  return Status::ok();
}

struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
};

template <typename T>
Status make_conv_descs(const char* op, const ConvSetup& cs, bool tf32_allowed, ConvDescs* d) {
  const cudnnDataType_t t = dnn_type<T>();
  RETURN_IF_ERROR(make_tensor(op, t, cs.x, &d->x));
  RETURN_IF_ERROR(make_tensor(op, t, cs.y, &d->y));
  std::vector<int> wd;
  RETURN_IF_ERROR(to_int_dims(op, cs.w, &wd));
  PT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d->w.d));
  PT_CUDNN_CHECK(cudnnSetFilterNdDescriptor(d->w.d, t, CUDNN_TENSOR_NCHW, static_cast<int>(wd.size()), wd.data()));
  PT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d->conv.d));
  PT_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(d->conv.d, static_cast<int>(cs.pad.size()), cs.pad.data(),
                                                 cs.stride.data(), cs.dil.data(), CUDNN_CROSS_CORRELATION, t));
  PT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d->conv.d, static_cast<int>(cs.group)));
  const bool tf32 = std::is_same_v<T, float> && tf32_allowed;
  PT_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv.d, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  return Status::ok();
}

// The algorithm cache: conv_algo_key (pass, dtype, device, math, shapes, window) -> the choice.
struct AlgoChoice {
  int algo = 0;
  int math = CUDNN_DEFAULT_MATH;  // the row's cudnnMathType_t
  size_t workspace = 0;
  bool measured = false;  // by cudnnFind*Ex (else cuDNN's heuristics)
  float time_ms = -1;     // the measured time
  std::string shape;      // for conv_algo_report()
};
std::mutex g_algo_mu;
std::map<std::vector<int64_t>, AlgoChoice>& algo_cache() {
  static auto* m = new std::map<std::vector<int64_t>, AlgoChoice>();
  return *m;
}

// Workspaces above this are not considered (the allocator could hold them, but an algorithm wanting
// gigabytes usually has a near-equal alternative).
constexpr size_t kMaxWorkspace = size_t{1} << 30;

std::vector<int64_t> algo_key(Pass p, cudnnDataType_t t, const ConvSetup& cs, bool tf32, bool direct_only) {
  kernels::ConvAlgoKeyParts k;
  k.pass = p;
  k.dtype = static_cast<int>(t);
  (void)cudaGetDevice(&k.device);
  k.tf32 = tf32;
  k.direct_only = direct_only;
  k.group = cs.group;
  k.x = cs.x;
  k.w = cs.w;
  k.pad = cs.pad;
  k.stride = cs.stride;
  k.dilation = cs.dil;
  k.max_workspace = kMaxWorkspace;
  return kernels::conv_algo_key(k);
}

// The rows of a cuDNN perf array (cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t).
template <typename Perf>
std::vector<ConvAlgoResult> rows_of(const Perf* perf, int n, bool measured) {
  std::vector<ConvAlgoResult> rows;
  for (int i = 0; i < n; ++i) {
    ConvAlgoResult r;
    r.algo = static_cast<int>(perf[i].algo);
    r.ok = perf[i].status == CUDNN_STATUS_SUCCESS;
    r.fma_math = perf[i].mathType == CUDNN_FMA_MATH;
    r.math_type = static_cast<int>(perf[i].mathType);
    r.workspace = perf[i].memory;
    r.time_ms = measured ? perf[i].time : -1.f;
    rows.push_back(r);
  }
  return rows;
}

// The workspace the measurement may use: up to kFindWorkspace, at most a quarter of the free
// memory, halved until cudaMalloc gives it. Taken from the driver and given back after the
// measurement (not from the caching allocator, which would keep the block for the rest of the run).
constexpr size_t kFindWorkspace = size_t{256} << 20;
struct FindWorkspace {
  void* p = nullptr;
  size_t bytes = 0;
  FindWorkspace() {
    size_t free_b = 0, total_b = 0;
    bytes = kFindWorkspace;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) bytes = std::min(bytes, free_b / 4);
    else (void)cudaGetLastError();
    for (; bytes >= (size_t{1} << 20); bytes /= 2) {
      if (cudaMalloc(&p, bytes) == cudaSuccess) return;
      (void)cudaGetLastError();
    }
    p = nullptr;
    bytes = 0;
  }
  ~FindWorkspace() {
    if (p) (void)cudaFree(p);
  }
  FindWorkspace(const FindWorkspace&) = delete;
  FindWorkspace& operator=(const FindWorkspace&) = delete;
};

// Chooses the algorithm of one convolution: measured by `find` (cudnnFind*Ex: host-blocking, each
// candidate run on the call's own buffers, which the real call then overwrites) where it succeeds,
// else from the heuristics `get`; kernels/conv_algo.h's pick_conv_algo decides among the rows. The
// workspace of a heuristic row comes from `size_of`.
template <typename Perf, typename FindFn, typename GetFn, typename SizeFn>
Status choose_algo(const char* what, cudaStream_t stream, FindFn find, GetFn get, SizeFn size_of, Pass pass,
                   const ConvAlgoPolicy& policy, AlgoChoice* out) {
  constexpr int kMax = 16;
  Perf perf[kMax];
  int n = 0;
  {
    // cudnnFind*Ex runs on the handle's stream and blocks the host until it is done; its own
    // cudaMalloc and cudaFree synchronise the device, as the first step of a shape may.
    (void)stream;
    FindWorkspace ws;
    if (find(kMax, &n, perf, ws.p, ws.bytes) == CUDNN_STATUS_SUCCESS) {
      const std::vector<ConvAlgoResult> rows = rows_of(perf, n, true);
      const int i = kernels::pick_conv_algo(pass, rows, policy);
      if (i >= 0) {
        *out = AlgoChoice{rows[i].algo, rows[i].math_type, rows[i].workspace, true, rows[i].time_ms, {}};
        return Status::ok();
      }
    } else {
      (void)cudaGetLastError();
    }
  }
  const cudnnStatus_t st = get(kMax, &n, perf);
  if (st != CUDNN_STATUS_SUCCESS) return cudnn_error_status(st, what, __FILE__, __LINE__);
  std::vector<ConvAlgoResult> rows = rows_of(perf, n, false);
  for (ConvAlgoResult& r : rows)
    if (r.ok && size_of(perf[&r - rows.data()].algo, &r.workspace) != CUDNN_STATUS_SUCCESS) r.ok = false;
  const int i = kernels::pick_conv_algo(pass, rows, policy);
  if (i < 0) return unsupported(std::string(what) + ": cuDNN offers no usable algorithm for this convolution");
  *out = AlgoChoice{rows[i].algo, rows[i].math_type, rows[i].workspace, false, -1.f, {}};
  return Status::ok();
}

template <typename T>
Status choose_for(cudnnHandle_t h, cudaStream_t stream, Pass pass, const ConvDescs& d, const ConvAlgoPolicy& policy,
                  const void* x, const void* w, const void* dy, void* out, AlgoChoice* choice) {
  // The measured runs write the output the real call writes next; the inputs are only read.
  if (pass == Pass::kForward)
    return choose_algo<cudnnConvolutionFwdAlgoPerf_t>(
        "cudnnGetConvolutionForwardAlgorithm_v7", stream,
        [&](int k, int* n, cudnnConvolutionFwdAlgoPerf_t* p, void* ws, size_t ws_bytes) {
          return cudnnFindConvolutionForwardAlgorithmEx(h, d.x.d, x, d.w.d, w, d.conv.d, d.y.d, out, k, n, p, ws,
                                                        ws_bytes);
        },
        [&](int k, int* n, cudnnConvolutionFwdAlgoPerf_t* p) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.d, d.w.d, d.conv.d, d.y.d, k, n, p);
        },
        [&](cudnnConvolutionFwdAlgo_t a, size_t* ws) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.d, d.w.d, d.conv.d, d.y.d, a, ws);
        },
        pass, policy, choice);
  if (pass == Pass::kGradInput)
    return choose_algo<cudnnConvolutionBwdDataAlgoPerf_t>(
        "cudnnGetConvolutionBackwardDataAlgorithm_v7", stream,
        [&](int k, int* n, cudnnConvolutionBwdDataAlgoPerf_t* p, void* ws, size_t ws_bytes) {
          return cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.d, w, d.y.d, dy, d.conv.d, d.x.d, out, k, n, p, ws,
                                                             ws_bytes);
        },
        [&](int k, int* n, cudnnConvolutionBwdDataAlgoPerf_t* p) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.d, d.y.d, d.conv.d, d.x.d, k, n, p);
        },
        [&](cudnnConvolutionBwdDataAlgo_t a, size_t* ws) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.d, d.y.d, d.conv.d, d.x.d, a, ws);
        },
        pass, policy, choice);
  return choose_algo<cudnnConvolutionBwdFilterAlgoPerf_t>(
      "cudnnGetConvolutionBackwardFilterAlgorithm_v7", stream,
      [&](int k, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* p, void* ws, size_t ws_bytes) {
        return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.d, x, d.y.d, dy, d.conv.d, d.w.d, out, k, n, p, ws,
                                                             ws_bytes);
      },
      [&](int k, int* n, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.d, d.y.d, d.conv.d, d.w.d, k, n, p);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* ws) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.d, d.y.d, d.conv.d, d.w.d, a, ws);
      },
      pass, policy, choice);
}

std::string describe_setup(Pass pass, const ConvSetup& cs, bool tf32, const char* dtype) {
  static const char* const kPass[] = {"fwd", "bwd-data", "bwd-filter"};
  return std::string(kPass[static_cast<int>(pass)]) + " " + dtype + (tf32 ? " tf32" : "") + " x" + dims_str(cs.x) +
         " w" + dims_str(cs.w) + (cs.group > 1 ? " group " + std::to_string(cs.group) : "");
}

template <typename T>
Status run_conv(const KernelCall& call, const ConvAlgoPolicy& policy_in, const char* op, Pass pass, const ConvSetup& cs,
                const void* x, const void* w, const void* dy, void* out) {
  const cudaStream_t stream = stream_of(call);
  ConvDescs d;
  RETURN_IF_ERROR(make_conv_descs<T>(op, cs, call.tf32, &d));
  cudnnHandle_t h;
  RETURN_IF_ERROR(cudnn_for(stream, &h));
  ConvAlgoPolicy policy = policy_in;
  policy.max_workspace = kMaxWorkspace;
  const std::vector<int64_t> key = algo_key(pass, dnn_type<T>(), cs, call.tf32, policy.direct);
  AlgoChoice choice;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_algo_mu);
    auto it = algo_cache().find(key);
    if (it != algo_cache().end()) {
      choice = it->second;
      cached = true;
    }
  }
  if (!cached) {
    // A search runs kernels and blocks the host: never inside a graph capture (capture.h). The
    // executor captures a run only after running it once kernel by kernel, so this is reached only
    // when that run did not have this shape; the capture is then abandoned.
    if (stream_capturing(stream))
      return internal_error(std::string(op) + ": no convolution algorithm chosen yet for " +
                            describe_setup(pass, cs, call.tf32, "") + " (chosen outside a CUDA graph capture)");
    std::shared_lock<std::shared_mutex> gate(capture_gate());
    RETURN_IF_ERROR(choose_for<T>(h, stream, pass, d, policy, x, w, dy, out, &choice));
    choice.shape = describe_setup(pass, cs, call.tf32, std::is_same_v<T, float> ? (call.tf32 && policy.direct ? "bf16-widened" : "f32") : "f64");
    std::lock_guard<std::mutex> lock(g_algo_mu);
    algo_cache()[key] = choice;
  }
  // Where tensor-core math is allowed (float), the math type the algorithm was measured (or offered)
  // with; under FMA math, and for double, the descriptor's, so that TF32 is never used behind the
  // caller's back.
  if (!policy.fma && std::is_same_v<T, float>)
    PT_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, static_cast<cudnnMathType_t>(choice.math)));
  ScratchBuffer ws;
  RETURN_IF_ERROR(ws.allocate(choice.workspace, stream));
  const T one = T(1), zero = T(0);
  switch (pass) {
    case Pass::kForward:
      PT_CUDNN_CHECK(cudnnConvolutionForward(h, &one, d.x.d, x, d.w.d, w, d.conv.d,
                                             static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), ws.get(),
                                             choice.workspace, &zero, d.y.d, out));
      break;
    case Pass::kGradInput:
      PT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, d.w.d, w, d.y.d, dy, d.conv.d,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo), ws.get(),
                                                  choice.workspace, &zero, d.x.d, out));
      break;
    case Pass::kGradWeight:
      PT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, d.x.d, x, d.y.d, dy, d.conv.d,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algo),
                                                    ws.get(), choice.workspace, &zero, d.w.d, out));
      break;
  }
  return Status::ok();
}

}  // namespace

size_t conv_algo_cache_size() {
  std::lock_guard<std::mutex> lock(g_algo_mu);
  return algo_cache().size();
}

std::vector<std::string> conv_algo_report() {
  std::vector<std::string> lines;
  std::lock_guard<std::mutex> lock(g_algo_mu);
  for (const auto& [key, c] : algo_cache()) {
    const Pass pass = static_cast<Pass>(key.at(0));
    char t[48] = "heuristic";
    if (c.measured) std::snprintf(t, sizeof t, "measured %.3f ms", c.time_ms);
    lines.push_back(c.shape + ": " + kernels::conv_algo_name(pass, c.algo) +
                    (kernels::conv_algo_is_direct(pass, c.algo) ? " (direct)" : "") + ", workspace " +
                    std::to_string(c.workspace >> 10) + " KiB, " + t);
  }
  return lines;
}

template <typename T>
Status conv_with(const KernelCall& call, const ConvAlgoPolicy& policy) {
  RETURN_IF_ERROR(check_arity(call, "Conv", 2, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& w = call.inputs[1];
  const TensorView& y = call.outputs[0];
  ConvSetup cs;
  RETURN_IF_ERROR(conv_setup("Conv", call.attrs, x.dims, w.dims, y.dims, &cs));
  const bool bias = has_input(call, 2);
  if (bias) RETURN_IF_ERROR(check_same_dims("Conv", "B", call.inputs[2].dims, Dims{w.dims[0]}));
  if (!cs.symmetric) return run_on_host(&cpu::conv<T>, call);
  if (y.size() == 0) return Status::ok();
  if (x.size() == 0 || w.size() == 0) {
    // cuDNN refuses empty reductions; the result is the bias alone (or 0).
    PT_CUDA_CHECK(cudaMemsetAsync(y.data, 0, y.bytes(), stream_of(call)));
  } else {
    RETURN_IF_ERROR(run_conv<T>(call, policy, "Conv", Pass::kForward, cs, x.as<T>(), w.as<T>(), nullptr, y.as<T>()));
  }
  if (bias) {
    cudnnHandle_t h;
    RETURN_IF_ERROR(cudnn_for(stream_of(call), &h));
    TensorDesc bd, yd;
    Dims bdims(cs.y.size(), 1);
    bdims[1] = w.dims[0];
    RETURN_IF_ERROR(make_tensor("Conv", dnn_type<T>(), bdims, &bd));
    RETURN_IF_ERROR(make_tensor("Conv", dnn_type<T>(), cs.y, &yd));
    const T one = T(1);
    PT_CUDNN_CHECK(cudnnAddTensor(h, &one, bd.d, call.inputs[2].data, &one, yd.d, y.data));
  }
  return Status::ok();
}

template <typename T>
Status conv_grad_input_with(const KernelCall& call, const ConvAlgoPolicy& policy) {
  RETURN_IF_ERROR(check_arity(call, "ConvGradInput", 2, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& w = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  ConvSetup cs;
  RETURN_IF_ERROR(conv_setup("ConvGradInput", call.attrs, dx.dims, w.dims, dy.dims, &cs));
  if (!cs.symmetric) return run_on_host(&cpu::conv_grad_input<T>, call);
  if (dx.size() == 0) return Status::ok();
  if (dy.size() == 0 || w.size() == 0) {
    PT_CUDA_CHECK(cudaMemsetAsync(dx.data, 0, dx.bytes(), stream_of(call)));
    return Status::ok();
  }
  return run_conv<T>(call, policy, "ConvGradInput", Pass::kGradInput, cs, nullptr, w.as<T>(), dy.as<T>(), dx.as<T>());
}

template <typename T>
Status conv_grad_weight_with(const KernelCall& call, const ConvAlgoPolicy& policy) {
  RETURN_IF_ERROR(check_arity(call, "ConvGradWeight", 2, 1));
  const TensorView& dy = call.inputs[0];
  const TensorView& x = call.inputs[1];
  const TensorView& dw = call.outputs[0];
  ConvSetup cs;
  RETURN_IF_ERROR(conv_setup("ConvGradWeight", call.attrs, x.dims, dw.dims, dy.dims, &cs));
  if (!cs.symmetric) return run_on_host(&cpu::conv_grad_weight<T>, call);
  if (dw.size() == 0) return Status::ok();
  if (x.size() == 0 || dy.size() == 0) {
    PT_CUDA_CHECK(cudaMemsetAsync(dw.data, 0, dw.bytes(), stream_of(call)));
    return Status::ok();
  }
  return run_conv<T>(call, policy, "ConvGradWeight", Pass::kGradWeight, cs, x.as<T>(), nullptr, dy.as<T>(), dw.as<T>());
}

namespace {

// FP32 without --precision tf32: direct algorithms in FMA math; TF32 (and double, which has no
// tensor-core math): any algorithm that runs.
template <typename T>
ConvAlgoPolicy default_policy(const KernelCall& call) {
  return std::is_same_v<T, float> && !call.tf32 ? kernels::exact_fp32_policy() : kernels::tf32_policy();
}

}  // namespace

template <typename T>
Status conv(const KernelCall& call) {
  return conv_with<T>(call, default_policy<T>(call));
}
template <typename T>
Status conv_grad_input(const KernelCall& call) {
  return conv_grad_input_with<T>(call, default_policy<T>(call));
}
template <typename T>
Status conv_grad_weight(const KernelCall& call) {
  return conv_grad_weight_with<T>(call, default_policy<T>(call));
}

// ConvTranspose: Conv's input gradient with the window the shape function normalised (as
// kernels/cpu/conv_transpose.cpp), then the bias per output channel.
template <typename T>
Status conv_transpose(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "ConvTranspose", 2, 1));
  const TensorView ins[] = {call.inputs[0], call.inputs[1]};  // X (N, C, in...), W (C, M/g, k...)
  KernelCall c{ins, call.outputs.first(1), call.attrs, call.stream};
  c.tf32 = call.tf32;
  RETURN_IF_ERROR(conv_grad_input<T>(c));
  if (!has_input(call, 2)) return Status::ok();
  const TensorView& y = call.outputs[0];  // (N, M, out...)
  const TensorView& b = call.inputs[2];   // (M)
  RETURN_IF_ERROR(kernels::check_conv_transpose_bias(y, b));
  if (y.size() == 0) return Status::ok();
  cudnnHandle_t h;
  RETURN_IF_ERROR(cudnn_for(stream_of(call), &h));
  TensorDesc bd, yd;
  Dims bdims(y.dims.size(), 1);
  bdims[1] = y.dims[1];
  RETURN_IF_ERROR(make_tensor("ConvTranspose", dnn_type<T>(), bdims, &bd));
  RETURN_IF_ERROR(make_tensor("ConvTranspose", dnn_type<T>(), y.dims, &yd));
  const T one = T(1);
  PT_CUDNN_CHECK(cudnnAddTensor(h, &one, bd.d, b.data, &one, yd.d, y.data));
  return Status::ok();
}

// ---- --precision bf16 ----------------------------------------------------------------------------

namespace {

// kernels/cpu/conv_bf16.cpp's semantics (bfloat16 X, W, dY; float32 bias and outputs; float32
// accumulation): the bfloat16 operands are widened to float32 on the device and the float32
// convolution runs with TF32 tensor cores allowed and a direct algorithm (kernels/conv_algo.h's
// widened_bf16_policy). TF32 keeps 10 fraction bits and bfloat16 7, so every operand stays exact,
// every product is exact in float32, and the sums are float32: the CPU's arithmetic up to the
// order of the sums, at tensor-core speed (FFT or Winograd would transform the operands first).
Status widened_bf16(Status (*fn)(const KernelCall&, const ConvAlgoPolicy&), const KernelCall& call, const char* op) {
  RETURN_IF_ERROR(check_arity(call, op, 2, 1));
  RETURN_IF_ERROR(kernels::check_bf16_conv_types(op, call, 2));
  const cudaStream_t stream = stream_of(call);
  std::vector<TensorView> in(call.inputs.begin(), call.inputs.end());
  ScratchBuffer wide[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t n = in[i].size();
    RETURN_IF_ERROR(wide[i].allocate(static_cast<size_t>(n) * sizeof(float), stream));
    PT_CUDA_CHECK(launch_cast(CastType::kBf16, CastType::kF32, wide[i].get(), in[i].data, n, stream));
    in[i].data = wide[i].get();
    in[i].dtype = DType::kFloat32;
  }
  KernelCall c{in, call.outputs, call.attrs, call.stream};
  c.tf32 = true;
  return fn(c, kernels::widened_bf16_policy());
}

}  // namespace

Status conv_bf16(const KernelCall& call) { return widened_bf16(&conv_with<float>, call, "Conv"); }
Status conv_grad_input_bf16(const KernelCall& call) {
  return widened_bf16(&conv_grad_input_with<float>, call, "ConvGradInput");
}
Status conv_grad_weight_bf16(const KernelCall& call) {
  return widened_bf16(&conv_grad_weight_with<float>, call, "ConvGradWeight");
}

// ---- softmax ------------------------------------------------------------------------------------

// Log-softmax (or softmax) of x viewed as [outer, n, inner] over n, with cuDNN: for the loss.
template <typename T>
Status softmax_rows(cudaStream_t stream, const char* op, bool log, int64_t outer, int64_t n, int64_t inner,
                    const T* x, T* y) {
  if (outer * n * inner == 0) return Status::ok();
  TensorDesc d;
  RETURN_IF_ERROR(make_tensor(op, dnn_type<T>(), Dims{outer, n, inner, 1}, &d));
  cudnnHandle_t h;
  RETURN_IF_ERROR(cudnn_for(stream, &h));
  const T one = T(1), zero = T(0);
  PT_CUDNN_CHECK(cudnnSoftmaxForward(h, log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL,
                                     &one, d.d, x, &zero, d.d, y));
  return Status::ok();
}

namespace {

template <typename T>
Status softmax_fwd(const KernelCall& call, const char* op, bool log) {
  AxisGeometry g;
  RETURN_IF_ERROR(kernels::check_softmax(call, op, &g));
  if (call.inputs[0].size() == 0) return Status::ok();
  return softmax_rows<T>(stream_of(call), op, log, g.outer, g.n, g.inner, call.inputs[0].as<T>(),
                         call.outputs[0].as<T>());
}

template <typename T>
Status softmax_bwd(const KernelCall& call, const char* op, bool log) {
  AxisGeometry ag;
  RETURN_IF_ERROR(kernels::check_softmax_grad(call, op, &ag));
  const TensorView& dy = call.inputs[0];
  const TensorView& y = call.inputs[1];
  const TensorView& dx = call.outputs[0];
  if (dy.size() == 0) return Status::ok();
  const Dims g{ag.outer, ag.n, ag.inner};
  TensorDesc d;
  RETURN_IF_ERROR(make_tensor(op, dnn_type<T>(), Dims{g[0], g[1], g[2], 1}, &d));
  cudnnHandle_t h;
  RETURN_IF_ERROR(cudnn_for(stream_of(call), &h));
  const T one = T(1), zero = T(0);
  PT_CUDNN_CHECK(cudnnSoftmaxBackward(h, log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL,
                                      &one, d.d, y.as<T>(), d.d, dy.as<T>(), &zero, d.d, dx.as<T>()));
  return Status::ok();
}

}  // namespace

template <typename T> Status softmax(const KernelCall& c) { return softmax_fwd<T>(c, "Softmax", false); }
template <typename T> Status log_softmax(const KernelCall& c) { return softmax_fwd<T>(c, "LogSoftmax", true); }
template <typename T> Status softmax_grad(const KernelCall& c) { return softmax_bwd<T>(c, "SoftmaxGrad", false); }
template <typename T> Status log_softmax_grad(const KernelCall& c) { return softmax_bwd<T>(c, "LogSoftmaxGrad", true); }

#define PT_F(name)                                  \
  template Status name<float>(const KernelCall&);   \
  template Status name<double>(const KernelCall&);
PT_F(conv) PT_F(conv_grad_input) PT_F(conv_grad_weight) PT_F(conv_transpose) PT_F(softmax) PT_F(log_softmax) PT_F(softmax_grad)
PT_F(log_softmax_grad)
#undef PT_F
template Status softmax_rows<float>(cudaStream_t, const char*, bool, int64_t, int64_t, int64_t, const float*, float*);
template Status softmax_rows<double>(cudaStream_t, const char*, bool, int64_t, int64_t, int64_t, const double*,
                                     double*);

bool conv_takes_host(std::string_view op, const AttrMap& attrs, std::span<const Dims> inputs,
                     std::span<const Dims> outputs) {
  if (inputs.size() < 2 || outputs.empty()) return false;
  const Dims *x = nullptr, *w = nullptr, *y = nullptr;
  if (op == "Conv" || op == "FusedConv") {  // (X, W[, B]) -> Y
    x = &inputs[0], w = &inputs[1], y = &outputs[0];
  } else if (op == "ConvGradInput") {  // (dY, W) -> dX
    x = &outputs[0], w = &inputs[1], y = &inputs[0];
  } else if (op == "ConvGradWeight") {  // (dY, X) -> dW
    x = &inputs[1], w = &outputs[0], y = &inputs[0];
  } else {
    return false;
  }
  ConvSetup cs;
  const std::string name(op);
  return conv_setup(name.c_str(), attrs, *x, *w, *y, &cs).is_ok() && !cs.symmetric;
}

}  // namespace pt::cuda
