"""Fusion passes (importer/fuse.h): a model trains the same with a pass as without
it (--no-fusion), to 1e-6 over a few steps, the pass really rewrote the graph (fewer nodes, the
`fusions:` line counts them), and the exported model is still the source graph with the trained
weights.
LayerNorm: PyTorch 1.13's own opset-13 spelling (a 2-layer Transformer encoder, 4 LayerNorms; a
GPT-style decoder, pre-LN, 5 LayerNorms, also on 2 pipeline stages), and near misses that must stay
unfused (exponent 4, the centred value read by a third node).
GELU: the GPT's two as PyTorch spells them at opset 13 (on 1 and 2 stages), hand-written Div and Mul
forms, and near misses (another divisor, Erf's output read by another node).
Attention: nn.TransformerEncoderLayer's nn.MultiheadAttention (Div on Q; at opsets 13, 17 and,
upgraded, 18 and 21; with a padding mask computed from the tokens: torch's baddbmm spelling), the
GPT's hand-written causal attention (Mul on the scores, masked_fill's Where; also on 2 stages), a
hand-written graph with Div on the scores and a constant additive mask, the same and the padded
encoder with training-mode Dropout on the probabilities (fused: the same masks drawn), and near
misses that must stay unfused (the scores read by another node, a trainable mask).
Identity Dropout: the Transformer encoder's six ratio-0 Dropouts (PyTorch's training-mode export of
dropout=0.0) removed, bit-identical training; a hand-written chain with ratio 0 and training mode off
(removed) and near misses that must stay (ratio 0.25, the mask read by another node, the Dropout's
output a graph output).
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_fusions.py"""
import csv
import json
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
# The GPT on 2 stages, cut where both sides of a comparison have the same node (the second block's qkv
# weight): left to the partitioner, the plans of the fused and the unfused graph may cut at different
# places (inside the spelled-out LayerNorm), and under 1F1B the cut decides the weights each layer sees.
GPT_TWO_STAGES = ("--gpus", 2, "--split-at", "/blocks/blocks.1/qkv/Transpose")


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


def export_torch_module(m, x, path, opset):
    """A torch module exported in training mode; opsets 18 and 21 by tools/bench/zoo.py's upgrade of
    the opset-17 export (torch 1.13 writes at most 17)."""
    import torch
    import zoo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, x, path, opset_version=min(opset, 17), training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    if opset > 17:
        onnx.save(zoo.upgrade(onnx.load(path), opset), path)


def attention_chain(path, variant="div_scores"):
    """x [N, 4, 8] -> q, k, v projections -> softmax(scores + mask) @ v -> mean over tokens -> MatMul ->
    logits [N, 3]. variant: div_scores (Div on the scores, constant additive causal mask), mul_q (Mul on
    Q, no mask), reader (the scaled scores also read by another node), dropout (Dropout on the
    probabilities, training mode). The mask is an initializer: trainable unless --freeze'd."""
    rng = np.random.default_rng(7)
    causal = np.triu(np.full((4, 4), -1e4), 1)
    w = {"Wq": 0.5 * rng.standard_normal((8, 8)), "Wk": 0.5 * rng.standard_normal((8, 8)),
         "Wv": 0.5 * rng.standard_normal((8, 8)), "W": 0.4 * rng.standard_normal((8, 3)),
         "c": np.array(np.sqrt(8.0)), "r": np.array(1 / np.sqrt(8.0)), "mask": causal}
    N = helper.make_node
    nodes = [N("MatMul", ["x", "Wq"], ["q"]), N("MatMul", ["x", "Wk"], ["k"]), N("MatMul", ["x", "Wv"], ["v"]),
             N("Transpose", ["k"], ["kt"], perm=[0, 2, 1])]
    if variant == "mul_q":
        nodes += [N("Mul", ["q", "r"], ["qs"]), N("MatMul", ["qs", "kt"], ["s"]), N("Softmax", ["s"], ["p"], axis=-1)]
    else:
        nodes += [N("MatMul", ["q", "kt"], ["s0"]), N("Div", ["s0", "c"], ["s1"]), N("Add", ["s1", "mask"], ["s"]),
                  N("Softmax", ["s"], ["p"], axis=-1)]
    probs = "p"
    inits = dict(w)
    if variant == "dropout":
        nodes += [N("Constant", [], ["ratio"], value=numpy_helper.from_array(np.array(0.25, np.float32))),
                  N("Constant", [], ["train"], value=numpy_helper.from_array(np.array(True))),
                  N("Dropout", ["p", "ratio", "train"], ["pd"])]
        probs = "pd"
    nodes.append(N("MatMul", [probs, "v"], ["o"]))
    last = "o"
    if variant == "reader":
        nodes += [N("ReduceMean", ["s1"], ["sm"], axes=[-1]), N("Add", ["o", "sm"], ["o2"])]
        last = "o2"
    nodes += [N("ReduceMean", [last], ["pooled"], axes=[1], keepdims=0), N("MatMul", ["pooled", "W"], ["logits"])]
    tensors = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()]
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], tensors)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return len(nodes)


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


