// The scalars of one Adam / AdamW step, shared by the CPU and CUDA update kernels and by SpecTrain's
// prediction (kernels/device.cpp), so that all of them use the same bias corrections. Computed in
// double from the float attributes, as torch 1.13 computes them in Python floats.
#pragma once

#include <cmath>
#include <cstdint>

namespace pt {

struct AdamScalars {
  double step_size = 0;  // lr / (1 - beta1^t); 0 when t = 0 (no moments yet)
  double bc2_sqrt = 1;   // sqrt(1 - beta2^t)
  double decay = 1;      // AdamW: 1 - lr*wd, the decoupled decay factor of one step; Adam: 1
};

// t: the 1-based step whose update these scalars belong to.
inline AdamScalars adam_scalars(double lr, int64_t t, double beta1, double beta2, double weight_decay, bool decoupled) {
  AdamScalars c;
  c.step_size = t > 0 ? lr / (1.0 - std::pow(beta1, static_cast<double>(t))) : 0.0;
  c.bc2_sqrt = t > 0 ? std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t))) : 1.0;
  c.decay = decoupled ? 1.0 - lr * weight_decay : 1.0;
  return c;
}

}  // namespace pt
