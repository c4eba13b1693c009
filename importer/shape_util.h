// Small helpers shared by the shape functions (shape_infer.cpp, shapes_cnn.cpp,
// shapes_tensor.cpp): input-count checks and setting an output's dtype and dims.
#pragma once

#include <string>

#include "importer/ir.h"

namespace pt::shape {

// invalid_input unless n has min..max inputs and the first `min` are present.
inline Status need_inputs(const Node& n, size_t min, size_t max, const std::string& where) {
  if (n.inputs.size() < min || n.inputs.size() > max)
    return invalid_input(where + ": expects " + std::to_string(min) +
                         (max != min ? " to " + std::to_string(max) : "") + " inputs, has " +
                         std::to_string(n.inputs.size()));
  for (size_t i = 0; i < min; ++i)
    if (!n.inputs[i]) return invalid_input(where + ": required input " + std::to_string(i) + " is empty");
  return Status::ok();
}

inline void set_out(Node& n, size_t i, DType dt, Dims dims) {
  if (i < n.outputs.size() && n.outputs[i]) {
    n.outputs[i]->dtype = dt;
    n.outputs[i]->dims = std::move(dims);
  }
}

inline bool present(const Node& n, size_t i) { return i < n.inputs.size() && n.inputs[i] != nullptr; }

}  // namespace pt::shape
