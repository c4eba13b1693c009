// Shape functions of the activation, reduction, data-movement and LayerNorm ops (see the header).
#include "importer/shape_util.h"
#include "importer/shapes_tensor.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/einsum_equation.h"
#include <limits>

namespace pt::shapes {

namespace {

using shape::present;
using shape::set_out;
constexpr auto need = shape::need_inputs;


// A constant integer vector from input i, or an error naming the tensor.
Expected<std::vector<int64_t>> const_ints(const Node& n, size_t i, const std::string& where, const char* what) {
  const Value* v = n.inputs.at(i);
  if (!v->is_constant() || !v->data)
    return invalid_input(where + ": " + what + " input '" + v->name + "' must be known before training (a constant " +
                         "or a foldable shape computation), but it is computed from data at run time");
  std::vector<int64_t> out(v->data->size());
  for (int64_t k = 0; k < v->data->size(); ++k) out[k] = v->data->get_int(k);
  return out;
}

Status axis_in_range(int64_t* a, int64_t rank, const std::string& where) {
  if (*a < -rank || *a >= rank)
    return invalid_input(where + ": axis " + std::to_string(*a) + " is out of range for rank " + std::to_string(rank));
  if (*a < 0) *a += rank;
  return Status::ok();
}

// Axes made non-negative, checked, in the order given (duplicates rejected).
Expected<std::vector<int64_t>> normalize_axes(std::vector<int64_t> axes, int64_t rank, const std::string& where) {
  std::vector<bool> seen(rank, false);
  for (int64_t& a : axes) {
    RETURN_IF_ERROR(axis_in_range(&a, rank, where));
    if (seen[a]) return invalid_input(where + ": axis " + std::to_string(a) + " appears twice");
    seen[a] = true;
  }
  return axes;
}

Status broadcast_all(const Node& n, size_t first, const std::string& where, Dims* out) {
  *out = n.inputs.at(first)->dims;
  for (size_t i = first + 1; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    Dims b;
    if (!broadcast_dims(*out, n.inputs[i]->dims, &b))
      return invalid_input(where + ": input shapes " + dims_str(*out) + " and " + dims_str(n.inputs[i]->dims) +
                           " do not broadcast");
    *out = b;
  }
  return Status::ok();
}

bool kernel_type(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt64 || t == DType::kInt32 ||
         t == DType::kInt8 || t == DType::kUint8 || t == DType::kBool;
}

}  // namespace

Status unary(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 1, where));
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status clip(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 3, where));
  for (size_t i = 1; i < 3; ++i)
    if (present(n, i)) {
      if (n.inputs[i]->size() != 1)
        return invalid_input(where + ": " + (i == 1 ? "min" : "max") + " must be a scalar, is " +
                             dims_str(n.inputs[i]->dims));
      if (n.inputs[i]->dtype != n.inputs[0]->dtype)
        return invalid_input(where + ": " + (i == 1 ? "min" : "max") + " has another type than the input");
    }
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status prelu(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 2, 2, where));
  Dims b;
  if (!broadcast_dims(n.inputs[0]->dims, n.inputs[1]->dims, &b) || b != n.inputs[0]->dims)
    return invalid_input(where + ": slope " + dims_str(n.inputs[1]->dims) + " does not broadcast to X " +
                         dims_str(n.inputs[0]->dims));
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status pow(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 2, 2, where));
  Dims out;
  RETURN_IF_ERROR(broadcast_all(n, 0, where, &out));
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status reduce(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 2, where));
  const Dims& d = n.inputs[0]->dims;
  const int64_t r = static_cast<int64_t>(d.size());
  // Axes from the input (ReduceSum from opset 13, the others from 18) or the attribute.
  std::vector<int64_t> axes = n.attrs.get_ints("axes");
  if (present(n, 1)) {
    ASSIGN_OR_RETURN(axes, const_ints(n, 1, where, "axes"));
  }
  ASSIGN_OR_RETURN(axes, normalize_axes(axes, r, where));
  const bool keep = n.attrs.get_int("keepdims", 1) != 0;
  const bool noop = n.attrs.get_int("noop_with_empty_axes", 0) != 0;
  if (axes.empty() && !noop)
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  std::sort(axes.begin(), axes.end());
  n.attrs.set("_axes", axes);
  Dims out;
  for (int64_t i = 0; i < r; ++i) {
    const bool red = std::binary_search(axes.begin(), axes.end(), i);
    if (!red) out.push_back(d[i]);
    else if (keep) out.push_back(1);
  }
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status variadic(Node& n, const std::string& where) {
  if (n.inputs.empty() || !n.inputs[0]) return invalid_input(where + ": needs at least one input");
  for (const Value* v : n.inputs)
    if (!v || v->dtype != n.inputs[0]->dtype) return invalid_input(where + ": inputs must be present and of one type");
  Dims out;
  RETURN_IF_ERROR(broadcast_all(n, 0, where, &out));
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status split(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 2, where));
  const Dims& d = n.inputs[0]->dims;
  int64_t axis = n.attrs.get_int("axis", 0);
  RETURN_IF_ERROR(axis_in_range(&axis, static_cast<int64_t>(d.size()), where));
  n.attrs.set("axis", axis);
  const int64_t len = d[axis];
  const int64_t k = static_cast<int64_t>(n.outputs.size());
  std::vector<int64_t> sizes = n.attrs.get_ints("split");  // attribute before opset 13
  if (present(n, 1)) {
    ASSIGN_OR_RETURN(sizes, const_ints(n, 1, where, "split"));
  }
  if (sizes.empty()) {
    if (n.attrs.has("num_outputs")) {  // opset 18: ceil-sized chunks, the last one smaller
      const int64_t parts = n.attrs.get_int("num_outputs", k);
      if (parts != k || parts <= 0) return invalid_input(where + ": num_outputs does not match the outputs");
      const int64_t chunk = (len + parts - 1) / parts;
      for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::max<int64_t>(0, std::min(chunk, len - i * chunk)));
    } else {
      if (k == 0 || len % k) return invalid_input(where + ": dim " + std::to_string(len) + " does not split into " +
                                                  std::to_string(k) + " equal parts");
      sizes.assign(k, len / k);
    }
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) return invalid_input(where + ": negative split size");
    total += s;
  }
  if (static_cast<int64_t>(sizes.size()) != k || total != len)
    return invalid_input(where + ": split sizes " + dims_str(Dims(sizes)) + " do not cover dim " + std::to_string(len) +
                         " with " + std::to_string(k) + " outputs");
  n.attrs.set("_split", sizes);
  for (int64_t i = 0; i < k; ++i) {
    Dims o = d;
    o[axis] = sizes[i];
    set_out(n, i, n.inputs[0]->dtype, o);
  }
  return Status::ok();
}