class FusionCase(unittest.TestCase):
    """Training with and without a pass: the helpers both suites share."""
    STEPS = 6
    # Every run of a suite but the epilogue's turns the epilogue pass off, so that node counts and
    # near misses measure the suite's own pass alone (the epilogue absorbs the Add of a MatMul and
    # the Gelu the GELU pass makes).
    ISOLATE = "epilogue"

    def isolated(self, extra):
        extra = [str(e) for e in extra]
        # Two runs compared bit for bit must cut the model alike: an automatic split planned from the
        # calibration cache could differ between them when another test rewrites the cache in
        # between (ctest -j runs the calibration tests beside these), and 1F1B's weights depend on it.
        if "--gpus" in extra and "--split-at" not in extra:
            extra.append("--no-calibrate")
        if not self.ISOLATE:
            return extra
        if "--no-fusion" in extra:
            i = extra.index("--no-fusion") + 1
            extra[i] += "," + self.ISOLATE
            return extra
        return extra + ["--no-fusion", self.ISOLATE]

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
                         "--lr", 0.05, "--momentum", 0.9, "--out", out, "--overwrite", *self.isolated(extra))
        self.assertEqual(rc, 0, f"{tag}: exit {rc}: {se or so}")
        nodes = int(re.search(r"\), (\d+) nodes", so).group(1))
        fl = re.search(r"^fusions: (\d+) LayerNorm, (\d+) attention, (\d+) GELU", so, re.M)
        self.fusions = (int(fl.group(1)), int(fl.group(2)), int(fl.group(3))) if fl else (0, 0, 0)
        dr = re.search(r"^fusions: .*, (\d+) identity Dropout removed", so, re.M)
        self.dropouts = int(dr.group(1)) if dr else 0
        ep = re.search(r"^fusions: .*, (\d+) bias/activation epilogues", so, re.M)
        self.epilogues = int(ep.group(1)) if ep else 0
        with open(os.path.join(out, "metrics.csv"), newline="") as f:
            losses = [float(r["loss"]) for r in csv.DictReader(f)]
        stem = os.path.splitext(os.path.basename(model))[0]
        trained = onnx.load(os.path.join(out, stem + ".trained.onnx"))
        return nodes, losses, trained

    def compare(self, model, data, batch, fused_layernorms, *extra, pass_name="layernorm", per_rewrite=8):
        tag = (os.path.basename(model) + "".join(map(str, extra))).replace("/", "_") + "." + pass_name
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


class LayerNormFusionTest(FusionCase):
    def test_transformer_encoder_exported_by_pytorch(self):
        path = os.path.join(self.dir, "transformer.onnx")
        x, y = export_peer_model("transformer", path)
        self.compare(path, self.data("transformer", x[:8], y[:8], self.STEPS), 8, 4)

    def test_gpt_decoder_on_one_and_two_stages(self):
        path = os.path.join(self.dir, "gpt.onnx")
        x, y = export_peer_model("gpt", path)
        data = self.data("gpt", x[:8], y[:8], 2 * self.STEPS)
        self.compare(path, data, 8, 5)
        self.compare(path, data, 8, 5, *GPT_TWO_STAGES)

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
        rc, so, se = run(os.path.join(self.dir, "none.onnx"), "--no-fusion", "layernorm,attention,gelu,bias")
        self.assertEqual(rc, 2)
        self.assertIn("--no-fusion: unknown pass 'bias' (known: layernorm, attention, gelu, dropout, epilogue, update, all)", se)


