"""LSTM and GRU classifiers exported by torch.onnx.export, trained one SGD step by onnx-pipetrain and
by PyTorch autograd (float64, from the same float32 weights and data): the step-1 loss and every
trained initializer agree. The ONNX W / R / B of an LSTM or GRU node are PyTorch's weight_ih /
weight_hh / bias_ih + bias_hh with the gates reordered (LSTM: torch i f g o -> ONNX i o f c; GRU:
torch r z n -> ONNX z r h) and the directions stacked; the test builds them from torch's parameters
before the step (they must equal the exported initializers exactly) and after it (the reference).
Models: a 2-layer bidirectional batch-first LSTM reading Y (opset 14) and a bidirectional GRU
reading Y_h (opset 17, PyTorch's linear_before_reset = 1), each with a Linear head. The LSTM also
runs as 2 GPipe stages against the same reference (on the machines measured the cut falls inside the
second LSTM's unrolled steps, and its W is read by both stages).
The trained model keeps its LSTM / GRU nodes. Unsupported attributes exit 2 naming node and
attribute.
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_rnn.py"""
import csv
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))

N, T, F_IN, HID, C = 8, 6, 5, 4, 3  # batch, sequence, features, hidden, classes
LR = 0.1
EPS32 = float(np.finfo(np.float32).eps)
GATE_ORDER = {"lstm": [0, 3, 1, 2], "gru": [1, 0, 2]}  # ONNX gate k = torch gate GATE_ORDER[k]


class LstmClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(F_IN, HID, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * HID, C)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1, :])


class GruClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(F_IN, HID, bidirectional=True)
        self.fc = nn.Linear(2 * HID, C)

    def forward(self, x):
        _, h = self.rnn(x.transpose(0, 1))
        return self.fc(torch.cat([h[0], h[1]], 1))


def run(*args):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def reorder(t, kind):
    blocks = torch.chunk(t, len(GATE_ORDER[kind]), 0)
    return torch.cat([blocks[k] for k in GATE_ORDER[kind]], 0)


def onnx_rnn_weights(rnn, kind):
    """Per layer, the ONNX (W, R, B) of the exported node, from torch's parameters."""
    out = []
    dirs = ["", "_reverse"] if rnn.bidirectional else [""]
    for layer in range(rnn.num_layers):
        w, r, b = [], [], []
        for s in dirs:
            g = lambda n: getattr(rnn, f"{n}_l{layer}{s}").detach()  # noqa: E731
            w.append(reorder(g("weight_ih"), kind))
            r.append(reorder(g("weight_hh"), kind))
            b.append(torch.cat([reorder(g("bias_ih"), kind), reorder(g("bias_hh"), kind)]))
        out.append((torch.stack(w), torch.stack(r), torch.stack(b)))
    return out


def expected_initializers(model, kind, rnn_nodes):
    """ONNX initializer name -> its value from the torch model's current parameters."""
    exp = {"fc.weight": model.fc.weight.detach(), "fc.bias": model.fc.bias.detach()}
    for node, (w, r, b) in zip(rnn_nodes, onnx_rnn_weights(model.rnn, kind)):
        exp[node.input[1]], exp[node.input[2]], exp[node.input[3]] = w, r, b
    return {k: v.double().numpy() for k, v in exp.items()}


def build_case(kind, d):
    """Exports the model and writes the data; returns (model path, torch model, x, y, node names)."""
    torch.manual_seed(11 if kind == "lstm" else 12)
    model = LstmClassifier() if kind == "lstm" else GruClassifier()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((N, T, F_IN)).astype(np.float32)
    y = rng.integers(0, C, N).astype(np.int64)
    path = os.path.join(d, f"{kind}.onnx")
    torch.onnx.export(model, (torch.from_numpy(x),), path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}}, opset_version=14 if kind == "lstm" else 17)
    os.makedirs(os.path.join(d, "data"), exist_ok=True)
    np.save(os.path.join(d, "data", "x.npy"), x)
    np.save(os.path.join(d, "data", "y.npy"), y)
    return path, model, x, y


def torch_step(model, x, y):
    """One plain SGD step in float64; returns the loss."""
    m = model.double()
    m.train()
    loss = F.cross_entropy(m(torch.from_numpy(x).double()), torch.from_numpy(y))
    m.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in m.parameters():
            p -= LR * p.grad
    return float(loss)