Status slice(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 5, where));
  const Dims& d = n.inputs[0]->dims;
  const int64_t r = static_cast<int64_t>(d.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.inputs.size() > 1) {  // opset 10+: inputs
    if (!present(n, 1) || !present(n, 2)) return invalid_input(where + ": starts and ends are required");
    ASSIGN_OR_RETURN(starts, const_ints(n, 1, where, "starts"));
    ASSIGN_OR_RETURN(ends, const_ints(n, 2, where, "ends"));
    if (present(n, 3)) {
      ASSIGN_OR_RETURN(axes, const_ints(n, 3, where, "axes"));
    }
    if (present(n, 4)) {
      ASSIGN_OR_RETURN(steps, const_ints(n, 4, where, "steps"));
    }
  } else {
    starts = n.attrs.get_ints("starts");
    ends = n.attrs.get_ints("ends");
    axes = n.attrs.get_ints("axes");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return invalid_input(where + ": starts, ends, axes and steps differ in length");
  ASSIGN_OR_RETURN(axes, normalize_axes(axes, r, where));
  std::vector<int64_t> st(r, 0), sp(r, 1);
  Dims out = d;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = axes[i], dim = d[a], step = steps[i];
    if (step == 0) return invalid_input(where + ": step 0");
    // Clamped as the ONNX reference does (int64 extremes stand for "to the end").
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s = s < std::numeric_limits<int64_t>::min() + dim ? -1 - dim : s + dim;
    if (e < 0) e = e < std::numeric_limits<int64_t>::min() + dim ? -1 - dim : e + dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      s = std::clamp<int64_t>(s, 0, std::max<int64_t>(dim - 1, 0));
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    const int64_t len = step > 0 ? std::max<int64_t>(0, (e - s + step - 1) / step)
                                 : std::max<int64_t>(0, (s - e + (-step) - 1) / (-step));
    out[a] = len;
    st[a] = len > 0 ? s : 0;
    sp[a] = step;
  }
  n.attrs.set("_starts", st);
  n.attrs.set("_steps", sp);
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status tile(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 2, 2, where));
  const Dims& d = n.inputs[0]->dims;
  ASSIGN_OR_RETURN(std::vector<int64_t> rep, const_ints(n, 1, where, "repeats"));
  if (rep.size() != d.size())
    return invalid_input(where + ": repeats has " + std::to_string(rep.size()) + " entries for rank " +
                         std::to_string(d.size()));
  Dims out(d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    if (rep[i] < 0) return invalid_input(where + ": negative repeat");
    out[i] = d[i] * rep[i];
  }
  n.attrs.set("_repeats", rep);
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status pad(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 4, where));
  const Dims& d = n.inputs[0]->dims;
  const int64_t r = static_cast<int64_t>(d.size());
  const std::string mode = n.attrs.get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return unsupported(where + ": mode '" + mode + "' (supported: constant, reflect, edge)");
  std::vector<int64_t> pads = n.attrs.get_ints("pads");  // attribute before opset 11
  double value = n.attrs.get_float("value", 0.0f);
  std::vector<int64_t> axes;
  if (present(n, 1)) {
    ASSIGN_OR_RETURN(pads, const_ints(n, 1, where, "pads"));
  }
  if (present(n, 2)) {
    const Value* v = n.inputs[2];
    if (!v->is_constant() || !v->data || v->size() != 1)
      return invalid_input(where + ": constant_value must be a scalar known before training");
    value = v->data->get_double(0);
  }
  if (present(n, 3)) {
    ASSIGN_OR_RETURN(axes, const_ints(n, 3, where, "axes"));
    ASSIGN_OR_RETURN(axes, normalize_axes(axes, r, where));
  } else {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  const int64_t na = static_cast<int64_t>(axes.size());
  if (static_cast<int64_t>(pads.size()) != 2 * na)
    return invalid_input(where + ": pads has " + std::to_string(pads.size()) + " entries, expected " +
                         std::to_string(2 * na));
  std::vector<int64_t> full(2 * r, 0);
  Dims out = d;
  for (int64_t i = 0; i < na; ++i) {
    const int64_t a = axes[i];
    full[a] = pads[i];
    full[a + r] = pads[i + na];
    out[a] = d[a] + pads[i] + pads[i + na];
    if (out[a] < 0) return invalid_input(where + ": pads crop dim " + std::to_string(a) + " below zero");
    if (mode == "reflect" && (pads[i] >= d[a] || pads[i + na] >= d[a]) && d[a] > 1)
      return invalid_input(where + ": reflect pads of dim " + std::to_string(a) + " must be smaller than it");
  }
  n.attrs.set("_pads", full);
  n.attrs.set("_value", static_cast<float>(value));
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status layer_norm(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 2, 3, where));
  const Dims& d = n.inputs[0]->dims;
  const int64_t r = static_cast<int64_t>(d.size());
  int64_t axis = n.attrs.get_int("axis", -1);
  RETURN_IF_ERROR(axis_in_range(&axis, r, where));
  n.attrs.set("axis", axis);
  if (n.attrs.get_int("stash_type", 1) != 1)
    return unsupported(where + ": stash_type " + std::to_string(n.attrs.get_int("stash_type", 1)) +
                       " (statistics are computed in double; only the default 1 is accepted)");
  int64_t cols = 1;
  for (int64_t i = axis; i < r; ++i) cols *= d[i];
  for (size_t i = 1; i < 3; ++i)
    if (present(n, i) && n.inputs[i]->size() != cols)
      return unsupported(where + ": " + (i == 1 ? "Scale " : "B ") + dims_str(n.inputs[i]->dims) +
                         " must have the normalized dims' " + std::to_string(cols) + " elements");
  Dims stat = d;
  for (int64_t i = axis; i < r; ++i) stat[i] = 1;
  set_out(n, 0, n.inputs[0]->dtype, d);
  set_out(n, 1, n.inputs[0]->dtype, stat);
  set_out(n, 2, n.inputs[0]->dtype, stat);
  return Status::ok();
}

