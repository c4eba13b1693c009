// The fused products on CUDA (kernels/cuda/epilogue_ops.cpp) against their CPU kernels
// (kernels/cpu/epilogue.cpp) on the same operands: FusedMatMul with a bias and Relu / Gelu (Z
// kept), FusedGemm with C and Relu, FusedConv with a bias and Relu, BatchNormalization + Relu, in
// float and double; and the
// shared refusals. Skip without a GPU (the table lookups below run everywhere CUDA is built).
#ifdef PIPETRAIN_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/registry.h"

namespace pt {
namespace {

struct Case {
  std::string name;
  const char* op;
  std::vector<Dims> inputs;   // shapes (empty dims: an absent optional input)
  std::vector<Dims> outputs;  // Y[, Z]
  AttrMap attrs;
};

HostTensor random_tensor(DType dt, const Dims& d, std::mt19937& rng) {
  HostTensor t(dt, d);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < t.size(); ++i) {
    if (dt == DType::kFloat64) t.as<double>()[i] = u(rng);
    else t.as<float>()[i] = static_cast<float>(u(rng));
  }
  return t;
}

// Runs `c` on the CPU and on CUDA with the same operands; every output within atol + rtol |ref|.
void compare(const Case& c, DType dt) {
  SCOPED_TRACE(c.name + " " + dtype_name(dt));
  std::mt19937 rng(11);
  std::vector<HostTensor> in;
  for (const Dims& d : c.inputs) in.push_back(random_tensor(dt, d, rng));
  std::vector<HostTensor> out_cpu, out_gpu;
  for (const Dims& d : c.outputs) {
    out_cpu.emplace_back(dt, d);
    out_gpu.emplace_back(dt, d);
  }
  std::vector<TensorView> iv, ov;
  for (auto& t : in) iv.push_back(t.view());
  for (auto& t : out_cpu) ov.push_back(t.view());
  const KernelFn cpu = find_kernel(c.op, DeviceKind::kCpu, dt);
  const KernelFn gpu = find_kernel(c.op, DeviceKind::kCuda, dt);
  ASSERT_TRUE(cpu && gpu);
  ASSERT_TRUE(cpu(KernelCall{iv, ov, c.attrs}).is_ok());
  // Device copies.
  std::vector<void*> dptr;
  std::vector<TensorView> div, dov;
  auto upload = [&](const HostTensor& t, std::vector<TensorView>* views) {
    void* p = nullptr;
    ASSERT_TRUE(cuda::device_alloc(&p, t.bytes() + 256).is_ok());
    ASSERT_TRUE(cuda::copy_to_device(p, t.data(), t.bytes()).is_ok());
    dptr.push_back(p);
    views->push_back(TensorView{p, t.dtype(), t.dims()});
  };
  for (auto& t : in) upload(t, &div);
  for (auto& t : out_gpu) upload(t, &dov);
  const Status st = gpu(KernelCall{div, dov, c.attrs, nullptr});
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_TRUE(cuda::device_synchronize().is_ok());
  for (size_t k = 0; k < out_gpu.size(); ++k) {
    ASSERT_TRUE(cuda::copy_to_host(out_gpu[k].data(), dov[k].data, out_gpu[k].bytes()).is_ok());
    const double atol = dt == DType::kFloat64 ? 1e-11 : 2e-5, rtol = dt == DType::kFloat64 ? 1e-10 : 2e-4;
    for (int64_t i = 0; i < out_cpu[k].size(); ++i) {
      const double ref = out_cpu[k].get_double(i), got = out_gpu[k].get_double(i);
      ASSERT_LE(std::abs(got - ref), atol + rtol * std::abs(ref)) << "output " << k << " element " << i;
    }
  }
  for (void* p : dptr) EXPECT_TRUE(cuda::device_free(p).is_ok());
}

std::vector<Case> cases() {
  std::vector<Case> v;
  auto act = [](const char* a) {
    AttrMap m;
    m.set("activation", std::string(a));
    return m;
  };
  v.push_back({"matmul bias relu", "FusedMatMul", {{2, 5, 7}, {7, 9}, {9}}, {{2, 5, 9}}, act("Relu")});
  v.push_back({"matmul bias gelu keeps Z", "FusedMatMul", {{6, 8}, {8, 12}, {12}}, {{6, 12}, {6, 12}}, act("Gelu")});
  v.push_back({"matmul relu no bias", "FusedMatMul", {{4, 3}, {3, 5}}, {{4, 5}}, act("Relu")});
  v.push_back({"matmul bias only", "FusedMatMul", {{3, 4}, {4, 6}, {1, 6}}, {{3, 6}}, act("none")});
  AttrMap gemm = act("Relu");
  gemm.set("transB", int64_t{1});
  v.push_back({"gemm C relu", "FusedGemm", {{5, 6}, {7, 6}, {7}}, {{5, 7}}, gemm});
  AttrMap conv = act("Relu");
  conv.set("pads", std::vector<int64_t>{1, 1, 1, 1});  // kernel_shape: from W
  v.push_back({"conv bias relu", "FusedConv", {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}}, {{2, 4, 6, 6}}, conv});
  AttrMap conv_nb = act("Relu");
  conv_nb.set("strides", std::vector<int64_t>{2, 2});
  v.push_back({"conv stride relu no bias", "FusedConv", {{1, 2, 7, 7}, {3, 2, 3, 3}}, {{1, 3, 3, 3}}, conv_nb});
  AttrMap bn;
  bn.set("_activation", std::string("Relu"));
  bn.set("_training", int64_t{1});
  v.push_back({"batchnorm relu (training)", "BatchNormalization", {{2, 3, 4, 4}, {3}, {3}, {3}, {3}}, {{2, 3, 4, 4}}, bn});
  return v;
}

