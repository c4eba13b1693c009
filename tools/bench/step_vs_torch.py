#!/usr/bin/python3
"""Training-step time of onnx-pipetrain against PyTorch eager, same model, batch, optimizer (and
threads), measured in one run: on the CPU or on one CUDA GPU.

Run: /usr/bin/python3 tools/bench/step_vs_torch.py [--build DIR] [--threads T] [--only NAME]
     [--steps N] [--warmup W] [--per-node] [--json FILE]
     python3 tools/bench/step_vs_torch.py --device cuda [--pipetrain BIN] [--model-file M.onnx]
     [--only NAME] [--batch B] [--steps N] [--warmup W] [--json FILE]    (--via-cli: the same on the CPU)

For each model (LeNet-5-BN batch 64 at 1x28x28; torchvision ResNet-18 at 3x32x32 batch 32; the
Transformer encoder classifier, batch 32, 64 int64 tokens from a vocabulary of 100) it
  1. exports the module of tools/export_models.py (torch.manual_seed(0), training mode, opset 13,
     do_constant_folding=False, dropout as in the model) to a temporary folder;
  2. times PyTorch eager in a subprocess of its own (so that ru_maxrss is that model's alone):
     torch.set_num_threads(T), one fixed batch, SGD(lr 0.01, momentum 0.9, dampening 0.9: the
     v = 0.9 v + 0.1 g of onnx-pipetrain's SGDMomentum), zero_grad + forward + cross-entropy +
     backward + step per step;
  3. runs step_bench (tools/bench/step_bench.cpp) on the exported model with the same threads.
Both sides validate before they time (first loss finite; mean loss of steps 16-20 below that of
steps 1-5 on one repeated batch) and report the median of N timed steps after W warm-up steps.
Prints a table: ms/step of both, the ratio ours/torch (target <= 1.0) and the peak resident memory
of both processes (torch: ru_maxrss; onnx-pipetrain: VmHWM).

--device cuda (tools/gpu-check.sh runs it): the torch side runs on cuda:0 in FP32 (TF32 off, no
cudnn.benchmark, as our kernels; a torch.cuda.synchronize() in every timed step, as our trainer
reads the loss back every step), and our side is the onnx-pipetrain command line itself
(`BIN MODEL --device cuda --gpus 1`, single stage; step_bench is CPU-only), trained on a folder
holding the same one batch (so --no-shuffle repeats it) for 20 + W + N steps: the validation
reads steps 1-20 of its metrics.csv, the time is the mean of the last N steps (from the
cumulative samples/s column). So the ratio compares means on both sides. --model-file takes a
ready model (gpu-check's carried ResNet-18, whose weights differ from torch's: timing does not
depend on them) instead of exporting one with this machine's torch. A refused or failed run is
reported with the tool's last line (e.g. "--device cuda: training on CUDA is not implemented").
The last line is `RESULT <name> batch B: torch T ms, ours O ms, ratio R` or `FAIL <why>`.
--via-cli runs this path with both sides on the CPU (a dry run where no GPU is).
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))

# name -> (export_models name, batch, sample shape or ("tokens", seq, vocab)). "transformer" is
# export_models' TransformerClassifier without its padding mask (as the CPU benchmark table names it);
# "transformer_masked" keeps src_key_padding_mask = (tokens == 0) and runs only with --only.
MODELS = {
    "lenet_bn": ("lenet_bn", 64, (1, 28, 28)),
    "resnet18": ("resnet18", 32, (3, 32, 32)),
    "transformer": ("transformer", 32, ("tokens", 64, 100)),
    "transformer_masked": ("transformer", 32, ("tokens", 64, 100)),
}
DEFAULT_MODELS = ("lenet_bn", "resnet18", "transformer")
LR, MOMENTUM = 0.01, 0.9
VALIDATION_STEPS = 20


def make_batch(name, seed=0, batch=None):
    import torch
    from export_models import NUM_CLASSES
    _, default_batch, shape = MODELS[name]
    batch = batch or default_batch
    g = torch.Generator().manual_seed(seed)
    if shape[0] == "tokens":
        x = torch.randint(0, shape[2], (batch, shape[1]), generator=g)
    else:
        x = torch.randn((batch,) + tuple(shape), generator=g)
    y = torch.randint(0, NUM_CLASSES[MODELS[name][0]], (batch,), generator=g)
    return x, y


def build(name):
    """The torch module (torch.manual_seed(0) inside build_module), dropout as in the model."""
    from export_models import build_module
    model = build_module(MODELS[name][0])
    if name == "transformer":
        def forward(tokens):                # no src_key_padding_mask
            return model.head(model.encoder(model.embed(tokens)).mean(dim=1))
        model.forward = forward
    return model


def export(name, path):
    import torch
    model = build(name)
    model.train()
    x, _ = make_batch(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, path, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})


def torch_steps(name, threads, steps, warmup, device="cpu", batch=None):
    """One process per model: validate, warm up, time; returns a dict (printed as JSON)."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return {"error": "torch sees no CUDA device"}
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    model = build(name).to(dev)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, dampening=MOMENTUM)
    x, y = (t.to(dev) for t in make_batch(name, batch=batch))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()    # a device sync on CUDA

    losses = [step() for _ in range(VALIDATION_STEPS)]
    first5, last5 = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    out = {"loss_first": losses[0], "loss_step20": losses[-1], "loss_first5_mean": first5,
           "loss_last5_mean": last5, "threads": torch.get_num_threads()}
    if not all(map(lambda v: v == v and abs(v) != float("inf"), losses)):
        out["error"] = f"torch loss not finite: {losses}"
        return out
    if not last5 < first5:
        out["error"] = f"torch loss does not fall: mean of steps 1-5 {first5:.5f}, 16-20 {last5:.5f}"
        return out
    for _ in range(warmup):
        step()
    ms = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ms.append(1e3 * (time.perf_counter() - t0))
    ms_sorted = sorted(ms)
    pick = lambda q: ms_sorted[min(len(ms), max(1, math.ceil(q * len(ms)))) - 1]   # nearest rank
    out.update(median_ms=statistics.median(ms), mean_ms=statistics.mean(ms), p10_ms=pick(0.10), p90_ms=pick(0.90),
               peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    if dev.type == "cuda":
        out["device_name"] = torch.cuda.get_device_name(dev)
        out["torch"] = torch.__version__
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated(dev) / 2**20
    return out


def run_ours(build, model_path, name, threads, steps, warmup, per_node):
    exe = os.path.join(build, "tools", "bench", "step_bench")
    cmd = [exe, model_path, "--batch-size", str(MODELS[name][1]), "--steps", str(steps), "--warmup",
           str(warmup), "--threads", str(threads), "--json"]
    if per_node:
        cmd.append("--per-node")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        msg = (p.stdout + p.stderr).strip().splitlines()
        return {"error": msg[-1] if msg else f"step_bench exited {p.returncode}", "cmd": cmd}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["cmd"] = cmd
    return r


def run_ours_cli(pipetrain, model_path, name, batch, steps, warmup, tmp, device):
    """--device cuda (or --via-cli): the command line on one stage, on a folder holding one batch."""
    import numpy as np
    x, y = make_batch(name, batch=batch)
    data = os.path.join(tmp, f"{name}.batch")
    os.makedirs(data, exist_ok=True)
    # Token batches stay integers (the Transformer's input is int64); images go as float32.
    xn = x.numpy()
    np.save(os.path.join(data, "x.npy"), xn.astype(np.float32 if np.issubdtype(xn.dtype, np.floating) else np.int64))
    np.save(os.path.join(data, "y.npy"), y.numpy().astype(np.int64))
    out = os.path.join(tmp, f"{name}.run")
    total = VALIDATION_STEPS + warmup + steps
    cmd = [pipetrain, model_path, "--device", device, "--gpus", "1", "--data", data, "--no-shuffle",
           "--batch-size", str(batch), "--steps", str(total), "--lr", str(LR), "--momentum", str(MOMENTUM),
           "--out", out, "--overwrite", "--quiet"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    r = {"cmd": cmd, "wall_s": time.time() - t0}
    if p.returncode != 0:
        msg = [l for l in (p.stdout + p.stderr).strip().splitlines() if l.strip()]
        r["error"] = (msg[-1] if msg else f"onnx-pipetrain exited {p.returncode}") + f" (exit {p.returncode})"
        return r
    import csv
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    if len(rows) != total:
        r["error"] = f"metrics.csv has {len(rows)} rows, expected {total}"
        return r
    losses = [float(row["loss"]) for row in rows]
    first5, last5 = sum(losses[:5]) / 5, sum(losses[15:20]) / 5
    r.update(loss_first=losses[0], loss_step20=losses[19], loss_first5_mean=first5, loss_last5_mean=last5)
    if not all(map(math.isfinite, losses)):
        r["error"] = f"loss not finite: {losses[:25]}"
        return r
    if not last5 < first5:
        r["error"] = f"loss does not fall: mean of steps 1-5 {first5:.5f}, 16-20 {last5:.5f}"
        return r
    # samples_per_s is cumulative from the start of training: elapsed(k) = k * batch / sps(k).
    elapsed = lambda k: k * batch / float(rows[k - 1]["samples_per_s"])
    a = VALIDATION_STEPS + warmup
    r["mean_ms"] = 1e3 * (elapsed(total) - elapsed(a)) / steps
    r["first_step_ms"] = 1e3 * elapsed(1)
    return r


def main_cli(a):
    names = a.only or ["resnet18"]
    pipetrain = a.pipetrain or os.path.join(a.build, "tools", "onnx-pipetrain")
    if not os.access(pipetrain, os.X_OK):
        print(f"FAIL {pipetrain} not found (--pipetrain)", flush=True)
        return 2
    if a.model_file and len(names) != 1:
        print("FAIL --model-file goes with one --only NAME", flush=True)
        return 2
    dev = a.device
    print(f"device {dev}: torch{' FP32 (no TF32, no cudnn.benchmark)' if dev == 'cuda' else ''} against "
          f"`onnx-pipetrain --device {dev} --gpus 1`; "
          f"{VALIDATION_STEPS} validation + {a.warmup} warm-up + {a.steps} timed steps per side; means", flush=True)
    results, failed = {}, False
    with tempfile.TemporaryDirectory(prefix="step_vs_torch.") as tmp:
        for name in names:
            batch = a.batch or MODELS[name][1]
            r = results[name] = {"name": name, "batch": batch}
            path = a.model_file
            if not path:
                path = os.path.join(tmp, f"{name}.op13.train.onnx")
                ex = subprocess_json(["--_export", name, path])
                if "error" in ex:
                    r["ours"] = {"error": f"export with this torch: {ex['error']}"}
            r["torch"] = subprocess_json(["--_torch", name, "--threads", str(a.threads), "--steps", str(a.steps),
                                          "--warmup", str(a.warmup), "--device", dev, "--batch", str(batch)])
            if "ours" not in r:
                r["ours"] = run_ours_cli(pipetrain, path, name, batch, a.steps, a.warmup, tmp, dev)
            t, o = r["torch"], r["ours"]
            for side, d in (("torch", t), ("onnx-pipetrain", o)):
                if "error" in d:
                    failed = True
                    print(f"{name}: {side}: FAIL: {d['error']}", flush=True)
            if "mean_ms" in t:
                gpu = f", peak GPU memory {t['peak_gpu_mib']:.0f} MiB" if "peak_gpu_mib" in t else ""
                print(f"{name}: torch {t.get('torch', '')} on {t.get('device_name', dev)}: {t['mean_ms']:.2f} ms/step "
                      f"(median {t['median_ms']:.2f}, p10-p90 {t['p10_ms']:.2f}-{t['p90_ms']:.2f}), losses "
                      f"{t['loss_first']:.4f} -> {t['loss_step20']:.4f}{gpu}", flush=True)
            if "mean_ms" in o:
                print(f"{name}: onnx-pipetrain: {o['mean_ms']:.2f} ms/step (first step {o['first_step_ms']:.0f} ms, "
                      f"whole run {o['wall_s']:.1f} s), losses {o['loss_first']:.4f} -> {o['loss_step20']:.4f}",
                      flush=True)
            if "mean_ms" in t and "mean_ms" in o:
                r["ratio"] = o["mean_ms"] / t["mean_ms"]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    for name, r in results.items():
        t, o = r["torch"], r["ours"]
        if "ratio" in r:
            print(f"RESULT {name} batch {r['batch']}: torch {t['mean_ms']:.2f} ms, ours {o['mean_ms']:.2f} ms, "
                  f"ratio {r['ratio']:.2f} (ours/torch, mean ms per training step)")
        else:
            why = o.get("error") or t.get("error") or "no result"
            tt = f"torch {t['mean_ms']:.2f} ms; " if "mean_ms" in t else ""
            print(f"FAIL {name} batch {r['batch']}: {tt}{'ours' if 'error' in o else 'torch'}: {why}")
    return 1 if failed else 0


def subprocess_json(args):
    p = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        err = (p.stdout + p.stderr).strip().splitlines()
        return {"error": err[-1] if err else f"exit {p.returncode}"}
    return json.loads(lines[-1])


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-bench"), help="CMake build folder with step_bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=sorted(MODELS), action="append", help="model(s) to run (default: all)")
    ap.add_argument("--steps", type=int, default=15, help="timed steps per side")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--per-node", action="store_true", help="also print step_bench's top nodes per model")
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: torch on cuda:0 against the onnx-pipetrain CLI with --device cuda --gpus 1")
    ap.add_argument("--via-cli", action="store_true",
                    help="the --device cuda comparison (CLI, means) on the CPU: a dry run without a GPU")
    ap.add_argument("--pipetrain", help="--device cuda: the onnx-pipetrain binary or a wrapper (default BUILD/tools/onnx-pipetrain)")
    ap.add_argument("--model-file", help="--device cuda: train this ONNX model instead of exporting one")
    ap.add_argument("--batch", type=int, help="batch size (default: the model's in MODELS)")
    # Internal: the subprocesses.
    ap.add_argument("--_export", nargs=2, metavar=("NAME", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--_torch", metavar="NAME", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a._export:
        export(*a._export)
        print(json.dumps({"ok": True}))
        return 0
    if a._torch:
        print(json.dumps(torch_steps(a._torch, a.threads, a.steps, a.warmup, a.device, a.batch)))
        return 0
    if a.device == "cuda" or a.via_cli:
        return main_cli(a)
    if a.batch:
        ap.error("--batch: --device cuda only (the CPU table keeps its fixed batches)")

    exe = os.path.join(a.build, "tools", "bench", "step_bench")
    if not os.access(exe, os.X_OK):
        print(f"step_vs_torch: error: {exe} not found; build it: cmake --build {a.build} --target step_bench",
              file=sys.stderr)
        return 2
    names = a.only or list(DEFAULT_MODELS)
    t_start = time.time()
    print(f"threads {a.threads}, {a.warmup} warm-up + {a.steps} timed steps per side, "
          f"load average at start {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}",
          flush=True)
    results = {}
    failed = False
    with tempfile.TemporaryDirectory(prefix="step_vs_torch.") as tmp:
        for name in names:
            path = os.path.join(tmp, f"{name}.op13.train.onnx")
            r = {"name": name, "batch": MODELS[name][1]}
            ex = subprocess_json(["--_export", name, path])
            if "error" in ex:
                r["error"] = f"export: {ex['error']}"
            else:
                r["torch"] = subprocess_json(["--_torch", name, "--threads", str(a.threads), "--steps",
                                              str(a.steps), "--warmup", str(a.warmup)])
                r["ours"] = run_ours(a.build, path, name, a.threads, a.steps, a.warmup, a.per_node)
            results[name] = r
            t, o = r.get("torch", {}), r.get("ours", {})
            for side, d in (("torch", t), ("onnx-pipetrain", o)):
                if "error" in d:
                    print(f"{name}: {side}: FAIL: {d['error']}", flush=True)
            if "error" in r:
                print(f"{name}: FAIL: {r['error']}", flush=True)
            if any("error" in d for d in (r, t, o)):
                failed = True
                continue
            print(f"{name}: ok (losses torch {t['loss_first']:.4f} -> {t['loss_step20']:.4f}, ours "
                  f"{o['loss_first']:.4f} -> {o['loss_step20']:.4f} over {VALIDATION_STEPS} steps on one batch)",
                  flush=True)
            if "plan_values" in o:
                print(f"  memory plan of onnx-pipetrain: {o['plan_values']} values share a {o['plan_arena_mib']:.1f} MiB "
                      f"arena ({o['plan_unshared_mib']:.1f} MiB without sharing); other buffers "
                      f"{o['own_buffers_mib']:.1f} MiB", flush=True)
            if a.per_node and "top_nodes" in o:
                print(f"  top nodes of onnx-pipetrain (sum {o['per_node_total_ms']:.2f} ms):")
                for n in o["top_nodes"]:
                    print(f"    {n['op']:<24} {n['phase']:<9} {n['ms']:9.3f} ms {100 * n['share']:5.1f}%  {n['name']} {n.get('inputs', '')}")
                print("  by op type and phase:")
                for n in o["top_ops"]:
                    print(f"    {n['op']:<34} {n['ms']:9.3f} ms {100 * n['share']:5.1f}%")

    print()
    hdr = (f"| {'model':<11} | {'batch':>5} | {'torch ms/step':>13} | {'ours ms/step':>12} | {'ratio':>5} | "
           f"{'torch p10-p90':>13} | {'ours p10-p90':>13} | {'torch RSS MiB':>13} | {'ours RSS MiB':>12} |")
    print(hdr)
    print("|" + "|".join("-" * (len(c) + 0) for c in hdr.split("|")[1:-1]) + "|")
    for name, r in results.items():
        t, o = r.get("torch", {}), r.get("ours", {})
        ratio = o["median_ms"] / t["median_ms"] if "median_ms" in o and "median_ms" in t else None
        tr = f"{fmt(t.get('p10_ms'), '.1f')}-{fmt(t.get('p90_ms'), '.1f')}"
        orr = f"{fmt(o.get('p10_ms'), '.1f')}-{fmt(o.get('p90_ms'), '.1f')}"
        trss = t["peak_rss_kib"] / 1024 if "peak_rss_kib" in t else None
        orss = o["peak_rss_kib"] / 1024 if "peak_rss_kib" in o else None
        print(f"| {name:<11} | {r['batch']:>5} | {fmt(t.get('median_ms'), '.2f'):>13} | "
              f"{fmt(o.get('median_ms'), '.2f'):>12} | {fmt(ratio, '.2f'):>5} | {tr:>13} | {orr:>13} | "
              f"{fmt(trss, '.0f'):>13} | {fmt(orss, '.0f'):>12} |")
        r["ratio"] = ratio
    la = os.getloadavg()
    print(f"\nratio = onnx-pipetrain / torch median ms per step (target <= 1.0); {time.time() - t_start:.0f} s, "
          f"load average at end {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
