// The partition algorithm: the DP's bottleneck equals brute force over every contiguous split of
// the same order on random small DAGs (heterogeneous speeds and memories, both orders), skip
// connections counted once per receiving stage, backward and update nodes with their forward
// node, manual --split-at / --balance and their errors, and the infeasible-memory message.
//
// Test seam: brute force evaluates each split through the public API itself (--balance with the
// order fixed by PartitionOptions::order), so the DP is checked against the plan evaluation the
// runtime and reports see, not against a second copy of the cost formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "importer/training.h"
#include "kernels/registry.h"
#include "partitioner/partition.h"

namespace pt {
namespace {

// Small training graphs built in code: Gemm / Relu / Add over [B, d] activations.
class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t batch, int64_t in_dim) : batch_(batch) {
    x_ = g_.add_value("x", DType::kFloat32, {batch, in_dim}, ValueKind::kInput);
    g_.inputs = {x_};
  }
  Graph& graph() { return g_; }
  Value* input() { return x_; }

  Value* gemm(Value* in, int64_t out_dim, const std::string& name) {
    Value* w = g_.add_value(name + ".W", DType::kFloat32, {in->dims[1], out_dim}, ValueKind::kParameter);
    Value* b = g_.add_value(name + ".b", DType::kFloat32, {out_dim}, ValueKind::kParameter);
    Value* y = g_.add_value(name + ".y", DType::kFloat32, {batch_, out_dim}, ValueKind::kActivation);
    g_.add_node("Gemm", name, {in, w, b}, {y});
    return y;
  }
  Value* relu(Value* in, const std::string& name) {
    Value* y = g_.add_value(name + ".y", DType::kFloat32, in->dims, ValueKind::kActivation);
    g_.add_node("Relu", name, {in}, {y});
    return y;
  }
  Value* add(Value* a, Value* b, const std::string& name, const char* op = "Add") {
    Value* y = g_.add_value(name + ".y", DType::kFloat32, a->dims, ValueKind::kActivation);
    g_.add_node(op, name, {a, b}, {y});
    return y;
  }
  // Marks `out` as the model output and builds the training graph (softmax cross-entropy).
  void train(Value* out) {
    g_.outputs = {out};
    auto tg = build_training_graph(g_, LossKind::kCrossEntropy, SgdOptions{});
    ASSERT_TRUE(tg.has_value()) << tg.status().message();
  }

 private:
  Graph g_;
  int64_t batch_;
  Value* x_;
};

int count_forward(const Graph& g) {
  int n = 0;
  for (auto& node : g.nodes()) n += is_forward_phase(*node);
  return n;
}

// A random DAG of `n_fwd - 1` Gemm / Relu / Add nodes (Adds join earlier values: skip
// connections) and the loss.
void random_model(ModelBuilder& m, std::mt19937& rng, int n_fwd) {
  std::vector<Value*> avail{m.input()};
  std::uniform_int_distribution<int> op(0, 3), dim(2, 96);
  for (int i = 0; i + 2 < n_fwd; ++i) {
    const std::string name = "n" + std::to_string(i);
    // Mostly the latest value, sometimes an older one (a branch).
    std::uniform_int_distribution<size_t> recent(avail.size() > 3 ? avail.size() - 3 : 0, avail.size() - 1);
    Value* in = avail[recent(rng)];
    const int o = op(rng);
    if (o == 3) {
      std::vector<Value*> same;
      for (Value* v : avail)
        if (v != in && v->dims == in->dims) same.push_back(v);
      if (!same.empty()) {
        std::uniform_int_distribution<size_t> pick(0, same.size() - 1);
        avail.push_back(m.add(in, same[pick(rng)], name));
        continue;
      }
    }
    if (o == 2 && in != m.input()) avail.push_back(m.relu(in, name));
    else avail.push_back(m.gemm(in, dim(rng), name));
  }
  m.train(m.gemm(avail.back(), 10, "head"));
}

DeviceSpec random_device(std::mt19937& rng, double memory) {
  std::uniform_real_distribution<double> u(0, 1);
  DeviceSpec d;
  d.name = "dev";
  d.peak_flops = std::pow(10.0, 9 + 4 * u(rng));
  d.mem_bandwidth = std::pow(10.0, 9 + 3 * u(rng));
  d.kernel_overhead_s = 1e-5 * u(rng);
  d.memory_bytes = memory;
  d.name = "dev(" + std::to_string(static_cast<int>(d.peak_flops / 1e9)) + " GF)";
  return d;
}