def gelu_chain(path, sqrt2=float(np.sqrt(2.0)), mul_form=False, extra_reader=False):
    """x [N, 4, 8] -> MatMul W1, Add b1 -> GELU spelled out as PyTorch writes it below opset 20 (Div sqrt 2, or
    Mul 1/sqrt 2 with mul_form; Erf, Add 1, Mul h, Mul 0.5) -> mean over tokens -> MatMul W -> logits [N, 3].
    sqrt2: the divisor (another value must stay unfused); extra_reader: Erf's output also read elsewhere."""
    rng = np.random.default_rng(11)
    w = {"W1": 0.6 * rng.standard_normal((8, 8)), "b1": 0.2 * rng.standard_normal(8), "W": 0.4 * rng.standard_normal((8, 3)),
         "s": np.array(1 / sqrt2 if mul_form else sqrt2), "one": np.array(1.0), "half": np.array(0.5)}
    N = helper.make_node
    nodes = [N("MatMul", ["x", "W1"], ["h0"]), N("Add", ["h0", "b1"], ["h"]), N("Mul" if mul_form else "Div", ["h", "s"], ["hs"]),
             N("Erf", ["hs"], ["e"]), N("Add", ["e", "one"], ["e1"]), N("Mul", ["h", "e1"], ["he"]),
             N("Mul", ["he", "half"], ["g"])]
    last = "g"
    if extra_reader:
        nodes.append(N("Add", ["g", "e"], ["g2"]))
        last = "g2"
    nodes += [N("ReduceMean", [last], ["pooled"], axes=[1], keepdims=0), N("MatMul", ["pooled", "W"], ["logits"])]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return len(nodes)


class GeluFusionTest(FusionCase):
    """Div sqrt 2 (or Mul 1/sqrt 2), Erf, Add 1, Mul x, Mul 0.5 -> Gelu: 4 nodes fewer each."""

    def gelu(self, path, data, batch, fused, *extra):
        self.compare(path, data, batch, fused, *extra, pass_name="gelu", per_rewrite=4)
        self.train(path, data, batch, "count", *extra)
        self.assertEqual(self.fusions[2], fused, "GELUs on the `fusions:` line")

    def test_gpt_on_one_and_two_stages(self):
        path = os.path.join(self.dir, "gpt.gelu.onnx")
        x, y = export_peer_model("gpt", path)
        data = self.data("gpt.gelu", x[:8], y[:8], 2 * self.STEPS)
        self.gelu(path, data, 8, 2)
        self.gelu(path, data, 8, 2, *GPT_TWO_STAGES)

    def test_hand_written_forms_and_near_misses(self):
        rng = np.random.default_rng(12)
        x = rng.standard_normal((8, 4, 8)).astype(np.float32)
        y = rng.integers(0, 3, 8).astype(np.int64)
        data = self.data("gelu_chain", x, y, self.STEPS)
        for tag, kw in (("div", {}), ("mul", {"mul_form": True})):
            with self.subTest(form=tag):
                p = os.path.join(self.dir, f"gelu_{tag}.onnx")
                gelu_chain(p, **kw)
                self.gelu(p, data, 8, 1)
        for tag, kw in (("sqrt3", {"sqrt2": float(np.sqrt(3.0))}), ("reader", {"extra_reader": True})):
            with self.subTest(near_miss=tag):
                p = os.path.join(self.dir, f"gelu_{tag}.onnx")
                total = gelu_chain(p, **kw)
                nodes, losses, _ = self.train(p, data, 8, tag)
                self.assertEqual(nodes, total, f"{tag}: must stay unfused")
                self.assertEqual(self.fusions[2], 0)
                self.assertTrue(np.isfinite(losses).all())


