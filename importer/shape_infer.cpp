// Shape functions for every accepted op, and the infer-and-fold pass.
#include "importer/shape_util.h"
#include "importer/shape_infer.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "core/checked_size.h"
#include "importer/fold.h"
#include "importer/importer.h"
#include "importer/rnn_expand.h"
#include "importer/shapes_scatter.h"
#include "importer/shapes_tensor.h"
#include "importer/shapes_cnn.h"
#include "kernels/unary_ops.h"

namespace pt {

namespace {

using shape::need_inputs;
using shape::set_out;


using ShapeFn = Status (*)(Node&, const std::string&);

Status normalize_axis(int64_t* axis, int64_t rank, const std::string& where, bool allow_rank = false) {
  int64_t hi = allow_rank ? rank : rank - 1;
  if (*axis < -rank - (allow_rank ? 0 : 0) || *axis > hi)
    return invalid_input(where + ": axis " + std::to_string(*axis) + " is out of range for rank " + std::to_string(rank));
  if (*axis < 0) *axis += rank;
  return Status::ok();
}

// A constant int64 vector from input i (shape, axes, ...), or an error naming the tensor.
Expected<std::vector<int64_t>> const_ints(const Node& n, size_t i, const std::string& where) {
  const Value* v = i < n.inputs.size() ? n.inputs[i] : nullptr;
  if (!v) return invalid_input(where + ": input " + std::to_string(i) + " is missing");
  if (!v->is_constant() || !v->data)
    return invalid_input(where + ": input '" + v->name + "' must be known before training (a constant or a "
                         "foldable shape computation), but it is computed from data at run time");
  std::vector<int64_t> out(v->data->size());
  for (int64_t k = 0; k < v->data->size(); ++k) out[k] = v->data->get_int(k);
  return out;
}

Status unary_same(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 1, where));
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status binary_broadcast(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 2, 2, where));
  Dims out;
  if (!broadcast_dims(n.inputs[0]->dims, n.inputs[1]->dims, &out))
    return invalid_input(where + ": shapes " + dims_str(n.inputs[0]->dims) + " and " + dims_str(n.inputs[1]->dims) +
                         " do not broadcast");
  if (n.inputs[0]->dtype != n.inputs[1]->dtype)
    return invalid_input(where + ": input types differ (" + dtype_name(n.inputs[0]->dtype) + " and " +
                         dtype_name(n.inputs[1]->dtype) + ")");
  bool cmp = n.op_type == "Equal" || n.op_type == "Less" || n.op_type == "Greater" ||
             n.op_type == "LessOrEqual" || n.op_type == "GreaterOrEqual";
  set_out(n, 0, cmp ? DType::kBool : n.inputs[0]->dtype, out);
  return Status::ok();
}

// Gemm and MatMul take one element type T for every input: a float64 weight beside float32
// data is refused naming both (the kernels would read one as the other).
Status same_element_type(const Node& n, const std::string& where) {
  for (const Value* v : n.inputs)
    if (v && v->dtype != n.inputs[0]->dtype)
      return invalid_input(where + ": input '" + v->name + "' is " + dtype_name(v->dtype) + ", input '" +
                           n.inputs[0]->name + "' is " + dtype_name(n.inputs[0]->dtype) + "; " + n.op_type +
                           " needs one element type (convert the initializer to " + dtype_name(n.inputs[0]->dtype) + ")");
  return Status::ok();
}

Status gemm(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 2, 3, where));
  RETURN_IF_ERROR(same_element_type(n, where));
  const Dims& a = n.inputs[0]->dims;
  const Dims& b = n.inputs[1]->dims;
  if (a.size() != 2 || b.size() != 2)
    return invalid_input(where + ": A and B must be 2-D, are " + dims_str(a) + " and " + dims_str(b));
  bool ta = n.attrs.get_int("transA", 0), tb = n.attrs.get_int("transB", 0);
  int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
  if (ka != kb) return invalid_input(where + ": inner dimensions differ (A " + dims_str(a) + ", B " + dims_str(b) + ")");
  if (n.inputs.size() > 2 && n.inputs[2]) {
    Dims c = n.inputs[2]->dims, o;
    if (c.size() > 2 || !broadcast_dims({m, nn}, c, &o) || o != Dims{m, nn})
      return invalid_input(where + ": C " + dims_str(c) + " does not broadcast to [" + std::to_string(m) + ", " +
                           std::to_string(nn) + "]");
  }
  set_out(n, 0, n.inputs[0]->dtype, {m, nn});
  return Status::ok();
}

