// Finite-difference checks, in double, of the ops added for opsets 18 to 21 and for the zoo's models: every
// element-wise unary op of kernels/unary_ops.h (at its defaults), Gelu (exact and tanh), the reductions beyond
// Sum/Mean/Max (axes as attribute and, from opset 18, as input), Min/Max with broadcasting, CumSum,
// Trilu, GatherElements, GroupNormalization (opset 18 per-group and 21 per-channel scale) and
// InstanceNormalization. Inputs stay away from ties (Min/Max, ReduceMin) and zeros (ReduceL1,
// ReduceProd).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "importer/grad/grad_registry.h"
#include "kernels/unary_ops.h"
#include "tests/importer/grad_check_util.h"

namespace pt {
namespace {

using gradcheck::attrs_of;
using gradcheck::GradCheck;
using gradcheck::kAwayFromZero;
using gradcheck::kPositive;
using gradcheck::seed_trace;
using GRange = gradcheck::Range;
using Ints = std::vector<int64_t>;

// Every op of the list at its default parameters (tests/importer/grad_check_ops_test.cpp checks
// the ones with attributes at other values too). Ranges keep clear of the kinks.
TEST(GradCheckOpset18, UnaryOps) {
  struct Case {
    const char* op;
    GRange range;
  };
  const Case cases[] = {
      {"Relu", kAwayFromZero}, {"Sigmoid", {-3, 3}}, {"Tanh", {-2, 2}}, {"Neg", {-1, 1}}, {"Exp", {-2, 2}},
      {"Log", kPositive}, {"Sqrt", kPositive}, {"Reciprocal", kAwayFromZero}, {"Clip", {-2, 2}},
      {"LeakyRelu", kAwayFromZero}, {"Elu", kAwayFromZero}, {"Selu", kAwayFromZero},
      {"HardSigmoid", {0.1, 2.4, true}}, {"HardSwish", {0.1, 2.9, true}}, {"Erf", {-2, 2}},
      {"Softplus", {-3, 3}}, {"Abs", kAwayFromZero},
      {"Sin", {-3, 3}}, {"Cos", {-3, 3}}, {"Tan", {-1.2, 1.2}}, {"Sinh", {-2, 2}}, {"Cosh", {-2, 2}},
      {"Atan", {-3, 3}}, {"Softsign", kAwayFromZero}, {"Mish", {-4, 4}}, {"Gelu", {-3, 3}},
  };
  uint32_t seed = 6000;
  for (const Case& uc : cases) {
    SCOPED_TRACE(seed_trace(seed, uc.op));
    GradCheck c(seed++);
    Value* x = c.value("x", {3, 5}, ValueKind::kParameter, uc.range);
    c.check({c.op1(uc.op, {x}, {}, std::string(uc.op) == "Gelu" ? 20 : 18)}, {x});
  }
  // Every op of the list is in the test above (the list and this test must not drift).
  int listed = 0;
#define PT_COUNT(...) ++listed;
  PT_UNARY_OPS(PT_COUNT)
#undef PT_COUNT
  EXPECT_EQ(listed, static_cast<int>(std::size(cases)));
}

TEST(GradCheckOpset18, Gelu) {
  for (const char* approx : {"none", "tanh"}) {
    SCOPED_TRACE(seed_trace(6100, std::string("Gelu approximate ") + approx));
    GradCheck c(6100);
    Value* x = c.value("x", {4, 6}, ValueKind::kParameter, {-3, 3});
    AttrMap a;
    a.set("approximate", std::string(approx));
    c.check({c.op1("Gelu", {x}, a, 20)}, {x});
  }
}

TEST(GradCheckOpset18, Reductions) {
  struct Case {
    const char* op;
    Ints axes;
    int64_t keepdims;
    bool axes_as_input;
    int opset;
    GRange range;
  };
  const Case cases[] = {
      {"ReduceMin", {1}, 1, false, 13, {}},           {"ReduceMin", {0, 2}, 0, true, 18, {}},
      {"ReduceL2", {-1}, 1, false, 13, {}},           {"ReduceL2", {1}, 0, true, 18, {}},
      {"ReduceL1", {0}, 1, true, 18, kAwayFromZero},  {"ReduceSumSquare", {2}, 0, true, 18, {}},
      {"ReduceLogSum", {1}, 1, true, 18, kPositive},  {"ReduceLogSumExp", {-1}, 0, false, 13, {-3, 3}},
      {"ReduceLogSumExp", {}, 1, true, 18, {-3, 3}},  {"ReduceProd", {1}, 1, true, 18, kAwayFromZero},
  };
  uint32_t seed = 6200;
  for (const Case& rc : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string(rc.op) + " axes " + dims_str(Dims(rc.axes)) + " keepdims " +
                                      std::to_string(rc.keepdims) + " opset " + std::to_string(rc.opset)));
    GradCheck c(seed++);
    Value* x = c.value("x", {3, 4, 5}, ValueKind::kParameter, rc.range);
    std::vector<Value*> ins = {x};
    AttrMap at = attrs_of({{"keepdims", rc.keepdims}});
    if (rc.axes_as_input) ins.push_back(c.ints("axes", {static_cast<int64_t>(rc.axes.size())}, rc.axes, ValueKind::kConstant));
    else if (!rc.axes.empty()) at.set("axes", rc.axes);
    c.check({c.op1(rc.op, ins, at, rc.opset)}, {x});
  }
}

