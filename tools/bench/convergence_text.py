#!/usr/bin/python3
"""Convergence of the asynchronous pipeline weight modes against sequential training on a real text:
the byte-level GPT decoder of docs/data.md (tools/data/byte_lm.py: the zoo's decoder blocks, 64 tokens,
width 64, 2 layers, 4 heads, 137k parameters) on the King James Bible (Debian's bible-kjv, printed with
`bible Gen1:1-Rev22:21`), with the optimizer and schedule of docs/data.md's KJV example, scaled down
to --steps (default 800) so that one run takes well under a minute on a 2-core machine. Not a CI test.

Every run: same data, same initial model, same flags, one --seed; only the pipeline flags differ.
Prints a Markdown table (final validation loss and perplexity on the 5 % held-out split, mean training
loss over the last 10 % of steps, wall seconds).

Two model files:
  blm.onnx         exactly as tools/data/byte_lm.py exports it. torch's ONNX export deduplicates
                   initializers with equal values, so the 5 LayerNorms (all ones / all zeros at
                   initialisation) read ONE weight and ONE bias tensor, shared across pipeline stages
                   (every weight mode runs it since 2026-12-07; 2bw and 2bw-predict refused it before).
  blm_untied.onnx  the same graph and the same initial values, with every LayerNorm given its own copy
                   of the weight and bias (what the PyTorch module has).
--models tied,untied (default both) picks which to run.

  /usr/bin/python3 tools/bench/convergence_text.py --bin /tmp/gpt-bin/onnx-pipetrain --work /tmp/kjvconv
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIGS = [
    ("sequential", "sequential (1 stage)", ["--gpus", "1"]),
    ("stale", "1F1B stale", ["--gpus", "{g}", "--schedule", "1f1b", "--weights", "stale"]),
    ("spectrain", "SpecTrain paper", ["--gpus", "{g}", "--schedule", "1f1b", "--weights", "spectrain",
                                      "--spectrain-staleness", "paper"]),
    ("2bw", "PipeDream-2BW (M=4)", ["--gpus", "{g}", "--schedule", "1f1b", "--weights", "2bw",
                                   "--micro-batches", "4"]),
    ("2bw-predict", "2BW-predict (M=4)", ["--gpus", "{g}", "--schedule", "1f1b", "--weights", "2bw-predict",
                                         "--micro-batches", "4"]),
]


def prepare(work):
    os.makedirs(work, exist_ok=True)
    txt = os.path.join(work, "kjv.txt")
    if not os.path.exists(txt):
        with open(txt, "w") as f:
            subprocess.run(["bible", "Gen1:1-Rev22:21"], stdout=f, check=True)
    tied = os.path.join(work, "blm.onnx")
    if not os.path.exists(tied):
        subprocess.run([sys.executable, os.path.join(REPO, "tools", "data", "byte_lm.py"), tied], check=True)
    untied = os.path.join(work, "blm_untied.onnx")
    if not os.path.exists(untied):
        untie(tied, untied)
    return txt, {"tied": tied, "untied": untied}


def untie(src, dst):
    """Give every node that reads an initializer also read by other nodes its own copy (same values)."""
    import onnx
    m = onnx.load(src)
    inits = {i.name: i for i in m.graph.initializer}
    seen = {}
    for node in m.graph.node:
        for k, name in enumerate(node.input):
            if name not in inits:
                continue
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                copy = onnx.TensorProto()
                copy.CopyFrom(inits[name])
                copy.name = f"{name}.copy{seen[name] - 1}"
                m.graph.initializer.append(copy)
                node.input[k] = copy.name
    onnx.checker.check_model(m)
    onnx.save(m, dst)


def summarise(metrics):
    rows = list(csv.DictReader(open(metrics)))
    losses = [float(r["loss"]) for r in rows if r["loss"]]
    tail = losses[len(losses) - max(1, len(losses) // 10):]
    val = [(float(r["val_loss"]), float(r["val_accuracy"])) for r in rows if r.get("val_loss")]
    return len(rows), sum(tail) / len(tail), val[-1] if val else (float("nan"), float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "tools", "onnx-pipetrain"))
    ap.add_argument("--work", default="/tmp/kjvconv")
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--models", default="tied,untied")
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS))
    a = ap.parse_args()
    txt, models = prepare(a.work)
    common = ["--data", txt, "--tokenizer", "bytes", "--val-split", "0.05", "--eval-every", str(a.steps // 4),
              "--steps", str(a.steps), "--batch-size", str(a.batch_size), "--optimizer", "adamw", "--lr", "0.003",
              "--lr-schedule", "cosine", "--warmup-steps", "50", "--seed", str(a.seed), "--overwrite"]
    wanted = a.configs.split(",")
    results = []
    for mkey in a.models.split(","):
        for key, label, flags in CONFIGS:
            if key not in wanted:
                continue
            out = os.path.join(a.work, mkey, key)
            cmd = [a.bin, models[mkey]] + [f.format(g=a.gpus) for f in flags] + common + ["--out", out]
            print("+", " ".join(cmd), flush=True)
            t0 = time.time()
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            wall = time.time() - t0
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "log.txt"), "w") as f:
                f.write(p.stdout)
            if p.returncode != 0:
                err = next((l for l in p.stdout.splitlines() if "error" in l), p.stdout.strip()[-200:])
                print(f"  exit {p.returncode}: {err}", flush=True)
                results.append((mkey, label, None, wall, f"exit {p.returncode}: {err}"))
                continue
            n, tail, (vl, va) = summarise(os.path.join(out, "metrics.csv"))
            print(f"  {n} steps, train(last 10%) {tail:.4f}, val {vl:.4f}, {wall:.0f} s", flush=True)
            results.append((mkey, label, (tail, vl, va), wall, ""))
    print()
    print("| model | config | train loss, last 10% of steps | final val loss | val perplexity "
          "| next-byte accuracy | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for mkey, label, r, wall, err in results:
        if r is None:
            print(f"| {mkey} | {label} | failed: {err} | | | | {wall:.0f} |")
        else:
            tail, vl, va = r
            print(f"| {mkey} | {label} | {tail:.4f} | {vl:.4f} | {math.exp(vl):.3f} | {100 * va:.2f}% | {wall:.0f} |")


if __name__ == "__main__":
    main()
