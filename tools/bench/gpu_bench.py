#!/usr/bin/env python3
"""The GPU benchmark: onnx-pipetrain against PyTorch eager on the same GPU, measured in one run.

    python3 tools/bench/gpu_bench.py --pipetrain BIN [--budget 330] [--json OUT]
    python3 tools/bench/gpu_bench.py --device cpu --tiny --pipetrain BIN     (a dry run without a GPU)

Models (exported here from PyTorch in training mode, opset 13, seeded):
  resnet50  ResNet-50 (torchvision's v1.5, written out here), 10 classes, 3x224x224, batch 32 and 128
  gpt       a GPT-2-small-shaped decoder: 12 pre-norm layers, width 768, 12 heads, 512 tokens,
            vocabulary 32,000, batch 8, token-level cross-entropy (labels [8, 512])
  --tiny: ResNet-50 at 3x64x64 batch 4 and a 2-layer, width-64, 32-token, 1,000-word GPT at batch 4.
Each in fp32 (no TF32 on either side), tf32 (`--precision tf32`; PyTorch with allow_tf32) and bf16
(`--precision bf16`; PyTorch's bf16 autocast, and for ResNet-50's bf16 rows also PyTorch's best:
autocast + channels_last + cudnn.benchmark), on 1 stage and on 4 stages oversubscribed on the GPU.

Ours: the command line on a folder holding one batch (the same samples every step, as PyTorch's
side), SGD with momentum; ms per step from metrics.csv after the warm-up steps (the mean, as
step_vs_torch.py reads it). A combination the tool refuses is a row that quotes its message.
PyTorch: the same architecture, SGD with momentum, mean ms per step after warm-up, each
measurement in a process of its own (so that neither side's cached memory shrinks the other's).
Memory: our caching allocator's peak in use against the plan (the stages' memory_bytes, all on
the one GPU). Model FLOP utilisation: the model's FLOPs per step (PyTorch's FlopCounterMode on
the forward and backward; an analytic count where it is missing) over the step time over the
GPU's bf16 peak, measured here with a large bf16 matrix product.
Prints one table last; exit 0 when every row ran (a refusal counts as ran), 1 otherwise.
"""
import argparse
import csv
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LR, MOMENTUM = 0.01, 0.9
PRECISIONS = ("fp32", "tf32", "bf16")


def model_config(name, tiny):
    """(batches, input kind, shape, classes or vocab, extra)."""
    if name == "resnet50":
        return {"batches": (4,) if tiny else (32, 128), "kind": "image", "shape": (3, 64, 64) if tiny else (3, 224, 224),
                "classes": 10}
    if name == "gpt":
        if tiny:
            return {"batches": (4,), "kind": "tokens", "seq": 32, "vocab": 1000, "d": 64, "heads": 4, "layers": 2}
        return {"batches": (8,), "kind": "tokens", "seq": 512, "vocab": 32000, "d": 768, "heads": 12, "layers": 12}
    raise ValueError(name)


def resnet50(classes):
    """torchvision's ResNet-50 (v1.5: stride in the 3x3 convolution), written out so that machines
    without torchvision run it: Bottleneck blocks [3, 4, 6, 3], widths 64 to 512, expansion 4."""
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = 4 * width
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = 4 * width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def build(name, tiny):
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    c = model_config(name, tiny)
    if name == "resnet50":
        return resnet50(c["classes"])

    class Decoder(nn.Module):
        """Token and learned position embeddings, pre-norm causal layers with GELU MLPs, a final
        LayerNorm and an output projection tied to the token embedding: logits [N, T, vocab]."""

        def __init__(self):
            super().__init__()
            d, seq = c["d"], c["seq"]
            self.tok = nn.Embedding(c["vocab"], d)
            self.pos = nn.Parameter(0.02 * torch.randn(seq, d))
            layer = nn.TransformerEncoderLayer(d, c["heads"], dim_feedforward=4 * d, dropout=0.0, batch_first=True,
                                               norm_first=True, activation="gelu")
            kw = {"enable_nested_tensor": False} if "enable_nested_tensor" in inspect.signature(
                nn.TransformerEncoder.__init__).parameters else {}
            self.body = nn.TransformerEncoder(layer, c["layers"], **kw)
            self.norm = nn.LayerNorm(d)
            self.register_buffer("causal", torch.triu(torch.full((seq, seq), float("-inf")), 1))

        def forward(self, tokens):
            h = self.tok(tokens) + self.pos
            h = self.body(h, mask=self.causal)
            return self.norm(h) @ self.tok.weight.t()

    return Decoder()


