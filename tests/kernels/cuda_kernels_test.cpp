// The CUDA backend against the CPU: every case runs the registered CPU kernel on host tensors and
// the registered CUDA kernel on device copies of the same inputs, then compares every output (and
// every input the op updates in place) with atol + rtol*|ref|, with guard elements after each
// device output. Parameterised over cases (op, shapes, attributes) x {float, double}. Without a
// GPU these skip with the driver's message; the table, allocator and refusal tests run anyway.
#ifdef PIPETRAIN_HAVE_CUDA

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/device.h"
#include "kernels/cuda/ops_util.h"
#include "kernels/registry.h"
#include "kernels/unary_ops.h"

namespace pt {
namespace {

constexpr uint32_t kSeed = 20261202;
constexpr size_t kGuardBytes = 256;
constexpr unsigned char kGuardByte = 0xA5;

// ---- cases --------------------------------------------------------------------------------------

enum class Gen {
  kUniform,   // U(-1, 1)
  kPositive,  // U(0.5, 2)
  kLabels,    // int64 in [0, param)
  kMask,      // bool, ~70% true
  kStep,      // int64 scalar = param
  kScalar,    // T scalar = param
  kIndices,   // int64 in [0, param)
  kAbsent,    // optional input left out (data == nullptr)
};

struct In {
  Dims dims;
  Gen gen = Gen::kUniform;
  double param = 0;
  bool fixed_dtype = false;  // labels, masks, steps keep their own dtype
};
In u(Dims d) { return {std::move(d)}; }
In pos(Dims d) { return {std::move(d), Gen::kPositive}; }
In labels(Dims d, int64_t c) { return {std::move(d), Gen::kLabels, static_cast<double>(c), true}; }
In mask(Dims d) { return {std::move(d), Gen::kMask, 0, true}; }
In step(int64_t s) { return {{1}, Gen::kStep, static_cast<double>(s), true}; }
In scalar(double v) { return {{}, Gen::kScalar, v}; }
In indices(Dims d, int64_t n) { return {std::move(d), Gen::kIndices, static_cast<double>(n), true}; }
In absent() { return {{}, Gen::kAbsent}; }

struct Out {
  Dims dims;
  DType fixed = DType::kUndefined;  // kUndefined: the case's T
};

struct Case {
  std::string name;  // unique, gtest-safe
  std::string op;
  std::vector<In> in;
  std::vector<Out> out;
  AttrMap attrs;
  std::vector<size_t> in_place;  // inputs the op updates (compared too)
  double tol_scale = 1;          // multiplies the dtype's tolerances
};

AttrMap attrs(std::initializer_list<std::pair<const char*, Attribute>> kv) {
  AttrMap m;
  for (const auto& [k, v] : kv) m.set(k, v);
  return m;
}
using Ints = std::vector<int64_t>;
using Floats = std::vector<float>;

std::vector<Case> make_cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, std::string op, std::vector<In> in, std::vector<Out> out, AttrMap a = {},
                 std::vector<size_t> in_place = {}, double tol_scale = 1) {
    c.push_back(Case{std::move(name), std::move(op), std::move(in), std::move(out), std::move(a), std::move(in_place),
                     tol_scale});
  };
  const Dims e{3, 1000};
  // Unary ops and their gradients.
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Neg", "Exp", "Erf", "Softplus", "Abs", "HardSwish", "Sin", "Cos",
                         "Tan", "Sinh", "Cosh", "Atan", "Softsign", "Mish", "Gelu"})
    add(std::string(op) + "_3x1000", op, {u(e)}, {{e}}, {});
  add("Gelu_tanh", "Gelu", {u(e)}, {{e}}, attrs({{"approximate", std::string("tanh")}}));
  for (const char* op : {"Log", "Sqrt", "Reciprocal"}) add(std::string(op) + "_3x1000", op, {pos(e)}, {{e}}, {});
  add("Sigmoid_large", "Sigmoid", {u({(1 << 20) + 3})}, {{{(1 << 20) + 3}}}, {});
  add("LeakyRelu", "LeakyRelu", {u(e)}, {{e}}, attrs({{"alpha", 0.2f}}));
  add("Elu", "Elu", {u(e)}, {{e}}, attrs({{"alpha", 0.7f}}));
  add("Selu", "Selu", {u(e)}, {{e}}, {});
  add("HardSigmoid", "HardSigmoid", {u(e)}, {{e}}, attrs({{"alpha", 0.3f}, {"beta", 0.4f}}));
  add("Clip_attrs", "Clip", {u(e)}, {{e}}, attrs({{"min", -0.3f}, {"max", 0.5f}}));
  add("Clip_inputs", "Clip", {u(e), scalar(-0.2), scalar(0.6)}, {{e}}, {});
  for (const char* op : {"SigmoidGrad", "TanhGrad", "EluGrad", "SeluGrad", "HardSwishGrad", "ErfGrad", "AbsGrad",
                         "LeakyReluGrad", "HardSigmoidGrad", "ReluGrad", "CosGrad", "TanGrad", "AtanGrad",
                         "SoftsignGrad", "MishGrad", "GeluGrad"})
    add(std::string(op) + "_3x1000", op, {u(e), u(e)}, {{e}}, {});
  add("GeluGrad_tanh", "GeluGrad", {u(e), u(e)}, {{e}}, attrs({{"approximate", std::string("tanh")}}));
  add("ClipGrad_attrs", "ClipGrad", {u(e), u(e)}, {{e}}, attrs({{"min", -0.3f}, {"max", 0.5f}}));
  add("ClipGrad_inputs", "ClipGrad", {u(e), u(e), scalar(-0.2), scalar(0.6)}, {{e}}, {});
  // Broadcasting binary ops, Sum, Mean, Transpose, copies.
  add("Add_bcast", "Add", {u({4, 3, 5}), u({3, 1})}, {{{4, 3, 5}}}, {});
  add("Add_rowbias", "Add", {u({64, 100}), u({100})}, {{{64, 100}}}, {});
  add("Sub_same", "Sub", {u({7, 9}), u({7, 9})}, {{{7, 9}}}, {});
  add("Mul_scalar", "Mul", {u({5, 6}), u({})}, {{{5, 6}}}, {});
  add("Div_bcast", "Div", {u({2, 3, 4}), pos({2, 1, 4})}, {{{2, 3, 4}}}, {});
  add("Add_outer", "Add", {u({5, 1}), u({1, 6})}, {{{5, 6}}}, {});
  add("PRelu", "PRelu", {u({2, 3, 4, 4}), u({3, 1, 1})}, {{{2, 3, 4, 4}}}, {});
  add("PReluGrad", "PReluGrad", {u({2, 3, 4}), u({2, 3, 4}), u({3, 1})}, {{{2, 3, 4}}, {{2, 3, 4}}}, {});
  add("Sum3", "Sum", {u({4, 5}), u({5}), u({4, 1})}, {{{4, 5}}}, {});
  add("Mean2", "Mean", {u({3, 4}), u({3, 4})}, {{{3, 4}}}, {});
  add("Transpose_0231", "Transpose", {u({2, 3, 4, 5})}, {{{2, 4, 5, 3}}}, attrs({{"perm", Ints{0, 2, 3, 1}}}));
  add("Transpose_default", "Transpose", {u({6, 7})}, {{{7, 6}}}, {});
  add("Reshape", "Reshape", {u({4, 6})}, {{{2, 12}}}, {});
  // Data movement and LayerNormalization (tensor_ops.cpp, tensor.cu): the ops a transformer's
  // embedding, attention heads and norms use.
  const AttrMap sl = attrs({{"_starts", Ints{0, 1, 0}}, {"_steps", Ints{1, 2, 2}}});
  add("Slice_step2", "Slice", {u({4, 10, 6})}, {{{4, 5, 3}}}, sl);
  add("Slice_negative_step", "Slice", {u({5, 8})}, {{{5, 3}}}, attrs({{"_starts", Ints{0, 7}}, {"_steps", Ints{1, -3}}}));
  add("SliceGrad_zeros", "SliceGrad", {u({4, 5, 3})}, {{{4, 10, 6}}}, sl);
  add("SliceGrad_acc", "SliceGrad", {u({4, 5, 3}), u({4, 10, 6})}, {{{4, 10, 6}}}, sl);
  add("Concat_axis1", "Concat", {u({2, 3, 4}), u({2, 5, 4}), u({2, 1, 4})}, {{{2, 9, 4}}}, attrs({{"axis", int64_t{1}}}));
  add("Concat_axis0", "Concat", {u({3, 7}), u({2, 7})}, {{{5, 7}}}, {});
  add("Split_axis2", "Split", {u({3, 4, 10})}, {{{3, 4, 3}}, {{3, 4, 7}}}, attrs({{"axis", int64_t{2}}}));
  add("Expand_rows", "Expand", {u({1, 5})}, {{{4, 3, 5}}}, {});
  add("Gather_embedding", "Gather", {u({50, 16}), indices({4, 7}, 50)}, {{{4, 7, 16}}}, {});
  add("Gather_axis1", "Gather", {u({3, 20, 5}), indices({6}, 20)}, {{{3, 6, 5}}}, attrs({{"axis", int64_t{1}}}));
  add("GatherGrad_repeats", "GatherGrad", {u({4, 30, 16}), indices({4, 30}, 10)}, {{{10, 16}}}, {});
  add("LayerNorm_stats", "LayerNormalization", {u({6, 64}), u({64}), u({64})}, {{{6, 64}}, {{6, 1}}, {{6, 1}}},
      attrs({{"axis", int64_t{1}}}));
  add("LayerNorm_no_bias_axis1", "LayerNormalization", {u({3, 4, 5}), u({4, 5})}, {{{3, 4, 5}}},
      attrs({{"axis", int64_t{1}}, {"epsilon", 1e-3f}}));
  add("LayerNorm_wide", "LayerNormalization", {u({40, 768}), u({768}), u({768})}, {{{40, 768}}},
      attrs({{"axis", int64_t{1}}}));
  add("LayerNormGrad", "LayerNormalizationGrad", {u({6, 64}), u({6, 64}), u({64})}, {{{6, 64}}, {{64}}, {{64}}},
      attrs({{"axis", int64_t{1}}}));
  add("LayerNormGrad_wide", "LayerNormalizationGrad", {u({40, 768}), u({40, 768}), u({768})},
      {{{40, 768}}, {{768}}, {{768}}}, attrs({{"axis", int64_t{1}}}), {}, 10);
  // Pad (pad.cu): the three modes forward; the constant backward natively, reflect through the
  // host fallback.
  const AttrMap pc = attrs({{"_pads", Ints{0, 1, 2, 0, 2, 1}}, {"_value", 0.5f}});
  add("Pad_constant", "Pad", {u({2, 3, 4})}, {{{2, 6, 7}}}, pc);
  add("Pad_edge", "Pad", {u({2, 3, 4})}, {{{2, 6, 7}}}, attrs({{"_pads", Ints{0, 1, 2, 0, 2, 1}}, {"mode", std::string("edge")}}));
  add("Pad_reflect", "Pad", {u({2, 3, 4})}, {{{2, 5, 7}}},
      attrs({{"_pads", Ints{0, 1, 2, 0, 1, 1}}, {"mode", std::string("reflect")}}));
  add("PadGrad_constant", "PadGrad", {u({2, 6, 7})}, {{{2, 3, 4}}}, pc);
  add("PadGrad_reflect_fallback", "PadGrad", {u({2, 5, 7})}, {{{2, 3, 4}}},
      attrs({{"_pads", Ints{0, 1, 2, 0, 1, 1}}, {"mode", std::string("reflect")}}));
  // Resize and ResizeGrad (resize.cu): the U-Net's nearest 2x upsampling, linear modes up and down,
  // ties of nearest modes, 1-D, 5-D, and the host fallback past kMaxRank dims (the shape function's
  // attributes: per-dim _scales, _coord, _nearest).
  auto rz = [](const char* mode, const char* coord, const char* nearest, Floats scales) {
    return attrs({{"mode", std::string(mode)}, {"_coord", std::string(coord)}, {"_nearest", std::string(nearest)},
                  {"_scales", std::move(scales)}});
  };
  const AttrMap up2 = rz("nearest", "asymmetric", "floor", {1, 1, 2, 2});
  const AttrMap lin_hp = rz("linear", "half_pixel", "round_prefer_floor", {1, 1, 2, 1.5f});
  const AttrMap lin_ac = rz("linear", "align_corners", "round_prefer_floor", {1, 1, 1.75f, 0.6f});
  const AttrMap lin_down = rz("linear", "pytorch_half_pixel", "round_prefer_floor", {1, 1, 0.75f, 0.5f});
  const AttrMap lin_sym = rz("linear", "half_pixel_symmetric", "round_prefer_floor", {1, 1, 1.7f, 0.6f});
  const AttrMap near_ceil = rz("nearest", "half_pixel", "round_prefer_ceil", {1, 1, 1.5f, 1});
  const AttrMap near_down = rz("nearest", "tf_half_pixel_for_nn", "ceil", {1, 0.5f, 0.4f});
  const AttrMap lin_5d = rz("linear", "half_pixel", "round_prefer_floor", {1, 1, 2, 1.5f, 1});
  const AttrMap lin_x5 = rz("linear", "asymmetric", "round_prefer_floor", {1, 5, 1});
  add("Resize_nearest_up2", "Resize", {u({2, 3, 5, 6})}, {{{2, 3, 10, 12}}}, up2);
  add("Resize_linear_half_pixel", "Resize", {u({2, 3, 5, 6})}, {{{2, 3, 10, 9}}}, lin_hp);
  add("Resize_linear_align_corners", "Resize", {u({1, 2, 4, 5})}, {{{1, 2, 7, 3}}}, lin_ac);
  add("Resize_linear_down", "Resize", {u({2, 2, 8, 8})}, {{{2, 2, 6, 4}}}, lin_down);
  add("Resize_linear_half_pixel_symmetric", "Resize", {u({1, 2, 4, 5})}, {{{1, 2, 6, 3}}}, lin_sym);
  add("Resize_nearest_ties_ceil", "Resize", {u({1, 2, 6, 7})}, {{{1, 2, 9, 7}}}, near_ceil);
  add("Resize_nearest_down_3d", "Resize", {u({3, 8, 10})}, {{{3, 4, 4}}}, near_down);
  add("Resize_linear_5d", "Resize", {u({1, 2, 3, 4, 5})}, {{{1, 2, 6, 6, 5}}}, lin_5d);
  add("Resize_linear_1d", "Resize", {u({7})}, {{{16}}}, rz("linear", "align_corners", "floor", {16.0f / 7}));
  add("Resize_unet_size", "Resize", {u({2, 16, 32, 32})}, {{{2, 16, 64, 64}}}, up2);
  add("Resize_rank9_fallback", "Resize", {u({2, 2, 2, 2, 2, 2, 2, 2, 2})}, {{{3, 3, 3, 3, 3, 3, 3, 3, 3}}},
      rz("linear", "half_pixel", "round_prefer_floor", Floats(9, 1.5f)));
  add("ResizeGrad_nearest_up2", "ResizeGrad", {u({2, 3, 10, 12})}, {{{2, 3, 5, 6}}}, up2);
  add("ResizeGrad_linear_half_pixel", "ResizeGrad", {u({2, 3, 10, 9})}, {{{2, 3, 5, 6}}}, lin_hp);
  add("ResizeGrad_linear_align_corners", "ResizeGrad", {u({1, 2, 7, 3})}, {{{1, 2, 4, 5}}}, lin_ac);
  add("ResizeGrad_linear_down", "ResizeGrad", {u({2, 2, 6, 4})}, {{{2, 2, 8, 8}}}, lin_down);
  add("ResizeGrad_linear_half_pixel_symmetric", "ResizeGrad", {u({1, 2, 6, 3})}, {{{1, 2, 4, 5}}}, lin_sym);
  add("ResizeGrad_nearest_ties_ceil", "ResizeGrad", {u({1, 2, 9, 7})}, {{{1, 2, 6, 7}}}, near_ceil);
  add("ResizeGrad_nearest_down_3d", "ResizeGrad", {u({3, 4, 4})}, {{{3, 8, 10}}}, near_down);
  add("ResizeGrad_linear_5d", "ResizeGrad", {u({1, 2, 6, 6, 5})}, {{{1, 2, 3, 4, 5}}}, lin_5d);
  add("ResizeGrad_linear_x5", "ResizeGrad", {u({3, 35, 4})}, {{{3, 7, 4}}}, lin_x5);
  add("ResizeGrad_unet_size", "ResizeGrad", {u({2, 16, 64, 64})}, {{{2, 16, 32, 32}}}, up2);
  add("ResizeGrad_rank9_fallback", "ResizeGrad", {u({3, 3, 3, 3, 3, 3, 3, 3, 3})}, {{{2, 2, 2, 2, 2, 2, 2, 2, 2}}},
      rz("linear", "half_pixel", "round_prefer_floor", Floats(9, 1.5f)));
  // Comparisons and Cast (select.cu): bool and integer outputs compared exactly.
  add("Equal_bcast", "Equal", {u({4, 1, 6}), u({3, 1})}, {{{4, 3, 6}, DType::kBool}}, {});
  add("Equal_same_dims", "Equal", {u({5, 7}), u({5, 7})}, {{{5, 7}, DType::kBool}}, {});
  add("Less_bcast", "Less", {u({2, 3, 4}), u({4})}, {{{2, 3, 4}, DType::kBool}}, {});
  add("Greater_scalar", "Greater", {u({6, 5}), u({})}, {{{6, 5}, DType::kBool}}, {});
  add("Cast_to_int64", "Cast", {u({300})}, {{{300}, DType::kInt64}}, {});
  add("Cast_to_bool", "Cast", {u({300})}, {{{300}, DType::kBool}}, {});
  add("Cast_to_int32", "Cast", {pos({50})}, {{{50}, DType::kInt32}}, {});
  // Reductions.
  add("ReduceSum_axis1", "ReduceSum", {u({4, 5, 6})}, {{{4, 1, 6}}}, attrs({{"_axes", Ints{1}}}));
  add("ReduceMean_axes02", "ReduceMean", {u({4, 5, 6})}, {{{1, 5, 1}}}, attrs({{"_axes", Ints{0, 2}}}));
  add("ReduceMax_last", "ReduceMax", {u({4, 5, 600})}, {{{4, 5, 1}}}, attrs({{"_axes", Ints{2}}}));
  add("ReduceSum_all", "ReduceSum", {u({300, 700})}, {{{1, 1}}}, attrs({{"_axes", Ints{0, 1}}}));
  // Few outputs with many elements each: the partitioned path of reduce.cu.
  add("ReduceMax_all_partitioned", "ReduceMax", {u({400, 500})}, {{{1, 1}}}, attrs({{"_axes", Ints{0, 1}}}));
  add("ReduceMean_rows_partitioned", "ReduceMean", {u({3, 70000})}, {{{3, 1}}}, attrs({{"_axes", Ints{1}}}));
  add("ConvGradBias_partitioned", "ConvGradBias", {u({16, 8, 64, 64})}, {{{8}}});
  add("ReduceSumToShape_col", "ReduceSumToShape", {u({64, 100})}, {{{100}}}, {});
  add("ReduceSumToShape_mid", "ReduceSumToShape", {u({8, 16, 4})}, {{{16, 1}}}, {});
  add("ConvGradBias", "ConvGradBias", {u({4, 8, 5, 5})}, {{{8}}}, {});
  add("GlobalAveragePool", "GlobalAveragePool", {u({2, 3, 5, 5})}, {{{2, 3, 1, 1}}}, {});
  add("GlobalAveragePoolGrad", "GlobalAveragePoolGrad", {u({2, 3, 1, 1})}, {{{2, 3, 5, 5}}}, {});
  // cuBLAS.
  add("Gemm_transB_bias", "Gemm", {u({64, 128}), u({32, 128}), u({32})}, {{{64, 32}}},
       attrs({{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}}));
  add("Gemm_transA", "Gemm", {u({20, 10}), u({20, 30})}, {{{10, 30}}}, attrs({{"transA", int64_t{1}}}));
  add("Gemm_C_matrix", "Gemm", {u({7, 5}), u({5, 3}), u({7, 3})}, {{{7, 3}}}, {});
  add("MatMul_2d", "MatMul", {u({33, 17}), u({17, 9})}, {{{33, 9}}}, {});
  add("MatMul_batched", "MatMul", {u({3, 4, 5}), u({3, 5, 6})}, {{{3, 4, 6}}}, {});
  add("MatMul_bcastA", "MatMul", {u({4, 5}), u({3, 5, 6})}, {{{3, 4, 6}}}, {});
  add("MatMul_bcast_both", "MatMul", {u({2, 1, 4, 5}), u({3, 5, 2})}, {{{2, 3, 4, 2}}}, {});
  add("MatMul_oneB", "MatMul", {u({2, 3, 4, 5}), u({5, 6})}, {{{2, 3, 4, 6}}}, {});
  add("MatMul_vec", "MatMul", {u({5}), u({5, 6})}, {{{6}}}, {});
  // cuDNN convolutions (forward, backward data, backward filter).
  const AttrMap conv3 = attrs({{"pads", Ints{1, 1, 1, 1}}});
  add("Conv_3x3_bias", "Conv", {u({2, 3, 8, 8}), u({4, 3, 3, 3}), u({4})}, {{{2, 4, 8, 8}}}, conv3);
  add("Conv_s2_d2", "Conv", {u({2, 4, 11, 11}), u({6, 4, 3, 3})}, {{{2, 6, 5, 5}}},
       attrs({{"strides", Ints{2, 2}}, {"dilations", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  add("Conv_absent_bias", "Conv", {u({1, 2, 5, 5}), u({3, 2, 3, 3}), absent()}, {{{1, 3, 3, 3}}});
  add("Conv_group2", "Conv", {u({2, 4, 6, 6}), u({6, 2, 3, 3})}, {{{2, 6, 4, 4}}}, attrs({{"group", int64_t{2}}}));
  add("Conv_1d", "Conv", {u({2, 3, 20}), u({5, 3, 4})}, {{{2, 5, 17}}}, {});
  add("Conv_3d", "Conv", {u({1, 2, 5, 5, 5}), u({3, 2, 2, 2, 2})}, {{{1, 3, 4, 4, 4}}}, {});
  add("Conv_asym_pads_fallback", "Conv", {u({1, 2, 6, 6}), u({3, 2, 3, 3})}, {{{1, 3, 5, 5}}},
       attrs({{"pads", Ints{0, 0, 1, 1}}}));
  add("ConvGradInput_3x3", "ConvGradInput", {u({2, 4, 8, 8}), u({4, 3, 3, 3})}, {{{2, 3, 8, 8}}}, conv3);
  add("ConvGradWeight_3x3", "ConvGradWeight", {u({2, 4, 8, 8}), u({2, 3, 8, 8})}, {{{4, 3, 3, 3}}}, conv3);
  add("ConvGradInput_s2", "ConvGradInput", {u({2, 6, 4, 4}), u({6, 4, 3, 3})}, {{{2, 4, 9, 9}}},
       attrs({{"strides", Ints{2, 2}}}));
  add("ConvGradWeight_group", "ConvGradWeight", {u({2, 6, 4, 4}), u({2, 4, 6, 6})}, {{{6, 2, 3, 3}}},
       attrs({{"group", int64_t{2}}}));
  // GroupNormalization (opset 18's per-group scale, 21's per-channel), InstanceNormalization, the
  // gradient (group_norm.cu).
  const AttrMap g18 = attrs({{"_groups", int64_t{2}}, {"_per_group", int64_t{1}}, {"epsilon", 1e-4f}});
  const AttrMap g21 = attrs({{"_groups", int64_t{2}}, {"_per_group", int64_t{0}}});
  const AttrMap inorm = attrs({{"_groups", int64_t{6}}, {"_per_group", int64_t{0}}});
  add("GroupNorm_per_group", "GroupNormalization", {u({3, 6, 5, 5}), u({2}), u({2})}, {{{3, 6, 5, 5}}}, g18);
  add("GroupNorm_per_channel", "GroupNormalization", {u({3, 6, 5, 5}), u({6}), u({6})}, {{{3, 6, 5, 5}}}, g21);
  add("InstanceNorm", "InstanceNormalization", {u({2, 6, 40}), u({6}), u({6})}, {{{2, 6, 40}}}, inorm);
  add("GroupNormGrad_per_group", "GroupNormalizationGrad", {u({3, 6, 5, 5}), u({3, 6, 5, 5}), u({2})},
      {{{3, 6, 5, 5}}, {{2}}, {{2}}}, g18);
  add("GroupNormGrad_per_channel", "GroupNormalizationGrad", {u({3, 6, 5, 5}), u({3, 6, 5, 5}), u({6})},
      {{{3, 6, 5, 5}}, {{6}}, {{6}}}, g21);
  // ConvTranspose (ConvGradInput + bias): the U-Net's 2x2 stride-2 upsampling, and a padded 3x3.
  add("ConvTranspose_up2_bias", "ConvTranspose", {u({2, 4, 3, 3}), u({4, 2, 2, 2}), u({2})}, {{{2, 2, 6, 6}}},
      attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  add("ConvTranspose_3x3_s2", "ConvTranspose", {u({1, 3, 4, 4}), u({3, 2, 3, 3})}, {{{1, 2, 7, 7}}},
      attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  add("ConvTranspose_1d_bias", "ConvTranspose", {u({2, 4, 5}), u({4, 3, 3}), u({3})}, {{{2, 3, 9}}},
      attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{1, 1}}}));
  add("ConvTranspose_3d_bias", "ConvTranspose", {u({1, 2, 3, 3, 3}), u({2, 2, 2, 2, 2}), u({2})}, {{{1, 2, 6, 6, 6}}},
      attrs({{"kernel_shape", Ints{2, 2, 2}}, {"strides", Ints{2, 2, 2}}}));
  add("ConvTranspose_asym_pads_fallback", "ConvTranspose", {u({1, 2, 3, 3}), u({2, 2, 3, 3}), u({2})}, {{{1, 2, 6, 6}}},
      attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{0, 0, 1, 1}}}));
  add("GroupNorm_large_rows", "GroupNormalization", {u({2, 8, 40, 40}), u({8}), u({8})}, {{{2, 8, 40, 40}}}, g21);
  add("GroupNormGrad_large_rows", "GroupNormalizationGrad", {u({2, 8, 40, 40}), u({2, 8, 40, 40}), u({8})},
      {{{2, 8, 40, 40}}, {{8}}, {{8}}}, g21, {}, 10);
  // Softmax family (cuDNN).
  add("Softmax_rows", "Softmax", {u({16, 10})}, {{{16, 10}}}, attrs({{"axis", int64_t{1}}}));
  add("Softmax_inner", "Softmax", {u({2, 5, 3})}, {{{2, 5, 3}}}, attrs({{"axis", int64_t{1}}}));
  add("Softmax_coerce2d", "Softmax", {u({2, 3, 4})}, {{{2, 3, 4}}}, attrs({{"axis", int64_t{1}}, {"_coerce2d", int64_t{1}}}));
  add("LogSoftmax_rows", "LogSoftmax", {u({8, 1000})}, {{{8, 1000}}}, attrs({{"axis", int64_t{1}}}));
  add("SoftmaxGrad", "SoftmaxGrad", {u({4, 7}), pos({4, 7})}, {{{4, 7}}}, attrs({{"axis", int64_t{1}}}));
  add("LogSoftmaxGrad", "LogSoftmaxGrad", {u({4, 7}), u({4, 7})}, {{{4, 7}}}, attrs({{"axis", int64_t{1}}}));
  // Pooling.
  const AttrMap mp = attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
  add("MaxPool_k3s2p1_indices", "MaxPool", {u({2, 3, 9, 9})}, {{{2, 3, 5, 5}}, {{2, 3, 5, 5}, DType::kInt64}}, mp);
  add("MaxPoolGrad_k3s2p1", "MaxPoolGrad", {u({2, 3, 5, 5}), u({2, 3, 9, 9})}, {{{2, 3, 9, 9}}}, mp);
  add("MaxPool_ceil_dil", "MaxPool", {u({1, 2, 10, 10})}, {{{1, 2, 4, 4}}},
       attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{3, 3}}, {"dilations", Ints{2, 2}}, {"ceil_mode", int64_t{1}}}));
  const AttrMap ap = attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 1, 0}},
                            {"count_include_pad", int64_t{1}}});
  add("AveragePool_incl_pad", "AveragePool", {u({2, 3, 8, 8})}, {{{2, 3, 4, 3}}}, ap);
  add("AveragePoolGrad_incl_pad", "AveragePoolGrad", {u({2, 3, 4, 3})}, {{{2, 3, 8, 8}}}, ap);
  add("AveragePool_1d", "AveragePool", {u({2, 3, 10})}, {{{2, 3, 4}}},
       attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{0, 0}}}));
  // BatchNormalization: training (running statistics updated in place), evaluation pass, grads.
  const Dims bx{4, 3, 5, 5}, bc{3};
  add("BN_train", "BatchNormalization", {u(bx), u(bc), u(bc), u(bc), pos(bc), step(0)},
       {{bx}, {bc}, {bc}, {bc}, {bc}}, attrs({{"_training", int64_t{1}}, {"momentum", 0.8f}}), {3, 4});
  add("BN_eval_pass", "BatchNormalization", {u(bx), u(bc), u(bc), u(bc), pos(bc), step(-1)}, {{bx}},
       attrs({{"_training", int64_t{1}}}), {3, 4});
  add("BN_inference", "BatchNormalization", {u(bx), u(bc), u(bc), u(bc), pos(bc)}, {{bx}}, {}, {3, 4});
  add("BNGrad_train", "BatchNormalizationGrad", {u(bx), u(bx), u(bc)}, {{bx}, {bc}, {bc}},
       attrs({{"_training", int64_t{1}}}), {}, 10);
  add("BNGrad_inference", "BatchNormalizationGrad", {u(bx), u(bx), u(bc), u(bc), pos(bc)}, {{bx}, {bc}, {bc}}, {});
  // Dropout with the shared counter-based masks.
  const AttrMap dr = attrs({{"ratio", 0.3f}, {"_training", int64_t{1}}, {"seed", int64_t{7}}});
  add("Dropout_train", "Dropout", {u({1000, 33}), step(5)}, {{{1000, 33}}, {{1000, 33}, DType::kBool}}, dr);
  add("Dropout_eval", "Dropout", {u({100}), step(-1)}, {{{100}}, {{100}, DType::kBool}}, dr);
  add("DropoutGrad", "DropoutGrad", {u({1000}), mask({1000})}, {{{1000}}}, attrs({{"ratio", 0.3f}}));
  // Losses.
  add("SCE_mean", "SoftmaxCrossEntropyLoss", {u({64, 10}), labels({64}, 10)}, {{{}}, {{64, 10}}}, {});
  add("SCE_weights_ignore", "SoftmaxCrossEntropyLoss", {u({16, 5}), labels({16}, 5), pos({5})}, {{{}}},
       attrs({{"ignore_index", int64_t{2}}}));
  add("SCE_none_spatial", "SoftmaxCrossEntropyLoss", {u({4, 5, 3}), labels({4, 3}, 5)}, {{{4, 3}}},
       attrs({{"reduction", std::string("none")}}));
  add("SCEGrad_mean", "SoftmaxCrossEntropyLossGrad", {scalar(1.5), u({64, 10}), labels({64}, 10)}, {{{64, 10}}}, {});
  add("SCEGrad_sum_weights", "SoftmaxCrossEntropyLossGrad", {scalar(0.5), u({8, 4, 2}), labels({8, 2}, 4), pos({4})},
       {{{8, 4, 2}}}, attrs({{"reduction", std::string("sum")}, {"ignore_index", int64_t{1}}}));
  add("MSE_mean", "MSELoss", {u({32, 3}), u({32, 3})}, {{{}}}, {});
  add("MSEGrad_sum", "MSELossGrad", {scalar(2.0), u({32, 3}), u({32, 3})}, {{{32, 3}}},
       attrs({{"reduction", std::string("sum")}}));
  // Optimizer: W and V updated in place.
  add("SGDMomentum", "SGDMomentum", {u({1000, 7}), u({1000, 7}), u({1000, 7}), scalar(0.1)}, {},
       attrs({{"momentum", 0.9f}, {"weight_decay", 1e-4f}}), {0, 2});
  // torch.optim.SGD / Adam / AdamW: W, the state and the int64 step count updated in place.
  add("SGD_first_step", "SGD", {u({1000, 7}), u({1000, 7}), u({1000, 7}), scalar(0.1), step(0)}, {},
      attrs({{"momentum", 0.9f}, {"dampening", 0.1f}, {"weight_decay", 1e-4f}}), {0, 2, 4});
  add("SGD_nesterov", "SGD", {u({1000, 7}), u({1000, 7}), u({1000, 7}), scalar(0.1), step(3), u({1000, 7})}, {},
      attrs({{"momentum", 0.9f}, {"weight_decay", 1e-4f}, {"nesterov", int64_t{1}}}), {0, 2, 4, 5});
  add("Adam", "Adam", {u({1000, 7}), u({1000, 7}), u({1000, 7}), pos({1000, 7}), scalar(0.01), step(2)}, {},
      attrs({{"beta1", 0.85f}, {"beta2", 0.99f}, {"epsilon", 1e-6f}, {"weight_decay", 1e-3f}}), {0, 2, 3, 5});
  add("AdamW", "Adam", {u({1000, 7}), u({1000, 7}), u({1000, 7}), pos({1000, 7}), scalar(0.01), step(0)}, {},
      attrs({{"weight_decay", 0.1f}, {"decoupled", int64_t{1}}}), {0, 2, 3, 5});
  // Fused attention (cuBLAS batched GEMMs + attention.cu): no mask, additive over heads, bool fill.
  const AttrMap fill = attrs({{"scale", 0.35f}, {"mask_kind", int64_t{2}}, {"mask_fill", -1e9f}});
  add("FusedAttention", "FusedAttention", {u({2, 3, 5, 4}), u({2, 3, 4, 6}), u({2, 3, 6, 7})},
      {{{2, 3, 5, 7}}, {{2, 3, 5}}}, attrs({{"scale", 0.5f}}));
  add("FusedAttention_add", "FusedAttention", {u({2, 3, 5, 4}), u({2, 3, 4, 6}), u({2, 3, 6, 7}), u({2, 1, 1, 6})},
      {{{2, 3, 5, 7}}, {{2, 3, 5}}}, attrs({{"scale", 0.5f}, {"mask_kind", int64_t{1}}}));
  add("FusedAttention_fill", "FusedAttention", {u({6, 33, 8}), u({6, 8, 33}), u({6, 33, 8}), mask({33, 33})},
      {{{6, 33, 8}}, {{6, 33}}}, fill);
  add("FusedAttentionGrad_fill", "FusedAttentionGrad",
      {u({6, 33, 8}), u({6, 33, 8}), u({6, 8, 33}), u({6, 33, 8}), mask({33, 33}), pos({6, 33})},
      {{{6, 33, 8}}, {{6, 8, 33}}, {{6, 33, 8}}}, fill, {}, 10);
  add("FusedAttentionGrad", "FusedAttentionGrad",
      {u({2, 5, 4}), u({2, 5, 3}), u({2, 3, 6}), u({2, 6, 4}), absent(), pos({2, 5})},
      {{{2, 5, 3}}, {{2, 3, 6}}, {{2, 6, 4}}}, attrs({{"scale", 0.5f}}), {}, 10);
  // A few host fallbacks (the rest share the same code path).
  add("LRN_fallback", "LRN", {u({2, 5, 4, 4})}, {{{2, 5, 4, 4}}}, attrs({{"size", int64_t{3}}}));
  add("LayerNorm_fallback", "LayerNormalization", {u({4, 6}), u({6}), u({6})}, {{{4, 6}}}, attrs({{"axis", int64_t{1}}}));
  add("Concat_fallback", "Concat", {u({2, 3}), u({2, 4})}, {{{2, 7}}}, attrs({{"axis", int64_t{1}}}));
  add("Gather_fallback", "Gather", {u({5, 3}), indices({4}, 5)}, {{{4, 3}}}, attrs({{"axis", int64_t{0}}}));
  add("GlobalMaxPool_fallback", "GlobalMaxPool", {u({2, 3, 4, 4})}, {{{2, 3, 1, 1}}}, {});
  return c;
}

