// The epilogue pass (importer/fuse_epilogue.cpp) on spelled-out double graphs: it fuses what it
// should (MatMul + Add + Gelu, MatMul + Add, Gemm + Relu, Conv + Relu, BatchNormalization + Relu), the
// fused graph's gradients
// match central differences, and near misses stay unfused: the bias sum read by a second node, a
// bias along another axis, a product that is a graph output, a node the caller keeps (--split-at), a
// tanh-approximated Gelu (the last two of those still fuse the product with its bias where they can).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "importer/fuse.h"
#include "tests/importer/grad_check_util.h"

namespace pt {
namespace {

using gradcheck::attrs_of;
using gradcheck::GradCheck;
using gradcheck::seed_trace;
using Ints = std::vector<int64_t>;

const Node* only_node(GradCheck& c, const std::string& op) {
  for (const auto& n : c.graph().nodes())
    if (n->op_type == op) return n.get();
  return nullptr;
}

TEST(GradCheckEpilogue, MatMulBiasGeluThenMatMulBias) {
  SCOPED_TRACE(seed_trace(7600, "MatMul + Add + Gelu, MatMul + Add"));
  GradCheck c(7600);
  Value* x = c.value("x", {2, 3, 4}, ValueKind::kParameter, {-1.5, 1.5});
  Value* w1 = c.value("w1", {4, 5});
  Value* b1 = c.value("b1", {5});
  Value* w2 = c.value("w2", {5, 3});
  Value* b2 = c.value("b2", {1, 3});
  Value* h = c.op1("Gelu", {c.op1("Add", {c.op1("MatMul", {x, w1}), b1})}, attrs_of({{"approximate", std::string("none")}}), 20);
  Value* y = c.op1("Add", {b2, c.op1("MatMul", {h, w2})});  // the bias first: Add is commutative
  c.graph().outputs = {y};
  ASSERT_EQ(fuse_epilogues(c.graph()), 2);
  ASSERT_EQ(c.graph().nodes().size(), 2u);
  const Node& f = *c.graph().nodes()[0];
  EXPECT_EQ(f.op_type, "FusedMatMul");
  EXPECT_EQ(f.domain, "pipetrain");
  EXPECT_EQ(f.attrs.get_string("activation", ""), "Gelu");
  ASSERT_EQ(f.outputs.size(), 2u);  // Y and the pre-activation GeluGrad reads
  EXPECT_EQ(f.outputs[0], h);
  EXPECT_EQ(f.name, "MatMul_0");  // the product's name
  EXPECT_EQ(c.graph().nodes()[1]->attrs.get_string("activation", ""), "none");
  EXPECT_EQ(c.graph().nodes()[1]->outputs[0], y);
  c.check({y}, {x, w1, b1, w2, b2});
}

TEST(GradCheckEpilogue, GemmReluAndConvRelu) {
  {
    SCOPED_TRACE(seed_trace(7700, "Gemm (transB, C) + Relu"));
    GradCheck c(7700);
    Value* a = c.value("a", {4, 6}, ValueKind::kParameter, gradcheck::kAwayFromZero);
    Value* b = c.value("b", {5, 6});
    Value* bias = c.value("c", {5});
    Value* y = c.op1("Relu", {c.op1("Gemm", {a, b, bias}, attrs_of({{"transB", int64_t{1}}, {"alpha", 0.8f}}))});
    c.graph().outputs = {y};
    ASSERT_EQ(fuse_epilogues(c.graph()), 1);
    ASSERT_NE(only_node(c, "FusedGemm"), nullptr);
    EXPECT_EQ(only_node(c, "FusedGemm")->attrs.get_int("transB", 0), 1);
    c.check({y}, {a, b, bias});
  }
  {
    SCOPED_TRACE(seed_trace(7701, "Conv (pads, bias) + Relu"));
    GradCheck c(7701);
    Value* x = c.value("x", {2, 2, 5, 5});
    Value* w = c.value("w", {3, 2, 3, 3});
    Value* bias = c.value("b", {3});
    Value* y = c.op1("Relu", {c.op1("Conv", {x, w, bias}, attrs_of({{"pads", Ints{1, 1, 1, 1}}}), 11)});
    c.graph().outputs = {y};
    ASSERT_EQ(fuse_epilogues(c.graph()), 1);
    ASSERT_NE(only_node(c, "FusedConv"), nullptr);
    c.check({y}, {x, w, bias});
  }
}

TEST(GradCheckEpilogue, BatchNormRelu) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(seed_trace(7750, std::string("BatchNormalization (") + (training ? "training" : "inference") + ") + Relu"));
    GradCheck c(7750);
    Value* x = c.value("x", {3, 2, 2, 3}, ValueKind::kParameter, {-2, 2});
    Value* scale = c.value("scale", {2}, ValueKind::kParameter, gradcheck::kPositive);
    Value* bias = c.value("bias", {2});
    Value* mean = c.value("mean", {2}, ValueKind::kConstant);
    Value* var = c.value("var", {2}, ValueKind::kConstant, gradcheck::kPositive);
    Node* bn = c.node("BatchNormalization", {x, scale, bias, mean, var}, 1,
                      attrs_of({{"training_mode", static_cast<int64_t>(training)}}), 15);
    Value* y = c.op1("Relu", {bn->outputs[0]});
    c.graph().outputs = {y};
    ASSERT_EQ(fuse_epilogues(c.graph()), 1);
    ASSERT_EQ(c.graph().nodes().size(), 1u);
    EXPECT_EQ(bn->attrs.get_string("_activation", ""), "Relu");
    EXPECT_EQ(bn->outputs[0], y);
    // The BN's old output is orphaned, not left pointing at a node that no longer outputs it (a
    // use-after-free once --precision removed that node: the memory planner read its producer).
    EXPECT_EQ(c.graph().broken_link(), "");
    c.check({y}, {x, scale, bias});
  }
}