Status matmul(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 2, 2, where));
  RETURN_IF_ERROR(same_element_type(n, where));
  Dims a = n.inputs[0]->dims, b = n.inputs[1]->dims;
  if (a.empty() || b.empty()) return invalid_input(where + ": MatMul of a scalar");
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (a.back() != b[b.size() - 2])
    return invalid_input(where + ": inner dimensions differ (" + dims_str(n.inputs[0]->dims) + " @ " +
                         dims_str(n.inputs[1]->dims) + ")");
  Dims ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2), batch;
  if (!broadcast_dims(ba, bb, &batch)) return invalid_input(where + ": batch dimensions do not broadcast");
  Dims out = batch;
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status softmax(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 1, where));
  int64_t rank = n.inputs[0]->dims.size();
  bool legacy = n.since_version < 13;
  int64_t axis = n.attrs.get_int("axis", legacy ? 1 : -1);
  RETURN_IF_ERROR(normalize_axis(&axis, rank, where));
  n.attrs.set("axis", axis);
  n.attrs.set("_coerce2d", static_cast<int64_t>(legacy));
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status flatten(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 1, where));
  const Dims& d = n.inputs[0]->dims;
  int64_t axis = n.attrs.get_int("axis", 1);
  int64_t rank = d.size();
  if (axis < -rank || axis > rank) return invalid_input(where + ": axis out of range");
  if (axis < 0) axis += rank;
  n.attrs.set("axis", axis);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= d[i];
  set_out(n, 0, n.inputs[0]->dtype, {outer, inner});
  return Status::ok();
}

Status reshape(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 2, 2, where));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, const_ints(n, 1, where));
  const Dims& in = n.inputs[0]->dims;
  bool allowzero = n.attrs.get_int("allowzero", 0);
  Dims out(shape.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t s = shape[i];
    if (s == 0 && !allowzero) {
      if (i >= in.size()) return invalid_input(where + ": shape has 0 at " + std::to_string(i) + " beyond the input's rank");
      s = in[i];
    }
    if (s == -1) {
      if (infer >= 0) return invalid_input(where + ": shape has more than one -1");
      infer = static_cast<int>(i);
      continue;
    }
    if (s < 0) return invalid_input(where + ": shape has invalid entry " + std::to_string(s));
    out[i] = s;
    if (__builtin_mul_overflow(known, s, &known))
      return invalid_input(where + ": shape " + dims_str(Dims(shape)) + " multiplies past 2^63 elements");
  }
  int64_t total = 0;
  if (!checked_numel(in, &total))
    return invalid_input(where + ": input shape " + dims_str(in) + " multiplies past 2^63 elements");
  if (infer >= 0) {
    if (known == 0 || total % known) return invalid_input(where + ": cannot reshape " + dims_str(in) + " to " + dims_str(Dims(shape)));
    out[infer] = total / known;
  }
  if (numel(out) != total)
    return invalid_input(where + ": cannot reshape " + dims_str(in) + " (" + std::to_string(total) + " elements) to " + dims_str(out));
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status transpose(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 1, where));
  const Dims& d = n.inputs[0]->dims;
  std::vector<int64_t> perm = n.attrs.get_ints("perm");
  if (perm.empty()) {
    for (size_t i = d.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  if (perm.size() != d.size()) return invalid_input(where + ": perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(d.size()));
  std::vector<bool> seen(d.size());
  Dims out(d.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t p = perm[i] < 0 ? perm[i] + static_cast<int64_t>(d.size()) : perm[i];
    if (p < 0 || p >= static_cast<int64_t>(d.size()) || seen[p]) return invalid_input(where + ": perm is not a permutation");
    seen[p] = true;
    perm[i] = p;
    out[i] = d[p];
  }
  n.attrs.set("perm", perm);
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status sce_loss(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 2, 3, where));
  const Dims& s = n.inputs[0]->dims;
  const Dims& l = n.inputs[1]->dims;
  if (s.size() < 2) return invalid_input(where + ": scores must be [N, C, ...], are " + dims_str(s));
  Dims expect = s;
  expect.erase(expect.begin() + 1);
  if (l != expect) return invalid_input(where + ": labels " + dims_str(l) + " do not match scores " + dims_str(s));
  std::string red = n.attrs.get_string("reduction", "mean");
  if (red != "mean" && red != "sum" && red != "none") return invalid_input(where + ": unknown reduction '" + red + "'");
  set_out(n, 0, n.inputs[0]->dtype, red == "none" ? expect : Dims{});
  set_out(n, 1, n.inputs[0]->dtype, s);
  return Status::ok();
}

Status mse_loss(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 2, 2, where));
  if (n.inputs[0]->dims != n.inputs[1]->dims)
    return invalid_input(where + ": prediction " + dims_str(n.inputs[0]->dims) + " and target " +
                         dims_str(n.inputs[1]->dims) + " differ in shape");
  set_out(n, 0, n.inputs[0]->dtype, {});
  return Status::ok();
}

