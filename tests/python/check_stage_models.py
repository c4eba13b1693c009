#!/usr/bin/python3
# Checks onnx-pipetrain's --export-stages output: every RUN/stages/stage<k>.onnx passes the full
# onnx.checker (strict shape inference), the stages' nodes are the source model's (each node that
# computes on the data in exactly one stage; only shape computations may repeat), and in ONNX Runtime
# the chain of stage models (each fed by name from the data and earlier stages' outputs) reproduces
# the whole model's outputs on the same random input, within TOL relative to the largest output.
# Run: /usr/bin/python3 THIS FULL_ONNX STAGES_DIR [--batch B] [--seed S]
import argparse
import json
import os
import sys

import numpy as np
import onnx

TOL = 1e-5
SHAPE_OPS = {"Shape", "Size"}   # their outputs do not depend on the data's values


def session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def random_feed(model, batch, seed):
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feed = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in tt.shape.dim]
        dt = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[tt.elem_type]
        if np.issubdtype(dt, np.integer):   # token ids: 1..9 (0 would be padding), some padding
            x = rng.integers(1, 10, size=shape).astype(dt)
            if x.ndim == 2 and x.shape[1] > 3:
                x[::2, -2:] = 0
        else:
            x = rng.standard_normal(shape).astype(dt)
        feed[vi.name] = x
    return feed


def data_nodes(model):
    """Indices of the nodes that compute on the values of the data inputs for the model's outputs
    (not those whose results only feed Shape: their values are never read)."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    dep = {vi.name for vi in g.input if vi.name not in inits}
    on_data = set()
    for i, n in enumerate(g.node):
        if n.op_type not in SHAPE_OPS and any(x in dep for x in n.input):
            on_data.add(i)
            dep.update(o for o in n.output if o)
    live = {o.name for o in g.output}   # values whose contents reach an output
    out = set()
    for i in reversed(range(len(g.node))):
        n = g.node[i]
        if n.op_type in SHAPE_OPS or not any(o in live for o in n.output):
            continue
        live.update(x for x in n.input if x)
        if i in on_data:
            out.add(i)
    return out


def check_partition(full, stages):
    """Problems with how the stages' nodes split the full model's nodes (empty list: none)."""
    problems = []
    by_output = {n.output[0]: (i, n) for i, n in enumerate(full.graph.node) if n.output}
    count = {}
    for k, m in enumerate(stages):
        for n in m.graph.node:
            hit = by_output.get(n.output[0]) if n.output else None
            if hit is None or hit[1] != n:
                problems.append(f"stage {k}: node '{n.name}' ({n.op_type}) is not a node of the full model")
                continue
            count[hit[0]] = count.get(hit[0], 0) + 1
    for i in sorted(data_nodes(full)):
        n = full.graph.node[i]
        if count.get(i, 0) != 1:
            problems.append(f"node '{n.name}' ({n.op_type}) computes on the data and is in {count.get(i, 0)} stages")
    return problems


def check(full_path, stages_dir, batch=4, seed=0, log=print):
    """None when the stage models pass every check, else the failure (log gets the progress lines)."""
    with open(os.path.join(stages_dir, "stages.json")) as f:
        index = json.load(f)
    # check_model(ModelProto), never check_model(path, full_check=True): onnx 1.12's path form
    # writes the inferred shapes back into the file it checks.
    full = onnx.load(full_path)
    try:   # the stage models are held to the standard the full model meets
        onnx.checker.check_model(full, full_check=True)
        full_check = True
    except onnx.onnx_cpp2py_export.shape_inference.InferenceError as ex:
        log(f"note: the full model fails strict shape inference ({ex}); checking the stages without it")
        full_check = False
    stages = []
    for s in index["stages"]:
        path = os.path.join(stages_dir, s["file"])
        m = onnx.load(path)
        try:
            onnx.checker.check_model(m, full_check=full_check)
        except Exception as ex:
            return f"onnx.checker ({'full' if full_check else 'plain'}) rejects {path}: {ex}"
        inits = {t.name for t in m.graph.initializer}
        names_in = [i.name for i in m.graph.input if i.name not in inits]
        names_out = [o.name for o in m.graph.output]
        if names_in != s["inputs"] or names_out != s["outputs"]:
            return (f"{path}: inputs {names_in} / outputs {names_out} differ from stages.json "
                    f"{s['inputs']} / {s['outputs']}")
        stages.append(m)
    log(f"onnx.checker ({'full' if full_check else 'plain'}): {len(stages)} stage models ok")
    problems = check_partition(full, stages)
    if problems:
        return "the stages do not partition the model's nodes:\n  " + "\n  ".join(problems[:20])
    log(f"partition: {len(data_nodes(full))} data nodes each in exactly one stage "
        f"(stage node counts {[len(m.graph.node) for m in stages]} of {len(full.graph.node)})")

    feed = random_feed(full, batch, seed)
    want = dict(zip([o.name for o in full.graph.output], session(full_path).run(None, feed)))
    env = dict(feed)
    for s in index["stages"]:
        missing = [n for n in s["inputs"] if n not in env]
        if missing:
            return f"{s['file']} reads {missing}, which neither the data nor an earlier stage provides"
        got = session(os.path.join(stages_dir, s["file"])).run(None, {n: env[n] for n in s["inputs"]})
        env.update(zip(s["outputs"], got))
    worst = 0.0
    for name, w in want.items():
        if name not in env:
            return f"no stage computes the model output '{name}'"
        g = np.asarray(env[name])
        if g.shape != w.shape:
            return f"output '{name}': chain {list(g.shape)}, full model {list(w.shape)}"
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        e = float(np.max(np.abs(g64 - w64)) / (np.max(np.abs(w64)) + 1e-12)) if w.size else 0.0
        worst = max(worst, e)
        log(f"output '{name}' {list(w.shape)}, batch {batch}: chain of {len(stages)} stages vs full model, "
            f"rel err {e:.2e}")
        if not (np.isfinite(g64).all() and e <= TOL):
            return f"output '{name}': rel err {e:.2e} > {TOL:g}"
    log(f"PASS: {len(stages)} stage models valid, partitioning the nodes, chain equals the full model "
        f"(worst rel err {worst:.2e})")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("full")
    ap.add_argument("stages_dir")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    failure = check(a.full, a.stages_dir, a.batch, a.seed)
    if failure:
        print(f"FAIL: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
