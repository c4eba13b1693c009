// Shape functions of Conv, the pooling ops, LRN and BatchNormalization (see shapes_cnn.h). The
// window arithmetic is kernels/window.h, which the kernels use too, so both agree on every
// output extent.
#include "importer/shape_util.h"
#include "importer/shapes_cnn.h"

#include <algorithm>

#include "kernels/window.h"

namespace pt::shapes {
namespace {

using shape::set_out;
constexpr auto need = shape::need_inputs;


Status check_float(const Node& n, const std::string& where) {
  const DType dt = n.inputs[0]->dtype;
  if (dt != DType::kFloat32 && dt != DType::kFloat64)
    return unsupported(where + ": " + n.op_type + " of " + dtype_name(dt) + " is not supported (float32 and float64 are)");
  for (const Value* v : n.inputs)
    if (v && v->dtype != dt)
      return unsupported(where + ": input '" + v->name + "' is " + dtype_name(v->dtype) + ", X is " + dtype_name(dt) +
                         "; mixed element types are not supported");
  return Status::ok();
}

// Resolves auto_pad into explicit pads and fills in defaults for strides, dilations and
// kernel_shape (`kernel` when the attribute is absent), so that kernels read only explicit values.
// SAME_*: output ceil(in / stride), the total padding split evenly, the odd one at the end (UPPER)
// or the begin (LOWER); VALID: no padding. ceil_mode is cleared for auto_pad other than NOTSET:
// those output extents are defined without it.
Status normalise_window(Node& n, const Dims& x, const std::vector<int64_t>& kernel, const std::string& where) {
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank < 3 || rank > 2 + kMaxSpatial)
    return unsupported(where + ": input " + dims_str(x) + " must be [N, C, D1...] with 1 to 3 spatial dims");
  const size_t nd = static_cast<size_t>(rank - 2);
  std::vector<int64_t> k = n.attrs.get_ints("kernel_shape", kernel);
  std::vector<int64_t> s = n.attrs.get_ints("strides", std::vector<int64_t>(nd, 1));
  std::vector<int64_t> d = n.attrs.get_ints("dilations", std::vector<int64_t>(nd, 1));
  if (k.size() != nd || s.size() != nd || d.size() != nd)
    return invalid_input(where + ": kernel_shape, strides and dilations need " + std::to_string(nd) +
                         " entries for input " + dims_str(x));
  for (size_t i = 0; i < nd; ++i)
    if (k[i] < 1 || s[i] < 1 || d[i] < 1)
      return invalid_input(where + ": kernel_shape, strides and dilations must be positive");
  const std::string auto_pad = n.attrs.get_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads;
  if (auto_pad == "NOTSET") {
    pads = n.attrs.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  } else if (auto_pad == "VALID") {
    pads.assign(2 * nd, 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    pads.assign(2 * nd, 0);
    for (size_t i = 0; i < nd; ++i) {
      const int64_t in = x[2 + i], out = (in + s[i] - 1) / s[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in);
      const int64_t small = total / 2, large = total - small;
      pads[i] = auto_pad == "SAME_UPPER" ? small : large;
      pads[nd + i] = auto_pad == "SAME_UPPER" ? large : small;
    }
  } else {
    return invalid_input(where + ": unknown auto_pad '" + auto_pad + "' (NOTSET, SAME_UPPER, SAME_LOWER, VALID)");
  }
  if (auto_pad != "NOTSET") n.attrs.set("ceil_mode", int64_t{0});
  n.attrs.set("auto_pad", std::string("NOTSET"));
  n.attrs.set("kernel_shape", k);
  n.attrs.set("strides", s);
  n.attrs.set("dilations", d);
  n.attrs.set("pads", pads);
  return Status::ok();
}

Status pool(Node& n, const std::string& where, Window* w) {
  RETURN_IF_ERROR(need(n, 1, 1, where));
  RETURN_IF_ERROR(check_float(n, where));
  if (!n.attrs.has("kernel_shape")) return invalid_input(where + ": the kernel_shape attribute is required");
  const Dims& x = n.inputs[0]->dims;
  RETURN_IF_ERROR(normalise_window(n, x, {}, where));
  n.attrs.set("ceil_mode", n.attrs.get_int("ceil_mode", 0));
  RETURN_IF_ERROR(window_from_attrs(n.op_type.c_str(), n.attrs, x, nullptr, n.attrs.get_int("ceil_mode", 0) != 0, w)
                      .with_context(where + ": "));
  set_out(n, 0, n.inputs[0]->dtype, window_output_dims(*w, w->c));
  return Status::ok();
}

}  // namespace

Status conv(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 2, 3, where));
  RETURN_IF_ERROR(check_float(n, where));
  const Dims& x = n.inputs[0]->dims;
  const Dims& wd = n.inputs[1]->dims;
  if (wd.size() != x.size())
    return invalid_input(where + ": W " + dims_str(wd) + " and X " + dims_str(x) + " differ in rank");
  // Before any look at x[1] and wd[1] (a rank-1 X and W read past both: ASan, found by fuzz_model).
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank < 3 || rank > 2 + kMaxSpatial)
    return invalid_input(where + ": X " + dims_str(x) + " and W " + dims_str(wd) +
                         " must be [N, C, D1...] and [M, C/group, k...] with 1 to 3 spatial dims");
  const int64_t group = n.attrs.get_int("group", 1);
  if (group < 1 || x[1] % group != 0 || wd[0] % group != 0 || wd[1] != x[1] / group)
    return invalid_input(where + ": group " + std::to_string(group) + " does not fit X " + dims_str(x) + " and W " +
                         dims_str(wd) + " (W must be [M, C/group, k...], M divisible by group)");
  if (n.inputs.size() > 2 && n.inputs[2] && n.inputs[2]->dims != Dims{wd[0]})
    return invalid_input(where + ": B " + dims_str(n.inputs[2]->dims) + " must be [" + std::to_string(wd[0]) + "]");
  const std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  RETURN_IF_ERROR(normalise_window(n, x, kernel, where));
  if (n.attrs.get_ints("kernel_shape") != kernel)
    return invalid_input(where + ": kernel_shape " + dims_str(Dims(n.attrs.get_ints("kernel_shape"))) +
                         " does not match W " + dims_str(wd));
  n.attrs.set("group", group);
  Window w;
  RETURN_IF_ERROR(window_from_attrs("Conv", n.attrs, x, &kernel, false, &w).with_context(where + ": "));
  set_out(n, 0, n.inputs[0]->dtype, window_output_dims(w, wd[0]));
  return Status::ok();
}