// ---- running a case -----------------------------------------------------------------------------

template <typename T>
struct Tol;
template <>
struct Tol<float> {
  static constexpr double atol = 2e-5, rtol = 2e-4;  // cuBLAS/cuDNN sum in other orders
};
template <>
struct Tol<double> {
  static constexpr double atol = 1e-11, rtol = 1e-10;
};

template <typename T>
HostTensor make_input(const In& in, std::mt19937& rng) {
  switch (in.gen) {
    case Gen::kLabels:
    case Gen::kIndices: {
      HostTensor t(DType::kInt64, in.dims);
      std::uniform_int_distribution<int64_t> d(0, static_cast<int64_t>(in.param) - 1);
      for (int64_t i = 0; i < t.size(); ++i) t.as<int64_t>()[i] = d(rng);
      return t;
    }
    case Gen::kMask: {
      HostTensor t(DType::kBool, in.dims);
      std::bernoulli_distribution d(0.7);
      for (int64_t i = 0; i < t.size(); ++i) t.as<bool>()[i] = d(rng);
      return t;
    }
    case Gen::kStep: {
      HostTensor t(DType::kInt64, in.dims);
      t.as<int64_t>()[0] = static_cast<int64_t>(in.param);
      return t;
    }
    case Gen::kScalar: {
      HostTensor t(dtype_of<T>(), in.dims);
      t.as<T>()[0] = static_cast<T>(in.param);
      return t;
    }
    case Gen::kAbsent: return HostTensor();
    case Gen::kUniform:
    case Gen::kPositive: break;
  }
  HostTensor t(dtype_of<T>(), in.dims);
  std::uniform_real_distribution<double> d(in.gen == Gen::kPositive ? 0.5 : -1.0, in.gen == Gen::kPositive ? 2.0 : 1.0);
  for (int64_t i = 0; i < t.size(); ++i) t.as<T>()[i] = static_cast<T>(d(rng));
  return t;
}