// Shape ops (folded when their inputs are constants).
Status shape_op(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 1, where));
  int64_t r = n.inputs[0]->dims.size();
  int64_t start = n.attrs.get_int("start", 0), end = n.attrs.get_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  set_out(n, 0, DType::kInt64, {std::max<int64_t>(0, end - start)});
  return Status::ok();
}

Status gather(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 2, 2, where));
  const Dims& d = n.inputs[0]->dims;
  int64_t axis = n.attrs.get_int("axis", 0);
  RETURN_IF_ERROR(normalize_axis(&axis, d.size(), where));
  n.attrs.set("axis", axis);
  const Value* idx = n.inputs[1];
  if (idx->dtype != DType::kInt64 && idx->dtype != DType::kInt32)
    return invalid_input(where + ": indices '" + idx->name + "' must be int32 or int64, are " + dtype_name(idx->dtype));
  if (idx->is_constant() && idx->data)  // constant indices: checked here, as the kernel trusts them
    for (int64_t k = 0; k < idx->data->size(); ++k)
      if (const int64_t i = idx->data->get_int(k); i < -d[axis] || i >= d[axis])
        return invalid_input(where + ": index " + std::to_string(i) + " is outside [-" + std::to_string(d[axis]) +
                             ", " + std::to_string(d[axis]) + ") on axis " + std::to_string(axis));
  Dims out(d.begin(), d.begin() + axis);
  for (int64_t x : n.inputs[1]->dims) out.push_back(x);
  out.insert(out.end(), d.begin() + axis + 1, d.end());
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Expected<std::vector<int64_t>> axes_of(Node& n, const std::string& where) {
  if (n.inputs.size() > 1 && n.inputs[1]) return const_ints(n, 1, where);
  return n.attrs.get_ints("axes");
}

Status unsqueeze(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 2, where));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(n, where));
  const Dims& d = n.inputs[0]->dims;
  int64_t r = d.size() + axes.size();
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) {
    int64_t aa = a < 0 ? a + r : a;
    if (aa < 0 || aa >= r || ins[aa]) return invalid_input(where + ": bad axes");
    ins[aa] = true;
  }
  Dims out;
  size_t k = 0;
  for (int64_t i = 0; i < r; ++i) out.push_back(ins[i] ? 1 : d[k++]);
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status squeeze(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 2, where));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(n, where));
  const Dims& d = n.inputs[0]->dims;
  int64_t r = d.size();
  std::vector<bool> drop(r, axes.empty());
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) drop[i] = d[i] == 1;
  for (int64_t a : axes) {
    int64_t aa = a < 0 ? a + r : a;
    if (aa < 0 || aa >= r || d[aa] != 1) return invalid_input(where + ": cannot squeeze axis " + std::to_string(a) + " of " + dims_str(d));
    drop[aa] = true;
  }
  Dims out;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) out.push_back(d[i]);
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status concat(Node& n, const std::string& where) {
  if (n.inputs.empty() || !n.inputs[0]) return invalid_input(where + ": no inputs");
  Dims out = n.inputs[0]->dims;
  int64_t axis = n.attrs.get_int("axis", 0);
  RETURN_IF_ERROR(normalize_axis(&axis, out.size(), where));
  n.attrs.set("axis", axis);
  out[axis] = 0;
  for (Value* v : n.inputs) {
    if (!v || v->dims.size() != out.size()) return invalid_input(where + ": inputs differ in rank");
    for (size_t i = 0; i < out.size(); ++i)
      if (static_cast<int64_t>(i) != axis && v->dims[i] != out[i]) return invalid_input(where + ": inputs differ outside the axis");
    out[axis] += v->dims[axis];
  }
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status cast(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 1, where));
  RETURN_IF_ERROR(shapes::check_cast(n, where));
  set_out(n, 0, static_cast<DType>(n.attrs.get_int("to", 1)), n.inputs[0]->dims);
  return Status::ok();
}

