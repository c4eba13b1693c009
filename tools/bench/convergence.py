#!/usr/bin/python3
"""Convergence benchmark: LeNet-5 (no BatchNorm, Dropout(0)) on Fashion-MNIST, trained by
onnx-pipetrain with the same hyper-parameters as sequential, GPipe, 1F1B stale / stash / SpecTrain
(paper and exact staleness) on 4 CPU stages, at one or more learning rates; and SpecTrain with
AdamW (--optimizer adamw, at --adamw-lr) on 4 stages.

Writes docs/convergence.svg (loss curves and validation accuracy, one row per learning rate) and prints
the Markdown result tables for docs/convergence.md. Not a CI test.

Seeds and optimizers (issue #29): --seeds 1,2,3 runs every config once per seed (the seed sets the CLI's
--seed, i.e. the data order, and the model initialisation: the LeNet is exported with
torch.manual_seed(seed)); --optimizers sgd,adamw runs every config that has no --optimizer of its own
with SGD momentum (sgd-paper, at each --lrs rate) and with AdamW (--optimizer adamw --weight-decay 0.01,
at --adamw-lr). With more than one seed or with adamw in --optimizers, the runs go to
WORK/<opt>-lr<rate>/<config>/seed<s>, the tables give the mean, sample std and min-max of the final
validation accuracy over the seeds plus every seed's value, and the figure is --seeds-svg
(docs/convergence-seeds.svg); otherwise (the defaults) everything is as before.

  /usr/bin/python3 tools/bench/convergence.py --lrs 0.5 --optimizers sgd,adamw --seeds 1,2,3 \
      --configs sequential,stale,stash,spectrain-paper,spectrain-exact,2bw

  /usr/bin/python3 tools/bench/convergence.py                  # everything, default settings
  /usr/bin/python3 tools/bench/convergence.py --lrs 0.1         # one learning rate
  /usr/bin/python3 tools/bench/convergence.py --report-only     # redraw from finished runs

Data: the Debian package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist). With
--train-subset/--val-subset > 0 the first images of the IDX files are written as x.npy/y.npy folders
(the CLI has no subset flag); with 0 (the default) the IDX files are passed to --data as they are.
Needs /usr/bin/python3 with Debian's torch (model export) and numpy.
"""
import argparse
import functools
import csv
import gzip
import html
import json
import os
import re
import subprocess
import sys
import time
import warnings

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/datasets/fashion-mnist"

# (key, label, colour, extra CLI flags); all share --batch-size/--lr/--momentum/--seed/--epochs.
CONFIGS = [
    ("sequential", "sequential (1 stage)", "#000000", ["--gpus", "1"]),
    # --precision bf16 (bfloat16 GEMM/convolution operands, float32 masters): against sequential.
    ("sequential-bf16", "sequential bf16 (1 stage)", "#8c564b", ["--gpus", "1", "--precision", "bf16"]),
    ("gpipe", "GPipe (M=4)", "#7f7f7f", ["--gpus", "4", "--schedule", "gpipe", "--micro-batches", "4"]),
    ("stale", "1F1B stale", "#d62728", ["--gpus", "4", "--schedule", "1f1b", "--weights", "stale"]),
    ("stash", "1F1B stash", "#ff7f0e", ["--gpus", "4", "--schedule", "1f1b", "--weights", "stash"]),
    ("spectrain-paper", "SpecTrain paper", "#1f77b4",
     ["--gpus", "4", "--schedule", "1f1b", "--weights", "spectrain", "--spectrain-staleness", "paper"]),
    ("spectrain-exact", "SpecTrain exact", "#2ca02c",
     ["--gpus", "4", "--schedule", "1f1b", "--weights", "spectrain", "--spectrain-staleness", "exact"]),
    # PipeDream-2BW: asynchronous 1F1B over 4 micro-batches of 16 images, one update per 64-image
    # mini-batch (the same mini-batch as the other configs), every pass of mini-batch i on the weights
    # after update i-1 (two versions per stage).
    ("2bw", "PipeDream-2BW (M=4)", "#e377c2",
     ["--gpus", "4", "--schedule", "1f1b", "--weights", "2bw", "--micro-batches", "4"]),
    # AdamW with SpecTrain's prediction along Adam's own step (runtime/exec/optimizer.h); it runs at
    # --adamw-lr instead of the row's SGD rate (Adam's scale-free steps want a far smaller rate),
    # without --momentum (refused for adamw).
    ("spectrain-adamw", "SpecTrain AdamW", "#9467bd",
     ["--gpus", "4", "--schedule", "1f1b", "--weights", "spectrain", "--spectrain-staleness", "paper",
      "--optimizer", "adamw", "--weight-decay", "0.01"]),
]


