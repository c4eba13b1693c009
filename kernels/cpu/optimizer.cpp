// Optimizer-step CPU kernels. SGDMomentum(W, G, V, lr) updates W and V in place through its input
// views, in the SpecTrain paper's form: g = G + wd*W; V = gamma*V + (1 - gamma)*g; W -= lr*V.
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"

namespace pt::cpu {

template <typename T>
Status sgd_momentum(const KernelCall& call) {
  const char* op = "SGDMomentum";
  RETURN_IF_ERROR(check_arity(call, op, 4, 0));
  const TensorView& w = call.inputs[0];
  const TensorView& g = call.inputs[1];
  const TensorView& v = call.inputs[2];
  const TensorView& lr = call.inputs[3];
  RETURN_IF_ERROR(check_same_dims(op, "G", g.dims, w.dims));
  RETURN_IF_ERROR(check_same_dims(op, "V", v.dims, w.dims));
  if (lr.size() != 1 || !lr.data)
    return invalid_input(std::string(op) + ": lr " + dims_str(lr.dims) + " must be a scalar");
  const T gamma = static_cast<T>(call.attrs.get_float("momentum", 0.9f));
  const T wd = static_cast<T>(call.attrs.get_float("weight_decay", 0.0f));
  const T rate = lr.as<T>()[0];
  T* pw = w.as<T>();
  const T* pg = g.as<T>();
  T* pv = v.as<T>();
  const int64_t n = w.size();
  const T one_m = T(1) - gamma;
#pragma omp parallel for simd if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const T gi = pg[i] + wd * pw[i];
    const T vi = gamma * pv[i] + one_m * gi;
    pv[i] = vi;
    pw[i] -= rate * vi;
  }
  return Status::ok();
}

template Status sgd_momentum<float>(const KernelCall& call);
template Status sgd_momentum<double>(const KernelCall& call);

}  // namespace pt::cpu