// What outputs hold before the kernels run (same bytes on both sides).
void fill_initial(HostTensor* t) {
  if (t->dtype() == DType::kFloat32)
    for (int64_t i = 0; i < t->size(); ++i) t->as<float>()[i] = 0.375f;
  else if (t->dtype() == DType::kFloat64)
    for (int64_t i = 0; i < t->size(); ++i) t->as<double>()[i] = 0.375;
}

// One device allocation with kGuardBytes of guard after the payload.
class DeviceTensor {
 public:
  ~DeviceTensor() {
    if (p_) (void)cuda::device_free(p_);
  }
  Status upload(const HostTensor& t) {
    bytes_ = t.bytes();
    RETURN_IF_ERROR(cuda::device_alloc(&p_, bytes_ + kGuardBytes));
    std::vector<unsigned char> buf(bytes_ + kGuardBytes, kGuardByte);
    if (bytes_) std::memcpy(buf.data(), t.data(), bytes_);
    return cuda::copy_to_device(p_, buf.data(), buf.size());
  }
  // Payload into t; false in *guard_ok when a guard byte changed.
  Status download(HostTensor* t, bool* guard_ok) const {
    std::vector<unsigned char> buf(bytes_ + kGuardBytes);
    RETURN_IF_ERROR(cuda::copy_to_host(buf.data(), p_, buf.size()));
    if (bytes_) std::memcpy(t->data(), buf.data(), bytes_);
    *guard_ok = true;
    for (size_t i = bytes_; i < buf.size(); ++i) *guard_ok = *guard_ok && buf[i] == kGuardByte;
    return Status::ok();
  }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

::testing::AssertionResult close(const HostTensor& got, const HostTensor& ref, double atol, double rtol) {
  if (got.dims() != ref.dims() || got.dtype() != ref.dtype())
    return ::testing::AssertionFailure() << "shape/dtype differ";
  int64_t bad = 0;
  std::ostringstream first;
  const bool exact = !is_floating(ref.dtype());
  for (int64_t i = 0; i < ref.size(); ++i) {
    const double g = got.get_double(i), r = ref.get_double(i);
    const bool ok = exact ? g == r : (std::fabs(g - r) <= atol + rtol * std::fabs(r) || (std::isnan(g) && std::isnan(r)));
    if (ok) continue;
    if (bad++ < 5) first << " [" << i << "] got " << g << " want " << r;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << ref.size() << " elements differ (seed " << kSeed
                                       << "):" << first.str();
}

template <typename T>
void run_case(const Case& c) {
  const KernelFn cpu = find_kernel(c.op, DeviceKind::kCpu, dtype_of<T>());
  const KernelFn gpu = find_kernel(c.op, DeviceKind::kCuda, dtype_of<T>());
  ASSERT_NE(cpu, nullptr) << "no CPU kernel for " << c.op;
  ASSERT_NE(gpu, nullptr) << "no CUDA kernel for " << c.op;
  std::mt19937 rng(kSeed);
  std::vector<HostTensor> in_cpu;
  for (const In& i : c.in) in_cpu.push_back(make_input<T>(i, rng));
  const std::vector<HostTensor> in_orig = in_cpu;
  std::vector<HostTensor> out_cpu;
  for (const Out& o : c.out) {
    out_cpu.emplace_back(o.fixed == DType::kUndefined ? dtype_of<T>() : o.fixed, o.dims);
    fill_initial(&out_cpu.back());
  }
  const std::vector<HostTensor> out_init = out_cpu;

  // CPU reference.
  std::vector<TensorView> iv, ov;
  for (size_t k = 0; k < in_cpu.size(); ++k)
    iv.push_back(c.in[k].gen == Gen::kAbsent ? TensorView{} : in_cpu[k].view());
  for (HostTensor& t : out_cpu) ov.push_back(t.view());
  const Status cs = cpu(KernelCall{iv, ov, c.attrs, nullptr});
  ASSERT_TRUE(cs.is_ok()) << "CPU: " << cs.message();

  // CUDA on device copies of the original inputs and initial outputs.
  std::vector<std::unique_ptr<DeviceTensor>> din, dout;
  std::vector<TensorView> div, dov;
  for (size_t k = 0; k < in_orig.size(); ++k) {
    din.push_back(std::make_unique<DeviceTensor>());
    if (c.in[k].gen == Gen::kAbsent) {
      div.push_back(TensorView{});
      continue;
    }
    const Status s = din.back()->upload(in_orig[k]);
    ASSERT_TRUE(s.is_ok()) << s.message();
    div.push_back(TensorView{din.back()->get(), in_orig[k].dtype(), in_orig[k].dims()});
  }
  for (const HostTensor& t : out_init) {
    dout.push_back(std::make_unique<DeviceTensor>());
    const Status s = dout.back()->upload(t);
    ASSERT_TRUE(s.is_ok()) << s.message();
    dov.push_back(TensorView{dout.back()->get(), t.dtype(), t.dims()});
  }
  const Status gs = gpu(KernelCall{div, dov, c.attrs, nullptr});
  ASSERT_TRUE(gs.is_ok()) << "CUDA: " << gs.message();
  const Status sync = cuda::device_synchronize();
  ASSERT_TRUE(sync.is_ok()) << sync.message();

  const double atol = Tol<T>::atol * c.tol_scale, rtol = Tol<T>::rtol * c.tol_scale;
  for (size_t k = 0; k < out_cpu.size(); ++k) {
    HostTensor got = out_init[k];
    bool guard_ok = false;
    const Status s = dout[k]->download(&got, &guard_ok);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_TRUE(guard_ok) << "output " << k << ": wrote past its end";
    EXPECT_TRUE(close(got, out_cpu[k], atol, rtol)) << "output " << k;
  }
  for (size_t k : c.in_place) {
    HostTensor got = in_orig[k];
    bool guard_ok = false;
    const Status s = din[k]->download(&got, &guard_ok);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_TRUE(guard_ok) << "input " << k << ": wrote past its end";
    EXPECT_TRUE(close(got, in_cpu[k], atol, rtol)) << "in-place input " << k;
  }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = make_cases();
  return c;
}

class CudaVsCpu : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  }
};

