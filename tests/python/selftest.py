#!/usr/bin/python3
# Self-test of the Python oracle and checkers (no C++ needed): runs torch_mlp_oracle.py, then
# feeds check_training_oracle.py / check_exported_model.py exact and perturbed copies of the
# oracle's own outputs and asserts they pass / fail.  Run: /usr/bin/python3 THIS OUTDIR
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def run(script, *args):
    r = subprocess.run([sys.executable, os.path.join(HERE, script), *args],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def fake_run(orc, stem, weight_bump=0.0, loss_bump=0.0):
    """A trained model with the oracle's weights and a metrics.csv with its losses."""
    m = onnx.load(os.path.join(orc, "mlp.onnx"))
    w = np.load(os.path.join(orc, "expected_weights.npz"))
    for i, t in enumerate(m.graph.initializer):
        a = w[t.name].copy()
        if i == 0:
            a.flat[0] += weight_bump * np.abs(a).max()
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    onnx.save(m, stem + ".onnx")
    losses = np.load(os.path.join(orc, "expected_losses.npy"))
    with open(stem + ".csv", "w") as f:
        f.write("step,epoch,loss,lr,samples_per_s\n")
        for s, v in enumerate(losses, 1):
            f.write(f"{s},{(s - 1) // 5},{v * (1 + loss_bump) if s == 3 else v:.9g},0.1,1.0\n")
    return stem + ".onnx", stem + ".csv"


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTDIR")
    out = sys.argv[1]
    orc = os.path.join(out, "oracle")
    rc, log = run("torch_mlp_oracle.py", orc)
    assert rc == 0, log
    x, logits = os.path.join(orc, "data", "x.npy"), os.path.join(orc, "expected_logits.npy")
    cases = [("exact", 0.0, 0.0, 0, 0), ("weights+3e-4", 3e-4, 0.0, 1, 0),
             ("loss+3e-4", 0.0, 3e-4, 1, 0), ("weights+0.05", 0.05, 0.0, 1, 1)]
    failed = 0
    for name, wb, lb, want_train, want_export in cases:
        onnx_path, csv_path = fake_run(orc, os.path.join(out, name), wb, lb)
        rc1, _ = run("check_training_oracle.py", orc, onnx_path, csv_path)
        rc2, _ = run("check_exported_model.py", os.path.join(orc, "mlp.onnx"), onnx_path, x,
                     logits)
        ok = (rc1, rc2) == (want_train, want_export)
        failed += not ok
        print(f"{name:14s} training-check rc {rc1} (want {want_train}), export-check rc {rc2}"
              f" (want {want_export}) {'ok' if ok else 'WRONG'}")
    print("PASS" if not failed else f"FAIL: {failed} case(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
