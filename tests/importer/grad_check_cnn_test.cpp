// Finite-difference checks, in double, of the gradient builders of Conv, the pooling ops, LRN and
// BatchNormalization (training and inference) with their CPU backward kernels; the max-pooling
// subgradient at ties (it must follow the forward's choice, the first maximum); and the shape
// functions' normalisation (auto_pad into pads, ceil_mode extents, BatchNormalization's mode
// by opset).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/importer/grad_check_util.h"

namespace pt {
namespace {

using gradcheck::attrs_of;
using gradcheck::GradCheck;
using gradcheck::seed_trace;
using Ints = std::vector<int64_t>;

// ---- Conv ----------------------------------------------------------------------------------------

TEST(GradCheckCnn, Conv) {
  struct Case {
    const char* label;
    Dims x, w;
    AttrMap attrs;
    bool bias;
  };
  const Case cases[] = {
      {"1-D", {2, 3, 9}, {4, 3, 3}, attrs_of({{"pads", Ints{1, 0}}}), true},
      {"1-D stride 2 dilation 2", {1, 2, 11}, {2, 2, 3}, attrs_of({{"strides", Ints{2}}, {"dilations", Ints{2}}}), false},
      {"2-D pads 1", {2, 3, 5, 5}, {4, 3, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}}), true},
      {"2-D strides, asymmetric pads", {1, 2, 7, 6}, {3, 2, 3, 2},
       attrs_of({{"strides", Ints{2, 3}}, {"pads", Ints{0, 2, 1, 1}}}), true},
      {"2-D dilations", {1, 2, 7, 7}, {2, 2, 3, 2}, attrs_of({{"dilations", Ints{2, 3}}, {"pads", Ints{1, 1, 2, 0}}}), true},
      {"2-D groups 2", {2, 4, 5, 5}, {6, 2, 3, 3}, attrs_of({{"group", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}}), true},
      {"2-D depthwise", {2, 3, 6, 6}, {3, 1, 3, 3},
       attrs_of({{"group", int64_t{3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}), true},
      {"2-D auto_pad SAME_UPPER stride 2", {1, 2, 6, 5}, {3, 2, 2, 3},
       attrs_of({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2, 2}}}), true},
      {"2-D auto_pad SAME_LOWER", {1, 2, 5, 5}, {2, 2, 2, 2}, attrs_of({{"auto_pad", std::string("SAME_LOWER")}}), false},
      {"2-D auto_pad VALID", {1, 2, 6, 5}, {2, 2, 3, 3},
       attrs_of({{"auto_pad", std::string("VALID")}, {"strides", Ints{2, 1}}}), true},
      {"3-D", {1, 2, 4, 4, 3}, {2, 2, 2, 3, 2}, attrs_of({{"pads", Ints{1, 0, 1, 0, 1, 0}}}), true},
      {"2-D one output position, 3x3 over 1x1", {3, 4, 1, 1}, {5, 4, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}}), true},
      {"2-D one output position, stride 2 over 2x2", {2, 3, 2, 2}, {2, 3, 3, 3},
       attrs_of({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}), false},
  };
  uint32_t seed = 5000;
  for (const Case& cs : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("Conv ") + cs.label));
    GradCheck c(seed++);
    Value* x = c.value("X", cs.x, ValueKind::kInput);
    Value* w = c.value("W", cs.w);
    std::vector<Value*> ins = {x, w}, wrt = {x, w};
    if (cs.bias) {
      ins.push_back(c.value("B", {cs.w[0]}));
      wrt.push_back(ins.back());
    }
    Value* y = c.op1("Conv", ins, cs.attrs, 11);
    c.check({y}, wrt);
  }
}

// ---- Pooling -------------------------------------------------------------------------------------

TEST(GradCheckCnn, MaxPool) {
  const std::pair<const char*, AttrMap> cases[] = {
      {"2x2 s2", attrs_of({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})},
      {"3x3 s2 pads 1", attrs_of({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"ceil_mode", attrs_of({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}})},
      {"dilations", attrs_of({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}, {"pads", Ints{1, 0, 0, 1}}})},
      {"SAME_UPPER", attrs_of({{"kernel_shape", Ints{3, 2}}, {"strides", Ints{2, 2}},
                               {"auto_pad", std::string("SAME_UPPER")}})},
  };
  uint32_t seed = 5100;
  for (const auto& [label, at] : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("MaxPool ") + label));
    GradCheck c(seed++);
    Value* x = c.value("X", {2, 2, 7, 6});
    c.check({c.op1("MaxPool", {x}, at, 12)}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(seed, "MaxPool 1-D with Indices output"));
    GradCheck c(seed++);
    Value* x = c.value("X", {2, 3, 9});
    Node* n = c.node("MaxPool", {x}, 2, attrs_of({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}}), 12);
    EXPECT_EQ(n->outputs[1]->dtype, DType::kInt64);
    c.check({n->outputs[0]}, {x});
  }
}

