#!/usr/bin/python3
"""Data parallelism against pipelining on this machine's CPU cores: the same ONNX
model, batch and data trained by onnx-pipetrain's command line as

  one stage            --gpus 1                      (every core on one executor)
  1 stage x 2 replicas --gpus 1 --replicas 2         (data parallel: each replica half the batch)
  2 stages, 1F1B       --gpus 2                      (SpecTrain)
  2 stages, GPipe M=2  --gpus 2 --schedule gpipe --micro-batches 2
  2 stages x 2 replicas --gpus 2 --replicas 2        (only with --cores 4 or more)

back to back in one run, with per-step times from each run's own metrics.csv (peers.side_ours: its
cumulative samples/s column), so import, planning and export do not count; the ratios are against
one stage.
The models are tools/bench/peer_models.py's (exported as tools/bench/peers.py exports them: opset 13,
training mode). Each run validates first: the mean loss of steps 16-20 below that of steps 1-5.

Run: /usr/bin/python3 tools/bench/replicas.py [--bin build/tools/onnx-pipetrain] [--only NAME ...]
                                              [--steps 60] [--warmup 10] [--rounds 2] [--json FILE]
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import peers  # noqa: E402

CONFIGS = [
    ("one stage", ["--gpus", "1"]),
    ("1 stage x 2 replicas", ["--gpus", "1", "--replicas", "2"]),
    ("2 stages 1F1B", ["--gpus", "2"]),
    ("2 stages GPipe M=2", ["--gpus", "2", "--schedule", "gpipe", "--micro-batches", "2"]),
]
WIDE = [("2 stages x 2 replicas", ["--gpus", "2", "--replicas", "2"])]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
    ap.add_argument("--only", nargs="*", default=["small_cnn", "lenet_bn", "resnet18", "transformer"])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2, help="repeat every configuration; keep each one's fastest")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    configs = CONFIGS + (WIDE if (os.cpu_count() or 1) >= 4 else [])
    print(f"cores {os.cpu_count()}, load average before {os.getloadavg()[0]:.2f}")
    results = {}
    failed = False
    with tempfile.TemporaryDirectory(prefix="pt_bench_replicas_") as tmp:
        for name in a.only:
            folder = os.path.join(tmp, name)
            os.makedirs(folder)
            model = os.path.join(folder, "model.onnx")
            peers.side_export(name, model, folder)
            import numpy as np
            batch = np.load(os.path.join(folder, "x.npy")).shape[0]
            row = {}
            for _ in range(a.rounds):
                for label, flags in configs:
                    r = peers.side_ours(a.bin, model, folder, a.steps, a.warmup, flags)
                    if "error" in r:
                        print(f"FAIL {name} {label}: {r['error']}")
                        failed = True
                        row[label] = r
                        continue
                    if label not in row or r["mean_ms"] < row[label].get("mean_ms", float("inf")):
                        row[label] = r
            from peer_models import describe
            results[name] = {"describe": describe(name), "batch": batch,
                             "configs": row, "load_after": os.getloadavg()[0]}
            base = row.get("one stage", {}).get("mean_ms")
            print(f"\n{name} (batch {batch}), load {os.getloadavg()[0]:.2f}")
            print(f"  {'configuration':24s} {'ms/step':>9s} {'vs one stage':>13s}")
            for label, _ in configs:
                ms = row.get(label, {}).get("mean_ms")
                if ms is None:
                    continue
                print(f"  {label:24s} {ms:9.3f} {base / ms if base else float('nan'):12.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