# ------------------------------------------------------------------------------------------ inputs
def read_idx(path):
    b = gzip.open(path, "rb").read() if path.endswith(".gz") else open(path, "rb").read()
    rank = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * rank).reshape(dims)


def data_arg(work, prefix, n):
    """The --data value: the IDX prefix itself, or an x.npy/y.npy folder with the first n records."""
    if n <= 0:
        return os.path.join(DATA, prefix)
    d = os.path.join(work, "data", "%s-%d" % (prefix, n))
    if not os.path.exists(os.path.join(d, "y.npy")):
        os.makedirs(d, exist_ok=True)
        x = read_idx(os.path.join(DATA, prefix + "-images-idx3-ubyte.gz"))[:n]
        y = read_idx(os.path.join(DATA, prefix + "-labels-idx1-ubyte.gz"))[:n]
        # Same scaling as the CLI's IDX reader: uint8 / 255.
        np.save(os.path.join(d, "x.npy"), (x.astype(np.float32) * np.float32(1.0 / 255.0)).reshape(n, 1, 28, 28))
        np.save(os.path.join(d, "y.npy"), y.astype(np.int64))
    return d


def export_lenet(path, seed):
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    m = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Dropout(0.0),
        nn.Linear(120, 84), nn.ReLU(), nn.Dropout(0.0), nn.Linear(84, 10))
    m.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, torch.randn(2, 1, 28, 28), path, opset_version=13,
                          input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


# -------------------------------------------------------------------------------------------- runs
def run_dir(work, lr, key, opt=None, seed=None):
    """Legacy (one seed, SGD axis only): WORK/lr<lr>/<key>. Seeds/optimizer axis: WORK/<opt>-lr<lr>/<key>/seed<s>."""
    if opt is None:
        return os.path.join(work, "lr%g" % lr, key)
    return os.path.join(work, "%s-lr%g" % (opt, lr), key, "seed%d" % seed)


# The optimizer axis: flags added to a config that has no --optimizer of its own.
OPTIMIZERS = {"sgd": [], "adamw": ["--optimizer", "adamw", "--weight-decay", "0.01"]}


def command(args, model, train, val, lr, key, flags, seed=None, out=None):
    adam = "--optimizer" in flags and flags[flags.index("--optimizer") + 1] in ("adam", "adamw")  # at --adamw-lr
    rate = ["--lr", "%g" % (args.adamw_lr if adam else lr)] + ([] if adam else ["--momentum", "%g" % args.momentum])
    return [args.bin, model] + flags + [
        "--data", train, "--val-data", val, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
        *rate, "--seed", str(args.seed if seed is None else seed),
        "--out", out or run_dir(args.work, lr, key), "--overwrite"] + args.extra.split()


def run_one(cmd, out):
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.time() - t0
    with open(os.path.join(out, "stdout.txt"), "w") as f:
        f.write(p.stdout)
    info = {"rc": p.returncode, "wall_s": wall, "cmd": cmd}
    m = re.search(r"done: (\d+) steps in ([\d.]+) s \(([\d.]+) samples/s\)", p.stdout)
    if m:
        info.update(steps=int(m.group(1)), train_s=float(m.group(2)), samples_per_s=float(m.group(3)))
    m = re.search(r"validation: loss ([\d.eE+-]+|nan|inf), accuracy ([\d.]+)%", p.stdout)
    if m:
        info.update(val_loss=float(m.group(1)), val_acc=float(m.group(2)))
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(info, f, indent=1)
    return info, p.stdout


def read_metrics(path):
    steps, loss, epochs = [], [], []
    if not os.path.exists(path):
        return steps, loss, epochs
    with open(path) as f:
        for r in csv.DictReader(f):
            steps.append(int(r["step"]))
            loss.append(float(r["loss"]))
            if r["val_accuracy"]:
                epochs.append((int(r["epoch"]), float(r["val_loss"]), float(r["val_accuracy"])))
    return steps, loss, epochs


