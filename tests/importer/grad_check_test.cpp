// Finite-difference checks, in double, of every gradient builder (importer/grad/) together with the
// CPU backward kernels: L = sum(dY * Y) for a random seed dY, analytic dL/dX from
// build_gradients + the executor, numeric dL/dX by central differences (eps 1e-6). Broadcasting, transposes,
// opset-dependent softmax axes, gradient accumulation and pruning are covered.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "importer/shape_infer.h"
#include "importer/training.h"
#include "runtime/exec/executor.h"
#include "tests/importer/grad_check_util.h"

namespace pt {
namespace {

using namespace gradcheck;

// ---- Gemm ----------------------------------------------------------------------------------------

TEST(GradCheck, GemmTransposes) {
  const int64_t m = 3, k = 4, n = 5;
  for (int64_t ta = 0; ta < 2; ++ta)
    for (int64_t tb = 0; tb < 2; ++tb) {
      const uint32_t seed = 100 + 2 * ta + tb;
      SCOPED_TRACE(seed_trace(seed, "Gemm transA=" + std::to_string(ta) + " transB=" + std::to_string(tb)));
      GradCheck c(seed);
      Value* a = c.value("A", ta ? Dims{k, m} : Dims{m, k});
      Value* b = c.value("B", tb ? Dims{n, k} : Dims{k, n});
      Value* bias = c.value("C", {n});
      AttrMap at = attrs_of({{"transA", ta}, {"transB", tb}, {"alpha", 0.75f}, {"beta", 1.5f}});
      Value* y = c.op1("Gemm", {a, b, bias}, at);
      ASSERT_EQ(y->dims, (Dims{m, n}));
      c.check({y}, {a, b, bias});
    }
}

TEST(GradCheck, GemmBiasShapes) {
  const int64_t m = 3, k = 4, n = 5;
  struct BiasCase {
    const char* label;
    bool present;
    Dims dims;
    float alpha, beta;
  };
  const BiasCase cases[] = {
      {"C [N]", true, {n}, 1.0f, 1.0f},      {"C [M, 1]", true, {m, 1}, 1.0f, 0.5f},
      {"C [M, N]", true, {m, n}, 2.0f, 1.0f}, {"C scalar", true, {}, 0.5f, 3.0f},
      {"C [1]", true, {1}, 1.0f, 2.0f},      {"C [1, N]", true, {1, n}, 1.0f, -1.0f},
      {"C [1, 1]", true, {1, 1}, 0.5f, 0.5f}, {"no C", false, {}, 1.5f, 1.0f},
  };
  uint32_t seed = 200;
  for (const BiasCase& bc : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("Gemm ") + bc.label));
    GradCheck c(seed++);
    Value* a = c.value("A", {m, k});
    Value* b = c.value("B", {n, k});
    std::vector<Value*> ins = {a, b}, wrt = {a, b};
    if (bc.present) {
      ins.push_back(c.value("C", bc.dims));
      wrt.push_back(ins.back());
    }
    Value* y = c.op1("Gemm", ins, attrs_of({{"transB", int64_t{1}}, {"alpha", bc.alpha}, {"beta", bc.beta}}));
    c.check({y}, wrt);
  }
}

// ---- MatMul --------------------------------------------------------------------------------------

TEST(GradCheck, MatMulShapes) {
  const std::pair<Dims, Dims> cases[] = {
      {{3, 4}, {4, 5}},       {{4}, {4, 5}},          {{3, 4}, {4}},       {{4}, {4}},
      {{2, 3, 4}, {4, 5}},    {{2, 1, 3, 4}, {3, 4, 5}}, {{3, 4}, {2, 4, 5}}, {{2, 3, 4}, {2, 4, 5}},
      {{2, 3, 4}, {4}},       {{4}, {2, 4, 5}},
  };
  uint32_t seed = 300;
  for (const auto& [ad, bd] : cases) {
    SCOPED_TRACE(seed_trace(seed, "MatMul " + dims_str(ad) + " @ " + dims_str(bd)));
    GradCheck c(seed++);
    Value* a = c.value("A", ad);
    Value* b = c.value("B", bd);
    Value* y = c.op1("MatMul", {a, b});
    c.check({y}, {a, b});
  }
}

// ---- Elementwise binary with broadcasting --------------------------------------------------------

