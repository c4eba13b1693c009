// Finite-difference checks, in double, of the gradient builders of the activations and tensor ops (activations, Pow,
// reductions, Sum/Mean, data movement, Gather, Where, Cast, LayerNormalization) together with their
// CPU backward kernels, plus two exported composites: Gelu (x * 0.5 * (1 + Erf(x / sqrt 2))) and
// the decomposed LayerNorm of older exports. Inputs stay away from kinks (Clip bounds, zero for
// LeakyRelu / Abs / PRelu, ties for ReduceMax); a separate test pins which tied element gets
// ReduceMax's gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

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

Value* scalar(GradCheck& c, const std::string& name, double v) {
  Value* s = c.graph().add_value(name, DType::kFloat64, {}, ValueKind::kConstant);
  s->data = std::make_shared<HostTensor>(HostTensor::from<double>({}, std::span<const double>(&v, 1)));
  return s;
}

Value* bools(GradCheck& c, const std::string& name, Dims dims, const std::vector<int>& vals) {
  Value* v = c.graph().add_value(name, DType::kBool, dims, ValueKind::kConstant);
  std::unique_ptr<bool[]> b(new bool[vals.size()]);
  for (size_t i = 0; i < vals.size(); ++i) b[i] = vals[i] != 0;
  v->data = std::make_shared<HostTensor>(HostTensor::from<bool>(dims, std::span<const bool>(b.get(), vals.size())));
  return v;
}

// ---- Activations -------------------------------------------------------------------------------

struct UnaryCase {
  const char* op;
  AttrMap attrs;
  GRange range;
};

TEST(GradCheckOps, Activations) {
  const UnaryCase cases[] = {
      {"LeakyRelu", attrs_of({{"alpha", 0.1f}}), kAwayFromZero},
      {"LeakyRelu", {}, kAwayFromZero},
      {"Elu", attrs_of({{"alpha", 0.7f}}), kAwayFromZero},
      {"Selu", {}, kAwayFromZero},
      {"Selu", attrs_of({{"alpha", 1.5f}, {"gamma", 0.9f}}), kAwayFromZero},
      {"HardSigmoid", {}, {0.1, 2.0, true}},                              // kinks at +-2.5
      {"HardSigmoid", attrs_of({{"alpha", 0.4f}, {"beta", 0.6f}}), {0.1, 4.0, true}},  // kinks at -1.5, 1
      {"HardSwish", {}, {0.1, 4.5, true}},                                // kinks at +-3
      {"Erf", {}, {-2, 2, false}},
      {"Softplus", {}, {-3, 3, false}},
      {"Reciprocal", {}, kAwayFromZero},
      {"Abs", {}, kAwayFromZero},
  };
  uint32_t seed = 3000;
  for (const UnaryCase& uc : cases) {
    SCOPED_TRACE(seed_trace(seed, uc.op));
    GradCheck c(seed++);
    Value* x = c.value("x", {3, 5}, ValueKind::kParameter, uc.range);
    // Kinks of the piecewise ops: nudge values that land within 1e-3 of one.
    if (std::string(uc.op) == "HardSigmoid" || std::string(uc.op) == "HardSwish") {
      double* p = x->data->as<double>();
      for (int64_t i = 0; i < x->size(); ++i)
        for (double k : {-3.0, -2.5, -1.5, 1.0, 2.5, 3.0})
          if (std::fabs(p[i] - k) < 1e-3) p[i] += 0.01;
    }
    c.check({c.op1(uc.op, {x}, uc.attrs)}, {x});
  }
}

TEST(GradCheckOps, ClipAttributesAndInputs) {
  {
    SCOPED_TRACE(seed_trace(3100, "Clip opset 6, min/max attributes"));
    GradCheck c(3100);
    Value* x = c.value("x", {4, 5}, ValueKind::kParameter, {-2, 2});
    c.check({c.op1("Clip", {x}, attrs_of({{"min", -0.5f}, {"max", 0.75f}}), 6)}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(3101, "Clip opset 13, min/max inputs"));
    GradCheck c(3101);
    Value* x = c.value("x", {4, 5}, ValueKind::kParameter, {-2, 2});
    c.check({c.op1("Clip", {x, scalar(c, "lo", -0.25), scalar(c, "hi", 1.0)})}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(3102, "Clip opset 13, max only"));
    GradCheck c(3102);
    Value* x = c.value("x", {4, 5}, ValueKind::kParameter, {-2, 2});
    c.check({c.op1("Clip", {x, nullptr, scalar(c, "hi", 0.3)})}, {x});
  }
}

