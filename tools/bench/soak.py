#!/usr/bin/env python3
"""Soak benchmark: a long pipelined run must stay flat.

Trains the bundled digits MLP for --steps steps (default 20,000) on 4 CPU stages (1F1B SpecTrain),
with a checkpoint every 500 steps and a validation every 1,000, sampling the process's resident
memory (VmRSS) every 0.2 s. Validates before it measures: the run must exit 0 with a finite loss
below the first, metrics.csv must hold every step, and the newest checkpoint must be no larger than
the first (+64 bytes). Then it prints the resident memory at the end of warm-up (the first 10 % of
the steps) and its maximum after, the growth in percent (target < 1 %), and the training
throughput (samples/s) of the first and the last fifth of the run from metrics.csv.

Usage: tools/bench/soak.py BIN [--steps N] [--out DIR] [--gpus 4] [--batch-size 32]. Exit 1: a FAIL.
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="pipetrain-soak-")
    cmd = [a.bin, os.path.join(ROOT, "models", "digits_mlp.onnx"), "--data", os.path.join(ROOT, "models", "digits", "train"),
           "--val-data", os.path.join(ROOT, "models", "digits", "val"), "--out", out, "--overwrite",
           "--gpus", str(a.gpus), "--device", "cpu", "--batch-size", str(a.batch_size), "--steps", str(a.steps),
           "--checkpoint-every", "500", "--eval-every", "1000", "--lr", "0.05", "--quiet", "--seed", "1"]
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = []  # (seconds, rss KiB, rows of metrics.csv.partial so far)
    partial = os.path.join(out, "metrics.csv.partial")
    while p.poll() is None:
        r = rss_kib(p.pid)
        try:
            size = os.path.getsize(partial)
        except OSError:
            size = 0
        if r is not None:
            samples.append((time.time() - t0, r, size))
        time.sleep(0.2)
    so, se = p.communicate()
    wall = time.time() - t0
    if p.returncode != 0:
        print(f"FAIL: exit {p.returncode}\n{se}")
        return 1
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    if len(rows) != a.steps:
        print(f"FAIL: metrics.csv holds {len(rows)} rows, not {a.steps}")
        return 1
    first, last = float(rows[0]["loss"]), float(rows[-1]["loss"])
    if not (math.isfinite(last) and last < first):
        print(f"FAIL: loss {first} -> {last}")
        return 1
    ck = os.path.join(out, "checkpoints")
    sizes = sorted((int(n[5:-5]), os.path.getsize(os.path.join(ck, n))) for n in os.listdir(ck) if n.endswith(".ckpt"))
    # The run writes 500, 1000, ...; it keeps the newest few: compare the oldest kept with the newest.
    if sizes[-1][1] > sizes[0][1] + 64:
        print(f"FAIL: checkpoint at step {sizes[-1][0]} is {sizes[-1][1]} bytes, at {sizes[0][0]} {sizes[0][1]}")
        return 1
    # Warm-up: until metrics.csv.partial holds 10 % of the rows (its size grows by one row a step).
    final_size = max(s[2] for s in samples) if samples else 0
    warm = [s for s in samples if s[2] >= 0.1 * final_size]
    if len(warm) < 5:
        print("FAIL: too few memory samples after warm-up (the run was too short to measure)")
        return 1
    base = warm[0][1]
    peak = max(s[1] for s in warm)
    growth = 100.0 * (peak - base) / base
    fifth = len(rows) // 5

    # samples_per_s is the run's mean so far: the rate of a window is (steps x batch) / its duration.
    def window_rate(lo, hi):
        t_lo = lo * a.batch_size / float(rows[lo - 1]["samples_per_s"])
        t_hi = hi * a.batch_size / float(rows[hi - 1]["samples_per_s"])
        return (hi - lo) * a.batch_size / (t_hi - t_lo)

    early, late = window_rate(fifth // 2, fifth), window_rate(len(rows) - fifth, len(rows))
    print(f"soak: {a.steps} steps on {a.gpus} stages (batch {a.batch_size}), checkpoints every 500, validation every "
          f"1000: {wall:.1f} s, loss {first:.4f} -> {last:.4f}, final val_accuracy "
          f"{rows[-1]['val_accuracy'] or '-'}")
    print(f"resident memory: {base / 1024:.1f} MiB after warm-up, peak after {peak / 1024:.1f} MiB: growth {growth:.2f} %"
          f" ({len(samples)} samples)")
    print(f"throughput: {early:.0f} samples/s early (steps {fifth // 2}-{fifth}), {late:.0f} samples/s late "
          f"(last {fifth} steps): ratio late/early {late / early:.2f}")
    print(f"checkpoint size: {sizes[0][1]} bytes at step {sizes[0][0]}, {sizes[-1][1]} bytes at step {sizes[-1][0]}")
    print(f"metrics.csv: {os.path.getsize(os.path.join(out, 'metrics.csv'))} bytes")
    if growth >= 1.0:
        print("FAIL: resident memory grew by 1 % or more after warm-up")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
