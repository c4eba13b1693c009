#!/usr/bin/python3
"""Step time and planned memory of --precision bf16 against fp32 on one CPU stage.
Run: /usr/bin/python3 tools/bench/precision.py [--pipetrain BIN] [--only lenet_bn,resnet18,transformer]
                                               [--steps N] [--warmup W] [--rounds R]
For each model of tools/bench/peer_models.py the torch module is exported as peers.py does; then R
rounds each run fp32 and bf16 back to back (interleaved, so that the load of a shared machine falls
on both alike), each through peers.side_ours (the command line on one stage, 20 validating steps,
W warm-up and N timed steps; the per-step mean from the run's metrics.csv) with --precision added.
Prints per model the median ms per step of each, the ratio bf16/fp32 of the medians, the range of
the per-round ratios, the plan's stage memory and saved-activation bytes (partition.json) of each,
and the load average before and after.

--transformer-task: instead, fp32 against bf16 on a learnable synthetic task (no text data set is
packaged): tools/export_models.py's Transformer encoder classifier (2 layers, d 64, 4 heads,
vocabulary 100, 16 tokens with 0-5 trailing pads, dropout 0.1) learns the number of non-pad tokens
below 50 bucketed into 5 classes at the training set's quintiles; 6,000 training and 1,000
validation sequences (numpy seed 0), 3 epochs, batch 32, AdamW lr 1e-3, --seed 1 for both runs.
Prints the final validation accuracy and loss and the mean training loss of the last 50 steps.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import peers  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipetrain", default=os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
    ap.add_argument("--only", default="lenet_bn,resnet18,transformer")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--transformer-task", action="store_true")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pipetrain-precision-")
    if a.transformer_task:
        return transformer_task(a, work)
    rows = []
    for name in a.only.split(","):
        folder = os.path.join(work, name)
        os.makedirs(folder, exist_ok=True)
        model = os.path.join(folder, name + ".onnx")
        peers.side_export(name, model, folder)
        before = peers.load()
        ms = {"fp32": [], "bf16": []}
        plan = {}
        for _ in range(a.rounds):
            for p in ("fp32", "bf16"):
                res = peers.side_ours(a.pipetrain, model, folder, a.steps, a.warmup,
                                      flags=("--gpus", "1", "--precision", p))
                if "error" in res:
                    sys.exit(f"{name} {p}: {res['error']}")
                ms[p].append(res["mean_ms"])
                with open(os.path.join(folder, "ours.run", "partition.json")) as f:
                    s = json.load(f)["stages"][0]
                plan[p] = (s["memory_bytes"], s["saved_bytes"])
        med = {p: statistics.median(v) for p, v in ms.items()}
        ratios = [b / f for f, b in zip(ms["fp32"], ms["bf16"])]
        row = {"model": name, "fp32_ms": med["fp32"], "bf16_ms": med["bf16"], "ratio": med["bf16"] / med["fp32"],
               "ratio_range": [min(ratios), max(ratios)], "fp32_rounds": ms["fp32"], "bf16_rounds": ms["bf16"],
               "plan_fp32": plan["fp32"], "plan_bf16": plan["bf16"], "load": [before, peers.load()],
               "describe": peers_describe(name)}
        rows.append(row)
        print(f"{name:<12} ({row['describe']}): fp32 {med['fp32']:.2f} ms, bf16 {med['bf16']:.2f} ms, "
              f"bf16/fp32 {row['ratio']:.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f}); plan memory "
              f"{plan['fp32'][0] / 1e6:.2f} -> {plan['bf16'][0] / 1e6:.2f} MB, saved activations "
              f"{plan['fp32'][1] / 1e6:.2f} -> {plan['bf16'][1] / 1e6:.2f} MB; load {before} -> {row['load'][1]}",
              flush=True)
    print(json.dumps(rows))
    return 0


def transformer_task(a, work):
    import csv
    import subprocess
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import export_models as em
    model = os.path.join(work, "transformer.onnx")
    em.export_torch(em.build_module("transformer"), "transformer", 13, "train", model)
    rng = np.random.default_rng(0)

    def sequences(n):
        x = rng.integers(1, em.VOCAB, size=(n, em.SEQ)).astype(np.int64)
        for i in range(n):
            pads = int(rng.integers(0, 6))
            if pads:
                x[i, em.SEQ - pads:] = 0
        return x, ((x > 0) & (x < em.VOCAB // 2)).sum(axis=1)
    xt, ct = sequences(6000)
    xv, cv = sequences(1000)
    edges = np.quantile(ct, [0.2, 0.4, 0.6, 0.8])
    for name, x, c in (("train", xt, ct), ("val", xv, cv)):
        os.makedirs(os.path.join(work, name), exist_ok=True)
        np.save(os.path.join(work, name, "x.npy"), x)
        np.save(os.path.join(work, name, "y.npy"), np.searchsorted(edges, c, side="right").astype(np.int64))
    for p in ("fp32", "bf16"):
        out = os.path.join(work, "run_" + p)
        cmd = [a.pipetrain, model, "--device", "cpu", "--data", os.path.join(work, "train"), "--val-data",
               os.path.join(work, "val"), "--epochs", "3", "--batch-size", "32", "--optimizer", "adamw", "--lr",
               "1e-3", "--seed", "1", "--precision", p, "--out", out, "--overwrite", "--quiet"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=peers.ENV)
        if r.returncode != 0:
            sys.exit(f"{p}: exit {r.returncode}: {(r.stderr or r.stdout)[-500:]}")
        with open(os.path.join(out, "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        val = [row for row in rows if row.get("val_accuracy")]
        last = statistics.mean(float(row["loss"]) for row in rows[-50:])
        print(f"transformer task {p}: {len(rows)} steps, validation accuracy per epoch "
              f"{', '.join('%.2f%%' % (100 * float(v['val_accuracy'])) for v in val)}, final val loss "
              f"{float(val[-1]['val_loss']):.4f}, train loss (last 50 steps) {last:.4f}, "
              f"{float(rows[-1]['samples_per_s']):.0f} samples/s", flush=True)
    print("command: " + " ".join(cmd))
    return 0


def peers_describe(name):
    from peer_models import describe
    return describe(name)


if __name__ == "__main__":
    sys.exit(main())
