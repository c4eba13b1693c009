// Constant folding of one node whose inputs are all constants: shape subgraphs as exporters emit
// them (Shape, Gather, Unsqueeze, Concat, Cast, Slice, ...), and any op with a CPU kernel.
#pragma once

#include <string>

#include "importer/ir.h"

namespace pt {

// Computes n's outputs into Value::data and marks them constant. n's output dims must already be
// inferred, except for Slice and Range, whose output dims the folder sets.
Status fold_node(Node& n, const std::string& where);

}  // namespace pt
