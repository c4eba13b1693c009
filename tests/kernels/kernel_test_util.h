// Helpers for the CPU kernel tests: tensors with guard elements after the end, running a kernel
// through the registry (so registration is tested too), seeded random data, and the
// atol + rtol*|ref| comparison against naive double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/registry.h"

namespace pt::test {

constexpr int64_t kGuard = 8;

template <typename T>
T guard_value() {
  return static_cast<T>(-31337);
}
// What an output holds before the kernel runs: NaN for floats, so an element left unwritten (or
// computed from garbage) fails the comparison.
template <typename T>
T unset_value() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::quiet_NaN();
  return static_cast<T>(0x5A5A5A5A);
}

// A tensor payload followed by kGuard sentinel elements that no kernel may touch.
template <typename T>
class Buf {
 public:
  Buf(Dims dims, const std::vector<T>& values) : dims_(std::move(dims)) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), numel(dims_)) << "test bug: value count";
    buf_ = values;
    buf_.resize(values.size() + kGuard, guard_value<T>());
  }
  // Values given in double (cast to T).
  static Buf from_doubles(Dims dims, const std::vector<double>& v) {
    std::vector<T> t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = static_cast<T>(v[i]);
    return Buf(std::move(dims), t);
  }
  static Buf output(Dims dims) {
    return Buf(dims, std::vector<T>(static_cast<size_t>(numel(dims)), unset_value<T>()));
  }

  const Dims& dims() const { return dims_; }
  int64_t size() const { return numel(dims_); }
  T* data() { return buf_.data(); }
  const T* data() const { return buf_.data(); }
  T operator[](int64_t i) const { return buf_[static_cast<size_t>(i)]; }
  T& operator[](int64_t i) { return buf_[static_cast<size_t>(i)]; }
  TensorView view() const { return TensorView{const_cast<T*>(buf_.data()), dtype_of<T>(), dims_}; }

  bool guards_ok() const {
    for (int64_t i = size(); i < size() + kGuard; ++i)
      if (std::memcmp(&buf_[i], &kSentinel, sizeof(T)) != 0) return false;
    return true;
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(size()));
    for (int64_t i = 0; i < size(); ++i) v[i] = static_cast<double>(buf_[i]);
    return v;
  }

 private:
  static inline const T kSentinel = guard_value<T>();
  Dims dims_;
  std::vector<T> buf_;
};

template <typename T>
struct Tol;
template <>
struct Tol<float> {
  static constexpr double atol = 1e-5, rtol = 1e-5;
};
template <>
struct Tol<double> {
  static constexpr double atol = 1e-12, rtol = 1e-12;
};
template <>
struct Tol<int64_t> {
  static constexpr double atol = 0, rtol = 0;
};

// Runs the registered CPU kernel for (op, dtype).
inline Status run_kernel(std::string_view op, DType dtype, const std::vector<TensorView>& in,
                         const std::vector<TensorView>& out, const AttrMap& attrs = AttrMap{}) {
  KernelFn fn = find_kernel(op, DeviceKind::kCpu, dtype);
  if (!fn)
    return internal_error("no CPU kernel registered for " + std::string(op) + " / " +
                          dtype_name(dtype));
  KernelCall call{in, out, attrs};
  return fn(call);
}

#define PT_EXPECT_OK(expr)                                 \
  do {                                                     \
    ::pt::Status pt_s_ = (expr);                           \
    EXPECT_TRUE(pt_s_.is_ok()) << pt_s_.message();         \
  } while (0)
#define PT_ASSERT_OK(expr)                                 \
  do {                                                     \
    ::pt::Status pt_s_ = (expr);                           \
    ASSERT_TRUE(pt_s_.is_ok()) << pt_s_.message();         \
  } while (0)

// Every element within atol + rtol*|ref|, and the guards intact.
template <typename T>
void expect_close(const Buf<T>& got, const std::vector<double>& ref, const std::string& what,
                  double atol = Tol<T>::atol, double rtol = Tol<T>::rtol) {
  ASSERT_EQ(static_cast<int64_t>(ref.size()), got.size()) << what << ": size";
  EXPECT_TRUE(got.guards_ok()) << what << ": wrote past the end of the output";
  int bad = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = ref[i];
    if (!(std::fabs(g - r) <= atol + rtol * std::fabs(r))) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << r
                      << " (diff " << g - r << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

inline std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

// Offset in a tensor of dims `in` of the element that output index `out_linear` (of dims `out`)
// reads under numpy broadcasting.
inline int64_t broadcast_source(const Dims& in, const Dims& out, int64_t out_linear) {
  int64_t off = 0, stride = 1;
  const size_t shift = out.size() - in.size();
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t idx = out_linear % out[d];
    out_linear /= out[d];
    if (d >= shift) {
      const int64_t id = in[d - shift];
      if (id != 1) off += idx * stride;
      stride *= id;
    }
  }
  return off;
}

inline std::string seed_trace(uint32_t seed) { return "seed " + std::to_string(seed); }

template <typename T>
class KernelTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;

}  // namespace pt::test