// At a tie the gradient goes to the first maximum of the window (row-major), the element the
// forward returned; the other tied elements get nothing.
TEST(GradCheckCnn, MaxPoolTiesFollowTheForwardChoice) {
  GradCheck c(5150);
  Graph& g = c.graph();
  Value* x = g.add_value("X", DType::kFloat64, {1, 1, 4, 4}, ValueKind::kParameter);
  // Windows (2x2, stride 2): {1, 3 | 3, 1}, {2, 2 | 0, 2}, {5, 5 | 5, 5}, {0, -1 | 0, -1}.
  const std::vector<double> xv = {1, 3, 2, 2, 3, 1, 0, 2, 5, 5, 0, -1, 5, 5, 0, -1};
  x->data = std::make_shared<HostTensor>(HostTensor::from<double>(x->dims, xv));
  Value* y = c.op1("MaxPool", {x}, attrs_of({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}), 12);
  Value* dy = g.add_value("dY", DType::kFloat64, y->dims, ValueKind::kConstant);
  const std::vector<double> dyv = {10, 20, 30, 40};
  dy->data = std::make_shared<HostTensor>(HostTensor::from<double>(dy->dims, dyv));
  auto grads = build_gradients(g, {{y, dy}}, {x});
  ASSERT_TRUE(grads.has_value()) << grads.status().message();
  auto ex = Executor::create(g, DeviceKind::kCpu);
  ASSERT_TRUE(ex.has_value()) << ex.status().message();
  ASSERT_TRUE((*ex)->run().is_ok());
  const HostTensor& yt = (*ex)->tensor(y);
  EXPECT_EQ(yt.as<double>()[0], 3);
  EXPECT_EQ(yt.as<double>()[1], 2);
  EXPECT_EQ(yt.as<double>()[2], 5);
  EXPECT_EQ(yt.as<double>()[3], 0);
  const HostTensor& dx = (*ex)->tensor(grads->at(x));
  std::vector<double> want(16, 0.0);
  want[1] = 10;   // first 3 (row 0), not the 3 below it
  want[2] = 20;   // first 2 of {2, 2, _, 2}
  want[8] = 30;   // first of four 5s
  want[10] = 40;  // first 0 of {0, -1, 0, -1}
  for (int i = 0; i < 16; ++i) EXPECT_EQ(dx.as<double>()[i], want[i]) << "dX element " << i;
}

TEST(GradCheckCnn, AveragePool) {
  const std::pair<const char*, AttrMap> cases[] = {
      {"2x2 s2", attrs_of({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})},
      {"3x3 pads, exclude pad", attrs_of({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"3x3 pads, include pad", attrs_of({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 0, 1, 2}},
                                          {"count_include_pad", int64_t{1}}})},
      {"ceil_mode", attrs_of({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}},
                              {"pads", Ints{1, 1, 0, 0}}, {"count_include_pad", int64_t{1}}})},
      {"SAME_LOWER", attrs_of({{"kernel_shape", Ints{2, 3}}, {"auto_pad", std::string("SAME_LOWER")}})},
  };
  uint32_t seed = 5200;
  for (const auto& [label, at] : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("AveragePool ") + label));
    GradCheck c(seed++);
    Value* x = c.value("X", {2, 2, 7, 6});
    c.check({c.op1("AveragePool", {x}, at, 11)}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(seed, "AveragePool 1-D"));
    GradCheck c(seed++);
    Value* x = c.value("X", {2, 3, 9});
    c.check({c.op1("AveragePool", {x}, attrs_of({{"kernel_shape", Ints{4}}, {"strides", Ints{3}}}), 11)}, {x});
  }
}