TEST(GradCheckOpset18, MinMaxBroadcast) {
  uint32_t seed = 6300;
  for (const char* op : {"Max", "Min"}) {
    SCOPED_TRACE(seed_trace(seed, std::string(op) + " of [2, 3, 4], [3, 1], [4]"));
    GradCheck c(seed++);
    Value* a = c.value("a", {2, 3, 4});
    Value* b = c.value("b", {3, 1});
    Value* d = c.value("d", {4});
    c.check({c.op1(op, {a, b, d})}, {a, b, d});
  }
}

TEST(GradCheckOpset18, ModBroadcast) {
  SCOPED_TRACE(seed_trace(6350, "Mod fmod 1 of [3, 4] by [4], both"));
  GradCheck c(6350);
  Value* a = c.value("a", {3, 4}, ValueKind::kParameter, {0.5, 5.0, true});
  Value* b = c.value("b", {4}, ValueKind::kParameter, {0.7, 1.3, true});
  // Keep A / B away from integers, where the quotient jumps.
  double* pa = a->data->as<double>();
  const double* pb = b->data->as<double>();
  for (int64_t i = 0; i < 12; ++i) {
    const double q = pa[i] / pb[i % 4], f = q - std::trunc(q);
    if (std::fabs(f) < 0.05 || std::fabs(f) > 0.95) pa[i] += 0.3 * pb[i % 4];
  }
  c.check({c.op1("Mod", {a, b}, attrs_of({{"fmod", int64_t{1}}}))}, {a, b});
}

TEST(GradCheckOpset18, CumSum) {
  uint32_t seed = 6400;
  for (int64_t exclusive : {0, 1})
    for (int64_t reverse : {0, 1}) {
      SCOPED_TRACE(seed_trace(seed, "CumSum axis 1 exclusive " + std::to_string(exclusive) + " reverse " +
                                        std::to_string(reverse)));
      GradCheck c(seed++);
      Value* x = c.value("x", {2, 5, 3});
      Value* axis = c.ints("axis", {}, {-2}, ValueKind::kConstant);
      c.check({c.op1("CumSum", {x, axis}, attrs_of({{"exclusive", exclusive}, {"reverse", reverse}}))}, {x});
    }
}

