// Finite differences in double of GatherND (batch_dims 0 and 1, repeated index tuples whose
// gradients add up), ScatterND (data's gradient is dY with the scattered slices zeroed, updates'
// the GatherND of dY) and ScatterElements; and the refusal of a reduction other than none.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "importer/grad/grad_registry.h"
#include "importer/shape_infer.h"
#include "tests/importer/grad_check_util.h"

namespace pt {
namespace {

using gradcheck::attrs_of;
using gradcheck::GradCheck;
using gradcheck::seed_trace;

TEST(GradCheckScatter, GatherND) {
  {
    SCOPED_TRACE(seed_trace(7200, "GatherND batch_dims 0, a repeated tuple"));
    GradCheck c(7200);
    Value* x = c.value("x", {3, 4, 2});
    Value* idx = c.ints("idx", {4, 2}, {0, 1, 2, 3, 0, 1, -1, 0}, ValueKind::kConstant);
    Value* y = c.op1("GatherND", {x, idx});
    EXPECT_EQ(y->dims, (Dims{4, 2}));
    c.check({y}, {x});
  }
  {
    SCOPED_TRACE(seed_trace(7201, "GatherND batch_dims 1"));
    GradCheck c(7201);
    Value* x = c.value("x", {2, 3, 4});
    Value* idx = c.ints("idx", {2, 2, 1}, {2, 0, 1, 1}, ValueKind::kConstant);
    Value* y = c.op1("GatherND", {x, idx}, attrs_of({{"batch_dims", int64_t{1}}}));
    EXPECT_EQ(y->dims, (Dims{2, 2, 4}));
    c.check({y}, {x});
  }
}

TEST(GradCheckScatter, ScatterNDDataAndUpdates) {
  {
    SCOPED_TRACE(seed_trace(7210, "ScatterND rows"));
    GradCheck c(7210);
    Value* x = c.value("x", {4, 3});
    Value* idx = c.ints("idx", {2, 1}, {3, 1}, ValueKind::kConstant);
    Value* u = c.value("u", {2, 3});
    c.check({c.op1("ScatterND", {x, idx, u})}, {x, u});
  }
  {
    SCOPED_TRACE(seed_trace(7211, "ScatterND elements of a 3-D tensor"));
    GradCheck c(7211);
    Value* x = c.value("x", {2, 3, 4});
    Value* idx = c.ints("idx", {3, 2}, {0, 2, 1, 0, 1, 2}, ValueKind::kConstant);
    Value* u = c.value("u", {3, 4});
    c.check({c.op1("ScatterND", {x, idx, u})}, {x, u});
  }
}

TEST(GradCheckScatter, ScatterElements) {
  SCOPED_TRACE(seed_trace(7220, "ScatterElements axis 1"));
  GradCheck c(7220);
  Value* x = c.value("x", {3, 5});
  Value* idx = c.ints("idx", {3, 2}, {4, 0, 1, 3, -1, 2}, ValueKind::kConstant);
  Value* u = c.value("u", {3, 2});
  c.check({c.op1("ScatterElements", {x, idx, u}, attrs_of({{"axis", int64_t{-1}}}))}, {x, u});
}

TEST(GradCheckScatter, ReductionsOtherThanNoneAreRefused) {
  for (const char* op : {"ScatterND", "ScatterElements"}) {
    Graph g;
    Value* x = g.add_value("x", DType::kFloat32, {4, 3}, ValueKind::kParameter);
    Value* idx = g.add_value("i", DType::kInt64, {2, 1}, ValueKind::kConstant);
    Value* u = g.add_value("u", DType::kFloat32, std::string(op) == "ScatterND" ? Dims{2, 3} : Dims{2, 1}, ValueKind::kParameter);
    Value* y = g.add_value("y", DType::kUndefined, {}, ValueKind::kActivation);
    Node* n = g.add_node(op, "mask_scatter", {x, idx, u}, {y}, attrs_of({{"reduction", std::string("add")}}));
    Status st = infer_node(*n, n->describe());
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << op;
    EXPECT_NE(st.message().find("node 'mask_scatter'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("'reduction'"), std::string::npos) << st.message();
  }
  for (const char* op : {"GatherND", "ScatterND", "ScatterElements"}) EXPECT_TRUE(has_grad_builder(op)) << op;
}

}  // namespace
}  // namespace pt