class AttentionFusionTest(FusionCase):
    def attention(self, path, data, batch, fused, per_rewrite, *extra):
        self.compare(path, data, batch, fused, *extra, pass_name="attention", per_rewrite=per_rewrite)
        self.train(path, data, batch, "count", *extra)
        self.assertEqual(self.fusions[1], fused, "attentions on the `fusions:` line")

    def test_transformer_encoder_opsets(self):
        import peer_models
        x, y = peer_models.make_batch("transformer")
        data = self.data("transformer", x.numpy()[:8], y.numpy()[:8].astype(np.int64), self.STEPS)
        for opset in (13, 17, 18, 21):
            with self.subTest(opset=opset):
                path = os.path.join(self.dir, f"transformer.op{opset}.onnx")
                export_torch_module(peer_models.build("transformer"), x, path, opset)
                # Div on Q, MatMul, Softmax go; the second MatMul becomes the FusedAttention.
                self.attention(path, data, 8, 2, 3)

    def padded_encoder(self, name, dropout, seed):
        """export_models' Transformer classifier (its padding mask computed from the tokens), exported
        in training mode with `dropout`, and 8 samples of data."""
        import torch
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import export_models as em
        x = em.example_input("transformer", batch=8, seed=seed)
        y = torch.randint(0, 5, (8,), generator=torch.Generator().manual_seed(seed))
        path = os.path.join(self.dir, name + ".onnx")
        export_torch_module(em.build_module("transformer", dropout=dropout), x, path, 13)
        return path, self.data(name, x.numpy(), y.numpy().astype(np.int64), self.STEPS)

    def test_padding_mask_computed_from_tokens(self):
        path, data = self.padded_encoder("transformer_padded", 0.0, 4)
        # baddbmm: Div on Q, MatMul, Mul by beta, Add of the mask (times alpha), Softmax.
        self.attention(path, data, 8, 2, 5)

    def test_padding_mask_and_attention_dropout(self):
        # The padded encoder exported with dropout 0.1 (training mode): a Dropout on each layer's
        # probabilities, fused with the attention (its masks drawn again in the backward), and the
        # other Dropouts of the layers (0.1, not identities) left as they are.
        path, data = self.padded_encoder("transformer_dropout", 0.1, 5)
        self.assertIn("Dropout", [n.op_type for n in onnx.load(path).graph.node])
        # baddbmm as above, and the Dropout: 6 nodes go per attention.
        self.attention(path, data, 8, 2, 6)

    def test_gpt_causal_on_one_and_two_stages(self):
        import peer_models
        x, y = peer_models.make_batch("gpt")
        data = self.data("gpt", x.numpy()[:8], y.numpy()[:8].astype(np.int64), 2 * self.STEPS)
        for opset in (13, 18):
            path = os.path.join(self.dir, f"gpt.op{opset}.onnx")
            export_torch_module(peer_models.build("gpt"), x, path, opset)
            with self.subTest(opset=opset):
                self.attention(path, data, 8, 2, 4)  # MatMul, Mul, Where, Softmax go
        self.attention(os.path.join(self.dir, "gpt.op13.onnx"), data, 8, 2, 4, *GPT_TWO_STAGES)

    def test_internal_op_in_a_model_refused(self):
        """FusedAttention is the pass's own op: a model that writes it (default domain at 13 or 18, or
        the internal domain) is refused, naming it (exit 2)."""
        for opset, domain in ((13, ""), (18, ""), (13, "pipetrain")):
            node = helper.make_node("FusedAttention", ["q", "k", "v"], ["y"], domain=domain)
            io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, 4]) for n in "qkv"]
            g = helper.make_graph([node], "g", io, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 4])])
            ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
            m = helper.make_model(g, opset_imports=ops)
            m.ir_version = 8 if opset < 18 else 9
            path = os.path.join(self.dir, f"internal_{opset}{domain}.onnx")
            onnx.save(m, path)
            rc, so, se = run(path, "--steps", 1, "--out", os.path.join(self.dir, "internal"), "--overwrite", "--quiet")
            self.assertEqual(rc, 2, f"opset {opset} domain '{domain}': {se or so}")
            self.assertIn("FusedAttention", se)

    def test_hand_written_and_near_misses(self):
        rng = np.random.default_rng(9)
        x = rng.standard_normal((8, 4, 8)).astype(np.float32)
        y = rng.integers(0, 3, 8).astype(np.int64)
        data = self.data("attn_chain", x, y, self.STEPS)
        # The mask is an initializer, which training would update: --freeze makes it a constant.
        frozen = ("--freeze", "mask")
        # dropout: a training-mode Dropout (0.25) on the probabilities is fused too; the fused op draws
        # the unfused Dropout's masks (its seed, the step), so the runs agree to 1e-6 as the others.
        for variant, per_rewrite in (("div_scores", 4), ("mul_q", 3), ("dropout", 5)):
            with self.subTest(variant=variant):
                path = os.path.join(self.dir, f"attn_{variant}.onnx")
                attention_chain(path, variant)
                self.attention(path, data, 8, 1, per_rewrite, *frozen)
        for variant, extra in (("reader", frozen), ("div_scores", ())):
            with self.subTest(variant=variant, extra=extra):
                path = os.path.join(self.dir, f"attn_{variant}.onnx")
                attention_chain(path, variant)
                nodes, losses, _ = self.train(path, data, 8, variant + "".join(extra), *extra)
                self.assertEqual(self.fusions, (0, 0, 0), f"{variant} {extra}: must stay unfused")
                unfused, _, _ = self.train(path, data, 8, variant + "".join(extra) + ".off", "--no-fusion", "all", *extra)
                self.assertEqual(nodes, unfused)
                self.assertTrue(np.isfinite(losses).all())


