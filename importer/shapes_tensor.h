// Shape functions of the activation, reduction, data-movement and LayerNorm ops, used by
// the table in shape_infer.cpp. Each sets its node's output dtypes and dims and normalises the
// attributes its kernel reads: shape-like inputs (axes, pads, repeats, split sizes, Slice
// starts/ends) must be constants and are copied into `_`-prefixed attributes, so kernels never
// read shape inputs and opset differences end here.
#pragma once

#include <string>

#include "importer/ir.h"

namespace pt::shapes {

Status unary(Node& n, const std::string& where);        // LeakyRelu, Elu, Selu, Erf, Abs, ...
Status clip(Node& n, const std::string& where);         // min/max: attributes (< 11) or inputs
Status prelu(Node& n, const std::string& where);        // slope broadcasts to X
Status pow(Node& n, const std::string& where);          // broadcasting; exponent of any numeric type
Status reduce(Node& n, const std::string& where);       // ReduceSum/Mean/Max -> `_axes`
Status variadic(Node& n, const std::string& where);     // Sum, Mean
Status split(Node& n, const std::string& where);        // -> `_split`
Status slice(Node& n, const std::string& where);        // -> `_starts`, `_steps` (one per dim)
Status tile(Node& n, const std::string& where);         // -> `_repeats`
Status pad(Node& n, const std::string& where);          // -> `_pads` (begins, ends), `_value`
Status layer_norm(Node& n, const std::string& where);   // Y, optional Mean and InvStdDev
// FusedAttention (importer/fuse_attention.cpp): (Q, Kt, V[, mask]) -> Y [B..., T, Dv], InvSum [B..., T].
Status fused_attention(Node& n, const std::string& where);
// Ops of opsets 18 to 21 and the zoo's further ops.
Status gelu(Node& n, const std::string& where);         // approximate: none | tanh
Status arg_max(Node& n, const std::string& where);      // -> `_axis`; int64 output
Status cum_sum(Node& n, const std::string& where);      // axis input -> `_axis`
Status trilu(Node& n, const std::string& where);        // k input -> `_k`
Status gather_elements(Node& n, const std::string& where);  // -> `_axis`
Status group_norm(Node& n, const std::string& where);   // GroupNormalization 18 / 21 -> `_groups`, `_per_group`
Status instance_norm(Node& n, const std::string& where);  // -> `_groups` = C
Status einsum(Node& n, const std::string& where);       // equation checked against the inputs
Status resize(Node& n, const std::string& where);       // nearest / linear -> `_scales`, `_coord`, `_nearest`
// Cast of a computed value: unsupported (not wrong results) for element types the kernel lacks.
Status check_cast(const Node& n, const std::string& where);

}  // namespace pt::shapes
