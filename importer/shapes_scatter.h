// Shape functions of the index ops of Swin's masks and their relatives (GatherND, ScatterND,
// ScatterElements), used by the table in shape_infer.cpp. Scatters with a reduction other than
// none are refused naming the node.
#pragma once

#include <string>

#include "importer/ir.h"

namespace pt::shapes {

Status gather_nd(Node& n, const std::string& where);         // batch_dims; int64/int32 indices
Status scatter_nd(Node& n, const std::string& where);        // reduction none only
Status scatter_elements(Node& n, const std::string& where);  // -> `_axis`; reduction none only

}  // namespace pt::shapes
