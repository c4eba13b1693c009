// Internal to the importer: the parsed ModelProto kept for export, and TensorProto conversion.
// Includes ONNX headers: keep it out of every header outside importer/.
#pragma once

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace pt {

struct OnnxModel {
  onnx::ModelProto proto;  // as read from the file (before any version conversion or node
                           // reordering), external data still external
  std::string dir;         // folder of the model file (external data is relative to it)
  // Initializers whose inline data was dropped from `proto` after import (training holds the
  // weights in its executors; a second copy here would stay resident for the whole run).
  // trained_proto re-reads the ones it needs from the file.
  std::set<std::string> stripped;
};

struct ImportedModel;

// The source ModelProto with every initializer's data inline and the initializers and
// Constant-node weights named in `values` replaced (same dtype and dims required; a name that is
// neither is an internal error). `was_external`, when given, receives the names of the
// initializers the source kept in external data. Shared by export_onnx and export_stages.
Expected<onnx::ModelProto> trained_proto(const ImportedModel& model, const std::map<std::string, HostTensor>& values,
                                         std::set<std::string>* was_external);

// Turns the training-mode nodes of `proto` into their inference form, in place and keeping every
// node (so that node indices still match): BatchNormalization uses its running statistics (extra
// outputs dropped, training_mode / is_test set), Dropout is off (its training_mode constant set to
// false where only training_mode inputs read it, else the input dropped; mask output dropped). Graph outputs and value_info of dropped tensors go too; a node that reads one
// is refused (naming it and `what`). A model without training-mode nodes is unchanged.
Status to_inference(onnx::ModelProto* proto, const std::string& what);

// The initializers named in `names` as the model file holds them now (inline or external, as in
// the file); an error when the file changed since import (its hash differs).
Expected<std::map<std::string, onnx::TensorProto>> reread_initializers(const ImportedModel& model,
                                                                       const std::set<std::string>& names);


// TensorProto -> HostTensor. External data must have been loaded into raw_data already.
Expected<HostTensor> tensor_from_proto(const onnx::TensorProto& t, const std::string& what);
// Writes `value` into `t` as raw_data (clearing typed fields and external data).
void tensor_to_proto(const HostTensor& value, onnx::TensorProto* t);

// Reads the external data of `t` (relative to `dir`), with every location confined to `dir`.
Expected<std::string> read_external_data(const onnx::TensorProto& t, const std::string& dir,
                                         const std::string& model_path);

}  // namespace pt
