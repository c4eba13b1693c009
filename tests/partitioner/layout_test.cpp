// Hybrid parallelism in the partitioner: the ring all-reduce against a hand
// computation, a replicated stage's cost (compute on its share + all-reduce) and memory, the
// simulator's replicated pipeline against the data-parallel model, the layouts of a device count
// (one chosen, the fastest; the pipeline wins for a big MLP over a slow link, replicas win for a
// compute-heavy model with few parameters), and the reports' layout fields.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "importer/training.h"
#include "partitioner/layout.h"
#include "partitioner/partition.h"
#include "partitioner/report.h"
#include "partitioner/simulator.h"

namespace pt {
namespace {

using nlohmann::json;

// An MLP training graph: `widths` hidden Gemm + Relu layers over [batch, in], a 10-way head.
struct Mlp {
  Graph g;
  Mlp(int64_t batch, int64_t in, const std::vector<int64_t>& widths) {
    Value* cur = g.add_value("x", DType::kFloat32, {batch, in}, ValueKind::kInput);
    g.inputs = {cur};
    std::vector<int64_t> dims = widths;
    dims.push_back(10);
    for (size_t i = 0; i < dims.size(); ++i) {
      const std::string name = "fc" + std::to_string(i);
      Value* w = g.add_value(name + ".W", DType::kFloat32, {cur->dims[1], dims[i]}, ValueKind::kParameter);
      Value* b = g.add_value(name + ".b", DType::kFloat32, {dims[i]}, ValueKind::kParameter);
      Value* y = g.add_value(name + ".y", DType::kFloat32, {batch, dims[i]}, ValueKind::kActivation);
      g.add_node("Gemm", name, {cur, w, b}, {y});
      cur = y;
      if (i + 1 < dims.size()) {
        Value* r = g.add_value("relu" + std::to_string(i) + ".y", DType::kFloat32, cur->dims, ValueKind::kActivation);
        g.add_node("Relu", "relu" + std::to_string(i), {cur}, {r});
        cur = r;
      }
    }
    g.outputs = {cur};
    auto tg = build_training_graph(g, LossKind::kCrossEntropy, SgdOptions{});
    EXPECT_TRUE(tg.has_value()) << tg.status().message();
  }
};

DeviceSpec gpu() {
  DeviceSpec d;
  d.name = "gpu";
  d.kind = DeviceKind::kCuda;
  d.peak_flops = 1e13;
  d.mem_bandwidth = 1e12;
  d.kernel_overhead_s = 5e-6;
  d.memory_bytes = 64e9;
  return d;
}

PartitionOptions options(int stages, int replicas, const LinkSpec& link) {
  PartitionOptions o;
  o.devices.assign(stages, gpu());
  o.link = link;
  o.replicas = replicas;
  return o;
}

LayoutOptionsFn options_fn(const LinkSpec& link) {
  return [link](int n, int r) -> Expected<PartitionOptions> { return options(n, r, link); };
}

const LinkSpec kPcie{"pcie3", 12e9, 1e-5};

TEST(Layout, AllReduceIsTheRingFormula) {
  // 100 MB over 4 replicas, 10 GB/s, 10 us: 2 * 3/4 * 1e8 / 1e10 s + 2 * 3 * 1e-5 s = 15.06 ms.
  const LinkSpec link{"l", 1e10, 1e-5};
  EXPECT_NEAR(allreduce_ms(1e8, 4, link), 15.06, 1e-9);
  EXPECT_NEAR(allreduce_ms(1e8, 2, link), 1e3 * (1e8 / 1e10 + 2e-5), 1e-9);  // 10.02 ms
  EXPECT_EQ(allreduce_ms(1e8, 1, link), 0.0);                                  // one replica: nothing
  EXPECT_EQ(allreduce_ms(0, 8, link), 0.0);                                    // no parameters: nothing
  const LinkSpec free_bw{"free", 0, 2e-6};                                     // bandwidth <= 0: infinite
  EXPECT_NEAR(allreduce_ms(1e8, 8, free_bw), 1e3 * 2 * 7 * 2e-6, 1e-12);
}

TEST(Layout, ReplicatedStageRunsItsShareAndAllReduces) {
  Mlp m(64, 256, {512, 512, 512});
  for (int R : {2, 4}) {
    PartitionOptions o1 = options(2, 1, kPcie), oR = options(2, R, kPcie);
    o1.split_at = oR.split_at = {"fc2"};  // the same split, so stage by stage comparable
    auto p1 = partition(m.g, o1);
    auto pR = partition(m.g, oR);
    ASSERT_TRUE(p1.has_value()) << p1.status().message();
    ASSERT_TRUE(pR.has_value()) << pR.status().message();
    EXPECT_EQ(pR->replicas, R);
    EXPECT_EQ(p1->replicas, 1);
    ASSERT_EQ(pR->stages.size(), 2u);
    double worst = 0;
    for (size_t k = 0; k < 2; ++k) {
      const StagePlan &a = p1->stages[k], &b = pR->stages[k];
      SCOPED_TRACE("R " + std::to_string(R) + " stage " + std::to_string(k));
      EXPECT_EQ(a.allreduce_ms, 0.0);
      // The share's compute is 1/R of the time but for the launch overhead (one per node).
      int bwd_nodes = 0;
      for (const Node* n : a.nodes) bwd_nodes += n->phase == Phase::kBackward;
      const double oh_ms = 1e3 * gpu().kernel_overhead_s;
      const double fwd_oh = oh_ms * a.forward_nodes.size(), bwd_oh = oh_ms * bwd_nodes;
      // SpecTrain's predictions run over the whole weights on every replica.
      EXPECT_DOUBLE_EQ(b.fwd_weights_ms, a.fwd_weights_ms);
      EXPECT_DOUBLE_EQ(b.bwd_weights_ms, a.bwd_weights_ms);
      if (k == 0) {
        EXPECT_GT(a.fwd_weights_ms, 0.0);  // stage 0 of 2 predicts its forward's weights
      }
      const double af = a.fwd_ms - a.fwd_weights_ms, ab = a.bwd_ms - a.bwd_weights_ms;
      EXPECT_NEAR(b.fwd_ms - b.fwd_weights_ms, (af - fwd_oh) / R + fwd_oh, 1e-12);
      EXPECT_NEAR(b.bwd_ms - b.bwd_weights_ms, (ab - bwd_oh) / R + bwd_oh, 1e-12);
      EXPECT_GT(b.fwd_ms, a.fwd_ms / R);
      EXPECT_DOUBLE_EQ(b.update_ms, a.update_ms);  // the update is per parameter, not per sample
      EXPECT_EQ(b.param_bytes, a.param_bytes);
      EXPECT_NEAR(b.allreduce_ms, 1e3 * (2.0 * (R - 1) / R * a.param_bytes / kPcie.bandwidth + 2.0 * (R - 1) * 1e-5),
                  1e-9);
      // Activations cross the cut at the replica's share; the message count (latency) stays.
      EXPECT_EQ(b.recv_bytes, a.recv_bytes / R);
      EXPECT_EQ(b.saved_bytes, a.saved_bytes / R);
      if (k == 1) {
        const double latency_ms = a.comm_ms - 1e3 * (a.recv_bytes + a.grad_send_bytes) / kPcie.bandwidth;
        EXPECT_NEAR(b.comm_ms, 1e3 * (b.recv_bytes + b.grad_send_bytes) / kPcie.bandwidth + latency_ms, 1e-9);
      }
      // Memory: the same weights, gradients and optimizer state; the share's activations.
      EXPECT_LT(b.memory_bytes, a.memory_bytes);
      EXPECT_EQ(b.memory_bytes, stage_memory_bytes(b, 2, oR));
      EXPECT_NEAR(b.stage_ms(), b.fwd_ms + b.bwd_ms + b.update_ms + b.comm_ms + b.allreduce_ms, 1e-12);
      worst = std::max(worst, b.stage_ms());
    }
    EXPECT_NEAR(pR->bottleneck_ms, worst, 1e-12);
    // The whole mini-batch (every replica's share) per bottleneck time.
    EXPECT_NEAR(pR->predicted_samples_per_s, 1e3 * 64 / worst, 1e-6 * pR->predicted_samples_per_s);
    EXPECT_NEAR(pR->single_device_samples_per_s, p1->single_device_samples_per_s, 1e-12 * p1->single_device_samples_per_s);
  }
}

TEST(Layout, AGraphOfTheReplicasShareIsNotScaledAgain) {
  // The runtime imports each replica's graph at batch / R and plans it with graph_replicas = R:
  // its stage times are the graph's own, the throughput counts R x its batch.
  Mlp share(32, 256, {512, 512});
  PartitionOptions o1 = options(2, 1, kPcie), oR = options(2, 2, kPcie);
  o1.split_at = oR.split_at = {"fc1"};
  oR.graph_replicas = 2;
  auto p1 = partition(share.g, o1);
  auto pR = partition(share.g, oR);
  ASSERT_TRUE(p1.has_value() && pR.has_value());
  EXPECT_EQ(pR->batch_size, 32);
  EXPECT_EQ(pR->graph_replicas, 2);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_DOUBLE_EQ(pR->stages[k].fwd_ms, p1->stages[k].fwd_ms);
    EXPECT_EQ(pR->stages[k].saved_bytes, p1->stages[k].saved_bytes);
    EXPECT_GT(pR->stages[k].allreduce_ms, 0);
  }
  EXPECT_NEAR(pR->predicted_samples_per_s, 1e3 * 64 / pR->bottleneck_ms, 1e-6 * pR->predicted_samples_per_s);
  // The simulator counts 64 samples per mini-batch: twice what the same times give for 32.
  Plan half = *pR;
  half.graph_replicas = 1;
  const SimResult s = simulate(*pR, 8), h = simulate(half, 8);
  EXPECT_GT(h.samples_per_s, 0);
  EXPECT_NEAR(s.samples_per_s, 2 * h.samples_per_s, 1e-9 * s.samples_per_s);
}

TEST(Layout, OneReplicaIsThePipelineAsBefore) {
  // replicas = 1 (and graph_replicas = 1) take the original arithmetic: the pipeline layout's row
  // is exactly partition() + simulate() of the plain options.
  Mlp m(32, 128, {256, 256, 256, 256});
  auto layouts = evaluate_layouts(m.g, 4, options_fn(kPcie));
  ASSERT_TRUE(layouts.has_value()) << layouts.status().message();
  ASSERT_EQ(layouts->size(), 3u);  // 4x1, 2x2, 1x4
  EXPECT_EQ((*layouts)[0].stages, 4);
  EXPECT_EQ((*layouts)[0].replicas, 1);
  PartitionOptions plain;
  plain.devices.assign(4, gpu());
  plain.link = kPcie;
  auto p = partition(m.g, plain);
  ASSERT_TRUE(p.has_value());
  const SimResult s = simulate(*p, 4 * 4 + 4);
  EXPECT_EQ((*layouts)[0].samples_per_s, s.samples_per_s);
  EXPECT_EQ((*layouts)[0].bubble_fraction, s.bubble_fraction);
  EXPECT_EQ((*layouts)[0].allreduce_ms, 0.0);
  for (const StagePlan& st : p->stages) EXPECT_EQ(st.allreduce_ms, 0.0);
}

TEST(Layout, DataParallelLayoutIsTheDataParallelModel) {
  // 1 x D through partition() + simulate() equals simulate_data_parallel on the one-stage plan
  // when kernels have no launch overhead (simulate_data_parallel divides all of the time by D);
  // with an overhead the layout, which keeps it whole on every replica, is slower.
  Mlp m(64, 256, {1024, 1024});
  auto no_overhead = [](int n, int r) {
    PartitionOptions o = options(n, r, kPcie);
    for (DeviceSpec& d : o.devices) d.kernel_overhead_s = 0;
    return o;
  };
  auto p1 = partition(m.g, no_overhead(1, 1));
  auto p1_oh = partition(m.g, options(1, 1, kPcie));
  ASSERT_TRUE(p1.has_value() && p1_oh.has_value());
  for (int D : {2, 4, 8}) {
    auto pD = partition(m.g, no_overhead(1, D));
    auto pD_oh = partition(m.g, options(1, D, kPcie));
    ASSERT_TRUE(pD.has_value() && pD_oh.has_value());
    const SimResult a = simulate(*pD, 8), b = simulate_data_parallel(*p1, D, kPcie);
    EXPECT_NEAR(a.samples_per_s, b.samples_per_s, 1e-9 * b.samples_per_s) << D;
    EXPECT_NEAR(a.bubble_fraction, b.bubble_fraction, 1e-9) << D;
    EXPECT_LT(simulate(*pD_oh, 8).samples_per_s, simulate_data_parallel(*p1_oh, D, kPcie).samples_per_s) << D;
    // The simulated all-reduce sits between the backward and the update.
    int allreduces = 0;
    for (const SimEvent& e : a.events) allreduces += e.kind == SimEvent::kAllReduce;
    EXPECT_EQ(allreduces, 8) << D;
  }
}

void expect_one_chosen_fastest(const std::vector<LayoutOption>& layouts) {
  int chosen = 0;
  for (const LayoutOption& L : layouts) chosen += L.chosen;
  ASSERT_EQ(chosen, 1);
  const LayoutOption& c = layouts[chosen_layout(layouts)];
  EXPECT_TRUE(c.fits);
  for (const LayoutOption& L : layouts) {
    if (L.fits) {
      EXPECT_GE(c.samples_per_s, L.samples_per_s) << layout_name(L.stages, L.replicas);
    }
  }
}

TEST(Layout, BigMlpOverASlowLinkPrefersThePipeline) {
  // 4 x 4096-wide layers: ~50M parameters, little compute at batch 16; all-reducing 200 MB over
  // 1 GB/s costs far more than sending 16 x 4096 activations.
  Mlp m(16, 4096, {4096, 4096, 4096});
  const LinkSpec slow{"slow", 1e9, 1e-5};
  auto layouts = evaluate_layouts(m.g, 4, options_fn(slow));
  ASSERT_TRUE(layouts.has_value()) << layouts.status().message();
  expect_one_chosen_fastest(*layouts);
  const LayoutOption& c = (*layouts)[chosen_layout(*layouts)];
  EXPECT_EQ(c.stages, 4);
  EXPECT_EQ(c.replicas, 1);
  EXPECT_EQ(layout_name(c.stages, c.replicas), "pipeline 4x1");
  EXPECT_GT((*layouts).back().allreduce_ms, 100.0);  // 1x4: 2 * 3/4 * 200 MB / 1 GB/s
}

TEST(Layout, ComputeHeavyModelWithFewParametersPrefersReplicas) {
  // Narrow layers at a large batch: lots of compute, 200 KB of parameters over NVLink; the
  // pipeline's stages are uneven and send 32 MB of activations per cut, the replicas do neither.
  Mlp m(65536, 128, {128, 128, 128});
  const LinkSpec fast{"nvlink", 300e9, 2e-6};
  auto layouts = evaluate_layouts(m.g, 4, options_fn(fast));
  ASSERT_TRUE(layouts.has_value()) << layouts.status().message();
  expect_one_chosen_fastest(*layouts);
  const LayoutOption& c = (*layouts)[chosen_layout(*layouts)];
  EXPECT_GT(c.replicas, 1) << layout_name(c.stages, c.replicas);
  EXPECT_GT(c.samples_per_s, (*layouts)[0].samples_per_s);  // faster than the pipeline 4x1
}

TEST(Layout, LayoutsThatCannotSplitAreListedNotChosen) {
  // One Gemm and the loss: two forward nodes cannot make four stages.
  Mlp m(32, 16, {});
  auto layouts = evaluate_layouts(m.g, 4, options_fn(kPcie));
  ASSERT_TRUE(layouts.has_value());
  ASSERT_EQ(layouts->size(), 3u);
  EXPECT_FALSE((*layouts)[0].fits);  // 4x1: 4 stages of 2 forward nodes
  EXPECT_NE((*layouts)[0].why_not.find("forward nodes"), std::string::npos) << (*layouts)[0].why_not;
  EXPECT_FALSE((*layouts)[0].chosen);
  expect_one_chosen_fastest(*layouts);
  EXPECT_EQ(layout_name(2, 2), "hybrid 2x2");
  EXPECT_EQ(layout_name(1, 4), "data-parallel 1x4");
}

TEST(Layout, ReportsShowReplicasAndTheLayouts) {
  Mlp m(64, 256, {512, 512});
  auto layouts = evaluate_layouts(m.g, 4, options_fn(kPcie));
  ASSERT_TRUE(layouts.has_value());
  auto p = partition(m.g, options(2, 2, kPcie));
  ASSERT_TRUE(p.has_value());
  p->layouts = *layouts;
  ReportInputs r;
  r.plan = &*p;
  r.graph = &m.g;
  const json j = json::parse(report_json(r));
  EXPECT_EQ(j.at("replicas"), 2);
  EXPECT_EQ(j.at("device_count"), 4);
  EXPECT_EQ(j.at("graph_replicas"), 1);
  EXPECT_EQ(j.at("replica_link").at("name"), "pcie3");
  for (const json& s : j.at("stages")) EXPECT_GT(s.at("allreduce_ms").get<double>(), 0);
  ASSERT_EQ(j.at("layouts").size(), 3u);
  int chosen = 0;
  for (const json& l : j["layouts"]) {
    for (const char* k : {"name", "stages", "replicas", "devices", "fits", "samples_per_s", "bubble_fraction",
                          "peak_memory_bytes", "allreduce_ms", "chosen"})
      EXPECT_TRUE(l.contains(k)) << k;
    EXPECT_EQ(l["devices"], 4);
    chosen += l["chosen"].get<bool>();
  }
  EXPECT_EQ(chosen, 1);
  EXPECT_EQ(j["layouts"][1]["name"], "hybrid 2x2");
  const std::string t = report_text(r);
  EXPECT_NE(t.find("2 replicas (4 devices)"), std::string::npos) << t;
  EXPECT_NE(t.find("layouts of 4 devices"), std::string::npos) << t;
  EXPECT_NE(t.find("<- chosen"), std::string::npos) << t;
  const std::string h = report_html(r);
  EXPECT_NE(h.find("Stages x replicas"), std::string::npos);
  EXPECT_NE(h.find("data-parallel 1x4"), std::string::npos);
  // A plan with one replica and no layouts keeps its JSON as before, plus replicas: 1.
  auto p1 = partition(m.g, options(2, 1, kPcie));
  ASSERT_TRUE(p1.has_value());
  r.plan = &*p1;
  const json j1 = json::parse(report_json(r));
  EXPECT_EQ(j1.at("replicas"), 1);
  EXPECT_FALSE(j1.contains("layouts"));
  EXPECT_FALSE(j1.contains("replica_link"));
}

TEST(Layout, WhatIfTableMarksTheChosenRow) {
  std::vector<WhatIfRow> rows = {{"1f1b", 1, 1000, 0, 1'000'000}, {"hybrid 2x2", 4, 3000, 0.1, 500'000}};
  rows[1].chosen = true;
  const std::string t = what_if_table(rows);
  EXPECT_NE(t.find("hybrid 2x2"), std::string::npos) << t;
  EXPECT_EQ(t.find("<- chosen"), t.rfind("<- chosen"));
  EXPECT_GT(t.find("<- chosen"), t.find("hybrid 2x2"));
}

}  // namespace
}  // namespace pt
