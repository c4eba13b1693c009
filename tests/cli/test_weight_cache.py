"""The weight cache end to end (kernels/weight_cache.h): oneDNN convolutions keep their
weights in oneDNN's layout while the runtime's weight version says they are unchanged. On a CNN
whose convolutions take the blocked-layout path, with a weight shared by convolutions of two
stages, the trained model is bit for bit the one trained without the cache, for one stage (with
validation), GPipe with 4 micro-batches, 1F1B SpecTrain (prediction), stash, stale, replicas,
recomputation, host copies apart from the buffers (as on CUDA), and a checkpoint resume: with the cache where the runtime puts it (auto), and
with every executor caching (--weight-cache all) while every hit is checked against a
fresh conversion (--test-weight-cache-verify). A cache that ignores the version
(--test-weight-cache-ignore-versions) trains another model in every configuration, so
these comparisons fail when the version is not honoured.
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_weight_cache.py"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from test_cli import reuse_ok  # noqa: E402

BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
COMMON = ["--device", "cpu", "--batch-size", 8, "--seed", 3, "--lr", 0.05, "--val-split", 0.25, "--quiet"]
CACHE_ENV = ("PIPETRAIN_WEIGHT_CACHE_STATS",)


def cnn(path):
    """x [N, 16, 8, 8] -> 4 x (Conv 3x3 pads 1, Relu) -> Flatten -> Gemm [N, 10]; the third and
    fourth convolutions read the same weight Ws."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def weight(name, shape, scale):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))

    weight("W0", (16, 16, 3, 3), 0.08)
    weight("B0", (16,), 0.1)
    weight("W1", (32, 16, 3, 3), 0.08)
    weight("Ws", (32, 32, 3, 3), 0.06)
    weight("Wf", (10, 32 * 64), 0.02)
    weight("Bf", (10,), 0.1)
    h = "x"
    for k, (w, b) in enumerate([("W0", "B0"), ("W1", None), ("Ws", None), ("Ws", None)]):
        nodes.append(helper.make_node("Conv", [h, w] + ([b] if b else []), [f"c{k}"], name=f"conv{k}",
                                      pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}"))
        h = f"r{k}"
    nodes.append(helper.make_node("Flatten", [h], ["f"], name="flatten"))
    nodes.append(helper.make_node("Gemm", ["f", "Wf", "Bf"], ["y"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def run(mode_flags, *args):
    env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV}
    env["PIPETRAIN_WEIGHT_CACHE_STATS"] = "1"
    p = subprocess.run([BIN, *mode_flags, *reuse_ok(args)], capture_output=True, text=True, timeout=300, env=env)
    return p.returncode, p.stdout, p.stderr


def stats(stderr):
    m = re.search(r"weight cache: (\d+) hits, (\d+) reorders", stderr)
    return (int(m.group(1)), int(m.group(2))) if m else None


def initializers(out):
    [f] = [x for x in os.listdir(out) if x.endswith(".trained.onnx")]
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(os.path.join(out, f)).graph.initializer}


MODES = {
    "off": ["--weight-cache", "off"],
    "auto": [],
    "all": ["--weight-cache", "all", "--test-weight-cache-verify"],
    "broken": ["--weight-cache", "all", "--test-weight-cache-ignore-versions"],
}

CONFIGS = {
    "one_stage": ["--gpus", 1],
    "gpipe4": ["--gpus", 2, "--schedule", "gpipe", "--micro-batches", 4],
    "spectrain3": ["--gpus", 3],
    "stash3": ["--gpus", 3, "--weights", "stash"],
    "stale2": ["--gpus", 2, "--weights", "stale"],
    "replicas_gpipe": ["--gpus", 2, "--replicas", 2, "--schedule", "gpipe", "--micro-batches", 2],
    "recompute_spectrain3": ["--gpus", 3, "--recompute", "stage"],
    "recompute_gpipe3": ["--gpus", 3, "--schedule", "gpipe", "--micro-batches", 2, "--recompute", "stage"],
    # host copies apart from the kernels' buffers, as on CUDA: weights reach them by upload
    "gpipe2_separate_host": ["--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2, "--test-separate-host"],
    "spectrain2_separate_host": ["--gpus", 2, "--test-separate-host"],
}


class WeightCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-wcache-")
        cls.dir = cls.tmp.name
        cls.model = cnn(os.path.join(cls.dir, "cnn.onnx"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, name, mode, *args):
        out = os.path.join(self.dir, name + "-" + mode)
        rc, so, se = run(MODES[mode], self.model, "--out", out, *COMMON, *args)
        self.assertEqual(rc, 0, f"{name} ({mode}): exit {rc}\n{so}\n{se}")
        return out, initializers(out), stats(se)

    def assert_same(self, a, b, what):
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertTrue(np.array_equal(a[k], b[k]), f"{what}: {k} differs by {np.abs(a[k] - b[k]).max()}")

    def differs(self, a, b):
        return any(not np.array_equal(a[k], b[k]) for k in a)

    def test_bit_identical_in_every_schedule_and_weight_mode(self):
        start = {i.name: numpy_helper.to_array(i) for i in onnx.load(self.model).graph.initializer}
        for name, cfg in CONFIGS.items():
            with self.subTest(config=name):
                args = ["--steps", 4, "--eval-every", 2, *cfg]
                out, ref, s_off = self.train(name, "off", *args)
                self.assertEqual(s_off, (0, 0), "--weight-cache off still cached")
                self.assertTrue(self.differs(ref, start), "nothing trained")
                for mode in ("auto", "all"):
                    _, w, s = self.train(name, mode, *args)
                    self.assert_same(w, ref, f"{name} ({mode})")
                    if mode == "all":
                        self.assertGreater(s[1], 0, f"{name}: nothing went through the cache")
                    if mode == "auto" and "gpipe" in name:  # micro-batches share the weights
                        self.assertGreater(s[0], 0, f"{name}: no hit under GPipe: {s}")
                _, bad, _ = self.train(name, "broken", *args)
                self.assertTrue(self.differs(bad, ref), f"{name}: a cache that ignores versions trained the same model")
                if name == "spectrain3":
                    # the shared weight Ws crosses a stage boundary in this configuration
                    with open(os.path.join(out, "partition.json")) as f:
                        stages = json.load(f)["stages"]
                    self.assertTrue(any("Ws" in s["shared"] for s in stages), stages)

    def test_validation_hits(self):
        # One stage validates on the training executor: every validation batch after the first
        # reuses the converted weights, and the losses written equal those without the cache.
        args = ["--gpus", 1, "--steps", 2, "--eval-every", 1]
        out_off, _, _ = self.train("val", "off", *args)
        out_auto, _, s = self.train("val", "auto", *args)
        self.assertGreater(s[0], 0, s)
        with open(os.path.join(out_off, "metrics.csv")) as a, open(os.path.join(out_auto, "metrics.csv")) as b:
            # step,epoch,loss,lr,samples_per_s,val_loss,val_accuracy: all but the speed
            rows_a = [r.split(",")[:4] + r.split(",")[5:] for r in a.read().splitlines()]
            rows_b = [r.split(",")[:4] + r.split(",")[5:] for r in b.read().splitlines()]
        self.assertEqual(rows_a, rows_b)

    def test_checkpoint_resume(self):
        for name, cfg in {"resume_gpipe": ["--gpus", 2, "--schedule", "gpipe", "--micro-batches", 4],
                          "resume_spectrain": ["--gpus", 3]}.items():
            with self.subTest(config=name):
                _, full, _ = self.train(name + "-full", "off", "--steps", 4, "--checkpoint-every", 2, *cfg)
                part = os.path.join(self.dir, name + "-part")
                for steps, extra in ((2, []), (4, ["--resume"])):
                    rc, so, se = run(MODES["all"], self.model, "--out", part, *COMMON, "--steps", steps,
                                     "--checkpoint-every", 2, *extra, *cfg)
                    self.assertEqual(rc, 0, se)
                self.assert_same(initializers(part), full, name)

    def test_bad_policy_refused(self):
        rc, so, se = run(["--weight-cache", "sometimes"], self.model, "--steps", 1, "--out",
                         os.path.join(self.dir, "bad"), *COMMON)
        self.assertEqual(rc, 2, so + se)
        first = se.strip().splitlines()[0]
        for needle in ("onnx-pipetrain: error:", "--weight-cache", "sometimes", "auto", "off", "all"):
            self.assertIn(needle, first)


if __name__ == "__main__":
    unittest.main()
