// Dropout with a counter-based RNG: the mask of element i at step s depends only on (seed, s, i),
// so runs are reproducible regardless of threads, and a CUDA kernel can draw the same masks.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/dropout_rng.h"

namespace pt::cpu {

// Dropout(X, step) -> Y, mask. attrs: ratio (float), _training (int), seed (int). step < 0 (an
// evaluation pass) or _training == 0 makes it the identity with an all-true mask.
template <typename T>
Status dropout(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "Dropout", 1, 1));
  const TensorView& x = call.inputs[0];
  const TensorView& y = call.outputs[0];
  const bool has_mask = call.outputs.size() > 1 && call.outputs[1].data;
  const int64_t step = has_input(call, 1) && call.inputs[1].dtype == DType::kInt64 ? call.inputs[1].as<int64_t>()[0] : -1;
  const float ratio = call.attrs.get_float("ratio", 0.5f);
  const bool active = call.attrs.get_int("_training", 0) != 0 && step >= 0 && ratio > 0;
  const int64_t n = x.size();
  const T* xp = x.as<T>();
  T* yp = y.as<T>();
  bool* mp = has_mask ? call.outputs[1].as<bool>() : nullptr;
  if (!active) {
#pragma omp parallel for if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      yp[i] = xp[i];
      if (mp) mp[i] = true;
    }
    return Status::ok();
  }
  RETURN_IF_ERROR(kernels::check_dropout_ratio(ratio));
  const uint64_t key = dropout_key(static_cast<uint64_t>(call.attrs.get_int("seed", 0)), static_cast<uint64_t>(step));
  const T scale = static_cast<T>(1.0 / (1.0 - static_cast<double>(ratio)));
#pragma omp parallel for if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropout_keep(key, static_cast<uint64_t>(i), ratio);
    yp[i] = keep ? xp[i] * scale : T(0);
    if (mp) mp[i] = keep;
  }
  return Status::ok();
}

// DropoutGrad(dY, mask) -> dX = dY * mask / (1 - ratio). attrs: ratio.
template <typename T>
Status dropout_grad(const KernelCall& call) {
  RETURN_IF_ERROR(check_arity(call, "DropoutGrad", 2, 1));
  const int64_t n = call.inputs[0].size();
  const T* dy = call.inputs[0].as<T>();
  const bool* m = call.inputs[1].as<bool>();
  T* dx = call.outputs[0].as<T>();
  const T scale = static_cast<T>(1.0 / (1.0 - static_cast<double>(call.attrs.get_float("ratio", 0.5f))));
#pragma omp parallel for if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) dx[i] = m[i] ? dy[i] * scale : T(0);
  return Status::ok();
}

template Status dropout<float>(const KernelCall&);
template Status dropout<double>(const KernelCall&);
template Status dropout_grad<float>(const KernelCall&);
template Status dropout_grad<double>(const KernelCall&);

}  // namespace pt::cpu