TEST(GradCheckOps, PReluSlopeBroadcast) {
  const std::pair<Dims, Dims> cases[] = {{{2, 3, 4}, {3, 1}}, {{2, 3, 4}, {4}}, {{2, 3}, {1}}, {{2, 3}, {2, 3}}};
  uint32_t seed = 3200;
  for (const auto& [xd, sd] : cases) {
    SCOPED_TRACE(seed_trace(seed, "PRelu X " + dims_str(xd) + " slope " + dims_str(sd)));
    GradCheck c(seed++);
    Value* x = c.value("x", xd, ValueKind::kParameter, kAwayFromZero);
    Value* s = c.value("slope", sd, ValueKind::kParameter, {0.05, 0.5, false});
    c.check({c.op1("PRelu", {x, s})}, {x, s});
  }
}

TEST(GradCheckOps, Pow) {
  {
    SCOPED_TRACE(seed_trace(3300, "Pow [2, 3] ^ [3], both"));
    GradCheck c(3300);
    Value* a = c.value("A", {2, 3}, ValueKind::kParameter, kPositive);
    Value* b = c.value("B", {3}, ValueKind::kParameter, {-1.5, 2.5, false});
    c.check({c.op1("Pow", {a, b})}, {a, b});
  }
  {
    SCOPED_TRACE(seed_trace(3301, "Pow x ^ 2 (constant)"));
    GradCheck c(3301);
    Value* a = c.value("A", {3, 4}, ValueKind::kParameter, {-2, 2});
    c.check({c.op1("Pow", {a, scalar(c, "two", 2.0)})}, {a});
  }
  {
    SCOPED_TRACE(seed_trace(3302, "Pow x ^ int64 3"));
    GradCheck c(3302);
    Value* a = c.value("A", {3, 4}, ValueKind::kParameter, {-2, 2});
    Value* e = c.ints("e", {}, {3}, ValueKind::kConstant);
    c.check({c.op1("Pow", {a, e})}, {a});
  }
}

TEST(GradCheckOps, GeluAsExported) {
  SCOPED_TRACE(seed_trace(3400, "Gelu: x * 0.5 * (1 + Erf(x / sqrt 2)), x feeding two consumers"));
  GradCheck c(3400);
  Value* x = c.value("x", {4, 6}, ValueKind::kParameter, {-3, 3});
  Value* e = c.op1("Erf", {c.op1("Div", {x, scalar(c, "sqrt2", std::sqrt(2.0))})});
  Value* y = c.op1("Mul", {c.op1("Mul", {x, c.op1("Add", {e, scalar(c, "one", 1.0)})}), scalar(c, "half", 0.5)});
  c.check({y}, {x});
}

// ---- Reductions --------------------------------------------------------------------------------

struct ReduceCase {
  const char* op;
  Ints axes;
  int64_t keepdims;
  bool axes_as_input;
  int opset;
};

TEST(GradCheckOps, Reductions) {
  const ReduceCase cases[] = {
      {"ReduceSum", {1}, 1, true, 13},       {"ReduceSum", {0, 2}, 0, true, 13},
      {"ReduceSum", {}, 0, false, 13},       {"ReduceSum", {-1}, 1, false, 11},
      {"ReduceMean", {-1}, 1, false, 13},    {"ReduceMean", {0, 1}, 0, false, 13},
      {"ReduceMean", {1}, 0, true, 18},      {"ReduceMean", {}, 1, false, 13},
      {"ReduceMax", {1}, 1, false, 13},      {"ReduceMax", {0, 2}, 0, false, 13},
      {"ReduceMax", {}, 0, false, 13},       {"ReduceMax", {-1}, 1, true, 18},
  };
  uint32_t seed = 3500;
  for (const ReduceCase& rc : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string(rc.op) + " axes " + dims_str(Dims(rc.axes)) + " keepdims " +
                                      std::to_string(rc.keepdims) + (rc.axes_as_input ? " (input)" : " (attribute)")));
    GradCheck c(seed++);
    Value* x = c.value("x", {3, 4, 5});  // continuous random values: no ties
    std::vector<Value*> ins = {x};
    AttrMap at = attrs_of({{"keepdims", rc.keepdims}});
    if (rc.axes_as_input) ins.push_back(c.ints("axes", {static_cast<int64_t>(rc.axes.size())}, rc.axes, ValueKind::kConstant));
    else if (!rc.axes.empty()) at.set("axes", rc.axes);
    c.check({c.op1(rc.op, ins, at, rc.opset)}, {x});
  }
}

