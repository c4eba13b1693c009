// Per-stage ONNX models of a pipeline plan: for every stage, a standalone model whose inputs are
// the activations the stage receives (and the data input where it reads it) and whose outputs are
// what it sends on (and the model outputs it computes); chained, they compute the model's forward.
// No ONNX types leak through this header; the partitioner's Plan is not needed either.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "importer/importer.h"

namespace pt {

// One stage as the exporter sees it (tools/plan_step.h makes these from a Plan).
struct StageCut {
  std::vector<const Node*> nodes;  // the stage's nodes; only forward-phase ones are used
  std::vector<const Value*> recv;  // activations received from earlier stages
  std::vector<const Value*> send;  // activations sent to later stages
};

// What was written for one stage (also listed in stages.json).
struct StageModelInfo {
  std::string file;                  // "stage<k>.onnx"
  std::vector<std::string> inputs;   // graph inputs in order: data inputs, then received values
  std::vector<std::string> outputs;  // graph outputs in order: sent values, then model outputs
  std::vector<std::string> nodes;    // source node names ("<op>_<index>" when unnamed), in order
  // Values computed by shape subgraphs (folded at import) that the stage could not recompute from
  // its own inputs; written as initializers holding the value folded for the bound batch size.
  std::vector<std::string> folded_constants;
  std::string batch;                 // the symbolic batch dimension's name, or its bound size
                                     // when a folded constant fixes it
  bool strict_check = true;          // passed strict shape inference (false where the source fails it)
};

// Writes dir/stage<k>.onnx for every stage k of `stages` and dir/stages.json (the stages' files,
// inputs and outputs in order, so that they can be chained), each to a temporary file renamed into
// place; stage files of an earlier run with more stages are removed. Every model holds the source
// model's nodes (in source order) that compute its outputs from its inputs, the initializers and
// Constant nodes those read with `values` substituted as export_onnx does (data inline) and in the
// same inference form (BatchNormalization with running statistics, Dropout off), typed
// inputs and outputs (the source's symbolic batch dimension where ONNX shape inference of the source
// carries it to the value, the bound static dims otherwise), and the source's IR version, opset
// imports and producer; each passes onnx::checker and strict shape inference (where the source model
// does; else non-strict) before it is written.
// Errors: a boundary value that is no tensor of the source graph, or one a stage needs but neither
// computes nor receives, names the stage and the value (kInvalidInput); a node of the source that
// the cuts split (an LSTM / GRU expanded at import) names the node and the stages (kUnsupported).
// check_only: the checks of the cuts against the source model alone (the splits), nothing written:
// a training run makes them before it trains.
Expected<std::vector<StageModelInfo>> export_stages(const ImportedModel& model,
                                                    const std::map<std::string, HostTensor>& values,
                                                    const std::vector<StageCut>& stages, const std::string& dir,
                                                    bool check_only = false);

}  // namespace pt