TEST(GradCheckCnn, GlobalPools) {
  uint32_t seed = 5300;
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"})
    for (const Dims& xd : {Dims{2, 3, 5}, Dims{2, 3, 4, 5}}) {
      SCOPED_TRACE(seed_trace(seed, std::string(op) + " " + dims_str(xd)));
      GradCheck c(seed++);
      Value* x = c.value("X", xd);
      Value* y = c.op1(op, {x}, {}, 1);
      Dims want = {xd[0], xd[1]};
      want.resize(xd.size(), 1);
      EXPECT_EQ(y->dims, want);
      c.check({y}, {x});
    }
}

// ---- LRN -----------------------------------------------------------------------------------------

TEST(GradCheckCnn, Lrn) {
  uint32_t seed = 5400;
  for (int64_t size : {3, 4, 5}) {
    SCOPED_TRACE(seed_trace(seed, "LRN size " + std::to_string(size)));
    GradCheck c(seed++);
    Value* x = c.value("X", {2, 6, 3, 2}, ValueKind::kParameter, {-2, 2});
    AttrMap at = attrs_of({{"size", size}, {"alpha", 0.5f}, {"beta", 0.75f}, {"bias", 1.5f}});
    c.check({c.op1("LRN", {x}, at, 13)}, {x});
  }
}

// ---- BatchNormalization --------------------------------------------------------------------------

TEST(GradCheckCnn, BatchNormalizationTrainingAndInference) {
  struct Case {
    const char* label;
    int opset;
    size_t n_outputs;
    int64_t training_mode;  // -1: attribute absent
    bool expect_training;
    Dims x;
  };
  const Case cases[] = {
      {"opset 9, 5 outputs (training)", 9, 5, -1, true, {4, 3, 3, 2}},
      {"opset 13, 5 outputs (training)", 13, 5, -1, true, {3, 2, 5}},
      {"opset 13, 1 output (inference)", 13, 1, -1, false, {3, 2, 4, 2}},
      {"opset 15, training_mode 1, 3 outputs", 15, 3, 1, true, {2, 3, 2, 3}},
      {"opset 15, training_mode 1, 1 output", 15, 1, 1, true, {4, 2}},
      {"opset 15, training_mode 0", 15, 1, 0, false, {2, 3, 3}},
      {"opset 7, 5 outputs (training)", 7, 5, -1, true, {2, 2, 3, 3}},
  };
  uint32_t seed = 5500;
  for (const Case& cs : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("BatchNormalization ") + cs.label));
    GradCheck c(seed++);
    const int64_t ch = cs.x[1];
    Value* x = c.value("X", cs.x, ValueKind::kInput, {-1, 2});
    Value* scale = c.value("scale", {ch}, ValueKind::kParameter, {0.5, 1.5});
    Value* bias = c.value("B", {ch});
    Value* mean = c.value("mean", {ch}, ValueKind::kConstant);
    Value* var = c.value("var", {ch}, ValueKind::kConstant, {0.5, 1.5});
    AttrMap at = attrs_of({{"epsilon", 1e-3f}, {"momentum", 0.7f}});
    if (cs.training_mode >= 0) at.set("training_mode", cs.training_mode);
    Node* n = c.node("BatchNormalization", {x, scale, bias, mean, var}, cs.n_outputs, at, cs.opset);
    EXPECT_EQ(n->attrs.get_int("_training", -1), cs.expect_training ? 1 : 0);
    // Y feeds a Mul by itself so that the loss is not linear in Y: the statistics' gradient terms
    // (which cancel for sum(dY * Y) when dY is per-channel constant) are exercised fully.
    Value* y2 = c.op1("Mul", {n->outputs[0], n->outputs[0]});
    c.check({n->outputs[0], y2}, {x, scale, bias});
  }
}