TEST(GradCheckOps, ReduceSumNoopWithEmptyAxes) {
  GradCheck c(3550);
  Value* x = c.value("x", {3, 4});
  Value* y = c.op1("ReduceSum", {x}, attrs_of({{"noop_with_empty_axes", int64_t{1}}}));
  EXPECT_EQ(y->dims, (Dims{3, 4}));
  c.check({y}, {x});
}

// Ties: the whole gradient goes to the first maximal element in row-major order.
TEST(GradCheckOps, ReduceMaxTieGoesToFirstElement) {
  GradCheck c(3560);
  Graph& g = c.graph();
  Value* x = g.add_value("x", DType::kFloat64, {2, 3}, ValueKind::kParameter);
  const double xv[] = {1.0, 3.0, 3.0, 2.0, 2.0, 2.0};
  x->data = std::make_shared<HostTensor>(HostTensor::from<double>({2, 3}, xv));
  Value* y = c.op1("ReduceMax", {x}, attrs_of({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}));
  Value* dy = g.add_value("dY", DType::kFloat64, {2}, ValueKind::kConstant);
  const double dyv[] = {10.0, 20.0};
  dy->data = std::make_shared<HostTensor>(HostTensor::from<double>({2}, dyv));
  auto grads = build_gradients(g, {{y, dy}}, {x});
  ASSERT_TRUE(grads.has_value()) << grads.status().message();
  auto ex = Executor::create(g, DeviceKind::kCpu);
  ASSERT_TRUE(ex.has_value()) << ex.status().message();
  ASSERT_TRUE((*ex)->run().is_ok());
  const HostTensor& dx = (*ex)->tensor(grads->at(x));
  const double want[] = {0, 10, 0, 20, 0, 0};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dx.as<double>()[i], want[i]) << "element " << i;
}

TEST(GradCheckOps, SumAndMeanBroadcast) {
  uint32_t seed = 3600;
  for (const char* op : {"Sum", "Mean"}) {
    SCOPED_TRACE(seed_trace(seed, std::string(op) + " of [2, 3], [3], [2, 1]"));
    GradCheck c(seed++);
    Value* a = c.value("a", {2, 3});
    Value* b = c.value("b", {3});
    Value* d = c.value("d", {2, 1});
    c.check({c.op1(op, {a, b, d})}, {a, b, d});
  }
  {
    SCOPED_TRACE(seed_trace(3610, "Sum of one input, and the same value twice"));
    GradCheck c(3610);
    Value* a = c.value("a", {2, 3});
    c.check({c.op1("Sum", {a}), c.op1("Mean", {a, a})}, {a});
  }
}

// ---- Data movement -----------------------------------------------------------------------------

TEST(GradCheckOps, ConcatAndSplit) {
  {
    SCOPED_TRACE(seed_trace(3700, "Concat axis 1 of [2,1,3], [2,2,3], [2,3,3]"));
    GradCheck c(3700);
    Value* a = c.value("a", {2, 1, 3});
    Value* b = c.value("b", {2, 2, 3});
    Value* d = c.value("d", {2, 3, 3});
    c.check({c.op1("Concat", {a, b, d}, attrs_of({{"axis", int64_t{1}}}))}, {a, b, d});
  }
  {
    SCOPED_TRACE(seed_trace(3701, "Split axis -1 sizes [1, 3, 2] (input), only outputs 0 and 2 used"));
    GradCheck c(3701);
    Value* x = c.value("x", {2, 6});
    Value* sizes = c.ints("split", {3}, {1, 3, 2}, ValueKind::kConstant);
    Node* n = c.node("Split", {x, sizes}, 3, attrs_of({{"axis", int64_t{-1}}}));
    EXPECT_EQ(n->outputs[1]->dims, (Dims{2, 3}));
    c.check({n->outputs[0], n->outputs[2]}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(3702, "Split opset 11 equal parts, axis 0"));
    GradCheck c(3702);
    Value* x = c.value("x", {4, 3});
    Node* n = c.node("Split", {x}, 2, {}, 11);
    c.check({n->outputs[0], n->outputs[1]}, {x});
  }
}