// ConvTranspose: Y = ConvGradInput(X, W), i.e. the input gradient of a Conv whose input is Y. The
// window attributes are normalised for that Conv (explicit pads from pads / auto_pad /
// output_shape, as ONNX's ConvTranspose defines them), so the kernels share Conv's window code.
Status conv_transpose(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 2, 3, where));
  RETURN_IF_ERROR(check_float(n, where));
  const Dims& x = n.inputs[0]->dims;
  const Dims& wd = n.inputs[1]->dims;
  const int64_t rank = static_cast<int64_t>(x.size());
  if (wd.size() != x.size() || rank < 3 || rank > 2 + kMaxSpatial)
    return invalid_input(where + ": X " + dims_str(x) + " and W " + dims_str(wd) +
                         " must be [N, C, D1...] and [C, M/group, k...] with 1 to 3 spatial dims");
  const int64_t group = n.attrs.get_int("group", 1);
  if (group < 1 || x[1] != wd[0] || wd[0] % group != 0)
    return invalid_input(where + ": group " + std::to_string(group) + " does not fit X " + dims_str(x) + " and W " +
                         dims_str(wd) + " (W must be [C, M/group, k...])");
  int64_t m = 0;  // the output channels; both factors come from the file
  if (__builtin_mul_overflow(wd[1], group, &m))
    return invalid_input(where + ": group " + std::to_string(group) + " times W " + dims_str(wd) +
                         "'s second dimension overflows int64");
  if (n.inputs.size() > 2 && n.inputs[2] && n.inputs[2]->dims != Dims{m})
    return invalid_input(where + ": B " + dims_str(n.inputs[2]->dims) + " must be [" + std::to_string(m) + "]");
  const size_t nd = static_cast<size_t>(rank - 2);
  const std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  const std::vector<int64_t> k = n.attrs.get_ints("kernel_shape", kernel);
  if (k != kernel) return invalid_input(where + ": kernel_shape does not match W " + dims_str(wd));
  const std::vector<int64_t> st = n.attrs.get_ints("strides", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> dl = n.attrs.get_ints("dilations", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> op = n.attrs.get_ints("output_padding", std::vector<int64_t>(nd, 0));
  std::vector<int64_t> pads = n.attrs.get_ints("pads", std::vector<int64_t>(2 * nd, 0));
  const std::vector<int64_t> out_shape = n.attrs.get_ints("output_shape");
  const std::string auto_pad = n.attrs.get_string("auto_pad", "NOTSET");
  if (st.size() != nd || dl.size() != nd || op.size() != nd || pads.size() != 2 * nd ||
      (!out_shape.empty() && out_shape.size() != nd))
    return invalid_input(where + ": strides, dilations, output_padding, pads or output_shape have the wrong length");
  Dims y = {x[0], m};
  for (size_t i = 0; i < nd; ++i) {
    if (st[i] < 1 || dl[i] < 1 || op[i] < 0) return invalid_input(where + ": strides and dilations must be positive");
    if (op[i] >= st[i])
      return unsupported(where + ": output_padding " + std::to_string(op[i]) + " not below the stride " +
                         std::to_string(st[i]));
    const int64_t keff = (k[i] - 1) * dl[i] + 1;
    int64_t full = st[i] * (x[2 + i] - 1) + op[i] + keff;
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t want = !out_shape.empty() ? out_shape[i] : x[2 + i] * st[i];
      int64_t total = full - want;
      if (total < 0) {  // the extra rows are output padding at the end (ONNX Runtime's reading)
        if (-total - op[i] >= st[i])
          return unsupported(where + ": output_shape exceeds the transposed convolution by a stride or more");
        full = want;
        total = 0;
      }
      const bool upper = auto_pad == "SAME_UPPER";
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[nd + i] = total - pads[i];
    } else if (auto_pad == "VALID") {
      pads[i] = pads[nd + i] = 0;
    } else if (auto_pad != "NOTSET") {
      return invalid_input(where + ": unknown auto_pad '" + auto_pad + "'");
    }
    y.push_back(full - pads[i] - pads[nd + i]);
    if (y.back() < 1) return invalid_input(where + ": the output would be empty");
  }
  n.attrs.set("auto_pad", std::string("NOTSET"));
  n.attrs.set("kernel_shape", k);
  n.attrs.set("strides", st);
  n.attrs.set("dilations", dl);
  n.attrs.set("pads", pads);
  n.attrs.set("group", group);
  n.attrs.set("ceil_mode", int64_t{0});
  Window w;  // the Conv that ConvTranspose transposes must map Y back to X
  RETURN_IF_ERROR(window_from_attrs("ConvTranspose", n.attrs, y, &kernel, false, &w).with_context(where + ": "));
  if (window_output_dims(w, x[1]) != x)
    return unsupported(where + ": output " + dims_str(y) + " does not map back onto X " + dims_str(x));
  set_out(n, 0, n.inputs[0]->dtype, y);
  return Status::ok();
}

