"""What users expect of a trainer, end to end through the command line.
Inference-ready export: a small CNN with BatchNorm and Dropout, exported by PyTorch in training
mode (opset 13: BatchNorm with 5 outputs; opset 17: training_mode=1), is trained a few steps on
sklearn's digits; ONNX Runtime runs <stem>.trained.onnx at batch 1 and at batch 256 and must find
the validation loss and accuracy that onnx-pipetrain reported in metrics.csv (its validation uses
running statistics and no dropout); --export-training keeps the training-mode graph.
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_trainer_ux.py"""
import csv
import os
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))

try:
    import onnxruntime as ort
except ImportError:  # tools/setup.sh installs it; PIPETRAIN_REQUIRE_ORT=1 makes it mandatory
    ort = None
    if os.environ.get("PIPETRAIN_REQUIRE_ORT") == "1":
        raise


def run(*args, cwd=None):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)
    return p.returncode, p.stdout, p.stderr


def metrics(out):
    with open(os.path.join(out, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def digits_data(folder):
    """sklearn's digits as [N, 1, 8, 8] float32 in [0, 1]: 1437 for training, 360 held out."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))
    x, y = x[order], y[order]
    train, val = os.path.join(folder, "train"), os.path.join(folder, "val")
    for path, xs, ys in ((train, x[:1437], y[:1437]), (val, x[1437:], y[1437:])):
        os.makedirs(path, exist_ok=True)
        np.save(os.path.join(path, "x.npy"), xs)
        np.save(os.path.join(path, "y.npy"), ys)
    return train, val, x[1437:], y[1437:]


def bn_cnn(path, opset):
    """Conv-BatchNorm-ReLU-Conv-BatchNorm-ReLU-Flatten-Dropout-Linear, exported in training mode."""
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Dropout(0.25), torch.nn.Linear(8 * 4 * 4, 10))
    m.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, torch.zeros(2, 1, 8, 8), path, opset_version=opset, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    return path


def ort_eval(path, x, y, batch):
    """Mean cross-entropy and accuracy of the model at `path` on (x, y) in chunks of `batch`."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    logits = np.concatenate([sess.run(None, {name: x[i:i + batch]})[0] for i in range(0, len(x), batch)])
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean()), float((logits.argmax(axis=1) == y).mean()), logits


class InferenceExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-ux-")
        cls.dir = cls.tmp.name
        cls.train_dir, cls.val_dir, cls.xv, cls.yv = digits_data(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, model, out, *extra):
        rc, so, se = run(model, "--data", self.train_dir, "--val-data", self.val_dir, "--steps", 60,
                         "--batch-size", 32, "--lr", 0.2, "--seed", 3, "--out", out, *extra)
        self.assertEqual(rc, 0, f"exit {rc}: {se or so}")
        return so

    def check_bn_model(self, opset):
        if ort is None:
            self.skipTest("onnxruntime is not installed (tools/setup.sh installs it)")
        src = bn_cnn(os.path.join(self.dir, f"bn_cnn{opset}.onnx"), opset)
        out = os.path.join(self.dir, f"run{opset}")
        self.train(src, out, "--export-training")
        last = metrics(out)[-1]
        val_loss, val_acc = float(last["val_loss"]), float(last["val_accuracy"])
        self.assertGreater(val_acc, 0.5, f"the CNN did not learn: {last}")
        trained = os.path.join(out, "bn_cnn%d.trained.onnx" % opset)
        onnx.checker.check_model(trained)
        m = onnx.load(trained)
        bns = [n for n in m.graph.node if n.op_type == "BatchNormalization"]
        drops = [n for n in m.graph.node if n.op_type == "Dropout"]
        self.assertEqual((len(bns), len(drops)), (2, 1))
        for n in bns:
            self.assertEqual(len(n.output), 1, n)
            self.assertFalse(any(a.name == "training_mode" and a.i for a in n.attribute), n)
        self.assertEqual(len(drops[0].output), 1)
        if len(drops[0].input) > 2:   # training_mode: a constant false (else absent, which means false)
            consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node
                      if n.op_type == "Constant"}
            consts.update({t.name: numpy_helper.to_array(t) for t in m.graph.initializer})
            self.assertFalse(bool(consts[drops[0].input[2]]), "Dropout still trains")
        used = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
        self.assertEqual([n.output[0] for n in m.graph.node if n.op_type == "Constant" and n.output[0] not in used], [],
                         "the rewrite left unused constants")
        self.assertEqual([o.name for o in m.graph.output], ["logits"])
        # The reported validation, at batch 1 and batch 256, within float rounding: argmax may
        # flip only on a near tie, so at most one of the 360 samples.
        n = len(self.yv)
        results = {}
        for batch in (1, 256):
            loss, acc, logits = ort_eval(trained, self.xv, self.yv, batch)
            results[batch] = logits
            self.assertAlmostEqual(loss, val_loss, delta=1e-4 * max(1.0, val_loss),
                                   msg=f"batch {batch}: ONNX Runtime loss {loss}, onnx-pipetrain {val_loss}")
            self.assertLessEqual(abs(acc - val_acc) * n, 1.0 + 1e-9,
                                 f"batch {batch}: ONNX Runtime accuracy {acc}, onnx-pipetrain {val_acc}")
        np.testing.assert_allclose(results[1], results[256], rtol=1e-4, atol=1e-5)
        # --export-training: the source's graph unchanged but for the weights; in training mode its
        # result depends on the batch (batch statistics), unlike the inference model's.
        import check_exported_model
        training = os.path.join(out, "bn_cnn%d.training.onnx" % opset)
        self.assertEqual(check_exported_model.compare_structure(onnx.load(src), onnx.load(training)), [])
        _, _, t1 = ort_eval(training, self.xv[:8], self.yv[:8], 8)
        _, _, t2 = ort_eval(training, self.xv[:8], self.yv[:8], 4)
        self.assertGreater(np.abs(t1 - t2).max(), 1e-3, "the training-mode graph should use batch statistics")
        w_inf = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        w_tr = {t.name: numpy_helper.to_array(t) for t in onnx.load(training).graph.initializer}
        self.assertEqual(sorted(w_inf), sorted(w_tr))
        for k in w_inf:
            np.testing.assert_array_equal(w_inf[k], w_tr[k], k)

    def test_batchnorm_opset13_five_outputs(self):
        self.check_bn_model(13)

    def test_batchnorm_opset17_training_mode(self):
        self.check_bn_model(17)

    def test_stage_models_are_inference_models(self):
        if ort is None:
            self.skipTest("onnxruntime is not installed (tools/setup.sh installs it)")
        import check_stage_models
        src = bn_cnn(os.path.join(self.dir, "bn_cnn_stages.onnx"), 13)
        out = os.path.join(self.dir, "stages")
        self.train(src, out, "--gpus", 2, "--export-stages")
        for k in (0, 1):
            for n in onnx.load(os.path.join(out, "stages", f"stage{k}.onnx")).graph.node:
                if n.op_type in ("BatchNormalization", "Dropout"):
                    self.assertEqual(len(n.output), 1, n)
        lines = []
        failure = check_stage_models.check(os.path.join(out, "bn_cnn_stages.trained.onnx"),
                                           os.path.join(out, "stages"), batch=1, log=lines.append)
        self.assertIsNone(failure, "\n".join(lines + [str(failure)]))


