// The runtime tests' settings (test_settings.h) and the check that they reach every executor of a
// trainer and a pipeline: under separate_host_tests a CPU executor's host view of a value is then a
// copy beside its buffer, otherwise the buffer itself, so separate_host_tests cannot pass by
// silently running the direct CPU path.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "importer/shape_infer.h"
#include "kernels/device.h"
#include "tests/runtime/digits_fixture.h"
#include "tests/runtime/test_settings.h"

namespace pt::testing {

bool separate_host_run() {
  const char* e = std::getenv("PIPETRAIN_TEST_SEPARATE_HOST");
  return e && *e && std::string(e) != "0";
}

ExecSettings test_exec_settings() {
  ExecSettings s;
  s.separate_host = separate_host_run();
  return s;
}

PipelineOptions test_pipeline_options() {
  PipelineOptions o;
  o.exec = test_exec_settings();
  return o;
}

Trainer::Options test_trainer_options() {
  Trainer::Options o;
  o.exec = test_exec_settings();
  return o;
}

Expected<std::unique_ptr<Trainer>> test_cpu_trainer(const Graph& g, const TrainingGraph& tg) {
  ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, open_device(DeviceKind::kCpu));
  return Trainer::create(g, tg, std::move(dev), test_trainer_options());
}

}  // namespace pt::testing

namespace pt {
namespace {

using testing::separate_host_run;

// The settings reach an executor the tests make directly and a trainer's; the pipeline's stages
// are checked by PipelineMemory.AdoptedWeightsAndTakenResultsAreTheSame (a stage adopts its
// initial values only when its executor is direct).
TEST(SeparateHostSwitch, ReachesEveryExecutor) {
  Graph g;
  Value* x = g.add_value("x", DType::kFloat32, {2, 3}, ValueKind::kInput);
  g.inputs.push_back(x);
  Value* y = g.add_value("y", DType::kUndefined, {}, ValueKind::kActivation);
  Node* n = g.add_node("Relu", "relu", {x}, {y}, AttrMap{});
  n->since_version = 13;
  ASSERT_TRUE(infer_node(*n, "test").is_ok());
  ExecutorOptions eo;
  eo.settings = testing::test_exec_settings();
  auto ex = Executor::create(g, DeviceKind::kCpu, {n}, eo);
  ASSERT_TRUE(ex) << ex.status().message();
  (void)(*ex)->host(x);  // host copies are made on first use
  EXPECT_EQ((*ex)->allocated_bytes().host_copies > 0, separate_host_run());

  auto md = digits_fixture::digits_model(8);
  auto t = testing::test_cpu_trainer(md->g(), md->tg);
  ASSERT_TRUE(t) << t.status().message();
  EXPECT_EQ((*t)->executor().direct(), !separate_host_run());
}

}  // namespace
}  // namespace pt