Status fused_attention(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 3, 5, where));
  if (present(n, 4) && (n.inputs[4]->dtype != DType::kInt64 || n.inputs[4]->size() != 1))
    return invalid_input(where + ": the step input (attention dropout) must be an int64 scalar");
  const Dims& q = n.inputs[0]->dims;
  const Dims& k = n.inputs[1]->dims;
  const Dims& v = n.inputs[2]->dims;
  const size_t r = q.size();
  if (r < 2 || k.size() != r || v.size() != r || !std::equal(q.begin(), q.end() - 2, k.begin()) ||
      !std::equal(q.begin(), q.end() - 2, v.begin()) || k[r - 2] != q[r - 1] || v[r - 2] != k[r - 1])
    return invalid_input(where + ": Q " + dims_str(q) + ", Kt " + dims_str(k) + " and V " + dims_str(v) +
                         " do not chain as [B..., T, Dk] @ [B..., Dk, S] @ [B..., S, Dv]");
  if (present(n, 3)) {
    Dims scores(q.begin(), q.end() - 1), b;
    scores.push_back(k[r - 1]);
    if (n.inputs[3]->dims.size() > r || !broadcast_dims(n.inputs[3]->dims, scores, &b) || b != scores)
      return invalid_input(where + ": mask " + dims_str(n.inputs[3]->dims) + " does not broadcast to the scores " +
                           dims_str(scores));
  }
  Dims y(q.begin(), q.end() - 1), lse(q.begin(), q.end() - 1);
  y.push_back(v[r - 1]);
  set_out(n, 0, n.inputs[0]->dtype, y);
  set_out(n, 1, n.inputs[0]->dtype, lse);
  return Status::ok();
}