Status slice(Node& n, const std::string& where) {
  return shapes::slice(n, where);  // the folder recomputes the output of constant slices
}

Status constant_of_shape(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 1, where));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, const_ints(n, 0, where));
  const HostTensor* v = n.attrs.get_tensor("value");
  set_out(n, 0, v ? v->dtype() : DType::kFloat32, Dims(shape.begin(), shape.end()));
  return Status::ok();
}

Status where_op(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 3, 3, where));
  Dims a, b;
  if (!broadcast_dims(n.inputs[0]->dims, n.inputs[1]->dims, &a) || !broadcast_dims(a, n.inputs[2]->dims, &b))
    return invalid_input(where + ": inputs do not broadcast");
  set_out(n, 0, n.inputs[1]->dtype, b);
  return Status::ok();
}

Status expand(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 2, 2, where));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, const_ints(n, 1, where));
  Dims out;
  if (!broadcast_dims(n.inputs[0]->dims, Dims(shape.begin(), shape.end()), &out))
    return invalid_input(where + ": " + dims_str(n.inputs[0]->dims) + " does not expand to " + dims_str(Dims(shape.begin(), shape.end())));
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status not_op(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 1, where));
  set_out(n, 0, DType::kBool, n.inputs[0]->dims);
  return Status::ok();
}

// Dropout: ratio and training mode come from inputs (opset 12+) or the ratio attribute (before),
// normalised into attributes; the importer then rewires the node to the runtime's step counter.
Status dropout(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 1, 3, where));
  if (!n.attrs.has("_training")) {
    float ratio = n.attrs.get_float("ratio", 0.5f);
    bool training = n.since_version < 12;  // exporters emit Dropout only for training before opset 12
    if (n.inputs.size() > 1 && n.inputs[1]) {
      if (!n.inputs[1]->is_constant()) return invalid_input(where + ": ratio must be a constant");
      ratio = static_cast<float>(n.inputs[1]->data->get_double(0));
    }
    if (n.inputs.size() > 2 && n.inputs[2]) {
      if (!n.inputs[2]->is_constant()) return invalid_input(where + ": training_mode must be a constant");
      training = n.inputs[2]->data->get_int(0) != 0;
    }
    if (ratio < 0 || ratio >= 1) return invalid_input(where + ": ratio " + std::to_string(ratio) + " is outside [0, 1)");
    n.attrs.set("ratio", ratio);
    n.attrs.set("_training", static_cast<int64_t>(training));
  }
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  set_out(n, 1, DType::kBool, n.inputs[0]->dims);
  return Status::ok();
}

Status range_op(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need_inputs(n, 3, 3, where));
  for (size_t i = 0; i < 3; ++i)  // folded: the folder computes the length, so every input is needed
    if (!n.inputs[i]->is_constant() || !n.inputs[i]->data)
      return invalid_input(where + ": input '" + n.inputs[i]->name + "' must be known before training (a constant or "
                           "a foldable shape computation), but it is computed from data at run time");
  return Status::ok();
}