TEST(GradCheck, BinaryBroadcasting) {
  const std::pair<Dims, Dims> shapes[] = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{4}, {2, 3, 4}}, {{2, 1, 4}, {3, 1}},
      {{}, {2, 3}},           {{2, 3}, {}},     {{3, 1}, {1, 4}},
  };
  uint32_t seed = 400;
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    for (const auto& [ad, bd] : shapes) {
      SCOPED_TRACE(seed_trace(seed, std::string(op) + " " + dims_str(ad) + " , " + dims_str(bd)));
      GradCheck c(seed++);
      Value* a = c.value("A", ad);
      Value* b = c.value("B", bd, ValueKind::kParameter, std::string(op) == "Div" ? kAwayFromZero : Range{});
      Value* y = c.op1(op, {a, b});
      c.check({y}, {a, b});
    }
}

TEST(GradCheck, BinarySameValueTwice) {
  uint32_t seed = 450;
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    SCOPED_TRACE(seed_trace(seed, std::string(op) + "(x, x)"));
    GradCheck c(seed++);
    Value* x = c.value("x", {2, 3}, ValueKind::kParameter, kAwayFromZero);
    Value* y = c.op1(op, {x, x});
    c.check({y}, {x});
  }
}

// ---- Elementwise unary ---------------------------------------------------------------------------

TEST(GradCheck, Unary) {
  const std::pair<const char*, Range> cases[] = {
      {"Relu", kAwayFromZero}, {"Sigmoid", {-3, 3}}, {"Tanh", {-2, 2}}, {"Neg", {}},
      {"Exp", {-1, 1}},        {"Log", kPositive},   {"Sqrt", kPositive}, {"Identity", {}},
  };
  uint32_t seed = 500;
  for (const auto& [op, range] : cases) {
    SCOPED_TRACE(seed_trace(seed, op));
    GradCheck c(seed++);
    Value* x = c.value("x", {2, 3, 4}, ValueKind::kParameter, range);
    Value* y = c.op1(op, {x});
    c.check({y}, {x});
  }
}

// ---- Softmax / LogSoftmax ------------------------------------------------------------------------

TEST(GradCheck, SoftmaxAxesAndOpsets) {
  uint32_t seed = 600;
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (int opset : {11, 13})
      for (int64_t axis : {int64_t{1}, int64_t{-1}, int64_t{0}, int64_t{99}}) {  // 99: attribute absent
        const bool has_axis = axis != 99;
        SCOPED_TRACE(seed_trace(seed, std::string(op) + " opset " + std::to_string(opset) + " axis " +
                                          (has_axis ? std::to_string(axis) : "default")));
        GradCheck c(seed++);
        Value* x = c.value("x", {2, 3, 4}, ValueKind::kParameter, {-2, 2});
        AttrMap at;
        if (has_axis) at.set("axis", axis);
        Node* n = c.node(op, {x}, 1, at, opset);
        EXPECT_EQ(n->attrs.get_int("_coerce2d", -1), opset < 13 ? 1 : 0);
        c.check({n->outputs[0]}, {x});
      }
}

// ---- Shape-only ops ------------------------------------------------------------------------------

TEST(GradCheck, Reshape) {
  const std::vector<int64_t> shapes[] = {{4, -1}, {0, -1}, {24}, {2, 2, 3, 2}};
  uint32_t seed = 700;
  for (const auto& s : shapes) {
    SCOPED_TRACE(seed_trace(seed, "Reshape to " + dims_str(Dims(s))));
    GradCheck c(seed++);
    Value* x = c.value("x", {2, 3, 4});
    Value* shape = c.ints("shape", {static_cast<int64_t>(s.size())}, s, ValueKind::kConstant);
    Value* y = c.op1("Reshape", {x, shape});
    EXPECT_EQ(y->size(), 24);
    c.check({y}, {x});
  }
}

TEST(GradCheck, Flatten) {
  uint32_t seed = 750;
  for (int64_t axis : {0, 1, 2, 3, -1}) {
    SCOPED_TRACE(seed_trace(seed, "Flatten axis " + std::to_string(axis)));
    GradCheck c(seed++);
    Value* x = c.value("x", {2, 3, 4});
    Value* y = c.op1("Flatten", {x}, attrs_of({{"axis", axis}}));
    c.check({y}, {x});
  }
}

TEST(GradCheck, Transpose) {
  const std::vector<int64_t> perms[] = {{2, 0, 1}, {1, 2, 0}, {0, 2, 1}, {}};
  uint32_t seed = 800;
  for (const auto& perm : perms) {
    SCOPED_TRACE(seed_trace(seed, "Transpose perm " + (perm.empty() ? std::string("default") : dims_str(Dims(perm)))));
    GradCheck c(seed++);
    Value* x = c.value("x", {2, 3, 4});
    AttrMap at;
    if (!perm.empty()) at.set("perm", perm);
    Value* y = c.op1("Transpose", {x}, at);
    c.check({y}, {x});
  }
}