def make_batch(name, tiny, batch):
    import torch
    c = model_config(name, tiny)
    g = torch.Generator().manual_seed(1)
    if c["kind"] == "image":
        return torch.randn((batch,) + c["shape"], generator=g), torch.randint(0, c["classes"], (batch,), generator=g)
    x = torch.randint(0, c["vocab"], (batch, c["seq"]), generator=g)
    return x, torch.randint(0, c["vocab"], (batch, c["seq"]), generator=g)


def analytic_flops(name, tiny, batch):
    """Training FLOPs per step (forward + backward = 3 x forward) when FlopCounterMode is missing."""
    c = model_config(name, tiny)
    if name == "resnet50":
        h = c["shape"][1]
        return 3 * 2 * 4.09e9 * batch * (h / 224.0) ** 2
    d, t, L, v = c["d"], c["seq"], c["layers"], c["vocab"]
    params = L * 12 * d * d + v * d
    return 3 * batch * (2 * params * t + L * 4 * t * t * d)


# ---- the PyTorch side (one process per measurement) ------------------------------------------

def torch_side(name, tiny, batch, precision, variant, device, warmup, steps):
    import torch
    import torch.nn.functional as F
    dev = torch.device(device)
    tf32 = precision == "tf32"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = variant == "best"
    model = build(name, tiny).to(dev)
    model.train()
    x, y = make_batch(name, tiny, batch)
    x, y = x.to(dev), y.to(dev)
    if variant == "best" and x.dim() == 4:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, dampening=MOMENTUM)
    use_bf16 = precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=use_bf16):
            out = model(x)
            loss = F.cross_entropy(out.transpose(1, 2) if out.dim() == 3 else out, y)
        loss.backward()
        opt.step()
        return loss

    r = {}
    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as fc:
            step()
        r["flops"] = float(fc.get_total_flops())
        r["flops_from"] = "FlopCounterMode"
    except Exception:  # noqa: BLE001 - older torch: the analytic count
        r["flops"] = analytic_flops(name, tiny, batch)
        r["flops_from"] = "analytic"
        step()
    for _ in range(warmup):
        step()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    r["ms"] = 1e3 * (time.perf_counter() - t0) / steps
    r["loss"] = float(loss)
    if device == "cuda":
        r["peak_mib"] = torch.cuda.max_memory_allocated(dev) / 2**20
        r["gpu"] = torch.cuda.get_device_name(dev)
    r["torch"] = torch.__version__
    return r


def bf16_peak(device):
    """Measured bf16 matrix-product FLOP/s of this GPU (the MFU denominator)."""
    import torch
    if device != "cuda":
        return {"tflops": 0.0}
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    iters = 20
    t0 = time.perf_counter()
    for _ in range(iters):
        a @ b
    torch.cuda.synchronize()
    return {"tflops": 2 * n ** 3 * iters / (time.perf_counter() - t0) / 1e12}


def export(name, tiny, batch, path, folder):
    import numpy as np
    import torch
    model = build(name, tiny)
    model.train()
    x, y = make_batch(name, tiny, batch)
    kw = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(model, x, path, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["x"], output_names=["logits"], **kw)
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "x.npy"), x.numpy().astype(np.float32 if x.is_floating_point() else np.int64))
    np.save(os.path.join(folder, "y.npy"), y.numpy().astype(np.int64))
    return {"ok": True}


# ---- our side ------------------------------------------------------------------------------------

