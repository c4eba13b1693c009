// The vectorised exp/erf maps of vmath.h. Each function is built three times by target_clones
// (AVX-512F, AVX2, baseline) and chosen at load time; the file is compiled with
// -ffp-contract=off (kernels/CMakeLists.txt), so no version fuses a multiply and an add the others
// do not, and all three compute the same bits.
#include "kernels/cpu/vmath.h"

#include "kernels/cpu/cpu_util.h"


namespace pt::cpu {
namespace {

constexpr float kTwoOverSqrtPi = 1.12837916709551257389615890312154517f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr int kLanes = 16;  // partial sums of every reduction, whatever the vector width

PT_CPU_CLONES void vmap_range(VFn f, const float* a, const float* b, float* y, int64_t n) {
  switch (f) {
    case VFn::kExp:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = vexp(a[i]);
      break;
    case VFn::kErf:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = verf(a[i]);
      break;
    case VFn::kErfGrad:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] * kTwoOverSqrtPi * vexp(-b[i] * b[i]);
      break;
    case VFn::kGelu:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * a[i] * (1.0f + verf(a[i] * kInvSqrt2));
      break;
    case VFn::kGeluGrad:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float x = b[i];
        y[i] = a[i] * (0.5f * (1.0f + verf(x * kInvSqrt2)) + x * kInvSqrt2Pi * vexp(-0.5f * x * x));
      }
      break;
    case VFn::kTanh:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = vtanh(a[i]);
      break;
    case VFn::kSigmoid:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = vsigmoid(a[i]);
      break;
  }
}

PT_CPU_CLONES float exp_shifted_sum_range(const float* x, float shift, float* y, int64_t n) {
  float part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float e[kLanes];
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) e[l] = vexp(x[i + l] - shift);
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) part[l] += e[l];
    if (y)
      for (int l = 0; l < kLanes; ++l) y[i + l] = e[l];
  }
  for (int l = 0; i < n; ++i, ++l) {
    const float e = vexp(x[i] - shift);
    part[l] += e;
    if (y) y[i] = e;
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += part[l];
  return s;
}

PT_CPU_CLONES void exp_shifted_scaled_range(const float* x, float shift, float scale, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = vexp(x[i] - shift) * scale;
}

}  // namespace

void vmap(VFn f, const float* a, const float* b, float* y, int64_t n) {
  if (n <= kParallelThreshold) {
    vmap_range(f, a, b, y, n);
    return;
  }
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    vmap_range(f, a + lo, b ? b + lo : nullptr, y + lo, len);
  }
}

Status map_vector(const KernelCall& call, const char* op, VFn f) {
  const bool binary = f == VFn::kErfGrad || f == VFn::kGeluGrad;
  RETURN_IF_ERROR(kernels::check_unary(call, op, binary ? 2 : 1));
  const TensorView& a = call.inputs[0];
  const TensorView& y = call.outputs[0];
  vmap(f, a.as<float>(), binary ? call.inputs[1].as<float>() : nullptr, y.as<float>(), a.size());
  return Status::ok();
}

float exp_shifted_sum(const float* x, float shift, float* y, int64_t n) {
  return exp_shifted_sum_range(x, shift, y, n);
}

void exp_shifted_scaled(const float* x, float shift, float scale, float* y, int64_t n) {
  exp_shifted_scaled_range(x, shift, scale, y, n);
}

}  // namespace pt::cpu
