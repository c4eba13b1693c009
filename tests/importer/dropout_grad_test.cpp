// Dropout's gradient through the IR, by central differences in double: with the step fixed the
// mask is fixed, so the forward is differentiable and the numeric gradient is exact up to rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "importer/shape_infer.h"
#include "importer/training.h"
#include "runtime/exec/executor.h"

namespace pt {
namespace {

TEST(DropoutGrad, FiniteDifferences) {
  Graph g;
  g.opset = 13;
  const Dims d = {4, 50};
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  Value* x = g.add_value("x", DType::kFloat64, d, ValueKind::kParameter);
  x->data = std::make_shared<HostTensor>(DType::kFloat64, d);
  for (int64_t i = 0; i < x->size(); ++i) x->data->as<double>()[i] = u(rng);
  Value* step = g.add_value("rng_step", DType::kInt64, {}, ValueKind::kHyper);
  step->data = std::make_shared<HostTensor>(DType::kInt64, Dims{});
  step->data->as<int64_t>()[0] = 3;
  Value* y = g.add_value("y", DType::kUndefined, {}, ValueKind::kActivation);
  Value* mask = g.add_value("mask", DType::kUndefined, {}, ValueKind::kActivation);
  AttrMap a;
  a.set("ratio", 0.4f);
  a.set("_training", int64_t{1});
  a.set("seed", int64_t{99});
  Node* n = g.add_node("Dropout", "drop", {x, step}, {y, mask}, a);
  n->since_version = 13;
  ASSERT_TRUE(infer_node(*n, "test").is_ok());
  Value* seed = g.add_value("dy", DType::kFloat64, d, ValueKind::kConstant);
  seed->data = std::make_shared<HostTensor>(DType::kFloat64, d);
  for (int64_t i = 0; i < seed->size(); ++i) seed->data->as<double>()[i] = u(rng);
  auto grads = build_gradients(g, {{y, seed}}, {x});
  ASSERT_TRUE(grads) << grads.status().message();
  auto ex = Executor::create(g, DeviceKind::kCpu);
  ASSERT_TRUE(ex) << ex.status().message();
  ASSERT_TRUE((*ex)->run().is_ok());
  const HostTensor analytic = (*ex)->tensor(grads->at(x));
  int64_t kept = 0;
  double* px = (*ex)->tensor(x).as<double>();
  for (int64_t i = 0; i < x->size(); ++i) {
    kept += (*ex)->tensor(mask).as<bool>()[i];
    auto loss = [&]() {
      EXPECT_TRUE((*ex)->run([](Phase p) { return p == Phase::kForward; }).is_ok());
      double l = 0;
      for (int64_t k = 0; k < y->size(); ++k) l += seed->data->as<double>()[k] * (*ex)->tensor(y).as<double>()[k];
      return l;
    };
    const double orig = px[i];
    px[i] = orig + 1e-6;
    const double lp = loss();
    px[i] = orig - 1e-6;
    const double lm = loss();
    px[i] = orig;
    const double numeric = (lp - lm) / 2e-6;
    EXPECT_NEAR(analytic.as<double>()[i], numeric, 1e-6 + 1e-5 * std::fabs(numeric)) << "element " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, x->size()) << "the mask dropped nothing: the test would not see a wrong mask";
}

}  // namespace
}  // namespace pt
