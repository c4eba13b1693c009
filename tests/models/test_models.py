"""Model-family tests of onnx-pipetrain: the torch.onnx.export families of
tools/export_models.py at opsets 11, 13 and 17 in training and evaluation mode, each trained 2 steps
(batch 4) on synthetic data, the trained model checked by onnx.checker and run by onnxruntime; the
one-step PyTorch oracle (tests/python/torch_model_oracle.py) at opset 13 for every family and at
11 and 17 for LeNet-BN; and the onnx.helper graphs of old opsets (7 to 9) trained 2 steps.

Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/models/test_models.py
(-k NAME selects tests, e.g. -k oracle, -k resnet18). PIPETRAIN_MODELS_FAST=1 limits the
export/train matrix to opset 13 for the four big CNNs (ResNet-18, VGG-11-BN, MobileNet-V2,
GoogLeNet); by default every combination runs. Models are written to a temporary folder only.
"""
import csv
import os
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import export_models as em  # noqa: E402
import torch_model_oracle as oracle  # noqa: E402

BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
FAST = os.environ.get("PIPETRAIN_MODELS_FAST", "") not in ("", "0")
BIG = ("resnet18", "vgg11_bn", "mobilenet_v2", "googlenet")
STEPS, BATCH = 2, 4
TIMES = {}

try:
    import onnxruntime as ort
except ImportError:  # the ORT check is skipped, named, where onnxruntime is missing
    ort = None


def write_data(folder, name, input_shape, classes, n=STEPS * BATCH, seed=5):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    if name == "transformer":
        x = rng.integers(1, em.VOCAB, size=(n, em.SEQ)).astype(np.int64)
        for i in range(n):
            if i % 3:
                x[i, em.SEQ - (i % 5) - 1:] = 0       # trailing padding, some rows unpadded
    else:
        x = rng.standard_normal((n,) + tuple(input_shape)).astype(np.float32)
    np.save(os.path.join(folder, "x.npy"), x)
    np.save(os.path.join(folder, "y.npy"), rng.integers(0, classes, size=n).astype(np.int64))
    return folder, x


