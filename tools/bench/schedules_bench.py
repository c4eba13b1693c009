#!/usr/bin/env python3
"""Every schedule on the same model and split, measured against what its program predicts.

For each model (the Transformer encoder of tools/export_models.py, batch 32 of 16 tokens; ResNet-18
at 32x32, batch 32), each stage count (2 stages with one core each on a 2-core machine, 4 stages
sharing the cores) and each schedule (asynchronous 1F1B SpecTrain; GPipe, synchronous 1F1B and
ZB-H1 and interleaved 1F1B with 2 virtual stages per device, m = 4, 8, 16 micro-batches) it trains a fixed number of steps and prints:

  - the measured throughput (samples/s) and each stage's idle fraction (1 - busy: the time a stage
    thread spent neither running passes nor updating, waiting for its inputs included), both in the
    steady state (the steps after the first fifth of the run). Where the stages share the cores (4
    stages on 2 cores) the measured idle time is the cores' (1 - the stages' CPU time in passes /
    (cores x time)): a stage that waits there lets the others run. The run's dry run then
    prices each pass at its CPU time and shares the cores among the stages, as the plan does;
  - the bubble the schedule's program predicts with the cost model's stage times (the report) and
    with the pass times the run measured (the dry run again after training), and the textbook
    formula with equal stages: (p-1)/(m+p-1) for GPipe and 1F1B, a third of that for ZB-H1,
    (p-1)/V / (m + (p-1)/V) for interleaved stages (the idle per stage column then lists each
    virtual stage's, the measured idle is per device);
  - each stage's measured peak memory (its buffers: executor, saved slots, W state, gradient sums).

With --svg-dir it also writes each synchronous schedule's simulated timeline for the first model
(2 stages, m = 4) as an SVG (the report's picture). Not a test: numbers vary with the machine and
its load; docs/schedules.md holds a run.

  /usr/bin/python3 tools/bench/schedules_bench.py [--pipetrain BIN] [--steps N] [--only transformer]
      [--stages 2,4] [--micro 4,8,16] [--svg-dir docs]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

SCHEDULES = [("gpipe", ["--schedule", "gpipe"]), ("1f1b-sync", ["--schedule", "1f1b", "--weights", "sync"]),
             ("zb-h1", ["--schedule", "zb-h1"]), ("interleaved", ["--schedule", "interleaved", "--virtual-stages", "2"]),
             ("zbv", ["--schedule", "zbv"])]


def formula(name, p, m):
    if p < 2:
        return 0.0
    if name == "zb-h1":
        return (p - 1) / 3 / (m + (p - 1) / 3)
    if name == "zbv":  # zero bubble once m >= 2p with F = I = W; the ends remain
        return 0.0
    if name == "interleaved":  # V = 2 chunks per device
        return (p - 1) / 2 / (m + (p - 1) / 2)
    return (p - 1) / (m + p - 1)


def prepare(model, work):
    import export_models as em
    path = os.path.join(work, model + ".onnx")
    if model == "transformer":
        em.export_torch(em.build_module("transformer", dropout=0), "transformer", 17, "train", path)
        data = os.path.join(work, "tokens")
        os.makedirs(data, exist_ok=True)
        rng = np.random.default_rng(5)
        np.save(os.path.join(data, "x.npy"), rng.integers(1, em.VOCAB, size=(4096, em.SEQ)).astype(np.int64))
        np.save(os.path.join(data, "y.npy"), rng.integers(0, em.NUM_CLASSES["transformer"], size=4096))
        return path, ["--data", data]
    em.export_torch(em.build_module(model), model, 13, "train", path)
    return path, []   # synthetic data: throughput only


def run(binary, model, extra, out, steps):
    cmd = [binary, model, "--batch-size", "32", "--steps", str(steps), "--seed", "1", "--out", out, "--overwrite",
           *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1]}
    so = p.stdout
    res = {}
    m = re.search(r"^done: .*\(([0-9.]+) samples/s\)", so, re.M)
    res["samples_per_s"] = float(m.group(1)) if m else 0.0
    res["idle"] = [1 - float(b) / 100 for b in re.findall(r"^stage \d+: busy (\d+)%", so, re.M)]
    m = re.search(r"^schedule \S+: predicted bubble ([0-9.]+)%", so, re.M)
    res["predicted_plan"] = float(m.group(1)) / 100 if m else None
    m = re.search(r"with the measured pass times[^:]*: (?:bubble|cores idle) ([0-9.]+)%, ([0-9.]+) samples/s "
                  r"predicted; measured: (?:stages|devices|cores) idle (-?[0-9.]+)%", so)
    if m:
        res["predicted_measured"] = float(m.group(1)) / 100
        res["predicted_samples_per_s"] = float(m.group(2))
        res["measured_idle"] = float(m.group(3)) / 100
    with open(os.path.join(out, "partition.json")) as f:
        part = json.load(f)
    stages = part["stages"]
    # The steady state (steps after the first fifth), as the stages' idle fractions are.
    res["samples_per_s"] = part.get("measured_steady_samples_per_s") or res["samples_per_s"]
    res["memory_mb"] = [s.get("measured", {}).get("memory_bytes", -1) / 1e6 for s in stages]
    return res


def timeline_svg(binary, model, extra, flags, out):
    cmd = [binary, model, "--batch-size", "32", "--gpus", "2", "--micro-batches", "4", "--plan-only", "--no-calibrate",
           "--device-spec", "H100", "--out", out, "--overwrite", "--quiet", *extra, *flags]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    with open(os.path.join(out, "partition.html")) as f:
        html = f.read()
    m = re.search(r'<svg id="svg-timeline".*?</svg>', html, re.S)
    return m.group(0) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipetrain", default=os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--only", default="transformer,resnet18")
    ap.add_argument("--stages", default="2,4")
    ap.add_argument("--micro", default="4,8,16")
    ap.add_argument("--svg-dir")
    a = ap.parse_args()
    micro = [int(x) for x in a.micro.split(",")]
    with tempfile.TemporaryDirectory(prefix="pt-schedules-") as work:
        for model in a.only.split(","):
            path, extra = prepare(model, work)
            steps = a.steps if model == "transformer" else max(20, a.steps // 10)
            if a.svg_dir and model == a.only.split(",")[0]:
                for name, flags in SCHEDULES:
                    svg = timeline_svg(a.pipetrain, path, extra, flags, os.path.join(work, "svg"))
                    if svg:
                        with open(os.path.join(a.svg_dir, f"schedule-{name}.svg"), "w") as f:
                            f.write('<?xml version="1.0" encoding="UTF-8"?>\n' +
                                    svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1) + "\n")
            for p in [int(x) for x in a.stages.split(",")]:
                print(f"\n{model}, {p} stages, batch 32, {steps} steps")
                print(f"  {'schedule':<16} {'m':>3} {'samples/s':>10} {'idle meas':>9} {'pred(meas t)':>12} "
                      f"{'pred(plan)':>10} {'formula':>8}  {'idle per stage':<20} peak MB per stage")
                rows = [("1f1b spectrain", 1, ["--schedule", "1f1b", "--weights", "spectrain"])]
                rows += [(n, m, [*f, "--micro-batches", str(m)]) for n, f in SCHEDULES for m in micro]
                for name, m, flags in rows:
                    r = run(a.pipetrain, path, [*extra, "--gpus", str(p), *flags], os.path.join(work, "run"), steps)
                    if "error" in r:
                        print(f"  {name:<16} {m:>3} {r['error']}")
                        continue
                    f = formula(name, p, m) if name != "1f1b spectrain" else 0.0
                    pm = r.get("predicted_measured")
                    pp = r.get("predicted_plan")
                    print(f"  {name:<16} {m:>3} {r['samples_per_s']:>10.0f} {100 * r.get('measured_idle', 0):>8.1f}% "
                          f"{'' if pm is None else f'{100 * pm:.1f}%':>12} {'' if pp is None else f'{100 * pp:.1f}%':>10} "
                          f"{100 * f:>7.1f}%  {' '.join(f'{100 * x:.0f}%' for x in r['idle']):<20} "
                          f"{' '.join(f'{x:.1f}' for x in r['memory_mb'])}", flush=True)


if __name__ == "__main__":
    main()
