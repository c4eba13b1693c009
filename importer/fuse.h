// Fusions: graph rewrites on the imported forward graph (before autodiff) that replace a subgraph
// an exporter spelled out by one op the kernels run faster, with its own gradient. They are
// internal to training: the source model, and so the exported one, keeps the original nodes (export
// writes initializer values only), and stage export works from the source's nodes.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "importer/ir.h"

namespace pt {

struct FuseOptions {
  // ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul scale, Add bias (LayerNorm as
  // exporters spell it below opset 17) -> LayerNormalization (importer/fuse_layernorm.cpp).
  bool layernorm = true;
  // MatMul(Q, Kt), scale (Mul or Div by a constant, on Q or the scores), optional mask (Add, or
  // Where with a constant fill), Softmax, MatMul with V -> FusedAttention (importer/fuse_attention.cpp).
  bool attention = true;
  // ... also with training-mode Dropout on the probabilities (FusedAttention's dropout_ratio); off
  // on CUDA stages, whose FusedAttention kernel has no dropout (import_onnx turns it off there).
  bool attention_dropout = true;
  // Div sqrt 2 (or Mul 1/sqrt 2), Erf, Add 1, Mul x, Mul 0.5 (GELU as exporters spell it below
  // opset 20) -> Gelu (importer/fuse_gelu.cpp).
  bool gelu = true;
  // Dropout with ratio 0, or not in training mode (an identity) -> removed, its readers reading its
  // input (importer/fuse_dropout.cpp).
  bool dropout = true;
  // MatMul + Add of a bias along the last axis, then optionally Relu or Gelu; Gemm or Conv, then Relu
  // or Gelu -> FusedMatMul, FusedGemm, FusedConv (importer/fuse_epilogue.cpp). Runs last, so a Gelu
  // the GELU pass made is fused too. On both devices (kernels/cpu/epilogue.cpp, kernels/cuda/epilogue_ops.cpp).
  bool epilogue = true;
  // Not a graph rewrite: each optimizer update runs inside the backward, right behind its gradient's
  // producer, where the run allows it (partition.h, stage_update_in_backward; runtime/exec/optimizer.h,
  // interleave_updates). The import passes ignore it; the planner and the trainers read it.
  bool update = true;
  // Nodes that must stay nodes of their own (--split-at names them as stage starts): the epilogue
  // pass does not absorb them.
  std::set<std::string> keep;
};

// Turns off the passes named (--no-fusion: "layernorm", "attention", "gelu", "dropout", "epilogue",
// "update", or "all"); an unknown name is refused,
// naming the flag and the known passes.
Status disable_fusions(const std::vector<std::string>& names, FuseOptions* o);

// Rewrites every LayerNorm spelled out in primitives into one LayerNormalization node; returns how
// many. A match needs: ReduceMean over trailing axes (keepdims 1) of x, x minus that mean d, d to
// the constant power 2 reduced over the same axes, plus a constant epsilon, Sqrt, d divided by it,
// times a scale, plus a bias, both of the normalized dims; every intermediate read by the pattern
// only, all float32.
int fuse_layernorm(Graph& g);

// Rewrites every scaled dot-product attention into one FusedAttention node (domain "pipetrain";
// inputs Q [B..., T, Dk], Kt [B..., Dk, S], V [B..., S, Dv], optional mask; outputs Y and the per-row
// softmax normaliser InvSum [B..., T] its
// backward reads); returns how many. A match needs: Softmax over the last
// axis whose only reader is MatMul(P, V); before it an optional Add of a float mask or Where(bool
// mask, scalar constant fill, scores), the mask broadcasting to the scores and computed from no
// trainable parameter; an optional Mul or Div by a scalar constant; MatMul(Q, Kt), optionally after
// a Mul or Div of Q by a scalar constant; every intermediate read by the pattern only, one float
// dtype, one batch shape (no broadcasting between Q, Kt and V). With `allow_dropout`, a training-mode
// Dropout between the Softmax and the MatMul (0 < ratio < 1, its mask read by nobody: a training
// export with attention dropout) is fused too: FusedAttention takes its ratio and seed as attributes
// (dropout_ratio, dropout_seed) and the step counter as input 4 (the mask slot, input 3, may be empty),
// and draws the same masks (kernels/dropout_rng.h) in the forward and again in the backward.
int fuse_attention(Graph& g, bool allow_dropout = true);

// Rewrites every exact GELU spelled out in primitives (x read by the scaling and the product, the
// intermediates read by the pattern only, float32) into one Gelu node; returns how many.
int fuse_gelu(Graph& g);

// Removes every Dropout that is an identity (ratio 0, or training mode off) whose output is not a
// graph output and whose mask nothing reads; its readers read its input. Returns how many.
int remove_identity_dropouts(Graph& g);

// Rewrites every product with a bias and/or activation epilogue into one fused node (domain
// "pipetrain"): MatMul(A, B) [+ bias] [-> act] -> FusedMatMul(A, B[, bias]); Gemm(A, B[, C]) -> act
// -> FusedGemm(A, B[, C]); Conv(X, W[, B]) -> act -> FusedConv(X, W[, B]); the product's attributes
// plus activation ("none", "Relu", "Gelu"). A Gelu epilogue also outputs the pre-activation (its
// gradient reads it). A match needs: the product's output (and the bias sum's) read by the next
// node of the pattern only and no graph output; the bias [N] or [1, ..., N] along the output's last
// axis, the sum keeping the product's dims; Relu, or Gelu with approximate "none"; float32 or
// float64 throughout. Nodes named in `keep` are not absorbed. Returns how many.
int fuse_epilogues(Graph& g, const std::set<std::string>& keep = {});

// Internal ops a fusion pass makes: a model that uses one itself is refused at import.
bool is_fusion_op(const std::string& op);

struct FuseReport {
  int rewrites = 0;
  int layernorm = 0;  // of which LayerNorms
  int attention = 0;  // of which attentions
  int gelu = 0;       // of which GELUs
  int dropout = 0;    // of which identity Dropouts removed
  int epilogue = 0;   // of which products with a bias / activation epilogue
  // Float initializers only the fused subgraphs read (exponents, epsilons, now attributes): still
  // constants of the model (export keeps them), no longer read by the graph.
  int absorbed_constants = 0;
};

// Runs the passes `o` turns on.
FuseReport apply_fusions(Graph& g, const FuseOptions& o);

}  // namespace pt
