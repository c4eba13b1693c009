#!/usr/bin/python3
# PyTorch oracle for the whole-training-step test: exports a 4-Linear MLP to ONNX, writes fixed
# data, trains it 20 steps by hand with the SpecTrain-form momentum SGD, and saves the per-step
# losses and final weights keyed by ONNX initializer name.  Run: /usr/bin/python3 THIS OUTDIR [newops]
# With "newops" the model uses the zoo's further ops as PyTorch 1.13 exports them at opset 17:
# GroupNorm (Reshape + InstanceNormalization + Mul/Add), GELU, Mish, Sin, maximum (Max), interpolate (Resize),
# softsign (Abs + Div), cumsum, tril (Trilu); OUTDIR/freeze.txt then names the initializers PyTorch does not
# train (InstanceNormalization's constant unit scale and zero bias).
#
# OUTDIR/mlp.onnx                 model: input "x" float32 [batch,16] -> "logits" [batch,5]
# OUTDIR/data/{x,y}.npy           x float32 [40,16], y int64 [40]
# OUTDIR/initial_weights.npz      initializers of mlp.onnx (ONNX names), for reference
# OUTDIR/expected_losses.npy      float64 [20], loss of step i+1 (forward before its update)
# OUTDIR/expected_weights.npz     final weights, keyed by ONNX initializer name
# OUTDIR/expected_logits.npy      float32 [40,5], trained model's logits on data/x.npy
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

STEPS, BATCH, N = 20, 8, 40
LR, GAMMA, WD = 0.1, 0.9, 1e-4


class NewOps(nn.Module):
    """Linear -> GroupNorm(3 groups of 2 channels) -> GELU -> Mish + 0.1 sin -> max(h, 0.3 h) ->
    softsign -> cumsum * 0.2 -> tril -> x2 linear + x2 nearest upsampling (Resize) -> Linear."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 24)
        self.gn = nn.GroupNorm(3, 6)
        self.fc2 = nn.Linear(48, 5)

    def forward(self, x):
        h = self.gn(self.fc1(x).view(-1, 6, 4))
        h = F.mish(F.gelu(h)) + 0.1 * torch.sin(h)
        h = torch.maximum(h, 0.3 * h)
        h = torch.tril(torch.cumsum(F.softsign(h), dim=2) * 0.2)
        h = F.interpolate(h, scale_factor=2.0, mode="linear") + F.interpolate(h, scale_factor=2.0, mode="nearest")
        return self.fc2(h.flatten(1))


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "newops"):
        sys.exit(f"usage: {sys.argv[0]} OUTDIR [newops]")
    out = sys.argv[1]
    newops = len(sys.argv) == 3
    os.makedirs(os.path.join(out, "data"), exist_ok=True)

    torch.manual_seed(1234)
    if newops:
        model = NewOps().float().eval()
    else:
        model = nn.Sequential(
            nn.Linear(16, 32), nn.ReLU(),
            nn.Linear(32, 24), nn.ReLU(),
            nn.Linear(24, 12), nn.ReLU(),
            nn.Linear(12, 5),
        ).float().eval()   # no dropout/batchnorm: eval and train modes compute the same thing

    onnx_path = os.path.join(out, "mlp.onnx")
    torch.onnx.export(model, torch.zeros(1, 16), onnx_path, opset_version=17 if newops else 13,
                      do_constant_folding=True, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})

    # Map each torch parameter to the ONNX initializer holding exactly its initial values.
    proto = onnx.load(onnx_path)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    if newops:
        ops = {n.op_type for n in proto.graph.node}
        for op in ("InstanceNormalization", "Sin", "Max", "CumSum", "Trilu", "Erf", "Resize"):
            assert op in ops, f"the export has no {op} node: {sorted(ops)}"
        fixed = [n.input[k] for n in proto.graph.node if n.op_type == "InstanceNormalization" for k in (1, 2)]
        with open(os.path.join(out, "freeze.txt"), "w") as fh:
            fh.write(",".join(fixed))
    params = list(model.named_parameters())
    onnx_name = {}
    for pname, p in params:
        w = p.detach().numpy()
        # The same values, possibly reshaped (GroupNorm's weight is exported as a [C, 1] initializer).
        hits = [n for n, a in inits.items() if a.size == w.size and a.dtype == w.dtype
                and np.array_equal(a.reshape(-1), w.reshape(-1))]
        assert len(hits) == 1, f"parameter {pname}: {len(hits)} matching initializers {hits}"
        onnx_name[pname] = hits[0]
    assert len(set(onnx_name.values())) == len(params), "two parameters map to one initializer"
    np.savez(os.path.join(out, "initial_weights.npz"), **inits)

    rng = np.random.default_rng(7)
    x = rng.standard_normal((N, 16)).astype(np.float32)
    y = rng.integers(0, 5, size=N).astype(np.int64)
    np.save(os.path.join(out, "data", "x.npy"), x)
    np.save(os.path.join(out, "data", "y.npy"), y)

    # Hand-written SpecTrain-form update: g = grad + wd*w; v = gamma*v + (1-gamma)*g; w -= lr*v.
    vel = {n: torch.zeros_like(p) for n, p in params}
    losses = []
    for i in range(STEPS):
        lo = (BATCH * i) % N          # in order, no shuffling: the data cycles every 5 steps
        xb, yb = torch.from_numpy(x[lo:lo + BATCH]), torch.from_numpy(y[lo:lo + BATCH])
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)   # mean over the mini-batch
        loss.backward()
        losses.append(float(loss.item()))
        with torch.no_grad():
            for n, p in params:
                g = p.grad + WD * p
                vel[n].mul_(GAMMA).add_((1.0 - GAMMA) * g)
                p.sub_(LR * vel[n])

    np.save(os.path.join(out, "expected_losses.npy"), np.asarray(losses, dtype=np.float64))
    final = {onnx_name[n]: p.detach().numpy().copy().reshape(inits[onnx_name[n]].shape) for n, p in params}
    np.savez(os.path.join(out, "expected_weights.npz"), **final)
    with torch.no_grad():
        np.save(os.path.join(out, "expected_logits.npy"),
                model(torch.from_numpy(x)).numpy().astype(np.float32))

    print(f"wrote {onnx_path}, data/x.npy {list(x.shape)}, data/y.npy {list(y.shape)}")
    print("parameters -> initializers: " +
          ", ".join(f"{p}->{onnx_name[p]}" for p, _ in params))
    print(f"losses: step 1 {losses[0]:.6f}, step {STEPS} {losses[-1]:.6f} "
          f"(lr={LR} gamma={GAMMA} wd={WD} batch={BATCH} steps={STEPS})")
    print(f"wrote expected_losses.npy, expected_weights.npz ({len(final)} tensors), "
          f"expected_logits.npy, initial_weights.npz in {out}")


if __name__ == "__main__":
    main()
