"""--recompute end to end: the exported model (weights and BatchNorm running statistics) is bit for
bit the one trained without recomputation, on LeNet-5 with BatchNorm and on the Transformer encoder
with dropout 0.1, under 1F1B (spectrain, stash, stale) and GPipe, with the same split; --recompute
auto picks only the stage whose device would not fit without it; an unknown value is refused.
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_recompute.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)
from test_cli import reuse_ok  # noqa: E402

BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
MLP = os.path.join(ROOT, "models", "digits_mlp.onnx")
MODES = (["--weights", "spectrain"], ["--weights", "stash"], ["--weights", "stale"],
         ["--schedule", "gpipe", "--micro-batches", "2"])


def run(*args):
    p = subprocess.run([BIN, *reuse_ok(args)], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def initializers(out):
    [f] = [x for x in os.listdir(out) if x.endswith(".trained.onnx")]
    m = onnx.load(os.path.join(out, f))
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


def plan(out):
    with open(os.path.join(out, "partition.json")) as f:
        return json.load(f)


class RecomputeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-recompute-")
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, model, out, *extra):
        rc, so, se = run(model, "--device", "cpu", "--steps", 4, "--batch-size", 4, "--seed", 2, "--quiet",
                         "--out", out, *extra)
        self.assertEqual(rc, 0, f"exit {rc}: {se or so}")
        return initializers(out)

    def same_weights(self, model, name, *extra):
        for mode in MODES:
            with self.subTest(mode=mode):
                tag = name + "-" + "-".join(mode[1::2])
                auto_dir = os.path.join(self.dir, tag + "-auto")
                self.train(model, auto_dir, "--gpus", 3, *mode, *extra)
                # The same split: under 1F1B the split decides which weights each layer sees, and
                # the plan charges a recomputing stage its rerun forward, which may move the split.
                # Both runs take the automatic plan's counts as --balance (in the graph's order; the
                # automatic plan may have used another order, so the runs compared both pass it).
                balance = ",".join(str(len(s["nodes"])) for s in plan(auto_dir)["stages"])
                keep_dir = os.path.join(self.dir, tag + "-none")
                keep = self.train(model, keep_dir, "--gpus", 3, *mode, "--balance", balance, *extra)
                rec_dir = os.path.join(self.dir, tag + "-stage")
                rec = self.train(model, rec_dir, "--gpus", 3, *mode, "--balance", balance, "--recompute", "stage",
                                 *extra)
                stages = plan(rec_dir)["stages"]
                self.assertTrue(any(s["recompute"] for s in stages), stages)
                self.assertFalse(any(s["recompute"] for s in plan(keep_dir)["stages"]))
                self.assertEqual(sorted(rec), sorted(keep))
                for k in keep:
                    self.assertTrue(np.array_equal(rec[k], keep[k]), f"{k}: max diff {np.abs(rec[k] - keep[k]).max()}")
                start = {i.name: numpy_helper.to_array(i) for i in onnx.load(model).graph.initializer}
                self.assertTrue(any(not np.array_equal(start[k], keep[k]) for k in keep if k in start))

    def test_lenet_batchnorm(self):
        import export_models as em
        path = os.path.join(self.dir, "lenet_bn.onnx")
        em.export_torch(em.build_module("lenet_bn"), "lenet_bn", 13, "train", path)
        self.same_weights(path, "lenet")
        # BatchNorm's running statistics are exported and must have moved from their start.
        start = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
        trained = initializers(os.path.join(self.dir, "lenet-spectrain-stage"))
        stats = [k for k in start if "running_mean" in k]
        self.assertTrue(stats)
        self.assertTrue(all(not np.array_equal(start[k], trained[k]) for k in stats))

    def test_transformer_dropout(self):
        import export_models as em
        path = os.path.join(self.dir, "transformer.onnx")
        em.export_torch(em.build_module("transformer", dropout=0.1), "transformer", 17, "train", path)
        data = os.path.join(self.dir, "tokens")
        os.makedirs(data, exist_ok=True)
        rng = np.random.default_rng(5)
        x = rng.integers(1, em.VOCAB, size=(16, em.SEQ)).astype(np.int64)
        np.save(os.path.join(data, "x.npy"), x)
        np.save(os.path.join(data, "y.npy"), rng.integers(0, em.NUM_CLASSES["transformer"], size=16))
        self.same_weights(path, "transformer", "--data", data)

    def test_shared_weights_and_skip_connections(self):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "python", "make_shared_weight_models.py"),
                        self.dir], check=True, capture_output=True)
        shared = os.path.join(self.dir, "shared_mlp.onnx")
        # 1F1B serves a reader stage a shared weight per pass; its forward's version is not kept.
        # Without the epilogue fusion (here and below): the cuts and the weight named are the per-node
        # graph's (fused, the Gemm reading Ws also reads bz, which is then named first). The split
        # fc0 relu0 fc1 | relu1 fc2 | ...: stage 1 reads Ws (and bz), both owned by stage 0.
        rc, so, se = run(shared, "--gpus", 3, "--steps", 2, "--recompute", "stage", "--plan-only", "--out",
                         os.path.join(self.dir, "shared-1f1b"), "--no-fusion", "epilogue", "--no-calibrate",
                         "--balance", "3,2,3")
        self.assertEqual(rc, 2, so + se)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertIn("--recompute stage: stage 1 reads weight 'Ws'", se)
        # GPipe: one version per mini-batch, so the rerun forward reads the same weights.
        cases = ((shared, ["--gpus", 3, "--balance", "3,3,2", "--schedule", "gpipe", "--micro-batches", 4]),
                 # the skip from stage 0 into stage 2 is one of stage 2's inputs
                 (os.path.join(self.dir, "residual_cnn.onnx"), ["--gpus", 4, "--balance", "2,3,4,4"]))
        for model, extra in cases:
            with self.subTest(model=os.path.basename(model)):
                tag = os.path.basename(model)
                args = ["--device", "cpu", "--steps", 4, "--batch-size", 64, "--seed", 2, "--quiet", *extra,
                        "--no-fusion", "epilogue"]
                weights = []
                for rc_mode in ("none", "stage"):
                    out = os.path.join(self.dir, f"{tag}-{rc_mode}")
                    rc, so, se = run(model, *args, "--recompute", rc_mode, "--out", out)
                    self.assertEqual(rc, 0, se)
                    weights.append(initializers(out))
                self.assertTrue(any(s["recompute"] for s in plan(out)["stages"]))
                for k in weights[0]:
                    self.assertTrue(np.array_equal(weights[0][k], weights[1][k]), k)

    def test_unknown_value_refused(self):
        rc, so, se = run(MLP, "--recompute", "sometimes", "--plan-only", "--out", os.path.join(self.dir, "bad"))
        self.assertEqual(rc, 2, se)
        self.assertIn("--recompute: sometimes not in {none,stage,auto}", se.splitlines()[0])

    def device(self, name, memory_bytes):
        path = os.path.join(self.dir, name + ".json")
        with open(path, "w") as f:
            json.dump({"name": name, "kind": "cpu", "peak_tflops": 0.1, "mem_bandwidth_gbs": 10,
                       "memory_gb": memory_bytes / 2**30}, f)
        return path

    def test_auto_picks_the_stage_that_does_not_fit(self):
        common = ["--device", "cpu", "--gpus", 2, "--schedule", "gpipe", "--micro-batches", 4, "--batch-size", 2048,
                  "--balance", "3,3", "--plan-only", "--no-fusion", "epilogue"]  # the digits MLP's 6 nodes, unfused
        big = self.device("big", 2**40)
        out = os.path.join(self.dir, "auto")
        rc, so, se = run(MLP, *common, "--device-spec", f"{big},{big}", "--out", out)
        self.assertEqual(rc, 0, se)
        keep = plan(out)["stages"]
        rc, so, se = run(MLP, *common, "--device-spec", f"{big},{big}", "--recompute", "stage", "--out", out)
        self.assertEqual(rc, 0, se)
        rec = plan(out)["stages"]
        self.assertTrue(rec[0]["recompute"], rec[0])
        self.assertLess(rec[0]["memory_bytes"], keep[0]["memory_bytes"])
        small = self.device("small", (rec[0]["memory_bytes"] + keep[0]["memory_bytes"]) / 2)
        rc, so, se = run(MLP, *common, "--device-spec", f"{small},{big}", "--out", out)
        self.assertEqual(rc, 2, so + se)
        self.assertIn("out of memory", se)
        rc, so, se = run(MLP, *common, "--device-spec", f"{small},{big}", "--recompute", "auto", "--out", out)
        self.assertEqual(rc, 0, se)
        doc = plan(out)
        self.assertEqual(doc["recompute"], "auto")
        self.assertEqual([s["recompute"] for s in doc["stages"]], [True, False])
        with open(os.path.join(out, "partition.txt")) as f:
            self.assertIn("recompute auto: stage 0 keep", f.read())
        with open(os.path.join(out, "partition.html")) as f:
            self.assertEqual(f.read().count("(recompute)"), 1)
        # A device too small even for the recomputing stage: refused before training, naming it.
        tiny = self.device("tiny", rec[0]["memory_bytes"] / 2)
        rc, so, se = run(MLP, *common, "--device-spec", f"{tiny},{big}", "--recompute", "auto", "--out", out)
        self.assertEqual(rc, 2, so + se)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertIn("(tiny,", se)
        self.assertIn("recomputed: inputs", se)


if __name__ == "__main__":
    unittest.main()