struct SliceCase {
  const char* label;
  Ints starts, ends, axes, steps;
};

TEST(GradCheckOps, Slice) {
  const SliceCase cases[] = {
      {"rows 1..3", {1}, {3}, {0}, {}},
      {"negative step on the last axis", {-1}, {-100}, {-1}, {-2}},
      {"two axes, steps 2 and -1", {0, 3}, {4, 0}, {0, 2}, {2, -1}},
      {"end past the dim, negative start", {-2, 0}, {1000, 2}, {1, 2}, {1, 1}},
  };
  uint32_t seed = 3800;
  for (const SliceCase& sc : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("Slice ") + sc.label));
    GradCheck c(seed++);
    Value* x = c.value("x", {4, 3, 5});
    const int64_t k = static_cast<int64_t>(sc.starts.size());
    std::vector<Value*> ins = {x, c.ints("starts", {k}, sc.starts, ValueKind::kConstant),
                               c.ints("ends", {k}, sc.ends, ValueKind::kConstant),
                               c.ints("axes", {k}, sc.axes, ValueKind::kConstant)};
    if (!sc.steps.empty()) ins.push_back(c.ints("steps", {k}, sc.steps, ValueKind::kConstant));
    c.check({c.op1("Slice", ins)}, {x});
  }
  {
    // Three slices of one tensor (overlapping) and a direct reader: the later slices' SliceGrads
    // start from the gradient accumulated so far (importer/training.cpp), no Add between them.
    SCOPED_TRACE(seed_trace(3811, "Slice three times, overlapping, plus a Tanh of the whole"));
    GradCheck c(3811);
    Value* x = c.value("x", {4, 6});
    auto slice = [&](int64_t b, int64_t e, const std::string& tag) {
      return c.op1("Slice", {x, c.ints("s" + tag, {1}, {b}, ValueKind::kConstant), c.ints("e" + tag, {1}, {e}, ValueKind::kConstant),
                             c.ints("a" + tag, {1}, {1}, ValueKind::kConstant)});
    };
    Value* q = slice(0, 2, "q");
    Value* k = slice(2, 4, "k");
    Value* v = slice(1, 5, "v");
    Value* t = c.op1("Tanh", {x});
    c.check({q, k, v, t}, {x});
    int slice_grads = 0, with_acc = 0;
    for (const auto& n : c.graph().nodes())
      if (n->op_type == "SliceGrad") {
        ++slice_grads;
        with_acc += n->inputs.size() == 2;
      }
    EXPECT_EQ(slice_grads, 3);
    EXPECT_GE(with_acc, 2) << "the later slices' gradients accumulate in their SliceGrad";
  }
  {
    SCOPED_TRACE(seed_trace(3810, "Slice opset 9 attributes"));
    GradCheck c(3810);
    Value* x = c.value("x", {4, 3});
    c.check({c.op1("Slice", {x}, attrs_of({{"starts", Ints{1, 0}}, {"ends", Ints{-1, 2}}}), 9)}, {x});
  }
}

