// Static shape inference and constant folding over the IR, after the batch dimension is bound.
// Every op the tool accepts has a shape function here; shape subgraphs (Shape, Gather, Concat,
// ... feeding Reshape) fold to constants.
#pragma once

#include <string>
#include <vector>

#include "importer/ir.h"
#include "kernels/registry.h"

namespace pt {

bool has_shape_fn(const std::string& op);
// Every op with a shape function, sorted (tests/importer/op_tables_test.cpp holds the tables together).
std::vector<std::string> shape_fn_ops();
// The dtypes (of input 0) for which `op` has a kernel on `device`.
std::vector<DType> supported_dtypes(const std::string& op, DeviceKind device);

// Sets the dtype and dims of n's outputs from its inputs (and normalises its attributes: negative
// axes made non-negative, opset-dependent defaults filled in). `where` prefixes errors.
Status infer_node(Node& n, const std::string& where);

// Infers every node in order, folds nodes whose inputs are all constants, removes folded nodes,
// and fails with one message listing every remaining node that has no kernel on `device`.
Status infer_and_fold(Graph& g, const std::string& path, DeviceKind device);

}  // namespace pt
