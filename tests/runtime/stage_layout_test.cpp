// The stage layout is computed once (partitioner/stage_layout.h): the layout partition.json
// prints is the one the runtime wires its stages with (every link, its ends and its values in
// order, and the parameters each stage owns), the boundary tensors the report lists are the ones
// the cost model charged, on models with weights shared across stages and on a residual CNN whose
// skip connection crosses a stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "importer/importer.h"
#include "importer/training.h"
#include "partitioner/cost_model.h"
#include "partitioner/partition.h"
#include "partitioner/report.h"
#include "runtime/pipeline/pipeline.h"
#include "tests/python_interpreter.h"

namespace pt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path& model_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("pipetrain-layout-models-" + std::to_string(::getpid()));
    const std::string cmd = testing::python() + " " PIPETRAIN_SOURCE_DIR "/tests/python/make_shared_weight_models.py " + d.string();
    if (std::system(cmd.c_str()) != 0) return fs::path();
    return d;
  }();
  return dir;
}

struct Case {
  const char* model;
  std::vector<int> balance;  // forward nodes (with the loss) per stage
  Schedule schedule;
};

std::vector<std::string> names(const json& a) { return a.get<std::vector<std::string>>(); }

void check_case(const Case& c) {
  SCOPED_TRACE(std::string(c.model) + " on " + std::to_string(c.balance.size()) + " stages, " + schedule_name(c.schedule));
  ImportOptions io;
  io.fuse.epilogue = false;  // per-node cuts of the digits MLP (Gemm | Relu): no epilogue fusion
  io.batch_size = 4;
  auto m = import_onnx((model_dir() / (std::string(c.model) + ".onnx")).string(), io);
  ASSERT_TRUE(m) << m.status().message();
  Graph& g = *m->graph;
  auto tg = build_training_graph(g, LossKind::kCrossEntropy, SgdOptions{0.9f, 0.0f});
  ASSERT_TRUE(tg) << tg.status().message();
  PartitionOptions po;
  for (size_t k = 0; k < c.balance.size(); ++k) {
    DeviceSpec d;
    d.name = "cpu" + std::to_string(k);
    d.kind = DeviceKind::kCpu;
    d.peak_flops = 1e11;
    d.mem_bandwidth = 1e10;
    d.memory_bytes = 1e12;
    po.devices.push_back(d);
  }
  po.link.bandwidth = 1e10;
  po.schedule = c.schedule;
  po.micro_batches = c.schedule == Schedule::kGPipe ? 2 : 1;
  po.balance = c.balance;
  auto plan = partition(g, po);
  ASSERT_TRUE(plan) << plan.status().message();

  ReportInputs ri;
  ri.plan = &*plan;
  const json report = json::parse(report_json(ri));
  ASSERT_TRUE(report.contains("layout"));
  const json& layout = report["layout"];

  PipelineOptions opts;
  opts.schedule = c.schedule;
  opts.micro_batches = po.micro_batches;
  auto trainer = PipelineTrainer::create(g, *tg, *plan, opts);
  ASSERT_TRUE(trainer) << trainer.status().message();

  // Every link the runtime wired is one the report prints, in the same order, and none is missing.
  std::map<std::string, json> printed;  // kind -> the report's list of that kind, in order
  for (const char* kind : {"activations", "gradients", "weights"}) printed[kind] = json::array();
  for (const auto& l : (*trainer)->wired_links()) {
    json j = l.kind == "weights" ? json{{"owner", l.from}, {"reader", l.to}, {"backward", l.backward}, {"values", l.values}}
                                 : json{{"from", l.from}, {"to", l.to}, {"values", l.values}};
    printed[l.kind].push_back(j);
  }
  for (const char* kind : {"activations", "gradients"}) {
    json want = json::array();
    for (const json& f : layout[kind]) want.push_back({{"from", f["from"]}, {"to", f["to"]}, {"values", f["values"]}});
    EXPECT_EQ(printed[kind], want) << kind;
  }
  json want_weights = json::array();
  for (const json& f : layout["weights"])
    want_weights.push_back({{"owner", f["owner"]}, {"reader", f["reader"]}, {"backward", f["backward"]}, {"values", f["values"]}});
  EXPECT_EQ(printed["weights"], want_weights);

  const auto owned = (*trainer)->stage_params();
  ASSERT_EQ(owned.size(), layout["stages"].size());
  std::set<std::string> all_owned;
  for (size_t k = 0; k < owned.size(); ++k) {
    const json& ls = layout["stages"][k];
    EXPECT_EQ(owned[k], names(ls["owns"])) << "stage " << k;
    all_owned.insert(owned[k].begin(), owned[k].end());
    // The stage's table in the report is the layout's, and its boundary is what the cost model
    // charged the stage for (recv_bytes counts every received activation once).
    const json& st = report["stages"][k];
    EXPECT_EQ(names(st["recv"]), names(ls["recv"]));
    EXPECT_EQ(names(st["send"]), names(ls["send"]));
    EXPECT_EQ(names(st["shared"]), names(ls["shared"]));
    double recv_bytes = 0;
    for (const Value* v : plan->stages[k].recv) recv_bytes += cost_value_bytes(v);
    EXPECT_EQ(static_cast<int64_t>(recv_bytes), st["recv_bytes"].get<int64_t>()) << "stage " << k;
    // What the stage receives is what the runtime's links into it carry.
    std::set<std::string> into;
    for (const auto& l : (*trainer)->wired_links())
      if (l.kind == "activations" && l.to == static_cast<int>(k)) into.insert(l.values.begin(), l.values.end());
    const auto recv = names(ls["recv"]);
    EXPECT_EQ(into, std::set<std::string>(recv.begin(), recv.end())) << "stage " << k;
  }
  // Every trained parameter has exactly one owner.
  EXPECT_EQ(all_owned.size(), tg->params.size());
}

