// Shape functions of GatherND, ScatterND and ScatterElements (importer/shapes_scatter.h).
#include "importer/shapes_scatter.h"

#include "importer/shape_util.h"

namespace pt::shapes {

namespace {

Status index_type(const Node& n, const std::string& where) {
  if (n.inputs[1]->dtype != DType::kInt64 && n.inputs[1]->dtype != DType::kInt32)
    return invalid_input(where + ": indices must be int64 or int32, are " + dtype_name(n.inputs[1]->dtype));
  return Status::ok();
}

Status reduction_none(const Node& n, const std::string& where) {
  const std::string r = n.attrs.get_string("reduction", "none");
  if (r != "none") return unsupported(where + ": attribute 'reduction' = '" + r + "' is not supported (only 'none')");
  return Status::ok();
}

// The output of GatherND over `data` with `idx` and `batch_dims`: idx[:-1] + data[b + k:].
Expected<Dims> gather_nd_dims(const Dims& data, const Dims& idx, int64_t b, const std::string& where) {
  if (idx.empty() || data.empty()) return invalid_input(where + ": data and indices must have rank >= 1");
  const int64_t k = idx.back(), rd = static_cast<int64_t>(data.size()), ri = static_cast<int64_t>(idx.size());
  if (b < 0 || b >= std::min(rd, ri)) return invalid_input(where + ": batch_dims " + std::to_string(b) + " is out of range");
  if (k < 1 || b + k > rd)
    return invalid_input(where + ": index tuples of length " + std::to_string(k) + " do not fit data " + dims_str(data));
  for (int64_t d = 0; d < b; ++d)
    if (data[d] != idx[d])
      return invalid_input(where + ": the batch dims of data " + dims_str(data) + " and indices " + dims_str(idx) + " differ");
  Dims out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + b + k, data.end());
  return out;
}

}  // namespace

Status gather_nd(Node& n, const std::string& where) {
  RETURN_IF_ERROR(shape::need_inputs(n, 2, 2, where));
  RETURN_IF_ERROR(index_type(n, where));
  ASSIGN_OR_RETURN(Dims out, gather_nd_dims(n.inputs[0]->dims, n.inputs[1]->dims, n.attrs.get_int("batch_dims", 0), where));
  shape::set_out(n, 0, n.inputs[0]->dtype, out);
  return Status::ok();
}

Status scatter_nd(Node& n, const std::string& where) {
  RETURN_IF_ERROR(shape::need_inputs(n, 3, 3, where));
  RETURN_IF_ERROR(reduction_none(n, where));
  RETURN_IF_ERROR(index_type(n, where));
  ASSIGN_OR_RETURN(Dims want, gather_nd_dims(n.inputs[0]->dims, n.inputs[1]->dims, 0, where));
  if (n.inputs[2]->dims != want)
    return invalid_input(where + ": updates are " + dims_str(n.inputs[2]->dims) + ", expected " + dims_str(want));
  if (n.inputs[2]->dtype != n.inputs[0]->dtype) return invalid_input(where + ": updates and data differ in type");
  shape::set_out(n, 0, n.inputs[0]->dtype, n.inputs[0]->dims);
  return Status::ok();
}

Status scatter_elements(Node& n, const std::string& where) {
  RETURN_IF_ERROR(shape::need_inputs(n, 3, 3, where));
  RETURN_IF_ERROR(reduction_none(n, where));
  RETURN_IF_ERROR(index_type(n, where));
  const Dims& d = n.inputs[0]->dims;
  const Dims& id = n.inputs[1]->dims;
  const int64_t r = static_cast<int64_t>(d.size());
  if (static_cast<int64_t>(id.size()) != r)
    return invalid_input(where + ": indices " + dims_str(id) + " and data " + dims_str(d) + " differ in rank");
  if (n.inputs[2]->dims != id)
    return invalid_input(where + ": updates " + dims_str(n.inputs[2]->dims) + " and indices " + dims_str(id) + " differ");
  if (n.inputs[2]->dtype != n.inputs[0]->dtype) return invalid_input(where + ": updates and data differ in type");
  int64_t axis = n.attrs.get_int("axis", 0);
  if (axis < -r || axis >= r) return invalid_input(where + ": axis " + std::to_string(axis) + " is out of range");
  if (axis < 0) axis += r;
  for (int64_t i = 0; i < r; ++i)
    if (i != axis && id[i] > d[i])
      return invalid_input(where + ": indices " + dims_str(id) + " exceed data " + dims_str(d) + " outside the axis");
  n.attrs.set("_axis", axis);
  shape::set_out(n, 0, n.inputs[0]->dtype, d);
  return Status::ok();
}

}  // namespace pt::shapes
