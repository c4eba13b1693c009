// Shape functions of the convolution, pooling and normalisation ops (Conv, MaxPool, AveragePool,
// GlobalAveragePool, GlobalMaxPool, LRN, BatchNormalization), used by the table in
// shape_infer.cpp. They normalise the attributes their kernels read: auto_pad is resolved into
// explicit pads (auto_pad becomes "NOTSET"), kernel_shape, strides, dilations and pads are always
// present, and BatchNormalization gets `_training` from the opset's rules.
#pragma once

#include <string>

#include "importer/ir.h"

namespace pt::shapes {

Status conv(Node& n, const std::string& where);          // group, dilations, auto_pad; kernel from W
Status conv_transpose(Node& n, const std::string& where);  // pads from pads / auto_pad / output_shape
Status max_pool(Node& n, const std::string& where);      // Y and optional int64 Indices
Status average_pool(Node& n, const std::string& where);  // count_include_pad, ceil_mode
Status global_pool(Node& n, const std::string& where);   // GlobalAveragePool, GlobalMaxPool
Status lrn(Node& n, const std::string& where);
// Opset 14+: training_mode attribute. Opset 7-13: training when any output besides Y is present.
Status batch_norm(Node& n, const std::string& where);

}  // namespace pt::shapes
