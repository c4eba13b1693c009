// Import-time folding of Cast (core/dtype.cpp's cast_tensor and get_int): the values come from a
// model file, so every float converts to an integer without undefined behaviour. (A Cast of a
// constant to a type the tool does not have: tests/cli/test_malformed.py's cast_const_unknown_type
// and tests/fuzz/regressions/model/.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/tensor.h"

namespace pt {
namespace {

TEST(CastFold, FloatsOutsideInt64SaturateAndNanIsZero) {
  const std::vector<float> f = {1e30f, -1e30f, std::nanf(""), 2.75f, -2.75f, INFINITY, -INFINITY};
  const std::vector<double> d = {1e300, -1e300, std::nan(""), 9.2233720368547758e18, -9.2233720368547758e18, 0.5};
  const int64_t hi = std::numeric_limits<int64_t>::max(), lo = std::numeric_limits<int64_t>::min();
  HostTensor tf = HostTensor::from<float>({static_cast<int64_t>(f.size())}, f);
  HostTensor tf64 = cast_tensor(tf, DType::kInt64);
  const std::vector<int64_t> want_f = {hi, lo, 0, 2, -2, hi, lo};
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(tf.get_int(i), want_f[i]) << "float element " << i;
    EXPECT_EQ(tf64.as<int64_t>()[i], want_f[i]) << "float element " << i;
  }
  HostTensor td = HostTensor::from<double>({static_cast<int64_t>(d.size())}, d);
  const std::vector<int64_t> want_d = {hi, lo, 0, hi, lo, 0};  // 2^63 itself is past the top
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(td.get_int(i), want_d[i]) << "double element " << i;
  HostTensor t32 = cast_tensor(tf, DType::kInt32);
  EXPECT_EQ(t32.as<int32_t>()[3], 2);
  EXPECT_EQ(t32.as<int32_t>()[4], -2);
  EXPECT_EQ(t32.as<int32_t>()[2], 0);
}

}  // namespace
}  // namespace pt