Status gelu(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 1, where));
  const std::string a = n.attrs.get_string("approximate", "none");
  if (a != "none" && a != "tanh") return invalid_input(where + ": approximate '" + a + "' (none or tanh)");
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status arg_max(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 1, where));
  const Dims& d = n.inputs[0]->dims;
  int64_t axis = n.attrs.get_int("axis", 0);
  RETURN_IF_ERROR(axis_in_range(&axis, static_cast<int64_t>(d.size()), where));
  n.attrs.set("_axis", axis);
  Dims out = d;
  if (n.attrs.get_int("keepdims", 1)) out[axis] = 1;
  else out.erase(out.begin() + axis);
  set_out(n, 0, DType::kInt64, out);
  return Status::ok();
}

Status cum_sum(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 2, 2, where));
  ASSIGN_OR_RETURN(std::vector<int64_t> axis, const_ints(n, 1, where, "axis"));
  if (axis.size() != 1) return invalid_input(where + ": axis must be a scalar");
  RETURN_IF_ERROR(axis_in_range(&axis[0], static_cast<int64_t>(n.inputs[0]->dims.size()), where));
  n.attrs.set("_axis", axis[0]);
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status trilu(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 2, where));
  if (n.inputs[0]->dims.size() < 2) return invalid_input(where + ": the input must have rank 2 or more");
  int64_t k = 0;
  if (present(n, 1)) {
    ASSIGN_OR_RETURN(std::vector<int64_t> kv, const_ints(n, 1, where, "k"));
    if (kv.size() != 1) return invalid_input(where + ": k must be a scalar");
    k = kv[0];
  }
  n.attrs.set("_k", k);
  set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status gather_elements(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 2, 2, where));
  const Dims& d = n.inputs[0]->dims;
  const Dims& id = n.inputs[1]->dims;
  if (n.inputs[1]->dtype != DType::kInt64 && n.inputs[1]->dtype != DType::kInt32)
    return invalid_input(where + ": indices must be int64 or int32");
  if (id.size() != d.size()) return invalid_input(where + ": indices " + dims_str(id) + " and data " + dims_str(d) + " differ in rank");
  int64_t axis = n.attrs.get_int("axis", 0);
  RETURN_IF_ERROR(axis_in_range(&axis, static_cast<int64_t>(d.size()), where));
  for (size_t i = 0; i < d.size(); ++i)
    if (static_cast<int64_t>(i) != axis && id[i] > d[i])
      return invalid_input(where + ": indices " + dims_str(id) + " exceed data " + dims_str(d) + " outside the axis");
  n.attrs.set("_axis", axis);
  set_out(n, 0, n.inputs[0]->dtype, id);
  return Status::ok();
}

namespace {
// Scale and bias of a normalisation over (N, C, ...): `params` elements each.
Status norm_params(Node& n, int64_t params, const std::string& where, const char* form) {
  for (size_t i = 1; i < 3; ++i)
    if (n.inputs[i]->size() != params)
      return invalid_input(where + ": " + (i == 1 ? "scale " : "bias ") + dims_str(n.inputs[i]->dims) + " must have " +
                           std::to_string(params) + " elements (" + form + ")");
  return Status::ok();
}
}  // namespace

