#!/usr/bin/python3
"""Predicted vs measured memory per model and stage count.

Run: /usr/bin/python3 tools/bench/memory_bench.py [--bin build/tools/onnx-pipetrain]
     [--models DIR] [--only resnet50 vit bert] [--stages 1 2 4] [--batch-size 2] [--steps 3]

Exports the models of tools/bench/memory_models.py (into --models, default a temporary folder),
then trains each for a few steps on CPU stages (synthetic data) under /usr/bin/time -v and prints,
per model and stage count: every stage's planned memory (partition.json memory_bytes) against its
measured buffers (partition.json measured.memory_bytes), and the process's planned memory (the
stages plus data sets plus baseline: partition.json process_memory.planned_bytes) against its peak
resident set as /usr/bin/time -v reports it, with the ratio measured / planned. A run that fails,
or whose loss is not finite, is reported as FAIL and makes the script exit 1.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_one(binary, model, stages, batch, steps, out):
    cmd = ["/usr/bin/time", "-v", binary, model, "--device", "cpu", "--gpus", str(stages), "--batch-size", str(batch),
           "--steps", str(steps), "--out", out, "--seed", "1"]
    data = os.path.join(os.path.dirname(model), os.path.basename(model)[:-5] + "_data")
    if os.path.isdir(data):
        cmd += ["--data", data]
    p = subprocess.run(cmd, capture_output=True, text=True)
    text = p.stdout + p.stderr
    if p.returncode != 0:
        return None, f"exit {p.returncode}: " + text.strip().splitlines()[-1]
    m = re.search(r"loss ([-\w.]+) -> ([-\w.]+)", text)
    if not m or not all(math.isfinite(float(x)) for x in m.groups()):
        return None, "no finite loss in the output"
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) * 1024
    with open(os.path.join(out, "partition.json")) as f:
        plan = json.load(f)
    return {"plan": plan, "rss": rss}, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
    ap.add_argument("--models", default=None)
    ap.add_argument("--only", nargs="*", default=["resnet50", "vit", "bert"])
    ap.add_argument("--stages", nargs="*", type=int, default=[1, 2, 4])
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="memory_bench_")
    models = a.models or os.path.join(tmp, "models")
    missing = [m for m in a.only if not os.path.exists(os.path.join(models, m + ".onnx")) or
               (m == "bert" and not os.path.isdir(os.path.join(models, "bert_data")))]
    if missing:
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "memory_models.py"), models, "--only"] + missing,
                       check=True, capture_output=True)
    failed = False
    print(f"{'model':9} {'stages':>6} {'stage':>5} {'planned MB':>11} {'measured MB':>12} {'ratio':>6}")
    for name in a.only:
        for n in a.stages:
            out = os.path.join(tmp, f"{name}.g{n}")
            r, err = run_one(a.bin, os.path.join(models, name + ".onnx"), n, a.batch_size, a.steps, out)
            if err:
                print(f"{name:9} {n:>6} FAIL: {err}")
                failed = True
                continue
            for s in r["plan"]["stages"]:
                meas = s.get("measured", {}).get("memory_bytes", -1)
                print(f"{name:9} {n:>6} {s['index']:>5} {s['memory_bytes'] / 1e6:>11.1f} {meas / 1e6:>12.1f} "
                      f"{meas / s['memory_bytes']:>6.2f}")
            pm = r["plan"]["process_memory"]
            print(f"{name:9} {n:>6} {'proc':>5} {pm['planned_bytes'] / 1e6:>11.1f} {r['rss'] / 1e6:>12.1f} "
                  f"{r['rss'] / pm['planned_bytes']:>6.2f}   (data {pm['data_bytes'] / 1e6:.0f} MB, "
                  f"baseline {pm['baseline_bytes'] / 1e6:.0f} MB)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
