// The Executor's memory plan: no two values live at the same time share bytes, values the caller
// keeps (and inputs, parameters, state, outputs) are never shared, and training with the plan is
// bit for bit training without it (a small CNN with BatchNorm and a one-position Conv); the digits
// MLP's training graph plans without aliases.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "importer/importer.h"
#include "importer/shape_infer.h"
#include "importer/training.h"
#include "runtime/executor.h"

namespace pt {
namespace {

using Ints = std::vector<int64_t>;

// Every pair of planned values whose lifetimes overlap occupies disjoint bytes; lifetimes cover
// the producer and every consumer; kept values are not planned.
void expect_no_live_aliases(const Graph& g, const std::vector<const Node*>& nodes, const MemoryPlan& p,
                            const std::vector<const Value*>& keep) {
  std::vector<int> pos(g.nodes().size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i]->id] = static_cast<int>(i);
  std::vector<const Value*> planned;
  for (const auto& v : g.values())
    if (p.planned(v.get())) planned.push_back(v.get());
  EXPECT_EQ(planned.size(), p.planned_values);
  for (const Value* v : planned) {
    ASSERT_NE(v->producer, nullptr) << v->name;
    EXPECT_EQ(p.first[v->id], pos[v->producer->id]) << v->name;
    for (const Node* c : v->consumers) EXPECT_LE(pos[c->id], p.last[v->id]) << v->name;
    EXPECT_EQ(v->kind, ValueKind::kActivation) << v->name;
    EXPECT_EQ(p.offset[v->id] % static_cast<int64_t>(kPlanAlignment), 0) << v->name;
    EXPECT_LE(static_cast<size_t>(p.offset[v->id]) + v->bytes(), p.arena_bytes) << v->name;
  }
  for (const Value* k : keep) EXPECT_FALSE(p.planned(k)) << k->name;
  for (const Value* k : g.inputs) EXPECT_FALSE(p.planned(k)) << k->name;
  for (const Value* k : g.outputs) EXPECT_FALSE(p.planned(k)) << k->name;
  for (size_t i = 0; i < planned.size(); ++i)
    for (size_t j = i + 1; j < planned.size(); ++j) {
      const Value* a = planned[i];
      const Value* b = planned[j];
      const bool live_together = p.first[a->id] <= p.last[b->id] && p.first[b->id] <= p.last[a->id];
      if (!live_together) continue;
      const int64_t a0 = p.offset[a->id], a1 = a0 + static_cast<int64_t>(a->bytes());
      const int64_t b0 = p.offset[b->id], b1 = b0 + static_cast<int64_t>(b->bytes());
      EXPECT_TRUE(a1 <= b0 || b1 <= a0) << a->name << " [" << a0 << ", " << a1 << ") and " << b->name << " [" << b0
                                        << ", " << b1 << ") are live together";
    }
}

// A small float32 CNN: Conv-BN-Relu-MaxPool, a 3x3 Conv over a 1x1 map (one output position),
// a residual Add, Flatten, Gemm; then its training graph.
struct Cnn {
  Graph g;
  std::unique_ptr<TrainingGraph> tg;
  std::mt19937 rng{11};

  Value* param(const std::string& name, Dims d, ValueKind kind = ValueKind::kParameter, float lo = -0.5f,
               float hi = 0.5f) {
    Value* v = g.add_value(name, DType::kFloat32, d, kind);
    HostTensor t(DType::kFloat32, d);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < t.size(); ++i) t.as<float>()[i] = u(rng);
    v->data = std::make_shared<HostTensor>(std::move(t));
    v->from_initializer = true;
    return v;
  }
  Value* op(const std::string& type, std::vector<Value*> ins, AttrMap attrs = {}) {
    const std::string name = type + "_" + std::to_string(g.nodes().size());
    Value* out = g.add_value(name + "/out", DType::kUndefined, {}, ValueKind::kActivation);
    Node* n = g.add_node(type, name, std::move(ins), {out}, std::move(attrs));
    n->since_version = 13;
    Status st = infer_node(*n, "test");
    EXPECT_TRUE(st.is_ok()) << st.message();
    return out;
  }

  Cnn() {
    Value* x = g.add_value("x", DType::kFloat32, {4, 3, 4, 4}, ValueKind::kInput);
    g.inputs.push_back(x);
    AttrMap pad1;
    pad1.set("pads", Ints{1, 1, 1, 1});
    Value* c1 = op("Conv", {x, param("w1", {8, 3, 3, 3}), param("b1", {8})}, pad1);
    AttrMap bn;
    bn.set("_training", int64_t{1});
    Value* b = op("BatchNormalization", {c1, param("scale", {8}, ValueKind::kParameter, 0.5f, 1.5f), param("bias", {8}),
                                         param("mean", {8}, ValueKind::kState, 0.f, 0.f),
                                         param("var", {8}, ValueKind::kState, 1.f, 1.f)},
                  bn);
    Value* r = op("Relu", {b});
    AttrMap pool;
    pool.set("kernel_shape", Ints{2, 2});
    pool.set("strides", Ints{4, 4});
    Value* p = op("MaxPool", {r}, pool);  // [4, 8, 1, 1]
    Value* c2 = op("Conv", {p, param("w2", {8, 8, 3, 3})}, pad1);
    Value* s = op("Add", {c2, p});
    Value* f = op("Flatten", {op("Relu", {s})});
    AttrMap gemm;
    gemm.set("transB", int64_t{1});
    Value* y = op("Gemm", {f, param("wf", {5, 8}), param("bf", {5})}, gemm);
    g.outputs.push_back(y);
    auto t = build_training_graph(g, LossKind::kCrossEntropy, SgdOptions{0.9f, 1e-4f});
    EXPECT_TRUE(t) << t.status().message();
    if (t) tg = std::make_unique<TrainingGraph>(std::move(*t));
  }
};

