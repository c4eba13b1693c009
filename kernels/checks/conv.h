// The argument checks of ConvTranspose beyond Conv's window checks (which its data-gradient form
// shares), shared by kernels/cpu/conv_transpose.cpp and the cuDNN wrapper in kernels/cuda/dnn_ops.cpp.
#pragma once

#include "kernels/kernel_checks.h"

namespace pt::kernels {

// ConvTranspose's bias B [M] for Y [N, M, out...].
inline Status check_conv_transpose_bias(const TensorView& y, const TensorView& b) {
  if (y.rank() < 2 || b.size() != y.dims[1])
    return invalid_input("ConvTranspose: B " + dims_str(b.dims) + " does not fit Y " + dims_str(y.dims));
  return Status::ok();
}

}  // namespace pt::kernels