// FusedMatMul, FusedGemm, FusedConv (importer/fuse_epilogue.cpp): the product's shape (from its own
// inputs); FusedMatMul's bias runs along the output's last axis; Z (a Gelu epilogue) has Y's shape.
Status fused_product(Node& n, const std::string& where) {
  const std::vector<Value*> all = n.inputs;
  const bool matmul = n.op_type == "FusedMatMul";
  if (matmul && n.inputs.size() > 2) n.inputs.resize(2);
  Status st = n.op_type == "FusedConv" ? shapes::conv(n, where) : matmul ? pt::matmul(n, where) : gemm(n, where);
  n.inputs = all;
  RETURN_IF_ERROR(st);
  const Dims& y = n.outputs.at(0)->dims;
  if (matmul && shape::present(n, 2)) {
    const Value* b = n.inputs[2];
    if (b->dtype != n.inputs[0]->dtype || y.empty() || b->size() != y.back() || b->dims.size() > y.size())
      return invalid_input(where + ": bias " + dims_str(b->dims) + " does not run along the last axis of " + dims_str(y));
  }
  set_out(n, 1, n.outputs[0]->dtype, y);
  return Status::ok();
}

ShapeFn unary_shape(const unary::ArgSpec& s) {
  switch (s.kind) {
    case unary::ArgSpec::kClip: return shapes::clip;
    case unary::ArgSpec::kGelu: return shapes::gelu;
    default: return shapes::unary;
  }
}

const std::map<std::string, ShapeFn>& shape_fns() {
  static const std::map<std::string, ShapeFn> m = {
      // The element-wise unary ops (kernels/unary_ops.h): X's shape, after their parameters' checks.
#define PT_UNARY_SHAPE(Name, ...) {#Name, unary_shape(unary::Name##Op::kArgs)},
      PT_UNARY_OPS(PT_UNARY_SHAPE)
#undef PT_UNARY_SHAPE
      {"Gemm", gemm}, {"MatMul", matmul},
      {"Add", binary_broadcast}, {"Sub", binary_broadcast}, {"Mul", binary_broadcast}, {"Div", binary_broadcast},
      {"Equal", binary_broadcast}, {"Less", binary_broadcast}, {"Greater", binary_broadcast},
      {"Identity", unary_same},
      {"Softmax", softmax}, {"LogSoftmax", softmax},
      {"Flatten", flatten}, {"Reshape", reshape}, {"Transpose", transpose},
      {"SoftmaxCrossEntropyLoss", sce_loss}, {"MSELoss", mse_loss},
      {"Shape", shape_op}, {"Gather", gather}, {"Unsqueeze", unsqueeze}, {"Squeeze", squeeze},
      {"Concat", concat}, {"Cast", cast}, {"Slice", slice}, {"ConstantOfShape", constant_of_shape},
      {"Dropout", dropout},
      {"Where", where_op}, {"Expand", expand}, {"Not", not_op}, {"Range", range_op},
      {"PRelu", shapes::prelu}, {"Pow", shapes::pow},
      {"ReduceSum", shapes::reduce}, {"ReduceMean", shapes::reduce}, {"ReduceMax", shapes::reduce},
      {"Sum", shapes::variadic}, {"Mean", shapes::variadic}, {"Split", shapes::split}, {"Tile", shapes::tile},
      {"Pad", shapes::pad}, {"LayerNormalization", shapes::layer_norm},
      {"FusedAttention", shapes::fused_attention},  // internal: made by importer/fuse_attention.cpp only
      {"FusedMatMul", fused_product}, {"FusedGemm", fused_product}, {"FusedConv", fused_product},  // fuse_epilogue.cpp
      {"Conv", shapes::conv}, {"MaxPool", shapes::max_pool}, {"AveragePool", shapes::average_pool},
      {"GlobalAveragePool", shapes::global_pool}, {"GlobalMaxPool", shapes::global_pool}, {"LRN", shapes::lrn},
      {"BatchNormalization", shapes::batch_norm},
      // Ops of opsets 18 to 21 and the zoo's further ops.
      {"ReduceMin", shapes::reduce}, {"ReduceProd", shapes::reduce}, {"ReduceL1", shapes::reduce},
      {"ReduceL2", shapes::reduce}, {"ReduceSumSquare", shapes::reduce}, {"ReduceLogSum", shapes::reduce},
      {"ReduceLogSumExp", shapes::reduce},
      {"Max", shapes::variadic}, {"Min", shapes::variadic}, {"Mod", binary_broadcast},
      {"ArgMax", shapes::arg_max}, {"CumSum", shapes::cum_sum}, {"Trilu", shapes::trilu},
      {"GatherElements", shapes::gather_elements},
      {"GroupNormalization", shapes::group_norm}, {"InstanceNormalization", shapes::instance_norm},
      {"ConvTranspose", shapes::conv_transpose}, {"Resize", shapes::resize},
      {"Einsum", shapes::einsum},
      {"LSTM", rnn_shape}, {"GRU", rnn_shape},
      {"GatherND", shapes::gather_nd}, {"ScatterND", shapes::scatter_nd},
      {"ScatterElements", shapes::scatter_elements},
  };
  return m;
}

}  // namespace

