"""Fusion passes (importer/fuse.h, issue 18 item 3): a model trains the same with a pass as without
it (--no-fusion), to 1e-6 over a few steps, the pass really rewrote the graph (fewer nodes), and the
exported model is still the source graph with the trained weights.
LayerNorm: PyTorch 1.13's own opset-13 spelling (a 2-layer Transformer encoder, 4 LayerNorms; a
GPT-style decoder, pre-LN, 5 LayerNorms, also on 2 pipeline stages), and near misses that must stay
unfused (exponent 4, the centred value read by a third node).
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_fusions.py"""
import csv
import os
import re
import subprocess
import sys
import tempfile
import unittest
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
TOL = 1e-6


def run(*args):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def export_peer_model(name, path):
    """tools/bench/peer_models.py's module, exported by this machine's torch as the benchmark does."""
    import torch
    import peer_models
    m = peer_models.build(name)
    x, y = peer_models.make_batch(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, x, path, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return x.numpy(), y.numpy().astype(np.int64)


def layernorm_chain(path, power=2.0, extra_reader=False):
    """x [N, 4, 8] -> LayerNorm spelled out -> mean over tokens -> MatMul -> logits [N, 3]."""
    rng = np.random.default_rng(3)
    w = {"gamma": 1 + 0.1 * rng.standard_normal(8), "beta": 0.1 * rng.standard_normal(8),
         "W": 0.4 * rng.standard_normal((8, 3)), "p": np.array([power]), "eps": np.array(1e-5)}
    N = helper.make_node
    nodes = [N("ReduceMean", ["x"], ["mu"], axes=[-1]), N("Sub", ["x", "mu"], ["d"]), N("Pow", ["d", "p"], ["d2"]),
             N("ReduceMean", ["d2"], ["var"], axes=[-1]), N("Add", ["var", "eps"], ["ve"]), N("Sqrt", ["ve"], ["sd"]),
             N("Div", ["d", "sd"], ["n"]), N("Mul", ["gamma", "n"], ["ng"]), N("Add", ["ng", "beta"], ["y0"])]
    last = "y0"
    if extra_reader:
        nodes.append(N("Add", ["y0", "d"], ["y1"]))
        last = "y1"
    nodes += [N("ReduceMean", [last], ["pooled"], axes=[1], keepdims=0), N("MatMul", ["pooled", "W"], ["logits"])]
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return len(nodes)


class LayerNormFusionTest(unittest.TestCase):
    STEPS = 6

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-fusions-")
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def data(self, name, x, y, copies):
        d = os.path.join(self.dir, name + ".data")
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "x.npy"), np.concatenate([x] * copies))
        np.save(os.path.join(d, "y.npy"), np.concatenate([y] * copies))
        return d

    def train(self, model, data, batch, tag, *extra):
        out = os.path.join(self.dir, tag)
        rc, so, se = run(model, "--data", data, "--no-shuffle", "--val-split", "0", "--steps", self.STEPS, "--batch-size", batch,
                         "--lr", 0.05, "--momentum", 0.9, "--out", out, "--overwrite", *extra)
        self.assertEqual(rc, 0, f"{tag}: exit {rc}: {se or so}")
        nodes = int(re.search(r"\), (\d+) nodes", so).group(1))
        with open(os.path.join(out, "metrics.csv"), newline="") as f:
            losses = [float(r["loss"]) for r in csv.DictReader(f)]
        stem = os.path.splitext(os.path.basename(model))[0]
        trained = onnx.load(os.path.join(out, stem + ".trained.onnx"))
        return nodes, losses, trained

    def compare(self, model, data, batch, fused_layernorms, *extra, pass_name="layernorm", per_rewrite=8):
        tag = os.path.basename(model) + "".join(extra) + "." + pass_name
        n_f, l_f, m_f = self.train(model, data, batch, tag + ".fused", *extra)
        n_u, l_u, m_u = self.train(model, data, batch, tag + ".unfused", "--no-fusion", pass_name, *extra)
        self.assertEqual(n_u - n_f, per_rewrite * fused_layernorms, f"nodes with / without the {pass_name} fusion")
        self.assertTrue(np.isfinite(l_f).all(), l_f)
        self.assertLess(np.mean(l_f[-2:]), np.mean(l_f[:2]), f"loss does not fall: {l_f}")
        np.testing.assert_allclose(l_f, l_u, rtol=TOL, atol=TOL, err_msg="per-step losses, fused vs unfused")
        if os.environ.get("PIPETRAIN_FUSION_VERBOSE"):
            print(f"\n{tag}: max |loss diff| {np.max(np.abs(np.subtract(l_f, l_u))):.2e}", file=sys.stderr)
        src = onnx.load(model)
        for m in (m_f, m_u):  # the exported model: the source's nodes, new initializer values
            self.assertEqual([n.op_type for n in m.graph.node], [n.op_type for n in src.graph.node])
        w_f = {t.name: numpy_helper.to_array(t) for t in m_f.graph.initializer}
        w_u = {t.name: numpy_helper.to_array(t) for t in m_u.graph.initializer}
        w_0 = {t.name: numpy_helper.to_array(t) for t in src.graph.initializer}
        self.assertEqual(sorted(w_f), sorted(w_u))
        moved = 0
        for k, v in w_u.items():
            np.testing.assert_allclose(w_f[k], v, rtol=TOL, atol=TOL, err_msg=f"trained '{k}', fused vs unfused")
            moved += not np.array_equal(v, w_0[k])
        self.assertGreaterEqual(moved, 3, "trained initializers")
        return l_f

    def test_transformer_encoder_exported_by_pytorch(self):
        path = os.path.join(self.dir, "transformer.onnx")
        x, y = export_peer_model("transformer", path)
        self.compare(path, self.data("transformer", x[:8], y[:8], self.STEPS), 8, 4)

    def test_gpt_decoder_on_one_and_two_stages(self):
        path = os.path.join(self.dir, "gpt.onnx")
        x, y = export_peer_model("gpt", path)
        data = self.data("gpt", x[:8], y[:8], 2 * self.STEPS)
        self.compare(path, data, 8, 5)
        self.compare(path, data, 8, 5, "--gpus", "2")

    def test_hand_written_chain_and_near_misses(self):
        rng = np.random.default_rng(5)
        x = rng.standard_normal((8, 4, 8)).astype(np.float32)
        y = rng.integers(0, 3, 8).astype(np.int64)
        data = self.data("chain", x, y, self.STEPS)
        path = os.path.join(self.dir, "chain.onnx")
        layernorm_chain(path)
        self.compare(path, data, 8, 1)
        for tag, kw in (("pow4", {"power": 4.0}), ("reader", {"extra_reader": True})):
            p = os.path.join(self.dir, f"chain_{tag}.onnx")
            total = layernorm_chain(p, **kw)
            nodes, losses, _ = self.train(p, data, 8, tag)
            self.assertEqual(nodes, total, f"{tag}: must stay unfused")
            self.assertTrue(np.isfinite(losses).all())

    def test_unknown_pass_refused(self):
        rc, so, se = run(os.path.join(self.dir, "none.onnx"), "--no-fusion", "layernorm,attention")
        self.assertEqual(rc, 2)
        self.assertIn("--no-fusion: unknown pass 'attention' (known: layernorm, all)", se)


if __name__ == "__main__":
    unittest.main()
