// Gradient builders: one per forward op (importer/grad/<op>_grad.cpp), each a graph rewrite that
// emits ordinary nodes (or a dedicated *Grad op) computing the input gradients from the output
// gradients. Registered from one explicit table (grad_registry.cpp).
#pragma once

#include <string>
#include <vector>

#include "importer/ir.h"

namespace pt {

class GradContext {
 public:
  GradContext(Graph& g, Node& fwd, std::vector<Value*> dy, std::vector<bool> needs)
      : g_(g), fwd_(fwd), dy_(std::move(dy)), needs_(std::move(needs)), dx_(fwd.inputs.size(), nullptr) {}

  const Node& fwd() const { return fwd_; }
  Value* x(size_t i) const { return fwd_.inputs.at(i); }
  Value* y(size_t i) const { return fwd_.outputs.at(i); }
  Value* dy(size_t i) const { return i < dy_.size() ? dy_[i] : nullptr; }
  bool needs(size_t i) const { return i < needs_.size() && needs_[i]; }
  void set_dx(size_t i, Value* g) { dx_.at(i) = g; }
  const std::vector<Value*>& dx() const { return dx_; }

  // Emits a backward node serving fwd() with one output of `dims` (dtype of `dtype_like`, or of
  // input 0 when null) and returns that output.
  Value* emit(const std::string& op, std::vector<Value*> inputs, Dims dims, AttrMap attrs = {},
              const Value* dtype_like = nullptr);
  // Like emit, with one output per entry of `dims` (all of one dtype); returns them in order.
  std::vector<Value*> emit_multi(const std::string& op, std::vector<Value*> inputs, std::vector<Dims> dims,
                                 AttrMap attrs = {}, const Value* dtype_like = nullptr);
  // Sums `grad` down to `target` dims (undoing numpy broadcasting); returns grad when equal.
  Value* reduce_to(Value* grad, const Dims& target);
  // Reshapes `v` to `dims` (no-op when equal).
  Value* reshape(Value* v, const Dims& dims);
  // An int64 constant vector (shape inputs).
  Value* const_ints(const std::vector<int64_t>& v);
  // A scalar constant of `like`'s dtype.
  Value* const_scalar(double v, const Value* like);

 private:
  std::string next_name(const std::string& op);
  Graph& g_;
  Node& fwd_;
  std::vector<Value*> dy_;
  std::vector<bool> needs_;
  std::vector<Value*> dx_;
  int count_ = 0;
};

using GradBuilder = Status (*)(GradContext&);

// nullptr when `op` has no builder. Ops whose outputs carry no gradient (comparisons) have a
// builder that sets nothing.
GradBuilder find_grad_builder(const std::string& op);
bool has_grad_builder(const std::string& op);
// Every op of the table (the no-gradient ops included), sorted.
std::vector<std::string> grad_builder_ops();
// The forward ops declared to carry no gradient (their builder emits nothing).
std::vector<std::string> no_gradient_ops();

// An internal backward op (domain "pipetrain") and the forward op whose builder emits it.
struct BackwardOp {
  const char* op;
  const char* forward;
};
// Every internal backward op with a kernel; tests/importer/op_tables_test.cpp holds this list
// against the kernel table.
const std::vector<BackwardOp>& backward_ops();

}  // namespace pt