TEST_P(CudaVsCpu, Float) { run_case<float>(cases()[GetParam()]); }
TEST_P(CudaVsCpu, Double) { run_case<double>(cases()[GetParam()]); }

INSTANTIATE_TEST_SUITE_P(Ops, CudaVsCpu, ::testing::Range<size_t>(0, make_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) { return cases()[i.param].name; });

// ---- the fused optimizer step and the allocator on the device ------------------------------------

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  }
};

TEST_F(CudaDevice, FusedSgdSpecTrainMatchesHostFormula) {
  // Three tensors of a group (one empty), lr on the device, prediction for s = 3.
  const std::vector<int64_t> sizes = {1000, 0, 77};
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<double> d(-1, 1);
  const double gamma = 0.9, wd = 1e-3, lr = 0.05, s = 3;
  std::vector<std::vector<double>> w(3), g(3), v(3);
  std::vector<std::unique_ptr<DeviceTensor>> dw, dg, dv, dp;
  std::vector<cuda::SgdTensor> group;
  for (size_t t = 0; t < sizes.size(); ++t) {
    for (int64_t i = 0; i < sizes[t]; ++i) {
      w[t].push_back(d(rng));
      g[t].push_back(d(rng));
      v[t].push_back(d(rng));
    }
    auto up = [&](const std::vector<double>& x) {
      auto p = std::make_unique<DeviceTensor>();
      const Status st = p->upload(HostTensor::from<double>({sizes[t]}, x));
      EXPECT_TRUE(st.is_ok()) << st.message();
      return p;
    };
    dw.push_back(up(w[t]));
    dg.push_back(up(g[t]));
    dv.push_back(up(v[t]));
    dp.push_back(up(std::vector<double>(sizes[t], 0.0)));
    group.push_back({dw[t]->get(), dg[t]->get(), dv[t]->get(), dp[t]->get(), sizes[t]});
  }
  DeviceTensor dlr;
  ASSERT_TRUE(dlr.upload(HostTensor::from<double>({1}, std::vector<double>{lr})).is_ok());
  const Status st = cuda::sgd_spectrain_step<double>(group, dlr.get(), gamma, wd, s, nullptr);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_TRUE(cuda::device_synchronize().is_ok());
  for (size_t t = 0; t < sizes.size(); ++t) {
    HostTensor gw(DType::kFloat64, {sizes[t]}), gv = gw, gp = gw;
    bool ok = false;
    ASSERT_TRUE(dw[t]->download(&gw, &ok).is_ok());
    ASSERT_TRUE(dv[t]->download(&gv, &ok).is_ok());
    ASSERT_TRUE(dp[t]->download(&gp, &ok).is_ok());
    for (int64_t i = 0; i < sizes[t]; ++i) {
      const double gi = g[t][i] + wd * w[t][i], vi = gamma * v[t][i] + (1 - gamma) * gi, wn = w[t][i] - lr * vi;
      EXPECT_NEAR(gv.as<double>()[i], vi, 1e-14);
      EXPECT_NEAR(gw.as<double>()[i], wn, 1e-14);
      EXPECT_NEAR(gp.as<double>()[i], wn - s * lr * vi, 1e-14);
    }
  }
}