std::vector<const Node*> all_nodes(const Graph& g) {
  std::vector<const Node*> out;
  for (const auto& n : g.nodes()) out.push_back(n.get());
  return out;
}

TEST(MemoryPlan, NeverAliasesLiveValuesAndSharesSomething) {
  Cnn m;
  ASSERT_TRUE(m.tg);
  const std::vector<const Value*> keep = {m.tg->loss.loss};
  const MemoryPlan p = plan_memory(m.g, all_nodes(m.g), keep);
  expect_no_live_aliases(m.g, all_nodes(m.g), p, keep);
  EXPECT_GT(p.planned_values, 10u);
  EXPECT_LT(p.arena_bytes, p.planned_bytes);  // something is shared
  // Gradients are read by the update nodes of the same list: they may be planned (their lifetime
  // reaches the SGD node, checked above); parameters and momentum never are.
  for (const auto& [param, grad] : m.tg->grads) EXPECT_FALSE(p.planned(param)) << param->name;
  for (const auto& [param, v] : m.tg->momentum) EXPECT_FALSE(p.planned(v)) << v->name;
}

TEST(MemoryPlan, KeepsValuesReadOutsideTheNodeList) {
  Cnn m;
  ASSERT_TRUE(m.tg);
  // The forward nodes alone, as a pipeline stage holding the forward would run them: values the
  // backward reads are consumed outside the list and must keep their own buffers.
  std::vector<const Node*> fwd;
  for (const auto& n : m.g.nodes())
    if (n->phase == Phase::kForward) fwd.push_back(n.get());
  const MemoryPlan p = plan_memory(m.g, fwd, {});
  expect_no_live_aliases(m.g, fwd, p, {});
  for (const auto& v : m.g.values()) {
    if (!p.planned(v.get())) continue;
    for (const Node* c : v->consumers) EXPECT_EQ(c->phase, Phase::kForward) << v->name << " read by " << c->name;
  }
}

TEST(MemoryPlan, PlannedTrainingIsBitIdentical) {
  Cnn a, b;
  ASSERT_TRUE(a.tg && b.tg);
  auto ea = Executor::create(a.g, DeviceKind::kCpu);
  auto eb = Executor::create(b.g, DeviceKind::kCpu, {}, ExecutorOptions{true, {b.tg->loss.loss}});
  ASSERT_TRUE(ea && eb);
  EXPECT_GT((*eb)->plan().planned_values, 0u);
  for (Executor* e : {ea->get(), eb->get()}) {
    const Graph& g = e == ea->get() ? a.g : b.g;
    const TrainingGraph& tg = e == ea->get() ? *a.tg : *b.tg;
    e->tensor(tg.lr).as<float>()[0] = 0.05f;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      HostTensor& x = e->tensor(g.inputs[0]);
      for (int64_t i = 0; i < x.size(); ++i) x.as<float>()[i] = nd(rng);
      HostTensor& y = e->tensor(tg.loss.labels);
      for (int64_t i = 0; i < y.size(); ++i) y.as<int64_t>()[i] = (i + step) % 5;
      if (g.rng_step) e->tensor(g.rng_step).as<int64_t>()[0] = step + 1;
      ASSERT_TRUE(e->run().is_ok());
    }
  }
  EXPECT_EQ(std::memcmp((*ea)->tensor(a.tg->loss.loss).data(), (*eb)->tensor(b.tg->loss.loss).data(), sizeof(float)), 0);
  for (size_t i = 0; i < a.tg->params.size(); ++i) {
    const HostTensor& pa = (*ea)->tensor(a.tg->params[i]);
    const HostTensor& pb = (*eb)->tensor(b.tg->params[i]);
    ASSERT_EQ(pa.bytes(), pb.bytes());
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pa.bytes()), 0) << a.tg->params[i]->name;
  }
}

TEST(MemoryPlan, PlannedValueIsNotReadableAsTensor) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Cnn m;
  ASSERT_TRUE(m.tg);
  auto e = Executor::create(m.g, DeviceKind::kCpu, {}, ExecutorOptions{true, {}});
  ASSERT_TRUE(e);
  const Value* planned = nullptr;
  for (const auto& v : m.g.values())
    if ((*e)->plan().planned(v.get())) planned = v.get();
  ASSERT_NE(planned, nullptr);
  EXPECT_NE((*e)->view(planned).data, nullptr);
  EXPECT_DEATH((*e)->tensor(planned), "shares storage under the memory plan");
}

TEST(MemoryPlan, DigitsMlpTrainingGraph) {
  ImportOptions io;
  io.batch_size = 16;
  auto m = import_onnx(PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx", io);
  ASSERT_TRUE(m) << m.status().message();
  auto tg = build_training_graph(*m->graph, LossKind::kAuto, SgdOptions{0.9f, 0.0f});
  ASSERT_TRUE(tg) << tg.status().message();
  const std::vector<const Value*> keep = {tg->loss.loss, tg->loss.output};
  const MemoryPlan p = plan_memory(*m->graph, all_nodes(*m->graph), keep);
  expect_no_live_aliases(*m->graph, all_nodes(*m->graph), p, keep);
  EXPECT_GT(p.planned_values, 0u);
  EXPECT_LE(p.arena_bytes, p.planned_bytes);
}

}  // namespace
}  // namespace pt
