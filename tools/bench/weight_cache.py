"""The weight cache (kernels/weight_cache.h) on ResNet-18: ms per training step and per validation
pass with the cache where the runtime puts it (--weight-cache auto, the default) against
no cache (=off), same binary, runs interleaved (off, auto, auto, off, ...) because the machine is
shared; and oneDNN's reorders per step and per validation pass counted from ONEDNN_VERBOSE.

Configurations (peer_models' resnet18: torchvision ResNet-18, 3x32x32, 10 classes, opset 13
training mode, exported as tools/bench/peers.py does):
  1f1b   one stage (--gpus 1), mini-batch 32
  gpipe  one stage under GPipe, 4 micro-batches of 32 (--schedule gpipe --micro-batches 4, batch 128)
Both validate every --eval-every steps on 256 samples (8 batches of 32). Times come from the run's
own metrics.csv (the elapsed time after every step; a step that validates includes the
validation): step = median over the steps that do not validate, validation = median over the
validating steps minus that. The first --warmup steps and the last 3 (timed node by node) are left
out. The trained weights of both modes are compared: they must be bit-identical.

Run: /usr/bin/python3 tools/bench/weight_cache.py --build build-dev [--rounds 3] [--steps 16]
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TIMED_BY_NODE = 3
VAL_SAMPLES = 256
CONFIGS = {"1f1b": (32, ["--gpus", "1"]),
           "gpipe": (128, ["--gpus", "1", "--schedule", "gpipe", "--micro-batches", "4"])}
ENV = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
for k in ("ONEDNN_VERBOSE", "DNNL_VERBOSE"):
    ENV.pop(k, None)


def load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def prepare(folder):
    import numpy as np
    import peers
    model = os.path.join(folder, "resnet18.onnx")
    r = peers.side_export("resnet18", model, folder)
    assert r.get("ok"), r
    x, y = np.load(os.path.join(folder, "x.npy")), np.load(os.path.join(folder, "y.npy"))  # one batch of 32
    for name, reps in (("train", 64), ("val", VAL_SAMPLES // x.shape[0])):
        d = os.path.join(folder, name)
        os.makedirs(d, exist_ok=True)
        rng = np.random.default_rng(1 if name == "train" else 2)
        xs = np.concatenate([x] * reps) + 0.1 * rng.standard_normal((x.shape[0] * reps,) + x.shape[1:]).astype(x.dtype)
        np.save(os.path.join(d, "x.npy"), xs.astype(np.float32))
        np.save(os.path.join(d, "y.npy"), np.concatenate([y] * reps).astype(np.int64))
    return model


def train(exe, model, folder, config, mode, steps, eval_every, verbose=False):
    batch, flags = CONFIGS[config]
    out = os.path.join(folder, f"run-{config}-{mode}")
    env = dict(ENV, PIPETRAIN_WEIGHT_CACHE_STATS="1")
    if verbose:
        env["ONEDNN_VERBOSE"] = "1"
    cmd = [exe, model, "--device", "cpu", "--weight-cache", mode, *flags, "--data", os.path.join(folder, "train"), "--val-data",
           os.path.join(folder, "val"), "--batch-size", str(batch), "--steps", str(steps), "--eval-every",
           str(eval_every), "--lr", "0.01", "--no-shuffle", "--out", out, "--overwrite", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"FAIL {config} {mode}: exit {p.returncode}: {(p.stdout + p.stderr)[-2000:]}")
    m = re.search(r"weight cache: (\d+) hits, (\d+) reorders", p.stderr)
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "resnet18.trained.onnx"), "rb") as f:
        weights = f.read()
    return {"rows": rows, "batch": batch, "hits": int(m.group(1)), "reorders": int(m.group(2)),
            "stdout": p.stdout, "weights": weights}


def times(r, warmup, eval_every):
    rows, batch = r["rows"], r["batch"]
    elapsed = [k * batch / float(rows[k - 1]["samples_per_s"]) for k in range(1, len(rows) + 1)]
    per = {k: elapsed[k - 1] - (elapsed[k - 2] if k > 1 else 0.0) for k in range(1, len(rows) + 1)}
    last = len(rows) - TIMED_BY_NODE
    steps = [per[k] for k in range(warmup + 1, last + 1) if k % eval_every]
    evals = [per[k] for k in range(warmup + 1, last + 1) if k % eval_every == 0]
    step = statistics.median(steps)
    return 1e3 * step, 1e3 * (statistics.median(evals) - step)


def reorders(exe, model, folder, config, mode):
    """oneDNN reorders per training step and per validation pass, from ONEDNN_VERBOSE: counts of
    every reorder, of the weight conversions a cache can keep (plain -> blocked W) and of dW back to
    plain, from runs of 2 and 4 steps validating only at the end and of 4 steps validating after
    steps 2 and 4 (--eval-every 2): differences of the counts, which are exact. The time of one
    conversion is the mean of the run's own calls, so count x mean is the time per step or
    validation (differences of summed times drown in the load); ONEDNN_VERBOSE adds its overhead."""
    def count(steps, eval_every):
        r = train(exe, model, folder, config, mode, steps, eval_every, verbose=True)
        out = {"all": [], "w": [], "dw": []}
        for l in r["stdout"].splitlines():
            if ",exec," not in l or ",reorder," not in l:
                continue
            ms = float(l.split(",")[-1])
            src, dst = re.search(r"src_\S*", l).group(0), re.search(r"dst_\S*", l).group(0)
            out["all"].append(ms)
            # weights have their output channels (dim A) blocked, activations never their batch
            if re.search(r":blocked:abcd:", src) and re.search(r":blocked:A", dst):
                out["w"].append(ms)
            elif re.search(r":blocked:A", src) and re.search(r":blocked:abcd:", dst):
                out["dw"].append(ms)
        return out
    a2, a4, e4 = count(2, 1000), count(4, 1000), count(4, 2)
    med = {k: statistics.mean(e4[k]) if e4[k] else 0.0 for k in e4}
    step = {k: ((len(a4[k]) - len(a2[k])) / 2, med[k]) for k in a2}
    val = {k: (len(e4[k]) - len(a4[k]), med[k]) for k in a2}  # one validation more (after step 2)
    return {"step": step, "val": val}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-dev")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--only", nargs="*", default=list(CONFIGS))
    ap.add_argument("--no-verbose", action="store_true", help="skip the ONEDNN_VERBOSE counts")
    a = ap.parse_args()
    exe = os.path.join(a.build, "tools", "onnx-pipetrain")
    with tempfile.TemporaryDirectory(prefix="pipetrain-wcache-bench-") as folder:
        model = prepare(folder)
        for config in a.only:
            res = {"off": [], "auto": []}
            if a.rounds == 0:  # the ONEDNN_VERBOSE counts only
                res = {}
            for rnd in range(a.rounds):
                for mode in (("off", "auto") if rnd % 2 == 0 else ("auto", "off")):
                    before = load()
                    r = train(exe, model, folder, config, mode, a.steps, a.eval_every)
                    step, val = times(r, a.warmup, a.eval_every)
                    res[mode].append((step, val, r["hits"], r["reorders"], before, load(), r["weights"]))
                    print(f"{config} round {rnd + 1} {mode:4s}: step {step:7.1f} ms  validation {val:7.1f} ms  "
                          f"cache {r['hits']} hits {r['reorders']} reorders  load {before} -> {load()}", flush=True)
            same = not res or all(x[6] == res["off"][0][6] for m in res for x in res[m])
            print(f"{config}: trained weights bit-identical across modes and rounds: {same}")
            if not same:
                sys.exit(f"FAIL {config}: the trained weights differ")
            for mode in res:
                s = [x[0] for x in res[mode]]
                v = [x[1] for x in res[mode]]
                print(f"{config} {mode:4s}: step median {statistics.median(s):7.1f} ms (min {min(s):.1f}), validation "
                      f"median {statistics.median(v):7.1f} ms (min {min(v):.1f})")
            if not a.no_verbose:
                for mode in ("off", "auto"):
                    c = reorders(exe, model, folder, config, mode)
                    for when in ("step", "val"):
                        x = c[when]
                        print(f"{config} {mode:4s}: oneDNN reorders per {'training step' if when == 'step' else 'validation'}: "
                              f"all {x['all'][0]:.0f} ({x['all'][0] * x['all'][1]:.1f} ms), W plain->blocked {x['w'][0]:.0f} "
                              f"({x['w'][0] * x['w'][1]:.1f} ms), dW blocked->plain {x['dw'][0]:.0f} "
                              f"({x['dw'][0] * x['dw'][1]:.1f} ms)",
                              flush=True)


if __name__ == "__main__":
    main()
