// Unary elementwise kernels (activations and pointwise math) and their dX = f(dY, Z) backward
// ops, with the formulas of kernels/cpu/elementwise.cpp and activation.cpp term for term
// (comparisons written as the CPU's std::min / std::max evaluate them, so NaN behaves alike).
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"

namespace pt::cuda {

namespace {

template <typename T>
__device__ __forceinline__ T stable_sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + exp(-x));
  const T e = exp(x);
  return e / (T(1) + e);
}
template <typename T>
__device__ __forceinline__ T min_of(T a, T b) { return (b < a) ? b : a; }  // std::min(a, b)
template <typename T>
__device__ __forceinline__ T max_of(T a, T b) { return (a < b) ? b : a; }  // std::max(a, b)

template <UnaryOp kOp, typename T>
__device__ __forceinline__ T unary(T x, T a, T b) {
  if constexpr (kOp == UnaryOp::kSigmoid) return stable_sigmoid(x);
  else if constexpr (kOp == UnaryOp::kTanh) return tanh(x);
  else if constexpr (kOp == UnaryOp::kNeg) return -x;
  else if constexpr (kOp == UnaryOp::kExp) return exp(x);
  else if constexpr (kOp == UnaryOp::kLog) return log(x);
  else if constexpr (kOp == UnaryOp::kSqrt) return sqrt(x);
  else if constexpr (kOp == UnaryOp::kLeakyRelu) return x >= T(0) ? x : a * x;
  else if constexpr (kOp == UnaryOp::kElu) return x >= T(0) ? x : a * expm1(x);
  else if constexpr (kOp == UnaryOp::kSelu) return x > T(0) ? b * x : b * a * expm1(x);  // a alpha, b gamma
  else if constexpr (kOp == UnaryOp::kHardSigmoid) return max_of(T(0), min_of(T(1), a * x + b));
  else if constexpr (kOp == UnaryOp::kHardSwish) return x * max_of(T(0), min_of(T(1), x / T(6) + T(0.5)));
  else if constexpr (kOp == UnaryOp::kErf) return erf(x);
  else if constexpr (kOp == UnaryOp::kSoftplus) return x > T(0) ? x + log1p(exp(-x)) : log1p(exp(x));
  else if constexpr (kOp == UnaryOp::kReciprocal) return T(1) / x;
  else if constexpr (kOp == UnaryOp::kAbs) return x < T(0) ? -x : x;
  else return x < a ? a : (x > b ? b : x);  // kClip: a = min, b = max
}

template <UnaryOp kOp, typename T>
__global__ void unary_kernel(T* y,        // (n)
                             const T* x,  // (n); may alias y
                             int64_t n, T a, T b, const T* lo, const T* hi) {
  if constexpr (kOp == UnaryOp::kClip) {
    if (lo) a = *lo;
    if (hi) b = *hi;
  }
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = unary<kOp>(x[i], a, b);
}

template <GradOp kOp, typename T>
__device__ __forceinline__ T grad(T dy, T z, T a, T b) {
  if constexpr (kOp == GradOp::kSigmoid) return dy * z * (T(1) - z);
  else if constexpr (kOp == GradOp::kTanh) return dy * (T(1) - z * z);
  else if constexpr (kOp == GradOp::kLeakyRelu) return z > T(0) ? dy : a * dy;
  else if constexpr (kOp == GradOp::kElu) return z > T(0) ? dy : dy * a * exp(z);
  else if constexpr (kOp == GradOp::kSelu) return z > T(0) ? b * dy : dy * b * a * exp(z);
  else if constexpr (kOp == GradOp::kHardSigmoid) {
    const T v = a * z + b;
    return v > T(0) && v < T(1) ? a * dy : T(0);
  } else if constexpr (kOp == GradOp::kHardSwish) {
    if (z < T(-3)) return T(0);
    if (z > T(3)) return dy;
    return dy * (z / T(3) + T(0.5));
  } else if constexpr (kOp == GradOp::kErf) {
    return dy * T(1.12837916709551257389615890312154517) * exp(-z * z);
  } else if constexpr (kOp == GradOp::kSoftplus) {
    return dy * stable_sigmoid(z);
  } else if constexpr (kOp == GradOp::kAbs) {
    return z > T(0) ? dy : (z < T(0) ? -dy : T(0));
  } else {
    return z >= a && z <= b ? dy : T(0);  // kClip
  }
}