TEST(CudaEpilogue, FusedProductsMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << cuda_unavailable_reason();
  for (const Case& c : cases())
    for (DType dt : {DType::kFloat32, DType::kFloat64}) compare(c, dt);
}

// Native on CUDA (not the host fallback), for the dtypes the CPU has; the refusals are the shared
// checks' (a Gelu epilogue without Z): the CPU's message on both.
TEST(CudaEpilogue, NativeEntriesAndSharedRefusals) {
  for (const char* op : {"FusedMatMul", "FusedGemm", "FusedConv"})
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
      EXPECT_TRUE(has_kernel(op, DeviceKind::kCuda, dt)) << op << " " << dtype_name(dt);
      EXPECT_FALSE(runs_on_host(op, DeviceKind::kCuda, dt)) << op << " " << dtype_name(dt);
    }
  AttrMap gelu;
  gelu.set("activation", std::string("Gelu"));
  HostTensor a(DType::kFloat32, {2, 3}), b(DType::kFloat32, {3, 4}), y(DType::kFloat32, {2, 4});
  const TensorView in[2] = {a.view(), b.view()};
  const TensorView out[1] = {y.view()};
  const Status cpu = find_kernel("FusedMatMul", DeviceKind::kCpu, DType::kFloat32)(KernelCall{in, out, gelu});
  const Status gpu = find_kernel("FusedMatMul", DeviceKind::kCuda, DType::kFloat32)(KernelCall{in, out, gelu});
  EXPECT_FALSE(cpu.is_ok());
  EXPECT_EQ(gpu.message(), cpu.message()) << "refused before touching the (host) pointers";
}

// Native kernels that run the CPU kernel for some attributes are named as host fallbacks for those
// calls (the plan's list and the CUDA graphs' refusal read it): convolutions with asymmetric pads in
// every direction of the pass, PadGrad in reflect or edge mode. No GPU needed.
TEST(CudaKernelTable, AttributesThatTakeTheHostAreNamed) {
  AttrMap asym, sym, reflect, constant;
  asym.set("pads", std::vector<int64_t>{0, 0, 1, 1});
  sym.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  reflect.set("mode", std::string("reflect"));
  const Dims x{1, 2, 5, 5}, w{3, 2, 3, 3}, y_asym{1, 3, 4, 4}, y_sym{1, 3, 5, 5};
  auto host = [](const char* op, const AttrMap& a, std::vector<Dims> in, std::vector<Dims> out,
                 DeviceKind d = DeviceKind::kCuda) { return runs_on_host(op, d, DType::kFloat32, a, in, out); };
  EXPECT_TRUE(host("Conv", asym, {x, w}, {y_asym}));
  EXPECT_TRUE(host("FusedConv", asym, {x, w, {3}}, {y_asym}));
  EXPECT_TRUE(host("ConvGradInput", asym, {y_asym, w}, {x}));
  EXPECT_TRUE(host("ConvGradWeight", asym, {y_asym, x}, {w}));
  EXPECT_FALSE(host("Conv", sym, {x, w}, {y_sym}));
  EXPECT_FALSE(host("ConvGradWeight", sym, {y_sym, x}, {w}));
  EXPECT_FALSE(host("Conv", asym, {x, w}, {y_asym}, DeviceKind::kCpu));
  EXPECT_FALSE(host("Conv", asym, {x, w}, {Dims{1, 3, 9, 9}})) << "dims that do not fit: the kernel refuses, no host";
  EXPECT_TRUE(host("PadGrad", reflect, {Dims{1, 4}}, {Dims{1, 2}}));
  EXPECT_FALSE(host("PadGrad", constant, {Dims{1, 4}}, {Dims{1, 2}}));
  EXPECT_TRUE(host("LRN", constant, {x}, {x})) << "an op without a native kernel";
}

}  // namespace
}  // namespace pt

#endif  // PIPETRAIN_HAVE_CUDA
