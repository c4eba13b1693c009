// The Executor's memory plan: no two values live at the same time share bytes (but for the
// aliases of copies, which share their input's), values the caller keeps (and inputs, parameters,
// state, outputs) are never shared, and training with the plan is bit for bit training without it
// (a small CNN with BatchNorm and a one-position Conv); the digits MLP's training graph plans
// without overlaps. Aliases (Reshape, Flatten, Squeeze, Unsqueeze, Identity): chains, an input read
// after its copy, a copy of a kept value (no alias), the executor skipping their nodes, and
// training bit-identical with aliases on and off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "importer/importer.h"
#include "importer/shape_infer.h"
#include "importer/training.h"
#include "runtime/exec/executor.h"
#include "tests/runtime/graph_builder.h"

namespace pt {
namespace {

using Ints = std::vector<int64_t>;

// The root of v's alias group (v itself when v is no alias).
int alias_root(const MemoryPlan& p, int id) {
  while (p.alias_of[id] >= 0) id = p.alias_of[id];
  return id;
}

// Every pair of planned values whose lifetimes overlap occupies disjoint bytes, unless both are in
// one alias group (one's copy made the other: then they share the offset); lifetimes cover the
// producer and every consumer; kept values are not planned; an alias is the output of a copy of a
// planned value of its size.
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
    if (p.aliased(v)) {
      const Node* n = v->producer;
      EXPECT_TRUE(is_copy_op(n->op_type)) << v->name << " made by " << n->op_type;
      ASSERT_FALSE(n->inputs.empty()) << v->name;
      EXPECT_EQ(p.alias_of[v->id], n->inputs[0]->id) << v->name;
      EXPECT_TRUE(p.planned(n->inputs[0])) << v->name;
      EXPECT_EQ(n->inputs[0]->bytes(), v->bytes()) << v->name;
      EXPECT_EQ(p.offset[v->id], p.offset[n->inputs[0]->id]) << v->name;
    }
  }
  size_t aliases = 0;
  for (const Value* v : planned) aliases += p.aliased(v);
  EXPECT_EQ(aliases, p.aliased_values);
  for (const Value* k : keep) EXPECT_FALSE(p.planned(k)) << k->name;
  for (const Value* k : g.inputs) EXPECT_FALSE(p.planned(k)) << k->name;
  for (const Value* k : g.outputs) EXPECT_FALSE(p.planned(k)) << k->name;
  for (size_t i = 0; i < planned.size(); ++i)
    for (size_t j = i + 1; j < planned.size(); ++j) {
      const Value* a = planned[i];
      const Value* b = planned[j];
      const bool live_together = p.first[a->id] <= p.last[b->id] && p.first[b->id] <= p.last[a->id];
      if (!live_together || alias_root(p, a->id) == alias_root(p, b->id)) continue;
      const int64_t a0 = p.offset[a->id], a1 = a0 + static_cast<int64_t>(a->bytes());
      const int64_t b0 = p.offset[b->id], b1 = b0 + static_cast<int64_t>(b->bytes());
      EXPECT_TRUE(a1 <= b0 || b1 <= a0) << a->name << " [" << a0 << ", " << a1 << ") and " << b->name << " [" << b0
                                        << ", " << b1 << ") are live together";
    }
}

// A small float32 CNN: Conv-BN-Relu-MaxPool, a 3x3 Conv over a 1x1 map (one output position),
// a residual Add, Flatten, Gemm; then its training graph.
struct Cnn : test::GraphBuilder {
  std::unique_ptr<TrainingGraph> tg;

