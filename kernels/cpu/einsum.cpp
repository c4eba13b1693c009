// Einsum on the CPU, naively: one loop over every combination of the equation's letters, the
// product of the operands added into the output (in double). A letter of the output that no operand
// has takes its size from the output's dims and broadcasts: that is how the gradient builder's
// Einsum (dY and the other operands -> this operand's term) fills summed-out letters.
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/einsum_equation.h"

namespace pt::cpu {

template <typename T>
Status einsum(const KernelCall& call) {
  ASSIGN_OR_RETURN(const einsum::Equation e, einsum::parse(call.attrs.get_string("equation", "")));
  if (call.inputs.size() != e.inputs.size() || call.outputs.empty())
    return invalid_input("Einsum: " + std::to_string(e.inputs.size()) + " terms for " +
                         std::to_string(call.inputs.size()) + " inputs");
  std::string letters;
  std::vector<int64_t> size;
  auto bind = [&](const std::string& term, const Dims& dims) -> Status {
    if (term.size() != dims.size())
      return invalid_input("Einsum: term '" + term + "' for a tensor of dims " + dims_str(dims));
    for (size_t i = 0; i < term.size(); ++i) {
      const size_t at = letters.find(term[i]);
      if (at == std::string::npos) {
        letters += term[i];
        size.push_back(dims[i]);
      } else if (size[at] != dims[i]) {
        return invalid_input("Einsum: letter '" + std::string(1, term[i]) + "' has sizes " + std::to_string(size[at]) +
                             " and " + std::to_string(dims[i]));
      }
    }
    return Status::ok();
  };
  for (size_t k = 0; k < e.inputs.size(); ++k) RETURN_IF_ERROR(bind(e.inputs[k], call.inputs[k].dims));
  const TensorView& y = call.outputs[0];
  RETURN_IF_ERROR(bind(e.output, y.dims));
  // Per operand (and the output, last), its element stride for each letter (0 when absent).
  const size_t nl = letters.size(), nk = e.inputs.size();
  std::vector<std::vector<int64_t>> stride(nk + 1, std::vector<int64_t>(nl, 0));
  auto strides_of = [&](const std::string& term, const Dims& dims, std::vector<int64_t>* s) {
    const Dims rs = row_major_strides(dims);
    for (size_t i = 0; i < term.size(); ++i) (*s)[letters.find(term[i])] = rs[i];
  };
  for (size_t k = 0; k < nk; ++k) strides_of(e.inputs[k], call.inputs[k].dims, &stride[k]);
  strides_of(e.output, y.dims, &stride[nk]);
  std::vector<const T*> px(nk);
  for (size_t k = 0; k < nk; ++k) px[k] = call.inputs[k].as<T>();
  std::vector<double> acc(static_cast<size_t>(y.size()), 0.0);
  int64_t total = 1;
  for (int64_t s : size) total *= s;
  std::vector<int64_t> idx(nl, 0), off(nk + 1, 0);
  for (int64_t it = 0; it < total; ++it) {
    double p = 1;
    for (size_t k = 0; k < nk; ++k) p *= px[k][off[k]];
    acc[off[nk]] += p;
    for (int64_t l = static_cast<int64_t>(nl) - 1; l >= 0; --l) {
      for (size_t k = 0; k <= nk; ++k) off[k] += stride[k][l];
      if (++idx[l] < size[l]) break;
      for (size_t k = 0; k <= nk; ++k) off[k] -= stride[k][l] * size[l];
      idx[l] = 0;
    }
  }
  T* py = y.as<T>();
  for (int64_t i = 0; i < y.size(); ++i) py[i] = static_cast<T>(acc[i]);
  return Status::ok();
}

template Status einsum<float>(const KernelCall&);
template Status einsum<double>(const KernelCall&);

}  // namespace pt::cpu
