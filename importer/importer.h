// Public entry points of the importer: load an ONNX file into a Graph with static shapes, and
// write a trained model back. No ONNX types leak through this header.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "importer/fuse.h"
#include "importer/ir.h"
#include "kernels/registry.h"

namespace pt {

struct OnnxModel;  // the source ModelProto and its external-data bookkeeping (onnx_model.h)

struct ImportOptions {
  int64_t batch_size = 32;          // binds the symbolic batch dimension of every model input
  DeviceKind device = DeviceKind::kCpu;  // the unsupported-op report asks the registry for it
  // Which float initializers train (fnmatch globs; see choose_trainable in onnx_import.cpp):
  // default the weights (rank >= 1, flowing into a node that reads the data; never exponents,
  // epsilons, clip bounds, shapes or indices); `trainable` replaces the default by the matches;
  // `freeze` removes matches. A pattern matching no initializer is refused.
  std::vector<std::string> trainable;
  std::vector<std::string> freeze;
  bool for_training = true;         // also require a gradient builder for every op
  uint64_t seed = 0;                // seeds the random ops (Dropout masks)
  // Graph inputs given values at import: they become constants (so that shape-like inputs such as
  // Reshape's shape or Slice's starts can be fed, as ONNX's node tests do).
  std::map<std::string, HostTensor> constant_inputs;
  // Fusion passes run on the forward graph after import (importer/fuse.h; --no-fusion).
  FuseOptions fuse;
};

struct ImportedModel {
  std::string path;   // as given
  std::string stem;   // file name without ".onnx"
  std::unique_ptr<Graph> graph;
  std::shared_ptr<const OnnxModel> source;
  std::string producer;     // producer_name + version
  int64_t source_opset = 0; // default-domain opset before any conversion
  bool converted = false;   // true when ONNX's version converter raised the opset
  std::string hash;         // FNV-1a 64 of the file's bytes, hex (cache keys)
  FuseReport fused;         // what the fusion passes rewrote (ImportOptions::fuse)
};

// Loads, validates (onnx::checker, structural checks), converts old opsets, reads external data
// (confined to the model's folder), binds the batch dimension, infers shapes, folds shape
// subgraphs and checks every op against the kernel registry. Errors name the file and node.
Expected<ImportedModel> import_onnx(const std::string& path, const ImportOptions& opts);
// What import_onnx does to an inferred graph's stateful ops, for graphs built in code (the cost
// model's calibration): Dropout and training BatchNormalization read the step counter (masks are
// a function of seed, step and element; evaluation passes use running statistics), and training
// BatchNormalization's running statistics become state.
void lower_stateful_ops(Graph& g, uint64_t seed);

// kInference: training-mode BatchNormalization and Dropout become their inference form (running
// statistics, no dropout, training-only outputs removed), so that any runtime computes the same
// result at any batch size. kTraining: the source graph as it came (batch statistics).
enum class ExportMode { kInference, kTraining };

// Writes `out_path`: the source model with the initializers named in `values` replaced (same
// dtype and dims required); everything else unchanged, except for the inference rewrite in
// kInference mode (a model without training-mode nodes is unchanged in either mode).
// External-data models keep external data, written beside out_path as <out file name>.data.
// Written to a temporary file, then renamed.
Status export_onnx(const ImportedModel& model, const std::map<std::string, HostTensor>& values,
                   const std::string& out_path, ExportMode mode = ExportMode::kInference);

// The names of a model's graph inputs that are not initializers, in order (no validation).
Expected<std::vector<std::string>> onnx_input_names(const std::string& path);

// Reads a serialized TensorProto file (as in ONNX's backend test data: input_0.pb, ...).
Expected<HostTensor> read_tensor_file(const std::string& path);

// The ops the importer can fold when their inputs are constant (shape subgraphs).
bool is_foldable_op(const std::string& op);
// The ops that never run and have no kernel: the importer folds them to constants (Shape needs
// only static dims; ConstantOfShape and Range need constant inputs) and refuses them otherwise.
bool is_import_time_op(const std::string& op);

}  // namespace pt