TEST_F(CudaDevice, SteadyStateMakesNoBackendCalls) {
  // A conv forward + backward, repeated: after the first round every workspace and scratch block
  // comes from the caching allocator's free lists.
  const std::vector<Case> all = cases();
  const Case* conv = nullptr;
  const Case* bn = nullptr;
  for (const Case& c : all) {
    if (c.name == "Conv_3x3_bias") conv = &c;
    if (c.name == "BN_train") bn = &c;
  }
  ASSERT_TRUE(conv && bn);
  run_case<float>(*conv);
  run_case<float>(*bn);
  const cuda::AllocatorStats before = cuda::device_allocator().stats();
  for (int r = 0; r < 3; ++r) {
    run_case<float>(*conv);
    run_case<float>(*bn);
  }
  const cuda::AllocatorStats after = cuda::device_allocator().stats();
  EXPECT_EQ(after.backend_allocs, before.backend_allocs) << after.summary();
  EXPECT_EQ(after.backend_frees, before.backend_frees) << after.summary();
  EXPECT_GT(after.cache_hits, before.cache_hits) << after.summary();
  EXPECT_GE(cuda::conv_algo_cache_size(), 1u);
}

// An out-of-range gather index is found by the kernel, not by a host check before it: the launch
// succeeds, and the device's next synchronisation reports it once, naming the op and the index.
TEST_F(CudaDevice, GatherIndexOutOfRangeIsReportedAtTheNextSync) {
  auto dev = open_device(DeviceKind::kCuda, 0);
  ASSERT_TRUE(dev) << dev.status().message();
  DeviceTensor data, idx, out;
  ASSERT_TRUE(data.upload(HostTensor::from<float>({4, 2}, std::vector<float>(8, 1.0f))).is_ok());
  ASSERT_TRUE(idx.upload(HostTensor::from<int64_t>({3}, std::vector<int64_t>{1, 7, -1})).is_ok());
  ASSERT_TRUE(out.upload(HostTensor(DType::kFloat32, {3, 2})).is_ok());
  const std::vector<TensorView> in = {TensorView{data.get(), DType::kFloat32, {4, 2}},
                                      TensorView{idx.get(), DType::kInt64, {3}}};
  const std::vector<TensorView> outs = {TensorView{out.get(), DType::kFloat32, {3, 2}}};
  const KernelFn f = find_kernel("Gather", DeviceKind::kCuda, DType::kFloat32);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f(KernelCall{in, outs, AttrMap{}, nullptr}).is_ok());
  const Status st = (*dev)->synchronize(nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput) << st.message();
  EXPECT_NE(st.message().find("Gather (cuda): index 7 at position 1 is out of range for a dimension of 4"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE((*dev)->synchronize(nullptr).is_ok()) << "a record is reported once";
  HostTensor y(DType::kFloat32, {3, 2});
  bool ok = false;
  ASSERT_TRUE(out.download(&y, &ok).is_ok());
  EXPECT_EQ(y.as<float>()[0], 1.0f);
  EXPECT_EQ(y.as<float>()[2], 0.0f);  // the bad row reads zeros
  EXPECT_EQ(y.as<float>()[4], 1.0f);  // -1: the last row
}

// A cross-entropy label outside the classes: the loss launches without a host round trip, the bad
// sample counts as ignored, and the next synchronisation reports it in the CPU's words.
TEST_F(CudaDevice, CrossEntropyLabelOutOfRangeIsReportedAtTheNextSync) {
  auto dev = open_device(DeviceKind::kCuda, 0);
  ASSERT_TRUE(dev) << dev.status().message();
  DeviceTensor scores, labels, loss;
  ASSERT_TRUE(scores.upload(HostTensor::from<float>({3, 4}, std::vector<float>(12, 0.5f))).is_ok());
  ASSERT_TRUE(labels.upload(HostTensor::from<int64_t>({3}, std::vector<int64_t>{1, 9, 2})).is_ok());
  ASSERT_TRUE(loss.upload(HostTensor(DType::kFloat32, {})).is_ok());
  const std::vector<TensorView> in = {TensorView{scores.get(), DType::kFloat32, {3, 4}},
                                      TensorView{labels.get(), DType::kInt64, {3}}};
  const std::vector<TensorView> outs = {TensorView{loss.get(), DType::kFloat32, {}}};
  const KernelFn f = find_kernel("SoftmaxCrossEntropyLoss", DeviceKind::kCuda, DType::kFloat32);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f(KernelCall{in, outs, AttrMap{}, nullptr}).is_ok());
  const Status st = (*dev)->synchronize(nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput) << st.message();
  EXPECT_NE(st.message().find("SoftmaxCrossEntropyLoss (cuda): label 9 at index 1 is outside [0, 4)"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE((*dev)->synchronize(nullptr).is_ok()) << "a record is reported once";
  HostTensor l(DType::kFloat32, {});
  bool ok = false;
  ASSERT_TRUE(loss.download(&l, &ok).is_ok());
  EXPECT_NEAR(l.as<float>()[0], std::log(4.0f), 1e-6);  // the two good samples' mean (uniform scores)
}

// Where and Not (a bool kernel dtype, which the typed cases above do not reach), and Cast to and
// from bfloat16, against the CPU kernels on the same inputs.
TEST_F(CudaDevice, WhereNotAndBf16CastMatchTheCpu) {
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> d(-3, 3);
  std::vector<float> a(24), b(6), wide(1000);
  for (float& v : a) v = d(rng);
  for (float& v : b) v = d(rng);
  for (float& v : wide) v = d(rng) * 1e3f;
  wide[0] = 1.00390625f;  // a tie: rounds to even
  std::vector<uint8_t> mask(4);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 7 + 3) % 3 == 0;
  HostTensor hc(DType::kBool, {4, 1}), ha = HostTensor::from<float>({4, 6}, a), hb = HostTensor::from<float>({6}, b);
  for (size_t i = 0; i < mask.size(); ++i) hc.as<bool>()[i] = mask[i] != 0;
  auto run_both = [&](const char* op, DType kd, const std::vector<HostTensor>& in, const HostTensor& out_like) {
    HostTensor cpu_out = out_like;
    std::vector<TensorView> iv, ov = {cpu_out.view()};
    for (const HostTensor& t : in) iv.push_back(t.view());
    const Status cs = find_kernel(op, DeviceKind::kCpu, kd)(KernelCall{iv, ov, AttrMap{}, nullptr});
    EXPECT_TRUE(cs.is_ok()) << cs.message();
    std::vector<std::unique_ptr<DeviceTensor>> din;
    std::vector<TensorView> div;
    for (const HostTensor& t : in) {
      din.push_back(std::make_unique<DeviceTensor>());
      EXPECT_TRUE(din.back()->upload(t).is_ok());
      div.push_back(TensorView{din.back()->get(), t.dtype(), t.dims()});
    }
    DeviceTensor dout;
    EXPECT_TRUE(dout.upload(out_like).is_ok());
    const std::vector<TensorView> dov = {TensorView{dout.get(), out_like.dtype(), out_like.dims()}};
    const Status gs = find_kernel(op, DeviceKind::kCuda, kd)(KernelCall{div, dov, AttrMap{}, nullptr});
    EXPECT_TRUE(gs.is_ok()) << gs.message();
    EXPECT_TRUE(cuda::device_synchronize().is_ok());
    HostTensor got = out_like;
    bool guard_ok = false;
    EXPECT_TRUE(dout.download(&got, &guard_ok).is_ok());
    EXPECT_TRUE(guard_ok) << op;
    EXPECT_EQ(std::memcmp(got.data(), cpu_out.data(), got.bytes()), 0) << op << ": not bit-identical to the CPU";
  };
  run_both("Where", DType::kBool, {hc, ha, hb}, HostTensor(DType::kFloat32, {4, 6}));
  run_both("Not", DType::kBool, {hc}, HostTensor(DType::kBool, {4, 1}));
  const HostTensor hw = HostTensor::from<float>({1000}, wide);
  run_both("Cast", DType::kFloat32, {hw}, HostTensor(DType::kBFloat16, {1000}));
  HostTensor hbf(DType::kBFloat16, {1000});
  std::vector<TensorView> iv = {hw.view()}, ov = {hbf.view()};
  ASSERT_TRUE(find_kernel("Cast", DeviceKind::kCpu, DType::kFloat32)(KernelCall{iv, ov, AttrMap{}, nullptr}).is_ok());
  run_both("Cast", DType::kBFloat16, {hbf}, HostTensor(DType::kFloat32, {1000}));
}

// --precision bf16's products on CUDA against the CPU's bf16 kernels on the same bfloat16 operands:
// both accumulate exact products in float32, so only the order of the sums differs.
TEST_F(CudaDevice, Bf16ProductsMatchTheCpu) {
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> d(-1, 1);
  auto bf16 = [&](Dims dims) {
    std::vector<float> v(static_cast<size_t>(numel(dims)));
    for (float& x : v) x = d(rng);
    const HostTensor f = HostTensor::from<float>(dims, v);
    HostTensor b(DType::kBFloat16, dims);
    const std::vector<TensorView> iv = {f.view()}, ov = {b.view()};
    EXPECT_TRUE(find_kernel("Cast", DeviceKind::kCpu, DType::kFloat32)(KernelCall{iv, ov, AttrMap{}, nullptr}).is_ok());
    return b;
  };
  struct P {
    const char* op;
    std::vector<HostTensor> in;
    Dims out;
    AttrMap attrs;
  };
  const AttrMap pads = attrs({{"pads", Ints{1, 1, 1, 1}}});
  std::vector<P> cases;
  cases.push_back({"Gemm", {bf16({16, 24}), bf16({24, 8})}, {16, 8}, {}});
  cases.push_back({"Gemm", {bf16({24, 16}), bf16({8, 24}), HostTensor::from<float>({8}, std::vector<float>(8, 0.5f))},
                   {16, 8}, attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}}})});
  cases.push_back({"MatMul", {bf16({3, 5, 12}), bf16({3, 12, 7})}, {3, 5, 7}, {}});
  cases.push_back({"MatMul", {bf16({4, 6, 10}), bf16({10, 9})}, {4, 6, 9}, {}});
  cases.push_back({"Conv", {bf16({2, 3, 8, 8}), bf16({4, 3, 3, 3}), HostTensor::from<float>({4}, std::vector<float>(4, 0.25f))},
                   {2, 4, 8, 8}, pads});
  cases.push_back({"ConvGradInput", {bf16({2, 4, 8, 8}), bf16({4, 3, 3, 3})}, {2, 3, 8, 8}, pads});
  cases.push_back({"ConvGradWeight", {bf16({2, 4, 8, 8}), bf16({2, 3, 8, 8})}, {4, 3, 3, 3}, pads});
  for (const P& c : cases) {
    HostTensor ref(DType::kFloat32, c.out);
    std::vector<TensorView> iv, ov = {ref.view()};
    for (const HostTensor& t : c.in) iv.push_back(t.view());
    const KernelFn cpu = find_kernel(c.op, DeviceKind::kCpu, DType::kBFloat16);
    const KernelFn gpu = find_kernel(c.op, DeviceKind::kCuda, DType::kBFloat16);
    ASSERT_TRUE(cpu && gpu && !cuda::is_host_fallback(c.op, DType::kBFloat16)) << c.op;
    const Status cs = cpu(KernelCall{iv, ov, c.attrs, nullptr});
    ASSERT_TRUE(cs.is_ok()) << c.op << ": " << cs.message();
    std::vector<std::unique_ptr<DeviceTensor>> din;
    std::vector<TensorView> div;
    for (const HostTensor& t : c.in) {
      din.push_back(std::make_unique<DeviceTensor>());
      ASSERT_TRUE(din.back()->upload(t).is_ok());
      div.push_back(TensorView{din.back()->get(), t.dtype(), t.dims()});
    }
    DeviceTensor dout;
    ASSERT_TRUE(dout.upload(HostTensor(DType::kFloat32, c.out)).is_ok());
    const std::vector<TensorView> dov = {TensorView{dout.get(), DType::kFloat32, c.out}};
    const Status gs = gpu(KernelCall{div, dov, c.attrs, nullptr});
    ASSERT_TRUE(gs.is_ok()) << c.op << ": " << gs.message();
    ASSERT_TRUE(cuda::device_synchronize().is_ok());
    HostTensor got(DType::kFloat32, c.out);
    bool guard_ok = false;
    ASSERT_TRUE(dout.download(&got, &guard_ok).is_ok());
    EXPECT_TRUE(guard_ok) << c.op;
    EXPECT_TRUE(close(got, ref, 1e-4, 1e-4)) << c.op;
  }
  // ReluGrad reading the bfloat16 copy of Y.
  const HostTensor y = bf16({1000});
  std::vector<float> g(1000);
  for (float& x : g) x = d(rng);
  const HostTensor dy = HostTensor::from<float>({1000}, g);
  HostTensor ref(DType::kFloat32, {1000});
  std::vector<TensorView> iv = {dy.view(), y.view()}, ov = {ref.view()};
  ASSERT_TRUE(find_kernel("ReluGrad", DeviceKind::kCpu, DType::kFloat32)(KernelCall{iv, ov, AttrMap{}, nullptr}).is_ok());
  DeviceTensor ddy, dyb, ddx;
  ASSERT_TRUE(ddy.upload(dy).is_ok() && dyb.upload(y).is_ok() && ddx.upload(HostTensor(DType::kFloat32, {1000})).is_ok());
  const std::vector<TensorView> div = {TensorView{ddy.get(), DType::kFloat32, {1000}},
                                       TensorView{dyb.get(), DType::kBFloat16, {1000}}};
  const std::vector<TensorView> dov = {TensorView{ddx.get(), DType::kFloat32, {1000}}};
  ASSERT_TRUE(find_kernel("ReluGrad", DeviceKind::kCuda, DType::kFloat32)(KernelCall{div, dov, AttrMap{}, nullptr}).is_ok());
  ASSERT_TRUE(cuda::device_synchronize().is_ok());
  HostTensor got(DType::kFloat32, {1000});
  bool guard_ok = false;
  ASSERT_TRUE(ddx.download(&got, &guard_ok).is_ok());
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.bytes()), 0) << "ReluGrad (bfloat16 Y) not bit-identical";
}

