// The partition reports on hand-built plans: partition.json has every field of its schema
// (partitioner/report_json.cpp) with the plan's values, the terminal table has each stage, the HTML is self-contained
// with its four pictures and escapes node names, the DOT renders with Graphviz, and
// write_reports leaves all five files (and no temporaries) in the run folder.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unistd.h>

#include "partitioner/report.h"
#include "partitioner/simulator.h"

namespace pt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A chain of `layers` Conv-Relu blocks with a residual Add every third block, a node named
// "a<b&c" in the middle, then Flatten-Gemm-loss. Returns the forward nodes in order.
std::vector<const Node*> build_model(Graph& g, int layers) {
  Value* x = g.add_value("input", DType::kFloat32, {32, 16, 32, 32}, ValueKind::kInput);
  Value* y = g.add_value("label", DType::kFloat32, {32, 10}, ValueKind::kLabel);
  g.inputs.push_back(x);
  std::vector<const Node*> order;
  Value* cur = x;
  Value* skip = x;
  for (int i = 0; i < layers; ++i) {
    const std::string id = std::to_string(i);
    Value* w = g.add_value("conv" + id + ".weight", DType::kFloat32, {16, 16, 3, 3}, ValueKind::kParameter);
    Value* c = g.add_value("conv" + id + ".out", DType::kFloat32, {32, 16, 32, 32}, ValueKind::kActivation);
    order.push_back(g.add_node("Conv", i == layers / 2 ? "a<b&c" : "conv" + id, {cur, w}, {c}));
    Value* r = g.add_value("relu" + id + ".out", DType::kFloat32, {32, 16, 32, 32}, ValueKind::kActivation);
    order.push_back(g.add_node("Relu", "relu" + id, {c}, {r}));
    cur = r;
    if (i % 3 == 2) {
      Value* s = g.add_value("add" + id + ".out", DType::kFloat32, {32, 16, 32, 32}, ValueKind::kActivation);
      order.push_back(g.add_node("Add", "add" + id, {cur, skip}, {s}));
      cur = skip = s;
    }
  }
  Value* f = g.add_value("flat", DType::kFloat32, {32, 16 * 32 * 32}, ValueKind::kActivation);
  order.push_back(g.add_node("Flatten", "flatten", {cur}, {f}));
  Value* w = g.add_value("fc.weight", DType::kFloat32, {10, 16 * 32 * 32}, ValueKind::kParameter);
  Value* o = g.add_value("logits", DType::kFloat32, {32, 10}, ValueKind::kActivation);
  order.push_back(g.add_node("Gemm", "fc", {f, w}, {o}, {}));
  Value* l = g.add_value("loss", DType::kFloat32, {}, ValueKind::kActivation);
  order.push_back(g.add_node("SoftmaxCrossEntropyLoss", "loss", {o, y}, {l}, {}, Phase::kLoss));
  g.outputs.push_back(o);
  g.loss = l;
  return order;
}

DeviceSpec h100() {
  DeviceSpec d;
  d.name = "H100-SXM";
  d.kind = DeviceKind::kCuda;
  d.peak_flops = 67e12;
  d.mem_bandwidth = 3.35e12;
  d.memory_bytes = 80e9;
  d.kernel_overhead_s = 4e-6;
  return d;
}