template <GradOp kOp, typename T>
__global__ void grad_kernel(T* dx,        // (n); may alias dy
                            const T* dy,  // (n)
                            const T* z,   // (n) forward output or input
                            int64_t n, T a, T b, const T* lo, const T* hi) {
  if constexpr (kOp == GradOp::kClip) {
    if (lo) a = *lo;
    if (hi) b = *hi;
  }
  for (int64_t i = global_index(); i < n; i += global_stride()) dx[i] = grad<kOp>(dy[i], z[i], a, b);
}

template <UnaryOp kOp, typename T>
cudaError_t unary_launch(UnaryParams p, T* y, const T* x, int64_t n, cudaStream_t stream) {
  unary_kernel<kOp, T><<<grid_for(n), kBlock, 0, stream>>>(y, x, n, static_cast<T>(p.a), static_cast<T>(p.b),
                                                           static_cast<const T*>(p.lo), static_cast<const T*>(p.hi));
  return cudaGetLastError();
}

template <GradOp kOp, typename T>
cudaError_t grad_launch(UnaryParams p, T* dx, const T* dy, const T* z, int64_t n, cudaStream_t stream) {
  grad_kernel<kOp, T><<<grid_for(n), kBlock, 0, stream>>>(dx, dy, z, n, static_cast<T>(p.a), static_cast<T>(p.b),
                                                          static_cast<const T*>(p.lo), static_cast<const T*>(p.hi));
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_unary(UnaryOp op, UnaryParams p, T* y, const T* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
#define PT_CASE(name) \
  case UnaryOp::name: return unary_launch<UnaryOp::name, T>(p, y, x, n, stream);
    PT_CASE(kSigmoid) PT_CASE(kTanh) PT_CASE(kNeg) PT_CASE(kExp) PT_CASE(kLog) PT_CASE(kSqrt)
    PT_CASE(kLeakyRelu) PT_CASE(kElu) PT_CASE(kSelu) PT_CASE(kHardSigmoid) PT_CASE(kHardSwish)
    PT_CASE(kErf) PT_CASE(kSoftplus) PT_CASE(kReciprocal) PT_CASE(kAbs) PT_CASE(kClip)
#undef PT_CASE
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t launch_unary_grad(GradOp op, UnaryParams p, T* dx, const T* dy, const T* z, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
#define PT_CASE(name) \
  case GradOp::name: return grad_launch<GradOp::name, T>(p, dx, dy, z, n, stream);
    PT_CASE(kSigmoid) PT_CASE(kTanh) PT_CASE(kLeakyRelu) PT_CASE(kElu) PT_CASE(kSelu)
    PT_CASE(kHardSigmoid) PT_CASE(kHardSwish) PT_CASE(kErf) PT_CASE(kSoftplus) PT_CASE(kAbs)
    PT_CASE(kClip)
#undef PT_CASE
  }
  return cudaErrorInvalidValue;
}

template cudaError_t launch_unary<float>(UnaryOp, UnaryParams, float*, const float*, int64_t, cudaStream_t);
template cudaError_t launch_unary<double>(UnaryOp, UnaryParams, double*, const double*, int64_t, cudaStream_t);
template cudaError_t launch_unary_grad<float>(GradOp, UnaryParams, float*, const float*, const float*, int64_t,
                                              cudaStream_t);
template cudaError_t launch_unary_grad<double>(GradOp, UnaryParams, double*, const double*, const double*, int64_t,
                                               cudaStream_t);

}  // namespace pt::cuda
