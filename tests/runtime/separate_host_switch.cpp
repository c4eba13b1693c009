// separate_host_tests (tests/CMakeLists.txt) runs this binary with PIPETRAIN_TEST_SEPARATE_HOST=1:
// every executor then keeps host copies apart from its buffers, as on CUDA, so that a missing
// upload or download changes what the pipeline, checkpoint and export tests compare. The switch is
// the runtime's test option (set_separate_host_for_tests); only this test code reads the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "importer/shape_infer.h"
#include "runtime/exec/executor.h"

namespace {

class SeparateHost : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* e = std::getenv("PIPETRAIN_TEST_SEPARATE_HOST");
    pt::set_separate_host_for_tests(e && *e && std::string(e) != "0");
  }
};

const auto* const kRegistered = ::testing::AddGlobalTestEnvironment(new SeparateHost);

// The switch reaches the executors: with it a CPU executor's host view of a value is a copy beside
// its buffer, without it the buffer itself (so separate_host_tests cannot pass by silently running the direct CPU path).
TEST(SeparateHostSwitch, ReachesEveryExecutor) {
  pt::Graph g;
  pt::Value* x = g.add_value("x", pt::DType::kFloat32, {2, 3}, pt::ValueKind::kInput);
  g.inputs.push_back(x);
  pt::Value* y = g.add_value("y", pt::DType::kUndefined, {}, pt::ValueKind::kActivation);
  pt::Node* n = g.add_node("Relu", "relu", {x}, {y}, pt::AttrMap{});
  n->since_version = 13;
  ASSERT_TRUE(pt::infer_node(*n, "test").is_ok());
  auto ex = pt::Executor::create(g, pt::DeviceKind::kCpu, {n}, pt::ExecutorOptions{});
  ASSERT_TRUE(ex) << ex.status().message();
  (void)(*ex)->host(x);  // host copies are made on first use
  const char* e = std::getenv("PIPETRAIN_TEST_SEPARATE_HOST");
  const bool on = e && *e && std::string(e) != "0";
  EXPECT_EQ((*ex)->allocated_bytes().host_copies > 0, on);
}

}  // namespace
