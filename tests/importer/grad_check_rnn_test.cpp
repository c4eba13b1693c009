// LSTM and GRU after their expansion at import (importer/rnn_expand.cpp): finite differences in
// double of every output (Y, Y_h, Y_c) with respect to X, W, R, B and the initial states, for each
// direction, both layouts and GRU's linear_before_reset 0 and 1; and the refusals of what the
// expansion does not implement, each naming the node and the attribute.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "importer/rnn_expand.h"
#include "tests/importer/grad_check_util.h"

namespace pt {
namespace {

using gradcheck::attrs_of;
using gradcheck::GradCheck;
using gradcheck::seed_trace;

struct RnnCase {
  const char* op;
  const char* direction;
  int64_t layout;
  int64_t linear_before_reset;
  bool bias;
  bool initial_states;
};

// Sequence 3, batch 2, input 3, hidden 2.
void check_rnn(const RnnCase& rc, uint32_t seed) {
  SCOPED_TRACE(seed_trace(seed, std::string(rc.op) + " " + rc.direction + " layout " + std::to_string(rc.layout) + " lbr " +
                                    std::to_string(rc.linear_before_reset)));
  const bool lstm = std::string(rc.op) == "LSTM";
  const int64_t T = 3, B = 2, I = 3, H = 2, G = lstm ? 4 : 3;
  const int64_t D = std::string(rc.direction) == "bidirectional" ? 2 : 1;
  GradCheck c(seed);
  Value* x = c.value("X", rc.layout ? Dims{B, T, I} : Dims{T, B, I});
  Value* w = c.value("W", {D, G * H, I});
  Value* r = c.value("R", {D, G * H, H});
  std::vector<Value*> ins{x, w, r};
  std::vector<Value*> wrt{x, w, r};
  const Dims state = rc.layout ? Dims{B, D, H} : Dims{D, B, H};
  if (rc.bias || rc.initial_states) {
    Value* b = rc.bias ? c.value("B", {D, 2 * G * H}) : nullptr;
    ins.push_back(b);
    if (b) wrt.push_back(b);
  }
  if (rc.initial_states) {
    ins.push_back(nullptr);  // sequence_lens
    Value* h0 = c.value("initial_h", state);
    ins.push_back(h0);
    wrt.push_back(h0);
    if (lstm) {
      Value* c0 = c.value("initial_c", state);
      ins.push_back(c0);
      wrt.push_back(c0);
    }
  }
  AttrMap a = attrs_of({{"hidden_size", H}, {"direction", std::string(rc.direction)}});
  if (rc.layout) a.set("layout", rc.layout);
  if (!lstm) a.set("linear_before_reset", rc.linear_before_reset);
  Node* n = c.node(rc.op, ins, lstm ? 3 : 2, a, 14);
  std::vector<Value*> ys = n->outputs;
  ASSERT_TRUE(expand_recurrent(c.graph(), "test").is_ok());
  for (const auto& up : c.graph().nodes()) ASSERT_FALSE(is_expanded_op(up->op_type));
  c.check(ys, wrt);
}

TEST(GradCheckRnn, LstmDirectionsAndLayouts) {
  const RnnCase cases[] = {
      {"LSTM", "forward", 0, 0, true, true},
      {"LSTM", "reverse", 0, 0, false, false},
      {"LSTM", "bidirectional", 1, 0, true, true},
  };
  uint32_t seed = 7000;
  for (const RnnCase& rc : cases) check_rnn(rc, seed++);
}

TEST(GradCheckRnn, GruDirectionsLayoutsAndLinearBeforeReset) {
  const RnnCase cases[] = {
      {"GRU", "forward", 0, 0, true, true},       {"GRU", "forward", 0, 1, true, false},
      {"GRU", "reverse", 1, 1, false, true},      {"GRU", "bidirectional", 0, 0, false, false},
      {"GRU", "bidirectional", 1, 1, true, true},
  };
  uint32_t seed = 7100;
  for (const RnnCase& rc : cases) check_rnn(rc, seed++);
}

// What the expansion does not implement is refused as unsupported, naming the node and the
// attribute (the CLI turns that into exit 2).
TEST(GradCheckRnn, UnsupportedAttributesAreRefusedByName) {
  struct Refusal {
    const char* attr;
    Attribute value;
  };
  const Refusal refusals[] = {
      {"clip", 1.0f},
      {"direction", std::string("sideways")},
      {"activations", std::vector<std::string>{"Relu", "Tanh", "Tanh"}},
      {"input_forget", int64_t{1}},
      {"activation_alpha", std::vector<float>{0.5f}},
      {"layout", int64_t{2}},
  };
  for (const Refusal& rf : refusals) {
    SCOPED_TRACE(rf.attr);
    Graph g;
    auto val = [&](const std::string& name, Dims d) {
      Value* v = g.add_value(name, DType::kFloat32, d, ValueKind::kParameter);
      v->data = std::make_shared<HostTensor>(DType::kFloat32, d);
      return v;
    };
    Value* y = g.add_value("Y", DType::kUndefined, {}, ValueKind::kActivation);
    AttrMap a;
    a.set(rf.attr, rf.value);
    Node* n = g.add_node("LSTM", "lstm7", {val("X", {3, 2, 4}), val("W", {1, 8, 4}), val("R", {1, 8, 2})}, {y}, a);
    Status st = rnn_shape(*n, "m.onnx: " + n->describe());
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), StatusCode::kUnsupported);
    EXPECT_NE(st.message().find("node 'lstm7' (LSTM)"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(std::string("'") + rf.attr + "'"), std::string::npos) << st.message();
  }
  // sequence_lens shorter than the sequence, and peepholes.
  Graph g;
  auto val = [&](const std::string& name, Dims d, DType dt = DType::kFloat32) {
    Value* v = g.add_value(name, dt, d, ValueKind::kConstant);
    v->data = std::make_shared<HostTensor>(dt, d);
    return v;
  };
  Value* lens = val("lens", {2}, DType::kInt32);
  lens->data->as<int32_t>()[0] = 3;
  lens->data->as<int32_t>()[1] = 2;
  Value* y = g.add_value("Y", DType::kUndefined, {}, ValueKind::kActivation);
  Node* n = g.add_node("GRU", "gru3", {val("X", {3, 2, 4}), val("W", {1, 6, 4}), val("R", {1, 6, 2}), nullptr, lens}, {y}, {});
  Status st = rnn_shape(*n, n->describe());
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("'sequence_lens'"), std::string::npos) << st.message();
  lens->data->as<int32_t>()[1] = 3;
  EXPECT_TRUE(rnn_shape(*n, n->describe()).is_ok());
  Value* y2 = g.add_value("Y2", DType::kUndefined, {}, ValueKind::kActivation);
  Node* p = g.add_node(
      "LSTM", "lstm_p",
      {val("X2", {3, 2, 4}), val("W2", {1, 8, 4}), val("R2", {1, 8, 2}), nullptr, nullptr, nullptr, nullptr, val("P", {1, 6})},
      {y2}, {});
  st = rnn_shape(*p, p->describe());
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("'P'"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace pt
