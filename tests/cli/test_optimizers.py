"""--optimizer sgd-paper|sgd|adam|adamw and --clip-grad-norm through the command line: refusals of
flags that do not apply (exit 2, one line), 20 steps of each optimizer against torch.optim on an
MLP, a CNN with BatchNorm and a Transformer (tests/python/torch_optim_oracle.py), --clip-grad-norm
against torch.nn.utils.clip_grad_norm_ on one stage, and GPipe on 2 stages with clipping equal to
one stage. Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_optimizers.py"""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from test_cli import BIN, mlp_model, run, write_data  # noqa: E402
import torch_optim_oracle as oracle  # noqa: E402


class OptimizerFlagsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-optim-")
        cls.dir = cls.tmp.name
        cls.model = mlp_model(os.path.join(cls.dir, "mlp.onnx"))
        cls.data = write_data(os.path.join(cls.dir, "data"), n=64)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def refuse(self, *args, needles=()):
        rc, so, se = run(self.model, "--data", self.data, "--steps", 1, "--out", os.path.join(self.dir, "r"), *args)
        self.assertEqual(rc, 2, f"{args}: exit {rc}\n{so}\n{se}")
        lines = [l for l in se.splitlines() if l.strip()]
        self.assertTrue(lines and "error" in lines[0], se)
        for n in needles:
            self.assertIn(n, lines[0])
        return lines[0]

    def test_refusals(self):
        line = self.refuse("--optimizer", "lamb", needles=("--optimizer lamb",))
        for name in ("sgd-paper", "sgd", "adam", "adamw"):
            self.assertIn(name, line)
        self.refuse("--optimizer", "adam", "--momentum", 0.5, needles=("--momentum", "adam"))
        self.refuse("--optimizer", "adamw", "--nesterov", needles=("--nesterov", "adamw"))
        self.refuse("--dampening", 0.1, needles=("--dampening", "sgd-paper"))  # the default optimizer
        self.refuse("--beta1", 0.8, needles=("--beta1", "sgd-paper"))
        self.refuse("--optimizer", "sgd", "--eps", 1e-6, needles=("--eps", "sgd"))
        self.refuse("--optimizer", "sgd", "--nesterov", "--momentum", 0, needles=("--nesterov",))
        self.refuse("--clip-grad-norm", -1, needles=("--clip-grad-norm",))

    def test_help(self):
        rc, so, _ = run("--help")
        self.assertEqual(rc, 0)
        for flag in ("--optimizer", "--beta1", "--beta2", "--eps", "--dampening", "--nesterov", "--clip-grad-norm"):
            self.assertIn(flag, so)
        self.assertIn("each stage clips by its own norm", " ".join(so.split()))

    def test_clip_gpipe_equals_one_stage(self):
        def train(name, *extra):
            out = os.path.join(self.dir, name)
            rc, so, se = run(self.model, "--data", self.data, "--steps", 16, "--batch-size", 8, "--no-shuffle",
                             "--quiet", "--out", out, "--optimizer", "adam", "--lr", 0.01, "--clip-grad-norm", 0.05,
                             *extra)
            self.assertEqual(rc, 0, se)
            m = onnx.load(os.path.join(out, "mlp.trained.onnx"))
            return {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
        one = train("clip1")
        two = train("clip_gp2", "--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2)
        for k, b in one.items():
            err = np.abs(two[k] - b).max() / (np.abs(b).max() + 1e-6)
            self.assertLessEqual(err, 1e-5, k)
        rc, so, se = run(self.model, "--data", self.data, "--steps", 16, "--batch-size", 8, "--no-shuffle", "--quiet",
                         "--out", os.path.join(self.dir, "noclip"), "--optimizer", "adam", "--lr", 0.01)
        self.assertEqual(rc, 0, se)
        m = onnx.load(os.path.join(self.dir, "noclip", "mlp.trained.onnx"))
        moved = max(np.abs(numpy_helper.to_array(t) - one[t.name]).max() for t in m.graph.initializer)
        self.assertGreater(moved, 1e-4, "clipping changed nothing: the test would not see it broken")


class TorchOptimizerOracleTest(unittest.TestCase):
    """20 steps of torch.optim.SGD/Adam/AdamW (tests/python/torch_optim_oracle.py)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-optim-oracle-")
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, model, optimizers=tuple(oracle.OPTIMIZERS), clip=0.0, sub=""):
        lines = []
        cases = [oracle.run_case(model, o, os.path.join(self.dir, sub), BIN, 20, clip, log=lines.append)
                 for o in optimizers]
        sys.stdout.write("\n".join(lines) + "\n")
        for c in cases:
            self.assertTrue(c["ok"], "\n".join(lines))

    def test_mlp(self):
        self.check("mlp")

    def test_cnn_batchnorm(self):
        self.check("lenet_bn")

    def test_transformer(self):
        if os.environ.get("PIPETRAIN_SANITIZER") == "tsan":
            # tools/sanitize.sh tsan-all: a TSan build runs the CPU kernels' baseline code (no
            # target_clones, kernels/cpu/cpu_util.h), whose rounding is further from PyTorch's
            # vectorised kernels than this bound allows (docs/reliability.md, 2026-12-07); the
            # transformer still trains under TSan in reshape_alias_tests and model_tests.
            self.skipTest("TSan build: baseline kernels, not PyTorch's rounding")
        self.check("transformer")

    def test_clip_grad_norm_one_stage(self):
        self.check("mlp", ("sgd", "adam"), clip=0.05, sub="clip")
        self.check("lenet_bn", ("adamw",), clip=0.5, sub="clip")


if __name__ == "__main__":
    import torch
    torch.set_num_threads(1)
    unittest.main()
