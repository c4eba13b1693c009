// The table of gradient builders and the GradContext helpers they share.
#include "importer/grad/grad_registry.h"

#include <map>

#include "importer/grad/builders.h"
#include "kernels/unary_ops.h"

namespace pt {

std::string GradContext::next_name(const std::string& op) {
  return fwd_.name + "_grad/" + op + "_" + std::to_string(count_++);
}

Value* GradContext::emit(const std::string& op, std::vector<Value*> inputs, Dims dims, AttrMap attrs,
                         const Value* dtype_like) {
  const Value* like = dtype_like ? dtype_like : (fwd_.inputs.empty() ? nullptr : fwd_.inputs[0]);
  DType dt = like ? like->dtype : DType::kFloat32;
  std::string name = next_name(op);
  Value* out = g_.add_value(name, dt, std::move(dims), ValueKind::kActivation);
  Node* n = g_.add_node(op, name, std::move(inputs), {out}, std::move(attrs), Phase::kBackward);
  n->forward = &fwd_;
  if (op.find("Grad") != std::string::npos || op == "ReduceSumToShape") n->domain = "pipetrain";
  return out;
}

std::vector<Value*> GradContext::emit_multi(const std::string& op, std::vector<Value*> inputs,
                                            std::vector<Dims> dims, AttrMap attrs, const Value* dtype_like) {
  const Value* like = dtype_like ? dtype_like : (fwd_.inputs.empty() ? nullptr : fwd_.inputs[0]);
  DType dt = like ? like->dtype : DType::kFloat32;
  std::string name = next_name(op);
  std::vector<Value*> outs;
  for (size_t i = 0; i < dims.size(); ++i)
    outs.push_back(g_.add_value(name + "/out" + std::to_string(i), dt, std::move(dims[i]), ValueKind::kActivation));
  Node* n = g_.add_node(op, name, std::move(inputs), outs, std::move(attrs), Phase::kBackward);
  n->forward = &fwd_;
  if (op.find("Grad") != std::string::npos) n->domain = "pipetrain";
  return outs;
}

Value* GradContext::reduce_to(Value* grad, const Dims& target) {
  if (grad->dims == target) return grad;
  return emit("ReduceSumToShape", {grad}, target, {}, grad);
}

Value* GradContext::const_ints(const std::vector<int64_t>& v) {
  Value* c = g_.add_value(next_name("shape"), DType::kInt64, {static_cast<int64_t>(v.size())}, ValueKind::kConstant);
  c->data = std::make_shared<HostTensor>(HostTensor::from<int64_t>(c->dims, v));
  return c;
}

Value* GradContext::const_scalar(double v, const Value* like) {
  Value* c = g_.add_value(next_name("scalar"), like->dtype, {}, ValueKind::kConstant);
  HostTensor t(like->dtype, {});
  if (like->dtype == DType::kFloat64) t.as<double>()[0] = v;
  else t.as<float>()[0] = static_cast<float>(v);
  c->data = std::make_shared<HostTensor>(std::move(t));
  return c;
}

Value* GradContext::reshape(Value* v, const Dims& dims) {
  if (v->dims == dims) return v;
  std::vector<int64_t> shape(dims.begin(), dims.end());
  return emit("Reshape", {v, const_ints(shape)}, dims, {}, v);
}

namespace {

// Forward ops whose outputs carry no gradient: their builder emits nothing. Comparisons and Not
// (bool outputs), ArgMax (integer indices), Shape, ConstantOfShape and Range (shape arithmetic,
// folded at import). An op missing from both this list and the table below fails
// OpTables.EveryOpDecidesItsGradient, so a new op cannot skip the decision.
const char* const kNoGradientOps[] = {"Equal", "Less", "Greater", "Not", "ArgMax", "Shape", "ConstantOfShape", "Range"};

// The internal backward ops (domain "pipetrain") and the forward op whose builder emits each.
const std::vector<BackwardOp>& backward_op_list() {
  static const std::vector<BackwardOp> v = {
      {"ReduceSumToShape", "Add"},  // GradContext::reduce_to, used by every broadcasting op
      {"SoftmaxGrad", "Softmax"}, {"LogSoftmaxGrad", "LogSoftmax"}, {"DropoutGrad", "Dropout"},
      {"SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLoss"}, {"MSELossGrad", "MSELoss"},
      {"PReluGrad", "PRelu"},
      {"ReduceMaxGrad", "ReduceMax"}, {"SliceGrad", "Slice"}, {"PadGrad", "Pad"}, {"GatherGrad", "Gather"},
      {"LayerNormalizationGrad", "LayerNormalization"},
      {"FusedAttentionGrad", "FusedAttention"},
      {"ConvGradInput", "Conv"}, {"ConvGradWeight", "Conv"}, {"ConvGradBias", "Conv"},
      {"MaxPoolGrad", "MaxPool"}, {"AveragePoolGrad", "AveragePool"},
      {"GlobalAveragePoolGrad", "GlobalAveragePool"}, {"GlobalMaxPoolGrad", "GlobalMaxPool"},
      {"BatchNormalizationGrad", "BatchNormalization"}, {"LRNGrad", "LRN"},
#define PT_UNARY_BACKWARD(Name, fn, args, fwd, kind, ...) PT_UNARY_IF_GRAD(kind, {#Name "Grad", #Name}, )
      PT_UNARY_OPS(PT_UNARY_BACKWARD)
#undef PT_UNARY_BACKWARD
      {"GatherElementsGrad", "GatherElements"},
      {"GroupNormalizationGrad", "GroupNormalization"}, {"ResizeGrad", "Resize"}, {"GatherNDGrad", "GatherND"},
  };
  return v;
}

std::map<std::string, GradBuilder> build_table() {
  std::map<std::string, GradBuilder> t = {
      // The element-wise unary ops (kernels/unary_ops.h): NameGrad(dY, X or Y), or composed.
#define PT_UNARY_BUILDER_from_x(fn) grad::unary_from_x
#define PT_UNARY_BUILDER_from_y(fn) grad::unary_from_y
#define PT_UNARY_BUILDER_composed(fn) grad::fn
#define PT_UNARY_GRAD(Name, fn, args, fwd, kind, ...) {#Name, PT_UNARY_BUILDER_##kind(fn)},
      PT_UNARY_OPS(PT_UNARY_GRAD)
#undef PT_UNARY_GRAD
#undef PT_UNARY_BUILDER_from_x
#undef PT_UNARY_BUILDER_from_y
#undef PT_UNARY_BUILDER_composed
      {"Gemm", grad::gemm},
      {"MatMul", grad::matmul},
      {"FusedMatMul", grad::fused_product},
      {"FusedGemm", grad::fused_product},
      {"FusedConv", grad::fused_product},
      {"Add", grad::add},
      {"Sub", grad::sub},
      {"Mul", grad::mul},
      {"Div", grad::div},
      {"Softmax", grad::softmax},
      {"LogSoftmax", grad::log_softmax},
      {"Reshape", grad::reshape},
      {"Flatten", grad::reshape},
      {"Identity", grad::reshape},
      {"Transpose", grad::transpose},
      {"SoftmaxCrossEntropyLoss", grad::softmax_cross_entropy},
      {"MSELoss", grad::mse_loss},
      {"Dropout", grad::dropout},
      {"Pow", grad::pow},
      {"PRelu", grad::prelu},
      {"ReduceSum", grad::reduce_sum},
      {"ReduceMean", grad::reduce_mean},
      {"ReduceMax", grad::reduce_max},
      {"Sum", grad::sum},
      {"Mean", grad::mean},
      {"Concat", grad::concat},
      {"Split", grad::split},
      {"Slice", grad::slice},
      {"Squeeze", grad::reshape},
      {"Unsqueeze", grad::reshape},
      {"Expand", grad::expand},
      {"Tile", grad::tile},
      {"Pad", grad::pad},
      {"Gather", grad::gather},
      {"Where", grad::where},
      {"Cast", grad::cast},
      {"LayerNormalization", grad::layer_norm},
      {"FusedAttention", grad::fused_attention},
      {"Conv", grad::conv},
      {"MaxPool", grad::max_pool},
      {"AveragePool", grad::average_pool},
      {"GlobalAveragePool", grad::global_average_pool},
      {"GlobalMaxPool", grad::global_max_pool},
      {"BatchNormalization", grad::batch_norm},
      {"LRN", grad::lrn},
      // Ops of opsets 18 to 21 and the zoo's further ops.
      {"ReduceMin", grad::reduce_min},
      {"ReduceSumSquare", grad::reduce_sum_square},
      {"ReduceL2", grad::reduce_l2},
      {"ReduceL1", grad::reduce_l1},
      {"ReduceLogSum", grad::reduce_log_sum},
      {"ReduceLogSumExp", grad::reduce_log_sum_exp},
      {"ReduceProd", grad::reduce_prod},
      {"Max", grad::min_max},
      {"Min", grad::min_max},
      {"Mod", grad::mod},
      {"CumSum", grad::cum_sum},
      {"Trilu", grad::trilu},
      {"GatherElements", grad::gather_elements},
      {"GroupNormalization", grad::group_norm},
      {"InstanceNormalization", grad::group_norm},
      {"ConvTranspose", grad::conv_transpose},
      {"Resize", grad::resize},
      {"Einsum", grad::einsum},
      {"GatherND", grad::gather_nd},
      {"ScatterND", grad::scatter_nd},
      {"ScatterElements", grad::scatter_elements},
  };
  for (const char* op : kNoGradientOps) t.emplace(op, grad::no_gradient);
  return t;
}

const std::map<std::string, GradBuilder>& table() {
  static const std::map<std::string, GradBuilder> t = build_table();
  return t;
}

}  // namespace

GradBuilder find_grad_builder(const std::string& op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : it->second;
}

bool has_grad_builder(const std::string& op) { return find_grad_builder(op) != nullptr; }

std::vector<std::string> grad_builder_ops() {
  std::vector<std::string> v;
  for (const auto& [op, fn] : table()) v.push_back(op);
  return v;
}

std::vector<std::string> no_gradient_ops() { return {std::begin(kNoGradientOps), std::end(kNoGradientOps)}; }

const std::vector<BackwardOp>& backward_ops() { return backward_op_list(); }

}  // namespace pt