// Opsets 18 to 20: scale and bias per group; 21: per channel (ONNX's Changelog).
Status group_norm(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 3, 3, where));
  const Dims& d = n.inputs[0]->dims;
  if (d.size() < 2) return invalid_input(where + ": X must be (N, C, ...), is " + dims_str(d));
  if (!n.attrs.has("num_groups")) return invalid_input(where + ": attribute num_groups is required");
  const int64_t g = n.attrs.get_int("num_groups", 0);
  if (g <= 0 || d[1] % g)
    return invalid_input(where + ": " + std::to_string(d[1]) + " channels do not split into num_groups = " + std::to_string(g));
  const bool per_group = n.since_version < 21;
  RETURN_IF_ERROR(norm_params(n, per_group ? g : d[1], where, per_group ? "one per group before opset 21" : "one per channel from opset 21"));
  n.attrs.set("_groups", g);
  n.attrs.set("_per_group", static_cast<int64_t>(per_group));
  set_out(n, 0, n.inputs[0]->dtype, d);
  return Status::ok();
}

Status instance_norm(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 3, 3, where));
  const Dims& d = n.inputs[0]->dims;
  if (d.size() < 3) return invalid_input(where + ": X must be (N, C, D1, ...), is " + dims_str(d));
  RETURN_IF_ERROR(norm_params(n, d[1], where, "one per channel"));
  n.attrs.set("_groups", d[1]);
  n.attrs.set("_per_group", int64_t{0});
  set_out(n, 0, n.inputs[0]->dtype, d);
  return Status::ok();
}

Status einsum(Node& n, const std::string& where) {
  if (n.inputs.empty()) return invalid_input(where + ": needs at least one input");
  auto e = einsum::parse(n.attrs.get_string("equation", ""));
  if (!e) return Status(e.status().code(), where + ": " + e.status().message());
  if (e->inputs.size() != n.inputs.size())
    return invalid_input(where + ": the equation has " + std::to_string(e->inputs.size()) + " terms for " +
                         std::to_string(n.inputs.size()) + " inputs");
  std::map<char, int64_t> size;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const Value* v = n.inputs[k];
    if (!v || v->dtype != n.inputs[0]->dtype) return invalid_input(where + ": inputs must be present and of one type");
    if (e->inputs[k].size() != v->dims.size())
      return invalid_input(where + ": term '" + e->inputs[k] + "' for input " + dims_str(v->dims));
    for (size_t i = 0; i < v->dims.size(); ++i) {
      auto [it, fresh] = size.emplace(e->inputs[k][i], v->dims[i]);
      if (!fresh && it->second != v->dims[i])
        return invalid_input(where + ": letter '" + std::string(1, e->inputs[k][i]) + "' has sizes " +
                             std::to_string(it->second) + " and " + std::to_string(v->dims[i]));
    }
  }
  Dims out;
  for (char c : e->output) {
    if (!size.count(c)) return invalid_input(where + ": output letter '" + std::string(1, c) + "' is in no input");
    out.push_back(size[c]);
  }
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