TEST(GradCheckOpset18, Trilu) {
  uint32_t seed = 6500;
  for (int64_t upper : {0, 1})
    for (int64_t k : {-1, 0, 2}) {
      SCOPED_TRACE(seed_trace(seed, "Trilu upper " + std::to_string(upper) + " k " + std::to_string(k)));
      GradCheck c(seed++);
      Value* x = c.value("x", {2, 4, 5});
      Value* kv = c.ints("k", {}, {k}, ValueKind::kConstant);
      c.check({c.op1("Trilu", {x, kv}, attrs_of({{"upper", upper}}))}, {x});
    }
}

TEST(GradCheckOpset18, GatherElementsRepeatedIndices) {
  SCOPED_TRACE(seed_trace(6600, "GatherElements axis 1, repeated and negative indices"));
  GradCheck c(6600);
  Value* x = c.value("x", {3, 4});
  Value* idx = c.ints("idx", {3, 5}, {0, 3, 3, -1, 1, 2, 2, 0, 1, 1, -4, 3, 2, 1, 0}, ValueKind::kConstant);
  Value* y = c.op1("GatherElements", {x, idx}, attrs_of({{"axis", int64_t{1}}}));
  EXPECT_EQ(y->dims, (Dims{3, 5}));
  c.check({y}, {x});
}

TEST(GradCheckOpset18, GroupAndInstanceNormalization) {
  struct Case {
    const char* op;
    int64_t groups;
    int opset;
    Dims xd;
  };
  const Case cases[] = {
      {"GroupNormalization", 2, 18, {2, 4, 3, 3}},  // scale, bias per group
      {"GroupNormalization", 3, 21, {2, 6, 5}},     // per channel
      {"GroupNormalization", 1, 21, {3, 2, 2, 2}},
      {"InstanceNormalization", 0, 17, {2, 3, 4}},
  };
  uint32_t seed = 6700;
  for (const Case& gc : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string(gc.op) + " groups " + std::to_string(gc.groups) + " opset " +
                                      std::to_string(gc.opset) + " X " + dims_str(gc.xd)));
    GradCheck c(seed++);
    const int64_t params = gc.opset < 21 && gc.groups ? gc.groups : gc.xd[1];
    Value* x = c.value("x", gc.xd, ValueKind::kParameter, {-2, 2});
    Value* s = c.value("scale", {params}, ValueKind::kParameter, {0.5, 1.5, false});
    Value* b = c.value("bias", {params});
    AttrMap a = attrs_of({{"epsilon", 1e-3f}});
    if (gc.groups) a.set("num_groups", gc.groups);
    c.check({c.op1(gc.op, {x, s, b}, a, gc.opset)}, {x, s, b});
  }
}

TEST(GradCheckOpset18, ScaleSizeFollowsTheOpset) {
  GradCheck c(6800);
  Value* x = c.value("x", {2, 4, 3});
  Value* s = c.value("scale", {4});
  Value* b = c.value("bias", {4});
  Graph& g = c.graph();
  Value* out = g.add_value("y", DType::kUndefined, {}, ValueKind::kActivation);
  Node* n = g.add_node("GroupNormalization", "gn", {x, s, b}, {out}, attrs_of({{"num_groups", int64_t{2}}}));
  n->since_version = 18;  // opset 18 wants 2 (one per group)
  Status st = infer_node(*n, "model.onnx: node 'gn'");
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("one per group"), std::string::npos) << st.message();
  n->since_version = 21;
  EXPECT_TRUE(infer_node(*n, "gn").is_ok());
}

