"""Copy-free Reshape (runtime/exec/executor.h, MemoryPlan aliases): a Reshape, Flatten, Squeeze,
Unsqueeze or Identity whose input and output are both planned shares its input's bytes and is not
run. The Transformer encoder of tools/bench/peer_models.py, exported by PyTorch, trains bit for bit
the same with aliases (default) and without (--reshape-alias off): losses and every trained
weight, on one stage, on two stages (1F1B with SpecTrain), GPipe with micro-batches, --recompute
stage, and with host copies apart from the buffers (as on CUDA). The `memory: stage` lines count the
aliased copies: some with aliases, none without. An invalid value of the variable is refused.
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_reshape_alias.py"""
import csv
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from test_fusions import export_peer_model  # noqa: E402

BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
STEPS = 6

CONFIGS = {
    "one_stage": [],
    "two_stages": ["--gpus", 2],
    "gpipe2": ["--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2],
    "recompute2": ["--gpus", 2, "--recompute", "stage"],
    "separate_host2": ["--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2, "--test-separate-host"],
}


def run(alias, *args):
    flags = [] if alias is None else ["--reshape-alias", alias]
    p = subprocess.run([BIN, *flags, *map(str, args)], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


class ReshapeAliasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-alias-")
        cls.dir = cls.tmp.name
        cls.model = os.path.join(cls.dir, "transformer.onnx")
        x, y = export_peer_model("transformer", cls.model)
        cls.data = os.path.join(cls.dir, "transformer.data")
        os.makedirs(cls.data)
        np.save(os.path.join(cls.data, "x.npy"), np.concatenate([x[:8]] * 2 * STEPS))
        np.save(os.path.join(cls.data, "y.npy"), np.concatenate([y[:8]] * 2 * STEPS))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, name, alias, *extra):
        out = os.path.join(self.dir, f"{name}-{alias}")
        rc, so, se = run(alias, self.model, "--data", self.data, "--no-shuffle", "--val-split", 0, "--steps", STEPS,
                         "--batch-size", 8, "--lr", 0.05, "--momentum", 0.9, "--device", "cpu", "--out", out,
                         "--overwrite", *extra)
        self.assertEqual(rc, 0, f"{name} ({alias}): exit {rc}\n{so}\n{se}")
        copies = {int(k): int(n) for k, n in re.findall(r"^memory: stage (\d+) peak .*; (\d+) copies aliased", so, re.M)}
        with open(os.path.join(out, "metrics.csv"), newline="") as f:
            losses = [float(r["loss"]) for r in csv.DictReader(f)]
        trained = onnx.load(os.path.join(out, "transformer.trained.onnx"))
        weights = {t.name: numpy_helper.to_array(t) for t in trained.graph.initializer}
        return losses, weights, copies

    def check(self, name):
        extra = CONFIGS[name]
        l_on, w_on, c_on = self.train(name, "on", *extra)
        l_off, w_off, c_off = self.train(name, "off", *extra)
        stages = int(extra[1]) if extra else 1
        self.assertEqual(sorted(c_on), list(range(stages)), f"{name}: memory lines")
        self.assertEqual(sorted(c_off), list(range(stages)), f"{name}: memory lines")
        self.assertGreater(sum(c_on.values()), 0, f"{name}: no copy aliased")
        self.assertEqual(sum(c_off.values()), 0, f"{name}: copies aliased with --reshape-alias off")
        self.assertEqual(len(l_on), STEPS)
        self.assertTrue(np.isfinite(l_on).all(), l_on)
        self.assertEqual(l_on, l_off, f"{name}: per-step losses with and without aliases")
        self.assertEqual(sorted(w_on), sorted(w_off))
        w_0 = {t.name: numpy_helper.to_array(t) for t in onnx.load(self.model).graph.initializer}
        moved = 0
        for k, v in w_off.items():
            self.assertEqual(w_on[k].tobytes(), v.tobytes(), f"{name}: trained '{k}' with and without aliases")
            moved += not np.array_equal(v, w_0[k])
        self.assertGreaterEqual(moved, 3, f"{name}: trained initializers")
        return c_on

    def test_one_stage(self):
        self.check("one_stage")

    def test_two_stages(self):
        self.check("two_stages")

    def test_gpipe(self):
        self.check("gpipe2")

    def test_recompute(self):
        self.check("recompute2")

    def test_separate_host_copies(self):
        self.check("separate_host2")

    def test_default_is_on_and_invalid_value_refused(self):
        out = os.path.join(self.dir, "default")
        rc, so, se = run(None, self.model, "--data", self.data, "--val-split", 0, "--steps", 1, "--batch-size", 8,
                         "--device", "cpu", "--out", out, "--overwrite")
        self.assertEqual(rc, 0, se)
        self.assertGreater(sum(int(n) for n in re.findall(r"; (\d+) copies aliased", so)), 0, so)
        rc, so, se = run("maybe", self.model, "--data", self.data, "--steps", 1, "--out", out, "--overwrite")
        self.assertEqual(rc, 2, so + se)
        self.assertIn("--reshape-alias", se)
        self.assertIn("maybe", se)


if __name__ == "__main__":
    unittest.main()