bool is_memory_error(const Status& s) { return s.message().find("out of memory") != std::string::npos; }

// Every composition of n into k positive parts.
void compositions(int n, int k, std::vector<int>& cur, const std::function<void(const std::vector<int>&)>& f) {
  if (k == 1) {
    cur.push_back(n);
    f(cur);
    cur.pop_back();
    return;
  }
  for (int first = 1; first <= n - (k - 1); ++first) {
    cur.push_back(first);
    compositions(n - first, k - 1, cur, f);
    cur.pop_back();
  }
}

TEST(Partition, DpMatchesBruteForceOnRandomDags) {
  int checked = 0, infeasible = 0;
  for (uint32_t seed = 1; seed <= 120; ++seed) {
    std::mt19937 rng(seed);
    const int n_fwd = std::uniform_int_distribution<int>(5, 14)(rng);
    const int64_t batch = std::uniform_int_distribution<int>(1, 64)(rng);
    ModelBuilder m(batch, std::uniform_int_distribution<int>(2, 64)(rng));
    random_model(m, rng, n_fwd);
    const Graph& g = m.graph();
    const int n = count_forward(g);
    const int N = std::uniform_int_distribution<int>(2, std::min(4, n))(rng);

    PartitionOptions opts;
    std::uniform_real_distribution<double> u(0, 1);
    opts.link.name = "random";
    opts.link.bandwidth = std::pow(10.0, 8 + 3 * u(rng));
    opts.link.latency_s = 1e-4 * u(rng);
    opts.schedule = u(rng) < 0.7 ? Schedule::k1F1B : Schedule::kGPipe;
    opts.weights = static_cast<WeightMode>(std::uniform_int_distribution<int>(0, 2)(rng));
    opts.micro_batches = std::uniform_int_distribution<int>(1, 4)(rng);
    opts.optimizer_state_copies = std::uniform_int_distribution<int>(1, 2)(rng);
    for (int k = 0; k < N; ++k) opts.devices.push_back(random_device(rng, 1e30));
    // Memories around the largest stage need of an unconstrained plan: some cases do not fit.
    opts.order = NodeOrder::kGraph;
    auto free_plan = partition(g, opts);
    ASSERT_TRUE(free_plan.has_value()) << free_plan.status().message();
    int64_t biggest = 0;
    for (const StagePlan& s : free_plan->stages) biggest = std::max(biggest, s.memory_bytes);
    for (DeviceSpec& d : opts.devices) d.memory_bytes = biggest * (0.4 + 1.0 * u(rng));

    double best_of_orders = std::numeric_limits<double>::infinity();
    for (NodeOrder order : {NodeOrder::kGraph, NodeOrder::kBranch}) {
      opts.order = order;
      opts.balance.clear();
      auto dp = partition(g, opts);
      double brute = std::numeric_limits<double>::infinity();
      std::vector<int> cur;
      compositions(n, N, cur, [&](const std::vector<int>& parts) {
        PartitionOptions o = opts;
        o.balance = parts;
        auto p = partition(g, o);
        if (p.has_value()) brute = std::min(brute, p->bottleneck_ms);
        else ASSERT_TRUE(is_memory_error(p.status())) << p.status().message();
      });
      SCOPED_TRACE("seed " + std::to_string(seed) + " order " + (order == NodeOrder::kGraph ? "graph" : "branch") +
                   " nodes " + std::to_string(n) + " stages " + std::to_string(N));
      if (std::isinf(brute)) {
        ASSERT_FALSE(dp.has_value()) << "the DP found a plan brute force says cannot fit";
        EXPECT_TRUE(is_memory_error(dp.status())) << dp.status().message();
        ++infeasible;
      } else {
        ASSERT_TRUE(dp.has_value()) << dp.status().message();
        EXPECT_NEAR(dp->bottleneck_ms, brute, 1e-9 * brute);
        for (const StagePlan& s : dp->stages) EXPECT_LE(static_cast<double>(s.memory_bytes), s.device.memory_bytes);
        best_of_orders = std::min(best_of_orders, dp->bottleneck_ms);
        ++checked;
      }
    }
    // kAuto keeps the better order (unless the branch order's plan would need a gradient to flow
    // forward; then the graph order's).
    opts.order = NodeOrder::kAuto;
    auto best = partition(g, opts);
    if (!std::isinf(best_of_orders)) {
      ASSERT_TRUE(best.has_value()) << best.status().message();
      EXPECT_GE(best->bottleneck_ms, best_of_orders * (1 - 1e-9));
    }
  }
  EXPECT_GT(checked, 60);
  EXPECT_GT(infeasible, 5);  // the memory constraint was exercised
}

