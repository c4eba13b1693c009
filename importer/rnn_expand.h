// LSTM and GRU: checked and shaped like any op, then expanded into existing ops unrolled over their
// static sequence length, reading the node's own W / R / B initializers, so that autodiff, the
// partitioner, the CUDA backend and the exporter (which writes W / R / B back into the source
// model's LSTM or GRU node) need nothing of their own.
#pragma once

#include <string>

#include "importer/ir.h"

namespace pt {

// Whether `op` is one of the ops that expand_recurrent replaces (it has a shape function but no
// kernel or gradient builder of its own).
bool is_expanded_op(const std::string& op);

// Shape function of LSTM and GRU: refuses what the expansion does not implement (clip, other
// activations, input_forget, peepholes, sequence_lens that are not all the full length, an unknown
// direction or layout), naming the node and the attribute, and sets the outputs' dims.
Status rnn_shape(Node& n, const std::string& where);

// Replaces every LSTM and GRU node of `g` (shapes already inferred) by its unrolled form, keeping
// the graph's nodes in topological order; the new nodes are shape-inferred here.
Status expand_recurrent(Graph& g, const std::string& path);

}  // namespace pt