TEST(StageLayout, ReportPrintsTheLayoutTheRuntimeWires) {
  if (!testing::have_python() || model_dir().empty())
    GTEST_SKIP() << "numpy/onnx missing";
  for (const Case& c : {Case{"shared_mlp", {3, 3, 2}, Schedule::k1F1B}, Case{"shared_mlp", {2, 2, 2, 2}, Schedule::kGPipe},
                        Case{"tied_lm", {2, 2, 2, 1}, Schedule::k1F1B}, Case{"tied_lm", {4, 3}, Schedule::kGPipe},
                        Case{"residual_cnn", {2, 3, 4, 4}, Schedule::k1F1B}, Case{"residual_cnn", {2, 5, 6}, Schedule::kGPipe}})
    check_case(c);
}

// The cases above are what they claim: weights really cross stages (1F1B: separate links for the
// readers' forward and backward passes), and the residual CNN's skip goes from stage 0 straight
// into stage 2 past stage 1 (its gradient goes back through stage 1, which holds the sum of a's
// gradients: autodiff's Add goes with the earlier reader).
TEST(StageLayout, SkipConnectionsAndSharedWeightsCrossStages) {
  if (!testing::have_python() || model_dir().empty())
    GTEST_SKIP() << "numpy/onnx missing";
  auto layout_of = [](const char* model, std::vector<int> balance) {
    ImportOptions io;
    io.fuse.epilogue = false;  // per-node cuts of the digits MLP (Gemm | Relu): no epilogue fusion
    io.batch_size = 4;
    auto m = import_onnx((model_dir() / (std::string(model) + ".onnx")).string(), io);
    EXPECT_TRUE(m);
    auto tg = build_training_graph(*m->graph, LossKind::kCrossEntropy, SgdOptions{0.9f, 0.0f});
    EXPECT_TRUE(tg);
    PartitionOptions po;
    for (size_t k = 0; k < balance.size(); ++k) {
      DeviceSpec d;
      d.kind = DeviceKind::kCpu;
      d.peak_flops = 1e11;
      d.mem_bandwidth = 1e10;
      d.memory_bytes = 1e12;
      po.devices.push_back(d);
    }
    po.link.bandwidth = 1e10;
    po.balance = balance;
    auto plan = partition(*m->graph, po);
    EXPECT_TRUE(plan) << plan.status().message();
    ReportInputs ri;
    ri.plan = &*plan;
    return json::parse(report_json(ri))["layout"];
  };
  const json res = layout_of("residual_cnn", {2, 3, 4, 4});
  bool skip = false;
  size_t grads_2_to_1 = 0;
  for (const json& f : res["activations"])
    if (f["from"] == 0 && f["to"] == 2) skip = names(f["values"]) == std::vector<std::string>{"a"};
  for (const json& f : res["gradients"]) {
    EXPECT_EQ(f["from"].get<int>(), f["to"].get<int>() + 1) << res.dump();
    if (f["from"] == 2 && f["to"] == 1) grads_2_to_1 = f["values"].size();
  }
  EXPECT_TRUE(skip) << res.dump();
  EXPECT_EQ(grads_2_to_1, 2u) << res.dump();  // the main path's and the skip's
  EXPECT_EQ(names(res["stages"][1]["recv"]), std::vector<std::string>{"a"});
  EXPECT_EQ(names(res["stages"][0]["owns"]), (std::vector<std::string>{"C0", "c0"}));

  const json tied = layout_of("tied_lm", {2, 2, 2, 1});
  std::set<std::tuple<int, int, bool>> served;
  for (const json& f : tied["weights"])
    if (names(f["values"]) == std::vector<std::string>{"E"}) served.insert({f["owner"].get<int>(), f["reader"].get<int>(), f["backward"].get<bool>()});
  EXPECT_EQ(served, (std::set<std::tuple<int, int, bool>>{{0, 2, false}, {0, 2, true}})) << tied.dump();
}

}  // namespace
}  // namespace pt
