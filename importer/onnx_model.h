// Internal to the importer: the parsed ModelProto kept for export, and TensorProto conversion.
// Includes ONNX headers: keep it out of every header outside importer/.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace pt {

struct OnnxModel {
  onnx::ModelProto proto;  // after version conversion, external data still external
  std::string dir;         // folder of the model file (external data is relative to it)
};

// TensorProto -> HostTensor. External data must have been loaded into raw_data already.
Expected<HostTensor> tensor_from_proto(const onnx::TensorProto& t, const std::string& what);
// Writes `value` into `t` as raw_data (clearing typed fields and external data).
void tensor_to_proto(const HostTensor& value, onnx::TensorProto* t);

// Reads the external data of `t` (relative to `dir`), with every location confined to `dir`.
Expected<std::string> read_external_data(const onnx::TensorProto& t, const std::string& dir,
                                         const std::string& model_path);

}  // namespace pt
