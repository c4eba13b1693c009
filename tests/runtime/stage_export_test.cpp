// export_stages on hand-made cuts: a correct cut gives each stage its nodes and boundary tensors;
// a stage that needs a value it neither computes nor receives, and a boundary value the importer
// made (Dropout's mask), are refused naming the stage and the value. (The chain against the full
// model in ONNX Runtime is tests/cli/test_stages.py.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "importer/importer.h"
#include "importer/stage_export.h"
#include "tests/python_interpreter.h"

namespace pt {
namespace {

namespace fs = std::filesystem;

class StageExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipetrain-stages-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // digits_mlp: Gemm, Relu, Gemm, Relu, Gemm; cut after the first `split` forward nodes.
  std::vector<StageCut> cut(const Graph& g, size_t split, bool with_boundary) {
    std::vector<const Node*> fwd;
    for (auto& n : g.nodes())
      if (n->phase == Phase::kForward) fwd.push_back(n.get());
    std::vector<StageCut> cuts(2);
    cuts[0].nodes.assign(fwd.begin(), fwd.begin() + static_cast<long>(split));
    cuts[1].nodes.assign(fwd.begin() + static_cast<long>(split), fwd.end());
    if (with_boundary) {
      const Value* v = fwd[split - 1]->outputs[0];
      cuts[0].send.push_back(v);
      cuts[1].recv.push_back(v);
    }
    return cuts;
  }

  fs::path dir_;
};

TEST_F(StageExportTest, CutGivesEachStageItsNodesAndBoundary) {
  ImportOptions io;
  io.fuse.epilogue = false;  // per-node cuts of the digits MLP (Gemm | Relu): no epilogue fusion
  io.batch_size = 4;
  auto m = import_onnx(PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx", io);
  ASSERT_TRUE(m) << m.status().message();
  auto cuts = cut(*m->graph, 2, true);
  auto infos = export_stages(*m, {}, cuts, (dir_ / "stages").string());
  ASSERT_TRUE(infos) << infos.status().message();
  ASSERT_EQ(infos->size(), 2u);
  const std::string boundary = cuts[0].send[0]->name;
  EXPECT_EQ((*infos)[0].inputs, std::vector<std::string>{m->graph->inputs[0]->name});
  EXPECT_EQ((*infos)[0].outputs, std::vector<std::string>{boundary});
  EXPECT_EQ((*infos)[1].inputs, std::vector<std::string>{boundary});
  EXPECT_EQ((*infos)[1].outputs, std::vector<std::string>{m->graph->outputs[0]->name});
  EXPECT_EQ((*infos)[0].nodes.size() + (*infos)[1].nodes.size(), 5u);
  EXPECT_EQ((*infos)[0].batch, "batch");
  for (const char* f : {"stage0.onnx", "stage1.onnx", "stages.json"}) EXPECT_TRUE(fs::exists(dir_ / "stages" / f)) << f;
  // The stage files re-import: each is a model of its own.
  auto s1 = import_onnx((dir_ / "stages" / "stage1.onnx").string(), io);
  ASSERT_TRUE(s1) << s1.status().message();
  EXPECT_EQ(s1->graph->nodes().size(), 3u);
}

TEST_F(StageExportTest, MissingBoundaryValueNamesStageAndValue) {
  ImportOptions io;
  io.fuse.epilogue = false;  // per-node cuts of the digits MLP (Gemm | Relu): no epilogue fusion
  io.batch_size = 4;
  auto m = import_onnx(PIPETRAIN_SOURCE_DIR "/models/digits_mlp.onnx", io);
  ASSERT_TRUE(m) << m.status().message();
  auto cuts = cut(*m->graph, 2, false);
  const std::string value = cuts[0].nodes.back()->outputs[0]->name;
  auto infos = export_stages(*m, {}, cuts, (dir_ / "stages").string());
  ASSERT_FALSE(infos);
  EXPECT_EQ(infos.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(infos.status().message().find("stage 1"), std::string::npos) << infos.status().message();
  EXPECT_NE(infos.status().message().find("'" + value + "'"), std::string::npos) << infos.status().message();
  EXPECT_NE(infos.status().message().find("does not receive"), std::string::npos) << infos.status().message();
  EXPECT_FALSE(fs::exists(dir_ / "stages" / "stage0.onnx")) << "nothing is written when a stage fails";
}

TEST_F(StageExportTest, ImporterMadeBoundaryValueIsRefused) {
  const std::string path = (dir_ / "dropout.onnx").string();
  const std::string cmd = testing::python() +
      " -c \"import numpy as np, onnx; from onnx import helper as h, numpy_helper as nh, TensorProto as T; "
      "w = nh.from_array(np.ones((4, 4), np.float32), 'w'); "
      "g = h.make_graph([h.make_node('MatMul', ['x', 'w'], ['a'], name='mm'), h.make_node('Dropout', ['a'], ['d'], name='drop'), "
      "h.make_node('Relu', ['d'], ['y'], name='relu')], 'g', [h.make_tensor_value_info('x', T.FLOAT, ['N', 4])], "
      "[h.make_tensor_value_info('y', T.FLOAT, ['N', 4])], [w]); "
      "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), '" + path + "')\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ImportOptions io;
  io.fuse.epilogue = false;  // per-node cuts of the digits MLP (Gemm | Relu): no epilogue fusion
  io.batch_size = 2;
  io.fuse.dropout = false;  // this Dropout (training mode off) is an identity the import would remove
  auto m = import_onnx(path, io);
  ASSERT_TRUE(m) << m.status().message();
  const Graph& g = *m->graph;
  const Node* drop = nullptr;
  for (auto& n : g.nodes())
    if (n->op_type == "Dropout") drop = n.get();
  ASSERT_TRUE(drop && drop->outputs.size() == 2 && drop->outputs[1]);
  std::vector<StageCut> cuts(2);
  for (auto& n : g.nodes()) (n.get() == g.nodes().back().get() ? cuts[1] : cuts[0]).nodes.push_back(n.get());
  cuts[0].send = {drop->outputs[0], drop->outputs[1]};
  cuts[1].recv = {drop->outputs[0], drop->outputs[1]};
  auto infos = export_stages(*m, {}, cuts, (dir_ / "stages").string());
  ASSERT_FALSE(infos);
  EXPECT_NE(infos.status().message().find("stage 0 sends '" + drop->outputs[1]->name + "'"), std::string::npos)
      << infos.status().message();
  EXPECT_NE(infos.status().message().find("not a tensor of the source model"), std::string::npos)
      << infos.status().message();
  // Without the mask the same cut is fine.
  cuts[0].send.pop_back();
  cuts[1].recv.pop_back();
  auto ok = export_stages(*m, {}, cuts, (dir_ / "stages").string());
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_EQ((*ok)[1].inputs, std::vector<std::string>{"d"});
}

}  // namespace
}  // namespace pt
