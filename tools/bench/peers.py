#!/usr/bin/python3
"""Training-step time of onnx-pipetrain against its peers, PyTorch eager and ONNX Runtime Training,
on the same ONNX model, batch, initial weights and threads, measured back to back in one run.

Run: tools/bench/setup_peers.sh    (once: ONNX Runtime Training into a virtual environment)
     /usr/bin/python3 tools/bench/peers.py [--build DIR | --pipetrain BIN] [--baseline BIN] [--only NAME ...]
                                           [--steps N] [--warmup W] [--rounds R] [--threads T] [--wait best|default|passive]
                                           [--no-ort] [--json FILE]

For each model of tools/bench/peer_models.py (built after torch.manual_seed(0)):
  1. the torch module is exported (opset 13, training mode, no constant folding): the file that
     onnx-pipetrain and ONNX Runtime Training both train;
  2. onnx-pipetrain: the command line on one CPU stage (`onnx-pipetrain MODEL --data D --no-shuffle
     --val-split 0 --steps S`, SGD momentum 0.9, lr 0.01) on a folder holding the same batch S times;
     the per-step time comes from the run's own metrics.csv (its cumulative samples/s column gives
     the elapsed time at every step), so import, planning and export do not count. The last 3 steps,
     which the trainer times node by node, are left out;
  3. PyTorch eager in a process of its own: torch.set_num_threads(T), SGD(lr 0.01, momentum 0.9,
     dampening 0.9, onnx-pipetrain's v = 0.9 v + 0.1 g), zero_grad + forward + cross-entropy +
     backward + step;
  4. ONNX Runtime Training (onnxruntime-training-cpu in the virtual environment of setup_peers.sh):
     artifacts from the same ONNX file (cross-entropy loss, its SGD optimizer: plain SGD, lr 0.01, no
     momentum: the only SGD it generates), every float initializer that is not a BatchNorm running
     statistic trained, intra-op threads T; a step is module(x, y) + optimizer.step() +
     lazy_reset_grad().
How idle threads wait (--wait): `default` leaves every side as a user gets it: PyTorch with
libgomp's default spin, ONNX Runtime with its spinning pool, onnx-pipetrain with its own choice (a
bounded spin on a machine idle at its start, sleeping on a busy one: tools/omp_env.h); `passive`
makes every side sleep (OMP_WAIT_POLICY=PASSIVE; ONNX Runtime: allow_spinning 0), the protocol of the
tables before 2026-12-03 (night), where spinning threads made PyTorch's GPT step take 0.8-2 s
instead of 0.1 s on a shared machine; `best` (the default) runs every side both ways in each round
and keeps its fastest, so no side is compared at a setting that does not suit it. OMP_WAIT_POLICY
or GOMP_SPINCOUNT set by the caller reach every side in every mode.
Every side validates first: 20 steps on the batch, first loss finite and the mean loss of steps 16-20
below that of steps 1-5; then W warm-up and N timed steps; every side reports the mean ms per step
(onnx-pipetrain's metrics give means). --rounds R repeats the three sides back to back R times and
keeps each side's fastest round (on a machine shared with other jobs the least disturbed one). Prints the ratios ours/peer per model, and the load average
(`os.getloadavg`) before and after each model. Exit 1 when a side fails (a FAIL line says why).
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_VENV = os.environ.get("PIPETRAIN_PEERS_VENV", os.path.expanduser("~/.cache/onnx-pipetrain/peers-venv"))
ORDER = ("small_cnn", "lenet_bn", "resnet18", "transformer", "gpt", "mobilenet_v2")
LR, MOMENTUM = 0.01, 0.9
VALIDATION_STEPS = 20
# The environment of every side; set_wait("passive") makes OpenMP threads sleep while they wait
# (libgomp's default spin, which PyTorch keeps, loses 10x on a machine shared with other jobs).
ENV = dict(os.environ)


def set_wait(mode):
    ENV.clear()
    ENV.update(os.environ)
    ENV["PIPETRAIN_PEERS_WAIT"] = mode
    if mode == "passive" and "GOMP_SPINCOUNT" not in os.environ:
        ENV["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
TIMED_BY_NODE = 3      # the trainer's last steps run node by node (Executor::run_timed): not counted


def validate(losses):
    """None when the losses are finite and fall (mean of steps 16-20 below that of steps 1-5)."""
    if not all(map(math.isfinite, losses)):
        return f"loss not finite: {losses[:VALIDATION_STEPS]}"
    first5, last5 = sum(losses[:5]) / 5, sum(losses[15:20]) / 5
    if not last5 < first5:
        return f"loss does not fall: mean of steps 1-5 {first5:.5f}, 16-20 {last5:.5f}"
    return None


def timed(step, steps, warmup):
    losses = [step() for _ in range(VALIDATION_STEPS)]
    out = {"loss_first": losses[0], "loss_step20": losses[VALIDATION_STEPS - 1]}
    err = validate(losses)
    if err:
        out["error"] = err
        return out
    for _ in range(warmup):
        step()
    ms = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ms.append(1e3 * (time.perf_counter() - t0))
    out.update(mean_ms=statistics.mean(ms), median_ms=statistics.median(ms), min_ms=min(ms))
    return out


# ------------------------------------------------------------------------------------ the sides
def side_export(name, path, folder):
    """Exports the model and writes the batch (x.npy, y.npy) into folder."""
    import numpy as np
    import torch
    from peer_models import build, make_batch
    model = build(name)
    model.train()
    x, y = make_batch(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, path, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"], output_names=["logits"])
    np.save(os.path.join(folder, "x.npy"), x.numpy())
    np.save(os.path.join(folder, "y.npy"), y.numpy().astype(np.int64))
    return {"ok": True}


def side_torch(name, threads, steps, warmup):
    import torch
    import torch.nn.functional as F
    from peer_models import build, make_batch
    torch.set_num_threads(threads)
    model = build(name)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, dampening=MOMENTUM)
    x, y = make_batch(name)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    out = timed(step, steps, warmup)
    out["version"] = torch.__version__
    return out


def side_ort(model_path, folder, threads, steps, warmup):
    """Runs in the peers' virtual environment (onnxruntime-training-cpu; numpy < 2)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    ort.set_default_logger_severity(3)      # the generator's INFO lines would be timed too
    m = onnx.load(model_path)
    stats = {n.input[i] for n in m.graph.node if n.op_type == "BatchNormalization" for i in (3, 4)}
    floats = [t.name for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    train = [t for t in floats if t not in stats]
    art = os.path.join(folder, "ort_artifacts")
    os.makedirs(art, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifacts.generate_artifacts(m, requires_grad=train, frozen_params=[t for t in floats if t in stats],
                                     loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.SGD,
                                     artifact_directory=art)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if os.environ.get("PIPETRAIN_PEERS_WAIT") == "passive":
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")   # as the others: no busy waiting
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = Module(os.path.join(art, "training_model.onnx"), state, session_options=so)
    opt = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    opt.set_learning_rate(LR)
    module.train()
    x, y = np.load(os.path.join(folder, "x.npy")), np.load(os.path.join(folder, "y.npy"))

    def step():
        loss = module(x, y)
        opt.step()
        module.lazy_reset_grad()
        return float(loss)

    out = timed(step, steps, warmup)
    out["version"] = ort.__version__
    return out


def side_ours(exe, model_path, folder, steps, warmup, flags=("--gpus", "1")):
    """The command line (one stage unless `flags` say otherwise); per-step means from its metrics.csv."""
    import numpy as np
    total = VALIDATION_STEPS + warmup + steps + TIMED_BY_NODE
    x, y = np.load(os.path.join(folder, "x.npy")), np.load(os.path.join(folder, "y.npy"))
    batch = x.shape[0]
    data = os.path.join(folder, "ours.data")
    os.makedirs(data, exist_ok=True)
    # One epoch of the same batch, written once per model (not per round: the kernel's write-back
    # of tens of MB would be busy while onnx-pipetrain looks at the machine to choose its wait).
    if not os.path.exists(os.path.join(data, "y.npy")):
        np.save(os.path.join(data, "x.npy"), np.concatenate([x] * total))
        np.save(os.path.join(data, "y.npy"), np.concatenate([y] * total))
    out_dir = os.path.join(folder, "ours.run")
    cmd = [exe, model_path, "--device", "cpu", *flags, "--data", data, "--no-shuffle", "--val-split", "0",
           "--batch-size", str(batch), "--steps", str(total), "--lr", str(LR), "--momentum", str(MOMENTUM),
           "--out", out_dir, "--overwrite"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    r = {"cmd": " ".join(cmd)}
    m = re.search(r"idle OpenMP threads: (\w+)", p.stdout)
    if m:
        r["omp_wait"] = m.group(1)   # spin or sleep: onnx-pipetrain's own choice (tools/omp_env.h)
    if p.returncode != 0:
        msg = [l for l in (p.stdout + p.stderr).strip().splitlines() if l.strip()]
        r["error"] = (msg[-1] if msg else "no output") + f" (exit {p.returncode})"
        return r
    with open(os.path.join(out_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    if len(rows) != total:
        r["error"] = f"metrics.csv has {len(rows)} rows, expected {total}"
        return r
    losses = [float(row["loss"]) for row in rows]
    r.update(loss_first=losses[0], loss_step20=losses[VALIDATION_STEPS - 1])
    err = validate(losses)
    if err:
        r["error"] = err
        return r
    elapsed = lambda k: k * batch / float(rows[k - 1]["samples_per_s"])   # seconds after k steps
    a = VALIDATION_STEPS + warmup
    r["mean_ms"] = 1e3 * (elapsed(a + steps) - elapsed(a)) / steps
    return r


# ------------------------------------------------------------------------------------- driver
def sub(python, args):
    p = subprocess.run([python, os.path.abspath(__file__)] + args, capture_output=True, text=True, env=ENV)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        err = [l for l in (p.stdout + p.stderr).strip().splitlines() if l.strip()]
        return {"error": err[-1] if err else f"exit {p.returncode}"}
    return json.loads(lines[-1])


def load():
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="CMake build folder (tools/onnx-pipetrain)")
    ap.add_argument("--pipetrain", help="the onnx-pipetrain binary (default BUILD/tools/onnx-pipetrain)")
    ap.add_argument("--baseline", help="another onnx-pipetrain binary (an earlier build) timed beside ours, "
                                       "as side 'base' (before/after in one run)")
    ap.add_argument("--only", choices=ORDER, action="append", help="model(s) to run (default: all, in table order)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per side (default 20)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the sides back to back this many times; each side's fastest round counts (default 1)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads of the peers (default: the CPU count, which onnx-pipetrain's one stage uses)")
    ap.add_argument("--wait", choices=("best", "default", "passive"), default="best",
                    help="idle threads: each side's default, every side sleeping (passive), or each side both ways "
                         "and its faster kept (best, the default)")
    ap.add_argument("--venv", default=DEFAULT_VENV, help="the peers' virtual environment (tools/bench/setup_peers.sh)")
    ap.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime Training out")
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--_side", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a._side:
        kind, args = a._side[0], a._side[1:]
        sys.path.insert(0, HERE)
        if kind == "export":
            r = side_export(*args)
        elif kind == "torch":
            r = side_torch(args[0], a.threads, a.steps, a.warmup)
        else:
            r = side_ort(args[0], args[1], a.threads, a.steps, a.warmup)
        print(json.dumps(r))
        return 0

    modes = ("default", "passive") if a.wait == "best" else (a.wait,)
    exe = a.pipetrain or os.path.join(a.build, "tools", "onnx-pipetrain")
    if not os.access(exe, os.X_OK):
        print(f"peers: error: {exe} not found (--build, --pipetrain); build it: cmake --build {a.build} --target onnx-pipetrain",
              file=sys.stderr)
        return 2
    ort_py = os.path.join(a.venv, "bin", "python")
    if not a.no_ort and not os.access(ort_py, os.X_OK):
        print(f"peers: error: no ONNX Runtime Training at {a.venv} (--venv): run tools/bench/setup_peers.sh, "
              f"or pass --no-ort", file=sys.stderr)
        return 2
    names = a.only or list(ORDER)
    sys.path.insert(0, HERE)
    from peer_models import describe
    print(f"threads {a.threads} (peers), {VALIDATION_STEPS} validation + {a.warmup} warm-up + {a.steps} timed "
          f"steps per side, mean ms per step; idle threads: {a.wait}; load average {load()}", flush=True)
    results, failed, t_start = {}, False, time.time()
    with tempfile.TemporaryDirectory(prefix="peers.") as tmp:
        for name in names:
            folder = os.path.join(tmp, name)
            os.makedirs(folder)
            path = os.path.join(folder, f"{name}.onnx")
            r = results[name] = {"model": describe(name), "load_before": load()}
            ex = sub(sys.executable, ["--_side", "export", name, path, folder])
            if "error" in ex:
                r["error"] = f"export: {ex['error']}"
                print(f"FAIL {name}: {r['error']}", flush=True)
                failed = True
                continue
            common = ["--threads", str(a.threads), "--steps", str(a.steps), "--warmup", str(a.warmup)]
            sides = (["base"] if a.baseline else []) + ["ours", "torch"] + ([] if a.no_ort else ["ort"])
            for k in range(a.rounds):        # the sides back to back, round after round
                got = {"ours": lambda: side_ours(exe, path, folder, a.steps, a.warmup),
                       "base": lambda: side_ours(a.baseline, path, folder, a.steps, a.warmup),
                       "torch": lambda: sub(sys.executable, common + ["--_side", "torch", name]),
                       "ort": lambda: sub(ort_py, common + ["--_side", "ort", path, folder])}
                for side, mode in ((sd, m) for sd in sides for m in modes):
                    set_wait(mode)
                    d = got[side]()
                    d["wait"] = mode
                    prev = r.get(side)
                    rounds = (prev or {}).get("rounds_ms", [])
                    waits = (prev or {}).get("rounds_wait", [])
                    if "mean_ms" in d:
                        rounds, waits = rounds + [d["mean_ms"]], waits + [mode]
                    # Kept: the fastest round (the least disturbed by other jobs), or the first error.
                    if prev is None or ("error" not in prev and "mean_ms" in d and d["mean_ms"] < prev["mean_ms"]):
                        r[side] = d
                    elif "error" in d and "error" not in prev:
                        r[side] = d
                    r[side]["rounds_ms"], r[side]["rounds_wait"] = rounds, waits
            r["load_after"] = load()
            for side in ("base", "ours", "torch", "ort"):
                d = r.get(side)
                if d is None:
                    continue
                if "error" in d:
                    failed = True
                    print(f"FAIL {name}: {side}: {d['error']}", flush=True)
                else:
                    tag = (lambda w: w[0]) if len(modes) > 1 else (lambda w: "")   # d(efault) or p(assive)
                    rounds = ", rounds " + " ".join(f"{v:.2f}{tag(w)}" for v, w in zip(d["rounds_ms"], d["rounds_wait"])) \
                        if len(d["rounds_ms"]) > 1 else ""
                    best = f" ({d['wait']})" if len(modes) > 1 else ""
                    if "omp_wait" in d:
                        best += f" [threads {d['omp_wait']}]"
                    print(f"{name}: {side:<5} {d['mean_ms']:8.2f} ms/step{best}{rounds}, losses {d['loss_first']:.4f} -> "
                          f"{d['loss_step20']:.4f} over {VALIDATION_STEPS} steps", flush=True)
            o = r["ours"].get("mean_ms")
            for side in ("torch", "ort", "base"):
                p = r.get(side, {}).get("mean_ms")
                if o and p:
                    r[f"ratio_{side}"] = o / p
    print()
    base = "| base ms | ours / base " if a.baseline else ""
    print(f"| model (input, batch) | ours ms | PyTorch ms | ORT Training ms | ours / PyTorch | ours / ORT {base}| load before -> after |")
    print("| --- " * (9 if a.baseline else 7) + "|")
    f = lambda d, k, s: format(d[k], s) if isinstance(d, dict) and k in d else "-"
    for name, r in results.items():
        print(f"| {name} ({r['model']}) | {f(r.get('ours'), 'mean_ms', '.2f')} | {f(r.get('torch'), 'mean_ms', '.2f')} | "
              f"{f(r.get('ort'), 'mean_ms', '.2f')} | {f(r, 'ratio_torch', '.2f')} | {f(r, 'ratio_ort', '.2f')} | "
              + (f"{f(r.get('base'), 'mean_ms', '.2f')} | {f(r, 'ratio_base', '.2f')} | " if a.baseline else "") +
              f"{r['load_before']} -> {r.get('load_after', '-')} |")
    print(f"\nratio = onnx-pipetrain / peer, mean ms per training step (target: <= 0.67 of the faster "
          f"peer); {time.time() - t_start:.0f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