bool has_shape_fn(const std::string& op) { return shape_fns().count(op) != 0; }

std::vector<std::string> shape_fn_ops() {
  std::vector<std::string> v;
  for (const auto& [op, fn] : shape_fns()) v.push_back(op);
  return v;
}

std::vector<DType> supported_dtypes(const std::string& op, DeviceKind device) {
  std::vector<DType> out;
  for (const KernelEntry& e : all_kernels())
    if (e.device == device && op == e.op) out.push_back(e.dtype);
  return out;
}

Status infer_node(Node& n, const std::string& where) {
  auto it = shape_fns().find(n.op_type);
  if (it == shape_fns().end()) return unsupported(where + ": no shape function for op " + n.op_type);
  for (Value* v : n.inputs)
    if (v && (v->dtype == DType::kUndefined || !dims_known(v->dims)))
      return invalid_input(where + ": input '" + v->name + "' has no resolved shape");
  return it->second(n, where);
}

Status infer_and_fold(Graph& g, const std::string& path, DeviceKind device) {
  std::vector<bool> folded(g.nodes().size(), false);
  for (auto& up : g.nodes()) {
    Node& n = *up;
    if (n.op_type == "Constant") { folded[n.id] = true; continue; }
    const std::string where = path + ": " + n.describe();
    bool all_const = true;
    for (Value* v : n.inputs) all_const &= (v == nullptr || (v->is_constant() && v->data));
    if (n.op_type == "Shape") all_const = true;  // needs only the (static) dims
    if (all_const && (is_foldable_op(n.op_type) || has_kernel(n.op_type, DeviceKind::kCpu, n.inputs.empty() || !n.inputs[0] ? DType::kFloat32 : n.inputs[0]->dtype))) {
      RETURN_IF_ERROR(infer_node(n, where));
      RETURN_IF_ERROR(fold_node(n, where));
      folded[n.id] = true;
      continue;
    }
    RETURN_IF_ERROR(infer_node(n, where));
    for (Value* v : n.outputs)
      if (v && (v->dtype == DType::kUndefined || !dims_known(v->dims)))
        return invalid_input(where + ": output '" + v->name + "' has no static shape (its inputs are computed at run time)");
  }
  g.remove_nodes(folded);
  RETURN_IF_ERROR(expand_recurrent(g, path));  // LSTM and GRU become existing ops (rnn_expand.h)
  std::vector<std::string> bad;
  for (auto& n : g.nodes()) {
    DType dt = n->inputs.empty() || !n->inputs[0] ? DType::kFloat32 : n->inputs[0]->dtype;
    if (!has_kernel(n->op_type, device, dt))
      bad.push_back("'" + n->name + "' (" + n->op_type + " on " + dtype_name(dt) + ")");
  }
  if (!bad.empty()) {
    std::string list;
    for (size_t i = 0; i < bad.size(); ++i) list += (i ? ", " : "") + bad[i];
    return unsupported(path + ": " + std::to_string(bad.size()) + " node(s) have no " + device_kind_name(device) +
                       " kernel for their input type: " + list);
  }
  for (Value* v : g.outputs)
    if (v->dtype == DType::kUndefined) return invalid_input(path + ": graph output '" + v->name + "' has no inferred type");
  return Status::ok();
}

}  // namespace pt
