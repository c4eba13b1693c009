#!/usr/bin/env python3
"""One onnx-pipetrain binary with two flag sets, runs interleaved: per-step time (from the run's own
metrics, as peers.py measures ours) and each stage's planned and measured memory (partition.json).

  /usr/bin/python3 tools/bench/flag_ab.py [--build DIR] [--rounds R] [--steps N] [--only NAME ...]
      --a "FLAGS" --b "FLAGS"

Models: peers.py's (peer_models.py, exported once per folder under --work). Each round runs every
model with --a, then with --b, so that load drifts hit both; a run is validated (losses fall, as
peers.py checks) before its time counts. Prints every run, then per model and side the best and the
median ms per step, the b/a ratio of the medians, and the memory of the last run.
Example (the update inside the backward):
  /usr/bin/python3 tools/bench/flag_ab.py --rounds 15 --a "--gpus 1" --b "--gpus 1 --no-fusion update"
"""
import argparse
import json
import os
import shlex
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import peers  # noqa: E402


def memory(folder):
    with open(os.path.join(folder, "ours.run", "partition.json")) as f:
        stages = json.load(f)["stages"]
    return [(s["memory_bytes"] / 1e6, s.get("measured", {}).get("memory_bytes", 0) / 1e6,
             s.get("update_in_backward", False)) for s in stages]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--a", required=True, help="flags of side a (one string)")
    ap.add_argument("--b", required=True, help="flags of side b (one string)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", choices=peers.ORDER, action="append")
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "pipetrain-flag-ab"))
    a = ap.parse_args()
    exe = os.path.join(a.build, "tools", "onnx-pipetrain")
    if not os.path.exists(exe):
        sys.exit(f"flag_ab: error: {exe} not found (--build)")
    names = a.only or list(peers.ORDER)
    sides = {"a": shlex.split(a.a), "b": shlex.split(a.b)}
    folders = {}
    for name in names:
        folder = os.path.join(a.work, name)
        path = os.path.join(folder, "model.onnx")
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            ex = peers.sub(sys.executable, ["--_side", "export", name, path, folder])
            if "error" in ex:
                sys.exit(f"flag_ab: error: exporting {name}: {ex['error']}")
        folders[name] = folder
    times = {(n, s): [] for n in names for s in sides}
    mem = {}
    print(f"a: {a.a}\nb: {a.b}\nload before: {peers.load()}")
    for r in range(a.rounds):
        for name in names:
            for side, flags in sides.items():
                res = peers.side_ours(exe, os.path.join(folders[name], "model.onnx"), folders[name], a.steps, a.warmup,
                                      flags=flags)
                if "error" in res:
                    sys.exit(f"flag_ab: error: {name} ({side}): {res['error']}")
                times[(name, side)].append(res["mean_ms"])
                mem[(name, side)] = memory(folders[name])
                print(f"round {r} {name:12s} {side} {res['mean_ms']:8.3f} ms  load {peers.load()}", flush=True)
    print(f"load after: {peers.load()}")
    print(f"\n| model | a best / median ms | b best / median ms | b / a (medians) | a planned / measured MB | "
          f"b planned / measured MB |\n| --- | --- | --- | --- | --- | --- |")
    for name in names:
        ta, tb = times[(name, "a")], times[(name, "b")]
        ma, mb = statistics.median(ta), statistics.median(tb)
        fmt = lambda m: " + ".join(f"{p:.1f} / {q:.1f}" + (" (u)" if u else "") for p, q, u in m)
        print(f"| {name} | {min(ta):.2f} / {ma:.2f} | {min(tb):.2f} / {mb:.2f} | {mb / ma:.3f} | "
              f"{fmt(mem[(name, 'a')])} | {fmt(mem[(name, 'b')])} |")
    print("(u): the stage runs its updates inside the backward (partition.json update_in_backward)")


if __name__ == "__main__":
    main()