class RnnOracle(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pt_rnn_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def oracle(self, kind, *flags):
        path, model, x, y = build_case(kind, self.dir)
        proto = onnx.load(path)
        op = "LSTM" if kind == "lstm" else "GRU"
        rnn_nodes = [n for n in proto.graph.node if n.op_type == op]
        self.assertEqual(len(rnn_nodes), 2 if kind == "lstm" else 1)
        inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        before = expected_initializers(model, kind, rnn_nodes)
        for name, v in before.items():  # the gate-order map is right: exact before the step
            np.testing.assert_array_equal(inits[name].astype(np.float64), v, err_msg=name)
        if kind == "gru":
            self.assertEqual([a.i for a in rnn_nodes[0].attribute if a.name == "linear_before_reset"], [1])
        loss = torch_step(model, x, y)
        after = expected_initializers(model, kind, rnn_nodes)
        out = os.path.join(self.dir, "run_" + "_".join([kind, *flags]).replace("-", ""))
        rc, so, se = run(path, "--data", os.path.join(self.dir, "data"), "--steps", 1, "--batch-size", N,
                         "--optimizer", "sgd", "--momentum", 0, "--lr", LR, "--no-shuffle", "--loss",
                         "cross-entropy", "--device", "cpu", "--out", out, "--quiet", *flags)
        self.assertEqual(rc, 0, se)
        with open(os.path.join(out, "metrics.csv"), newline="") as f:
            got_loss = float(list(csv.DictReader(f))[0]["loss"])
        self.assertLess(abs(got_loss - loss), 1e-5 * abs(loss), (got_loss, loss))
        trained = onnx.load(os.path.join(out, f"{kind}.trained.onnx"))
        self.assertEqual([n.op_type for n in trained.graph.node], [n.op_type for n in proto.graph.node])
        got = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in trained.graph.initializer}
        worst = 0.0
        for name, want in after.items():
            w0 = before[name]
            upd_want, upd_got = want - w0, got[name] - w0
            tol = 1e-3 * np.max(np.abs(upd_want)) + 8 * EPS32 * np.max(np.abs(w0))
            err = float(np.max(np.abs(upd_got - upd_want)))
            self.assertGreater(np.max(np.abs(upd_want)), 0, name)  # every tensor gets a gradient
            self.assertLessEqual(err, tol, f"{name}: update differs by {err:.3g} (tolerance {tol:.3g})")
            worst = max(worst, err / np.max(np.abs(upd_want)))
        print(f"\n{kind} {' '.join(flags)}: loss {got_loss:.7f} vs torch {loss:.7f}, worst relative update "
              f"difference {worst:.2e} over {len(after)} tensors")
        return out

    def test_lstm_two_layers_bidirectional_one_step(self):
        self.oracle("lstm")

    def test_gru_bidirectional_linear_before_reset_one_step(self):
        self.oracle("gru")

    def test_lstm_two_gpipe_stages_one_step(self):
        out = self.oracle("lstm", "--gpus", "2", "--schedule", "gpipe")
        with open(os.path.join(out, "partition.json")) as f:
            plan = json.load(f)
        self.assertEqual(len(plan["stages"]), 2)

    def test_stage_models_keep_each_lstm_whole(self):
        """--export-stages: a cut between the two LSTM layers gives stage models whose chain equals
        the trained model in ONNX Runtime; a cut inside an LSTM's steps is refused naming the node."""
        path, _, _, _ = build_case("lstm", self.dir)
        common = [path, "--data", os.path.join(self.dir, "data"), "--steps", 1, "--batch-size", N, "--gpus", 2,
                  "--device", "cpu", "--export-stages", "--quiet"]
        out = os.path.join(self.dir, "between")
        rc, so, se = run(*common, "--split-at", "/rnn/Transpose_1", "--out", out)
        self.assertEqual(rc, 0, se)
        p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "python", "check_stage_models.py"),
                            os.path.join(out, "lstm.trained.onnx"), os.path.join(out, "stages"), "--batch", str(N)],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(os.path.join(out, "partition.json")) as f:
            stage1 = json.load(f)["stages"][1]["nodes"]
        inside = next(n for n in stage1 if n.startswith("/rnn/LSTM_1/d0/t2/"))
        rc, so, se = run(*common, "--split-at", inside, "--out", os.path.join(self.dir, "inside"))
        self.assertEqual(rc, 2, se)
        self.assertIn("node '/rnn/LSTM_1' (LSTM) is split between", se)
        # Refused before any step: nothing trained, no metrics, no trained model.
        self.assertNotIn("done:", so)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "inside", "metrics.csv")))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "inside", "lstm.trained.onnx")))

    def test_unsupported_attributes_exit_2_naming_node_and_attribute(self):
        path, _, _, _ = build_case("gru", self.dir)
        for attr, value in [("clip", 3.0), ("activations", ["Relu", "Tanh", "Relu", "Tanh"])]:
            m = onnx.load(path)
            node = next(n for n in m.graph.node if n.op_type == "GRU")
            node.attribute.append(helper.make_attribute(attr, value))
            bad = os.path.join(self.dir, f"bad_{attr}.onnx")
            onnx.save(m, bad)
            rc, so, se = run(bad, "--plan-only", "--batch-size", 4, "--out", os.path.join(self.dir, "r_" + attr))
            self.assertEqual(rc, 2, se)
            self.assertEqual(len(se.strip().splitlines()), 1, se)
            self.assertIn(f"node '{node.name}' (GRU)", se)
            self.assertIn(f"'{attr}'", se)


if __name__ == "__main__":
    unittest.main()
