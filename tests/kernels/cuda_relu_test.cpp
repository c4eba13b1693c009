// CUDA Relu and ReluGrad: forward against the CPU kernel, backward against a naive host loop, in
// float and double, on sizes 1, 1000 and 2^20 + 3, with guard elements after every output to
// catch out-of-bounds writes. Without a GPU these skip; the table and argument checks still run.
#ifdef PIPETRAIN_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/registry.h"

namespace pt {
namespace {

constexpr uint32_t kSeed = 20261202;
constexpr int64_t kGuard = 64;         // sentinel elements after each device output
constexpr double kSentinel = -777.25;  // neither Relu nor ReluGrad of inputs in [-1, 1] makes it
const int64_t kSizes[] = {1, 1000, (int64_t{1} << 20) + 3};

template <typename T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr double atol = 1e-6, rtol = 1e-6;
};
template <>
struct Tolerance<double> {
  static constexpr double atol = 1e-12, rtol = 1e-12;
};

// One device allocation, freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (p_) (void)cuda::device_free(p_);
  }
  Status alloc(size_t bytes) { return cuda::device_alloc(&p_, bytes); }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// n values uniform in [-1, 1], every 7th exactly 0 (the kink).
template <typename T>
std::vector<T> random_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? T(0) : static_cast<T>(dist(gen));
  return v;
}

// Copies each input (n elements) to the device, runs `fn` into one output of n elements followed
// by kGuard sentinels (the whole buffer starts as sentinels), and reads back all n + kGuard.
template <typename T>
Status run_on_device(KernelFn fn, std::initializer_list<const std::vector<T>*> inputs, int64_t n,
                     std::vector<T>* out) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  std::vector<DeviceBuffer> bufs;
  bufs.reserve(inputs.size() + 1);
  std::vector<TensorView> in_views;
  for (const std::vector<T>* in : inputs) {
    bufs.emplace_back();
    RETURN_IF_ERROR(bufs.back().alloc(bytes));
    RETURN_IF_ERROR(cuda::copy_to_device(bufs.back().get(), in->data(), bytes));
    in_views.push_back(TensorView{bufs.back().get(), dtype_of<T>(), {n}});
  }
  out->assign(static_cast<size_t>(n + kGuard), static_cast<T>(kSentinel));
  const size_t out_bytes = out->size() * sizeof(T);
  bufs.emplace_back();
  RETURN_IF_ERROR(bufs.back().alloc(out_bytes));
  RETURN_IF_ERROR(cuda::copy_to_device(bufs.back().get(), out->data(), out_bytes));
  const TensorView out_view{bufs.back().get(), dtype_of<T>(), {n}};

  const AttrMap attrs;
  RETURN_IF_ERROR(fn(KernelCall{in_views, {&out_view, 1}, attrs, nullptr}));
  RETURN_IF_ERROR(cuda::device_synchronize());
  return cuda::copy_to_host(out->data(), bufs.back().get(), out_bytes);
}

// got: n results then kGuard sentinels; ref: n expected values.
template <typename T>
::testing::AssertionResult matches(const std::vector<T>& got, const std::vector<T>& ref,
                                   int64_t n) {
  int64_t bad = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < n + kGuard; ++i) {
    const bool guard = i >= n;
    const double g = got[i], want = guard ? kSentinel : static_cast<double>(ref[i]);
    const double tol = guard ? 0.0 : Tolerance<T>::atol + Tolerance<T>::rtol * std::fabs(want);
    if (std::fabs(g - want) <= tol) continue;
    if (bad++ < 5)
      first << (guard ? " guard[" : " [") << (guard ? i - n : i) << "] got " << g << " want "
            << want;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << "+" << kGuard
                                       << " elements differ (seed " << kSeed << "):" << first.str();
}

template <typename T>
class CudaReluTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  }
};

struct TypeName {
  template <typename T>
  static std::string GetName(int) {
    return dtype_name(dtype_of<T>());
  }
};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CudaReluTest, FloatTypes, TypeName);