TEST(GradCheckEpilogue, NearMissesStayUnfused) {
  struct Case {
    const char* what;
    int variant;
  };
  for (const Case& k : {Case{"the bias sum read twice", 0}, Case{"a bias along the first axis", 1},
                        Case{"the product is a graph output", 2}, Case{"the Add is kept (--split-at)", 3},
                        Case{"tanh-approximated Gelu", 4}}) {
    SCOPED_TRACE(k.what);
    GradCheck c(7800 + static_cast<uint32_t>(k.variant));
    Value* x = c.value("x", {4, 4});
    Value* w = c.value("w", {4, 4});
    Value* bias = c.value("b", k.variant == 1 ? Dims{4, 1} : Dims{4});
    Value* p = c.op1("MatMul", {x, w});
    Value* s = c.op1("Add", {p, bias});
    const std::string gelu_form = k.variant == 4 ? "tanh" : "none";
    Value* y = c.op1("Gelu", {s}, attrs_of({{"approximate", gelu_form}}), 20);
    c.graph().outputs = {y};
    if (k.variant == 0) c.graph().outputs.push_back(c.op1("Neg", {s}));
    if (k.variant == 2) c.graph().outputs.push_back(p);
    const size_t before = c.graph().nodes().size();
    std::set<std::string> keep;
    if (k.variant == 3) keep.insert(s->producer->name);
    const int fused = fuse_epilogues(c.graph(), keep);
    if (k.variant == 0 || k.variant == 4) {  // MatMul + Add fuse; the Gelu stays a node of its own
      EXPECT_EQ(fused, 1);
      EXPECT_EQ(c.graph().nodes().size(), before - 1);
      EXPECT_NE(only_node(c, "Gelu"), nullptr);
    } else {
      EXPECT_EQ(fused, 0);
      EXPECT_EQ(c.graph().nodes().size(), before);
    }
  }
}

}  // namespace
}  // namespace pt