// A plan cutting `order` at the given node counts per stage, with made-up but consistent costs.
Plan make_plan(const std::vector<const Node*>& order, const std::vector<int>& balance) {
  Plan p;
  p.model = "resnet_like.onnx";
  p.batch_size = 32;
  p.link = {"pcie4", 25e9, 5e-6};
  size_t next = 0;
  for (size_t k = 0; k < balance.size(); ++k) {
    StagePlan s;
    s.index = static_cast<int>(k);
    s.device = h100();
    for (int i = 0; i < balance[k]; ++i) {
      const Node* n = order[next++];
      s.forward_nodes.push_back(n);
      s.nodes.push_back(n);
      for (Value* v : n->inputs) {
        if (v->kind == ValueKind::kParameter) {
          s.params.push_back(v);
          s.param_count += v->size();
          s.param_bytes += static_cast<int64_t>(v->bytes());
        }
      }
    }
    s.fwd_ms = 0.4 + 0.1 * static_cast<double>(k) + 0.02 * balance[k];
    s.bwd_ms = 2 * s.fwd_ms;
    s.update_ms = 0.01;
    s.saved_bytes = 4 << 20;
    s.in_flight = static_cast<int>(balance.size() - k);
    s.memory_bytes = s.param_bytes * 3 + s.saved_bytes * s.in_flight;
    p.stages.push_back(std::move(s));
  }
  // Boundary tensors: every value produced in an earlier stage and read here.
  std::map<const Node*, size_t> stage_of;
  for (size_t k = 0; k < p.stages.size(); ++k)
    for (const Node* n : p.stages[k].forward_nodes) stage_of[n] = k;
  for (size_t k = 0; k < p.stages.size(); ++k) {
    std::set<const Value*> seen;
    for (const Node* n : p.stages[k].forward_nodes) {
      for (const Value* v : n->inputs) {
        if (!v->producer || stage_of.at(v->producer) == k || !seen.insert(v).second) continue;
        StagePlan& from = p.stages[stage_of.at(v->producer)];
        p.stages[k].recv.push_back(v);
        p.stages[k].recv_bytes += static_cast<int64_t>(v->bytes());
        from.send.push_back(v);
        from.send_bytes += static_cast<int64_t>(v->bytes());
      }
    }
    p.stages[k].comm_ms = 1e3 * static_cast<double>(p.stages[k].recv_bytes) * 2 / p.link.bandwidth;
  }
  double max_ms = 0, sum = 0;
  for (const StagePlan& s : p.stages) {
    max_ms = std::max(max_ms, s.stage_ms());
    sum += s.stage_ms();
  }
  p.bottleneck_ms = max_ms;
  p.imbalance = max_ms / (sum / static_cast<double>(p.stages.size()));
  p.predicted_samples_per_s = 1e3 * static_cast<double>(p.batch_size) / max_ms;
  p.single_device_samples_per_s = 1e3 * static_cast<double>(p.batch_size) / sum;
  return p;
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    order_ = build_model(g_, 6);  // 6 conv + 6 relu + 2 add + flatten + fc + loss = 17 nodes
    plan_ = make_plan(order_, {6, 6, 5});
    sim_ = simulate(plan_, 12);
    in_.plan = &plan_;
    in_.sim = &sim_;
    in_.graph = &g_;
  }
  Graph g_;
  std::vector<const Node*> order_;
  Plan plan_;
  SimResult sim_;
  ReportInputs in_;
};