// ---- Chains: accumulation over several consumers -------------------------------------------------

TEST(GradCheck, GemmReluGemmWithResidual) {
  const uint32_t seed = 900;
  SCOPED_TRACE(seed_trace(seed, "x -> Gemm -> Relu -> Gemm -> Add(., relu) -> Tanh"));
  GradCheck c(seed);
  Value* x = c.value("x", {4, 3}, ValueKind::kInput);
  Value* w1 = c.value("W1", {5, 3});
  Value* b1 = c.value("b1", {5});
  Value* w2 = c.value("W2", {5, 5});
  Value* b2 = c.value("b2", {5});
  Value* h = c.op1("Gemm", {x, w1, b1}, attrs_of({{"transB", int64_t{1}}}));
  Value* r = c.op1("Relu", {h});
  Value* y1 = c.op1("Gemm", {r, w2, b2});
  Value* s = c.op1("Add", {y1, r});  // r feeds two consumers
  Value* y = c.op1("Tanh", {s});
  c.check({y}, {x, w1, b1, w2, b2});
}

TEST(GradCheck, TwoSeedsAndSharedInput) {
  const uint32_t seed = 901;
  SCOPED_TRACE(seed_trace(seed, "y1 = x @ W, y2 = Sigmoid(x) * x, both seeded"));
  GradCheck c(seed);
  Value* x = c.value("x", {3, 4});
  Value* w = c.value("W", {4, 2});
  Value* y1 = c.op1("MatMul", {x, w});
  Value* y2 = c.op1("Mul", {c.op1("Sigmoid", {x}), x});
  c.check({y1, y2}, {x, w});
}

// ---- Losses --------------------------------------------------------------------------------------

struct SceCase {
  const char* label;
  Dims scores;
  std::vector<int64_t> labels;
  const char* reduction;
  bool weights;
  bool ignore;
  int64_t ignore_index;
};

TEST(GradCheck, SoftmaxCrossEntropyLoss) {
  const SceCase cases[] = {
      {"mean", {3, 4}, {0, 3, 1}, "mean", false, false, 0},
      {"sum", {3, 4}, {2, 2, 0}, "sum", false, false, 0},
      {"none", {3, 4}, {1, 0, 3}, "none", false, false, 0},
      {"mean, weights", {3, 4}, {0, 3, 1}, "mean", true, false, 0},
      {"sum, weights", {3, 4}, {0, 3, 1}, "sum", true, false, 0},
      {"none, weights", {3, 4}, {2, 1, 1}, "none", true, false, 0},
      {"mean, ignore_index", {4, 3}, {0, 2, 1, 2}, "mean", false, true, 2},
      {"mean, weights, ignore_index", {4, 3}, {0, 2, 1, 2}, "mean", true, true, 1},
      {"none, ignore_index", {4, 3}, {0, 2, 1, 2}, "none", false, true, 0},
      {"sum, negative ignore_index", {4, 3}, {-1, 2, 1, 0}, "sum", false, true, -1},
      {"NCd mean, weights", {2, 3, 2}, {0, 2, 1, 1}, "mean", true, false, 0},
      {"NCd none, ignore_index", {2, 3, 2}, {0, 2, 1, 2}, "none", false, true, 2},
  };
  uint32_t seed = 1000;
  for (const SceCase& sc : cases) {
    SCOPED_TRACE(seed_trace(seed, std::string("SoftmaxCrossEntropyLoss ") + sc.label));
    GradCheck c(seed++);
    Value* scores = c.value("scores", sc.scores, ValueKind::kParameter, {-2, 2});
    Dims ld = sc.scores;
    ld.erase(ld.begin() + 1);
    Value* labels = c.ints("labels", ld, sc.labels, ValueKind::kInput);
    std::vector<Value*> ins = {scores, labels};
    if (sc.weights) ins.push_back(c.value("weights", {sc.scores[1]}, ValueKind::kConstant, kPositive));
    AttrMap at = attrs_of({{"reduction", std::string(sc.reduction)}});
    if (sc.ignore) at.set("ignore_index", sc.ignore_index);
    Node* n = c.node("SoftmaxCrossEntropyLoss", ins, 2, at);
    EXPECT_EQ(n->outputs[0]->dims, std::string(sc.reduction) == "none" ? ld : Dims{});
    EXPECT_EQ(n->outputs[1]->dims, sc.scores);
    c.check({n->outputs[0]}, {scores});  // L only through the loss, not log_prob
  }
}

