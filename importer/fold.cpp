// Evaluation of constant nodes on the host. Element data is moved as bytes so every dtype works.
#include "importer/fold.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "importer/importer.h"
#include "kernels/registry.h"

namespace pt {

namespace {

const std::set<std::string>& fold_only_ops() {
  static const std::set<std::string> s = {"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Slice",
                                          "ConstantOfShape", "Where", "Expand", "Not", "Range", "Equal",
                                          "Less", "Greater"};
  return s;
}

HostTensor& emit(Node& n, size_t i, HostTensor t) {
  Value* v = n.outputs.at(i);
  v->dtype = t.dtype();
  v->dims = t.dims();
  v->kind = ValueKind::kConstant;
  v->data = std::make_shared<HostTensor>(std::move(t));
  return *v->data;
}

const HostTensor& in(const Node& n, size_t i) { return *n.inputs.at(i)->data; }

// Copies element `src_i` of a to element `dst_i` of b (same dtype).
inline void copy_elem(const HostTensor& a, int64_t src_i, HostTensor& b, int64_t dst_i) {
  size_t es = dtype_size(a.dtype());
  std::memcpy(static_cast<char*>(b.data()) + dst_i * es, static_cast<const char*>(a.data()) + src_i * es, es);
}

// Index of the element of `src` (dims sd) that broadcasts to output index `oi` (dims od).
int64_t broadcast_index(int64_t oi, const Dims& od, const Dims& sd) {
  int64_t idx = 0, stride = 1;
  size_t off = od.size() - sd.size();
  for (size_t k = od.size(); k-- > 0;) {
    int64_t coord = oi % od[k];
    oi /= od[k];
    if (k >= off) {
      int64_t s = sd[k - off];
      idx += (s == 1 ? 0 : coord) * stride;
      stride *= s;
    }
  }
  return idx;
}

Status fold_gather(Node& n) {
  const HostTensor& d = in(n, 0);
  const HostTensor& idx = in(n, 1);
  int64_t axis = n.attrs.get_int("axis", 0);
  HostTensor out(d.dtype(), n.outputs[0]->dims);
  int64_t outer = 1, inner = 1, len = d.dims()[axis];
  for (int64_t i = 0; i < axis; ++i) outer *= d.dims()[i];
  for (size_t i = axis + 1; i < d.dims().size(); ++i) inner *= d.dims()[i];
  int64_t ni = idx.size();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < ni; ++j) {
      int64_t k = idx.get_int(j);
      if (k < 0) k += len;
      if (k < 0 || k >= len) return invalid_input("Gather index " + std::to_string(idx.get_int(j)) + " out of range");
      for (int64_t r = 0; r < inner; ++r) copy_elem(d, (o * len + k) * inner + r, out, (o * ni + j) * inner + r);
    }
  emit(n, 0, std::move(out));
  return Status::ok();
}

Status fold_slice(Node& n, const std::string& where) {
  const HostTensor& d = in(n, 0);
  const Dims& dd = d.dims();
  int64_t r = dd.size();
  std::vector<int64_t> starts, ends, axes, steps;
  auto ints = [&](size_t i) {
    std::vector<int64_t> v;
    if (i < n.inputs.size() && n.inputs[i])
      for (int64_t k = 0; k < in(n, i).size(); ++k) v.push_back(in(n, i).get_int(k));
    return v;
  };
  if (n.inputs.size() > 1) {
    starts = ints(1); ends = ints(2); axes = ints(3); steps = ints(4);
  } else {
    starts = n.attrs.get_ints("starts"); ends = n.attrs.get_ints("ends"); axes = n.attrs.get_ints("axes");
  }
  if (axes.empty()) for (size_t i = 0; i < starts.size(); ++i) axes.push_back(i);
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> st(r, 0), sp(r, 1);
  Dims out = dd;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    if (a < 0 || a >= r || steps[i] == 0) return invalid_input(where + ": bad axes or steps");
    int64_t dim = dd[a], s = starts[i], e = ends[i], step = steps[i];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) { s = std::clamp<int64_t>(s, 0, dim); e = std::clamp<int64_t>(e, 0, dim); }
    else { s = std::clamp<int64_t>(s, 0, dim - 1); e = std::clamp<int64_t>(e, -1, dim - 1); }
    int64_t len = step > 0 ? std::max<int64_t>(0, (e - s + step - 1) / step) : std::max<int64_t>(0, (s - e - step - 1) / (-step));
    st[a] = s; sp[a] = step; out[a] = len;
  }
  HostTensor o(d.dtype(), out);
  Dims istr = row_major_strides(dd);
  for (int64_t oi = 0; oi < o.size(); ++oi) {
    int64_t rem = oi, src = 0;
    for (int64_t k = r; k-- > 0;) {
      int64_t c = rem % out[k];
      rem /= out[k];
      src += (st[k] + c * sp[k]) * istr[k];
    }
    copy_elem(d, src, o, oi);
  }
  emit(n, 0, std::move(o));
  return Status::ok();
}