// x -> A -> relu r | B(r) + r | C(.) + r + r -> D -> loss: r crosses two cuts.
struct SkipModel {
  ModelBuilder m{8, 16};
  Value* r = nullptr;
  Value* c = nullptr;
  SkipModel() {
    r = m.relu(m.gemm(m.input(), 16, "A"), "R");
    c = m.add(m.gemm(r, 16, "B"), r, "AddB");
    Value* e = m.add(m.gemm(c, 16, "C"), r, "AddC");
    Value* f = m.add(e, r, "AddC2");
    m.train(m.gemm(f, 10, "D"));
  }
};

PartitionOptions uniform_options(int stages) {
  PartitionOptions opts;
  for (int k = 0; k < stages; ++k) {
    DeviceSpec d;
    d.name = "gpu" + std::to_string(k);
    d.peak_flops = 1e12;
    d.mem_bandwidth = 1e11;
    d.kernel_overhead_s = 5e-6;
    d.memory_bytes = 1e12;
    opts.devices.push_back(d);
  }
  opts.link.name = "test";
  opts.link.bandwidth = 1e9;
  opts.link.latency_s = 1e-5;
  return opts;
}

TEST(Partition, SkipConnectionSentOncePerReceivingStage) {
  SkipModel s;
  PartitionOptions opts = uniform_options(3);
  opts.split_at = {"B", "C"};
  auto plan = partition(s.m.graph(), opts);
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  ASSERT_EQ(plan->stages.size(), 3u);
  const StagePlan &s0 = plan->stages[0], &s1 = plan->stages[1], &s2 = plan->stages[2];
  const int64_t rb = static_cast<int64_t>(s.r->bytes()), cb = static_cast<int64_t>(s.c->bytes());
  // r appears once in stage 0's send list, its bytes once per receiving stage (1 and 2).
  EXPECT_EQ(s0.send, std::vector<const Value*>{s.r});
  EXPECT_EQ(s0.send_bytes, 2 * rb);
  EXPECT_EQ(s1.recv, std::vector<const Value*>{s.r});
  EXPECT_EQ(s1.recv_bytes, rb);
  // Stage 2 reads r twice and c once: each received once.
  EXPECT_EQ(std::set<const Value*>(s2.recv.begin(), s2.recv.end()), (std::set<const Value*>{s.r, s.c}));
  EXPECT_EQ(s2.recv.size(), 2u);
  EXPECT_EQ(s2.recv_bytes, rb + cb);
  EXPECT_EQ(s2.grad_send_bytes, rb + cb);
  EXPECT_EQ(s1.send, std::vector<const Value*>{s.c});
  EXPECT_EQ(s1.send_bytes, cb);
  // Both directions of each transfer, charged to the receiving stage.
  const double expect_ms = 1e3 * (2.0 * (rb + cb) / opts.link.bandwidth + 4 * opts.link.latency_s);
  EXPECT_NEAR(s2.comm_ms, expect_ms, 1e-12);
  EXPECT_EQ(s0.comm_ms, 0.0);
}