TEST(GradCheckOps, SqueezeUnsqueezeExpandTile) {
  {
    SCOPED_TRACE(seed_trace(3900, "Unsqueeze axes [0, 3] then Squeeze axes [0] (inputs)"));
    GradCheck c(3900);
    Value* x = c.value("x", {2, 3});
    Value* u = c.op1("Unsqueeze", {x, c.ints("ax", {2}, {0, 3}, ValueKind::kConstant)});
    EXPECT_EQ(u->dims, (Dims{1, 2, 3, 1}));
    c.check({c.op1("Squeeze", {u, c.ints("sq", {1}, {0}, ValueKind::kConstant)})}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(3901, "Expand [3, 1] to [2, 3, 4]"));
    GradCheck c(3901);
    Value* x = c.value("x", {3, 1});
    c.check({c.op1("Expand", {x, c.ints("shape", {3}, {2, 3, 4}, ValueKind::kConstant)})}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(3902, "Tile [2, 3] by [2, 3]"));
    GradCheck c(3902);
    Value* x = c.value("x", {2, 3});
    c.check({c.op1("Tile", {x, c.ints("rep", {2}, {2, 3}, ValueKind::kConstant)})}, {x});
  }
}

TEST(GradCheckOps, Pad) {
  uint32_t seed = 4000;
  for (const char* mode : {"constant", "reflect", "edge"}) {
    SCOPED_TRACE(seed_trace(seed, std::string("Pad ") + mode + " [1, 2, 0, 1 | 0, 2, 1, 1]"));
    GradCheck c(seed++);
    Value* x = c.value("x", {2, 3, 3, 4});
    Value* pads = c.ints("pads", {8}, {1, 2, 0, 1, 0, 2, 1, 1}, ValueKind::kConstant);
    std::vector<Value*> ins = {x, pads};
    if (std::string(mode) == "constant") ins.push_back(scalar(c, "v", 0.5));
    c.check({c.op1("Pad", ins, attrs_of({{"mode", std::string(mode)}}))}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(4010, "Pad opset 2 attributes, negative pads crop"));
    GradCheck c(4010);
    Value* x = c.value("x", {3, 4});
    c.check({c.op1("Pad", {x}, attrs_of({{"pads", Ints{1, -1, 0, 2}}, {"value", 1.5f}}), 2)}, {x});
  }
}

TEST(GradCheckOps, GatherEmbeddingAndAxis1) {
  {
    SCOPED_TRACE(seed_trace(4100, "Gather [V=5, D=4] by int64 [2, 3] with repeats"));
    GradCheck c(4100);
    Value* table = c.value("table", {5, 4});
    Value* idx = c.ints("idx", {2, 3}, {0, 3, 3, 4, -1, 1}, ValueKind::kInput);
    Node* n = c.node("Gather", {table, idx});
    EXPECT_EQ(n->outputs[0]->dims, (Dims{2, 3, 4}));
    c.check({n->outputs[0]}, {table});
  }
  {
    SCOPED_TRACE(seed_trace(4101, "Gather axis 1"));
    GradCheck c(4101);
    Value* x = c.value("x", {3, 4, 2});
    Value* idx = c.ints("idx", {3}, {2, 0, 2}, ValueKind::kConstant);
    c.check({c.op1("Gather", {x, idx}, attrs_of({{"axis", int64_t{1}}}))}, {x});
  }
}

TEST(GradCheckOps, WhereAndComparisons) {
  {
    SCOPED_TRACE(seed_trace(4200, "Where bool [2, 1, 4] between X [3, 4] and Y [2, 3, 1]"));
    GradCheck c(4200);
    Value* cond = bools(c, "cond", {2, 1, 4}, {1, 0, 0, 1, 0, 1, 1, 0});
    Value* a = c.value("X", {3, 4});
    Value* b = c.value("Y", {2, 3, 1});
    c.check({c.op1("Where", {cond, a, b})}, {a, b});
  }
  {
    // The mask is computed from x: Less / Equal / Not carry no gradient, Where routes it.
    SCOPED_TRACE(seed_trace(4201, "Where(Not(Less(x, 0.3)), x, 2x); Where(Equal(x, x), |x| via Greater, x)"));
    GradCheck c(4201);
    Value* x = c.value("x", {3, 4});
    Value* m = c.op1("Not", {c.op1("Less", {x, scalar(c, "t", 0.3)})});
    Value* y = c.op1("Where", {m, x, c.op1("Mul", {x, scalar(c, "two", 2.0)})});
    Value* gt = c.op1("Greater", {x, scalar(c, "z", 0.0)});
    Value* y2 = c.op1("Where", {c.op1("Equal", {x, x}), c.op1("Where", {gt, x, c.op1("Neg", {x})}), x});
    c.check({y, y2}, {x});
  }
}