// Resize, opsets 10 (X, scales; asymmetric coordinates, floor) to 21 (X, roi, scales, sizes; axes,
// keep_aspect_ratio_policy and antialias from 18, half_pixel_symmetric from 19).
Status resize(Node& n, const std::string& where) {
  RETURN_IF_ERROR(need(n, 1, 4, where));
  const Dims& d = n.inputs[0]->dims;
  const int64_t r = static_cast<int64_t>(d.size());
  const bool v10 = n.since_version < 11;
  const std::string mode = n.attrs.get_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear")
    return unsupported(where + ": mode '" + mode + "' (supported: nearest, linear)");
  const std::string coord = v10 ? "asymmetric" : n.attrs.get_string("coordinate_transformation_mode", "half_pixel");
  bool known = false;
  for (const char* ok : {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                         "tf_half_pixel_for_nn"})
    known |= coord == ok;
  if (!known) return unsupported(where + ": coordinate_transformation_mode '" + coord + "'");
  if (n.attrs.get_int("antialias", 0) != 0) return unsupported(where + ": antialias 1 is not supported");
  const std::string nearest = v10 ? "floor" : n.attrs.get_string("nearest_mode", "round_prefer_floor");
  if (nearest != "round_prefer_floor" && nearest != "round_prefer_ceil" && nearest != "floor" && nearest != "ceil")
    return invalid_input(where + ": unknown nearest_mode '" + nearest + "'");
  std::vector<int64_t> axes = n.attrs.get_ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  ASSIGN_OR_RETURN(axes, normalize_axes(axes, r, where));
  const size_t scales_at = v10 ? 1 : 2;
  std::vector<double> scales;
  if (present(n, scales_at) && n.inputs[scales_at]->size() > 0) {
    const Value* s = n.inputs[scales_at];
    if (!s->is_constant() || !s->data)
      return invalid_input(where + ": scales input '" + s->name + "' must be known before training (a constant or a "
                           "foldable shape computation), but it is computed from data at run time");
    for (int64_t i = 0; i < s->data->size(); ++i) scales.push_back(s->data->get_double(i));
  }
  std::vector<int64_t> sizes;
  if (!v10 && present(n, 3) && n.inputs[3]->size() > 0) {
    ASSIGN_OR_RETURN(sizes, const_ints(n, 3, where, "sizes"));
  }
  if (scales.empty() == sizes.empty()) return invalid_input(where + ": exactly one of scales and sizes must be given");
  const size_t na = axes.size();
  if ((!scales.empty() && scales.size() != na) || (!sizes.empty() && sizes.size() != na))
    return invalid_input(where + ": scales / sizes need " + std::to_string(na) + " entries");
  std::vector<float> full_scales(r, 1.0f);
  Dims out = d;
  if (!sizes.empty()) {
    const std::string policy = n.attrs.get_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      return invalid_input(where + ": unknown keep_aspect_ratio_policy '" + policy + "'");
    double common = policy == "not_larger" ? 1e300 : 0.0;
    for (size_t i = 0; i < na; ++i) {
      const double s = static_cast<double>(sizes[i]) / static_cast<double>(d[axes[i]]);
      common = policy == "not_larger" ? std::min(common, s) : std::max(common, s);
    }
    for (size_t i = 0; i < na; ++i) {
      const double s = policy == "stretch" ? static_cast<double>(sizes[i]) / static_cast<double>(d[axes[i]]) : common;
      out[axes[i]] = policy == "stretch" ? sizes[i] : static_cast<int64_t>(std::round(s * static_cast<double>(d[axes[i]])));
      full_scales[axes[i]] = static_cast<float>(s);
    }
  } else {
    for (size_t i = 0; i < na; ++i) {
      if (scales[i] <= 0) return invalid_input(where + ": scales must be positive");
      out[axes[i]] = static_cast<int64_t>(std::floor(static_cast<double>(d[axes[i]]) * scales[i]));
      full_scales[axes[i]] = static_cast<float>(scales[i]);
    }
  }
  for (int64_t o : out)
    if (o < 1) return invalid_input(where + ": the output " + dims_str(out) + " would be empty");
  n.attrs.set("mode", mode);
  n.attrs.set("_coord", coord);
  n.attrs.set("_nearest", nearest);
  n.attrs.set("_scales", full_scales);
  set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

// A Cast of a constant is folded at import (cast_tensor: it reads the integer types and float32/64,
// and writes the kernel types); any other runs as the Cast kernel (kernel types on both sides). The
// target type is checked either way: `to` comes from the file (a fuzzed model's Cast to 42 reached
// cast_tensor and aborted on its invariant).
Status check_cast(const Node& n, const std::string& where) {
  const Value* x = n.inputs.empty() ? nullptr : n.inputs[0];
  if (!x) return Status::ok();
  const int64_t to_attr = n.attrs.get_int("to", 1);
  const DType to = static_cast<DType>(to_attr);
  const bool folded = x->is_constant() && x->data;
  const bool readable = kernel_type(x->dtype) || (folded && (x->dtype == DType::kInt16 || x->dtype == DType::kUint16 ||
                                                            x->dtype == DType::kUint32 || x->dtype == DType::kUint64));
  if (!readable || !kernel_type(to)) {
    const std::string to_name = std::string(dtype_name(to)) == "unknown"
                                    ? "ONNX type " + std::to_string(to_attr) + " (not a known type)"
                                    : std::string(dtype_name(to));
    return unsupported(where + ": Cast from " + dtype_name(x->dtype) + " to " + to_name +
                       " (supported: float32, float64, int64, int32, int8, uint8, bool)");
  }
  return Status::ok();
}

}  // namespace pt::shapes