// The multi-tensor SGDMomentum (one launch for a stage's updates) against one call per tensor:
// bit-identical, also across a change of weight decay that splits the group.
TEST_F(CudaDevice, GroupedSgdMomentumEqualsOneCallPerTensor) {
  const KernelGroupFn group = find_group_kernel("SGDMomentum", DeviceKind::kCuda, DType::kFloat32);
  const KernelFn single = find_kernel("SGDMomentum", DeviceKind::kCuda, DType::kFloat32);
  ASSERT_TRUE(group && single);
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> d(-1, 1);
  const std::vector<int64_t> sizes = {1000, 7, 300, 1};
  AttrMap a = attrs({{"momentum", 0.9f}, {"weight_decay", 1e-3f}});
  AttrMap b = attrs({{"momentum", 0.9f}, {"weight_decay", 0.0f}});
  std::vector<std::vector<float>> host(3 * sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int k = 0; k < 3; ++k)
      for (int64_t i = 0; i < sizes[t]; ++i) host[3 * t + k].push_back(d(rng));
  DeviceTensor lr;
  ASSERT_TRUE(lr.upload(HostTensor::from<float>({}, std::vector<float>{0.05f})).is_ok());
  std::vector<HostTensor> results[2];
  for (int grouped = 0; grouped < 2; ++grouped) {
    std::vector<std::unique_ptr<DeviceTensor>> dev;
    std::vector<std::vector<TensorView>> ins(sizes.size());
    std::vector<KernelCall> calls;
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (int k = 0; k < 3; ++k) {
        dev.push_back(std::make_unique<DeviceTensor>());
        ASSERT_TRUE(dev.back()->upload(HostTensor::from<float>({sizes[t]}, host[3 * t + k])).is_ok());
        ins[t].push_back(TensorView{dev.back()->get(), DType::kFloat32, {sizes[t]}});
      }
      ins[t].push_back(TensorView{lr.get(), DType::kFloat32, {}});
      calls.push_back(KernelCall{ins[t], {}, t == 2 ? b : a, nullptr});
    }
    if (grouped) {
      ASSERT_TRUE(group(calls).is_ok());
    } else {
      for (const KernelCall& c : calls) ASSERT_TRUE(single(c).is_ok());
    }
    ASSERT_TRUE(cuda::device_synchronize().is_ok());
    for (size_t t = 0; t < sizes.size(); ++t)
      for (int k : {0, 2}) {  // W and V
        HostTensor h(DType::kFloat32, {sizes[t]});
        bool ok = false;
        ASSERT_TRUE(dev[3 * t + k]->download(&h, &ok).is_ok());
        EXPECT_TRUE(ok);
        results[grouped].push_back(std::move(h));
      }
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i)
    EXPECT_EQ(std::memcmp(results[0][i].data(), results[1][i].data(), results[0][i].bytes()), 0) << "tensor " << i;
}

// ---- multi-tensor torch SGD and Adam against one call per tensor ----------------------------------

// The inputs of an update call in order: T tensors of the call's size (uniform, or positive for
// Adam's V), the learning rate (a T scalar), the int64 step count.
enum class Slot { kUniform, kPositive, kLr, kStep };
struct OptCall {
  AttrMap attrs;
  std::vector<Slot> slots;
  int64_t n = 0;
  int64_t step0 = 0;      // the step count's value before the first update
  int shares_step = -1;   // >= 0: the step count of that earlier call, not one of its own
  bool other_lr = false;  // a learning-rate tensor of its own (another value)
  bool bad = false;       // G gets other dims than W: the kernel's check refuses the call
};

// The calls' device tensors (every slot but the learning rates and shared step counts, in call and
// slot order) with their initial values, and the calls' views.
template <typename T>
struct OptInputs {
  std::vector<std::unique_ptr<DeviceTensor>> tensors;
  std::vector<HostTensor> initial;
  DeviceTensor lr, lr2;
  std::vector<std::vector<TensorView>> views;
};

template <typename T>
void make_opt_inputs(const std::vector<OptCall>& calls, OptInputs<T>* in) {
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<double> uni(-1, 1), pos(0.5, 2);
  ASSERT_TRUE(in->lr.upload(HostTensor::from<T>({}, std::vector<T>{T(0.05)})).is_ok());
  ASSERT_TRUE(in->lr2.upload(HostTensor::from<T>({}, std::vector<T>{T(0.02)})).is_ok());
  std::vector<void*> step_of(calls.size(), nullptr);
  for (size_t c = 0; c < calls.size(); ++c) {
    const OptCall& oc = calls[c];
    std::vector<TensorView> v;
    for (size_t k = 0; k < oc.slots.size(); ++k) {
      const Slot s = oc.slots[k];
      if (s == Slot::kLr) {
        v.push_back(TensorView{oc.other_lr ? in->lr2.get() : in->lr.get(), dtype_of<T>(), {}});
        continue;
      }
      if (s == Slot::kStep && oc.shares_step >= 0) {
        v.push_back(TensorView{step_of[static_cast<size_t>(oc.shares_step)], DType::kInt64, {}});
        continue;
      }
      HostTensor h = s == Slot::kStep ? HostTensor::from<int64_t>({}, std::vector<int64_t>{oc.step0})
                                      : HostTensor(dtype_of<T>(), {oc.n});
      if (s != Slot::kStep)
        for (int64_t i = 0; i < oc.n; ++i) h.as<T>()[i] = static_cast<T>(s == Slot::kPositive ? pos(rng) : uni(rng));
      in->tensors.push_back(std::make_unique<DeviceTensor>());
      ASSERT_TRUE(in->tensors.back()->upload(h).is_ok());
      in->initial.push_back(std::move(h));
      if (s == Slot::kStep) step_of[c] = in->tensors.back()->get();
      const Dims dims = s == Slot::kStep ? Dims{} : Dims{oc.bad && k == 1 ? oc.n + 1 : oc.n};
      v.push_back(TensorView{in->tensors.back()->get(), s == Slot::kStep ? DType::kInt64 : dtype_of<T>(), dims});
    }
    in->views.push_back(std::move(v));
  }
}

// `steps` updates of `calls` through the op's group kernel and through one call per tensor, from the
// same values: the same status, and every tensor (weights, state, step counts) bit for bit.
template <typename T>
void expect_grouped_equals_per_call(const char* op, const std::vector<OptCall>& calls, int steps) {
  const KernelGroupFn group = find_group_kernel(op, DeviceKind::kCuda, dtype_of<T>());
  const KernelFn single = find_kernel(op, DeviceKind::kCuda, dtype_of<T>());
  ASSERT_TRUE(group && single) << op;
  std::vector<std::vector<unsigned char>> bytes[2];
  Status status[2];
  for (int grouped = 0; grouped < 2; ++grouped) {
    OptInputs<T> in;
    make_opt_inputs<T>(calls, &in);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<KernelCall> kc;
    for (size_t c = 0; c < calls.size(); ++c) kc.push_back(KernelCall{in.views[c], {}, calls[c].attrs, nullptr});
    for (int s = 0; s < steps && status[grouped].is_ok(); ++s) {
      if (grouped) {
        status[grouped] = group(kc);
      } else {
        for (const KernelCall& c : kc)
          if (status[grouped] = single(c); !status[grouped].is_ok()) break;
      }
    }
    ASSERT_TRUE(cuda::device_synchronize().is_ok());
    for (size_t i = 0; i < in.tensors.size(); ++i) {
      HostTensor h = in.initial[i];
      bool ok = false;
      ASSERT_TRUE(in.tensors[i]->download(&h, &ok).is_ok());
      EXPECT_TRUE(ok) << "wrote past a tensor's end";
      const auto* p = static_cast<const unsigned char*>(h.data());
      bytes[grouped].emplace_back(p, p + h.bytes());
    }
  }
  EXPECT_EQ(status[0].code(), status[1].code()) << status[0].message() << " | " << status[1].message();
  EXPECT_EQ(status[0].message(), status[1].message());
  ASSERT_EQ(bytes[0].size(), bytes[1].size());
  for (size_t i = 0; i < bytes[0].size(); ++i) EXPECT_TRUE(bytes[0][i] == bytes[1][i]) << op << ": tensor " << i;
}