void expect_nodes_follow_forward(const Graph& g, const Plan& plan) {
  std::map<const Node*, int> stage;
  for (const StagePlan& s : plan.stages)
    for (const Node* n : s.nodes) {
      EXPECT_TRUE(stage.emplace(n, s.index).second) << n->describe() << " is in two stages";
    }
  EXPECT_EQ(stage.size(), g.nodes().size()) << "every node in exactly one stage";
  std::map<const Value*, int> param_stage;
  for (const StagePlan& s : plan.stages)
    for (const Value* p : s.params) param_stage[p] = s.index;
  for (auto& n : g.nodes()) {
    if (n->phase == Phase::kBackward) {
      ASSERT_NE(n->forward, nullptr);
      EXPECT_EQ(stage[n.get()], stage[n->forward]) << n->describe() << " serves " << n->forward->describe();
    } else if (n->phase == Phase::kUpdate) {
      ASSERT_TRUE(param_stage.count(n->inputs[0])) << n->inputs[0]->name;
      EXPECT_EQ(stage[n.get()], param_stage[n->inputs[0]]) << n->describe();
      // The parameter's stage is the stage of its forward consumer.
      for (const Node* c : n->inputs[0]->consumers)
        if (c->phase == Phase::kForward) {
          EXPECT_EQ(stage[c], param_stage[n->inputs[0]]);
        }
    }
  }
  for (const StagePlan& s : plan.stages) {
    // Forward nodes first, in a topological order; backward after them; updates last.
    size_t k = 0;
    while (k < s.nodes.size() && is_forward_phase(*s.nodes[k])) ++k;
    EXPECT_EQ(k, s.forward_nodes.size());
    bool seen_update = false;
    for (; k < s.nodes.size(); ++k) {
      EXPECT_FALSE(is_forward_phase(*s.nodes[k]));
      if (s.nodes[k]->phase == Phase::kUpdate) seen_update = true;
      else EXPECT_FALSE(seen_update) << "backward after an update in stage " << s.index;
    }
  }
}

TEST(Partition, BackwardAndUpdateNodesGoWithTheirForwardNode) {
  for (uint32_t seed = 200; seed < 230; ++seed) {
    std::mt19937 rng(seed);
    ModelBuilder m(16, 32);
    random_model(m, rng, 14);
    for (int N : {2, 3, 4}) {
      PartitionOptions opts = uniform_options(N);
      auto plan = partition(m.graph(), opts);
      ASSERT_TRUE(plan.has_value()) << plan.status().message();
      SCOPED_TRACE("seed " + std::to_string(seed) + " stages " + std::to_string(N));
      expect_nodes_follow_forward(m.graph(), *plan);
      EXPECT_GE(plan->imbalance, 1.0);
      EXPECT_NEAR(plan->predicted_samples_per_s, 1e3 * 16 / plan->bottleneck_ms, 1e-6);
      EXPECT_GT(plan->single_device_samples_per_s, 0);
      EXPECT_FALSE(plan->manual);
    }
  }
}

