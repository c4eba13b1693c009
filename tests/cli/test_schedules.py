"""Schedules as data, end to end (partitioner/schedule.h). Every synchronous schedule trains, with
the same micro-batches, the weights GPipe trains, bit for bit (their gradient sums run in the same
micro-batch order), and the same losses: synchronous 1F1B (--weights sync), ZB-H1 (the backward
split into I and W, W deferred), interleaved stages (2 virtual stages per device, one thread per
device) and ZB-V (2 virtual stages per device in a V, split backwards), on the digits MLP, LeNet-5 with BatchNorm in training mode,
the Transformer encoder with dropout 0.1, with data-parallel replicas, activation recomputation,
gradient clipping and a weight shared across stages. --schedule-out writes the program a
--schedule-file runs again (same weights); malformed, deadlocking and mismatched files and
meaningless flag combinations are refused before any work (exit 2, one line naming the file or flag,
the stage and the action). The report's predicted bubble of ZB-H1 is below synchronous 1F1B's.
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_schedules.py"""
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
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)
from test_cli import reuse_ok  # noqa: E402

BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
MLP = os.path.join(ROOT, "models", "digits_mlp.onnx")
SYNC = {"1f1b-sync": ["--schedule", "1f1b", "--weights", "sync"], "zb-h1": ["--schedule", "zb-h1"],
        "auto": ["--schedule", "auto"], "interleaved": ["--schedule", "interleaved", "--virtual-stages", "2"],
        "zbv": ["--schedule", "zbv"]}