TEST(GradCheckOpset18, ConvTranspose) {
  struct Case {
    const char* what;
    Dims xd, wd;
    AttrMap attrs;
    Dims yd;
  };
  const Case cases[] = {
      {"2-D stride 2, pads 1, output_padding 1, group 2, bias", {2, 4, 3, 3}, {4, 3, 3, 3},
       attrs_of({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"output_padding", Ints{1, 0}},
                 {"group", int64_t{2}}}),
       {2, 6, 6, 5}},
      {"1-D dilation 2, SAME_UPPER stride 2", {1, 2, 5}, {2, 3, 3},
       attrs_of({{"dilations", Ints{2}}, {"strides", Ints{2}}, {"auto_pad", std::string("SAME_UPPER")}}), {1, 3, 10}},
      {"2-D output_shape", {1, 1, 3, 3}, {1, 2, 3, 3}, attrs_of({{"strides", Ints{3, 2}}, {"output_shape", Ints{10, 8}}}),
       {1, 2, 10, 8}},
  };
  uint32_t seed = 6900;
  for (const Case& cc : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("ConvTranspose ") + cc.what));
    GradCheck c(seed++);
    Value* x = c.value("x", cc.xd);
    Value* w = c.value("w", cc.wd);
    Value* b = c.value("b", {cc.yd[1]});
    Value* y = c.op1("ConvTranspose", {x, w, b}, cc.attrs);
    EXPECT_EQ(y->dims, cc.yd);
    c.check({y}, {x, w, b});
  }
}

TEST(GradCheckOpset18, Resize) {
  struct Case {
    const char* mode;
    const char* coord;
    std::vector<double> scales;
  };
  const Case cases[] = {{"nearest", "asymmetric", {1, 1, 2, 3}},
                        {"linear", "pytorch_half_pixel", {1, 1, 2, 1.5}},
                        {"linear", "align_corners", {1, 1, 0.5, 2}},
                        {"linear", "half_pixel", {1, 1, 0.75, 1.25}}};
  uint32_t seed = 7000;
  for (const Case& rc : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("Resize ") + rc.mode + " " + rc.coord));
    GradCheck c(seed++);
    Value* x = c.value("x", {2, 2, 4, 4});
    Value* s = c.graph().add_value("scales", DType::kFloat32, {4}, ValueKind::kConstant);
    std::vector<float> sv(rc.scales.begin(), rc.scales.end());
    s->data = std::make_shared<HostTensor>(HostTensor::from<float>({4}, sv));
    AttrMap a;
    a.set("mode", std::string(rc.mode));
    a.set("coordinate_transformation_mode", std::string(rc.coord));
    a.set("nearest_mode", std::string("floor"));
    c.check({c.op1("Resize", {x, nullptr, s}, a, 18)}, {x});
  }
}

TEST(GradCheckOpset18, Einsum) {
  struct Case {
    const char* eq;
    std::vector<Dims> dims;
  };
  const Case cases[] = {{"ij,jk->ik", {{3, 4}, {4, 5}}},
                        {"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
                        {"ij->j", {{3, 4}}},                 // a summed-out letter broadcasts back
                        {"i,j->ij", {{3}, {4}}},              // outer product
                        {"bij,bjk,k", {{2, 3, 4}, {2, 4, 2}, {2}}}};  // implicit output: "bi"
  uint32_t seed = 7100;
  for (const Case& ec : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("Einsum ") + ec.eq));
    GradCheck c(seed++);
    std::vector<Value*> ins;
    for (size_t k = 0; k < ec.dims.size(); ++k) ins.push_back(c.value(std::string("x").append(std::to_string(k)), ec.dims[k]));
    AttrMap a;
    a.set("equation", std::string(ec.eq));
    c.check({c.op1("Einsum", ins, a, 12)}, ins);
  }
}

TEST(GradCheckOpset18, EveryNewOpHasABuilder) {
  for (const char* op : {"Sin", "Cos", "Softsign", "Mish", "Gelu", "Min", "Max", "CumSum", "Trilu", "ArgMax",
                         "ReduceL2", "ReduceLogSumExp", "ReduceMin", "ReduceSumSquare", "GatherElements",
                         "InstanceNormalization", "GroupNormalization", "ConvTranspose", "Resize", "Einsum", "Mod"})
    EXPECT_TRUE(has_grad_builder(op)) << op;
}

}  // namespace
}  // namespace pt
