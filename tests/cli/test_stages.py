"""--export-stages end to end: models trained a few steps on 1, 2 and 3 pipeline stages write
RUN/stages/stage<k>.onnx and stages.json; every stage model passes the full onnx.checker, the
stages' nodes partition the model's (tests/python/check_stage_models.py), and in ONNX Runtime the
chain of stage models equals the trained model on the same random input within 1e-5 relative.
Models: the bundled digits MLP, LeNet-5 with BatchNorm (training-mode export: batch statistics) and
the Transformer encoder (training-mode export with dropout 0; its shape subgraphs cross stages).
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_stages.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import check_stage_models  # noqa: E402
sys.path.insert(0, HERE)
from test_cli import reuse_ok  # noqa: E402

BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
MLP = os.path.join(ROOT, "models", "digits_mlp.onnx")


def run(*args):
    p = subprocess.run([BIN, *reuse_ok(args)], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


class StagesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-stages-")
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, model, out, *extra, steps=3, batch=4):
        rc, so, se = run(model, "--steps", steps, "--batch-size", batch, "--export-stages", "--out", out,
                         "--seed", 1, *extra)
        self.assertEqual(rc, 0, f"exit {rc}: {se or so}")
        self.assertIn("stages: ", so)
        with open(os.path.join(out, "stages", "stages.json")) as f:
            return json.load(f)

    def chain(self, full, out, batch=4):
        lines = []
        failure = check_stage_models.check(full, os.path.join(out, "stages"), batch=batch, log=lines.append)
        self.assertIsNone(failure, "\n".join(lines + [str(failure)]))
        return lines

    def trained(self, model, out):
        return os.path.join(out, os.path.splitext(os.path.basename(model))[0] + ".trained.onnx")

    def test_mlp_two_and_three_stages(self):
        out = os.path.join(self.dir, "mlp")
        index = self.train(MLP, out, "--gpus", 3)
        self.assertEqual([s["file"] for s in index["stages"]], ["stage0.onnx", "stage1.onnx", "stage2.onnx"])
        self.assertEqual(index["stages"][0]["inputs"], ["input"])
        self.assertEqual(index["stages"][-1]["outputs"], ["logits"])
        self.assertTrue(all(s["batch"] == "batch" for s in index["stages"]), index)
        self.chain(self.trained(MLP, out), out)
        self.chain(self.trained(MLP, out), out, batch=7)   # the symbolic batch dimension is kept
        # The same folder with fewer stages: the third stage's file goes away.
        index = self.train(MLP, out, "--gpus", 2)
        self.assertEqual(len(index["stages"]), 2)
        self.assertFalse(os.path.exists(os.path.join(out, "stages", "stage2.onnx")))
        self.chain(self.trained(MLP, out), out)

    def test_weights_aliased_through_identity(self):
        # Opset-13 PyTorch exports read a shared initializer through Identity nodes. The importer
        # reads the weight itself in every reader, so a reader on another stage is served its own
        # version: training equals the same model without the aliases bit for bit (1F1B SpecTrain
        # on 3 stages, where a reader one stage later predicts differently), and the stage models
        # recompute the Identity where they need it.
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(5)
        d, classes = 16, 10
        inits = [numpy_helper.from_array(rng.normal(0, 0.35, shape).astype(np.float32), name)
                 for name, shape in (("W0", (d, d)), ("Ws", (d, d)), ("W3", (d, classes)))]

        def model(path, alias):
            nodes = [helper.make_node("Gemm", ["x", "W0"], ["h0"], name="fc0"),
                     helper.make_node("Relu", ["h0"], ["r0"], name="relu0"),
                     helper.make_node("Gemm", ["r0", "Ws"], ["h1"], name="fc1")]
            if alias:  # on stage 1, with fc1; its reader fc2 is on stage 2
                nodes.append(helper.make_node("Identity", ["Ws"], ["onnx::Gemm_9"], name="Identity_0"))
            nodes += [helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),helper.make_node("Gemm", ["r1", "onnx::Gemm_9" if alias else "Ws"], ["h2"], name="fc2"),
                      helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
                      helper.make_node("Gemm", ["r2", "W3"], ["logits"], name="fc3")]
            g = helper.make_graph(nodes, "aliased", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d])],
                                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])], inits)
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
            return path

        plain = model(os.path.join(self.dir, "plain.onnx"), False)
        aliased = model(os.path.join(self.dir, "aliased.onnx"), True)
        trained = {}
        for name, path in (("plain", plain), ("aliased", aliased)):
            out = os.path.join(self.dir, "alias_" + name)
            self.train(path, out, "--gpus", 3, "--split-at", "relu0,relu1", "--lr", 0.2, "--spectrain-staleness",
                       "exact", steps=8)
            m = onnx.load(self.trained(path, out))
            trained[name] = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
            if name == "aliased":
                self.assertIn("Identity", [n.op_type for n in m.graph.node])  # the source keeps its nodes
                self.chain(self.trained(path, out), out)
        self.assertEqual(sorted(trained["plain"]), sorted(trained["aliased"]))
        for k in trained["plain"]:
            self.assertTrue(np.array_equal(trained["plain"][k], trained["aliased"][k]), k)
        self.assertFalse(np.array_equal(trained["plain"]["Ws"], numpy_helper.to_array(inits[1])))

    def test_one_stage_is_the_whole_forward(self):
        out = os.path.join(self.dir, "mlp1")
        index = self.train(MLP, out)
        self.assertEqual(len(index["stages"]), 1)
        s = index["stages"][0]
        self.assertEqual((s["inputs"], s["outputs"]), (["input"], ["logits"]))
        full, stage = onnx.load(self.trained(MLP, out)), onnx.load(os.path.join(out, "stages", "stage0.onnx"))
        self.assertEqual(list(full.graph.node), list(stage.graph.node))
        self.assertEqual(sorted(t.SerializeToString() for t in full.graph.initializer),
                         sorted(t.SerializeToString() for t in stage.graph.initializer))
        self.assertEqual((stage.ir_version, list(stage.opset_import), stage.producer_name),
                         (full.ir_version, list(full.opset_import), full.producer_name))
        self.chain(self.trained(MLP, out), out)

    def test_plan_only_exports_untrained_weights(self):
        out = os.path.join(self.dir, "plan")
        with open(MLP, "rb") as f:
            before = f.read()
        rc, so, se = run(MLP, "--gpus", 2, "--plan-only", "--export-stages", "--out", out)
        self.assertEqual(rc, 0, se)
        self.assertFalse(os.path.exists(self.trained(MLP, out)))
        self.chain(MLP, out)
        with open(MLP, "rb") as f:
            self.assertEqual(f.read(), before, "the input model was modified")

    def test_gpipe_micro_batches(self):
        out = os.path.join(self.dir, "gpipe")
        self.train(MLP, out, "--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2, batch=8)
        self.chain(self.trained(MLP, out), out, batch=8)

    def test_lenet_batchnorm(self):
        import export_models as em
        path = os.path.join(self.dir, "lenet_bn.onnx")
        em.export_torch(em.build_module("lenet_bn"), "lenet_bn", 13, "train", path)
        for k in (2, 3):
            out = os.path.join(self.dir, f"lenet{k}")
            self.train(path, out, "--gpus", k)
            self.chain(self.trained(path, out), out)

    def test_transformer(self):
        import export_models as em
        path = os.path.join(self.dir, "transformer.onnx")
        em.export_torch(em.build_module("transformer", dropout=0), "transformer", 17, "train", path)
        data = os.path.join(self.dir, "tokens")   # token ids and labels (synthetic data is float)
        os.makedirs(data, exist_ok=True)
        rng = np.random.default_rng(5)
        x = rng.integers(1, em.VOCAB, size=(16, em.SEQ)).astype(np.int64)
        x[::2, -3:] = 0                            # padding
        np.save(os.path.join(data, "x.npy"), x)
        np.save(os.path.join(data, "y.npy"), rng.integers(0, em.NUM_CLASSES["transformer"], size=16))
        # A manual cut inside layer 1's attention: stage 1 reshapes by shapes of stage 0's tensors,
        # folded at import, so it holds them as constants for the batch size; and an automatic plan.
        for k, split in ((2, ["--split-at", "/encoder/layers.1/self_attn/Reshape"]), (3, [])):
            out = os.path.join(self.dir, f"transformer{k}")
            index = self.train(path, out, "--gpus", k, "--data", data, *split)
            for s in index["stages"]:  # a folded shape value fixes the batch size, and says so
                self.assertEqual(s["batch"], "4" if s["folded_constants"] else "batch", s)
            if split:
                self.assertTrue(index["stages"][1]["folded_constants"], index["stages"][1])
            self.chain(self.trained(path, out), out)

    def test_help(self):
        rc, so, se = run("--help")
        self.assertEqual(rc, 0)
        self.assertIn("--export-stages", so)


if __name__ == "__main__":
    unittest.main()
