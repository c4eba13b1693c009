// The fused products (kernels/cpu/epilogue.cpp): FusedMatMul, FusedGemm and FusedConv must write
// exactly the bits of the separate kernels they replace (the product, Add of the bias, Relu or Gelu),
// in float and double, threaded (outputs above the serial threshold) and not, with the pre-activation
// output of a Gelu epilogue; with bfloat16 operands they must equal the bfloat16 product followed by
// the float32 ops. Bad calls are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/registry.h"
#include "tests/kernels/kernel_test_util.h"

namespace pt {
namespace {

using test::Buf;
using test::random_values;

template <typename T>
Buf<T> rand_buf(Dims d, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return Buf<T>::from_doubles(d, random_values(numel(d), seed, lo, hi));
}

template <typename T>
void expect_same_bits(const Buf<T>& got, const Buf<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_TRUE(got.guards_ok()) << what << ": wrote past the end";
  int bad = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const T g = got[i], w = want[i];
    if (std::memcmp(&g, &w, sizeof(T)) != 0 && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", the separate ops give " << w;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

AttrMap with_activation(AttrMap m, const std::string& act) {
  m.set("activation", act);
  return m;
}

// The separate ops: `product` into p, then Add (bias, MatMul only), then the activation.
template <typename T>
void separate(const std::string& product, const std::vector<TensorView>& ins, const Buf<T>* bias,
              const std::string& act, const AttrMap& attrs, Buf<T>* pre, Buf<T>* y) {
  Buf<T> p = Buf<T>::output(y->dims());
  PT_ASSERT_OK(test::run_kernel(product, ins[0].dtype, ins, {p.view()}, attrs));
  if (bias) {
    PT_ASSERT_OK(test::run_kernel("Add", dtype_of<T>(), {p.view(), bias->view()}, {pre->view()}));
  } else {
    *pre = p;
  }
  if (act == "none") {
    *y = *pre;
  } else {
    AttrMap a;
    if (act == "Gelu") a.set("approximate", std::string("none"));
    PT_ASSERT_OK(test::run_kernel(act, dtype_of<T>(), {pre->view()}, {y->view()}, a));
  }
}

template <typename T>
void check_matmul(Dims ad, Dims bd, bool with_bias, const std::string& act, uint32_t seed) {
  const std::string what = std::string("FusedMatMul ") + dims_str(ad) + " x " + dims_str(bd) +
                           (with_bias ? " + bias" : "") + " -> " + act + " (" + dtype_name(dtype_of<T>()) + ")";
  SCOPED_TRACE(what);
  Buf<T> a = rand_buf<T>(ad, seed), b = rand_buf<T>(bd, seed + 1);
  Dims yd = ad;
  yd.back() = bd.back();
  Buf<T> bias = rand_buf<T>({bd.back()}, seed + 2);
  Buf<T> want_pre = Buf<T>::output(yd), want = Buf<T>::output(yd);
  separate<T>("MatMul", {a.view(), b.view()}, with_bias ? &bias : nullptr, act, AttrMap{}, &want_pre, &want);
  Buf<T> y = Buf<T>::output(yd), z = Buf<T>::output(yd);
  std::vector<TensorView> ins = {a.view(), b.view()};
  if (with_bias) ins.push_back(bias.view());
  std::vector<TensorView> outs = {y.view()};
  if (act == "Gelu") outs.push_back(z.view());
  PT_ASSERT_OK(test::run_kernel("FusedMatMul", dtype_of<T>(), ins, outs, with_activation({}, act)));
  expect_same_bits(y, want, what + ": Y");
  if (act == "Gelu") expect_same_bits(z, want_pre, what + ": Z");
}

TEST(Epilogue, FusedMatMulEqualsTheSeparateOps) {
  uint32_t seed = 9100;
  for (const char* act : {"none", "Relu", "Gelu"}) {
    // A Linear layer on tokens (batch folded into rows), a 2-D product, one above the serial
    // threshold (the epilogue runs threaded), a row narrower than a vector, a batched product.
    check_matmul<float>({4, 6, 8}, {8, 24}, true, act, seed += 3);
    check_matmul<float>({37, 19}, {19, 5}, true, act, seed += 3);
    check_matmul<float>({512, 64}, {64, 192}, true, act, seed += 3);
    check_matmul<float>({3, 5, 7}, {3, 7, 11}, true, act, seed += 3);
    check_matmul<double>({4, 6, 8}, {8, 24}, true, act, seed += 3);
    check_matmul<double>({300, 16}, {16, 130}, true, act, seed += 3);
    if (std::string(act) != "none") {
      check_matmul<float>({9, 13}, {13, 40}, false, act, seed += 3);
      check_matmul<double>({9, 13}, {13, 40}, false, act, seed += 3);
    }
  }
}

template <typename T>
void check_gemm_conv(const std::string& product, std::vector<Dims> dims, const AttrMap& attrs, Dims yd,
                     const std::string& act, uint32_t seed) {
  const std::string what = "Fused" + product + " -> " + act + " (" + dtype_name(dtype_of<T>()) + ")";
  SCOPED_TRACE(what);
  std::vector<Buf<T>> bufs;
  for (size_t i = 0; i < dims.size(); ++i) bufs.push_back(rand_buf<T>(dims[i], seed + static_cast<uint32_t>(i)));
  std::vector<TensorView> ins;
  for (auto& b : bufs) ins.push_back(b.view());
  Buf<T> want_pre = Buf<T>::output(yd), want = Buf<T>::output(yd);
  separate<T>(product, ins, nullptr, act, attrs, &want_pre, &want);
  Buf<T> y = Buf<T>::output(yd), z = Buf<T>::output(yd);
  std::vector<TensorView> outs = {y.view()};
  if (act == "Gelu") outs.push_back(z.view());
  PT_ASSERT_OK(test::run_kernel("Fused" + product, dtype_of<T>(), ins, outs, with_activation(attrs, act)));
  expect_same_bits(y, want, what + ": Y");
  if (act == "Gelu") expect_same_bits(z, want_pre, what + ": Z");
}

TEST(Epilogue, FusedGemmAndConvEqualTheSeparateOps) {
  AttrMap gemm;
  gemm.set("transB", int64_t{1});
  gemm.set("alpha", 0.75f);
  AttrMap conv;
  conv.set("kernel_shape", std::vector<int64_t>{3, 3});
  conv.set("strides", std::vector<int64_t>{1, 1});
  conv.set("dilations", std::vector<int64_t>{1, 1});
  conv.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  conv.set("group", int64_t{1});
  uint32_t seed = 9300;
  for (const char* act : {"Relu", "Gelu"}) {
    check_gemm_conv<float>("Gemm", {{64, 32}, {48, 32}, {48}}, gemm, {64, 48}, act, seed += 4);
    check_gemm_conv<float>("Gemm", {{700, 64}, {96, 64}}, gemm, {700, 96}, act, seed += 4);
    check_gemm_conv<double>("Gemm", {{10, 7}, {5, 7}, {5}}, gemm, {10, 5}, act, seed += 4);
    check_gemm_conv<float>("Conv", {{4, 3, 12, 12}, {8, 3, 3, 3}, {8}}, conv, {4, 8, 12, 12}, act, seed += 4);
    check_gemm_conv<float>("Conv", {{2, 16, 20, 20}, {32, 16, 3, 3}}, conv, {2, 32, 20, 20}, act, seed += 4);
    check_gemm_conv<double>("Conv", {{2, 2, 5, 5}, {3, 2, 3, 3}, {3}}, conv, {2, 3, 5, 5}, act, seed += 4);
  }
}

// bfloat16 operands (--precision bf16 casts A and B): the bfloat16 MatMul, then the float32 Add and
// Gelu, bit for bit.
TEST(Epilogue, BFloat16OperandsEqualTheSeparateOps) {
  if (!has_kernel("MatMul", DeviceKind::kCpu, DType::kBFloat16)) GTEST_SKIP() << "no bfloat16 MatMul kernel";
  const Dims ad{6, 5, 32}, bd{32, 48}, yd{6, 5, 48};
  std::vector<uint16_t> a16, b16;
  for (double v : random_values(numel(ad), 9500)) a16.push_back(cpu::f32_to_bf16(static_cast<float>(v)));
  for (double v : random_values(numel(bd), 9501)) b16.push_back(cpu::f32_to_bf16(static_cast<float>(v)));
  const TensorView a{a16.data(), DType::kBFloat16, ad}, b{b16.data(), DType::kBFloat16, bd};
  Buf<float> bias = rand_buf<float>({48}, 9502);
  Buf<float> want_pre = Buf<float>::output(yd), want = Buf<float>::output(yd);
  separate<float>("MatMul", {a, b}, &bias, "Gelu", AttrMap{}, &want_pre, &want);
  Buf<float> y = Buf<float>::output(yd), z = Buf<float>::output(yd);
  PT_ASSERT_OK(test::run_kernel("FusedMatMul", DType::kBFloat16, {a, b, bias.view()}, {y.view(), z.view()},
                                with_activation({}, "Gelu")));
  expect_same_bits(y, want, "bf16 FusedMatMul: Y");
  expect_same_bits(z, want_pre, "bf16 FusedMatMul: Z");
}

// BatchNormalization with _activation Relu (the epilogue pass's BatchNormalization + Relu): the
// bits of BatchNormalization then Relu, in training and inference mode, over planes (spatial maps)
// and over rows (1x1 maps), float (the per-ISA plane loop) and double.
template <typename T>
void check_batchnorm_relu(Dims xd, bool training, uint32_t seed) {
  const std::string what = "BatchNormalization + Relu " + dims_str(xd) + (training ? " training" : " inference") + " (" +
                           dtype_name(dtype_of<T>()) + ")";
  SCOPED_TRACE(what);
  const int64_t c = xd[1];
  Buf<T> x = rand_buf<T>(xd, seed, -2.0, 2.0), sc = rand_buf<T>({c}, seed + 1, 0.5, 1.5), b = rand_buf<T>({c}, seed + 2);
  Buf<T> rm0 = rand_buf<T>({c}, seed + 3), rv0 = rand_buf<T>({c}, seed + 4, 0.5, 1.5);
  AttrMap at;
  at.set("_training", static_cast<int64_t>(training));
  Buf<T> rm = rm0, rv = rv0, z = Buf<T>::output(xd), want = Buf<T>::output(xd);
  PT_ASSERT_OK(test::run_kernel("BatchNormalization", dtype_of<T>(), {x.view(), sc.view(), b.view(), rm.view(), rv.view()},
                                {z.view()}, at));
  PT_ASSERT_OK(test::run_kernel("Relu", dtype_of<T>(), {z.view()}, {want.view()}));
  Buf<T> rm2 = rm0, rv2 = rv0, y = Buf<T>::output(xd);
  at.set("_activation", std::string("Relu"));
  PT_ASSERT_OK(test::run_kernel("BatchNormalization", dtype_of<T>(), {x.view(), sc.view(), b.view(), rm2.view(), rv2.view()},
                                {y.view()}, at));
  expect_same_bits(y, want, what + ": Y");
  expect_same_bits(rm2, rm, what + ": running mean");
  expect_same_bits(rv2, rv, what + ": running variance");
}

TEST(Epilogue, BatchNormReluEqualsTheSeparateOps) {
  uint32_t seed = 9600;
  for (bool training : {true, false}) {
    check_batchnorm_relu<float>({4, 6, 5, 5}, training, seed += 5);
    check_batchnorm_relu<float>({16, 32, 16, 16}, training, seed += 5);  // threaded
    check_batchnorm_relu<float>({64, 40, 1, 1}, training, seed += 5);    // rows of channels
    check_batchnorm_relu<double>({3, 4, 3, 7}, training, seed += 5);
  }
  Buf<float> x = rand_buf<float>({2, 3, 2, 2}, 1), s = rand_buf<float>({3}, 2), v = rand_buf<float>({3}, 3, 0.5, 1);
  Buf<float> y = Buf<float>::output({2, 3, 2, 2});
  AttrMap at;
  at.set("_activation", std::string("Gelu"));
  Status st = test::run_kernel("BatchNormalization", DType::kFloat32, {x.view(), s.view(), s.view(), s.view(), v.view()},
                               {y.view()}, at);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("_activation 'Gelu'"), std::string::npos) << st.message();
}

TEST(Epilogue, BadCallsAreRefused) {
  Buf<float> a = rand_buf<float>({4, 3}, 1), b = rand_buf<float>({3, 5}, 2), bias = rand_buf<float>({4}, 3);
  Buf<float> y = Buf<float>::output({4, 5});
  Status st = test::run_kernel("FusedMatMul", DType::kFloat32, {a.view(), b.view()}, {y.view()}, with_activation({}, "Gelu"));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("pre-activation"), std::string::npos) << st.message();
  st = test::run_kernel("FusedMatMul", DType::kFloat32, {a.view(), b.view()}, {y.view()}, with_activation({}, "Swish"));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("activation 'Swish'"), std::string::npos) << st.message();
  st = test::run_kernel("FusedMatMul", DType::kFloat32, {a.view(), b.view(), bias.view()}, {y.view()},
                        with_activation({}, "Relu"));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("last axis"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace pt