def dropout_chain(path, ratio=0.0, training=True, mask_reader=False, output=False):
    """x [N, 4, 8] -> MatMul W1 -> Dropout(ratio, training_mode) -> mean over tokens -> MatMul W -> logits
    [N, 3]. mask_reader: the mask also feeds the loss path (Cast, Add); output: the Dropout's output is
    a second graph output."""
    rng = np.random.default_rng(13)
    w = {"W1": 0.6 * rng.standard_normal((8, 8)), "b1": 0.2 * rng.standard_normal(8), "W": 0.4 * rng.standard_normal((8, 3))}
    N = helper.make_node
    nodes = [N("Constant", [], ["ratio"], value=numpy_helper.from_array(np.array(ratio, np.float32))),
             N("Constant", [], ["train"], value=numpy_helper.from_array(np.array(training))),
             N("MatMul", ["x", "W1"], ["h0"]), N("Add", ["h0", "b1"], ["h"]), N("Dropout", ["h", "ratio", "train"], ["d", "mask"])]
    last = "d"
    if mask_reader:
        nodes += [N("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT), N("Add", ["d", "maskf"], ["d2"])]
        last = "d2"
    nodes += [N("ReduceMean", [last], ["pooled"], axes=[1], keepdims=0), N("MatMul", ["pooled", "W"], ["logits"])]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])]
    if output:
        outs.append(helper.make_tensor_value_info("d", TensorProto.FLOAT, ["N", 4, 8]))
    g = helper.make_graph(nodes, "dropout", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])], outs,
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


class IdentityDropoutTest(FusionCase):
    """A Dropout with ratio 0 or training mode off passes its input through: removed, 1 node fewer each."""

    def removed(self, path, data, batch, count, *extra):
        losses = self.compare(path, data, batch, count, *extra, pass_name="dropout", per_rewrite=1)
        self.train(path, data, batch, "count", *extra)
        self.assertEqual(self.dropouts, count, "identity Dropouts on the `fusions:` line")
        return losses

    def test_transformer_encoder_exported_by_pytorch(self):
        path = os.path.join(self.dir, "transformer.dropout.onnx")
        x, y = export_peer_model("transformer", path)
        data = self.data("transformer.dropout", x[:8], y[:8], 2 * self.STEPS)
        # The same bits, not only 1e-6: the Dropouts multiplied by 1 and passed dY through.
        fused = self.removed(path, data, 8, 6)
        _, plain, _ = self.train(path, data, 8, "plain", "--no-fusion", "dropout")
        self.assertEqual(fused, plain)
        self.removed(path, data, 8, 6, "--gpus", "2")

    def test_hand_written_and_near_misses(self):
        rng = np.random.default_rng(14)
        x = rng.standard_normal((8, 4, 8)).astype(np.float32)
        y = rng.integers(0, 3, 8).astype(np.int64)
        data = self.data("dropout_chain", x, y, self.STEPS)
        for tag, kw in (("ratio0", {}), ("eval", {"ratio": 0.5, "training": False})):
            with self.subTest(removed=tag):
                p = os.path.join(self.dir, f"dropout_{tag}.onnx")
                dropout_chain(p, **kw)
                self.removed(p, data, 8, 1)
        for tag, kw in (("ratio", {"ratio": 0.25}), ("output", {"output": True})):
            with self.subTest(kept=tag):
                p = os.path.join(self.dir, f"dropout_{tag}.onnx")
                dropout_chain(p, **kw)
                nodes, losses, _ = self.train(p, data, 8, tag)
                self.assertEqual(self.dropouts, 0, f"{tag}: must stay")
                kept, _, _ = self.train(p, data, 8, tag + ".off", "--no-fusion", "dropout")
                self.assertEqual(nodes, kept)
                self.assertTrue(np.isfinite(losses).all())
        # A model that reads the mask trains with the Dropout kept (and then has no inference form:
        # exit 2 after training, at the export).
        p = os.path.join(self.dir, "dropout_mask.onnx")
        dropout_chain(p, mask_reader=True)
        counts = []
        for extra in ((), ("--no-fusion", "dropout")):
            rc, so, se = run(p, "--data", data, "--steps", 2, "--batch-size", 8, "--out", os.path.join(self.dir, "mask"),
                             "--overwrite", *extra)
            self.assertEqual(rc, 2, se or so)
            self.assertIn("reads 'mask', which only a training-mode node computes", se)
            self.assertNotRegex(so, r"[1-9]\d* identity Dropout removed")
            self.assertIn("step 2/2", so)
            counts.append(int(re.search(r"\), (\d+) nodes", so).group(1)))
        self.assertEqual(counts[0], counts[1])