TEST(GradCheck, MSELoss) {
  uint32_t seed = 1100;
  for (const char* red : {"mean", "sum"}) {
    SCOPED_TRACE(seed_trace(seed, std::string("MSELoss ") + red));
    GradCheck c(seed++);
    Value* pred = c.value("pred", {3, 4});
    Value* target = c.value("target", {3, 4}, ValueKind::kInput);
    Value* y = c.op1("MSELoss", {pred, target}, attrs_of({{"reduction", std::string(red)}}));
    EXPECT_TRUE(y->dims.empty());
    c.check({y}, {pred});
  }
}

TEST(GradCheck, LossAfterModel) {
  const uint32_t seed = 1150;
  SCOPED_TRACE(seed_trace(seed, "Gemm -> LogSoftmax (opset 11) -> Identity -> SoftmaxCrossEntropyLoss"));
  GradCheck c(seed);
  Value* x = c.value("x", {4, 3}, ValueKind::kInput);
  Value* w = c.value("W", {3, 5});
  Value* b = c.value("b", {1, 5});
  Value* logits = c.op1("Gemm", {x, w, b});
  Value* lsm = c.op1("LogSoftmax", {logits}, {}, 11);
  Value* id = c.op1("Identity", {lsm});
  Value* labels = c.ints("labels", {4}, {4, 0, 2, 1}, ValueKind::kInput);
  Node* n = c.node("SoftmaxCrossEntropyLoss", {id, labels}, 2, attrs_of({{"reduction", std::string("mean")}}));
  c.check({n->outputs[0]}, {x, w, b});
}

// ---- Large tensors: the kernels' multi-threaded paths (above kParallelThreshold elements) ------

TEST(GradCheck, LargeTensorsSampled) {
  constexpr int64_t kSampled = 24;
  uint32_t seed = 1300;
  {
    SCOPED_TRACE(seed_trace(seed, "Add [64, 640] + [640] (column sums)"));
    GradCheck c(seed++);
    Value* a = c.value("A", {64, 640});
    Value* b = c.value("B", {640});
    c.check({c.op1("Add", {a, b})}, {a, b}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "Mul [640, 64] * [640, 1] (row sums)"));
    GradCheck c(seed++);
    Value* a = c.value("A", {640, 64});
    Value* b = c.value("B", {640, 1});
    c.check({c.op1("Mul", {a, b})}, {a, b}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "Div [8, 1, 80, 64] / [5, 1, 64] (general reduction)"));
    GradCheck c(seed++);
    Value* a = c.value("A", {8, 1, 80, 64});
    Value* b = c.value("B", {5, 1, 64}, ValueKind::kParameter, kAwayFromZero);
    c.check({c.op1("Div", {a, b})}, {a, b}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "Gemm [200, 8] x [8, 200] + [200] -> Sigmoid"));
    GradCheck c(seed++);
    Value* a = c.value("A", {200, 8});
    Value* b = c.value("B", {8, 200});
    Value* bias = c.value("C", {200});
    Value* y = c.op1("Sigmoid", {c.op1("Gemm", {a, b, bias}, attrs_of({{"alpha", 0.5f}}))});
    c.check({y}, {a, b, bias}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "Relu, Tanh, Exp on [200, 200]"));
    GradCheck c(seed++);
    Value* x = c.value("x", {200, 200}, ValueKind::kParameter, kAwayFromZero);
    Value* y = c.op1("Exp", {c.op1("Tanh", {c.op1("Relu", {x})})});
    c.check({y}, {x}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "Transpose [40, 30, 40] perm [2, 0, 1]"));
    GradCheck c(seed++);
    Value* x = c.value("x", {40, 30, 40});
    Value* y = c.op1("Transpose", {x}, attrs_of({{"perm", std::vector<int64_t>{2, 0, 1}}}));
    c.check({y}, {x}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "Softmax and LogSoftmax [4, 100, 100] axis 1"));
    GradCheck c(seed++);
    Value* x = c.value("x", {4, 100, 100}, ValueKind::kParameter, {-2, 2});
    Value* y1 = c.op1("Softmax", {x}, attrs_of({{"axis", int64_t{1}}}));
    Value* y2 = c.op1("LogSoftmax", {x}, attrs_of({{"axis", int64_t{1}}}), 11);
    c.check({y1, y2}, {x}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "MatMul [4, 100, 90] @ [90, 100]"));
    GradCheck c(seed++);
    Value* a = c.value("A", {4, 100, 90});
    Value* b = c.value("B", {90, 100});
    c.check({c.op1("MatMul", {a, b})}, {a, b}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "SoftmaxCrossEntropyLoss [400, 100] mean, weights, ignore_index"));
    GradCheck c(seed++);
    Value* scores = c.value("scores", {400, 100}, ValueKind::kParameter, {-2, 2});
    std::vector<int64_t> lv(400);
    for (int64_t i = 0; i < 400; ++i) lv[i] = (i * 37) % 100;
    Value* labels = c.ints("labels", {400}, lv, ValueKind::kInput);
    Value* w = c.value("weights", {100}, ValueKind::kConstant, kPositive);
    AttrMap at = attrs_of({{"reduction", std::string("mean")}, {"ignore_index", int64_t{74}}});
    Node* n = c.node("SoftmaxCrossEntropyLoss", {scores, labels, w}, 2, at);
    c.check({n->outputs[0]}, {scores}, kSampled);
  }
  {
    SCOPED_TRACE(seed_trace(seed, "MSELoss [200, 200] mean"));
    GradCheck c(seed++);
    Value* pred = c.value("pred", {200, 200});
    Value* target = c.value("target", {200, 200}, ValueKind::kInput);
    c.check({c.op1("MSELoss", {pred, target}, attrs_of({{"reduction", std::string("mean")}}))}, {pred}, kSampled);
  }
}

