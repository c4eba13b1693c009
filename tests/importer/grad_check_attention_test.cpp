// FusedAttention's gradient (FusedAttentionGrad, which recomputes the probabilities) against central
// differences in double: without a mask, with an additive mask broadcast over heads, with a causal
// fill mask; and the attention pass itself on a spelled-out double graph: it fuses, the fused graph's
// gradients check, and a second reader of the scores keeps it unfused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "importer/fuse.h"
#include "tests/importer/grad_check_util.h"

namespace pt {
namespace {

using gradcheck::attrs_of;
using gradcheck::GradCheck;
using gradcheck::seed_trace;

Value* causal_mask(GradCheck& c, int64_t t) {
  Value* m = c.graph().add_value("causal", DType::kBool, {t, t}, ValueKind::kConstant);
  HostTensor h(DType::kBool, {t, t});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) h.as<bool>()[i * t + j] = j > i;
  m->data = std::make_shared<HostTensor>(std::move(h));
  return m;
}

TEST(GradCheckAttention, FusedAttentionNode) {
  struct Case {
    int64_t mask_kind;
    const char* what;
  };
  uint32_t seed = 7100;
  for (const Case& k : {Case{0, "no mask"}, Case{1, "additive mask [2, 1, 1, 4]"}, Case{2, "causal fill mask"}}) {
    SCOPED_TRACE(seed_trace(seed, std::string("FusedAttention, ") + k.what));
    GradCheck c(seed++);
    const int64_t t = 4;
    Value* q = c.value("q", {2, 2, t, 3}, ValueKind::kParameter, {-1.5, 1.5});
    Value* kt = c.value("kt", {2, 2, 3, t}, ValueKind::kParameter, {-1.5, 1.5});
    Value* v = c.value("v", {2, 2, t, 5});
    std::vector<Value*> ins = {q, kt, v};
    if (k.mask_kind == 1) ins.push_back(c.value("mask", {2, 1, 1, t}, ValueKind::kConstant, {-2, 0}));
    if (k.mask_kind == 2) ins.push_back(causal_mask(c, t));
    Node* n = c.node("FusedAttention", ins, 2, attrs_of({{"scale", 0.6f}, {"mask_kind", k.mask_kind}, {"mask_fill", -1e9f}}), 1);
    ASSERT_EQ(n->outputs[1]->dims, (Dims{2, 2, t}));
    c.check({n->outputs[0]}, {q, kt, v});
  }
}

// softmax(MatMul(q, kt) * 0.5 masked_fill causal) @ v spelled out in double, as the GPT exports it.
struct Spelled {
  Value *q, *kt, *v, *scores, *y;
};
Spelled spelled_attention(GradCheck& c) {
  Spelled s;
  s.q = c.value("q", {2, 4, 3}, ValueKind::kParameter, {-1.5, 1.5});
  s.kt = c.value("kt", {2, 3, 4}, ValueKind::kParameter, {-1.5, 1.5});
  s.v = c.value("v", {2, 4, 2});
  Value* half = c.value("half", {}, ValueKind::kConstant);
  half->data->as<double>()[0] = 0.5;
  Value* fill = c.value("fill", {}, ValueKind::kConstant);
  fill->data->as<double>()[0] = -1e9;
  s.scores = c.op1("Mul", {c.op1("MatMul", {s.q, s.kt}), half});
  Value* masked = c.op1("Where", {causal_mask(c, 4), fill, s.scores});
  s.y = c.op1("MatMul", {c.op1("Softmax", {masked}, attrs_of({{"axis", int64_t{-1}}})), s.v});
  return s;
}

TEST(GradCheckAttention, FusedSpelledOutGraph) {
  SCOPED_TRACE(seed_trace(7200, "MatMul, Mul, Where, Softmax, MatMul fused"));
  GradCheck c(7200);
  Spelled s = spelled_attention(c);
  c.graph().outputs = {s.y};
  ASSERT_EQ(fuse_attention(c.graph()), 1);
  ASSERT_EQ(c.graph().nodes().size(), 1u);
  const Node& f = *c.graph().nodes()[0];
  EXPECT_EQ(f.op_type, "FusedAttention");
  EXPECT_EQ(f.domain, "pipetrain");
  EXPECT_EQ(f.attrs.get_int("mask_kind", 0), 2);
  EXPECT_FLOAT_EQ(f.attrs.get_float("scale", 0), 0.5f);
  EXPECT_EQ(f.outputs[0], s.y);
  c.check({s.y}, {s.q, s.kt, s.v});
}

TEST(GradCheckAttention, ScoresWithAnotherReaderStayUnfused) {
  GradCheck c(7300);
  Spelled s = spelled_attention(c);
  Value* extra = c.op1("ReduceSum", {s.scores}, attrs_of({{"keepdims", int64_t{0}}}));
  c.graph().outputs = {s.y, extra};
  const size_t before = c.graph().nodes().size();
  EXPECT_EQ(fuse_attention(c.graph()), 0);
  EXPECT_EQ(c.graph().nodes().size(), before);
}

// Attention dropout (a training-mode Dropout on the probabilities, fused): at a fixed step the masks
// are fixed, so the gradient is that of a fixed function; ratio 0.3 over [2, 2, 4, 4] probabilities
// drops some of every head's.
TEST(GradCheckAttention, FusedAttentionWithDropout) {
  SCOPED_TRACE(seed_trace(7400, "FusedAttention, dropout 0.3 at step 3"));
  GradCheck c(7400);
  Value* q = c.value("q", {2, 2, 4, 3}, ValueKind::kParameter, {-1.5, 1.5});
  Value* kt = c.value("kt", {2, 2, 3, 4}, ValueKind::kParameter, {-1.5, 1.5});
  Value* v = c.value("v", {2, 2, 4, 5});
  Value* step = c.ints("step", {}, {3}, ValueKind::kConstant);
  Node* n = c.node("FusedAttention", {q, kt, v, nullptr, step}, 2,
                   attrs_of({{"scale", 0.6f}, {"dropout_ratio", 0.3f}, {"dropout_seed", int64_t{99}}}), 1);
  c.check({n->outputs[0]}, {q, kt, v});
}

TEST(GradCheckAttention, SpelledOutDropoutFusesOnlyWhenAllowed) {
  for (bool allow : {true, false}) {
    SCOPED_TRACE(allow ? "allowed" : "not allowed (a CUDA import)");
    GradCheck c(7500);
    Value* q = c.value("q", {2, 4, 3}, ValueKind::kParameter, {-1.5, 1.5});
    Value* kt = c.value("kt", {2, 3, 4}, ValueKind::kParameter, {-1.5, 1.5});
    Value* v = c.value("v", {2, 4, 2});
    Value* step = c.ints("step", {}, {5}, ValueKind::kConstant);
    Value* p = c.op1("Softmax", {c.op1("MatMul", {q, kt})}, attrs_of({{"axis", int64_t{-1}}}));
    // The importer's Dropout (lower_random_ops): (X, step) -> Y, mask.
    Value* dy = c.graph().add_value("dropped", DType::kFloat64, p->dims, ValueKind::kActivation);
    Value* mask = c.graph().add_value("mask", DType::kBool, p->dims, ValueKind::kActivation);
    c.graph().add_node("Dropout", "drop", {p, step}, {dy, mask},
                       attrs_of({{"ratio", 0.25f}, {"_training", int64_t{1}}, {"seed", int64_t{17}}}));
    Value* y = c.op1("MatMul", {dy, v});
    c.graph().outputs = {y};
    ASSERT_EQ(fuse_attention(c.graph(), allow), allow ? 1 : 0);
    if (!allow) continue;
    ASSERT_EQ(c.graph().nodes().size(), 1u);
    const Node& f = *c.graph().nodes()[0];
    EXPECT_EQ(f.op_type, "FusedAttention");
    EXPECT_FLOAT_EQ(f.attrs.get_float("dropout_ratio", 0), 0.25f);
    EXPECT_EQ(f.attrs.get_int("dropout_seed", 0), 17);
    ASSERT_EQ(f.inputs.size(), 5u);
    EXPECT_EQ(f.inputs[3], nullptr);
    EXPECT_EQ(f.inputs[4], step);
    c.check({y}, {q, kt, v});
  }
}

}  // namespace
}  // namespace pt