def smooth(y, w):
    """Trailing moving average over w steps (shorter at the start)."""
    y = np.asarray(y, dtype=np.float64)
    y = np.where(np.isfinite(y), y, np.nan)
    c = np.nancumsum(y)
    out = np.empty_like(y)
    for i in range(len(y)):
        lo = max(0, i - w + 1)
        out[i] = (c[i] - (c[lo - 1] if lo > 0 else 0.0)) / (i - lo + 1)
    return out


# --------------------------------------------------------------------------------------------- SVG
# One panel's frame, grid, ticks and labels into the SVG lines `o` (panels pw x ph): its x and y
# scales.
def svg_axes(o, pw, ph, x0, y0, xmin, xmax, ymin, ymax, xlabel, ylabel, title, yticks, xticks, logy=False):
    def X(v):
        return x0 + (v - xmin) / (xmax - xmin) * pw

    def Y(v):
        if logy:
            return y0 + ph - (np.log(v) - np.log(ymin)) / (np.log(ymax) - np.log(ymin)) * ph
        return y0 + ph - (v - ymin) / (ymax - ymin) * ph
    o.append('<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>' % (x0, y0 - 10, html.escape(title)))
    o.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (x0, y0, pw, ph))
    for t in yticks:
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (x0, Y(t), x0 + pw, Y(t)))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (x0 - 5, Y(t) + 4, ("%g" % t)))
    for t in xticks:
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (X(t), y0, X(t), y0 + ph))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (X(t), y0 + ph + 15, ("%g" % t)))
    o.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x0 + pw / 2, y0 + ph + 32, html.escape(xlabel)))
    o.append('<text transform="translate(%d,%.1f) rotate(-90)" text-anchor="middle">%s</text>'
             % (x0 - 45, y0 + ph / 2, html.escape(ylabel)))
    return X, Y



def clip(v, lo, hi):
    return min(max(v, lo), hi)


def svg_plot(results, lrs, args, path):
    """results[lr][key] = (steps, loss, epochs). One row per lr: smoothed training loss | val accuracy."""
    W, rowh, top, left_m = 1250, 330, 70, 70
    pw, ph = 440, 240
    H = top + rowh * len(lrs) + 40
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
         'font-family="DejaVu Sans, Arial, sans-serif" font-size="12">' % (W, H, W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="24" font-size="17" font-weight="bold">Convergence: LeNet-5 on Fashion-MNIST, 4 CPU stages, '
         'batch %d, momentum %g, seed %d, %d epochs</text>' % (left_m, args.batch_size, args.momentum, args.seed, args.epochs)]
    # legend
    lx = left_m
    for key, label, colour, _ in CONFIGS:
        o.append('<line x1="%d" y1="46" x2="%d" y2="46" stroke="%s" stroke-width="3"%s/>'
                 % (lx, lx + 26, colour, ' stroke-dasharray="6,3"' if key == "gpipe" else ""))
        o.append('<text x="%d" y="50">%s</text>' % (lx + 32, html.escape(label)))
        lx += 40 + 8 * len(label)

    axes = functools.partial(svg_axes, o, pw, ph)

    for row, lr in enumerate(lrs):
        y0 = top + 30 + row * rowh
        res = results[lr]
        nsteps = max([len(r[0]) for r in res.values()] + [1])
        # --- training loss
        lmin, lmax = 0.2, 3.0
        xstep = 500 if nsteps > 1500 else 100
        xt = list(range(0, nsteps + 1, xstep))
        X, Y = axes(left_m, y0, 0, nsteps, lmin, lmax, "step (mini-batch)",
                    "training loss, %d-step mean (log scale)" % args.smooth,
                    "lr %g: training loss" % lr, [0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3], xt, logy=True)
        for key, label, colour, _ in CONFIGS:
            if key not in res or not res[key][0]:
                continue
            s, l, _ = res[key]
            sm = smooth(l, args.smooth)
            stride = max(1, len(s) // 600)
            pts = " ".join("%.1f,%.1f" % (X(s[i]), Y(clip(sm[i], lmin, lmax))) for i in range(0, len(s), stride)
                           if np.isfinite(sm[i]))
            o.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-opacity="0.9"%s/>'
                     % (pts, colour, ' stroke-dasharray="6,3"' if key == "gpipe" else ""))
        # --- validation accuracy
        x1 = left_m + pw + 110
        accs = [a for r in res.values() for (_, _, a) in r[2]]
        amin = 0.0
        if accs and min(accs) > 0.5:
            amin = np.floor(min(accs) * 20) / 20 - 0.05
        amax = 1.0 if not accs else min(1.0, np.ceil(max(accs) * 20) / 20 + 0.02)
        yt = [round(v, 2) for v in np.arange(amin, amax + 1e-9, 0.05 if amax - amin <= 0.4 else 0.1)]
        X, Y = axes(x1, y0, 0.8, args.epochs + 0.2, amin, amax, "epoch", "validation accuracy",
                    "lr %g: validation accuracy after each epoch" % lr, yt, list(range(1, args.epochs + 1)))
        for key, label, colour, _ in CONFIGS:
            if key not in res or not res[key][2]:
                continue
            pts = [(X(e), Y(clip(a, amin, amax))) for (e, _, a) in res[key][2]]
            o.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.8"%s/>'
                     % (" ".join("%.1f,%.1f" % p for p in pts), colour,
                        ' stroke-dasharray="6,3"' if key == "gpipe" else ""))
            for p in pts:
                o.append('<circle cx="%.1f" cy="%.1f" r="3.2" fill="%s"/>' % (p[0], p[1], colour))
        # final accuracies as text, right of the panel
        tx = x1 + pw + 10
        o.append('<text x="%d" y="%d" font-weight="bold">final accuracy</text>' % (tx, y0 + 10))
        order = sorted([k for k, *_ in CONFIGS if k in res and res[k][2]], key=lambda k: -res[k][2][-1][2])
        for i, key in enumerate(order):
            label, colour = [(lb, c) for k, lb, c, _ in CONFIGS if k == key][0]
            o.append('<text x="%d" y="%d" fill="%s">%.2f%% %s</text>' % (tx, y0 + 30 + 17 * i, colour,
                                                                      100 * res[key][2][-1][2], html.escape(label.split(" (")[0])))
    o.append('<text x="%d" y="%d" font-size="11" fill="#555">tools/bench/convergence.py; training loss clipped to [%g, %g]; '
             'validation on %s Fashion-MNIST test images</text>'
             % (left_m, H - 12, lmin, lmax, "all 10,000" if args.val_subset <= 0 else "the first %d" % args.val_subset))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