// The running statistics are updated in place by the training forward, with the node's momentum
// and the unbiased batch variance.
TEST(GradCheckCnn, BatchNormalizationUpdatesRunningStatistics) {
  GradCheck c(5600);
  Graph& g = c.graph();
  const std::vector<double> xv = {1, 2, 3, 4, 10, 20, 30, 50};  // [N=4, C=2]: channel 0 = 1, 3, 10, 30
  Value* x = g.add_value("X", DType::kFloat64, {4, 2}, ValueKind::kParameter);
  x->data = std::make_shared<HostTensor>(HostTensor::from<double>(x->dims, xv));
  auto vec = [&](const char* name, std::vector<double> v) {
    Value* p = g.add_value(name, DType::kFloat64, {2}, ValueKind::kConstant);
    p->data = std::make_shared<HostTensor>(HostTensor::from<double>(p->dims, v));
    return p;
  };
  Value* mean = vec("mean", {0, 1});
  Value* var = vec("var", {1, 2});
  Node* n = c.node("BatchNormalization", {x, vec("scale", {1, 1}), vec("B", {0, 0}), mean, var}, 3,
                   attrs_of({{"momentum", 0.5f}, {"training_mode", int64_t{1}}}), 15);
  auto ex = Executor::create(g, DeviceKind::kCpu);
  ASSERT_TRUE(ex.has_value()) << ex.status().message();
  ASSERT_TRUE((*ex)->run().is_ok());
  // channel 0: mean 11, unbiased var ((10^2 + 8^2 + 1^2 + 19^2) / 3 = 526 / 3)
  const double m0 = 11, v0 = (100 + 64 + 1 + 361) / 3.0;
  const double m1 = (2 + 4 + 20 + 50) / 4.0;
  double v1 = 0;
  for (double e : {2.0, 4.0, 20.0, 50.0}) v1 += (e - m1) * (e - m1) / 3;
  for (const Value* v : {mean, n->outputs[1]}) {
    EXPECT_DOUBLE_EQ((*ex)->tensor(v).as<double>()[0], 0.5 * 0 + 0.5 * m0) << v->name;
    EXPECT_DOUBLE_EQ((*ex)->tensor(v).as<double>()[1], 0.5 * 1 + 0.5 * m1) << v->name;
  }
  for (const Value* v : {var, n->outputs[2]}) {
    EXPECT_DOUBLE_EQ((*ex)->tensor(v).as<double>()[0], 0.5 * 1 + 0.5 * v0) << v->name;
    EXPECT_DOUBLE_EQ((*ex)->tensor(v).as<double>()[1], 0.5 * 2 + 0.5 * v1) << v->name;
  }
}

// ---- A small CNN: gradients accumulate through every op of the family ---------------------------

TEST(GradCheckCnn, ConvBnReluPoolChain) {
  const uint32_t seed = 5700;
  SCOPED_TRACE(seed_trace(seed, "Conv -> BN (train) -> Relu -> MaxPool -> Conv (depthwise) -> LRN -> GlobalAveragePool"));
  GradCheck c(seed);
  Value* x = c.value("X", {2, 2, 8, 8}, ValueKind::kInput);
  Value* w1 = c.value("W1", {4, 2, 3, 3});
  Value* b1 = c.value("B1", {4});
  Value* h = c.op1("Conv", {x, w1, b1}, attrs_of({{"pads", Ints{1, 1, 1, 1}}}), 13);
  Value* scale = c.value("scale", {4}, ValueKind::kParameter, {0.5, 1.5});
  Value* beta = c.value("beta", {4});
  Value* mean = c.value("mean", {4}, ValueKind::kConstant);
  Value* var = c.value("var", {4}, ValueKind::kConstant, {0.5, 1.5});
  Node* bn = c.node("BatchNormalization", {h, scale, beta, mean, var}, 5, {}, 13);
  Value* r = c.op1("Relu", {bn->outputs[0]});
  Value* p = c.op1("MaxPool", {r}, attrs_of({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}), 12);
  Value* w2 = c.value("W2", {4, 1, 3, 3});
  Value* q = c.op1("Conv", {p, w2}, attrs_of({{"group", int64_t{4}}, {"auto_pad", std::string("SAME_UPPER")}}), 13);
  Value* l = c.op1("LRN", {q}, attrs_of({{"size", int64_t{3}}}), 13);
  Value* y = c.op1("GlobalAveragePool", {l}, {}, 1);
  c.check({y}, {x, w1, b1, scale, beta, w2}, 40);
}

// ---- Shape functions -----------------------------------------------------------------------------

