#!/usr/bin/python3
# Independent, slow reference of the asynchronous 1F1B semantics (DESIGN.md section 4) for the
# digits MLP: every stage keeps its explicit weight and momentum history W^k_t, v^k_t, and each
# mini-batch is processed in order with the versions the schedule implies, in float64 numpy:
#   forward of mini-batch i at stage k:  t = max(0, i - (N-k-1));  stale/stash W_t;
#                                        spectrain W_t - s_fwd(k) * lr * v_t
#   backward of i at stage k:            stale W_i; stash W_t (the forward's version);
#                                        spectrain W_i - s_bwd(k) * lr * v_i
#   (activations always from the forward; the backward's weights only in dX = dY W)
#   update i: g = G + wd W_i; v_(i+1) = gamma v_i + (1-gamma) g; W_(i+1) = W_i - lr v_(i+1)
# Shared weights (one initializer read by nodes of several stages): one history per weight, kept by
# its owner (the first stage that reads it); a node reads the version its own stage k would use by
# the rules above, and the gradients of all its readers are summed into one update per mini-batch.
# No thread, queue or slot appears here: the C++ pipeline must realise these versions by its schedule.
#
# Run: /usr/bin/python3 THIS DIR. DIR holds model path (model.txt), x.npy, y.npy and cases.txt, one
# case a line: "name stages balance(comma list) mode staleness steps batch lr momentum wd"; the C++
# result of a case is DIR/name/<initializer>.npy. Exits 1 when any weight differs by more than 1e-5
# (max |a-b| / max |b| per tensor).
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

TOL = 1e-5


def load_layers(model_path):
    """A chain of forward nodes: ('gemm', W name, b name or None, transB) | ('relu',) |
    ('gather', E name) (an embedding of integer tokens, first node only)."""
    m = onnx.load(model_path)
    init = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    layers = []
    for n in m.graph.node:
        if n.op_type == "Gemm":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            assert attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 and not attrs.get("transA", 0)
            bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
            layers.append(("gemm", n.input[1], bias, int(attrs.get("transB", 0))))
        elif n.op_type == "Gather" and not layers and n.input[0] in init:
            layers.append(("gather", n.input[0]))
        elif n.op_type == "Relu":
            layers.append(("relu",))
        else:
            raise SystemExit(f"pipeline_reference: unexpected op {n.op_type}")
    layers.append(("loss",))
    return layers, init


def staleness(k, n, backward, mode):
    gap = n - k - 1
    if mode == "exact":
        return 0 if backward else gap
    return k // 2 if backward else k // 2 + gap


def run_case(layers, init, x_all, y_all, n_stages, balance, mode, stal, steps, batch, lr, gamma, wd):
    assert sum(balance) == len(layers) and len(balance) == n_stages
    stage_of = []
    for k, c in enumerate(balance):
        stage_of += [k] * c
    names = []
    for layer in layers:
        if layer[0] in ("gemm", "gather"):
            names += [p for p in layer[1:3] if isinstance(p, str) and p not in names]
    # Explicit history per parameter (one per weight, however many stages read it): W[name][t],
    # V[name][t] after t updates.
    W = {p: [init[p].copy()] for p in names}
    V = {p: [np.zeros_like(init[p])] for p in W}
    per_epoch = max(1, len(x_all) // batch)

    def weights(name, k, i, backward):
        w = n_stages - k - 1
        t_fwd = max(0, i - w)
        if mode == "spectrain":
            t = i if backward else t_fwd
            s = staleness(k, n_stages, backward, stal)
            return W[name][t] - s * lr * V[name][t]
        if mode == "stash":
            return W[name][t_fwd]
        return W[name][i] if backward else W[name][t_fwd]  # stale: the latest at that moment

    for i in range(steps):
        idx = (i % per_epoch) * batch + np.arange(batch)
        h = x_all[idx] if layers[0][0] == "gather" else x_all[idx].astype(np.float64)
        labels = y_all[idx]
        saved = []
        for li, layer in enumerate(layers):
            k = stage_of[li]
            saved.append(h)
            if layer[0] == "gemm":
                wt = weights(layer[1], k, i, False)
                h = h @ (wt.T if layer[3] else wt)
                if layer[2]:
                    h = h + weights(layer[2], k, i, False)
            elif layer[0] == "gather":
                h = weights(layer[1], k, i, False)[h]
            elif layer[0] == "relu":
                h = np.maximum(h, 0)
        logits = saved[-1]
        z = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        d = p.copy()
        d[np.arange(batch), labels] -= 1
        d /= batch
        grads = {name: np.zeros_like(init[name]) for name in W}  # summed over every reader
        for li in range(len(layers) - 2, -1, -1):
            layer, k, xin = layers[li], stage_of[li], saved[li]
            if layer[0] == "gemm":
                wt = weights(layer[1], k, i, True)
                if layer[3]:  # Y = X W^T + b, W [out, in]
                    grads[layer[1]] += d.T @ xin
                    dx = d @ wt
                else:
                    grads[layer[1]] += xin.T @ d
                    dx = d @ wt.T
                if layer[2]:
                    grads[layer[2]] += d.sum(axis=0)
                d = dx
            elif layer[0] == "gather":
                np.add.at(grads[layer[1]], xin, d)
            elif layer[0] == "relu":
                d = d * (xin > 0)
        for name in W:
            w, v = W[name][i], V[name][i]
            g = grads[name] + wd * w
            v_new = gamma * v + (1 - gamma) * g
            W[name].append(w - lr * v_new)
            V[name].append(v_new)
    return {name: hist[-1] for name, hist in W.items()}


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DIR")
    d = sys.argv[1]
    with open(os.path.join(d, "model.txt")) as f:
        layers, init = load_layers(f.read().strip())
    x_all = np.load(os.path.join(d, "x.npy"))
    y_all = np.load(os.path.join(d, "y.npy"))
    failed = 0
    with open(os.path.join(d, "cases.txt")) as f:
        cases = [line.split() for line in f if line.strip()]
    for name, n, bal, mode, stal, steps, batch, lr, gamma, wd in cases:
        ref = run_case(layers, init, x_all, y_all, int(n), [int(c) for c in bal.split(",")], mode, stal,
                       int(steps), int(batch), float(lr), float(gamma), float(wd))
        worst, moved = 0.0, 0.0
        for pname, want in ref.items():
            got = np.load(os.path.join(d, name, pname + ".npy")).astype(np.float64)
            scale = max(np.abs(want).max(), 1e-12)
            worst = max(worst, np.abs(got - want).max() / scale)
            moved = max(moved, np.abs(want - init[pname]).max() / scale)
        ok = worst <= TOL and moved > 1e-3
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:<24} max rel diff {worst:.2e} (weights moved {moved:.2e})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