def ours(pipetrain, model_path, data, batch, precision, stages, device, warmup, steps, work, timeout):
    out = os.path.join(work, "run")
    total = warmup + steps
    cmd = [pipetrain, model_path, "--device", device, "--gpus", str(stages), "--data", data, "--no-shuffle",
           "--batch-size", str(batch), "--steps", str(total), "--lr", str(LR), "--momentum", str(MOMENTUM),
           "--precision", precision, "--out", out, "--overwrite", "--log-every", str(total)]
    if stages > 1 and device == "cuda":
        cmd.append("--oversubscribe")
    r = {"cmd": " ".join(cmd)}
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        r["error"] = f"timed out after {timeout:.0f} s"
        return r
    r["wall_s"] = time.time() - t0
    text = p.stdout + p.stderr
    if p.returncode != 0:
        lines = [l for l in text.splitlines() if l.strip()]
        msg = next((l for l in reversed(lines) if l.startswith("onnx-pipetrain: ")), lines[-1] if lines else "")
        r["refused" if p.returncode == 2 else "error"] = f"exit {p.returncode}: {msg[:200]}"
        return r
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    if len(rows) != total:
        r["error"] = f"metrics.csv has {len(rows)} rows, expected {total}"
        return r
    # samples_per_s is cumulative from the start of training: elapsed(k) = k * batch / sps(k).
    elapsed = lambda k: k * batch / float(rows[k - 1]["samples_per_s"])  # noqa: E731
    r["ms"] = 1e3 * (elapsed(total) - elapsed(warmup)) / steps
    r["loss_first"], r["loss_last"] = float(rows[0]["loss"]), float(rows[-1]["loss"])
    m = re.findall(r"peak ([0-9.]+) MiB in use", text)
    if m:
        r["peak_mib"] = max(float(v) for v in m)
    with open(os.path.join(out, "partition.json")) as f:
        plan = json.load(f)
    r["plan_mib"] = sum(s["memory_bytes"] for s in plan["stages"]) / 2**20
    if "peak_mib" not in r:  # CPU stages: the stages' measured memory
        measured = [s.get("measured", {}).get("memory_bytes") for s in plan["stages"]]
        if all(v is not None for v in measured):
            r["peak_mib"] = sum(measured) / 2**20
    fallback = sorted({n for s in plan["stages"] for n in s.get("host_fallback", [])})
    if fallback:
        r["host_fallback"] = len(fallback)
    return r


# ---- driver --------------------------------------------------------------------------------------