def train(model_path, data, out):
    cmd = [BIN, model_path, "--data", data, "--steps", str(STEPS), "--batch-size", str(BATCH),
           "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "1e-4", "--no-shuffle",
           "--loss", "cross-entropy", "--out", out, "--overwrite", "--quiet", "--seed", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return p, " ".join(cmd)


class ModelsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-models-")
        cls.dir = cls.tmp.name
        cls.data = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        if TIMES:
            print("\nper-test seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in TIMES.items()),
                  file=sys.stderr)

    def setUp(self):
        self.t0 = time.time()

    def tearDown(self):
        TIMES[self.id().split(".")[-1]] = time.time() - self.t0

    def data_for(self, name, shape, classes):
        key = (name == "transformer", tuple(shape), classes)
        if key not in self.data:
            folder = os.path.join(self.dir, "data_" + "_".join(map(str, (name == "transformer",)
                                                                   + tuple(shape) + (classes,))))
            self.data[key] = write_data(folder, name, shape, classes)
        return self.data[key]

    def check_trained(self, model_path, out, x, classes):
        """Exit 0 was checked; now metrics, structure, checker, onnxruntime."""
        stem = os.path.splitext(os.path.basename(model_path))[0]
        trained = os.path.join(out, stem + ".trained.onnx")
        self.assertTrue(os.path.exists(trained), f"{trained} not written; {os.listdir(out)}")
        with open(os.path.join(out, "metrics.csv"), newline="") as f:
            losses = [float(r["loss"]) for r in csv.DictReader(f)]
        self.assertEqual(len(losses), STEPS, f"metrics.csv rows: {losses}")
        self.assertTrue(np.isfinite(losses).all(), f"losses {losses}")
        orig, tm = onnx.load(model_path), onnx.load(trained)
        self.assertEqual([n.op_type for n in orig.graph.node], [n.op_type for n in tm.graph.node],
                         "the trained model's nodes differ from the original's")
        w0 = {i.name: numpy_helper.to_array(i) for i in orig.graph.initializer}
        w1 = {i.name: numpy_helper.to_array(i) for i in tm.graph.initializer}
        self.assertEqual(sorted(w0), sorted(w1), "initializer names changed")
        changed = [n for n in w0 if w0[n].dtype.kind == "f" and not np.array_equal(w0[n], w1[n])]

        def constants(m):  # weights that converters feed through Constant nodes
            return {n.output[0]: numpy_helper.to_array(a.t) for n in m.graph.node if n.op_type == "Constant"
                    for a in n.attribute if a.name == "value"}
        c0, c1 = constants(orig), constants(tm)
        changed += [n for n in c0 if c0[n].dtype.kind == "f" and c0[n].size > 1 and not np.array_equal(c0[n], c1[n])]
        self.assertTrue(changed, "no float initializer or Constant-node weight changed after training")
        onnx.checker.check_model(trained)
        if ort is None:
            return
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        sess = ort.InferenceSession(trained, so, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x[:BATCH]}
        y = sess.run(None, feed)[0]
        self.assertEqual(list(y.shape), [BATCH, classes])
        self.assertTrue(np.isfinite(y).all(), "onnxruntime output of the trained model not finite")

    # ---------------------------------------------------------------- (a) export matrix, 2 steps
    def run_export(self, name, opset, mode):
        model = em.build_module(name)
        path = os.path.join(self.dir, f"{name}.op{opset}.{mode}.onnx")
        em.export_torch(model, name, opset, mode, path)
        classes = em.NUM_CLASSES[name]
        data, x = self.data_for(name, em.INPUT_SHAPE[name], classes)
        out = os.path.join(self.dir, f"run_{name}_{opset}_{mode}")
        p, cmd = train(path, data, out)
        try:
            self.assertEqual(p.returncode, 0, f"{cmd}\nexit {p.returncode}: "
                             f"{(p.stderr or p.stdout).strip()[-3000:]}")
            self.check_trained(path, out, x, classes)
        finally:
            for f in (path, os.path.join(out, f"{name}.op{opset}.{mode}.trained.onnx")):
                if os.path.exists(f) and os.path.getsize(f) > 4_000_000:
                    os.remove(f)                      # keep the temp folder small

    # ---------------------------------------------------------------- (b) PyTorch oracle, 1 step
    def run_oracle(self, name, opset):
        out = os.path.join(self.dir, f"oracle_{name}_{opset}")
        lines = []
        s = oracle.run_oracle(name, out, opset=opset, binary=BIN, batch=8, log=lines.append)
        self.assertTrue(s["pass"], "\n".join(lines[-45:]))

    def test_oracle_gpipe_batchnorm(self):
        # GPipe computes BatchNorm statistics per micro-batch (and updates the running statistics
        # once per micro-batch, in order): the reference is PyTorch accumulating gradients over
        # the same micro-batches. It differs from full-batch training (running mean by ~30 %).
        # (Deep nets such as ResNet-18 at micro-batches of 2 samples are too ill-conditioned: torch's own
        # float32 and float64 steps differ by 90 %.)
        for name, gpus, micro in (("lenet_bn", 2, 2), ("lenet_bn", 3, 4)):
            out = os.path.join(self.dir, f"oracle_gpipe_{name}")
            lines = []
            s = oracle.run_oracle(name, out, opset=13, binary=BIN, batch=8, log=lines.append, gpus=gpus, micro=micro)
            self.assertTrue(s["pass"], "\n".join(lines[-45:]))

    # ---------------------------------------------------------------- (c) old-opset helper graphs
    def run_helper(self, name):
        build, shape, classes = em.HELPER_MODELS[name]
        m = build()
        onnx.checker.check_model(m)
        path = os.path.join(self.dir, name + ".onnx")
        onnx.save(m, path)
        data, x = self.data_for(name, shape, classes)
        out = os.path.join(self.dir, "run_" + name)
        p, cmd = train(path, data, out)
        self.assertEqual(p.returncode, 0, f"{cmd}\nexit {p.returncode}: "
                         f"{(p.stderr or p.stdout).strip()[-3000:]}")
        self.check_trained(path, out, x, classes)


def _add_tests():
    for name in em.TORCH_MODELS:
        for opset in em.OPSETS:
            for mode in em.MODES:
                def t(self, name=name, opset=opset, mode=mode):
                    if FAST and name in BIG and opset != 13:
                        self.skipTest("PIPETRAIN_MODELS_FAST: big CNNs at opset 13 only")
                    self.run_export(name, opset, mode)
                setattr(ModelsTest, f"test_train_{name}_op{opset}_{mode}", t)
    oracles = [(n, 13) for n in em.TORCH_MODELS] + [("lenet_bn", 11), ("lenet_bn", 17)]
    for name, opset in oracles:
        setattr(ModelsTest, f"test_oracle_{name}_op{opset}",
                lambda self, name=name, opset=opset: self.run_oracle(name, opset))
    for name in em.HELPER_MODELS:
        setattr(ModelsTest, f"test_helper_{name}", lambda self, name=name: self.run_helper(name))


_add_tests()

if __name__ == "__main__":
    unittest.main()
