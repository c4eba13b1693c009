// Fusions: graph rewrites on the imported forward graph (before autodiff) that replace a subgraph
// an exporter spelled out by one op the kernels run faster, with its own gradient. They are
// internal to training: the source model, and so the exported one, keeps the original nodes (export
// writes initializer values only), and stage export works from the source's nodes.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "importer/ir.h"

namespace pt {

struct FuseOptions {
  // ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul scale, Add bias (LayerNorm as
  // exporters spell it below opset 17) -> LayerNormalization (importer/fuse_layernorm.cpp).
  bool layernorm = true;
  // Not kept: a GELU pass (Div sqrt 2, Erf, Add 1, Mul x, Mul 0.5 -> Gelu; in git history) made the
  // GPT's step slower: GeluGrad recomputes erf where the spelled-out backward reuses the forward's
  // (docs/performance.md).
};

// Turns off the passes named (--no-fusion: "layernorm", or "all"); an unknown name is refused,
// naming the flag and the known passes.
Status disable_fusions(const std::vector<std::string>& names, FuseOptions* o);

// Rewrites every LayerNorm spelled out in primitives into one LayerNormalization node; returns how
// many. A match needs: ReduceMean over trailing axes (keepdims 1) of x, x minus that mean d, d to
// the constant power 2 reduced over the same axes, plus a constant epsilon, Sqrt, d divided by it,
// times a scale, plus a bias, both of the normalized dims; every intermediate read by the pattern
// only, all float32.
int fuse_layernorm(Graph& g);

struct FuseReport {
  int rewrites = 0;
  // Float initializers only the fused subgraphs read (exponents, epsilons, now attributes): still
  // constants of the model (export keeps them), no longer read by the graph.
  int absorbed_constants = 0;
};

// Runs the passes `o` turns on.
FuseReport apply_fusions(Graph& g, const FuseOptions& o);

}  // namespace pt
