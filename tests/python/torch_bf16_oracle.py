#!/usr/bin/python3
"""--precision bf16 against PyTorch with the bfloat16 rounding emulated at the same points.

Run: /usr/bin/python3 tests/python/torch_bf16_oracle.py OUTDIR [--bin PATH] [--models mlp,lenet_bn,transformer]
     [--steps 8]

For each model (tests/python/torch_optim_oracle.py's MLP, LeNet-5 with BatchNorm, Transformer
encoder; dropout 0) the module is exported in training mode and trained --steps steps of
torch.optim.SGD (momentum 0.9, lr 0.05) on 40 fixed samples three times:
  * torch float32 (the reference an fp32 run matches);
  * torch with every Linear and Conv2d replaced by an autograd Function that rounds, as our graph
    pass does, the GEMM/convolution operands to bfloat16 (`t.bfloat16().float()`, round to
    nearest even): forward X and W; backward dY (one rounding shared by dX and dW), W for dX and
    X for dW; the bias gradient from the unrounded dY; outputs and accumulation float32. The
    attention's score and value products stay float32 as our FusedAttention does;
  * onnx-pipetrain --precision bf16 (and --precision fp32 as a control).
Metric per tensor: max|a - b| / (max|b| + 1e-6) over the trained initializers; losses |a-b|/|b|.
Writes OUTDIR/bf16_summary.json; prints one line per model.
"""
import argparse
import copy
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_model_oracle as tmo  # noqa: E402
import torch_optim_oracle as too  # noqa: E402

CONV2D = F.conv2d  # the unpatched function (Bf16Emulation replaces F.conv2d)
SGD_FLAGS = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]


def make_sgd(ps):
    return torch.optim.SGD(ps, lr=0.05, momentum=0.9)


def r16(t):
    return t.bfloat16().float()


class Linear16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        xr, wr = r16(x), r16(w)
        ctx.save_for_backward(xr, wr)
        ctx.has_b = b is not None
        y = xr.matmul(wr.t())
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, g):
        xr, wr = ctx.saved_tensors
        gr = r16(g)
        dx = gr.matmul(wr)
        dw = gr.reshape(-1, gr.shape[-1]).t().matmul(xr.reshape(-1, xr.shape[-1]))
        db = g.reshape(-1, g.shape[-1]).sum(0) if ctx.has_b else None
        return dx, dw, db


class Conv16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups):
        xr, wr = r16(x), r16(w)
        ctx.save_for_backward(xr, wr)
        ctx.conf = (stride, padding, dilation, groups)
        ctx.has_b = b is not None
        return CONV2D(xr, wr, b, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, g):
        xr, wr = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.conf
        gr = r16(g)
        dx = torch.nn.grad.conv2d_input(xr.shape, wr, gr, stride, padding, dilation, groups)
        dw = torch.nn.grad.conv2d_weight(xr, wr.shape, gr, stride, padding, dilation, groups)
        db = g.sum((0, 2, 3)) if ctx.has_b else None
        return dx, dw, db, None, None, None, None


class Bf16Emulation:
    """Within the block, F.linear and F.conv2d (what nn.Linear, nn.Conv2d and the attention's
    projections call) round their operands like --precision bf16."""

    def __enter__(self):
        self.saved = (F.linear, F.conv2d)
        F.linear = lambda x, w, b=None: Linear16.apply(x, w, b)
        F.conv2d = lambda x, w, b=None, stride=1, padding=0, dilation=1, groups=1: Conv16.apply(
            x, w, b, stride, padding, dilation, groups)
        return self

    def __exit__(self, *exc):
        F.linear, F.conv2d = self.saved


def run_case(model_name, outdir, binary, steps=8, log=print, extra=()):
    d = os.path.join(outdir, f"bf16_{model_name}")
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    model = too.build(model_name)
    onnx_path = os.path.join(d, "model.onnx")
    too.export(model, model_name, onnx_path)
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(onnx_path).graph.initializer}
    named = [(n, p) for n, p in model.named_parameters()]
    named += [(n, b) for n, b in model.named_buffers() if b.dtype.is_floating_point]
    name_map = tmo.map_to_initializers(named, inits)
    x, y = too.data(model_name)
    np.save(os.path.join(d, "data", "x.npy"), x)
    np.save(os.path.join(d, "data", "y.npy"), y)

    def trained(m):
        t = dict(m.named_parameters())
        t.update(m.named_buffers())
        return {name_map[n]: t[n].detach().numpy().astype(np.float64) for n, _ in named}

    m32, m16 = copy.deepcopy(model), copy.deepcopy(model)
    losses32 = too.torch_train(m32, make_sgd, x, y, steps, 0.0)
    with Bf16Emulation():
        losses16 = too.torch_train(m16, make_sgd, x, y, steps, 0.0)
    want32, want16 = trained(m32), trained(m16)

    def ours(precision):
        out = os.path.join(d, "run_" + precision)
        cmd = [binary, onnx_path, "--data", os.path.join(d, "data"), "--steps", str(steps), "--batch-size",
               str(too.BATCH), "--no-shuffle", "--loss", "cross-entropy", "--out", out, "--quiet", "--device", "cpu",
               "--overwrite", "--precision", precision, *SGD_FLAGS, *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout)[-1500:]}")
        got = {i.name: numpy_helper.to_array(i).astype(np.float64)
               for i in onnx.load(os.path.join(out, "model.trained.onnx")).graph.initializer}
        return got, too.read_losses(os.path.join(out, "metrics.csv"))

    got16, l16 = ours("bf16")
    got32, l32 = ours("fp32")

    def worst(a, b):
        return max((tmo.rel(a[k], b[k]), k) for k in b)

    def loss_err(a, b):
        return max(abs(p - q) / abs(q) for p, q in zip(a, b))

    case = {
        "model": model_name, "steps": steps,
        "bf16_vs_emulated": worst(got16, want16), "bf16_vs_torch_fp32": worst(got16, want32),
        "fp32_vs_torch_fp32": worst(got32, want32), "emulated_vs_torch_fp32": worst(want16, want32),
        "loss_bf16_vs_emulated": loss_err(l16, losses16), "loss_bf16_vs_fp32": loss_err(l16, losses32),
        "moved": max(tmo.rel(want16[k], inits[k]) for k in want16),
    }
    log(f"{model_name:<12} ours bf16 vs emulated {case['bf16_vs_emulated'][0]:.2e} ({case['bf16_vs_emulated'][1]}), "
        f"ours bf16 vs torch fp32 {case['bf16_vs_torch_fp32'][0]:.2e}, ours fp32 vs torch fp32 "
        f"{case['fp32_vs_torch_fp32'][0]:.2e}, emulated vs fp32 {case['emulated_vs_torch_fp32'][0]:.2e}; losses: "
        f"bf16 vs emulated {case['loss_bf16_vs_emulated']:.2e}, vs fp32 {case['loss_bf16_vs_fp32']:.2e}; "
        f"weights moved {case['moved']:.2e}")
    return case


def main():
    ap = argparse.ArgumentParser(description="--precision bf16 against PyTorch with bfloat16 rounding emulated")
    ap.add_argument("outdir")
    ap.add_argument("--bin", default=tmo.default_bin())
    ap.add_argument("--models", default="mlp,lenet_bn,transformer")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cases = [run_case(m, a.outdir, a.bin, a.steps) for m in a.models.split(",")]
    with open(os.path.join(a.outdir, "bf16_summary.json"), "w") as f:
        json.dump(cases, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