// ---- Pruning -------------------------------------------------------------------------------------

TEST(GradPruning, NoGradientForDataInput) {
  const uint32_t seed = 1200;
  SCOPED_TRACE(seed_trace(seed, "y = Gemm(x, W, b), wrt {W, b}"));
  GradCheck c(seed);
  Graph& g = c.graph();
  Value* x = c.value("x", {4, 3}, ValueKind::kInput);
  Value* w = c.value("W", {3, 5});
  Value* b = c.value("b", {5});
  Node* gemm = c.node("Gemm", {x, w, b});
  Value* y = gemm->outputs[0];
  Value* seed_v = c.value("dY", y->dims, ValueKind::kConstant);
  const size_t forward_nodes = g.nodes().size();
  auto grads = build_gradients(g, {{y, seed_v}}, {w, b});
  ASSERT_TRUE(grads.has_value()) << grads.status().message();
  EXPECT_EQ(grads->count(x), 0u);
  ASSERT_EQ(grads->count(w), 1u);
  ASSERT_EQ(grads->count(b), 1u);

  std::vector<const Node*> backward;
  for (size_t i = forward_nodes; i < g.nodes().size(); ++i) backward.push_back(g.nodes()[i].get());
  // dW = x^T dY (one Gemm) and db = sum over rows of dY (one ReduceSumToShape); dx = dY W^T is
  // not needed and must not be built.
  EXPECT_EQ(backward.size(), 2u);
  for (const Node* n : backward) {
    EXPECT_EQ(n->phase, Phase::kBackward) << n->describe();
    EXPECT_EQ(n->forward, gemm) << n->describe();
    for (const Value* in : n->inputs) EXPECT_NE(in, w) << n->describe() << " reads W: it computes dx";
    for (const Value* out : n->outputs) EXPECT_NE(out->dims, x->dims) << n->describe() << " has dx's shape";
  }
  // The same holds through a chain: nothing upstream of a parameter-free input is built.
  c.check({y}, {w, b});
}

TEST(GradPruning, UnreachedValueHasNoGradient) {
  GradCheck c(1201);
  Value* x = c.value("x", {2, 3});
  Value* unused = c.value("unused", {2, 3});
  Value* y = c.op1("Relu", {x});
  Value* z = c.op1("Neg", {unused});
  (void)z;
  Value* seed_v = c.value("dY", y->dims, ValueKind::kConstant);
  const size_t forward_nodes = c.graph().nodes().size();
  auto grads = build_gradients(c.graph(), {{y, seed_v}}, {x, unused});
  ASSERT_TRUE(grads.has_value()) << grads.status().message();
  EXPECT_EQ(grads->count(x), 1u);
  EXPECT_EQ(grads->count(unused), 0u);
  EXPECT_EQ(c.graph().nodes().size() - forward_nodes, 1u);  // one ReluGrad
}

}  // namespace
}  // namespace pt