  Cnn() : GraphBuilder(11) {
    Value* x = input("x", {4, 3, 4, 4});
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


// Forward-only graphs of copies around Relus: x [4, 6] is the input; `op` infers shapes.
struct Copies : test::GraphBuilder {
  Value* x = input("x", {4, 6});

  Value* reshape(Value* v, const Ints& shape) { return op("Reshape", {v, ints(shape)}); }
};

TEST(MemoryPlanAlias, ChainOfCopiesSharesOneOffsetAndLivesAsLongAsItsMembers) {
  Copies m;
  Value* a = m.op("Relu", {m.x});                      // 0
  Value* b = m.reshape(a, {6, 4});                      // 1: alias of a
  Value* c = m.reshape(b, {24});                        // 2: alias of b (a chain)
  Value* d = m.op("Unsqueeze", {c, m.ints({0})});       // 3: alias of c
  Value* e = m.op("Squeeze", {d, m.ints({0})});         // 4: alias of d
  Value* f = m.op("Identity", {e});                     // 5: alias of e
  Value* r1 = m.op("Relu", {m.op("Relu", {m.x})});      // 6, 7: live while the group is
  Value* r2 = m.op("Relu", {m.reshape(r1, {24})});      // 8 (alias of r1), 9
  Value* y = m.op("Add", {f, r2});                      // 10: the group's last reader
  m.g.outputs.push_back(m.op("Relu", {y}));
  const std::vector<const Node*> nodes = all_nodes(m.g);
  const MemoryPlan p = plan_memory(m.g, nodes, {}, true, true);
  expect_no_live_aliases(m.g, nodes, p, {});
  for (const Value* v : {b, c, d, e, f}) {
    EXPECT_TRUE(p.aliased(v)) << v->name;
    EXPECT_EQ(p.offset[v->id], p.offset[a->id]) << v->name;
  }
  EXPECT_FALSE(p.aliased(a));
  EXPECT_EQ(p.aliased_values, 6u);  // b, c, d, e, f and r1's Reshape
  // a itself is read only by its Reshape (position 1); its group lives to position 10: the
  // Relus computed meanwhile (positions 6-9, the size of a) must not take its bytes.
  EXPECT_EQ(p.last[a->id], 1);
  EXPECT_EQ(p.last[f->id], 10);
  for (const Value* v : {r1->producer->inputs[0], r1, r2})
    EXPECT_NE(p.offset[v->id], p.offset[a->id]) << v->name << " shares the bytes of a live group";

  // Without aliases: the same values planned, every copy its own bytes.
  const MemoryPlan q = plan_memory(m.g, nodes, {}, true, false);
  expect_no_live_aliases(m.g, nodes, q, {});
  EXPECT_EQ(q.aliased_values, 0u);
  EXPECT_EQ(q.planned_values, p.planned_values);
  EXPECT_EQ(q.planned_bytes, p.planned_bytes + p.aliased_bytes);
  EXPECT_GT(p.aliased_bytes, 0u);
}

TEST(MemoryPlanAlias, InputReadAfterItsCopyKeepsTheGroupAlive) {
  Copies m;
  Value* a = m.op("Relu", {m.x});                   // 0
  Value* b = m.reshape(a, {24});                     // 1: alias of a, read at 2 only
  Value* c = m.op("Relu", {b});                      // 2
  Value* d = m.op("Relu", {m.reshape(c, {4, 6})});   // 3 (alias of c), 4
  Value* e = m.op("Relu", {d});                      // 5
  Value* y = m.op("Add", {a, e});                    // 6: a read after its copy
  m.g.outputs.push_back(m.op("Relu", {y}));
  const std::vector<const Node*> nodes = all_nodes(m.g);
  const MemoryPlan p = plan_memory(m.g, nodes, {}, true, true);
  expect_no_live_aliases(m.g, nodes, p, {});
  EXPECT_TRUE(p.aliased(b));
  EXPECT_EQ(p.last[b->id], 2);
  EXPECT_EQ(p.last[a->id], 6);
  // b's own lifetime ended at 2, but its bytes are a's until 6: d and e must stay off them.
  for (const Value* v : {c, d, e}) EXPECT_NE(p.offset[v->id], p.offset[b->id]) << v->name;
}

TEST(MemoryPlanAlias, CopiesOfValuesThatAreNotPlannedStayCopies) {
  Copies m;
  Value* k = m.op("Relu", {m.x});              // kept by the caller
  Value* r = m.reshape(k, {24});                // planned, but its input is not: a copy
  Value* s = m.reshape(m.x, {6, 4});            // of the model input: a copy
  Value* a = m.op("Relu", {m.x});
  Value* out = m.reshape(a, {24});              // a model output: a copy
  Value* t = m.op("Relu", {r});
  Value* u = m.op("Relu", {s});
  m.g.outputs.push_back(out);
  m.g.outputs.push_back(m.op("Add", {m.reshape(t, {4, 6}), m.reshape(u, {4, 6})}));
  const std::vector<const Node*> nodes = all_nodes(m.g);
  const std::vector<const Value*> keep = {k};
  const MemoryPlan p = plan_memory(m.g, nodes, keep, true, true);
  expect_no_live_aliases(m.g, nodes, p, keep);
  EXPECT_FALSE(p.planned(k));
  EXPECT_TRUE(p.planned(r));
  EXPECT_FALSE(p.aliased(r));
  EXPECT_TRUE(p.planned(s));
  EXPECT_FALSE(p.aliased(s));
  EXPECT_FALSE(p.planned(out));
  EXPECT_TRUE(p.planned(a));
  EXPECT_EQ(p.aliased_values, 2u);  // the two last Reshapes (of t and u)

  // The executor: aliases' nodes never run, the copies do, and the values are right.
  auto e = Executor::create(m.g, DeviceKind::kCpu, {}, ExecutorOptions{true, keep});
  ASSERT_TRUE(e) << e.status().message();
  ASSERT_EQ((*e)->plan().aliased_values, 2u);
  HostTensor& x = (*e)->tensor(m.x);
  for (int64_t i = 0; i < x.size(); ++i) x.as<float>()[i] = static_cast<float>(i % 7) - 3.f;
  std::vector<double> seconds;
  ASSERT_TRUE((*e)->run_timed(&seconds).is_ok());
  seconds.resize(m.g.nodes().size(), 0.0);
  for (const Node* n : nodes) {
    if ((*e)->plan().aliased(n->outputs[0])) {
      EXPECT_EQ(seconds[n->id], 0.0) << n->name << " ran";
    } else if (n->op_type == "Reshape") {
      EXPECT_GT(seconds[n->id], 0.0) << n->name << " did not run";
    }
  }
  ASSERT_TRUE((*e)->run().is_ok());
  const HostTensor& o0 = (*e)->tensor(m.g.outputs[0]);
  const HostTensor& o1 = (*e)->tensor(m.g.outputs[1]);
  for (int64_t i = 0; i < x.size(); ++i) {
    const float r0 = std::max(x.as<float>()[i], 0.f);
    EXPECT_EQ(o0.as<float>()[i], r0) << i;
    EXPECT_EQ(o1.as<float>()[i], 2 * r0) << i;
  }
}

// The CNN's training graph (its Flatten and the gradient's Reshapes) with aliases on and off:
// the same losses and weights, bit for bit, and the plan with aliases skips copies.
TEST(MemoryPlanAlias, TrainingIsBitIdenticalWithAliasesOnAndOff) {
  Cnn on, off;
  ASSERT_TRUE(on.tg && off.tg);
  auto eon = Executor::create(on.g, DeviceKind::kCpu, {}, ExecutorOptions{true, {on.tg->loss.loss}});
  ExecutorOptions no_alias{true, {off.tg->loss.loss}};
  no_alias.settings.reshape_alias = false;
  auto eoff = Executor::create(off.g, DeviceKind::kCpu, {}, no_alias);
  ASSERT_TRUE(eon && eoff);
  const MemoryPlan& pon = (*eon)->plan();
  const MemoryPlan& poff = (*eoff)->plan();
  expect_no_live_aliases(on.g, all_nodes(on.g), pon, {on.tg->loss.loss});
  EXPECT_GT(pon.aliased_values, 0u);
  EXPECT_EQ(poff.aliased_values, 0u);
  EXPECT_EQ(pon.planned_values, poff.planned_values);
  EXPECT_EQ(pon.planned_bytes + pon.aliased_bytes, poff.planned_bytes);
  std::vector<float> losses[2];
  for (int which = 0; which < 2; ++which) {
    Executor* e = which == 0 ? eon->get() : eoff->get();
    Cnn& m = which == 0 ? on : off;
    e->tensor(m.tg->lr).as<float>()[0] = 0.05f;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    for (int step = 0; step < 6; ++step) {
      HostTensor& x = e->tensor(m.g.inputs[0]);
      for (int64_t i = 0; i < x.size(); ++i) x.as<float>()[i] = nd(rng);
      HostTensor& y = e->tensor(m.tg->loss.labels);
      for (int64_t i = 0; i < y.size(); ++i) y.as<int64_t>()[i] = (i + 2 * step) % 5;
      if (m.g.rng_step) e->tensor(m.g.rng_step).as<int64_t>()[0] = step + 1;
      ASSERT_TRUE(e->run().is_ok());
      losses[which].push_back(e->tensor(m.tg->loss.loss).as<float>()[0]);
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (size_t i = 0; i < on.tg->params.size(); ++i) {
    const HostTensor& a = (*eon)->tensor(on.tg->params[i]);
    const HostTensor& b = (*eoff)->tensor(off.tg->params[i]);
    ASSERT_EQ(a.bytes(), b.bytes());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << on.tg->params[i]->name;
  }
}

}  // namespace
}  // namespace pt