// 70 calls (more than kMaxGroupTensors), of sizes from 0 to several chunks, with their own step
// counts (some at 0: torch's first step), and in the middle calls that end a group: other
// attributes, another learning rate, a step count shared with the call before.
std::vector<OptCall> optimizer_calls(const AttrMap& a, std::vector<Slot> slots) {
  const int64_t sizes[] = {1000, 7, 5000, 1, 0, 2049, 300};
  std::vector<OptCall> calls;
  for (int t = 0; t < 70; ++t) {
    OptCall c{a, slots, sizes[t % 7], t % 3 == 0 ? 0 : t % 5 + 1};
    if (t == 47) c.other_lr = true;
    if (t == 50) c.shares_step = 49;
    calls.push_back(std::move(c));
  }
  return calls;
}

template <typename T>
void check_grouped_sgd() {
  const std::vector<Slot> plain = {Slot::kUniform, Slot::kUniform, Slot::kUniform, Slot::kLr, Slot::kStep};
  std::vector<Slot> nest = plain;
  nest.push_back(Slot::kUniform);
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain");
    auto sgd_attrs = [](float mom, float wd, int64_t nest) {
      return attrs({{"momentum", mom}, {"dampening", 0.1f}, {"weight_decay", wd}, {"nesterov", nest}});
    };
    std::vector<OptCall> calls = optimizer_calls(sgd_attrs(0.9f, 1e-3f, nesterov), nesterov ? nest : plain);
    calls[20].attrs = sgd_attrs(0.9f, 0.0f, nesterov);  // other weight decay
    calls[30].attrs = sgd_attrs(0.0f, 1e-3f, nesterov);  // no momentum: B holds the direction
    calls[40].attrs = sgd_attrs(0.9f, 1e-3f, 1 - nesterov);
    calls[40].slots = nesterov ? plain : nest;
    expect_grouped_equals_per_call<T>("SGD", calls, 2);
    calls[35].bad = true;  // refused: the groups before it run, the rest does not
    expect_grouped_equals_per_call<T>("SGD", calls, 1);
  }
}

template <typename T>
void check_grouped_adam() {
  const std::vector<Slot> slots = {Slot::kUniform, Slot::kUniform, Slot::kUniform, Slot::kPositive, Slot::kLr,
                                   Slot::kStep};
  const AttrMap adam = attrs({{"beta1", 0.85f}, {"beta2", 0.99f}, {"epsilon", 1e-6f}, {"weight_decay", 1e-3f}});
  const AttrMap adamw = attrs({{"weight_decay", 0.1f}, {"decoupled", int64_t{1}}});
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    std::vector<OptCall> calls = optimizer_calls(decoupled ? adamw : adam, slots);
    for (int t : {25, 26, 27}) calls[t].attrs = decoupled ? adam : adamw;  // the other form in the middle
    expect_grouped_equals_per_call<T>("Adam", calls, 2);
    calls[66].bad = true;
    expect_grouped_equals_per_call<T>("Adam", calls, 1);
  }
}

TEST_F(CudaDevice, GroupedSgdEqualsOneCallPerTensor) {
  check_grouped_sgd<float>();
  check_grouped_sgd<double>();
}

TEST_F(CudaDevice, GroupedAdamEqualsOneCallPerTensor) {
  check_grouped_adam<float>();
  check_grouped_adam<double>();
}

// ---- what runs without a GPU ---------------------------------------------------------------------

// The libraries this process loaded (printed for the GPU check's log); works without a GPU.
TEST(CudaKernelTable, ReportsLibraryVersions) {
  const std::string v = cuda::library_versions();
  std::printf("cuda libraries: %s\n", v.c_str());
  EXPECT_NE(v.find("cuDNN 9"), std::string::npos) << v;
}

// Every (op, dtype) of the CPU table has a CUDA kernel, native or host fallback.
TEST(CudaKernelTable, CoversEveryCpuEntry) {
  std::vector<std::string> missing;
  for (const KernelEntry& e : all_kernels())
    if (e.device == DeviceKind::kCpu && !has_kernel(e.op, DeviceKind::kCuda, e.dtype))
      missing.push_back(std::string(e.op) + "/" + dtype_name(e.dtype));
  EXPECT_TRUE(missing.empty()) << "no CUDA kernel for: " << ::testing::PrintToString(missing);
}

TEST(CudaKernelTable, EntriesAreUniqueAndOnCuda) {
  std::set<std::pair<std::string, DType>> seen;
  for (const KernelEntry& e : cuda::kernel_table()) {
    EXPECT_EQ(e.device, DeviceKind::kCuda) << e.op;
    EXPECT_TRUE(seen.insert({e.op, e.dtype}).second) << "twice: " << e.op << "/" << dtype_name(e.dtype);
    EXPECT_TRUE(has_kernel(e.op, DeviceKind::kCpu, e.dtype)) << "CUDA-only entry " << e.op << "/" << dtype_name(e.dtype);
  }
}

// The fallback copies back outputs only, so the ops that write through their inputs are native;
// so are the ops of a ResNet training step (the GPU check trains one).
TEST(CudaKernelTable, InPlaceAndHotOpsAreNative) {
  for (const char* op : {"SGDMomentum", "SGD", "Adam", "BatchNormalization", "BatchNormalizationGrad", "Conv", "ConvGradInput",
                         "ConvGradWeight", "ConvGradBias", "Relu", "ReluGrad", "MaxPool", "MaxPoolGrad",
                         "GlobalAveragePool", "GlobalAveragePoolGrad", "Add", "Sum", "Gemm", "MatMul",
                         "ReduceSumToShape", "SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad", "Flatten",
                         "Reshape", "Dropout", "DropoutGrad"})
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      EXPECT_TRUE(has_kernel(op, DeviceKind::kCuda, t)) << op;
      EXPECT_FALSE(cuda::is_host_fallback(op, t)) << op << " should be native";
    }
  const std::vector<std::string> fb = cuda::fallback_ops();
  EXPECT_NE(std::find(fb.begin(), fb.end(), "LRN"), fb.end());
}

// What a transformer's embedding, attention heads and LayerNorms run, natively: a GPT or BERT
// stage makes no host round trip for them; nor does a U-Net for its ConvTranspose, normalisations
// and Resize.
TEST(CudaKernelTable, TransformerOpsAreNative) {
  for (const char* op : {"Gather", "GatherGrad", "Slice", "SliceGrad", "Concat", "Split", "Expand", "LayerNormalization",
                         "LayerNormalizationGrad", "Pad", "PadGrad", "Equal", "Less", "Greater", "Cast", "ConvTranspose", "GroupNormalization",
                         "InstanceNormalization", "GroupNormalizationGrad", "Resize", "ResizeGrad"})
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      EXPECT_TRUE(has_kernel(op, DeviceKind::kCuda, t)) << op;
      EXPECT_FALSE(cuda::is_host_fallback(op, t)) << op << " should be native";
    }
  for (const char* op : {"Gather", "Slice", "Concat", "Split", "Expand"})
    for (DType t : {DType::kInt64, DType::kInt32, DType::kBool}) EXPECT_FALSE(cuda::is_host_fallback(op, t)) << op;
  for (const char* op : {"Where", "Not"}) EXPECT_FALSE(cuda::is_host_fallback(op, DType::kBool)) << op;
}

// Every optimizer op runs natively, with a multi-tensor kernel for float and double (one launch for a
// stage's updates), and nothing else has one.
TEST(CudaKernelTable, EveryOptimizerHasAGroupKernel) {
  for (const char* op : {"SGDMomentum", "SGD", "Adam"})
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      EXPECT_FALSE(cuda::is_host_fallback(op, t)) << op;
      EXPECT_NE(find_group_kernel(op, DeviceKind::kCuda, t), nullptr) << op << "/" << dtype_name(t);
    }
  for (const char* op : {"Relu", "Conv", "Resize"})
    EXPECT_EQ(find_group_kernel(op, DeviceKind::kCuda, DType::kFloat32), nullptr) << op;
  EXPECT_EQ(find_group_kernel("SGD", DeviceKind::kCuda, DType::kInt64), nullptr);
}

// The deferred error word's message names the op, the index, its position and the dimension, as
// the CPU's refusal does, and says where it was found (no GPU needed).
TEST(CudaDeferredError, DescribesTheRecord) {
  cuda::DeferredError e;
  e.code = cuda::kDeferredIndexOutOfRange;
  e.op = cuda::kDeferredOpGather;
  e.value = 105;
  e.limit = 100;
  e.position = 3;
  EXPECT_EQ(cuda::describe_deferred_error(e),
            "Gather (cuda): index 105 at position 3 is out of range for a dimension of 100 (found on the device; "
            "reported at the next synchronisation)");
  e.op = cuda::kDeferredOpGatherGrad;
  e.value = -101;
  EXPECT_NE(cuda::describe_deferred_error(e).find("GatherGrad (cuda): index -101"), std::string::npos);
  e.code = cuda::kDeferredLabelOutOfRange;
  e.op = cuda::kDeferredOpSceLoss;
  e.value = 12;
  e.limit = 10;
  e.position = 3;
  EXPECT_EQ(cuda::describe_deferred_error(e),
            "SoftmaxCrossEntropyLoss (cuda): label 12 at index 3 is outside [0, 10) (found on the device; reported "
            "at the next synchronisation)");
}

