// --precision: the arithmetic of the GEMM and convolution nodes of a training graph. bf16 keeps
// float32 master weights, optimizer state, gradients, norms, softmax, attention and losses, and
// feeds every matrix product (Gemm, MatMul, Conv, ConvGradInput, ConvGradWeight, forward and
// backward) bfloat16 copies of its float32 operands, accumulating in float32. tf32 keeps every
// tensor float32 and lets CUDA's matrix products and convolutions use TF32 tensor cores (PyTorch's
// allow_tf32; ExecSettings::tf32): no graph rewrite, and CPU stages refuse it.
#pragma once

#include <string>

#include "core/status.h"
#include "importer/ir.h"

namespace pt {

enum class Precision { kFp32, kBf16, kTf32 };

// "fp32", "bf16", "tf32"; parse_precision's error names the flag and the valid values.
const char* precision_name(Precision p);
Expected<Precision> parse_precision(const std::string& name);

struct PrecisionStats {
  int casts = 0;     // Cast nodes added
  int products = 0;  // GEMM/convolution nodes that read bfloat16 operands
  int relu_grads = 0;  // ReluGrad nodes that read the bfloat16 copy of Relu's output
};

// The bf16 pass, on a training graph (after build_training_graph, so no gradient of Cast is
// needed). Every float32 operand of a GEMM/convolution node (inputs 0 and 1; Gemm's C and Conv's
// bias stay float32) is replaced by a bfloat16 copy made by a Cast node (to = BFLOAT16) placed just
// before its first reader. One copy per source value serves all its readers, so a forward
// activation that a backward product also reads is kept once, in bfloat16. Parameters and other
// node-less values (initializers, state) get one copy for their forward readers and one for their
// backward readers: the backward pass must read the weights the pipeline gives it (SpecTrain's
// prediction, the stash), not the forward's copy. Outputs stay float32. ReluGrad(dY, Y) reads the
// bfloat16 copy of Y where the forward makes one (the mask is Y's sign, which rounding keeps), so
// float32 Y is not kept for the backward. Changes nothing for fp32 and tf32.
PrecisionStats apply_precision(Graph& g, Precision p);

// A Cast node the pass made (attribute _precision_cast), and the float32 value behind a bfloat16
// copy (v itself for any other value): the stage export (importer/stage_export.cpp) cuts the
// source model, which has neither.
bool is_precision_cast(const Node& n);
const Value* precision_source(const Value* v);

}  // namespace pt