Status max_pool(Node& n, const std::string& where) {
  Window w;
  RETURN_IF_ERROR(pool(n, where, &w));
  const int64_t order = n.attrs.get_int("storage_order", 0);
  if (order != 0 && order != 1) return invalid_input(where + ": storage_order must be 0 or 1");
  set_out(n, 1, DType::kInt64, window_output_dims(w, w.c));
  return Status::ok();
}

Status average_pool(Node& n, const std::string& where) {
  Window w;
  RETURN_IF_ERROR(pool(n, where, &w));
  n.attrs.set("count_include_pad", n.attrs.get_int("count_include_pad", 0));
  return Status::ok();
}

Status global_pool(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 1, where));
  RETURN_IF_ERROR(check_float(n, where));
  const Dims& x = n.inputs[0]->dims;
  if (x.size() < 3) return invalid_input(where + ": input " + dims_str(x) + " must be [N, C, D1...]");
  Dims out = {x[0], x[1]};
  out.resize(x.size(), 1);
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status lrn(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 1, where));
  RETURN_IF_ERROR(check_float(n, where));
  if (n.attrs.get_int("size", 0) < 1) return invalid_input(where + ": the size attribute must be a positive integer");
  if (n.inputs[0]->dims.size() < 2) return invalid_input(where + ": input must be [N, C, ...]");
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status batch_norm(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 5, 5, where));
  RETURN_IF_ERROR(check_float(n, where));
  const Dims& x = n.inputs[0]->dims;
  if (x.size() < 2) return invalid_input(where + ": X " + dims_str(x) + " must be [N, C, ...]");
  for (size_t i = 1; i < 5; ++i)
    if (n.inputs[i]->dims != Dims{x[1]})
      return invalid_input(where + ": input '" + n.inputs[i]->name + "' " + dims_str(n.inputs[i]->dims) + " must be [" +
                           std::to_string(x[1]) + "] (one value per channel)");
  if (n.since_version < 9 && n.attrs.get_int("spatial", 1) == 0)
    return unsupported(where + ": spatial=0 (per-activation statistics) is not supported");
  if (n.outputs.size() > 5) return invalid_input(where + ": has " + std::to_string(n.outputs.size()) + " outputs, at most 5");
  bool training = false;
  if (n.since_version >= 14) {
    training = n.attrs.get_int("training_mode", 0) != 0;
    if (n.outputs.size() > 3)
      return invalid_input(where + ": opset " + std::to_string(n.since_version) + " BatchNormalization has at most 3 outputs");
  } else {
    for (size_t i = 1; i < n.outputs.size(); ++i) training |= n.outputs[i] != nullptr;
  }
  if (!n.attrs.has("_training")) n.attrs.set("_training", static_cast<int64_t>(training));
  // Running variance from the unbiased batch variance, as PyTorch keeps it (ONNX's reference
  // uses the biased one; the kernel does too when this is 0).
  if (!n.attrs.has("_unbiased_running_var")) n.attrs.set("_unbiased_running_var", int64_t{1});
  n.attrs.set("epsilon", n.attrs.get_float("epsilon", 1e-5f));
  n.attrs.set("momentum", n.attrs.get_float("momentum", 0.9f));
  const DType dt = n.inputs[0]->dtype;
  set_out(n, 0, dt, x);
  for (size_t i = 1; i < 5; ++i) set_out(n, i, dt, {x[1]});
  return Status::ok();
}

}  // namespace pt::shapes
