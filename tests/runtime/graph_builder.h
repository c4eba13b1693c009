// Building small graphs by hand in the runtime tests: a Graph with random float parameters,
// int64 constants, and nodes whose output shapes come from the importer's shape inference (opset
// 13 semantics). The memory plan and weight version tests build their models with it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "importer/ir.h"
#include "importer/shape_infer.h"

namespace pt::test {

struct GraphBuilder {
  Graph g;
  std::mt19937 rng;

  explicit GraphBuilder(uint32_t seed = 0) : rng(seed) {}

  // A float32 input of the graph.
  Value* input(const std::string& name, Dims d) {
    Value* v = g.add_value(name, DType::kFloat32, std::move(d), ValueKind::kInput);
    g.inputs.push_back(v);
    return v;
  }
  // A float32 initializer (a parameter unless `kind` says otherwise), uniform in [lo, hi).
  Value* param(const std::string& name, Dims d, ValueKind kind = ValueKind::kParameter, float lo = -0.5f,
               float hi = 0.5f) {
    Value* v = g.add_value(name, DType::kFloat32, d, kind);
    HostTensor t(DType::kFloat32, d);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < t.size(); ++i) t.as<float>()[i] = u(rng);
    v->data = std::make_shared<HostTensor>(std::move(t));
    v->from_initializer = true;
    return v;
  }
  // A 1-D int64 constant (shapes, axes).
  Value* ints(const std::vector<int64_t>& v) {
    Value* c = g.add_value("c" + std::to_string(g.values().size()), DType::kInt64, {static_cast<int64_t>(v.size())},
                           ValueKind::kConstant);
    HostTensor t(DType::kInt64, c->dims);
    for (size_t i = 0; i < v.size(); ++i) t.as<int64_t>()[i] = v[i];
    c->data = std::make_shared<HostTensor>(std::move(t));
    return c;
  }
  // A node of one output named after its type and position; its output's dtype and shape are
  // inferred (a failure fails the test).
  Value* op(const std::string& type, std::vector<Value*> ins, AttrMap attrs = {}) {
    const std::string name = type + "_" + std::to_string(g.nodes().size());
    Value* out = g.add_value(name + "/out", DType::kUndefined, {}, ValueKind::kActivation);
    Node* n = g.add_node(type, name, std::move(ins), {out}, std::move(attrs));
    n->since_version = 13;
    Status st = infer_node(*n, "test");
    EXPECT_TRUE(st.is_ok()) << type << ": " << st.message();
    return out;
  }
};

}  // namespace pt::test
