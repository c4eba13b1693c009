#!/usr/bin/env python3
"""The cut between two nodes, predicted against measured: 2 emulated nodes (tools/netns-cluster.sh,
network namespaces, each node on its own share of the cores), one rank each, the link shaped to a
rate (and a delay where the kernel has netem); the Transformer encoder and ResNet-18 trained on 2
stages across them under asynchronous 1F1B (SpecTrain) and GPipe with 4 micro-batches. For each
run: the link the plan measured at the start (ping-pongs between the nodes), the time the plan
charges one pass's activations over it, and what the messages across the cut took during training
(from their sending to the receiver holding them, over the messages the receiver was waiting for:
partition.json's `measured_cut`), with the ratio. Needs root, iproute2, util-linux and mpirun.

`--only wide` is an MLP whose cut carries 8 MiB per pass each way under GPipe with 4 micro-batches
(batch 2048: 512 x 4096 floats; 32 MiB under 1F1B), over the TCP transport's eager limit (4 MiB):
such sends go through the ranks' progress thread (SendPump in
runtime/dist/mpi_cluster.cpp); `--pump-ab` runs every row also with PIPETRAIN_MPI_PUMP=0 (no
progress thread: the data moves only when the sending stage next calls into MPI).

  sudo /usr/bin/python3 tools/bench/netns_link_bench.py [--pipetrain BIN] [--rate 10gbit] [--delay 50us]
       [--steps 300] [--only transformer,resnet18,wide] [--repeat 1] [--quickack] [--pump-ab]

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


def wide_mlp(work):
    """x[N,64] -> Gemm 4096 -> Relu | Gemm 64 -> Relu -> Gemm 10, cut after the first Relu: a pass of
    512 samples sends 8 MiB of activations forward and 8 MiB of gradients back."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save
    rng = np.random.default_rng(3)
    dims = [(64, 4096), (4096, 64), (64, 10)]
    inits, nodes, x = [], [], "x"
    for i, (a, b) in enumerate(dims):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"], name=f"gemm{i}"))
        x = f"h{i}"
        if i + 1 < len(dims):
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
    g = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 10])], inits)
    path = os.path.join(work, "wide.onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path, ["--split-at", "gemm1"]


BATCH = {"wide": 2048}


def one_run(env, binary, model, extra, flags, out, steps, mpirun_args=()):
    batch = BATCH.get(os.path.splitext(os.path.basename(model))[0], 32)
    cmd = [SCRIPT, "run", "-np", "2", *mpirun_args, "--", binary, model, "--gpus", "2", "--batch-size", str(batch),
           "--steps", str(steps), "--seed", "1", "--out", out, "--overwrite", *extra, *flags]
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
    ap.add_argument("--pump-ab", action="store_true", help="every row also without the progress thread (PIPETRAIN_MPI_PUMP=0)")
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
            path, extra = wide_mlp(work) if model == "wide" else sb.prepare(model, work)
            steps = a.steps if model == "transformer" else max(40, a.steps // 5)
            variants = [("", ())] + ([(" no pump", ("-x", "PIPETRAIN_MPI_PUMP=0"))] if a.pump_ab else [])
            for (name, flags), (variant, margs) in [(r, v) for r in SCHEDULES for v in variants]:
                name += variant
                runs = [one_run(env, a.pipetrain, path, extra, flags, os.path.join(work, f"{model}-{i}"), steps, margs)
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
