#!/usr/bin/python3
"""Per-step time and saved-activation memory of the attention fusion (importer/fuse_attention.cpp):
the command line fused against `--no-fusion attention`, same binary, interleaved.

Run: /usr/bin/python3 tools/bench/attention_fusion.py [--pipetrain BIN] [--only transformer gpt]
                                                       [--batch B] [--steps N] [--warmup W] [--reps R]

Models: tools/bench/peer_models.py's `transformer` (2 post-LN layers x 64, 4 heads, 16 tokens,
nn.MultiheadAttention) and `gpt` (2 pre-LN blocks x 64, 4 heads, 32 tokens, causal masked_fill),
exported as tools/bench/peers.py exports them (opset 13, training mode, no constant folding). Each
side runs as peers.py's side_ours does: one CPU stage on a folder holding the same batch for every
step, SGD momentum 0.9, lr 0.01; the per-step time comes from the run's own metrics.csv (its
cumulative samples/s column), the first 20 steps (validation: the loss falls) and W warm-up steps
left out, the last 3 (timed node by node) too. R repetitions alternate fused and unfused; prints the
min and median ms per step of each and their ratios, and each side's planned saved activations
(partition.json `saved_bytes`: the forward tensors kept for the backward) and measured stage memory
(`measured.memory_bytes`). Losses of the two sides are compared step by step (1e-6 relative).
"""
import argparse
import csv
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
import peers  # noqa: E402
import peer_models  # noqa: E402


def export(name, batch, path):
    import numpy as np
    import torch
    m = peer_models.build(name)
    x, y = peer_models.make_batch(name)
    x, y = x[:batch], y[:batch]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, x, path, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return x.numpy(), y.numpy().astype(np.int64)


def run(exe, model, data, batch, total, out, extra):
    cmd = [exe, model, "--device", "cpu", "--gpus", "1", "--data", data, "--no-shuffle", "--val-split", "0",
           "--batch-size", str(batch), "--steps", str(total), "--lr", str(peers.LR), "--momentum", str(peers.MOMENTUM),
           "--out", out, "--overwrite", "--quiet"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, env=peers.ENV)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[-400:]}")
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "partition.json")) as f:
        stage = json.load(f)["stages"][0]
    return cmd, rows, stage


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipetrain", default=os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
    ap.add_argument("--only", nargs="*", default=["transformer", "gpt"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import numpy as np
    total = peers.VALIDATION_STEPS + a.warmup + a.steps + peers.TIMED_BY_NODE
    with tempfile.TemporaryDirectory(prefix="attn-bench-") as tmp:
        for name in a.only:
            path = os.path.join(tmp, name + ".onnx")
            x, y = export(name, a.batch, path)
            data = os.path.join(tmp, name + ".data")
            os.makedirs(data)
            np.save(os.path.join(data, "x.npy"), np.concatenate([x] * total))
            np.save(os.path.join(data, "y.npy"), np.concatenate([y] * total))
            ms = {"fused": [], "unfused": []}
            info = {}
            for rep in range(a.reps):
                for side, extra in (("fused", []), ("unfused", ["--no-fusion", "attention"])):
                    cmd, rows, stage = run(a.pipetrain, path, data, a.batch, total, os.path.join(tmp, side), extra)
                    losses = [float(r["loss"]) for r in rows]
                    err = peers.validate(losses)
                    if err:
                        sys.exit(f"FAIL: {name} {side}: {err}")
                    elapsed = lambda k: k * a.batch / float(rows[k - 1]["samples_per_s"])
                    s0 = peers.VALIDATION_STEPS + a.warmup
                    ms[side].append(1e3 * (elapsed(s0 + a.steps) - elapsed(s0)) / a.steps)
                    info[side] = (cmd, losses, stage["saved_bytes"], stage["measured"]["memory_bytes"])
            lf, lu = info["fused"][1], info["unfused"][1]
            worst = max(abs(f - u) / max(abs(u), 1e-30) for f, u in zip(lf, lu))
            print(f"{name} ({peer_models.describe(name).split(', batch')[0]}, batch {a.batch}), load "
                  f"{os.getloadavg()[0]:.1f}; {a.reps} x {a.steps} steps:")
            for side in ("fused", "unfused"):
                v = ms[side]
                print(f"  {side:8s} ms/step min {min(v):7.2f} median {statistics.median(v):7.2f}   "
                      f"saved activations {info[side][2] / 2**20:6.2f} MiB, stage measured "
                      f"{info[side][3] / 2**20:6.2f} MiB")
            print(f"  ratio fused/unfused: min {min(ms['fused']) / min(ms['unfused']):.2f}, median "
                  f"{statistics.median(ms['fused']) / statistics.median(ms['unfused']):.2f}; largest relative "
                  f"loss difference over {total} steps {worst:.1e}")
            print(f"  command: {' '.join(info['unfused'][0])}")


if __name__ == "__main__":
    main()