TYPED_TEST(CudaReluTest, ForwardMatchesCpu) {
  using T = TypeParam;
  const KernelFn cpu = find_kernel("Relu", DeviceKind::kCpu, dtype_of<T>());
  const KernelFn gpu = find_kernel("Relu", DeviceKind::kCuda, dtype_of<T>());
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n) + ", seed " + std::to_string(kSeed));
    const std::vector<T> x = random_values<T>(n, kSeed);
    const HostTensor x_host = HostTensor::from<T>({n}, x);
    HostTensor y_host(dtype_of<T>(), {n});
    const TensorView in = x_host.view(), out = y_host.view();
    const AttrMap attrs;
    const Status cpu_status = cpu(KernelCall{{&in, 1}, {&out, 1}, attrs, nullptr});
    ASSERT_TRUE(cpu_status.is_ok()) << cpu_status.message();
    const std::vector<T> ref(y_host.as<T>(), y_host.as<T>() + n);

    std::vector<T> got;
    const Status s = run_on_device<T>(gpu, {&x}, n, &got);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_TRUE(matches(got, ref, n));
  }
}

TYPED_TEST(CudaReluTest, GradMatchesHostLoop) {
  using T = TypeParam;
  const KernelFn gpu = find_kernel("ReluGrad", DeviceKind::kCuda, dtype_of<T>());
  ASSERT_NE(gpu, nullptr);
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n = " + std::to_string(n) + ", seed " + std::to_string(kSeed));
    const std::vector<T> dy = random_values<T>(n, kSeed);
    std::vector<T> y = random_values<T>(n, kSeed + 1);
    for (T& v : y) v = v > T(0) ? v : T(0);  // a forward output: zeros where the unit is off
    std::vector<T> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ref[i] = y[i] > T(0) ? dy[i] : T(0);

    std::vector<T> got;
    const Status s = run_on_device<T>(gpu, {&dy, &y}, n, &got);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_TRUE(matches(got, ref, n));
  }
}

// These need no GPU: they run wherever the CUDA backend is compiled in.
TEST(CudaKernelTable, HasReluAndReluGradInBothDtypes) {
  for (const char* op : {"Relu", "ReluGrad"})
    for (DType t : {DType::kFloat32, DType::kFloat64})
      EXPECT_TRUE(has_kernel(op, DeviceKind::kCuda, t)) << op << " " << dtype_name(t);
  for (const KernelEntry& e : cuda::kernel_table()) EXPECT_EQ(e.device, DeviceKind::kCuda) << e.op;
}

TEST(CudaKernelTable, ReasonIsGivenExactlyWhenUnavailable) {
  EXPECT_EQ(cuda_available(), cuda_unavailable_reason().empty()) << cuda_unavailable_reason();
}

// Malformed calls are refused before any CUDA call is made, naming the op.
TEST(CudaKernelTable, ReluRejectsMalformedCalls) {
  const KernelFn relu = find_kernel("Relu", DeviceKind::kCuda, DType::kFloat32);
  const KernelFn grad = find_kernel("ReluGrad", DeviceKind::kCuda, DType::kFloat32);
  ASSERT_NE(relu, nullptr);
  ASSERT_NE(grad, nullptr);
  float dummy[4] = {};
  const AttrMap attrs;
  const TensorView f4{dummy, DType::kFloat32, {4}}, f3{dummy, DType::kFloat32, {3}};
  const TensorView d4{dummy, DType::kFloat64, {2}};

  Status s = relu(KernelCall{{}, {&f4, 1}, attrs, nullptr});  // no input
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  EXPECT_NE(s.message().find("Relu (cuda)"), std::string::npos) << s.message();
  s = relu(KernelCall{{&f4, 1}, {&f3, 1}, attrs, nullptr});  // size mismatch
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("[3]"), std::string::npos) << s.message();
  s = relu(KernelCall{{&d4, 1}, {&f4, 1}, attrs, nullptr});  // dtype mismatch
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("float64"), std::string::npos) << s.message();
  s = grad(KernelCall{{&f4, 1}, {&f4, 1}, attrs, nullptr});  // ReluGrad needs dY and Y
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("ReluGrad (cuda)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace pt

#endif  // PIPETRAIN_HAVE_CUDA