def layernorm_model(path):
    """A BERT-style block with LayerNorm spelled out (ReduceMean, Sub, Pow 2, ReduceMean, Add eps,
    Sqrt, Div), every constant an initializer: the exponent is a [1] tensor (only its place in Pow
    says it is no weight), epsilon and the Clip bounds are scalars. x [N, 4, 8] -> logits [N, 3]."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(7)
    w = {"W1": rng.standard_normal((8, 8)) * 0.4, "b1": rng.standard_normal(8) * 0.1,
         "gamma": 1 + rng.standard_normal(8) * 0.1, "beta": rng.standard_normal(8) * 0.1,
         "W2": rng.standard_normal((8, 3)) * 0.4, "b2": np.zeros(3),
         "two": np.array([2.0]), "eps": np.array(1e-5), "lo": np.array(-2.0), "hi": np.array(2.0)}
    w = {k: np.asarray(v, np.float32) for k, v in w.items()}
    N = helper.make_node
    nodes = [N("MatMul", ["x", "W1"], ["h0"]), N("Add", ["h0", "b1"], ["h"]),
             N("ReduceMean", ["h"], ["mu"], axes=[-1]), N("Sub", ["h", "mu"], ["d"]),
             N("Pow", ["d", "two"], ["d2"]), N("ReduceMean", ["d2"], ["var"], axes=[-1]),
             N("Add", ["var", "eps"], ["ve"]), N("Sqrt", ["ve"], ["sd"]), N("Div", ["d", "sd"], ["n"]),
             N("Mul", ["n", "gamma"], ["ng"]), N("Add", ["ng", "beta"], ["y"]),
             N("Clip", ["y", "lo", "hi"], ["yc"]), N("ReduceMean", ["yc"], ["pooled"], axes=[1], keepdims=0),
             N("MatMul", ["pooled", "W2"], ["z"]), N("Add", ["z", "b2"], ["logits"])]
    g = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return w


def torch_layernorm_losses(w, x, y, steps, batch, lr):
    """The same block in PyTorch, trained by plain SGD on the batches in order: losses and weights."""
    import torch
    p = {k: torch.tensor(w[k], dtype=torch.float64, requires_grad=True) for k in ("W1", "b1", "gamma", "beta", "W2", "b2")}
    losses = []
    for s in range(steps):
        xb = torch.tensor(x[s * batch:(s + 1) * batch], dtype=torch.float64)
        yb = torch.tensor(y[s * batch:(s + 1) * batch])
        h = xb @ p["W1"] + p["b1"]
        d = h - h.mean(-1, keepdim=True)
        n = d / torch.sqrt((d ** 2.0).mean(-1, keepdim=True) + 1e-5)
        yc = torch.clamp(n * p["gamma"] + p["beta"], -2.0, 2.0)
        loss = torch.nn.functional.cross_entropy(yc.mean(1) @ p["W2"] + p["b2"], yb)
        for t in p.values():
            t.grad = None
        loss.backward()
        with torch.no_grad():
            for t in p.values():
                t -= lr * t.grad
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in p.items()}


class TrainableTest(unittest.TestCase):
    STEPS, BATCH, LR = 5, 8, 0.3

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-trainable-")
        cls.dir = cls.tmp.name
        cls.model = os.path.join(cls.dir, "ln.onnx")
        cls.w = layernorm_model(cls.model)
        rng = np.random.default_rng(11)
        cls.x = rng.standard_normal((cls.STEPS * cls.BATCH, 4, 8)).astype(np.float32)
        cls.y = rng.integers(0, 3, size=cls.STEPS * cls.BATCH).astype(np.int64)
        cls.data = os.path.join(cls.dir, "data")
        os.makedirs(cls.data)
        np.save(os.path.join(cls.data, "x.npy"), cls.x)
        np.save(os.path.join(cls.data, "y.npy"), cls.y)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, out, *extra):
        rc, so, se = run(self.model, "--data", self.data, "--steps", self.STEPS, "--batch-size", self.BATCH,
                         "--lr", self.LR, "--momentum", 0, "--no-shuffle", "--out", out, *extra)
        self.assertEqual(rc, 0, f"exit {rc}: {se or so}")
        trained = {t.name: numpy_helper.to_array(t)
                   for t in onnx.load(os.path.join(out, "ln.trained.onnx")).graph.initializer}
        return so, trained

    def test_default_trains_weights_only_and_matches_pytorch(self):
        out = os.path.join(self.dir, "default")
        so, trained = self.train(out)
        self.assertIn("parameters: training 115 in 6 tensors (4 float initializers kept constant", so)
        for k in ("two", "eps", "lo", "hi"):
            np.testing.assert_array_equal(trained[k], self.w[k], f"'{k}' changed in training")
        losses, ref = torch_layernorm_losses(self.w, self.x, self.y, self.STEPS, self.BATCH, self.LR)
        ours = [float(r["loss"]) for r in metrics(out)]
        np.testing.assert_allclose(ours, losses, rtol=1e-4, err_msg="per-step loss against PyTorch")
        for k, v in ref.items():
            np.testing.assert_allclose(trained[k], v, rtol=1e-4, atol=1e-5, err_msg=k)
            self.assertFalse(np.array_equal(trained[k], self.w[k]), f"'{k}' did not train")

    def test_model_rewritten_by_onnxruntime(self):
        # ONNX Runtime's basic optimizer (as tf2onnx and onnx-simplifier do) folds Constant nodes into
        # initializers: the LayerNorm's exponent 2.0 and epsilon become float initializers. They must
        # stay fixed, and the rewritten model must train as the PyTorch export it came from does.
        import onnxruntime as ort
        import torch

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.fc1, self.fc2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)
                self.g = torch.nn.Parameter(torch.ones(8) + 0.1 * torch.randn(8))
                self.b = torch.nn.Parameter(0.1 * torch.randn(8))

            def forward(self, x):
                h = self.fc1(x)
                d = h - h.mean(-1, keepdim=True)
                n = d / torch.sqrt(d.pow(2.0).mean(-1, keepdim=True) + 1e-5)
                return self.fc2((n * self.g + self.b).mean(1))

        orig, rewritten = os.path.join(self.dir, "bert_block.onnx"), os.path.join(self.dir, "bert_block_ort.onnx")
        torch.onnx.export(Block().eval(), torch.randn(2, 4, 8), orig, opset_version=13, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                          do_constant_folding=False)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = rewritten
        ort.InferenceSession(orig, so, providers=["CPUExecutionProvider"])
        before = {t.name: numpy_helper.to_array(t) for t in onnx.load(rewritten).graph.initializer}
        scalars = [k for k, v in before.items() if v.ndim == 0]
        self.assertEqual(len(scalars), 2, f"the rewrite did not fold the exponent and epsilon: {sorted(before)}")
        losses = {}
        for name, path in (("orig", orig), ("ort", rewritten)):
            out = os.path.join(self.dir, "rewritten_" + name)
            rc, so_, se = run(path, "--data", self.data, "--steps", self.STEPS, "--batch-size", self.BATCH,
                              "--lr", self.LR, "--momentum", 0, "--no-shuffle", "--out", out)
            self.assertEqual(rc, 0, f"{name}: exit {rc}: {se or so_}")
            losses[name] = [float(r["loss"]) for r in metrics(out)]
            if name == "ort":
                self.assertIn("parameters: training 115 in 6 tensors (2 float initializers kept constant", so_)
                after = {t.name: numpy_helper.to_array(t)
                         for t in onnx.load(os.path.join(out, "bert_block_ort.trained.onnx")).graph.initializer}
                for k in scalars:
                    np.testing.assert_array_equal(after[k], before[k], f"'{k}' changed in training")
        self.assertTrue(np.isfinite(losses["ort"]).all(), losses)
        np.testing.assert_allclose(losses["ort"], losses["orig"], rtol=1e-5, err_msg="rewritten vs original export")
        self.assertLess(losses["ort"][-1], losses["ort"][0])

    def test_causal_mask_buffer_stays_fixed(self):
        # A language model that registers its causal mask as a buffer exports it as a float
        # initializer of 0 and -inf feeding attention's scores, on the data path like a weight. It
        # must stay a constant (a step would make it NaN) and the model train as PyTorch does.
        import torch

        class CausalLM(torch.nn.Module):
            def __init__(self, vocab=20, d=8, seq=6):
                super().__init__()
                torch.manual_seed(0)
                self.tok = torch.nn.Embedding(vocab, d)
                self.layer = torch.nn.TransformerEncoderLayer(d, 2, dim_feedforward=16, dropout=0.0,
                                                              batch_first=True)
                self.head = torch.nn.Linear(d, vocab)
                self.register_buffer("causal", torch.triu(torch.full((seq, seq), float("-inf")), 1))

            def forward(self, x):
                return self.head(self.layer(self.tok(x), src_mask=self.causal))

        steps, batch, lr = 4, 4, 0.5
        m = CausalLM()
        path = os.path.join(self.dir, "causal_lm.onnx")
        torch.onnx.export(m, torch.zeros(2, 6, dtype=torch.long), path, opset_version=13, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        before = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
        masks = [k for k, v in before.items() if np.isinf(v).any()]
        self.assertEqual(len(masks), 1, f"expected the causal mask among the initializers: {sorted(before)}")
        rng = np.random.default_rng(5)
        x = rng.integers(0, 20, size=(steps * batch, 6)).astype(np.int64)
        y = rng.integers(0, 20, size=(steps * batch, 6)).astype(np.int64)
        data = os.path.join(self.dir, "lm_data")
        os.makedirs(data, exist_ok=True)
        np.save(os.path.join(data, "x.npy"), x)
        np.save(os.path.join(data, "y.npy"), y)
        out = os.path.join(self.dir, "causal_lm")
        rc, so, se = run(path, "--data", data, "--steps", steps, "--batch-size", batch, "--lr", lr,
                         "--momentum", 0, "--no-shuffle", "--out", out)
        self.assertEqual(rc, 0, f"exit {rc}: {se or so}")
        after = {t.name: numpy_helper.to_array(t)
                 for t in onnx.load(os.path.join(out, "causal_lm.trained.onnx")).graph.initializer}
        np.testing.assert_array_equal(after[masks[0]], before[masks[0]], "the causal mask changed in training")
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        ref = []
        for i in range(steps):
            opt.zero_grad()
            logits = m(torch.from_numpy(x[i * batch:(i + 1) * batch]))
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 20),
                                                     torch.from_numpy(y[i * batch:(i + 1) * batch]).reshape(-1))
            loss.backward()
            opt.step()
            ref.append(float(loss))
        ours = [float(r["loss"]) for r in metrics(out)]
        np.testing.assert_allclose(ours, ref, rtol=1e-4, err_msg="per-step loss against PyTorch")

    def test_freeze_and_trainable_globs(self):
        _, trained = self.train(os.path.join(self.dir, "freeze"), "--freeze", "b?")
        for k in ("b1", "b2", "two", "eps"):
            np.testing.assert_array_equal(trained[k], self.w[k], k)
        for k in ("W1", "W2", "gamma", "beta"):
            self.assertFalse(np.array_equal(trained[k], self.w[k]), k)
        so, trained = self.train(os.path.join(self.dir, "trainable"), "--trainable", "W?")
        self.assertIn("parameters: training 88 in 2 tensors", so)
        for k in ("b1", "b2", "gamma", "beta", "two", "eps"):
            np.testing.assert_array_equal(trained[k], self.w[k], k)
        for k in ("W1", "W2"):
            self.assertFalse(np.array_equal(trained[k], self.w[k]), k)
        for flag in ("--freeze", "--trainable"):
            rc, so, se = run(self.model, "--data", self.data, "--steps", 1, flag, "nothing*",
                             "--out", os.path.join(self.dir, "bad"))
            self.assertEqual(rc, 2, se)
            self.assertIn(f"{flag}: 'nothing*' matches no initializer", se)
            self.assertEqual(len(se.strip().splitlines()), 1, se)


MLP = os.path.join(ROOT, "models", "digits_mlp.onnx")
DIGITS = os.path.join(ROOT, "models", "digits")


class RunsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-runs-")
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_synthetic_data_is_said_first(self):
        for extra in ([], ["--data", "synthetic"]):
            rc, so, se = run(MLP, "--steps", 2, "--out", os.path.join(self.dir, "synthetic"), "--overwrite", *extra)
            self.assertEqual(rc, 0, se)
            first = so.splitlines()[0]
            self.assertTrue(first.startswith("notice: ") and "synthetic" in first, so)
            self.assertIn("no --data given" if not extra else "--data synthetic", first)
        rc, so, se = run(MLP, "--steps", 2, "--data", os.path.join(DIGITS, "train"),
                         "--out", os.path.join(self.dir, "real"))
        self.assertEqual(rc, 0, se)
        self.assertNotIn("synthetic", so)

    def test_openmp_wait_follows_the_machine_or_the_user(self):
        # tools/omp_env.h: a bounded spin on an idle machine, sleeping threads on a busy one, the user's
        # OMP_WAIT_POLICY / GOMP_SPINCOUNT as given; how threads wait never changes a result.
        base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "PIPETRAIN_OMP_WAIT")}
        args = [BIN, MLP, "--steps", "3", "--data", os.path.join(DIGITS, "train"), "--overwrite"]

        def wait_line(extra_env, out):
            p = subprocess.run(args + ["--out", os.path.join(self.dir, out)], capture_output=True, text=True, timeout=300,
                               env=dict(base, **extra_env))
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = [l for l in p.stdout.splitlines() if l.startswith("threads: ")]
            self.assertEqual(len(lines), 1, p.stdout)
            with open(os.path.join(self.dir, out, "digits_mlp.trained.onnx"), "rb") as f:
                return lines[0].split("; ", 1)[1], f.read()

        passive, m_passive = wait_line({"OMP_WAIT_POLICY": "PASSIVE"}, "passive")
        self.assertEqual(passive, "idle OpenMP threads: sleep (OMP_WAIT_POLICY=PASSIVE; set by the user)")
        spin, m_spin = wait_line({"GOMP_SPINCOUNT": "5000"}, "spin")
        self.assertEqual(spin, "idle OpenMP threads: spin (GOMP_SPINCOUNT=5000; set by the user)")
        self.assertEqual(m_passive, m_spin, "the wait policy changed the trained model")
        # Every CPU kept busy by another process: the run's threads must sleep.
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
        try:
            time.sleep(0.3)
            busy, m_busy = wait_line({}, "busy")
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        self.assertEqual(busy, "idle OpenMP threads: sleep (OMP_WAIT_POLICY=PASSIVE; the machine was busy at the start)")
        self.assertEqual(m_busy, m_passive)

    def test_finished_run_folder_is_refused(self):
        out = os.path.join(self.dir, "finished")
        args = [MLP, "--data", os.path.join(DIGITS, "train"), "--out", out]
        self.assertEqual(run(*args, "--steps", 3)[0], 0)
        with open(os.path.join(out, "metrics.csv"), "rb") as f:
            before = f.read()
        rc, so, se = run(*args, "--steps", 3)
        self.assertEqual(rc, 2, so + se)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertIn(f"--out {out}: the folder holds a finished run (digits_mlp.trained.onnx, metrics.csv)", se)
        with open(os.path.join(out, "metrics.csv"), "rb") as f:
            self.assertEqual(f.read(), before, "the refused run touched the folder")
        os.remove(os.path.join(out, "digits_mlp.trained.onnx"))  # metrics.csv alone is a finished run too
        self.assertEqual(run(*args, "--steps", 3)[0], 2)
        rc, so, se = run(*args, "--overwrite", "--steps", 4)
        self.assertEqual(rc, 0, se)
        self.assertEqual(len(metrics(out)), 4)
        rc, so, se = run(*args, "--steps", 4, "--overwrite", "--resume")
        self.assertEqual(rc, 2, se)
        self.assertIn("--overwrite excludes --resume", se)
        # --resume continues a finished run's checkpoints without --overwrite.
        ck = os.path.join(self.dir, "ck")
        self.assertEqual(run(MLP, "--data", os.path.join(DIGITS, "train"), "--steps", 3, "--checkpoint-every", 3,
                             "--out", ck)[0], 0)
        rc, so, se = run(MLP, "--data", os.path.join(DIGITS, "train"), "--steps", 6, "--checkpoint-every", 3,
                         "--out", ck, "--resume")
        self.assertEqual(rc, 0, se)
        self.assertEqual(len(metrics(ck)), 6)
        # --overwrite replaces the run, its checkpoints included: none is left to resume from, and
        # the old run's later steps cannot outrank the new run's when they are pruned.
        rc, so, se = run(MLP, "--data", os.path.join(DIGITS, "train"), "--steps", 2, "--out", ck, "--overwrite")
        self.assertEqual(rc, 0, se)
        self.assertIn("notice: --overwrite: removed the previous run's 2 checkpoints, digits_mlp.trained.onnx, "
                      "metrics.csv", so + se)
        self.assertEqual(os.listdir(os.path.join(ck, "checkpoints")), [])
        rc, so, se = run(MLP, "--data", os.path.join(DIGITS, "train"), "--steps", 6, "--out", ck, "--resume")
        self.assertEqual(rc, 2, se)
        self.assertIn("no checkpoint to resume from", se)
        # A run that failed before its first step (metrics.csv holds the header alone) is no finished run.
        bare = os.path.join(self.dir, "failed_early")
        os.makedirs(bare, exist_ok=True)
        with open(os.path.join(bare, "metrics.csv"), "w") as f:
            f.write(open(os.path.join(ck, "metrics.csv")).readline())
        rc, so, se = run(MLP, "--data", os.path.join(DIGITS, "train"), "--steps", 2, "--out", bare)
        self.assertEqual(rc, 0, se)
        # Planning alone does not finish a run.
        rc, so, se = run(MLP, "--plan-only", "--out", out)
        self.assertEqual(rc, 0, se)

    def test_version(self):
        rc, so, se = run("--version")
        protobuf = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "libprotobuf-dev"], capture_output=True,
                                  text=True).stdout.split("-")[0]
        self.assertEqual(rc, 0, se)
        with open("/usr/include/oneapi/dnnl/dnnl_version.h") as f:
            text = f.read()
        import re
        dnnl = ".".join(re.search(r"#define DNNL_VERSION_%s (\d+)" % k, text).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
        lines = so.splitlines()
        self.assertRegex(lines[0], r"^onnx-pipetrain \d+\.\d+\.\d+$")
        self.assertIn(f"  ONNX {onnx.__version__}", lines)
        self.assertIn(f"  protobuf {protobuf}", lines)
        self.assertIn(f"  oneDNN {dnnl}", lines)
        self.assertTrue(any(l.startswith("  CUDA") for l in lines), so)

    def test_report_shows_measured_throughput(self):
        import json
        import re
        for gpus in (1, 2):
            out = os.path.join(self.dir, f"report{gpus}")
            rc, so, se = run(MLP, "--data", os.path.join(DIGITS, "train"), "--steps", 20, "--gpus", gpus, "--out", out)
            self.assertEqual(rc, 0, se)
            done = float(re.search(r"^done: .* \(([\d.]+) samples/s\)", so, re.M).group(1))
            with open(os.path.join(out, "partition.json")) as f:
                j = json.load(f)
            self.assertAlmostEqual(j["measured_samples_per_s"], done, delta=0.5 + 1e-3 * done)
            with open(os.path.join(out, "partition.txt")) as f:
                txt = f.read()
            m = re.search(r"^predicted ([\d.]+) samples/s, measured ([\d.]+) samples/s \(([\d.]+)x the prediction\)",
                          txt, re.M)
            self.assertIsNotNone(m, txt)
            self.assertAlmostEqual(float(m.group(2)), j["measured_samples_per_s"], delta=0.05)
            self.assertAlmostEqual(float(m.group(1)), j["predicted_samples_per_s"], delta=0.05)
            # The steady state: samples/s between the ends of steps 5..20 (after the first fifth),
            # leaving out steps that ended with a validation; rebuilt here from metrics.csv, whose
            # samples_per_s column is each step's cumulative rate (step x batch / elapsed).
            steady = re.search(r", ([\d.]+) in the steady state \(([\d.]+)x\)", txt)
            self.assertIsNotNone(steady, txt)
            self.assertAlmostEqual(float(steady.group(1)), j["measured_steady_samples_per_s"], delta=0.05)
            with open(os.path.join(out, "metrics.csv")) as f:
                rows = list(csv.DictReader(f))
            batch = j["batch_size"]
            ends = [int(r["step"]) * batch / float(r["samples_per_s"]) for r in rows]
            first = max(1, len(rows) // 5)
            keep = [k for k in range(first, len(rows)) if not rows[k]["val_loss"]]
            want = len(keep) * batch / sum(ends[k] - ends[k - 1] for k in keep)
            self.assertAlmostEqual(j["measured_steady_samples_per_s"], want, delta=0.03 * want)
            with open(os.path.join(out, "partition.html")) as f:
                self.assertIn("samples/s in training", f.read())
        rc, so, se = run(MLP, "--plan-only", "--out", os.path.join(self.dir, "planonly"))
        with open(os.path.join(self.dir, "planonly", "partition.json")) as f:
            self.assertNotIn("measured_samples_per_s", json.load(f))


V, T, D, C = 11, 5, 8, 7  # vocabulary, tokens, embedding width, classes per token


def token_model(path, flat):
    """Embedding (Gather of int64 token ids [N, T]) -> MatMul -> Add: logits [N, T, C], or with
    flat=True reshaped to [N*T, C] as some exporters write them."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(21)
    w = {"E": rng.standard_normal((V, D)) * 0.5, "W": rng.standard_normal((D, C)) * 0.5, "b": rng.standard_normal(C) * 0.1}
    w = {k: np.asarray(v, np.float32) for k, v in w.items()}
    N = helper.make_node
    nodes = [N("Gather", ["E", "tokens"], ["emb"]), N("MatMul", ["emb", "W"], ["z"]),
             N("Add", ["z", "b"], ["logits3" if flat else "logits"])]
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    out_dims = ["batch", T, C]
    if flat:
        nodes.append(N("Reshape", ["logits3", "shape"], ["logits"]))
        inits.append(numpy_helper.from_array(np.array([-1, C], np.int64), "shape"))
        out_dims = ["NT", C]
    g = helper.make_graph(nodes, "tok", [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", T])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, out_dims)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return w


def torch_token_run(w, x, y, xv, yv, steps, batch, lr, ignore):
    """PyTorch: the same model trained by plain SGD on the batches in order; per-step losses, then
    validation loss and accuracy over the tokens whose label is not `ignore`."""
    import torch
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}

    def logits(xb):
        return p["E"][torch.tensor(xb)] @ p["W"] + p["b"]
    losses = []
    for s in range(steps):
        sl = slice(s * batch, (s + 1) * batch)
        loss = torch.nn.functional.cross_entropy(logits(x[sl]).reshape(-1, C), torch.tensor(y[sl]).reshape(-1),
                                                 ignore_index=ignore)
        for t in p.values():
            t.grad = None
        loss.backward()
        with torch.no_grad():
            for t in p.values():
                t -= lr * t.grad
        losses.append(loss.item())
    with torch.no_grad():
        z = logits(xv).reshape(-1, C)
        yt = torch.tensor(yv).reshape(-1)
        val_loss = torch.nn.functional.cross_entropy(z, yt, ignore_index=ignore).item()
        keep = yt != ignore
        acc = (z.argmax(1)[keep] == yt[keep]).double().mean().item()
    return losses, val_loss, acc


class TokenDataTest(unittest.TestCase):
    STEPS, BATCH, LR = 4, 6, 0.5

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-tokens-")
        cls.dir = cls.tmp.name
        rng = np.random.default_rng(4)
        n = cls.STEPS * cls.BATCH
        cls.x = rng.integers(0, V, size=(n, T)).astype(np.int64)
        cls.y = rng.integers(0, C, size=(n, T)).astype(np.int64)
        cls.y[::3, -2:] = -100                      # padding
        cls.xv = rng.integers(0, V, size=(10, T)).astype(np.int64)
        cls.yv = rng.integers(0, C, size=(10, T)).astype(np.int64)
        cls.yv[::2, -1] = -100
        for name, x, y in (("train", cls.x, cls.y), ("val", cls.xv, cls.yv)):
            os.makedirs(os.path.join(cls.dir, name))
            np.save(os.path.join(cls.dir, name, "x.npy"), x)
            np.save(os.path.join(cls.dir, name, "y.npy"), y)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check_against_torch(self, flat):
        model = os.path.join(self.dir, f"tok{int(flat)}.onnx")
        w = token_model(model, flat)
        out = os.path.join(self.dir, f"run{int(flat)}")
        rc, so, se = run(model, "--data", os.path.join(self.dir, "train"), "--val-data", os.path.join(self.dir, "val"),
                         "--steps", self.STEPS, "--batch-size", self.BATCH, "--lr", self.LR, "--momentum", 0,
                         "--no-shuffle", "--out", out)
        self.assertEqual(rc, 0, se or so)
        self.assertIn("token-level softmax cross-entropy", so)
        losses, val_loss, val_acc = torch_token_run(w, self.x, self.y, self.xv, self.yv, self.STEPS, self.BATCH,
                                                    self.LR, -100)
        rows = metrics(out)
        np.testing.assert_allclose([float(r["loss"]) for r in rows], losses, rtol=1e-4)
        self.assertAlmostEqual(float(rows[-1]["val_loss"]), val_loss, delta=1e-4 * val_loss)
        self.assertAlmostEqual(float(rows[-1]["val_accuracy"]), val_acc, delta=1e-6)  # metrics.csv: %.6g

    def test_sequence_output_matches_pytorch(self):
        self.check_against_torch(flat=False)

    def test_flattened_sequence_output_matches_pytorch(self):
        self.check_against_torch(flat=True)

    def test_synthetic_token_ids(self):
        model = os.path.join(self.dir, "tok_syn.onnx")
        token_model(model, False)
        rc, so, se = run(model, "--steps", 3, "--batch-size", 4, "--out", os.path.join(self.dir, "syn"))
        self.assertEqual(rc, 0, se or so)   # an id outside the vocabulary would fail in Gather
        self.assertIn("synthetic", so.splitlines()[0])
        # A smaller vocabulary than the ids ever drawn would fail: the ids stay within it.
        from onnx import numpy_helper
        m = onnx.load(model)
        for t in m.graph.initializer:
            if t.name == "E":
                t.CopyFrom(numpy_helper.from_array(np.ones((2, D), np.float32), "E"))
        small = os.path.join(self.dir, "tok_small.onnx")
        onnx.save(m, small)
        rc, so, se = run(small, "--steps", 3, "--batch-size", 4, "--out", os.path.join(self.dir, "syn_small"))
        self.assertEqual(rc, 0, se or so)

    def test_labels_that_do_not_fit_are_refused(self):
        model = os.path.join(self.dir, "tok_bad.onnx")
        token_model(model, False)
        cases = {"per_sample": (self.y[:, 0], "labels [24] do not fit the loss, which wants [24, 5]"),
                 "too_long": (np.zeros((24, T + 1), np.int64), "labels [24, 6] do not fit the loss, which wants [24, 5]"),
                 "out_of_range": (np.full((24, T), C, np.int64), f"label {C} of sample 0 is outside [0, {C})")}
        for name, (y, message) in cases.items():
            d = os.path.join(self.dir, "bad_" + name)
            os.makedirs(d)
            np.save(os.path.join(d, "x.npy"), self.x)
            np.save(os.path.join(d, "y.npy"), y)
            rc, so, se = run(model, "--data", d, "--steps", 1, "--out", os.path.join(self.dir, "bad_run"))
            self.assertEqual(rc, 2, f"{name}: {se or so}")
            self.assertIn(message, se, name)
            self.assertEqual(len(se.strip().splitlines()), 1, se)
        # --ignore-index changes which label is padding.
        d = os.path.join(self.dir, "bad_ignore")
        os.makedirs(d)
        np.save(os.path.join(d, "x.npy"), self.x)
        y = self.y.copy()
        y[y == -100] = -1
        np.save(os.path.join(d, "y.npy"), y)
        rc, so, se = run(model, "--data", d, "--steps", 1, "--out", os.path.join(self.dir, "ign"))
        self.assertEqual(rc, 2, se)
        rc, so, se = run(model, "--data", d, "--steps", 1, "--ignore-index", -1, "--batch-size", 8,
                         "--out", os.path.join(self.dir, "ign"))
        self.assertEqual(rc, 0, se)


class TensorBoardTest(unittest.TestCase):
    """--tensorboard, read back by TensorBoard's own event-file reader (which checks every record's
    masked CRC-32C) and compared with metrics.csv."""

    def test_event_file_matches_metrics_csv(self):
        try:
            from tensorboard.backend.event_processing import event_accumulator, event_file_loader
        except ImportError:
            if os.environ.get("PIPETRAIN_REQUIRE_TENSORBOARD") == "1":
                raise
            self.skipTest("tensorboard is not installed (tools/setup.sh installs it)")
        with tempfile.TemporaryDirectory(prefix="pipetrain-tb-") as tmp:
            for gpus in (1, 2):
                out = os.path.join(tmp, f"run{gpus}")
                rc, so, se = run(MLP, "--data", os.path.join(DIGITS, "train"), "--val-data", os.path.join(DIGITS, "val"),
                                 "--steps", 30, "--eval-every", 10, "--gpus", gpus, "--tensorboard", "--out", out)
                self.assertEqual(rc, 0, se)
                files = [f for f in os.listdir(out) if f.startswith("events.out.tfevents.")]
                self.assertEqual(len(files), 1, os.listdir(out))
                events = list(event_file_loader.RawEventFileLoader(os.path.join(out, files[0])).Load())
                # version, 3 per step, 2 per validation; at the end per stage its pass times (and, pipelined,
                # its busy fraction)
                stage_tags = [f"stage/{k}/{t}" for k in range(gpus)
                              for t in (("backward_ms", "busy_fraction", "forward_ms") if gpus > 1 else
                                        ("backward_ms", "forward_ms"))]
                self.assertEqual(len(events), 1 + 3 * 30 + 2 * 3 + len(stage_tags))
                acc = event_accumulator.EventAccumulator(out)
                acc.Reload()
                self.assertEqual(acc.file_version, 2.0)  # the reader parses "brain.Event:2"
                self.assertEqual(sorted(acc.Tags()["scalars"]), sorted(["train/loss", "train/lr", "train/samples_per_s",
                                                                        "val/accuracy", "val/loss"] + stage_tags))
                for tag in stage_tags:
                    (e,) = acc.Scalars(tag)
                    self.assertEqual(e.step, 30, tag)
                    self.assertGreater(e.value, 0, tag)
                    if tag.endswith("busy_fraction"):  # as the run printed it
                        k = int(tag.split("/")[1])
                        self.assertIn(f"stage {k}: busy {100 * e.value:.0f}%", so)
                rows = metrics(out)
                for tag, col in (("train/loss", "loss"), ("train/lr", "lr"), ("train/samples_per_s", "samples_per_s"),
                                 ("val/loss", "val_loss"), ("val/accuracy", "val_accuracy")):
                    want = [(int(r["step"]), float(r[col])) for r in rows if r[col] != ""]
                    got = [(e.step, e.value) for e in acc.Scalars(tag)]
                    self.assertEqual([s for s, _ in got], [s for s, _ in want], tag)
                    np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-6, err_msg=tag)
                self.assertEqual([e.step for e in acc.Scalars("val/loss")], [10, 20, 30])
        # A corrupted record is caught by the reader's CRC check (the test would see a bad writer).
        with tempfile.TemporaryDirectory(prefix="pipetrain-tb-") as tmp:
            out = os.path.join(tmp, "run")
            self.assertEqual(run(MLP, "--steps", 2, "--tensorboard", "--out", out)[0], 0)
            path = os.path.join(out, [f for f in os.listdir(out) if f.startswith("events.out")][0])
            with open(path, "r+b") as f:
                data = bytearray(f.read())
                data[-6] ^= 0xFF
                f.seek(0)
                f.write(data)
            loaded = []
            try:
                for e in event_file_loader.RawEventFileLoader(path).Load():
                    loaded.append(e)
            except Exception:  # noqa: BLE001 (a reader may raise on the bad record instead of stopping)
                pass
            self.assertLess(len(loaded), 1 + 3 * 2 + 2)  # version, 3 per step, the stage's 2 pass times


if __name__ == "__main__":
    unittest.main()