def epilogue_chain(path):
    """x [N, 1, 8, 8] -> Conv 3x3 pad 1 with bias -> Relu -> Flatten -> Gemm (transB, C) -> Relu -> MatMul W3, Add
    b3 [1, 16] -> GELU spelled out as PyTorch writes it below opset 20 -> MatMul W4, Add b4 -> logits [N, 3]. Four
    epilogues (Conv+Relu, Gemm+Relu, MatMul+Add+Gelu after the GELU pass, MatMul+Add): 5 nodes fewer."""
    rng = np.random.default_rng(21)
    w = {"Wc": 0.4 * rng.standard_normal((4, 1, 3, 3)), "Bc": 0.1 * rng.standard_normal(4),
         "W2": 0.15 * rng.standard_normal((24, 256)), "B2": 0.1 * rng.standard_normal(24),
         "W3": 0.3 * rng.standard_normal((24, 16)), "B3": 0.1 * rng.standard_normal((1, 16)),
         "W4": 0.3 * rng.standard_normal((16, 3)), "B4": 0.1 * rng.standard_normal(3),
         "s": np.array(np.sqrt(2.0)), "one": np.array(1.0), "half": np.array(0.5)}
    N = helper.make_node
    nodes = [N("Conv", ["x", "Wc", "Bc"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             N("Relu", ["c"], ["r"], name="relu_c"), N("Flatten", ["r"], ["f"], name="flat"),
             N("Gemm", ["f", "W2", "B2"], ["g"], name="fc2", transB=1), N("Relu", ["g"], ["h"], name="relu2"),
             N("MatMul", ["h", "W3"], ["m3"], name="fc3"), N("Add", ["m3", "B3"], ["a3"], name="bias3"),
             N("Div", ["a3", "s"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["e1"]),
             N("Mul", ["a3", "e1"], ["ae"]), N("Mul", ["ae", "half"], ["gelu"]),
             N("MatMul", ["gelu", "W4"], ["m4"], name="fc4"), N("Add", ["B4", "m4"], ["logits"], name="bias4")]
    g = helper.make_graph(nodes, "epilogue", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


class EpilogueFusionTest(FusionCase):
    """MatMul + Add of a bias [+ Relu / Gelu], Gemm + Relu / Gelu, Conv + Relu / Gelu -> one fused node each. The
    fused kernels compute the separate ops' arithmetic, so training is compared bit for bit, not to 1e-6."""
    ISOLATE = None

    def exact(self, model, data, batch, epilogues, removed, *extra):
        tag = (os.path.basename(model) + "".join(map(str, extra))).replace("/", "_") + ".epilogue"
        n_f, l_f, m_f = self.train(model, data, batch, tag + ".fused", *extra)
        self.assertEqual(self.epilogues, epilogues, "epilogues on the `fusions:` line")
        n_u, l_u, m_u = self.train(model, data, batch, tag + ".unfused", "--no-fusion", "epilogue", *extra)
        self.assertEqual(self.epilogues, 0)
        self.assertEqual(n_u - n_f, removed, "nodes with / without the epilogue fusion")
        self.assertTrue(np.isfinite(l_f).all(), l_f)
        self.assertLess(np.mean(l_f[-2:]), np.mean(l_f[:2]), f"loss does not fall: {l_f}")
        self.assertEqual(l_f, l_u, "per-step losses, fused vs unfused")
        src = onnx.load(model)
        self.assertEqual([n.op_type for n in m_f.graph.node], [n.op_type for n in src.graph.node])
        w_f = {t.name: numpy_helper.to_array(t) for t in m_f.graph.initializer}
        w_u = {t.name: numpy_helper.to_array(t) for t in m_u.graph.initializer}
        self.assertEqual(sorted(w_f), sorted(w_u))
        for k in w_u:
            self.assertTrue(np.array_equal(w_f[k], w_u[k]), f"trained '{k}', fused vs unfused")
        return w_f

    def test_hand_written_chain(self):
        rng = np.random.default_rng(22)
        x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
        y = rng.integers(0, 3, 8).astype(np.int64)
        data = self.data("epilogue_chain", x, y, 2 * self.STEPS)
        path = os.path.join(self.dir, "epilogue_chain.onnx")
        epilogue_chain(path)
        self.exact(path, data, 8, 4, 5)
        self.exact(path, data, 8, 4, 5, "--gpus", 2)

    def test_models_exported_by_pytorch(self):
        # Transformer: 6 Linear layers on tokens (MatMul + Add), 2 of them + Relu; GPT: 8, 2 of them +
        # GELU (fused first by the GELU pass); LeNet-BN: its 2 hidden Gemm + Relu and 2 BatchNormalization
        # + Relu; the small CNN: 2 BatchNormalization + Relu.
        for name, epilogues, removed in (("transformer", 6, 8), ("gpt", 8, 10), ("lenet_bn", 4, 4), ("small_cnn", 2, 2)):
            with self.subTest(model=name):
                path = os.path.join(self.dir, f"{name}.epilogue.onnx")
                x, y = export_peer_model(name, path)
                data = self.data(name + ".epilogue", x[:8], y[:8], 2 * self.STEPS)
                self.exact(path, data, 8, epilogues, removed)
                if name == "gpt":
                    self.exact(path, data, 8, epilogues, removed, *GPT_TWO_STAGES)

    def test_split_at_keeps_the_node_it_names(self):
        model = os.path.join(ROOT, "models", "digits_mlp.onnx")
        data = os.path.join(ROOT, "models", "digits", "train")
        # /0/Gemm -> /1/Relu -> /2/Gemm -> /3/Relu -> /4/Gemm: a cut at the second Relu keeps it a node.
        self.exact(model, data, 16, 2, 2, "--gpus", 2, "--split-at", "/2/Gemm")
        self.exact(model, data, 16, 1, 1, "--gpus", 2, "--split-at", "/3/Relu")

    def test_bf16_fused_equals_unfused(self):
        path = os.path.join(self.dir, "gpt.epilogue.bf16.onnx")
        x, y = export_peer_model("gpt", path)
        data = self.data("gpt.epilogue.bf16", x[:8], y[:8], 2 * self.STEPS)
        rc, so, se = run(path, "--data", data, "--steps", 1, "--batch-size", 8, "--precision", "bf16",
                         "--out", os.path.join(self.dir, "bf16probe"), "--overwrite")
        if rc == 2 and "lacks avx512_bf16" in se:
            self.skipTest(se.strip())
        self.assertEqual(rc, 0, se or so)
        self.exact(path, data, 8, 8, 10, "--precision", "bf16")


def left_weight_chain(path):
    """x [N, 8] -> MatMul W1 [8, 16] -> Relu -> Transpose -> MatMul(W2 [3, 16], .) -> Transpose -> logits [N, 3].
    W2 is the left operand, so its backward makes dW2 first and then reads W2 for the input's gradient: an
    update right behind dW2's producer would change what that gradient reads."""
    rng = np.random.default_rng(31)
    w = {"W1": 0.3 * rng.standard_normal((8, 16)), "W2": 0.3 * rng.standard_normal((3, 16))}
    N = helper.make_node
    nodes = [N("MatMul", ["x", "W1"], ["h"], name="fc1"), N("Relu", ["h"], ["r"], name="relu"),
             N("Transpose", ["r"], ["rt"], name="t1", perm=[1, 0]), N("MatMul", ["W2", "rt"], ["yt"], name="fc2"),
             N("Transpose", ["yt"], ["logits"], name="t2", perm=[1, 0])]
    g = helper.make_graph(nodes, "left", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


class UpdateFusionTest(FusionCase):
    """The optimizer update inside the backward (--no-fusion update turns it off): each update runs right behind
    its gradient's producer and the last reader of its weight, on the stages whose backward runs on the master
    weights. The arithmetic is the same, so training is compared bit for bit, and the gradients leave the
    plan's memory (partition.json's update_in_backward, memory_bytes)."""
    ISOLATE = None

    def plan(self, tag):
        with open(os.path.join(self.dir, tag, "partition.json")) as f:
            return json.load(f)["stages"]

    def exact(self, model, data, batch, *extra):
        tag = (os.path.basename(model) + "".join(map(str, extra))).replace("/", "_") + ".update"
        _, l_f, m_f = self.train(model, data, batch, tag + ".fused", *extra)
        _, l_u, m_u = self.train(model, data, batch, tag + ".unfused", "--no-fusion", "update", *extra)
        self.assertTrue(np.isfinite(l_f).all(), l_f)
        self.assertLess(np.mean(l_f[-2:]), np.mean(l_f[:2]), f"loss does not fall: {l_f}")
        self.assertEqual(l_f, l_u, "per-step losses, update in the backward vs after it")
        w_f = {t.name: numpy_helper.to_array(t) for t in m_f.graph.initializer}
        w_u = {t.name: numpy_helper.to_array(t) for t in m_u.graph.initializer}
        self.assertEqual(sorted(w_f), sorted(w_u))
        for k in w_u:
            self.assertTrue(np.array_equal(w_f[k], w_u[k]), f"trained '{k}', update in the backward vs after it")
        fused, unfused = self.plan(tag + ".fused"), self.plan(tag + ".unfused")
        for f, u in zip(fused, unfused):
            self.assertFalse(u["update_in_backward"])
            if f["update_in_backward"]:
                self.assertEqual(f["memory_bytes"], u["memory_bytes"] - f["param_bytes"] + f["transient_gradient_bytes"])
        return fused

    def test_weight_read_after_its_gradient(self):
        rng = np.random.default_rng(32)
        x = rng.standard_normal((16, 8)).astype(np.float32)
        y = rng.integers(0, 3, 16).astype(np.int64)
        data = self.data("left_chain", x, y, self.STEPS)
        path = os.path.join(self.dir, "left_chain.onnx")
        left_weight_chain(path)
        self.assertEqual([s["update_in_backward"] for s in self.exact(path, data, 16)], [True])
        # 2 stages: SpecTrain (paper staleness: both backwards on the master weights), stale, stash (the last
        # stage only), GPipe with one micro-batch and with two (which accumulates: none).
        for extra, expect in ((("--weights", "spectrain"), [True, True]), (("--weights", "stale"), [True, True]),
                              (("--weights", "stash"), [False, True]), (("--schedule", "gpipe", "--micro-batches", 1), [True, True]),
                              (("--schedule", "gpipe", "--micro-batches", 2), [False, False])):
            with self.subTest(extra=extra):
                stages = self.exact(path, data, 16, "--gpus", 2, "--split-at", "relu", *extra)
                self.assertEqual([s["update_in_backward"] for s in stages], expect)

    def test_models_exported_by_pytorch(self):
        for name in ("transformer", "lenet_bn"):
            with self.subTest(model=name):
                path = os.path.join(self.dir, f"{name}.update.onnx")
                x, y = export_peer_model(name, path)
                data = self.data(name + ".update", x[:8], y[:8], 2 * self.STEPS)
                stages = self.exact(path, data, 8, *(("--optimizer", "sgd") if name == "lenet_bn" else ()))
                self.assertTrue(stages[0]["update_in_backward"])
                self.assertLess(stages[0]["transient_gradient_bytes"], stages[0]["param_bytes"])

    def test_not_where_every_gradient_is_needed_first(self):
        model = os.path.join(ROOT, "models", "digits_mlp.onnx")
        data = os.path.join(ROOT, "models", "digits", "train")
        for extra in (("--clip-grad-norm", 1.0), ("--replicas", 2)):
            with self.subTest(extra=extra):
                tag = "digits.update" + "".join(map(str, extra))
                self.train(model, data, 16, tag, *extra)
                self.assertEqual([s["update_in_backward"] for s in self.plan(tag)], [False])


if __name__ == "__main__":
    unittest.main()
