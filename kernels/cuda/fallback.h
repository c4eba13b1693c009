// The documented fallback of the CUDA backend for ops without a CUDA kernel: the op's CPU kernel
// run on host copies of the call's device tensors (staged through pinned buffers on the call's
// stream). Correct, never fast: it synchronises the stream twice per call, so it is for the rare
// ops of a model (LRN, Gather, LayerNorm, comparisons, ...), never for a training step's hot path.
// docs/cuda.md lists which ops take it; kernels/cuda/table.cpp derives its rows from the CPU table.
// A fallback op must not write through its inputs (the in-place ops, SGDMomentum and
// BatchNormalization, have CUDA kernels): only outputs come back.
#pragma once

#include "kernels/registry.h"

namespace pt::cuda {

// Runs `cpu_kernel` on host copies of the inputs and outputs of `call` (device pointers), then
// copies the outputs back. Returns the CPU kernel's status, or the CUDA error of a copy.
Status run_on_host(KernelFn cpu_kernel, const KernelCall& call);

}  // namespace pt::cuda
