#!/usr/bin/python3
"""PyTorch oracle of one training step for the model families of tools/export_models.py.

Run: /usr/bin/python3 tests/python/torch_model_oracle.py NAME OUTDIR [--opset 13] [--bin PATH]
     [--batch 8]
(NAME: lenet_bn resnet18 vgg11_bn mobilenet_v2 googlenet snn transformer; PATH defaults to
$PIPETRAIN_BIN, then build/tools/onnx-pipetrain.)

1. Builds the torch module with the constructors and seed of tools/export_models.py and every
   dropout ratio forced to 0 (Dropout, the AlphaDropout pattern, the attention's dropout): torch's
   random masks cannot be reproduced by another implementation, so the oracle compares the
   deterministic part; the Dropout nodes stay in the graph (ratio 0, training_mode 1).
2. Makes every tensor distinct before export: BatchNorm weight/bias/running_mean/running_var and
   every constant-valued parameter (zero biases, LayerNorm's ones and zeros) get seeded random
   values. Without this, dozens of initializers hold the same zeros/ones and the torch -> ONNX
   name map (by value) would be ambiguous, and a gamma/beta bug would hide behind gamma=1, beta=0.
3. Exports in training mode (TrainingMode.TRAINING, no constant folding) at --opset to
   OUTDIR/model.onnx and writes fixed data OUTDIR/data/{x,y}.npy (batch 8: normal images or
   int64 tokens in [1,100) with trailing zeros = padding; int64 labels).
4. One torch step, computed twice from the same float32 weights and data: in float64 and in
   float32. Each tensor is compared with the closer of the two (both are torch's answer; which one
   is closer is counted and printed). Why both: at batch 8, BatchNorm over 1x1 and 2x2 maps
   makes the update ill-conditioned: torch's float32 and float64 forward activations agree to
   1e-4 (measured, every Conv/BN/MaxPool output), yet their updates differ by up to 1.3e-1
   (GoogLeNet) and 8.7e-2 (MobileNet-V2). A float32 implementation shares torch float32's rounded
   activations and lands next to it (GoogLeNet: within 8.5e-4 of torch float32) where float64 is
   far; elsewhere float64 is the better answer, and a float32-only reference would measure
   torch's rounding instead of ours. The step: model.train(); loss = cross_entropy(logits, y)
   (mean); grad += wd*w; v = (1-g)*grad (v0 = 0); w -= lr*v with lr 0.1, g 0.9, wd 1e-4;
   BatchNorm running statistics are updated by torch's forward (momentum 0.1 = ONNX momentum
   0.9, unbiased variance).
5. Maps torch parameters and float buffers to ONNX initializers: same name and values, else the one
   initializer with identical values (the exporter renames some and, at opset 13, reaches shared
   ones through Identity nodes). num_batches_tracked (int64) is ignored.
6. Runs onnx-pipetrain MODEL --data OUTDIR/data --steps 1 --batch-size 8 --lr 0.1 --momentum 0.9
   --weight-decay 1e-4 --no-shuffle --loss cross-entropy --out OUTDIR/run --quiet and compares
   every initializer of OUTDIR/run/model.trained.onnx: mapped ones with torch's values after the
   step, the others with their initial values; and metrics.csv's step-1 loss with torch's loss.

Metrics, per tensor: value  max|a-b| / (max|b| + 1e-6)              <= 1e-4 (1e-3 batch stats)
                     update max|(a-w0)-(b-w0)| / (max|b-w0| + 1e-6)  <= 1e-3 (1e-2 batch stats)
After one step from v0 = 0 the update is only lr*(1-g)*grad, so the value metric alone would pass
a wrong gradient; the update metric is required too. It has one floor: a difference within 8
float32 ulps of the tensor's largest |w0| counts as rounding (stored float32 weights cannot resolve
a smaller update); such tensors are counted in the summary. "Batch stats" = the ONNX graph has a
BatchNormalization node. Writes OUTDIR/expected.npz, OUTDIR/oracle_summary.json. Exit 0 pass, 1 fail.
"""
import argparse
import copy
import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import export_models as em  # noqa: E402

LR, GAMMA, WD = 0.1, 0.9, 1e-4
EPS32 = float(np.finfo(np.float32).eps)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-6)) if b.size else 0.0