# ------------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build-conv", "tools", "onnx-pipetrain"))
    ap.add_argument("--work", default="/tmp/pipetrain-convergence", help="model, data subsets and run folders")
    ap.add_argument("--lrs", default="0.1,0.5", help="comma-separated learning rates")
    ap.add_argument("--configs", default=",".join(k for k, *_ in CONFIGS))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--adamw-lr", type=float, default=1e-3, help="the rate of the AdamW runs (every row)")
    ap.add_argument("--seed", type=int, default=1, help="data order and model initialisation")
    ap.add_argument("--train-subset", type=int, default=0, help="first N training images (0: all 60,000)")
    ap.add_argument("--val-subset", type=int, default=0, help="first N t10k images (0: all 10,000)")
    ap.add_argument("--smooth", type=int, default=50, help="moving-average window of the loss curves")
    ap.add_argument("--svg", default=os.path.join(REPO, "docs", "convergence.svg"))
    ap.add_argument("--extra", default="", help="flags added to every run, e.g. '--lr-schedule poly --warmup-steps 100'")
    ap.add_argument("--report-only", action="store_true", help="no training: redraw and tabulate existing runs")
    ap.add_argument("--seeds", default="", help="comma-separated seeds, one run of every config each (default: --seed)")
    ap.add_argument("--optimizers", default="sgd",
                    help="comma-separated: sgd (momentum, at each --lrs rate), adamw (--weight-decay 0.01, at --adamw-lr)")
    ap.add_argument("--seeds-svg", default=os.path.join(REPO, "docs", "convergence-seeds.svg"),
                    help="the figure of the seeds/optimizer mode")
    args = ap.parse_args()
    lrs = [float(v) for v in args.lrs.split(",")]
    keys = args.configs.split(",")
    os.makedirs(args.work, exist_ok=True)
    seeds = [int(v) for v in args.seeds.split(",")] if args.seeds else [args.seed]
    opts = args.optimizers.split(",")
    for o in opts:
        if o not in OPTIMIZERS:
            sys.exit("unknown optimizer %r (sgd, adamw)" % o)
    for k in keys:
        if k not in [c[0] for c in CONFIGS]:
            sys.exit("unknown config %r" % k)
    if len(seeds) > 1 or opts != ["sgd"]:
        return main_seeds(args, lrs, keys, seeds, opts)
    model = os.path.join(args.work, "lenet5_seed%d.onnx" % args.seed)

    if not args.report_only:
        if not os.path.exists(args.bin):
            sys.exit("no binary at %s: build it (cmake --build ... --target onnx-pipetrain) or pass --bin" % args.bin)
        if not os.path.exists(model):
            export_lenet(model, args.seed)
        train = data_arg(args.work, "train", args.train_subset)
        val = data_arg(args.work, "t10k", args.val_subset)
        t_all = time.time()
        for lr in lrs:
            for key, label, colour, flags in CONFIGS:
                if key not in keys:
                    continue
                cmd = command(args, model, train, val, lr, key, flags)
                print("+ " + " ".join(cmd), flush=True)
                info, out = run_one(cmd, run_dir(args.work, lr, key))
                if info["rc"] != 0:
                    print("  FAILED rc=%d; last output:\n%s" % (info["rc"], out[-2000:]), flush=True)
                else:
                    print("  %.1f s, val acc %s%%, val loss %s, %s samples/s" % (
                        info["wall_s"], info.get("val_acc"), info.get("val_loss"), info.get("samples_per_s")), flush=True)
        print("all runs: %.1f s" % (time.time() - t_all))

    results, table = {}, {}
    for lr in lrs:
        results[lr], table[lr] = {}, {}
        for key, *_ in CONFIGS:
            d = run_dir(args.work, lr, key)
            if not os.path.isdir(d):
                continue
            results[lr][key] = read_metrics(os.path.join(d, "metrics.csv"))
            rj = os.path.join(d, "result.json")
            table[lr][key] = json.load(open(rj)) if os.path.exists(rj) else {}
    svg_plot(results, lrs, args, args.svg)
    print("wrote " + args.svg)

    for lr in lrs:
        print("\n### lr %g\n" % lr)
        ep_hdr = " | ".join("val acc ep %d" % e for e in range(1, args.epochs + 1))
        print("| config | lr | final val accuracy | final val loss | %s | train loss (last %d steps) | samples/s | wall s |"
              % (ep_hdr, args.smooth))
        print("|---|---|---|---|%s---|---|---|" % ("---|" * args.epochs))
        for key, label, _, flags in CONFIGS:
            if key not in table[lr]:
                continue
            rate = args.adamw_lr if "adamw" in flags else lr  # the rate the run used
            t, (s, l, ep) = table[lr][key], results[lr][key]
            accs = {e: a for (e, _, a) in ep}
            last = np.mean(l[-args.smooth:]) if l else float("nan")
            fa = "%.2f%%" % t["val_acc"] if "val_acc" in t else "- (rc %s)" % t.get("rc")
            fl = "%.4f" % t["val_loss"] if "val_loss" in t else "-"
            print("| %s | %g | %s | %s | %s | %.4f | %s | %.0f |" % (
                label, rate, fa, fl, " | ".join("%.2f%%" % (100 * accs[e]) if e in accs else "-"
                                               for e in range(1, args.epochs + 1)),
                last, "%.0f" % t["samples_per_s"] if "samples_per_s" in t else "-", t.get("wall_s", float("nan"))))