Status fold_kernel(Node& n, const std::string& where) {
  DType dt = n.inputs[0]->dtype;
  KernelFn fn = find_kernel(n.op_type, DeviceKind::kCpu, dt);
  if (!fn) return unsupported(where + ": cannot fold " + n.op_type + " on " + dtype_name(dt));
  std::vector<TensorView> ins, outs;
  for (Value* v : n.inputs) ins.push_back(v ? v->data->view() : TensorView{});
  std::vector<HostTensor> results;
  for (Value* v : n.outputs) results.emplace_back(v ? v->dtype : DType::kFloat32, v ? v->dims : Dims{0});
  for (auto& r : results) outs.push_back(r.view());
  RETURN_IF_ERROR(fn(KernelCall{ins, outs, n.attrs}).with_context(where + ": "));
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (n.outputs[i]) emit(n, i, std::move(results[i]));
  return Status::ok();
}

}  // namespace

bool is_foldable_op(const std::string& op) { return fold_only_ops().count(op) != 0; }

bool is_import_time_op(const std::string& op) { return op == "Shape" || op == "ConstantOfShape" || op == "Range"; }

Status fold_node(Node& n, const std::string& where) {
  const std::string& op = n.op_type;
  if (!is_foldable_op(op)) return fold_kernel(n, where);
  if (op == "Shape") {
    const Dims& d = n.inputs[0]->dims;
    int64_t r = d.size();
    int64_t s = n.attrs.get_int("start", 0), e = n.attrs.get_int("end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = std::clamp<int64_t>(s, 0, r);
    e = std::clamp<int64_t>(e, 0, r);
    std::vector<int64_t> v(d.begin() + s, d.begin() + std::max(s, e));
    emit(n, 0, HostTensor::from<int64_t>({static_cast<int64_t>(v.size())}, v));
    return Status::ok();
  }
  if (op == "Gather") return fold_gather(n).with_context(where + ": ");
  if (op == "Slice") return fold_slice(n, where);
  if (op == "Unsqueeze" || op == "Squeeze") {
    HostTensor t = in(n, 0);
    t.reshape(n.outputs[0]->dims);
    emit(n, 0, std::move(t));
    return Status::ok();
  }
  if (op == "Cast") {
    emit(n, 0, cast_tensor(in(n, 0), n.outputs[0]->dtype));
    return Status::ok();
  }
  if (op == "Concat") {
    const Dims& od = n.outputs[0]->dims;
    int64_t axis = n.attrs.get_int("axis", 0);
    HostTensor o(n.outputs[0]->dtype, od);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= od[i];
    for (size_t i = axis + 1; i < od.size(); ++i) inner *= od[i];
    int64_t off = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const HostTensor& t = in(n, k);
      int64_t len = t.dims()[axis];
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t j = 0; j < len * inner; ++j) copy_elem(t, a * len * inner + j, o, (a * od[axis] + off) * inner + j);
      off += len;
    }
    emit(n, 0, std::move(o));
    return Status::ok();
  }
  if (op == "ConstantOfShape") {
    HostTensor o(n.outputs[0]->dtype, n.outputs[0]->dims);
    if (const HostTensor* v = n.attrs.get_tensor("value"))
      for (int64_t i = 0; i < o.size(); ++i) copy_elem(*v, 0, o, i);
    emit(n, 0, std::move(o));
    return Status::ok();
  }
  if (op == "Expand" || op == "Where" || op == "Equal" || op == "Less" || op == "Greater" || op == "Not") {
    const Dims& od = n.outputs[0]->dims;
    HostTensor o(n.outputs[0]->dtype, od);
    for (int64_t i = 0; i < o.size(); ++i) {
      if (op == "Expand") {
        copy_elem(in(n, 0), broadcast_index(i, od, in(n, 0).dims()), o, i);
      } else if (op == "Where") {
        bool c = in(n, 0).get_int(broadcast_index(i, od, in(n, 0).dims())) != 0;
        const HostTensor& s = in(n, c ? 1 : 2);
        copy_elem(s, broadcast_index(i, od, s.dims()), o, i);
      } else if (op == "Not") {
        static_cast<bool*>(o.data())[i] = in(n, 0).get_int(i) == 0;
      } else {
        double a = in(n, 0).get_double(broadcast_index(i, od, in(n, 0).dims()));
        double b = in(n, 1).get_double(broadcast_index(i, od, in(n, 1).dims()));
        static_cast<bool*>(o.data())[i] = op == "Equal" ? a == b : op == "Less" ? a < b : a > b;
      }
    }
    emit(n, 0, std::move(o));
    return Status::ok();
  }
  if (op == "Range") {
    double s = in(n, 0).get_double(0), l = in(n, 1).get_double(0), d = in(n, 2).get_double(0);
    if (d == 0) return invalid_input(where + ": delta is 0");
    int64_t cnt = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((l - s) / d)));
    HostTensor o(DType::kFloat64, {cnt});
    for (int64_t i = 0; i < cnt; ++i) o.as<double>()[i] = s + i * d;
    emit(n, 0, cast_tensor(o, n.inputs[0]->dtype));
    return Status::ok();
  }
  return unsupported(where + ": no folding rule for " + op);
}

}  // namespace pt