def sub_json(args, timeout):
    cmd = [sys.executable, os.path.abspath(__file__)] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stdout + p.stderr).strip().splitlines()
        return {"error": tail[-1][:200] if tail else f"exit {p.returncode}"}
    return json.loads(lines[-1])


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipetrain", required=False, help="the onnx-pipetrain binary or a wrapper")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small models (a dry run of the logic)")
    ap.add_argument("--models", default="resnet50,gpt")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--stages", default="1,4")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--budget", type=float, default=330, help="seconds for the whole run; rows beyond it are skipped")
    ap.add_argument("--work", help="folder for models, data and runs (default: a temporary one)")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--_torch", nargs=6, help=argparse.SUPPRESS)   # name tiny batch precision variant device
    ap.add_argument("--_export", nargs=5, help=argparse.SUPPRESS)  # name tiny batch path folder
    ap.add_argument("--_peak", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._torch:
        n, tiny, b, prec, variant, dev = a._torch
        print(json.dumps(torch_side(n, tiny == "1", int(b), prec, variant, dev, a.warmup, a.steps)))
        return 0
    if a._export:
        n, tiny, b, path, folder = a._export
        print(json.dumps(export(n, tiny == "1", int(b), path, folder)))
        return 0
    if a._peak:
        print(json.dumps(bf16_peak(a._peak)))
        return 0
    if not a.pipetrain or not os.access(a.pipetrain, os.X_OK):
        print(f"FAIL --pipetrain {a.pipetrain}: not an executable", flush=True)
        return 2
    start = time.time()
    left = lambda: a.budget - (time.time() - start)  # noqa: E731
    tiny = "1" if a.tiny else "0"
    work = a.work or tempfile.mkdtemp(prefix="gpu_bench.")
    os.makedirs(work, exist_ok=True)
    peak = sub_json(["--_peak", a.device], 120)
    peak_tflops = peak.get("tflops", 0.0)
    print(f"device {a.device}: bf16 matrix-product peak {peak_tflops:.1f} TFLOP/s (8192^3, measured here)", flush=True)
    rows, ok = [], True
    # The most telling rows first, so that a spent budget skips the least: each model at its first
    # batch, then the further batches.
    jobs = [(n, model_config(n, a.tiny)["batches"][0]) for n in a.models.split(",")]
    jobs += [(n, b) for n in a.models.split(",") for b in model_config(n, a.tiny)["batches"][1:]]
    for name, batch in jobs:
        base = os.path.join(work, f"{name}_b{batch}")
        model_path, data = base + ".onnx", base + ".data"
        if not os.path.exists(model_path):
            ex = sub_json(["--_export", name, tiny, str(batch), model_path, data], max(60, min(300, left())))
            if "error" in ex:
                print(f"{name} b{batch}: export FAIL: {ex['error']}", flush=True)
                ok = False
                continue
        for prec in a.precisions.split(","):
            image = model_config(name, a.tiny)["kind"] == "image"
            variants = ["eager", "best"] if prec == "bf16" and a.device == "cuda" and image else ["eager"]
            theirs = {}
            for v in variants:
                if left() < 20:
                    theirs[v] = {"error": "skipped: budget spent"}
                    continue
                theirs[v] = sub_json(["--_torch", name, tiny, str(batch), prec, v, a.device, "--warmup",
                                      str(a.warmup), "--steps", str(a.steps)], max(30, min(240, left())))
            for stages in (int(s) for s in a.stages.split(",")):
                row = {"model": name, "batch": batch, "precision": prec, "stages": stages,
                       "torch": theirs.get("eager"), "torch_best": theirs.get("best")}
                if left() < 20:
                    row["ours"] = {"error": "skipped: budget spent"}
                else:
                    run_dir = os.path.join(work, f"{name}_b{batch}_{prec}_{stages}")
                    os.makedirs(run_dir, exist_ok=True)
                    row["ours"] = ours(a.pipetrain, model_path, data, batch, prec, stages, a.device, a.warmup,
                                       a.steps, run_dir, max(30, min(240, left())))
                o, t = row["ours"], row["torch"] or {}
                if "error" in o or "error" in t:
                    ok = False
                if "ms" in o and "ms" in t:
                    row["ratio"] = o["ms"] / t["ms"]
                if "ms" in o and t.get("flops") and peak_tflops > 0:
                    row["mfu"] = t["flops"] / (o["ms"] / 1e3) / (peak_tflops * 1e12)
                if o.get("peak_mib") and o.get("plan_mib"):
                    row["peak_over_plan"] = o["peak_mib"] / o["plan_mib"]
                rows.append(row)
                what = o.get("error") or o.get("refused") or f"{o['ms']:.2f} ms"
                print(f"{name} b{batch} {prec} {stages} stage(s): ours {what}; torch "
                      f"{t.get('error') or fmt(t.get('ms'), '.2f') + ' ms'}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"peak_tflops": peak_tflops, "rows": rows}, f, indent=1)
    # The table, last.
    print(f"\n== gpu_bench ({a.device}{', tiny models' if a.tiny else ''}; bf16 peak {peak_tflops:.1f} TFLOP/s; "
          f"ratio = ours / PyTorch eager at the same precision; best = autocast + channels_last + cudnn.benchmark)")
    head = ("model", "batch", "prec", "st", "torch ms", "best ms", "ours ms", "ratio", "peak MiB", "plan MiB",
            "peak/plan", "MFU", "note")
    print("%-9s %5s %5s %3s %9s %9s %9s %6s %9s %9s %9s %6s  %s" % head)
    for r in rows:
        o, t, b = r["ours"], r["torch"] or {}, r["torch_best"] or {}
        note = o.get("refused") or o.get("error") or t.get("error") or ""
        if o.get("host_fallback"):
            note = (note + "; " if note else "") + f"{o['host_fallback']} host-fallback nodes"
        print("%-9s %5d %5s %3d %9s %9s %9s %6s %9s %9s %9s %6s  %s" % (
            r["model"], r["batch"], r["precision"], r["stages"], fmt(t.get("ms"), ".2f"), fmt(b.get("ms"), ".2f"),
            fmt(o.get("ms"), ".2f"), fmt(r.get("ratio"), ".2f"), fmt(o.get("peak_mib"), ".0f"),
            fmt(o.get("plan_mib"), ".0f"), fmt(r.get("peak_over_plan"), ".2f"),
            fmt(100 * r["mfu"] if "mfu" in r else None, ".1f"), note[:120]))
    print(f"RESULT {'PASS' if ok else 'FAIL'}: {len(rows)} rows in {time.time() - start:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
