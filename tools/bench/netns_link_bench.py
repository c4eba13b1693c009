#!/usr/bin/env python3
"""The cut between two nodes, predicted against measured: 2 emulated nodes (tools/netns-cluster.sh,
network namespaces, each node on its own share of the cores), one rank each, the link shaped to a
rate (and a delay where the kernel has netem); the Transformer encoder and ResNet-18 trained on 2
stages across them under asynchronous 1F1B (SpecTrain) and GPipe with 4 micro-batches. For each
run: the link the plan measured at the start (ping-pongs between the nodes), the time the plan
charges one pass's activations over it, and what the messages across the cut took during training
(from their sending to the receiver holding them, over the messages the receiver was waiting for:
partition.json's `measured_cut`), with the ratio. Needs root, iproute2, util-linux and mpirun.

  sudo /usr/bin/python3 tools/bench/netns_link_bench.py [--pipetrain BIN] [--rate 10gbit] [--delay 50us]
       [--steps 300] [--only transformer,resnet18] [--repeat 1] [--quickack]

Prints a Markdown table (docs/mpi.md keeps one)."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import schedules_bench as sb  # noqa: E402  (the models, exported as it exports them)

SCRIPT = os.path.join(ROOT, "tools", "netns-cluster.sh")
SCHEDULES = [("1f1b spectrain", []), ("gpipe m=4", ["--schedule", "gpipe", "--micro-batches", "4"])]


def cluster(env, *args):
    p = subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"netns-cluster.sh {' '.join(args)}: {p.stderr.strip()}")
    return p


def one_run(env, binary, model, extra, flags, out, steps):
    cmd = [SCRIPT, "run", "-np", "2", "--", binary, model, "--gpus", "2", "--batch-size", "32", "--steps", str(steps),
           "--seed", "1", "--out", out, "--overwrite", *extra, *flags]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:]}
    link = re.search(r"^network: measured .*: ([\d.]+) GB/s, ([\d.]+) us$", p.stdout, re.M)
    with open(os.path.join(out, "partition.json")) as f:
        doc = json.load(f)
    stages = doc["stages"]
    cut = [s for s in stages if s["cut_crosses_nodes"]]
    if not cut or "measured_cut" not in cut[0]:
        return {"error": ["no measured cut in partition.json"]}
    m = cut[0]["measured_cut"]
    return {"mb": cut[0]["recv_bytes"] / 1e6, "gbs": float(link.group(1)) if link else float("nan"),
            "lat": float(link.group(2)) if link else float("nan"), "pred": m["predicted_us"],
            "fwd": m["forward_us"], "bwd": m["backward_us"], "fwd_med": m.get("forward_median_us"),
            "bwd_med": m.get("backward_median_us"), "n": m["messages"],
            "rate": doc.get("measured_steady_samples_per_s", float("nan"))}


def median_of(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipetrain", default=os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
    ap.add_argument("--rate", default="10gbit")
    ap.add_argument("--delay", default="50us")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--only", default="transformer,resnet18")
    ap.add_argument("--repeat", type=int, default=1, help="runs per row (medians)")
    ap.add_argument("--quickack", action="store_true",
                    help="the nodes acknowledge TCP data at once (netns-cluster.sh quickack on)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("netns_link_bench.py: needs root (network namespaces)")
    work = tempfile.mkdtemp(prefix="pipetrain-netns-bench-")
    env = dict(os.environ, PT_NETNS_PREFIX="ptb-n", PT_NETNS_BRIDGE="ptb-br", PT_NETNS_STATE=os.path.join(work, "state"))
    cluster(env, "up", "2", "1", "--split-cores")
    try:
        if a.quickack:
            cluster(env, "quickack", "on")
        shaped = cluster(env, "shape", a.rate, a.delay)
        if shaped.stderr.strip():
            print(f"note: {shaped.stderr.strip()}", file=sys.stderr)
        print(f"| model | schedule | MB per pass | link measured at the start | predicted us | measured forward us "
              f"(median / mean) | measured backward us (median / mean) | median / predicted | mean / predicted "
              f"| messages | samples/s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for model in a.only.split(","):
            path, extra = sb.prepare(model, work)
            steps = a.steps if model == "transformer" else max(40, a.steps // 5)
            for name, flags in SCHEDULES:
                runs = [one_run(env, a.pipetrain, path, extra, flags, os.path.join(work, f"{model}-{i}"), steps)
                        for i in range(a.repeat)]
                ok = [r for r in runs if "error" not in r]
                if not ok:
                    print(f"| {model} | {name} | error: {runs[0]['error']} |||||||")
                    continue
                pred = median_of(ok, "pred")
                fwd, bwd = median_of(ok, "fwd"), median_of(ok, "bwd")
                fwd_med, bwd_med = median_of(ok, "fwd_med"), median_of(ok, "bwd_med")

                def ratio(a, b):
                    both = [v for v in (a, b) if v is not None]
                    return statistics.mean(both) / pred if both and pred else float("nan")

                fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
                print(f"| {model} | {name} | {median_of(ok, 'mb'):.2f} | {median_of(ok, 'gbs'):.2f} GB/s, "
                      f"{median_of(ok, 'lat'):.1f} us | {pred:.0f} | {fmt(fwd_med)} / {fmt(fwd)} | "
                      f"{fmt(bwd_med)} / {fmt(bwd)} | {ratio(fwd_med, bwd_med):.2f} | {ratio(fwd, bwd):.2f} | "
                      f"{int(median_of(ok, 'n'))} | {median_of(ok, 'rate'):.0f} |", flush=True)
    finally:
        cluster(env, "down")


if __name__ == "__main__":
    main()
