#!/usr/bin/env python3
"""The cost model against what runs: for ResNet-18, MobileNet-V2, the Transformer encoder and the
GPT decoder of the peer set (tools/bench/peer_models.py), on 1, 2 and 4 CPU stages (synthetic data,
1F1B), the plan's predicted stage times (forward + backward) and samples/s beside the measured ones,
the automatic split's measured imbalance (max / mean measured stage time), and whether the stages
share the cores (then a stage's measured time is its thread's CPU time x the share, what the plan
prices: its wall time depends on what ran beside it). Without --profile: the calibrated model (runtime/exec/calibrate.h) alone.

  /usr/bin/python3 tools/bench/cost_model_bench.py [--build build] [--models resnet18 ...] [--stages 1 2 4]
                                                   [--steps N] [--no-calibrate] [--repeat N]
  /usr/bin/python3 tools/bench/cost_model_bench.py --partition RUN/partition.json ...   (runs made already)

Targets (issue #33): per-stage times and samples/s within 25 % of the measured steady state, the
measured imbalance at most 1.15. Run it on an idle machine: other work on the cores is measured too.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)


def export(name, path):
    import torch
    import peer_models
    if os.path.exists(path):
        return
    m = peer_models.build(name)
    x, _ = peer_models.make_batch(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, x[:2], path, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})


def run(exe, model, stages, steps, batch, out, extra):
    cmd = [exe, model, "--gpus", str(stages), "--device", "cpu", "--steps", str(steps), "--batch-size", str(batch),
           "--out", out, "--overwrite", "--quiet"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    with open(os.path.join(out, "partition.json")) as f:
        return json.load(f)


HEADER = (f"{'model':13} {'stages':>6} {'share':>5} {'pred ms/stage':>28} {'meas ms/stage':>28} {'worst':>6} "
          f"{'pred/s':>8} {'meas/s':>8} {'err':>6} {'imbal':>5}")


def compare(runs):
    """The plan of runs[0] against the median of what the runs (of one configuration) measured."""
    j = runs[0]
    # Whole stages, updates included (a stage updating in its backward measures them there).
    pred = [s["fwd_ms"] + s["bwd_ms"] + s["update_ms"] for s in j["stages"]]
    # Each stage's and the throughput's median over the repeats. On shared cores a stage's wall
    # time depends on what ran beside it: its CPU time x the share is what the plan prices
    # (the report's error does the same).
    share = j.get("device_share", 1)

    def measured(m):
        if share > 1.05 and m.get("cpu_ms", -1) > 0:
            return m["cpu_ms"] * share
        return m["fwd_ms"] + m["bwd_ms"] + m["update_ms"]
    meas = [statistics.median(measured(r["stages"][k]["measured"]) for r in runs)
            for k in range(len(j["stages"])) if "measured" in j["stages"][k]]
    errs = [abs(p - m) / m for p, m in zip(pred, meas) if m > 0]
    ps = j["predicted_samples_per_s"]
    ms = statistics.median(r.get("measured_steady_samples_per_s", r.get("measured_samples_per_s", 0)) for r in runs)
    return {"share": share, "pred": pred, "meas": meas, "worst": max(errs) if errs else float("nan"), "ps": ps,
            "ms": ms, "err": abs(ps - ms) / ms if ms else float("nan"),
            "imbal": max(meas) / (sum(meas) / len(meas)) if meas else float("nan")}


def print_row(name, n, r):
    print(f"{name:13} {n:>6} {r['share']:>5.1f} {' '.join(f'{p:6.1f}' for p in r['pred']):>28} "
          f"{' '.join(f'{m:6.1f}' for m in r['meas']):>28} {100 * r['worst']:>5.0f}% {r['ps']:>8.0f} {r['ms']:>8.0f} "
          f"{100 * r['err']:>5.0f}% {r['imbal']:>5.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", nargs="*", default=["resnet18", "mobilenet_v2", "transformer", "gpt"])
    ap.add_argument("--stages", type=int, nargs="*", default=[1, 2, 4])
    ap.add_argument("--steps", type=int, default=None,
                    help="steps per run (default: 40, and 300 for the Transformer and 120 for the GPT, whose steps of "
                         "2-6 ms would leave a steady state of under 0.2 s, which one hiccup of this VM moves by 15 %%)")
    ap.add_argument("--no-calibrate", action="store_true", help="the analytic roofline model, for comparison")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "pipetrain-cost-bench"))
    ap.add_argument("--repeat", type=int, default=1,
                    help="train each configuration this many times and take each measured figure's median "
                         "(this VM's speed varies 10-25 %% from run to run); the plan is the same every time")
    ap.add_argument("--partition", nargs="*", metavar="PARTITION_JSON",
                    help="compare the runs already made (each a run folder's partition.json, e.g. a GPU run's) "
                         "instead of training: no model is exported or run")
    a = ap.parse_args()
    if a.partition:
        print(HEADER)
        worst_all = 0
        for path in a.partition:
            with open(path) as f:
                row = compare([json.load(f)])
            worst_all = max(worst_all, row["worst"], row["err"])
            print_row(os.path.basename(os.path.dirname(os.path.abspath(path)))[:13], len(row["pred"]), row)
        print(f"largest error: {100 * worst_all:.0f}% (target 25%)")
        return
    import peer_models
    exe = os.path.join(a.build, "tools/onnx-pipetrain")
    os.makedirs(a.work, exist_ok=True)
    extra = ["--no-calibrate"] if a.no_calibrate else []
    print(HEADER)
    worst_all = 0
    for name in a.models:
        model = os.path.join(a.work, f"{name}.onnx")
        export(name, model)
        batch = peer_models.MODELS[name][1]
        for n in a.stages:
            steps = a.steps or {"transformer": 300, "gpt": 120}.get(name, 40)
            runs = [run(exe, model, n, steps, batch, os.path.join(a.work, f"{name}_{n}"), extra)
                    for _ in range(max(1, a.repeat))]
            row = compare(runs)
            worst_all = max(worst_all, row["worst"], row["err"])
            print_row(name, n, row)
    print(f"largest error: {100 * worst_all:.0f}% (target 25%)")


if __name__ == "__main__":
    main()