TEST_F(ReportTest, JsonHasEveryRequiredField) {
  const json j = json::parse(report_json(in_));
  EXPECT_EQ(j.at("model"), "resnet_like.onnx");
  EXPECT_EQ(j.at("devices"), 3);
  EXPECT_EQ(j.at("schedule"), "1f1b");
  EXPECT_EQ(j.at("weights"), "spectrain");
  EXPECT_EQ(j.at("batch_size"), 32);
  EXPECT_EQ(j.at("micro_batches"), 1);
  EXPECT_EQ(j.at("link").at("name"), "pcie4");
  EXPECT_EQ(j.at("manual"), false);
  EXPECT_NEAR(j.at("bottleneck_ms").get<double>(), plan_.bottleneck_ms, 1e-12);
  EXPECT_NEAR(j.at("predicted_samples_per_s").get<double>(), plan_.predicted_samples_per_s, 1e-9);
  EXPECT_NEAR(j.at("imbalance").get<double>(), plan_.imbalance, 1e-12);
  EXPECT_FALSE(j.contains("automatic"));
  ASSERT_EQ(j.at("stages").size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const json& s = j["stages"][k];
    const StagePlan& p = plan_.stages[k];
    EXPECT_EQ(s.at("index"), p.index);
    EXPECT_EQ(s.at("device"), "H100-SXM");
    ASSERT_EQ(s.at("nodes").size(), p.forward_nodes.size());
    for (size_t i = 0; i < p.forward_nodes.size(); ++i) EXPECT_EQ(s["nodes"][i], p.forward_nodes[i]->name);
    EXPECT_EQ(s.at("param_count"), p.param_count);
    EXPECT_EQ(s.at("param_bytes"), p.param_bytes);
    EXPECT_DOUBLE_EQ(s.at("fwd_ms").get<double>(), p.fwd_ms);
    EXPECT_DOUBLE_EQ(s.at("bwd_ms").get<double>(), p.bwd_ms);
    EXPECT_EQ(s.at("memory_bytes"), p.memory_bytes);
    EXPECT_EQ(s.at("send_bytes"), p.send_bytes);
    EXPECT_EQ(s.at("recv_bytes"), p.recv_bytes);
    EXPECT_FALSE(s.contains("measured"));
  }
  EXPECT_EQ(j["stages"][1]["nodes"][1], "a<b&c");  // unescaped in JSON, escaped by the parser
  EXPECT_GT(j["stages"][0]["send_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["stages"][2]["send_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(j.contains("simulation"));
}

TEST_F(ReportTest, JsonCarriesMeasuredTimesAndTheAutomaticPlan) {
  plan_.stages[0].measured_fwd_ms = 0.5;
  plan_.stages[0].measured_bwd_ms = 1.0;
  plan_.stages[0].measured_update_ms = 0.25;  // updates after the backward, timed apart
  Plan automatic = make_plan(order_, {5, 6, 6});
  plan_.manual = true;
  in_.automatic = &automatic;
  const json j = json::parse(report_json(in_));
  const json& m = j["stages"][0].at("measured");
  EXPECT_DOUBLE_EQ(m.at("fwd_ms").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(m.at("bwd_ms").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(m.at("update_ms").get<double>(), 0.25);
  // The whole stage on both sides: forward, backward and updates.
  const StagePlan& s0 = plan_.stages[0];
  ASSERT_GT(s0.update_ms, 0);
  const double pred = s0.fwd_ms + s0.bwd_ms + s0.update_ms;
  EXPECT_NEAR(m.at("error").get<double>(), (pred - 1.75) / 1.75, 1e-12);
  EXPECT_FALSE(j["stages"][1].contains("measured"));
  EXPECT_EQ(j.at("manual"), true);
  EXPECT_NEAR(j.at("automatic").at("bottleneck_ms").get<double>(), automatic.bottleneck_ms, 1e-12);
  EXPECT_NEAR(j["automatic"].at("manual_over_automatic").get<double>(), plan_.bottleneck_ms / automatic.bottleneck_ms, 1e-12);
}

TEST_F(ReportTest, TextHasEachStageAndTheSummary) {
  const std::string t = report_text(in_);
  std::istringstream lines(t);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    for (int k = 0; k < 3; ++k) {
      if (line.rfind(std::string(4, ' ') + std::to_string(k) + "  H100-SXM", 0) == 0) ++rows;
    }
  }
  EXPECT_EQ(rows, 3) << t;
  EXPECT_NE(t.find("conv0 -> relu2"), std::string::npos) << t;
  EXPECT_NE(t.find("bottleneck"), std::string::npos);
  EXPECT_NE(t.find("imbalance"), std::string::npos);
  EXPECT_NE(t.find("samples/s"), std::string::npos);
  EXPECT_NE(t.find("over one device"), std::string::npos);
  EXPECT_EQ(t.find("meas fwd"), std::string::npos);  // nothing measured yet

  plan_.stages[2].measured_fwd_ms = 1.0;
  plan_.stages[2].measured_bwd_ms = 2.0;
  Plan automatic = make_plan(order_, {5, 6, 6});
  in_.automatic = &automatic;
  const std::string m = report_text(in_);
  EXPECT_NE(m.find("meas fwd"), std::string::npos) << m;
  EXPECT_NE(m.find("%"), std::string::npos);
  EXPECT_NE(m.find("manual plan: bottleneck"), std::string::npos) << m;
}

// Host-fallback nodes: listed per stage in the JSON (empty lists elsewhere) and named in one
// warning line per stage of the text, at most eight names and a count of the rest.
TEST_F(ReportTest, HostFallbackNodesAreListedAndWarned) {
  EXPECT_EQ(report_text(in_).find("warning:"), std::string::npos);
  plan_.stages[1].host_fallback = {order_[6], order_[7]};
  std::vector<const Node*> many(order_.begin(), order_.begin() + 10);
  plan_.stages[2].host_fallback = many;
  const json j = json::parse(report_json(in_));
  EXPECT_EQ(j["stages"][0].at("host_fallback"), json::array());
  EXPECT_EQ(j["stages"][1].at("host_fallback"), json::array({order_[6]->name, order_[7]->name}));
  EXPECT_EQ(j["stages"][2].at("host_fallback").size(), 10u);
  const std::string t = report_text(in_);
  const std::string one = "warning: stage 1 (H100-SXM) runs 2 nodes on the host through the CUDA fallback: " +
                          order_[6]->name + " (" + order_[6]->op_type + "), " + order_[7]->name + " (" +
                          order_[7]->op_type + ")\n";
  EXPECT_NE(t.find(one), std::string::npos) << t;
  EXPECT_NE(t.find("warning: stage 2 (H100-SXM) runs 10 nodes"), std::string::npos) << t;
  EXPECT_NE(t.find(", and 2 more\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("warning: stage 0"), std::string::npos) << t;
}

TEST_F(ReportTest, HtmlIsSelfContainedWithItsPicturesAndEscapes) {
  const std::string h = report_html(in_);
  EXPECT_EQ(h.find("http://"), std::string::npos);
  EXPECT_EQ(h.find("https://"), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
  for (const char* id : {"svg-stage-times", "svg-memory", "svg-timeline", "svg-layers"})
    EXPECT_NE(h.find(std::string("<svg id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_NE(h.find("a&lt;b&amp;c"), std::string::npos);
  EXPECT_EQ(h.find("a<b&c"), std::string::npos);
  // One box per simulated pass in the window, each with a tooltip naming it.
  EXPECT_NE(h.find("stage 0 forward of mini-batch 0"), std::string::npos);
  EXPECT_NE(h.find("stage 2 backward of mini-batch 0"), std::string::npos);
}

TEST_F(ReportTest, HtmlWithoutASimulationRunsOne) {
  in_.sim = nullptr;
  plan_.schedule = Schedule::kGPipe;
  plan_.micro_batches = 4;
  const std::string h = report_html(in_);
  EXPECT_NE(h.find("micro-batch 3"), std::string::npos);
}

TEST_F(ReportTest, DotRendersWithGraphviz) {
  const std::string d = report_dot(in_);
  EXPECT_NE(d.find("cluster_stage2"), std::string::npos);
  EXPECT_NE(d.find("color=\"#d62728\""), std::string::npos);  // cut edges
  EXPECT_NE(d.find("cluster_legend"), std::string::npos);
  EXPECT_NE(d.find("a<b&c"), std::string::npos);  // a quoted DOT string needs no escaping of < or &
  if (std::system("command -v dot > /dev/null 2>&1") != 0) GTEST_SKIP() << "Graphviz `dot` is not installed";
  const fs::path dir = fs::temp_directory_path() / ("pipetrain-dot-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "p.dot") << d;
  const std::string cmd = "dot -Tsvg " + (dir / "p.dot").string() + " -o " + (dir / "p.svg").string() + " 2> " +
                          (dir / "err.txt").string();
  const int rc = std::system(cmd.c_str());
  std::ifstream err(dir / "err.txt");
  const std::string err_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << err_text;
  EXPECT_TRUE(err_text.empty()) << err_text;  // no warnings either
  ASSERT_TRUE(fs::exists(dir / "p.svg"));
  std::ifstream svg(dir / "p.svg");
  const std::string svg_text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg_text.find("a&lt;b&amp;c"), std::string::npos);
  fs::remove_all(dir);
}

TEST_F(ReportTest, WriteReportsWritesEveryFileAtomically) {
  const fs::path dir = fs::temp_directory_path() / ("pipetrain-reports-" + std::to_string(::getpid())) / "run";
  ASSERT_TRUE(write_reports(in_, dir.string()).is_ok());
  for (const char* f : {"partition.txt", "partition.json", "partition.html", "partition.dot", "trace.json"}) {
    EXPECT_TRUE(fs::exists(dir / f)) << f;
    EXPECT_GT(fs::file_size(dir / f), 100u) << f;
  }
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  std::ifstream jf(dir / "partition.json");
  json parsed;
  EXPECT_NO_THROW(parsed = json::parse(jf));
  std::ifstream tf(dir / "trace.json");
  EXPECT_NO_THROW(parsed = json::parse(tf));
  fs::remove_all(dir.parent_path());
}

// Not a check by itself: writes sample reports for tests/partitioner/render_html_test.py, which
// renders them in headless Chromium. Runs only when PIPETRAIN_REPORT_SAMPLE_DIR is set.
TEST(ReportSample, WritesSampleReports) {
  const char* out = std::getenv("PIPETRAIN_REPORT_SAMPLE_DIR");
  if (!out) GTEST_SKIP() << "set PIPETRAIN_REPORT_SAMPLE_DIR to write the sample reports";
  Graph g;
  const std::vector<const Node*> order = build_model(g, 15);  // 15 + 15 + 5 + 3 = 38 nodes
  Plan automatic = make_plan(order, {10, 10, 9, 9});
  Plan manual = make_plan(order, {12, 9, 9, 8});
  manual.manual = true;
  for (size_t k = 0; k < manual.stages.size(); ++k) {
    manual.stages[k].measured_fwd_ms = manual.stages[k].fwd_ms * (1.05 + 0.1 * static_cast<double>(k));
    manual.stages[k].measured_bwd_ms = manual.stages[k].bwd_ms * (0.9 + 0.05 * static_cast<double>(k));
  }
  SimResult sim = simulate(manual, 16);
  ReportInputs r{&manual, &automatic, &sim, &g};
  ASSERT_TRUE(write_reports(r, std::string(out) + "/1f1b").is_ok());
  Plan gpipe = make_plan(order, {10, 10, 9, 9});
  gpipe.schedule = Schedule::kGPipe;
  gpipe.micro_batches = 4;
  for (StagePlan& s : gpipe.stages) s.in_flight = 4;
  SimResult gsim = simulate(gpipe, 4);
  ReportInputs rg{&gpipe, nullptr, &gsim, &g};
  ASSERT_TRUE(write_reports(rg, std::string(out) + "/gpipe").is_ok());
  std::printf("sample reports in %s/{1f1b,gpipe}\n", out);
}

}  // namespace
}  // namespace pt