// Every element-wise unary op of the list runs natively, with its dedicated backward op where it
// has one (the list generates both tables' rows: kernels/unary_ops.h).
TEST(CudaKernelTable, UnaryOpsOfTheListAreNative) {
  int ops = 0;
#define PT_CHECK_NATIVE(Name, fn, args, fwd, kind, ...)                                                   \
  ++ops;                                                                                                \
  for (DType t : {DType::kFloat32, DType::kFloat64}) {                                                  \
    EXPECT_TRUE(has_kernel(#Name, DeviceKind::kCuda, t) && !cuda::is_host_fallback(#Name, t)) << #Name; \
    PT_UNARY_IF_GRAD(kind, EXPECT_TRUE(has_kernel(#Name "Grad", DeviceKind::kCuda, t) &&               \
                                       !cuda::is_host_fallback(#Name "Grad", t)) << #Name "Grad";)      \
  }
  PT_UNARY_OPS(PT_CHECK_NATIVE)
#undef PT_CHECK_NATIVE
  EXPECT_GE(ops, 26);
}

// Malformed calls: the CUDA kernel refuses them before touching memory, with the CPU kernel's
// status code (the pointers are host dummies: a CUDA kernel that got past its checks would fail).
TEST(CudaKernelTable, RefusesWhatTheCpuRefuses) {
  alignas(64) static double dummy[4096];
  struct Bad {
    const char* op;
    std::vector<Dims> in;
    std::vector<Dims> out;
    AttrMap attrs;
  };
  const std::vector<Bad> bad = {
      {"Gemm", {{4, 5}, {6, 3}}, {{4, 3}}, {}},                               // inner dims differ
      {"Gemm", {{4, 5, 1}, {5, 3}}, {{4, 3}}, {}},                            // not 2-D
      {"MatMul", {{4, 5}, {6, 3}}, {{4, 3}}, {}},
      {"Add", {{4, 5}, {3}}, {{4, 5}}, {}},                                   // no broadcast
      {"Sigmoid", {{4}}, {{5}}, {}},                                          // output dims
      {"CosGrad", {{4}, {5}}, {{4}}, {}},                                     // Z dims
      {"Gelu", {{4}}, {{4}}, attrs({{"approximate", std::string("erf")}})},   // unknown mode
      {"Softmax", {{4, 5}}, {{4, 5}}, attrs({{"axis", int64_t{2}}})},         // axis out of range
      {"Conv", {{1, 4, 5, 5}, {2, 3, 3, 3}}, {{1, 2, 3, 3}}, attrs({{"group", int64_t{2}}})},
      {"Conv", {{1, 3, 5, 5}, {2, 3, 3, 3}}, {{1, 2, 4, 4}}, {}},             // wrong output dims
      {"MaxPool", {{1, 3, 5, 5}}, {{1, 3, 5, 5}}, attrs({{"kernel_shape", Ints{3, 3}}})},
      {"BatchNormalization", {{4}, {4}, {4}, {4}, {4}}, {{4}}, {}},           // rank below 2
      {"SoftmaxCrossEntropyLoss", {{4, 3}, {5}}, {{}}, {}},                   // labels dims
      {"MSELoss", {{4}, {4}}, {{}}, attrs({{"reduction", std::string("none")}})},
      {"ReduceSumToShape", {{4, 5}}, {{3}}, {}},
      {"Transpose", {{2, 3}}, {{3, 2}}, attrs({{"perm", Ints{0, 0}}})},
      {"SGDMomentum", {{4}, {5}, {4}, {1}}, {}, {}},
      {"Resize", {{1, 2, 4, 4}}, {{1, 2, 8, 8}}, attrs({{"_scales", Floats{2, 2}}})},         // scales per dim
      {"Resize", {{1, 2, 4, 4}}, {{1, 2, 8, 8}}, attrs({{"_scales", Floats{1, 1, 2, 2}}, {"mode", std::string("cubic")}})},
      {"ResizeGrad", {{1, 2, 8, 8}}, {{1, 2, 4}}, attrs({{"_scales", Floats{1, 1, 2}}})},  // ranks differ
      {"ResizeGrad", {}, {{4}}, attrs({{"_scales", Floats{1}}})},                          // no dY
  };
  for (const Bad& b : bad) {
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      std::vector<TensorView> in, out;
      for (const Dims& d : b.in) in.push_back(TensorView{dummy, t, d});
      for (const Dims& d : b.out) out.push_back(TensorView{dummy, t, d});
      if (std::string(b.op) == "SoftmaxCrossEntropyLoss") in[1].dtype = DType::kInt64;
      const KernelFn cpu = find_kernel(b.op, DeviceKind::kCpu, t);
      const KernelFn gpu = find_kernel(b.op, DeviceKind::kCuda, t);
      ASSERT_TRUE(cpu && gpu) << b.op;
      const Status cs = cpu(KernelCall{in, out, b.attrs, nullptr});
      const Status gs = gpu(KernelCall{in, out, b.attrs, nullptr});
      EXPECT_FALSE(cs.is_ok()) << b.op << ": the CPU accepted a malformed call (test bug)";
      EXPECT_EQ(gs.code(), cs.code()) << b.op << " cuda: " << gs.message() << " | cpu: " << cs.message();
    }
  }
}

// ---- the host-side walks the kernels index with (no GPU needed) ---------------------------------

// Offsets of walk position i, as device_util.cuh's strided_offsets computes them.
template <int K>
std::array<int64_t, K> offsets(const cuda::Strided<K>& s, int64_t i) {
  std::array<int64_t, K> off{};
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t idx = i % s.sizes[d];
    i /= s.sizes[d];
    for (int k = 0; k < K; ++k) off[k] += idx * s.strides[k][d];
  }
  return off;
}

// The offset of out element `lin` in an operand of dims `in` broadcast to `out`, computed naively.
int64_t naive_offset(const Dims& in, const Dims& out, int64_t lin) {
  int64_t off = 0, stride = 1;
  const size_t shift = out.size() - in.size();
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t idx = lin % out[d];
    lin /= out[d];
    if (d >= shift) {
      if (in[d - shift] != 1) off += idx * stride;
      stride *= in[d - shift];
    }
  }
  return off;
}

TEST(CudaWalks, BroadcastWalksMatchNaiveIndexing) {
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int> rank(0, 6), ext(1, 4), coin(0, 2);
  for (int trial = 0; trial < 300; ++trial) {
    Dims out(rank(rng));
    for (auto& d : out) d = ext(rng);
    Dims a = out, b(out.begin() + (out.empty() ? 0 : coin(rng) % (out.size() + 1)), out.end());
    for (auto& d : a) if (coin(rng) == 0) d = 1;
    for (auto& d : b) if (coin(rng) == 0) d = 1;
    cuda::Strided<2> s;
    ASSERT_TRUE(cuda::make_strided<2>("test", out, {cuda::broadcast_strides(a, out), cuda::broadcast_strides(b, out)},
                                      &s).is_ok());
    ASSERT_LE(s.rank, cuda::kMaxRank);
    for (int64_t i = 0; i < numel(out); ++i) {
      const auto off = offsets<2>(s, i);
      ASSERT_EQ(off[0], naive_offset(a, out, i)) << dims_str(out) << " " << dims_str(a) << " at " << i;
      ASSERT_EQ(off[1], naive_offset(b, out, i)) << dims_str(out) << " " << dims_str(b) << " at " << i;
    }
  }
}

TEST(CudaWalks, ReduceWalksVisitEachElementOnceInOutputOrder) {
  const Dims x{3, 4, 5, 2};
  for (const Dims& kd : {Dims{1, 4, 1, 2}, Dims{3, 1, 5, 1}, Dims{1, 1, 1, 1}, Dims{3, 4, 5, 2}, Dims{3, 4, 1, 1}}) {
    cuda::Strided<1> kept, red;
    int64_t n_red = 0;
    ASSERT_TRUE(cuda::reduce_walks("test", x, kd, &kept, &red, &n_red).is_ok());
    EXPECT_EQ(n_red * numel(kd), numel(x));
    std::vector<int> seen(static_cast<size_t>(numel(x)), 0);
    for (int64_t o = 0; o < numel(kd); ++o)
      for (int64_t r = 0; r < n_red; ++r) {
        const int64_t e = offsets<1>(kept, o)[0] + offsets<1>(red, r)[0];
        ASSERT_GE(e, 0);
        ASSERT_LT(e, numel(x));
        ++seen[e];
        // e reduces to output o: its keep-dims source is o.
        EXPECT_EQ(naive_offset(kd, x, e), o) << dims_str(kd);
      }
    for (int v : seen) EXPECT_EQ(v, 1) << dims_str(kd);
  }
}

// ---- the caching allocator's bookkeeping, with a fake backend (no GPU needed) --------------------

struct FakeBackend final : cuda::CachingAllocator::Backend {
  std::set<void*> live;
  int64_t allocs = 0, frees = 0;
  size_t capacity = SIZE_MAX, used = 0;
  std::map<void*, size_t> sizes;
  Status alloc(void** p, size_t bytes) override {
    *p = nullptr;
    if (used + bytes > capacity) return internal_error("fake out of memory");
    *p = ::operator new(bytes);
    live.insert(*p);
    sizes[*p] = bytes;
    used += bytes;
    ++allocs;
    return Status::ok();
  }
  Status free(void* p) override {
    EXPECT_EQ(live.erase(p), 1u) << "backend free of an unknown block";
    used -= sizes[p];
    sizes.erase(p);
    ::operator delete(p);
    ++frees;
    return Status::ok();
  }
  const char* name() const override { return "fake"; }
};

TEST(CachingAllocator, SizeClassesBoundWaste) {
  using A = cuda::CachingAllocator;
  EXPECT_EQ(A::size_class(1), A::kMinBlock);
  EXPECT_EQ(A::size_class(512), 512u);
  EXPECT_EQ(A::size_class(513), 640u);
  EXPECT_EQ(A::size_class(1024), 1024u);
  EXPECT_EQ(A::size_class(1025), 1280u);
  for (size_t b : {size_t{700}, size_t{4097}, size_t{1} << 20, (size_t{3} << 28) + 1, (size_t{1} << 33) - 1}) {
    const size_t c = A::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(static_cast<double>(c - b) / static_cast<double>(c), 0.2) << b;
    EXPECT_EQ(A::size_class(c), c) << "a class maps to itself";
  }
}

TEST(CachingAllocator, ReusesPerStreamAndNeverFreesInSteadyState) {
  FakeBackend be;
  {
    cuda::CachingAllocator a(&be);
    void* s1 = reinterpret_cast<void*>(0x1);
    void* s2 = reinterpret_cast<void*>(0x2);
    for (int step = 0; step < 10; ++step) {
      void *x, *y, *z;
      ASSERT_TRUE(a.allocate(1000, s1, &x).is_ok());
      ASSERT_TRUE(a.allocate(5000, s1, &y).is_ok());
      ASSERT_TRUE(a.allocate(1000, s2, &z).is_ok());
      EXPECT_NE(x, z) << "a block is not shared across streams";
      a.deallocate(x);
      a.deallocate(y);
      a.deallocate(z);
    }
    const cuda::AllocatorStats st = a.stats();
    EXPECT_EQ(be.allocs, 3) << st.summary();
    EXPECT_EQ(be.frees, 0) << st.summary();
    EXPECT_EQ(st.allocs, 30);
    EXPECT_EQ(st.cache_hits, 27);
    EXPECT_EQ(st.in_use_bytes, 0u);
    EXPECT_EQ(st.cached_bytes, st.reserved_bytes);
    EXPECT_GE(st.peak_in_use_bytes, 1000u + 5000u + 1000u);
    void* zero = reinterpret_cast<void*>(0x5);
    ASSERT_TRUE(a.allocate(0, s1, &zero).is_ok());
    EXPECT_EQ(zero, nullptr);
    a.deallocate(nullptr);
  }
  EXPECT_EQ(be.frees, 3) << "the destructor returns the cache";
  EXPECT_TRUE(be.live.empty());
}

TEST(CachingAllocator, StatsAndFragmentation) {
  FakeBackend be;
  cuda::CachingAllocator a(&be);
  void* p;
  ASSERT_TRUE(a.allocate(513, nullptr, &p).is_ok());  // block of 640
  cuda::AllocatorStats st = a.stats();
  EXPECT_EQ(st.in_use_bytes, 640u);
  EXPECT_EQ(st.requested_bytes, 513u);
  EXPECT_NEAR(st.fragmentation(), 1.0 - 513.0 / 640.0, 1e-12);
  EXPECT_NE(st.summary().find("fragmentation"), std::string::npos);
  a.deallocate(p);
  st = a.stats();
  EXPECT_EQ(st.in_use_bytes, 0u);
  EXPECT_EQ(st.cached_bytes, 640u);
  EXPECT_EQ(st.fragmentation(), 0.0);
  a.reset_peaks();
  EXPECT_EQ(a.stats().peak_in_use_bytes, 0u);
  ASSERT_TRUE(a.release_cached().is_ok());
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_EQ(be.frees, 1);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  FakeBackend be;
  be.capacity = 4096;
  cuda::CachingAllocator a(&be);
  void *p, *q;
  ASSERT_TRUE(a.allocate(3000, nullptr, &p).is_ok());  // 3072
  a.deallocate(p);                                      // cached, on the null stream
  ASSERT_TRUE(a.allocate(3000, reinterpret_cast<void*>(0x9), &q).is_ok()) << "retry after releasing the cache";
  EXPECT_EQ(a.stats().oom_retries, 1);
  EXPECT_EQ(be.frees, 1);
  void* r;
  const Status s = a.allocate(3000, nullptr, &r);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(r, nullptr);
  EXPECT_NE(s.message().find("fake out of memory"), std::string::npos) << s.message();
  a.deallocate(q);
}

}  // namespace
}  // namespace pt

#endif  // PIPETRAIN_HAVE_CUDA