TEST(ShapesCnn, AutoPadResolvesToExplicitPads) {
  struct Case {
    const char* auto_pad;
    Dims x;
    Ints k, s;
    Ints pads;
    Dims y;
  };
  const Case cases[] = {
      {"SAME_UPPER", {1, 1, 5, 6}, {3, 2}, {2, 2}, {1, 0, 1, 0}, {1, 1, 3, 3}},
      {"SAME_LOWER", {1, 1, 5, 6}, {3, 2}, {2, 2}, {1, 0, 1, 0}, {1, 1, 3, 3}},
      {"SAME_UPPER", {1, 1, 6}, {4}, {1}, {1, 2}, {1, 1, 6}},
      {"SAME_LOWER", {1, 1, 6}, {4}, {1}, {2, 1}, {1, 1, 6}},
      {"VALID", {1, 1, 7, 7}, {3, 3}, {2, 3}, {0, 0, 0, 0}, {1, 1, 3, 2}},
  };
  for (const char* op : {"MaxPool", "AveragePool"})
    for (const Case& cs : cases) {
      SCOPED_TRACE(std::string(op) + " " + cs.auto_pad + " " + dims_str(cs.x));
      GradCheck c(1);
      Value* x = c.value("X", cs.x);
      Node* n = c.node(op, {x}, 1,
                       attrs_of({{"auto_pad", std::string(cs.auto_pad)}, {"kernel_shape", cs.k}, {"strides", cs.s},
                                 {"ceil_mode", int64_t{1}}}),
                       11);
      EXPECT_EQ(n->attrs.get_string("auto_pad", ""), "NOTSET");
      EXPECT_EQ(n->attrs.get_ints("pads"), cs.pads);
      EXPECT_EQ(n->attrs.get_int("ceil_mode", -1), 0);
      EXPECT_EQ(n->outputs[0]->dims, cs.y);
    }
}

TEST(ShapesCnn, CeilModeAndConvShapes) {
  GradCheck c(2);
  Value* x = c.value("X", {1, 1, 6, 6});
  // 6x6, kernel 3, stride 2, ceil: ceil(3 / 2) + 1 = 3; with pads 1 + 1: ceil(5 / 2) + 1 = 4 (the last
  // window starts at 6, inside input + begin pad = 7, so it stays).
  EXPECT_EQ(c.op1("MaxPool", {x}, attrs_of({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}}),
                  12)->dims,
            (Dims{1, 1, 3, 3}));
  EXPECT_EQ(c.op1("MaxPool", {x},
                  attrs_of({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}},
                            {"pads", Ints{1, 1, 1, 1}}}),
                  12)->dims,
            (Dims{1, 1, 4, 4}));
  Value* x2 = c.value("X2", {1, 1, 4, 4});
  // 4x4, kernel 2, stride 3, pads 1 + 1, ceil: ceil(4 / 3) + 1 = 3, but the last window would start
  // at 6 >= 4 + 1, in the end padding: dropped, 2 remain.
  EXPECT_EQ(c.op1("AveragePool", {x2},
                  attrs_of({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{3, 3}}, {"ceil_mode", int64_t{1}},
                            {"pads", Ints{1, 1, 1, 1}}}),
                  11)->dims,
            (Dims{1, 1, 2, 2}));
  Value* cx = c.value("CX", {2, 4, 9, 7});
  Value* cw = c.value("CW", {6, 2, 3, 2});
  Node* conv = c.node("Conv", {cx, cw}, 1, attrs_of({{"group", int64_t{2}}, {"strides", Ints{2, 1}}, {"dilations", Ints{2, 1}}}), 11);
  EXPECT_EQ(conv->outputs[0]->dims, (Dims{2, 6, 3, 6}));
  EXPECT_EQ(conv->attrs.get_ints("kernel_shape"), (Ints{3, 2}));
  EXPECT_EQ(conv->attrs.get_ints("pads"), (Ints{0, 0, 0, 0}));
}

TEST(ShapesCnn, Refusals) {
  GradCheck c(3);
  Value* x = c.value("X", {1, 4, 5, 5});
  Value* w = c.value("W", {2, 3, 3, 3});
  Node* n = c.graph().add_node("Conv", "bad_group", {x, w},
                               {c.graph().add_value("y", DType::kUndefined, {}, ValueKind::kActivation)},
                               attrs_of({{"group", int64_t{1}}}));
  n->since_version = 13;
  Status st = infer_node(*n, "test");
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("group"), std::string::npos) << st.message();
  Value* s = c.value("s", {4});
  Node* bn = c.graph().add_node("BatchNormalization", "bn_spatial0", {x, s, s, s, s},
                                {c.graph().add_value("y2", DType::kUndefined, {}, ValueKind::kActivation)},
                                attrs_of({{"spatial", int64_t{0}}}));
  bn->since_version = 7;
  st = infer_node(*bn, "test");
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
}

}  // namespace
}  // namespace pt
