#!/usr/bin/python3
# Compares an onnx-pipetrain training run with torch_mlp_oracle.py's expectations: the trained
# model's initializers vs OUTDIR/expected_weights.npz and metrics.csv's per-step loss vs
# OUTDIR/expected_losses.npy.  Run: /usr/bin/python3 THIS OUTDIR TRAINED_ONNX METRICS_CSV
# Metric per tensor: max|a-b| / (max|b| + 1e-6) <= 1e-4.  Exit 0 pass, 1 mismatch or bad input.
import csv
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

TOL = 1e-4


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-6)) if b.size else 0.0


def read_losses(path):
    """{step: loss} from metrics.csv, parsed by the header's 'step' and 'loss' columns."""
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        if rows.fieldnames is None or "step" not in rows.fieldnames \
                or "loss" not in rows.fieldnames:
            raise ValueError(f"{path}: header {rows.fieldnames} lacks 'step' and 'loss'")
        out = {}
        for r in rows:
            step = int(r["step"])
            if step in out:
                raise ValueError(f"{path}: step {step} appears twice")
            out[step] = float(r["loss"])
    return out


def main():
    if len(sys.argv) != 4:
        print(f"usage: {sys.argv[0]} OUTDIR TRAINED_ONNX METRICS_CSV", file=sys.stderr)
        return 1
    outdir, trained_path, metrics_path = sys.argv[1:]
    failures = []

    expected_w = dict(np.load(os.path.join(outdir, "expected_weights.npz")))
    expected_l = np.load(os.path.join(outdir, "expected_losses.npy"))
    model = onnx.load(trained_path)   # loads external data from the model's folder if any
    got_w = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}

    print(f"weights ({trained_path} vs expected_weights.npz), tolerance {TOL:g}:")
    for name in sorted(expected_w):
        b = expected_w[name]
        if name not in got_w:
            failures.append(f"initializer '{name}' missing from {trained_path}")
            print(f"  {name:24s} MISSING")
            continue
        a = got_w[name]
        if a.shape != b.shape:
            failures.append(f"initializer '{name}' shape {list(a.shape)} != {list(b.shape)}")
            print(f"  {name:24s} SHAPE {list(a.shape)} != {list(b.shape)}")
            continue
        e = rel_err(a, b)
        ok = np.isfinite(a).all() and e <= TOL
        print(f"  {name:24s} {list(b.shape)!s:12s} rel err {e:.3e} {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"initializer '{name}' rel err {e:.3e} > {TOL:g}")

    try:
        losses = read_losses(metrics_path)
    except (OSError, ValueError) as ex:
        failures.append(f"cannot read losses: {ex}")
        losses = {}
    if losses:
        steps = list(range(1, len(expected_l) + 1))
        missing = [s for s in steps if s not in losses]
        if missing:
            failures.append(f"{metrics_path}: no row for steps {missing}")
        have = [s for s in steps if s in losses]
        a = np.array([losses[s] for s in have])
        b = expected_l[np.array(have, dtype=int) - 1] if have else np.zeros(0)
        per_step = [rel_err(x, y) for x, y in zip(a, b)]
        worst = int(np.argmax(per_step)) if per_step else -1
        print(f"losses ({metrics_path}, {len(have)}/{len(steps)} steps): worst rel err "
              + (f"{per_step[worst]:.3e} at step {have[worst]} "
                 f"(got {a[worst]:.7f}, expected {b[worst]:.7f})" if per_step else "n/a"))
        bad = [(s, e) for s, e in zip(have, per_step) if not (e <= TOL)]
        for s, e in bad:
            failures.append(f"step {s} loss {losses[s]:.7f} vs expected {expected_l[s - 1]:.7f}"
                            f" (rel err {e:.3e})")
        extra = sorted(set(losses) - set(steps))
        if extra:
            print(f"  note: metrics.csv has {len(extra)} steps beyond {len(steps)}, not checked")

    if failures:
        print(f"FAIL: {len(failures)} mismatch(es) against the PyTorch oracle:")
        for f in failures:
            print(f"  - {f}")
        return 1
    print("PASS: trained weights and per-step losses match the PyTorch oracle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