def make_distinct(model, seed=1):
    """Seeded random values for BatchNorm affine/buffers and constant-valued parameters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                c = mod.num_features
                if mod.affine:
                    mod.weight.copy_(0.5 + torch.rand(c, generator=g))
                    mod.bias.copy_(0.1 * torch.randn(c, generator=g))
                if mod.track_running_stats:
                    mod.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                    mod.running_var.copy_(0.5 + torch.rand(c, generator=g))
        for _, p in model.named_parameters():
            if p.numel() > 1 and float(p.max() - p.min()) == 0.0:
                base = float(p.flatten()[0])
                p.copy_(base + 0.05 * torch.randn(p.shape, generator=g))


def make_data(name, batch, seed=7):
    rng = np.random.default_rng(seed)
    if name == "transformer":
        x = rng.integers(1, em.VOCAB, size=(batch, em.SEQ)).astype(np.int64)
        for i in range(batch):          # trailing padding of 0..5 tokens, some rows unpadded
            n_pad = i % 6
            if n_pad:
                x[i, em.SEQ - n_pad:] = 0
    else:
        x = rng.standard_normal((batch,) + em.INPUT_SHAPE[name]).astype(np.float32)
    y = rng.integers(0, em.NUM_CLASSES[name], size=batch).astype(np.int64)
    return x, y


def step_is_stable(model, keys, x, y, tol, micro=1):
    """Whether one float64 step on x is a smooth function of x at float32's resolution: the step on
    x with every value moved by about 1e-6 of itself (four draws) changes no update by more than `tol` of its
    largest element. Where it does, a ReLU or a max-pooling window sits within float32's rounding of
    its switch, and two correct float32 implementations (their sums in other orders) may route a
    gradient differently: such data cannot tell a right step from a wrong one."""
    if not np.issubdtype(x.dtype, np.floating):
        return True
    w0 = {k: v.detach().double().numpy().copy() for k, v in model.named_parameters()}
    a, _ = torch_step(copy.deepcopy(model).double(), keys, x, y, micro)
    for draw in range(4):  # a draw finds a switch about half the time (GoogLeNet, seed 7)
        rng = np.random.default_rng(draw)
        xp = (x.astype(np.float64) * (1 + 1e-6 * rng.standard_normal(x.shape))).astype(x.dtype)
        b, _ = torch_step(copy.deepcopy(model).double(), keys, xp, y, micro)
        for k, v0 in w0.items():
            if k in a and k in b:
                ua, ub = a[k] - v0, b[k] - v0
                if np.abs(ua - ub).max() > tol * max(np.abs(ua).max(), 1e-30):
                    return False
    return True


def named_keys(named):
    return [n for n, _ in named]


def torch_step(model, keys, x, y, micro=1):
    """One step on model (float32 or float64); returns ({key: value after the step}, loss).
    micro > 1 is GPipe's step: the batch in `micro` equal micro-batches, forward and backward of
    each in order (BatchNorm: statistics per micro-batch, running statistics updated once per
    micro-batch), gradients accumulated as the mean of the micro-batch losses, one update."""
    dtype = next(model.parameters()).dtype
    model.train()
    params = list(model.named_parameters())
    model.zero_grad(set_to_none=True)
    xt = torch.from_numpy(x)
    if xt.is_floating_point():
        xt = xt.to(dtype)
    yt = torch.from_numpy(y)
    total = 0.0
    for xc, yc in zip(torch.chunk(xt, micro), torch.chunk(yt, micro)):
        out = model(xc)  # [N, C], or [N, T, C] with token labels [N, T]: flattened alike
        part = F.cross_entropy(out.reshape(-1, out.shape[-1]), yc.reshape(-1)) / micro
        part.backward()
        total += float(part.item())
    loss = torch.tensor(total)
    with torch.no_grad():
        for _, p in params:
            g = (p.grad if p.grad is not None else torch.zeros_like(p)) + WD * p
            p.sub_(LR * (1.0 - GAMMA) * g)
    state = dict(params)
    state.update({n: b for n, b in model.named_buffers()})
    return {k: state[k].detach().double().numpy().copy() for k in keys}, float(loss.item())


def torch_ddp_step(model, keys, x, y, replicas, micro=1):
    """One step of PyTorch DistributedDataParallel over `replicas` copies of model, simulated in one
    process: replica r takes the r-th contiguous share of the batch (GPipe: in `micro`
    micro-batches), its gradients are averaged over the replicas (DDP's all-reduce mean) and every
    replica applies the same update; BatchNorm statistics are each replica's own, and the model's
    are replica 0's (DDP broadcasts rank 0's buffers). Returns ({key: value}, mean loss)."""
    copies = [copy.deepcopy(model) for _ in range(replicas)]
    xs, ys = np.array_split(x, replicas), np.array_split(y, replicas)
    losses, grads = [], []
    for m, xr, yr in zip(copies, xs, ys):
        dtype = next(m.parameters()).dtype
        m.train()
        m.zero_grad(set_to_none=True)
        xt = torch.from_numpy(np.ascontiguousarray(xr))
        if xt.is_floating_point():
            xt = xt.to(dtype)
        yt = torch.from_numpy(np.ascontiguousarray(yr))
        total = 0.0
        for xc, yc in zip(torch.chunk(xt, micro), torch.chunk(yt, micro)):
            out = m(xc)
            part = F.cross_entropy(out.reshape(-1, out.shape[-1]), yc.reshape(-1)) / micro
            part.backward()
            total += float(part.item())
        losses.append(total)
        grads.append({n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in m.named_parameters()})
    with torch.no_grad():
        for m in copies:
            for n, p in m.named_parameters():
                g = sum(gr[n] for gr in grads) / replicas + WD * p
                p.sub_(LR * (1.0 - GAMMA) * g)
    state = dict(copies[0].named_parameters())
    state.update({n: b for n, b in copies[0].named_buffers()})
    return {k: state[k].detach().double().numpy().copy() for k in keys}, float(np.mean(losses))


def map_to_initializers(named, inits):
    """{torch name: onnx initializer name}; raises if a tensor matches no or several initializers."""
    out, problems = {}, []
    for tname, t in named:
        w = t.detach().numpy()
        if tname in inits and inits[tname].shape == w.shape and np.array_equal(inits[tname], w):
            out[tname] = tname
            continue
        hits = [n for n, a in inits.items()
                if a.shape == w.shape and a.dtype == w.dtype and np.array_equal(a, w)]
        if len(hits) == 1:
            out[tname] = hits[0]
        else:
            problems.append(f"{tname} {list(w.shape)}: {len(hits)} matching initializers {hits[:4]}")
    if problems:
        raise RuntimeError("cannot map torch tensors to ONNX initializers:\n  " + "\n  ".join(problems))
    dup = [n for n in set(out.values()) if list(out.values()).count(n) > 1]
    if dup:
        raise RuntimeError(f"several torch tensors map to one initializer: {dup}")
    return out


def read_loss(metrics_csv, step=1):
    with open(metrics_csv, newline="") as f:
        for r in csv.DictReader(f):
            if int(r["step"]) == step:
                return float(r["loss"])
    raise ValueError(f"{metrics_csv}: no row for step {step}")


def compare(a, b, w0, tol_v, tol_u):
    """Value and update errors of trained a against reference b (both from w0)."""
    ev = rel(a, b)
    du_a = a.astype(np.float64) - w0
    du_b = np.asarray(b, np.float64) - w0
    eu = rel(du_a, du_b)
    diff = float(np.max(np.abs(du_a - du_b))) if du_b.size else 0.0
    floor = 8 * EPS32 * float(np.max(np.abs(w0))) if du_b.size else 0.0
    floored = eu > tol_u and diff <= floor
    ok = bool(np.isfinite(a).all()) and ev <= tol_v and (eu <= tol_u or floored)
    return {"ev": ev, "eu": eu, "floored": floored, "ok": ok,
            "score": max(ev / tol_v, 0.0 if floored else eu / tol_u),
            "max_ub": float(np.max(np.abs(du_b))) if du_b.size else 0.0,
            "max_ua": float(np.max(np.abs(du_a))) if du_a.size else 0.0}


def default_bin():
    return os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))


def run_oracle(name, outdir, opset=13, binary=None, batch=8, log=print, gpus=1, micro=1, replicas=1):
    """Returns the summary dict (summary['pass'] is the verdict)."""
    binary = binary or default_bin()
    os.makedirs(os.path.join(outdir, "data"), exist_ok=True)
    t0 = time.time()
    model = em.build_module(name, dropout=0.0)
    make_distinct(model)
    onnx_path = os.path.join(outdir, "model.onnx")
    em.export_torch(model, name, opset, "train", onnx_path)
    m = onnx.load(onnx_path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    has_bn = any(n.op_type == "BatchNormalization" for n in m.graph.node)
    tol_v, tol_u = (1e-3, 1e-2) if has_bn else (1e-4, 1e-3)

    named = [(n, p) for n, p in model.named_parameters()]
    named += [(n, b) for n, b in model.named_buffers() if b.dtype.is_floating_point]
    name_map = map_to_initializers(named, inits)
    w0 = {name_map[n]: t.detach().numpy().copy() for n, t in named}

    # Data on which the float64 step is stable at float32's resolution (step_is_stable): the first
    # such seed from 7 on (GoogLeNet's seed 7 moved its updates by 1.6 % under a 1e-6 change of
    # the input, and a float32 run on another CPU landed on the other side of a switch).
    seed = 7
    x, y = make_data(name, batch, seed)
    while seed < 30 and not step_is_stable(model, named_keys(named), x, y, tol_u / 10, micro):
        seed += 1
        x, y = make_data(name, batch, seed)
    if seed != 7:
        log(f"  data seed {seed}: on the earlier seeds' data the float64 step moved under a 1e-6 change of the input")
    np.save(os.path.join(outdir, "data", "x.npy"), x)
    np.save(os.path.join(outdir, "data", "y.npy"), y)

    # one torch step in the paper's form, in float64 (the expected values) and in float32 (only
    # to show how far torch's own float32 result is from it: the conditioning of the model)
    if replicas > 1:  # data parallel: PyTorch DDP's semantics
        exp64, loss64 = torch_ddp_step(copy.deepcopy(model).double(), named_keys(named), x, y, replicas, micro)
        exp32, loss32 = torch_ddp_step(model, named_keys(named), x, y, replicas, micro)
    else:
        exp64, loss64 = torch_step(copy.deepcopy(model).double(), named_keys(named), x, y, micro)
        exp32, loss32 = torch_step(model, named_keys(named), x, y, micro)
    expected = {name_map[n]: v for n, v in exp64.items()}
    np.savez(os.path.join(outdir, "expected.npz"),
             **{k: v.astype(np.float32) for k, v in expected.items()})
    t_torch = time.time() - t0

    run_dir = os.path.join(outdir, "run")
    cmd = [binary, onnx_path, "--data", os.path.join(outdir, "data"), "--steps", "1",
           "--batch-size", str(batch), "--lr", str(LR), "--momentum", str(GAMMA),
           "--weight-decay", str(WD), "--no-shuffle", "--loss", "cross-entropy",
           "--out", run_dir, "--overwrite", "--quiet"]
    if gpus > 1 or micro > 1:
        cmd += ["--gpus", str(gpus), "--schedule", "gpipe", "--micro-batches", str(micro)]
    if replicas > 1:
        cmd += ["--replicas", str(replicas)]
    t1 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    t_bin = time.time() - t1
    summary = {"model": name, "opset": opset, "replicas": replicas, "batch_stats": has_bn, "tol_value": tol_v,
               "tol_update": tol_u, "torch_loss": loss64, "torch32_loss": loss32, "rc": p.returncode,
               "seconds_torch": round(t_torch, 2), "seconds_bin": round(t_bin, 2),
               "cmd": " ".join(cmd), "failures": []}
    fails = summary["failures"]
    if p.returncode != 0:
        fails.append(f"onnx-pipetrain exit {p.returncode}: {(p.stderr or p.stdout).strip()[-2000:]}")
        summary["pass"] = False
        log(f"FAIL {name} opset {opset}: " + fails[-1])
        _write(outdir, summary)
        return summary

    trained_path = os.path.join(run_dir, "model.trained.onnx")
    got = {i.name: numpy_helper.to_array(i) for i in onnx.load(trained_path).graph.initializer}
    worst_v = worst_u = 0.0
    worst_v_name = worst_u_name = ""
    floored = []
    ref_v = ref_u = 0.0
    used32 = []
    inv_map = {v: k for k, v in name_map.items()}
    log(f"{name} opset {opset}: {len(expected)} mapped tensors, {len(inits) - len(expected)} other "
        f"initializers; tolerances value {tol_v:g}, update {tol_u:g}")
    for iname in sorted(inits):
        b0 = inits[iname]
        if iname not in got:
            fails.append(f"initializer '{iname}' missing from the trained model")
            continue
        a = got[iname]
        if a.shape != b0.shape:
            fails.append(f"initializer '{iname}' shape {list(a.shape)} != {list(b0.shape)}")
            continue
        if iname not in expected:        # not a torch parameter/buffer: must be unchanged
            if not np.array_equal(a, b0):
                fails.append(f"non-parameter initializer '{iname}' changed (rel {rel(a, b0):.3e})")
            continue
        b64, b32 = expected[iname], exp32[inv_map[iname]]
        r64, r32 = compare(a, b64, w0[iname], tol_v, tol_u), compare(a, b32, w0[iname], tol_v, tol_u)
        ref_v = max(ref_v, rel(b32, b64))
        ref_u = max(ref_u, rel(b32 - w0[iname], b64 - w0[iname]))
        r, which = (r64, 64) if r64["score"] <= r32["score"] else (r32, 32)
        if which == 32:
            used32.append(iname)
        if r["floored"]:
            floored.append(iname)
        if r["ev"] > worst_v:
            worst_v, worst_v_name = r["ev"], iname
        if r["eu"] > worst_u and not r["floored"]:
            worst_u, worst_u_name = r["eu"], iname
        if not r["ok"]:
            fails.append(f"'{iname}' {list(b64.shape)}: value rel err {r64['ev']:.3e} (float32 torch "
                         f"{r32['ev']:.3e}), update rel err {r64['eu']:.3e} (float32 torch "
                         f"{r32['eu']:.3e}); max|update| expected {r64['max_ub']:.3e}, got "
                         f"{r64['max_ua']:.3e}")
    try:
        got_loss = read_loss(os.path.join(run_dir, "metrics.csv"), 1)
        el = min(rel(got_loss, summary["torch_loss"]), rel(got_loss, summary["torch32_loss"]))
        summary.update(loss=got_loss, loss_rel_err=el)
        if not el <= tol_v:
            fails.append(f"step-1 loss {got_loss:.7f} vs torch {summary['torch_loss']:.7f} "
                         f"(rel err {el:.3e})")
    except (OSError, ValueError, KeyError) as ex:
        fails.append(f"cannot read the loss: {ex}")
    summary.update(worst_value_rel_err=worst_v, worst_value_tensor=worst_v_name,
                   worst_update_rel_err=worst_u, worst_update_tensor=worst_u_name,
                   update_within_rounding=len(floored), torch32_worst_value_rel_err=ref_v,
                   torch32_worst_update_rel_err=ref_u,
                   tensors_closer_to_float32_torch=len(used32))
    summary["pass"] = not fails
    log(f"  loss got {summary.get('loss', float('nan')):.7f} torch {summary['torch_loss']:.7f} "
        f"rel {summary.get('loss_rel_err', float('nan')):.3e}")
    log(f"  worst value rel err {worst_v:.3e} ({worst_v_name}); worst update rel err {worst_u:.3e} "
        f"({worst_u_name}); {len(floored)} tensor(s) with updates within float32 rounding")
    log(f"  {len(used32)} tensor(s) closer to torch's float32 step than to its float64 step")
    log(f"  (torch's own float32 step vs its float64 step: worst value rel err {ref_v:.3e}, "
        f"worst update rel err {ref_u:.3e})")
    log(f"  torch {t_torch:.1f} s, onnx-pipetrain {t_bin:.1f} s")
    for f_ in fails[:40]:
        log("  - " + f_)
    if len(fails) > 40:
        log(f"  ... {len(fails) - 40} more")
    log(("PASS" if not fails else f"FAIL ({len(fails)} mismatches)") + f" {name} opset {opset}")
    _write(outdir, summary)
    return summary


def _write(outdir, summary):
    with open(os.path.join(outdir, "oracle_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description="one-step PyTorch oracle for a model family")
    ap.add_argument("name", choices=em.TORCH_MODELS)
    ap.add_argument("outdir")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--bin", default=None)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=1, help="pipeline stages (with --micro-batches: GPipe)")
    ap.add_argument("--micro-batches", type=int, default=1, help="GPipe micro-batches (BatchNorm per micro-batch)")
    a = ap.parse_args()
    s = run_oracle(a.name, a.outdir, a.opset, a.bin, a.batch, gpus=a.gpus, micro=a.micro_batches)
    return 0 if s["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
