// The calibrated cost model's pieces that do not depend on this machine's speed: the
// non-negative least-squares fit of a class (runtime/exec/calibrate.h, fit_class_cost), the
// calibrated time of a node (floor + scale x flops / peak + byte_scale x bytes / bandwidth, views
// free) and the class each backward node is priced by (partitioner/cost_model.h, op_class).
#include <gtest/gtest.h>

#include <random>

#include "importer/fuse.h"
#include "importer/shape_infer.h"
#include "importer/training.h"
#include "partitioner/cost_model.h"
#include "runtime/exec/calibrate.h"

namespace pt {
namespace {

std::vector<CalibrationPoint> points_of(double floor, double scale, double byte_scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> f(1e-6, 1e-3), b(1e-6, 1e-3);
  std::vector<CalibrationPoint> pts;
  for (int k = 0; k < 40; ++k) {
    CalibrationPoint p;
    p.flops_s = f(rng);
    p.bytes_s = b(rng);
    p.t = floor + scale * p.flops_s + byte_scale * p.bytes_s;
    pts.push_back(p);
  }
  return pts;
}

TEST(CalibrationFit, RecoversTheThreeTermsOfExactData) {
  const ClassCost c = fit_class_cost(points_of(3e-6, 1.7, 0.6, 1));
  EXPECT_NEAR(c.floor_s, 3e-6, 1e-12);
  EXPECT_NEAR(c.scale, 1.7, 1e-8);
  EXPECT_NEAR(c.byte_scale, 0.6, 1e-8);
  EXPECT_EQ(c.points, 40);
}

TEST(CalibrationFit, NeverNegative) {
  // Times that fall with the bytes moved: the unconstrained fit's byte term is negative; the
  // non-negative one drops it and fits the rest (the floor and the FLOP term) exactly as before.
  std::vector<CalibrationPoint> pts = points_of(2e-6, 1.0, 0, 2);
  for (CalibrationPoint& p : pts) p.t -= 0.3 * p.bytes_s * (p.t > 4e-4 ? 0.0 : 1.0);
  for (CalibrationPoint& p : pts) p.t = std::max(p.t, 1e-7);
  const ClassCost c = fit_class_cost(pts);
  EXPECT_GE(c.floor_s, 0);
  EXPECT_GE(c.scale, 0);
  EXPECT_GE(c.byte_scale, 0);
  // A floor alone: every point the same time.
  std::vector<CalibrationPoint> flat = points_of(5e-6, 0, 0, 3);
  const ClassCost f = fit_class_cost(flat);
  EXPECT_NEAR(f.floor_s, 5e-6, 1e-12);
  EXPECT_NEAR(f.scale, 0, 1e-9);
  EXPECT_NEAR(f.byte_scale, 0, 1e-9);
  EXPECT_EQ(fit_class_cost({}).points, 0);
}

// x -> MatMul + bias + Gelu (fused into FusedMatMul) -> Reshape -> depthwise Conv -> loss.
TEST(CalibratedCostModel, BackwardNodesArePricedByWhatTheyCompute) {
  Graph g;
  Value* x = g.add_value("x", DType::kFloat32, {4, 8, 16}, ValueKind::kInput);
  g.inputs = {x};
  auto node = [&](const std::string& op, std::vector<Value*> in, AttrMap a = {}, int since = 13) {
    Value* out = g.add_value(op + std::to_string(g.nodes().size()), DType::kUndefined, {}, ValueKind::kActivation);
    Node* n = g.add_node(op, op + std::to_string(g.nodes().size()), std::move(in), {out}, std::move(a));
    n->since_version = since;
    EXPECT_TRUE(infer_node(*n, "test").is_ok());
    return out;
  };
  auto param = [&](Dims d) {
    return g.add_value(std::string("w").append(std::to_string(g.values().size())), DType::kFloat32, d, ValueKind::kParameter);
  };
  Value* h = node("Gelu", {node("Add", {node("MatMul", {x, param({16, 16})}), param({16})})}, {}, 20);
  AttrMap shape;
  Value* s = g.add_value("shape", DType::kInt64, {4}, ValueKind::kConstant);
  HostTensor st(DType::kInt64, {4});
  const int64_t sv[4] = {4, 8, 4, 4};
  std::copy(sv, sv + 4, st.as<int64_t>());
  s->data = std::make_shared<HostTensor>(std::move(st));
  Value* r = node("Reshape", {h, s});
  AttrMap dw;
  dw.set("group", int64_t{8});
  dw.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  Value* y = node("Conv", {r, param({8, 1, 3, 3})}, dw);
  g.outputs = {y};
  apply_fusions(g, FuseOptions{});
  ASSERT_TRUE(build_training_graph(g, LossKind::kMse, SgdOptions{}).has_value());

  DeviceSpec d;
  d.peak_flops = 1e11;
  d.mem_bandwidth = 1e10;
  d.calibrated = true;
  for (int k = 0; k < kOpClasses; ++k)
    for (int ph = 0; ph < kCostPhases; ++ph) d.classes[k][ph] = ClassCost{1e-6 * (k + 1), 1.0 + k, 0.5 * ph + 0.1 * k, 3};
  int seen = 0;
  for (const auto& n : g.nodes()) {
    const std::string& op = n->op_type;
    const OpClass c = op_class(*n);
    if (op == "FusedMatMul") {
      EXPECT_EQ(c, OpClass::kGemm);
    }
    if (op == "GeluGrad" || op == "ReluGrad") {
      EXPECT_EQ(c, OpClass::kElementwise) << n->name;
    }
    if (op == "ReduceSumToShape") {
      EXPECT_EQ(c, OpClass::kPool) << n->name;
    }
    if (op == "Gemm" && n->phase == Phase::kBackward) {
      EXPECT_EQ(c, OpClass::kGemm) << n->name;
    }
    if (op == "ConvGradInput" || op == "ConvGradWeight") {
      EXPECT_EQ(c, OpClass::kDepthwise) << n->name;
      EXPECT_EQ(cost_phase(*n), op == "ConvGradWeight" ? 2 : 1) << n->name;  // their kernels' own speeds
    }
    if (op == "Reshape") {
      EXPECT_EQ(node_time_s(*n, d), 0.0) << n->name;  // a view: aliased, no kernel
      ++seen;
      continue;
    }
    const ClassCost& cc = d.classes[static_cast<int>(c)][cost_phase(*n)];
    EXPECT_DOUBLE_EQ(node_time_s(*n, d),
                     cc.floor_s + cc.scale * node_flops(*n) / d.peak_flops + cc.byte_scale * node_bytes(*n) / d.mem_bandwidth)
        << n->name;
    seen += op == "GeluGrad" || op == "ConvGradWeight" || op == "ReduceSumToShape";
  }
  EXPECT_GE(seen, 4);
  // GELU's gradient costs 30 FLOPs per element (its erf and exp), an Add one.
  for (const auto& n : g.nodes()) {
    if (n->op_type == "GeluGrad") {
      EXPECT_DOUBLE_EQ(node_flops(*n), 30.0 * 4 * 8 * 16);
    }
  }
  // Uncalibrated: the roofline plus the kernel overhead, the views too.
  d.calibrated = false;
  d.kernel_overhead_s = 2e-6;
  for (const auto& n : g.nodes())
    EXPECT_DOUBLE_EQ(node_time_s(*n, d), roofline_s(*n, d) + 2e-6) << n->name;
}

}  // namespace
}  // namespace pt