TEST(Partition, ManualSplitAtAndBalance) {
  SkipModel s;
  const Graph& g = s.m.graph();
  PartitionOptions opts = uniform_options(3);
  opts.balance = {2, 3, 4};
  auto plan = partition(g, opts);
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  EXPECT_TRUE(plan->manual);
  EXPECT_EQ(plan->order, "graph");
  EXPECT_EQ(plan->stages[0].forward_nodes.size(), 2u);
  EXPECT_EQ(plan->stages[1].forward_nodes.size(), 3u);
  EXPECT_EQ(plan->stages[2].forward_nodes.size(), 4u);  // AddC, AddC2, D, loss (9 forward nodes)
  expect_nodes_follow_forward(g, *plan);

  opts.balance.clear();
  opts.split_at = {"B", "C"};
  plan = partition(g, opts);
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  EXPECT_EQ(plan->stages[1].forward_nodes.front()->name, "B");
  EXPECT_EQ(plan->stages[2].forward_nodes.front()->name, "C");
  EXPECT_TRUE(plan->manual);

  auto error = [&](PartitionOptions o) {
    auto p = partition(g, o);
    EXPECT_FALSE(p.has_value());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidInput);
    return p.status().message();
  };
  PartitionOptions o = uniform_options(3);
  o.split_at = {"B", "nope"};
  EXPECT_NE(error(o).find("'nope'"), std::string::npos);
  o.split_at = {"C", "B"};
  std::string msg = error(o);
  EXPECT_NE(msg.find("'B'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("order"), std::string::npos) << msg;
  o.split_at = {"B"};
  EXPECT_NE(error(o).find("2 names"), std::string::npos);
  o.split_at = {"A", "B"};
  EXPECT_NE(error(o).find("first forward node"), std::string::npos);
  o.split_at.clear();
  o.balance = {2, 3, 3};
  msg = error(o);
  EXPECT_NE(msg.find("sums to 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("9 forward nodes"), std::string::npos) << msg;
  o.balance = {4, 5};
  EXPECT_NE(error(o).find("2 entries for 3 stages"), std::string::npos);
  o.balance = {0, 4, 5};
  EXPECT_NE(error(o).find("at least one"), std::string::npos);
}

// An 8-layer MLP, 256 wide: 0.26 MB of weights per layer, 1 MB per activation at batch 1024.
struct BigMlp {
  ModelBuilder m;
  explicit BigMlp(int64_t batch) : m(batch, 256) {
    Value* v = m.input();
    for (int i = 0; i < 8; ++i) v = m.relu(m.gemm(v, 256, "fc" + std::to_string(i)), "relu" + std::to_string(i));
    m.train(m.gemm(v, 10, "head"));
  }
};

TEST(Partition, InfeasibleMemoryNamesStageOverageAndWhatFits) {
  BigMlp big(1024);
  PartitionOptions opts = uniform_options(2);
  auto free_plan = partition(big.m.graph(), opts);
  ASSERT_TRUE(free_plan.has_value());
  // Devices a little too small for any split.
  int64_t need = 0;
  for (const StagePlan& s : free_plan->stages) need = std::max(need, s.memory_bytes);
  double mem = need;
  for (;; mem *= 0.9) {
    for (DeviceSpec& d : opts.devices) d.memory_bytes = mem;
    if (!partition(big.m.graph(), opts).has_value()) break;
  }
  auto p = partition(big.m.graph(), opts);
  ASSERT_FALSE(p.has_value());
  const std::string msg = p.status().message();
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stage "), std::string::npos) << msg;
  EXPECT_NE(msg.find("MB over its"), std::string::npos) << msg;
  EXPECT_NE(msg.find("What would fit: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("devices like these"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a batch size of "), std::string::npos) << msg;
  // The suggestions are true: that many devices fit, and that batch fits these devices.
  const size_t at = msg.find("What would fit: ") + 16;
  const int devices = std::stoi(msg.substr(at));
  PartitionOptions more = opts;
  while (static_cast<int>(more.devices.size()) < devices) more.devices.push_back(opts.devices[0]);
  EXPECT_TRUE(partition(big.m.graph(), more).has_value()) << devices << " devices";
  more.devices.pop_back();
  EXPECT_FALSE(partition(big.m.graph(), more).has_value()) << devices - 1 << " devices";
  const int batch = std::stoi(msg.substr(msg.find("a batch size of ") + 16));
  ASSERT_GT(batch, 0);
  ASSERT_LT(batch, 1024);
  BigMlp smaller(batch);
  EXPECT_TRUE(partition(smaller.m.graph(), opts).has_value()) << "batch " << batch << ": " << msg;
  BigMlp larger(batch + 1);
  EXPECT_FALSE(partition(larger.m.graph(), opts).has_value()) << "batch " << batch + 1;

  // A manual split that does not fit, where the automatic one would.
  PartitionOptions manual = uniform_options(2);
  for (DeviceSpec& d : manual.devices) d.memory_bytes = need;  // what the automatic plan needs
  manual.balance = {count_forward(big.m.graph()) - 1, 1};
  auto mp = partition(big.m.graph(), manual);
  ASSERT_FALSE(mp.has_value());
  EXPECT_NE(mp.status().message().find("stage 0 "), std::string::npos) << mp.status().message();
  EXPECT_NE(mp.status().message().find("automatic partition"), std::string::npos) << mp.status().message();
}

TEST(Partition, MemoryFollowsScheduleAndWeightMode) {
  BigMlp big(32);
  PartitionOptions opts = uniform_options(4);
  opts.balance = {5, 4, 4, 5};
  for (WeightMode w : {WeightMode::kSpecTrain, WeightMode::kStash, WeightMode::kStale}) {
    opts.weights = w;
    auto plan = partition(big.m.graph(), opts);
    ASSERT_TRUE(plan.has_value()) << plan.status().message();
    int64_t model_params = 0;
    for (const StagePlan& s : plan->stages) model_params += s.param_bytes;
    for (const StagePlan& s : plan->stages) {
      EXPECT_EQ(s.in_flight, 4 - s.index);
      const int copies = w == WeightMode::kSpecTrain ? 1 : w == WeightMode::kStash ? 3 - s.index : 0;
      EXPECT_EQ(s.weight_copies, copies);
      // Saved activations: one copy per mini-batch in flight plus the executor's working copy;
      // stage 0 also holds the evaluator's copy of every parameter.
      EXPECT_EQ(s.evaluator_bytes, s.index == 0 ? model_params : 0);
      EXPECT_EQ(s.memory_bytes, s.param_bytes * (3 + copies) + s.saved_bytes * (s.in_flight + 1) + s.workspace_bytes +
                                    s.evaluator_bytes);
    }
  }
  opts.schedule = Schedule::kGPipe;
  opts.micro_batches = 6;
  auto plan = partition(big.m.graph(), opts);
  ASSERT_TRUE(plan.has_value());
  double worst = 0, worst_update = 0;
  for (const StagePlan& s : plan->stages) {
    EXPECT_EQ(s.in_flight, 6);
    EXPECT_EQ(s.weight_copies, 0);
    worst = std::max(worst, s.fwd_ms + s.bwd_ms + s.comm_ms);
    worst_update = std::max(worst_update, s.update_ms);
  }
  EXPECT_NEAR(plan->predicted_samples_per_s, 1e3 * 6 * 32 / ((6 + 4 - 1) * worst + worst_update), 1e-6);
}

// The passes a stage makes over its weights outside the graph are in its forward and backward
// times: SpecTrain's predictions (paper staleness on 4 stages: every forward predicts, the
// backwards of stages 2 and 3 too), weight stashing's copy out and back in (every stage but the
// last); stale weights make none. Each priced as weight_pass_s over the stage's parameters.
TEST(Partition, StagesPayForTheWeightVersionsTheyWrite) {
  BigMlp big(32);
  PartitionOptions opts = uniform_options(4);
  opts.balance = {5, 4, 4, 5};
  opts.weights = WeightMode::kStale;
  auto stale = partition(big.m.graph(), opts);
  ASSERT_TRUE(stale.has_value()) << stale.status().message();
  for (WeightMode w : {WeightMode::kSpecTrain, WeightMode::kStash, WeightMode::k2BW}) {
    opts.weights = w;
    auto plan = partition(big.m.graph(), opts);
    ASSERT_TRUE(plan.has_value()) << plan.status().message();
    for (const StagePlan& s : plan->stages) {
      SCOPED_TRACE(std::string(weight_mode_name(w)) + " stage " + std::to_string(s.index));
      const StagePlan& base = stale->stages[s.index];
      ASSERT_EQ(s.params, base.params);
      double predict_ms = 0, copy_ms = 0;
      for (const Value* v : s.params) {
        const double b = static_cast<double>(v->bytes()), n = static_cast<double>(v->size());
        predict_ms += 1e3 * weight_pass_s(2 * n, 3 * b, s.device);  // master and momentum in, the copy out
        copy_ms += 1e3 * weight_pass_s(0, 2 * b, s.device);
      }
      ASSERT_GT(predict_ms, 0);
      const WeightPasses wp = stage_weight_passes(s.index, 4, opts);
      if (w == WeightMode::kSpecTrain) {
        EXPECT_EQ(wp.fwd_predict, 1);
        EXPECT_EQ(wp.bwd_predict, s.index >= 2 ? 1 : 0);
        EXPECT_EQ(wp.fwd_copy + wp.bwd_copy, 0);
      } else if (w == WeightMode::kStash) {
        EXPECT_EQ(wp.fwd_copy, s.index < 3 ? 1 : 0);
        EXPECT_EQ(wp.bwd_copy, wp.fwd_copy);
        EXPECT_EQ(wp.fwd_predict + wp.bwd_predict, 0);
      } else {  // 2BW: the master copied aside with each update; its passes select either
        EXPECT_EQ(wp.update_copy, 1);
        EXPECT_EQ(wp.fwd_predict + wp.bwd_predict + wp.fwd_copy + wp.bwd_copy, 0);
      }
      EXPECT_NEAR(s.fwd_ms - base.fwd_ms, wp.fwd_predict * predict_ms + wp.fwd_copy * copy_ms, 1e-9);
      EXPECT_NEAR(s.bwd_ms - base.bwd_ms, wp.bwd_predict * predict_ms + wp.bwd_copy * copy_ms, 1e-9);
      EXPECT_NEAR(s.update_ms - base.update_ms, wp.update_copy * copy_ms, 1e-9);
    }
  }
  // One stage, or a synchronous schedule: none.
  opts.weights = WeightMode::kSpecTrain;
  const WeightPasses one = stage_weight_passes(0, 1, opts);
  EXPECT_EQ(one.fwd_predict + one.bwd_predict + one.fwd_copy + one.bwd_copy + one.update_copy, 0);
  opts.schedule = Schedule::kGPipe;
  const WeightPasses gpipe = stage_weight_passes(1, 4, opts);
  EXPECT_EQ(gpipe.fwd_predict + gpipe.bwd_predict + gpipe.fwd_copy + gpipe.bwd_copy + gpipe.update_copy, 0);
}

TEST(Partition, BranchOrderKeepsBranchesTogether) {
  // Two branches written interleaved in the graph: a1 b1 a2 b2 a3 b3, joined by an Add.
  ModelBuilder m(4, 8);
  Value* a = m.input();
  Value* b = m.input();
  for (int i = 1; i <= 3; ++i) {
    a = m.gemm(a, 8, "a" + std::to_string(i));
    b = m.gemm(b, 8, "b" + std::to_string(i));
  }
  m.train(m.gemm(m.add(a, b, "join"), 10, "head"));
  std::vector<std::string> names;
  for (const Node* n : forward_order(m.graph(), NodeOrder::kBranch)) names.push_back(n->name);
  const std::vector<std::string> expect = {"a1", "a2", "a3", "b1", "b2", "b3", "join", "head",
                                           "loss/SoftmaxCrossEntropyLoss"};
  EXPECT_EQ(names, expect);
  // Graph order cuts interleaved branches with two live tensors; the branch order can cut one.
  PartitionOptions opts = uniform_options(2);
  opts.order = NodeOrder::kBranch;
  opts.split_at = {"b1"};
  auto plan = partition(m.graph(), opts);
  ASSERT_TRUE(plan.has_value()) << plan.status().message();
  EXPECT_EQ(plan->order, "branch");
  EXPECT_EQ(plan->stages[1].recv.size(), 1u);  // a3's output; x is loader-fed
}

// Nodes that a CUDA stage runs through the host fallback are listed per stage (and only on CUDA
// stages): Max has no native CUDA kernel, nor have the Equal and Cast of its gradient; the Gemms
// and the Relu have.
TEST(Partition, CudaStagesListTheirHostFallbackNodes) {
  ModelBuilder m(8, 16);
  Value* h = m.gemm(m.input(), 16, "fc1");
  Value* mx = m.add(m.relu(h, "act"), h, "mx", "Max");
  m.train(m.gemm(mx, 10, "fc2"));
  for (DeviceKind kind : {DeviceKind::kCpu, DeviceKind::kCuda}) {
    PartitionOptions opts = uniform_options(2);
    for (DeviceSpec& d : opts.devices) d.kind = kind;
    auto plan = partition(m.graph(), opts);
    ASSERT_TRUE(plan.has_value()) << plan.status().message();
    std::set<std::string> listed;
    for (const StagePlan& st : plan->stages)
      for (const Node* n : st.host_fallback) {
        EXPECT_TRUE(runs_on_host(n->op_type, kind, n->kernel_dtype())) << n->describe();
        EXPECT_NE(std::find(st.nodes.begin(), st.nodes.end(), n), st.nodes.end()) << n->describe() << " not in its stage";
        listed.insert(n->op_type == "Max" ? n->name : n->op_type);
      }
#ifdef PIPETRAIN_HAVE_CUDA
    if (kind == DeviceKind::kCuda) {
      EXPECT_TRUE(listed.count("mx")) << "the forward Max";
      EXPECT_FALSE(listed.count("Gemm") || listed.count("Relu") || listed.count("ReluGrad"));
      continue;
    }
#endif
    EXPECT_TRUE(listed.empty()) << device_kind_name(kind) << ": " << *listed.begin();
  }
}

}  // namespace
}  // namespace pt