# ---------------------------------------------------------------------------- seeds x optimizers
def groups(args, lrs, opts):
    """(optimizer, rate) pairs: SGD at every --lrs rate, AdamW at --adamw-lr."""
    return [(o, r) for o in opts for r in (lrs if o == "sgd" else [args.adamw_lr])]


def variants(keys, opt):
    """Configs of this optimizer: with adamw only those without an --optimizer of their own."""
    return [(k, lb, c, f + OPTIMIZERS[opt]) for k, lb, c, f in CONFIGS
            if k in keys and (opt == "sgd" or "--optimizer" not in f)]


def acc_of(info):
    """Final validation accuracy in %, or None; a run that exited 3 (diverged: non-finite) counts as None."""
    return info.get("val_acc")


def svg_seeds(data, grps, args, seeds, path):
    """data[(opt, rate)][key][seed] = (steps, loss, epochs). One row per (opt, rate): mean smoothed training
    loss over the seeds | validation accuracy per epoch, mean line with a min-max bar."""
    W, rowh, top, left_m = 1350, 330, 70, 70
    pw, ph = 440, 240
    H = top + rowh * len(grps) + 40
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
         'font-family="DejaVu Sans, Arial, sans-serif" font-size="12">' % (W, H, W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="24" font-size="17" font-weight="bold">Convergence: LeNet-5 on Fashion-MNIST, 4 CPU stages, '
         'batch %d, seeds %s, %d epochs (mean over seeds)</text>'
         % (left_m, args.batch_size, ",".join(map(str, seeds)), args.epochs)]
    present = [c for c in CONFIGS if any(c[0] in data[g] for g in grps)]
    lx = left_m
    for key, label, colour, _ in present:
        o.append('<line x1="%d" y1="46" x2="%d" y2="46" stroke="%s" stroke-width="3"/>' % (lx, lx + 26, colour))
        o.append('<text x="%d" y="50">%s</text>' % (lx + 32, html.escape(label)))
        lx += 40 + 8 * len(label)

    axes = functools.partial(svg_axes, o, pw, ph)

    lmin, lmax = 0.2, 3.0
    for row, g in enumerate(grps):
        opt, rate = g
        y0 = top + 30 + row * rowh
        res = data[g]
        nsteps = max([len(r[0]) for runs in res.values() for r in runs.values()] + [1])
        xt = list(range(0, nsteps + 1, 500 if nsteps > 1500 else 100))
        X, Y = axes(left_m, y0, 0, nsteps, lmin, lmax, "step (mini-batch)",
                    "training loss, %d-step mean (log scale)" % args.smooth,
                    "%s lr %g: training loss, mean of %d seeds" % (opt, rate, len(seeds)),
                    [0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3], xt, logy=True)
        for key, label, colour, _ in present:
            curves = [smooth(r[1], args.smooth) for r in res.get(key, {}).values() if r[1]]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            sm = np.nanmean(np.stack([c[:n] for c in curves]), axis=0)
            stride = max(1, n // 600)
            pts = " ".join("%.1f,%.1f" % (X(i + 1), Y(clip(sm[i], lmin, lmax))) for i in range(0, n, stride)
                           if np.isfinite(sm[i]))
            o.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-opacity="0.9"/>'
                     % (pts, colour))
        x1 = left_m + pw + 110
        accs = [a for runs in res.values() for r in runs.values() for (_, _, a) in r[2]]
        amin = 0.0
        if accs and min(accs) > 0.5:
            amin = np.floor(min(accs) * 20) / 20 - 0.05
        amax = 1.0 if not accs else min(1.0, np.ceil(max(accs) * 20) / 20 + 0.02)
        yt = [round(v, 2) for v in np.arange(amin, amax + 1e-9, 0.05 if amax - amin <= 0.4 else 0.1)]
        X, Y = axes(x1, y0, 0.8, args.epochs + 0.2, amin, amax, "epoch", "validation accuracy",
                    "%s lr %g: validation accuracy (mean, min-max bar)" % (opt, rate), yt,
                    list(range(1, args.epochs + 1)))
        finals = []
        for ci, (key, label, colour, _) in enumerate(present):
            per_ep = {}
            for r in res.get(key, {}).values():
                for (e, _, a) in r[2]:
                    per_ep.setdefault(e, []).append(a)
            if not per_ep:
                continue
            dx = (ci - (len(present) - 1) / 2) * 4  # spread the bars apart
            pts = [(X(e) + dx, Y(clip(np.mean(v), amin, amax))) for e, v in sorted(per_ep.items())]
            o.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.8"/>'
                     % (" ".join("%.1f,%.1f" % p for p in pts), colour))
            for e, v in sorted(per_ep.items()):
                o.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>'
                         % (X(e) + dx, Y(clip(min(v), amin, amax)), X(e) + dx, Y(clip(max(v), amin, amax)), colour))
            for p in pts:
                o.append('<circle cx="%.1f" cy="%.1f" r="3.2" fill="%s"/>' % (p[0], p[1], colour))
            last = max(per_ep)
            finals.append((np.mean(per_ep[last]), min(per_ep[last]), max(per_ep[last]), label, colour))
        tx = x1 + pw + 10
        o.append('<text x="%d" y="%d" font-weight="bold">final accuracy, mean (min-max)</text>' % (tx, y0 + 10))
        for i, (m, lo, hi, label, colour) in enumerate(sorted(finals, key=lambda f: -f[0])):
            o.append('<text x="%d" y="%d" fill="%s">%.2f%% (%.2f-%.2f) %s</text>'
                     % (tx, y0 + 30 + 17 * i, colour, 100 * m, 100 * lo, 100 * hi, html.escape(label.split(" (")[0])))
    o.append('<text x="%d" y="%d" font-size="11" fill="#555">tools/bench/convergence.py --seeds; training loss clipped '
             'to [%g, %g]; validation on %s Fashion-MNIST test images; bars: min-max over the seeds</text>'
             % (left_m, H - 12, lmin, lmax, "all 10,000" if args.val_subset <= 0 else "the first %d" % args.val_subset))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def main_seeds(args, lrs, keys, seeds, opts):
    grps = groups(args, lrs, opts)
    if not args.report_only:
        if not os.path.exists(args.bin):
            sys.exit("no binary at %s: build it (cmake --build ... --target onnx-pipetrain) or pass --bin" % args.bin)
        train = data_arg(args.work, "train", args.train_subset)
        val = data_arg(args.work, "t10k", args.val_subset)
        t_all = time.time()
        n = 0
        for seed in seeds:  # seed outermost: an interrupted sweep leaves whole seeds
            model = os.path.join(args.work, "lenet5_seed%d.onnx" % seed)
            if not os.path.exists(model):
                export_lenet(model, seed)
            for opt, rate in grps:
                for key, label, colour, flags in variants(keys, opt):
                    out = run_dir(args.work, rate, key, opt, seed)
                    cmd = command(args, model, train, val, rate, key, flags, seed, out)
                    n += 1
                    print("+ [%d] %s" % (n, " ".join(cmd)), flush=True)
                    info, text = run_one(cmd, out)
                    if info["rc"] != 0:
                        print("  FAILED rc=%d; last output:\n%s" % (info["rc"], text[-2000:]), flush=True)
                    else:
                        print("  %.1f s, val acc %s%%, val loss %s, %s samples/s (elapsed %.0f s)" % (
                            info["wall_s"], info.get("val_acc"), info.get("val_loss"), info.get("samples_per_s"),
                            time.time() - t_all), flush=True)
        print("all runs: %.1f s" % (time.time() - t_all))

    data, table = {}, {}
    for g in grps:
        opt, rate = g
        data[g], table[g] = {}, {}
        for key, *_ in variants(keys, opt):
            for seed in seeds:
                d = run_dir(args.work, rate, key, opt, seed)
                if not os.path.isdir(d):
                    continue
                data[g].setdefault(key, {})[seed] = read_metrics(os.path.join(d, "metrics.csv"))
                rj = os.path.join(d, "result.json")
                table[g].setdefault(key, {})[seed] = json.load(open(rj)) if os.path.exists(rj) else {}
    svg_seeds(data, grps, args, seeds, args.seeds_svg)
    print("wrote " + args.seeds_svg)

    print("\nFinal validation accuracy over seeds %s: mean, sample std (n-1), min-max; then each seed "
          "(a run without a final accuracy, e.g. exit 3 = diverged, is shown as its exit code and left out "
          "of the mean)\n" % ",".join(map(str, seeds)))
    print("| config | optimizer | lr | mean | std | min-max | %s | mean val loss | mean wall s |"
          % " | ".join("seed %d" % s for s in seeds))
    print("|---|---|---|---|---|---|%s---|---|" % ("---|" * len(seeds)))
    for g in grps:
        opt, rate = g
        for key, label, _, _ in variants(keys, opt):
            runs = table[g].get(key, {})
            if not runs:
                continue
            accs = [acc_of(runs[s]) for s in seeds if s in runs and acc_of(runs[s]) is not None]
            losses = [runs[s]["val_loss"] for s in seeds if s in runs and "val_loss" in runs[s]]
            walls = [runs[s]["wall_s"] for s in seeds if s in runs and "wall_s" in runs[s]]
            cells = []
            for s in seeds:
                if s not in runs:
                    cells.append("-")
                elif acc_of(runs[s]) is None:
                    cells.append("rc %s" % runs[s].get("rc"))
                else:
                    cells.append("%.2f%%" % acc_of(runs[s]))
            print("| %s | %s | %g | %s | %s | %s | %s | %s | %s |" % (
                label, opt, rate,
                "%.2f%%" % np.mean(accs) if accs else "-",
                "%.2f" % np.std(accs, ddof=1) if len(accs) > 1 else "-",
                "%.2f-%.2f" % (min(accs), max(accs)) if accs else "-",
                " | ".join(cells),
                "%.4f" % np.mean(losses) if losses else "-",
                "%.0f" % np.mean(walls) if walls else "-"))


if __name__ == "__main__":
    main()