def run(*args):
    p = subprocess.run([BIN, *reuse_ok(args)], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def weights(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def losses(out):
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = f.read().strip().splitlines()[1:]
    return [r.split(",")[2] for r in rows]   # as written: equal text is equal bits at this precision


class SchedulesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-schedules-")
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, model, tag, *flags, steps=8, batch=16):
        out = os.path.join(self.dir, tag)
        rc, so, se = run(model, "--steps", steps, "--batch-size", batch, "--seed", 3, "--out", out, "--quiet", *flags)
        self.assertEqual(rc, 0, f"{tag}: exit {rc}: {se or so}")
        trained = os.path.join(out, os.path.splitext(os.path.basename(model))[0] + ".trained.onnx")
        return weights(trained), losses(out)

    def assert_same_as_gpipe(self, model, tag, *flags, schedules=("1f1b-sync", "zb-h1"), ref_flags=None, **kw):
        # ref_flags: GPipe's own (interleaved stages cut --gpus x V stages: GPipe on as many).
        ref_w, ref_l = self.train(model, tag + "-gpipe", "--schedule", "gpipe", *(flags if ref_flags is None else ref_flags), **kw)
        start = weights(model)
        self.assertTrue(any(not np.array_equal(ref_w[k], start[k]) for k in start if k in ref_w), "training changed nothing")
        for name in schedules:
            w, l = self.train(model, f"{tag}-{name}", *SYNC[name], *flags, **kw)
            self.assertEqual(sorted(w), sorted(ref_w))
            for k in ref_w:
                self.assertTrue(np.array_equal(w[k], ref_w[k]),
                                f"{tag} {name}: {k} differs from GPipe by {np.max(np.abs(w[k] - ref_w[k])):.3g}")
            self.assertEqual(l, ref_l, f"{tag} {name}: losses differ from GPipe's")

    def test_mlp_on_3_and_4_stages(self):
        self.assert_same_as_gpipe(MLP, "mlp3", "--gpus", 3, "--micro-batches", 4, schedules=("1f1b-sync", "zb-h1", "auto"))
        self.assert_same_as_gpipe(MLP, "mlp4", "--gpus", 4, "--micro-batches", 8, batch=32)
        # Fewer micro-batches than stages, and one.
        self.assert_same_as_gpipe(MLP, "mlp4m2", "--gpus", 4, "--micro-batches", 2)
        self.assert_same_as_gpipe(MLP, "mlp2m1", "--gpus", 2, "--micro-batches", 1, schedules=("zb-h1",))
        # Interleaved stages: 2 devices x 2 chunks (4 stages, device 0 runs stages 0 and 2), against
        # GPipe on 2 and on 4 stages; with M = N the order runs every forward first.
        self.assert_same_as_gpipe(MLP, "mlp2i", "--gpus", 2, "--micro-batches", 4, schedules=("interleaved", "zbv"))
        self.assert_same_as_gpipe(MLP, "mlp2i4", "--gpus", 2, "--micro-batches", 2, schedules=("interleaved", "zbv"),
                                  ref_flags=["--gpus", 4, "--micro-batches", 2])

    def test_batchnorm_and_dropout(self):
        import export_models as em
        lenet = os.path.join(self.dir, "lenet_bn.onnx")
        em.export_torch(em.build_module("lenet_bn"), "lenet_bn", 13, "train", lenet)
        self.assert_same_as_gpipe(lenet, "lenet", "--gpus", 3, "--micro-batches", 4, steps=4)
        tf = os.path.join(self.dir, "transformer.onnx")
        em.export_torch(em.build_module("transformer", dropout=0.1), "transformer", 17, "train", tf)
        data = os.path.join(self.dir, "tokens")
        os.makedirs(data, exist_ok=True)
        rng = np.random.default_rng(5)
        np.save(os.path.join(data, "x.npy"), rng.integers(1, em.VOCAB, size=(64, em.SEQ)).astype(np.int64))
        np.save(os.path.join(data, "y.npy"), rng.integers(0, em.NUM_CLASSES["transformer"], size=64))
        self.assert_same_as_gpipe(tf, "transformer", "--gpus", 2, "--micro-batches", 4, "--data", data, steps=4,
                                  schedules=("1f1b-sync", "zb-h1", "interleaved", "zbv"))
        self.assert_same_as_gpipe(lenet, "lenet-i", "--gpus", 2, "--micro-batches", 4, steps=4, schedules=("interleaved", "zbv"))

    def test_replicas_recompute_and_clipping(self):
        self.assert_same_as_gpipe(MLP, "replicas", "--gpus", 2, "--replicas", 2, "--micro-batches", 2, schedules=("zb-h1",))
        self.assert_same_as_gpipe(MLP, "recompute", "--gpus", 3, "--micro-batches", 4, "--recompute", "stage")
        self.assert_same_as_gpipe(MLP, "clip", "--gpus", 3, "--micro-batches", 4, "--clip-grad-norm", 0.05,
                                  "--optimizer", "adamw", "--lr", 0.01)
        # Interleaved: a device's chunks post their parts of the norm before either waits for the sum.
        self.assert_same_as_gpipe(MLP, "clip-i", "--gpus", 2, "--micro-batches", 4, "--clip-grad-norm", 0.05,
                                  "--optimizer", "adamw", "--lr", 0.01, schedules=("interleaved", "zbv"))
        self.assert_same_as_gpipe(MLP, "replicas-i", "--gpus", 2, "--replicas", 2, "--micro-batches", 2,
                                  schedules=("interleaved", "zbv"))
        self.assert_same_as_gpipe(MLP, "recompute-i", "--gpus", 2, "--micro-batches", 4, "--recompute", "stage",
                                  schedules=("interleaved", "zbv"))

    def test_2bw(self):
        # PipeDream-2BW against its explicit-version reference: tests/runtime/pipeline_test.cpp. Here:
        # recomputation changes nothing, every pass reads version max(0, i - 1) (the trace), and
        # the run says what it is.
        w, _ = self.train(MLP, "2bw", "--gpus", 3, "--weights", "2bw", "--micro-batches", 4, "--trace")
        r, _ = self.train(MLP, "2bw-rec", "--gpus", 3, "--weights", "2bw", "--micro-batches", 4, "--recompute", "stage")
        for k in w:
            self.assertTrue(np.array_equal(w[k], r[k]), k)
        # With prediction: the rerun forwards use the weights their forwards used (kept per pass).
        p, _ = self.train(MLP, "2bwp", "--gpus", 3, "--weights", "2bw-predict", "--micro-batches", 4)
        pr, _ = self.train(MLP, "2bwp-rec", "--gpus", 3, "--weights", "2bw-predict", "--micro-batches", 4, "--recompute", "stage")
        for k in p:
            self.assertTrue(np.array_equal(p[k], pr[k]), k)
        self.assertFalse(all(np.array_equal(p[k], w[k]) for k in p), "2bw-predict trained 2bw's weights")
        with open(os.path.join(self.dir, "2bw", "trace.json")) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        self.assertEqual(len(events), 3 * 8 * 4 * 2)  # stages x steps x micro-batches x (F, B)
        for e in events:
            self.assertEqual(e["args"]["version"], max(0, e["args"]["mini_batch"] - 1), e)

    def test_2bw_resume_reads_the_checkpoints_weights(self):
        # A checkpoint holds the master weights alone, not the version before them: the first
        # mini-batch after a resume reads the checkpoint's weights (its loss is the step-6 model's
        # on that batch, in ONNX Runtime), never the source model's (they read those until
        # 2026-12-07), and the run says it is not bit for bit the uninterrupted one.
        import shutil
        import onnxruntime as ort
        data = os.path.join(ROOT, "models", "digits", "train")
        common = ["--data", data, "--batch-size", 32, "--lr", 0.5, "--seed", 1, "--gpus", 2, "--weights", "2bw",
                  "--no-shuffle", "--checkpoint-every", 6]
        out = os.path.join(self.dir, "2bw-resume")
        rc, so, se = run(MLP, *common, "--steps", 6, "--out", out, "--quiet")
        self.assertEqual(rc, 0, se)
        at6 = os.path.join(self.dir, "2bw-at6.onnx")
        shutil.copy(os.path.join(out, "digits_mlp.trained.onnx"), at6)
        rc, so, se = run(MLP, *common, "--steps", 8, "--out", out, "--resume")
        self.assertEqual(rc, 0, se)
        self.assertIn("notice: --weights 2bw: the first mini-batch after the resume reads the checkpoint's weights", so)
        x = np.load(os.path.join(data, "x.npy"))[6 * 32:7 * 32].astype(np.float32)
        y = np.load(os.path.join(data, "y.npy"))[6 * 32:7 * 32]
        for model, near in ((at6, True), (MLP, False)):
            s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            z = s.run(None, {s.get_inputs()[0].name: x})[0].astype(np.float64)
            z -= z.max(axis=1, keepdims=True)
            ce = float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]))
            got = float(losses(out)[6])
            self.assertEqual(abs(got - ce) <= 1e-5 * ce, near, (model, got, ce))

    def test_weight_shared_across_stages(self):
        rng = np.random.default_rng(5)
        d, classes = 16, 10
        inits = [numpy_helper.from_array(rng.normal(0, 0.35, shape).astype(np.float32), name)
                 for name, shape in (("W0", (d, d)), ("Ws", (d, d)), ("W3", (d, classes)))]
        nodes = [helper.make_node("Gemm", ["x", "W0"], ["h0"], name="fc0"), helper.make_node("Relu", ["h0"], ["r0"], name="relu0"),
                 helper.make_node("Gemm", ["r0", "Ws"], ["h1"], name="fc1"), helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
                 helper.make_node("Gemm", ["r1", "Ws"], ["h2"], name="fc2"), helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
                 helper.make_node("Gemm", ["r2", "W3"], ["logits"], name="fc3")]
        g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])], inits)
        path = os.path.join(self.dir, "tied.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
        self.assert_same_as_gpipe(path, "tied", "--gpus", 3, "--split-at", "relu0,relu1", "--micro-batches", 4, "--lr", 0.2)
        # Interleaved: Ws on stages 1 and 2, i.e. on device 1 (chunk 0) and device 0 (chunk 1).
        split = ["--split-at", "relu0,relu1,fc3", "--micro-batches", 4, "--lr", 0.2]
        self.assert_same_as_gpipe(path, "tied-i", "--gpus", 2, *split, schedules=("interleaved",), ref_flags=["--gpus", 4, *split])
        # PipeDream-2BW and 2BW-predict with the shared weight (each checked against the
        # explicit-version reference in tests/runtime/shared_weights_test.cpp): they train from the
        # command line, and differently (2BW-predict's early forwards read a prediction).
        w2, _ = self.train(path, "tied-2bw", "--gpus", 3, "--split-at", "relu0,relu1", "--weights", "2bw", "--micro-batches", 4)
        wp, _ = self.train(path, "tied-2bwp", "--gpus", 3, "--split-at", "relu0,relu1", "--weights", "2bw-predict",
                           "--micro-batches", 4)
        self.assertFalse(np.array_equal(w2["Ws"], wp["Ws"]), "2bw-predict trained 2bw's shared weight")
        # ZB-V: Ws on stages 1 and 2, both on device 1 (its chunks 0 and 1), the loss on device 0.
        self.assert_same_as_gpipe(path, "tied-v", "--gpus", 2, *split, schedules=("zbv",), ref_flags=["--gpus", 4, *split])

    def test_schedule_out_and_file(self):
        csv = os.path.join(self.dir, "zb.csv")
        rc, so, se = run(MLP, "--gpus", 3, "--schedule", "zb-h1", "--micro-batches", 4, "--plan-only", "--schedule-out", csv,
                         "--out", os.path.join(self.dir, "zbplan"))
        self.assertEqual(rc, 0, se)
        with open(csv) as f:
            text = f.read()
        self.assertIn("stage,part,actions", text)
        rows = [r for r in text.splitlines() if r and not r.startswith("#")][1:]
        self.assertEqual([r.split(",")[:2] for r in rows], [["0", "steady"], ["1", "steady"], ["2", "steady"]])
        for r in rows:  # every pass once: F, I and W of each micro-batch, one update
            acts = r.split(",")[2].split()
            self.assertEqual(sorted(acts), sorted([f"{x}{j}" for x in "FIW" for j in range(4)] + ["U"]), r)
        with open(os.path.join(self.dir, "zbplan", "partition.json")) as f:  # the same program, in the report
            program = json.load(f)["program"]
        self.assertEqual((program["name"], program["synchronous"], program["micro_batches"]), ("zb-h1", True, 4))
        self.assertEqual([" ".join(st["steady"]) for st in program["stages"]], [r.split(",")[2] for r in rows])
        self.assertTrue(all(st["waiting_for_w"] >= 1 for st in program["stages"]), program)
        ref, _ = self.train(MLP, "zb-builtin", "--gpus", 3, "--schedule", "zb-h1", "--micro-batches", 4)
        got, _ = self.train(MLP, "zb-file", "--gpus", 3, "--schedule-file", csv)
        for k in ref:
            self.assertTrue(np.array_equal(ref[k], got[k]), k)
        # A hand-written order: each stage's W deferred to the end of the mini-batch.
        hand = os.path.join(self.dir, "hand.csv")
        with open(hand, "w") as f:
            f.write("stage,part,actions\n")
            for k in range(3):
                f.write(f"{k},steady,F0 F1 F2 F3 I0 I1 I2 I3 W0 W1 W2 W3 U\n")
        got, _ = self.train(MLP, "hand-file", "--gpus", 3, "--schedule-file", hand)
        gp, _ = self.train(MLP, "hand-gpipe", "--gpus", 3, "--schedule", "gpipe", "--micro-batches", 4)
        for k in gp:
            self.assertTrue(np.array_equal(gp[k], got[k]), k)
        # Whole and split backwards mixed on one stage, a B between an I and its W (two micro-batches:
        # their gradient sum is the same in either order).
        mixed = os.path.join(self.dir, "mixed.csv")
        with open(mixed, "w") as f:
            f.write("stage,part,actions\n0,steady,F0 F1 I0 B1 W0 U\n1,steady,F0 I0 F1 B1 W0 U\n")
        got, _ = self.train(MLP, "mixed-file", "--gpus", 2, "--schedule-file", mixed, "--recompute", "stage")
        gp, _ = self.train(MLP, "mixed-gpipe", "--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2)
        for k in gp:
            self.assertTrue(np.array_equal(gp[k], got[k]), k)

    def test_interleaved_schedule_out_and_file(self):
        csv = os.path.join(self.dir, "il.csv")
        rc, so, se = run(MLP, "--gpus", 2, "--schedule", "interleaved", "--micro-batches", 4, "--plan-only", "--no-calibrate",
                         "--schedule-out", csv, "--out", os.path.join(self.dir, "ilplan"))
        self.assertEqual(rc, 0, se)
        self.assertIn("4 stages, interleaved schedule, sync weights", so)
        self.assertIn("(2 devices, 2 virtual stages each: stage k on device k % 2)", so)
        # The textbook bubble with equal stages: (p-1)/V / (M + (p-1)/V) = 0.5 / 4.5.
        self.assertIn("(equal stages: 11.1%)", so)
        with open(csv) as f:
            rows = [r for r in f.read().splitlines() if r and not r.startswith("#")][1:]
        self.assertEqual(rows[0], "0,steady,F0 F1 F0@1 F1@1 F2 B0@1 F3 B1@1 F2@1 B0 F3@1 B1 B2@1 B3@1 B2 B3 U@1 U")
        with open(os.path.join(self.dir, "ilplan", "partition.json")) as f:
            doc = json.load(f)
        self.assertEqual((doc["virtual_stages"], doc["program"]["virtual_stages"], len(doc["stages"])), (2, 2, 4))
        ref, _ = self.train(MLP, "il-builtin", "--gpus", 2, "--schedule", "interleaved", "--micro-batches", 4)
        got, _ = self.train(MLP, "il-file", "--gpus", 2, "--schedule-file", csv)
        for k in ref:
            self.assertTrue(np.array_equal(ref[k], got[k]), k)
        # ZB-V: the file names its placement; run again from it, the same weights.
        zcsv = os.path.join(self.dir, "zbv.csv")
        rc, so, se = run(MLP, "--gpus", 2, "--schedule", "zbv", "--micro-batches", 4, "--plan-only", "--no-calibrate",
                         "--schedule-out", zcsv, "--out", os.path.join(self.dir, "zbvplan"))
        self.assertEqual(rc, 0, se)
        self.assertIn("(2 devices in a V: stage k on device k, stage 3 - k on device k)", so)
        with open(zcsv) as f:
            text = f.read()
        self.assertIn("placement,v,", text)
        ref, _ = self.train(MLP, "zbv-builtin", "--gpus", 2, "--schedule", "zbv", "--micro-batches", 4)
        got, _ = self.train(MLP, "zbv-file", "--gpus", 2, "--schedule-file", zcsv)
        for k in ref:
            self.assertTrue(np.array_equal(ref[k], got[k]), k)

    def test_refused_before_any_work(self):
        def write(name, text):
            p = os.path.join(self.dir, name)
            with open(p, "w") as f:
                f.write(text)
            return p
        missing_w = write("missing_w.csv", "stage,part,actions\n0,steady,F0 F1 I0 I1 W0 U\n1,steady,F0 I0 W0 F1 I1 W1 U\n")
        dead = write("dead.csv", "stage,part,actions\n0,steady,F0 B0 F1 B1 U\n1,steady,F0 F1 B0 B1 U\n")
        async_file = write("async.csv", "stage,part,actions\n0,warmup,F0\n0,steady,F0+1 B0 U\n1,steady,F0 B0 U\n")
        good = write("good.csv", "stage,part,actions\n0,steady,F0 F1 B0 B1 U\n1,steady,F0 B0 F1 B1 U\n")
        cases = [
            (["--schedule", "zb-h2"], ["--schedule", "zb-h2"]),
            (["--schedule", "gpipe", "--weights", "spectrain"], ["--weights spectrain", "--schedule gpipe", "sync"]),
            (["--schedule", "zb-h1", "--weights", "stash"], ["--weights stash", "zb-h1"]),
            (["--micro-batches", 2], ["--micro-batches 2", "synchronous"]),
            (["--schedule", "auto", "--weights", "stash"], ["--weights stash", "--schedule auto", "sync"]),
            (["--schedule", "gpipe", "--weights", "2bw"], ["--weights 2bw", "gpipe"]),
            (["--schedule", "zb-h1", "--spectrain-staleness", "exact"], ["--spectrain-staleness", "--weights sync"]),
            (["--weights", "2bw", "--micro-batches", 1], ["--weights 2bw: --micro-batches 1 is fewer than --gpus 2"]),
            (["--schedule-file", os.path.join(self.dir, "nope.csv")], ["nope.csv", "no such file"]),
            (["--schedule-file", missing_w], ["missing_w.csv", "stage 0, mini-batch 0, action U: before W1"]),
            (["--schedule-file", dead], ["dead.csv deadlocks", "stage 0 waits at B0(0) for stage 1's B0(0)",
                                         "stage 1 waits at F1(0)"]),
            (["--schedule-file", async_file], ["async.csv", "asynchronous"]),
            (["--schedule-file", good, "--schedule", "gpipe"], ["--schedule-file", "replaces --schedule"]),
            (["--schedule-file", good, "--micro-batches", 4], ["good.csv", "2 micro-batches", "--micro-batches is 4"]),
            (["--schedule-file", good, "--weights", "spectrain"], ["--weights spectrain", "schedule file"]),
            (["--schedule", "interleaved", "--micro-batches", 3], ["--micro-batches 3", "a multiple of 2"]),
            (["--virtual-stages", 2], ["--virtual-stages applies to --schedule interleaved"]),
            (["--schedule", "interleaved", "--weights", "stash"], ["--weights stash", "--schedule interleaved"]),
            (["--schedule", "interleaved", "--virtual-stages", 4, "--micro-batches", 4],
             ["--gpus 2 x --virtual-stages 4: 8 stages need at least 8 forward nodes"]),
            (["--schedule-file", good, "--virtual-stages", 2], ["--virtual-stages applies to --schedule interleaved"]),
            (["--schedule", "zbv", "--virtual-stages", 3], ["--virtual-stages applies to --schedule interleaved", "zbv runs 2"]),
            (["--schedule", "zbv", "--weights", "2bw"], ["--weights 2bw", "--schedule zbv"]),
        ]
        for flags, needles in cases:
            gpus = 2
            out = os.path.join(self.dir, "refused")
            rc, so, se = run(MLP, "--gpus", gpus, "--steps", 2, "--out", out, *flags)
            self.assertEqual(rc, 2, f"{flags}: exit {rc}: {so}{se}")
            err = [l for l in se.splitlines() if l.startswith("onnx-pipetrain: error")]
            self.assertTrue(err, f"{flags}: {se}")
            for n in needles:
                self.assertIn(n, se, f"{flags}")
            self.assertFalse(os.path.exists(os.path.join(out, "digits_mlp.trained.onnx")), flags)
        rc, so, se = run(MLP, "--gpus", 3, "--steps", 2, "--schedule-file", good, "--out", os.path.join(self.dir, "refused3"))
        self.assertEqual(rc, 2, se)
        self.assertIn("a schedule of 2 stages; --gpus is 3", se)

    def test_auto_says_what_it_chose(self):
        rc, so, se = run(MLP, "--gpus", 3, "--micro-batches", 4, "--schedule", "auto", "--plan-only", "--no-calibrate",
                         "--out", os.path.join(self.dir, "auto"))
        self.assertEqual(rc, 0, se)
        m = re.search(r"^schedule auto: (\S+), the best predicted throughput that fits \((\d+) samples/s((?:; \S+ (?:\d+|does not fit|not applicable))+)\)$",
                      so, re.M)
        self.assertIsNotNone(m, so)
        others = dict(x.split(" ", 1) for x in m.group(3).split("; ")[1:])
        self.assertEqual(sorted([m.group(1), *others]),
                         ["1f1b-sync", "gpipe", "interleaved-v2", "interleaved-v3", "interleaved-v4", "zb-h1", "zbv"])
        # 3 stages: interleaved stages need a multiple of 3 micro-batches; ZB-V 6 stages of 4 nodes.
        for name in ("interleaved-v2", "interleaved-v3", "interleaved-v4", "zbv"):
            self.assertEqual(others[name], "not applicable", name)
        for v in others.values():
            if v.isdigit():
                self.assertGreaterEqual(int(m.group(2)), int(v))
        self.assertIn(f"{m.group(1)} schedule, sync weights", so)
        # --whatif simulates every schedule on 2..N devices.
        rc, so, se = run(MLP, "--gpus", 3, "--schedule", "zb-h1", "--micro-batches", 4, "--plan-only", "--whatif", "--no-calibrate",
                         "--out", os.path.join(self.dir, "whatif"))
        self.assertEqual(rc, 0, se)
        for d in (2, 3):
            for row in ("gpipe (M=4)", "zb-h1 (M=4)"):
                self.assertRegex(so, rf"(?m)^{re.escape(row)} +{d} ", so)
        # Interleaved stages and ZB-V where they can run: 2 devices x 2 chunks (4 stages of the MLP's
        # 4 nodes), not 3 or 4 chunks.
        for row in ("interleaved-v2 (M=4)", "zbv (M=4)"):
            self.assertRegex(so, rf"(?m)^{re.escape(row)} +2 ", so)
            self.assertNotRegex(so, rf"(?m)^{re.escape(row)} +3 ", so)
        self.assertNotRegex(so, r"(?m)^interleaved-v[34] ", so)

    def test_auto_and_whatif_try_more_chunks_where_the_model_has_the_nodes(self):
        # LeNet-5 with BatchNorm (14 forward nodes) on 2 devices: interleaved stages with 2, 3 and 4
        # chunks per device are planned and dry-run; whichever auto takes, the plan is cut into that
        # many chunks per device (its header says so), and --whatif lists the same rows.
        lenet = os.path.join(ROOT, "models", "fashion_lenet5_bn.onnx")
        rc, so, se = run(lenet, "--gpus", 2, "--micro-batches", 8, "--schedule", "auto", "--plan-only", "--no-calibrate",
                         "--device-spec", "h100", "--whatif", "--out", os.path.join(self.dir, "auto_chunks"))
        self.assertEqual(rc, 0, se)
        m = re.search(r"^schedule auto: (\S+), the best predicted throughput that fits \((\d+) samples/s((?:; \S+ (?:\d+|does not fit|not applicable))+)\)$",
                      so, re.M)
        self.assertIsNotNone(m, so)
        others = dict(x.split(" ", 1) for x in m.group(3).split("; ")[1:])
        others[m.group(1)] = m.group(2)
        for v in (2, 3, 4):
            self.assertTrue(others[f"interleaved-v{v}"].isdigit(), others)
            self.assertRegex(so, rf"(?m)^interleaved-v{v} \(M=8\) +2 +[1-9][0-9]*\.[0-9] ", so)
        # Whichever auto takes, the plan has its chunks (the MLP on 2 devices: interleaved-v2 today).
        for model, name in ((lenet, "lenet"), (MLP, "mlp")):
            out = os.path.join(self.dir, "auto_chunks_" + name)
            rc, so, se = run(model, "--gpus", 2, "--micro-batches", 4, "--schedule", "auto", "--plan-only", "--no-calibrate",
                             "--out", out)
            self.assertEqual(rc, 0, se)
            chosen = re.search(r"^schedule auto: (\S+),", so, re.M).group(1)
            with open(os.path.join(out, "partition.json")) as f:
                doc = json.load(f)
            chunks = int(chosen[len("interleaved-v"):]) if chosen.startswith("interleaved-v") else 2 if chosen == "zbv" else 1
            self.assertEqual(doc["virtual_stages"], chunks, chosen)
            self.assertEqual(len(doc["stages"]), 2 * chunks, chosen)

    def test_report_predicts_zb_h1_below_1f1b(self):
        import export_models as em
        lenet = os.path.join(self.dir, "lenet_plan.onnx")
        em.export_torch(em.build_module("lenet_bn"), "lenet_bn", 13, "train", lenet)
        bubble = {}
        for name in ("1f1b-sync", "zb-h1"):
            flags = SYNC[name]
            out = os.path.join(self.dir, "plan-" + name)
            rc, so, se = run(lenet, "--gpus", 2, "--micro-batches", 4, "--batch-size", 32, "--plan-only", "--no-calibrate",
                             "--device-spec", "H100", "--out", out, *flags)
            self.assertEqual(rc, 0, se)
            m = re.search(r"schedule (\S+): predicted bubble ([0-9.]+)%", so)
            self.assertIsNotNone(m, so)
            self.assertEqual(m.group(1), name)
            bubble[name] = float(m.group(2))
            with open(os.path.join(out, "trace.json")) as f:
                names = {e["name"] for e in json.load(f)["traceEvents"] if e.get("ph") == "X"}
            if name == "zb-h1":
                self.assertTrue({"I0.0", "W0.0", "F0.3"} <= names, sorted(names)[:20])
        self.assertLess(bubble["zb-h1"], bubble["1f1b-sync"])


if __name__ == "__main__":
    unittest.main()