TEST(GradCheckOps, Cast) {
  GradCheck c(4300);
  Value* x = c.value("x", {2, 3});
  AttrMap to_double = attrs_of({{"to", static_cast<int64_t>(DType::kFloat64)}});
  c.check({c.op1("Cast", {x}, to_double)}, {x});
  // double -> float32 -> double: the way back is a Cast to the input's type.
  GradCheck d(4301);
  Value* x2 = d.value("x", {2, 3});
  Value* f = d.op1("Cast", {x2}, attrs_of({{"to", static_cast<int64_t>(DType::kFloat32)}}));
  EXPECT_EQ(f->dtype, DType::kFloat32);
  Value* seed_v = d.graph().add_value("dY", DType::kFloat32, f->dims, ValueKind::kConstant);
  seed_v->data = std::make_shared<HostTensor>(DType::kFloat32, f->dims);
  auto grads = build_gradients(d.graph(), {{f, seed_v}}, {x2});
  ASSERT_TRUE(grads.has_value()) << grads.status().message();
  const Value* gx = grads->at(x2);
  EXPECT_EQ(gx->dtype, DType::kFloat64);
  ASSERT_NE(gx->producer, nullptr);
  EXPECT_EQ(gx->producer->op_type, "Cast");
}

// ---- LayerNormalization ------------------------------------------------------------------------

TEST(GradCheckOps, LayerNormalization) {
  struct LnCase {
    int64_t axis;
    bool bias;
    size_t outputs;
  };
  const LnCase cases[] = {{-1, true, 1}, {1, true, 3}, {0, false, 1}, {2, true, 2}};
  uint32_t seed = 4400;
  for (const LnCase& lc : cases) {
    SCOPED_TRACE(seed_trace(seed, "LayerNormalization axis " + std::to_string(lc.axis) +
                                      (lc.bias ? " with B" : " without B") + ", " + std::to_string(lc.outputs) +
                                      " output(s)"));
    GradCheck c(seed++);
    Value* x = c.value("x", {2, 3, 4}, ValueKind::kParameter, {-2, 2});
    const int64_t a = lc.axis < 0 ? lc.axis + 3 : lc.axis;
    const Dims xd{2, 3, 4};
    const Dims nd(xd.begin() + a, xd.end());
    Value* g = c.value("scale", nd, ValueKind::kParameter, {0.5, 1.5, false});
    std::vector<Value*> ins = {x, g}, wrt = {x, g};
    if (lc.bias) {
      ins.push_back(c.value("B", nd));
      wrt.push_back(ins.back());
    }
    Node* n = c.node("LayerNormalization", ins, lc.outputs,
                     attrs_of({{"axis", lc.axis}, {"epsilon", 1e-3f}}), 17);
    c.check({n->outputs[0]}, wrt);
  }
}

TEST(GradCheckOps, DecomposedLayerNorm) {
  SCOPED_TRACE(seed_trace(4500, "ReduceMean / Sub / Pow / ReduceMean / Add / Sqrt / Div / Mul / Add"));
  GradCheck c(4500);
  Value* x = c.value("x", {3, 2, 8}, ValueKind::kInput, {-2, 2});
  Value* g = c.value("gamma", {8}, ValueKind::kParameter, {0.5, 1.5, false});
  Value* b = c.value("beta", {8});
  AttrMap last = attrs_of({{"axes", Ints{-1}}, {"keepdims", int64_t{1}}});
  Value* mean = c.op1("ReduceMean", {x}, last, 11);
  Value* d = c.op1("Sub", {x, mean});
  Value* var = c.op1("ReduceMean", {c.op1("Pow", {d, scalar(c, "two", 2.0)})}, last, 11);
  Value* sd = c.op1("Sqrt", {c.op1("Add", {var, scalar(c, "eps", 1e-5)})});
  Value* y = c.op1("Add", {c.op1("Mul", {c.op1("Div", {d, sd}), g}), b});
  c.check({y}, {x, g, b});
}

}  // namespace
}  // namespace pt
