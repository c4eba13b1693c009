#!/usr/bin/env python3
"""Where a training step's time goes, by kind of work, onnx-pipetrain beside PyTorch on one device.

    python3 tools/bench/gpu_breakdown.py --pipetrain BIN [--models resnet50] [--precisions tf32,bf16]
    python3 tools/bench/gpu_breakdown.py --device cpu --tiny --pipetrain BIN     (a dry run without a GPU)

For each model (tools/bench/gpu_bench.py's ResNet-50 and GPT decoder, at their first batch) and
precision: ours is `onnx-pipetrain --profile --plan-only` on one stage, whose profile.json lists
every node of the training graph with its own median time (each node run to completion: a
device synchronisation per node, so a class of many small nodes carries some microseconds of sync
each; the step's own time, without them, is gpu_bench.py's); PyTorch's is torch.profiler over the
same training steps (eager, the precision's settings as gpu_bench.py sets them), each operator's
self device time. Both are grouped into the same classes (convolution forward, its two backward
passes, batch normalisation, element-wise, pooling, matrix products, attention, loss, optimizer,
casts) and printed side by side with the ratio: the classes that make a gap in gpu_bench.py's
table. Exit 0 when every row ran.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_bench as gb  # noqa: E402

# (class, substrings of our op types); the first match wins. Update-phase nodes are "optimizer".
OURS = [
    ("conv fwd", ("Conv",)),  # after ConvGrad* below
    ("batchnorm", ("BatchNorm",)),
    ("layernorm", ("LayerNorm",)),
    ("loss", ("CrossEntropy", "NegativeLogLikelihood")),
    ("attention", ("Attention", "Softmax")),
    ("matmul", ("Gemm", "MatMul")),
    ("pool", ("Pool",)),
    ("cast", ("Cast",)),
    ("gather/embedding", ("Gather",)),
    ("element-wise", ("Relu", "Add", "Sub", "Mul", "Div", "Gelu", "Erf", "Tanh", "Sigmoid", "Sum", "Where", "Dropout")),
]
# (class, substrings of PyTorch operator names); the first match wins.
THEIRS = [
    ("optimizer", ("_foreach_", "aten::sgd", "aten::_fused_sgd", "Optimizer.step")),
    ("conv bwd", ("convolution_backward", "conv2d_backward", "conv_depthwise2d_backward")),
    ("conv fwd", ("convolution", "conv2d", "conv_depthwise2d")),
    ("batchnorm", ("batch_norm",)),
    ("layernorm", ("layer_norm",)),
    ("attention", ("scaled_dot_product", "attention", "softmax_backward_data", "aten::_softmax")),
    ("loss", ("log_softmax", "nll_loss", "cross_entropy")),
    ("matmul", ("addmm", "aten::mm", "aten::bmm", "matmul", "linear")),
    ("pool", ("pool", "aten::mean")),
    ("cast", ("aten::to", "_to_copy", "aten::copy_")),
    ("gather/embedding", ("embedding", "index_select", "aten::index")),
    ("element-wise", ("relu", "threshold", "add", "mul", "div", "gelu", "tanh", "sigmoid", "where", "clamp", "fill",
                      "zero_", "sub")),
]


def our_class(node):
    op = node["op"]
    if node["phase"] == "update":
        return "optimizer"
    if "ConvGrad" in op:
        return "conv bwd"
    for cls, keys in OURS:
        if any(k in op for k in keys):
            return cls
    return "other"


def their_class(name):
    for cls, keys in THEIRS:
        if any(k in name for k in keys):
            return cls
    return "other"


def ours(pipetrain, model_path, batch, precision, device, work, timeout):
    """{class: [ms, nodes]} from --profile's per-node times, or {"error": ...}."""
    out = os.path.join(work, f"profile_{precision}")
    cmd = [pipetrain, model_path, "--device", device, "--gpus", "1", "--batch-size", str(batch), "--precision",
           precision, "--profile", "--plan-only", "--out", out, "--overwrite"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if p.returncode != 0:
        lines = (p.stderr or p.stdout).strip().splitlines()
        return {"error": f"exit {p.returncode}: {lines[-1][:160] if lines else ''}"}
    with open(os.path.join(out, "profile.json")) as f:
        nodes = json.load(f)["nodes"]
    by = collections.defaultdict(lambda: [0.0, 0])
    for n in nodes:
        c = by[our_class(n)]
        c[0] += 1e3 * n["s"]
        c[1] += 1
    return {"classes": dict(by)}


def torch_profile(name, tiny, batch, precision, device, warmup, steps):
    """{class: [ms per step, operators]} from torch.profiler's self device (or CPU) times."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile
    dev = torch.device(device)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    model = gb.build(name, tiny).to(dev)
    model.train()
    x, y = gb.make_batch(name, tiny, batch)
    x, y = x.to(dev), y.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=gb.LR, momentum=gb.MOMENTUM, dampening=gb.MOMENTUM)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = model(x)
            loss = F.cross_entropy(out.transpose(1, 2) if out.dim() == 3 else out, y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    by = collections.defaultdict(lambda: [0.0, 0])
    other = collections.Counter()
    for e in prof.key_averages():
        if device == "cuda":
            us = getattr(e, "self_device_time_total", None)
            if us is None:
                us = getattr(e, "self_cuda_time_total", 0)
        else:
            us = e.self_cpu_time_total
        if us <= 0:
            continue
        cls = their_class(e.key)
        c = by[cls]
        c[0] += us / 1e3 / steps
        c[1] += 1
        if cls == "other":
            other[e.key] += us / 1e3 / steps
    return {"classes": dict(by), "other": other.most_common(5), "torch": torch.__version__}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipetrain", help="the onnx-pipetrain binary or a wrapper")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="small models (a dry run of the logic)")
    ap.add_argument("--models", default="resnet50")
    ap.add_argument("--precisions", default="tf32,bf16")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--work", help="folder for models and runs (default: a temporary one)")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--_torch", nargs=5, help=argparse.SUPPRESS)  # name tiny batch precision device
    a = ap.parse_args(argv)
    if a._torch:
        n, tiny, b, prec, dev = a._torch
        print(json.dumps(torch_profile(n, tiny == "1", int(b), prec, dev, a.warmup, a.steps)))
        return 0
    if not a.pipetrain or not os.access(a.pipetrain, os.X_OK):
        print(f"FAIL --pipetrain {a.pipetrain}: not an executable", flush=True)
        return 2
    start = time.time()
    tiny = "1" if a.tiny else "0"
    work = a.work or tempfile.mkdtemp(prefix="gpu_breakdown.")
    os.makedirs(work, exist_ok=True)
    ok, rows = True, []
    for name in a.models.split(","):
        batch = gb.model_config(name, a.tiny)["batches"][0]
        model_path = os.path.join(work, f"{name}_b{batch}.onnx")
        if not os.path.exists(model_path):
            ex = gb.sub_json(["--_export", name, tiny, str(batch), model_path, model_path + ".data"], 300)
            if "error" in ex:
                print(f"{name}: export FAIL: {ex['error']}", flush=True)
                ok = False
                continue
        for prec in a.precisions.split(","):
            mine = ours(a.pipetrain, model_path, batch, prec, a.device, work, 300)
            cmd = [sys.executable, os.path.abspath(__file__), "--_torch", name, tiny, str(batch), prec, a.device,
                   "--warmup", str(a.warmup), "--steps", str(a.steps)]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            theirs = json.loads(lines[-1]) if p.returncode == 0 and lines else {
                "error": ((p.stdout + p.stderr).strip().splitlines() or [f"exit {p.returncode}"])[-1][:160]}
            rows.append({"model": name, "batch": batch, "precision": prec, "ours": mine, "torch": theirs})
            ok = ok and "error" not in mine and "error" not in theirs
            print_row(rows[-1], a.device)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"RESULT {'PASS' if ok else 'FAIL'}: {len(rows)} breakdowns in {time.time() - start:.0f} s")
    return 0 if ok else 1


def print_row(r, device):
    mine, theirs = r["ours"], r["torch"]
    print(f"\n== {r['model']} batch {r['batch']} {r['precision']} on {device}: ms per step by class "
          f"(ours: --profile's per-node medians, each node synchronised; PyTorch: profiler self time)")
    for side, d in (("ours", mine), ("PyTorch", theirs)):
        if "error" in d:
            print(f"{side}: FAIL {d['error']}")
    a, b = mine.get("classes", {}), theirs.get("classes", {})
    print("%-18s %9s %6s %9s %6s %7s" % ("class", "ours ms", "nodes", "torch ms", "ops", "ratio"))
    for cls in sorted(set(a) | set(b), key=lambda c: -max(a.get(c, [0])[0], b.get(c, [0])[0])):
        x, y = a.get(cls, [0.0, 0]), b.get(cls, [0.0, 0])
        ratio = f"{x[0] / y[0]:.2f}" if x[0] > 0 and y[0] > 0 else "-"
        print("%-18s %9.3f %6d %9.3f %6d %7s" % (cls, x[0], x[1], y[0], y[1], ratio))
    if theirs.get("other"):
        print("PyTorch's largest 'other': " + ", ".join(f"{k} {v:.3f}" for k, v in theirs["other"]))
    ta, tb = sum(v[0] for v in a.values()), sum(v[0] for v in b.values())
    print("%-18s %9.3f %6d %9.3f %6d %7s" % ("total", ta, sum(v[1] for v in a.values()), tb,
                                              sum(v[1] for v in b.values()), f"{ta / tb:.2f}" if ta and tb else "-"))


if __name__ == "__main__":
    sys.exit(main())
