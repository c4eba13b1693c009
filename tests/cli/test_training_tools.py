"""The training tools through the command line: pipelined checkpoints and resume (bit for
bit against an uninterrupted run with the same drain points), resuming on another --gpus or
schedule, SIGINT in a pipelined run, learning-rate schedules (the lr column against the formulas,
and the rate really applied), --eval-every, --mean/--std, integer pixels (8- and 16-bit) and --raw-pixels.
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_training_tools.py"""
import csv
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import BIN, mlp_model, read_bytes, run, write_data  # noqa: E402

COMMON = ["--quiet", "--batch-size", 8, "--seed", 3]


def metrics(out):
    with open(os.path.join(out, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def weights(out, stem="mlp"):
    m = onnx.load(os.path.join(out, f"{stem}.trained.onnx"))
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def conv_model(path):
    """[N,3,4,4] -> Conv 3->2 (3x3, pad 1) -> Relu -> Flatten -> Gemm -> 3 classes."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32) * 0.3, "Wc")
    b = numpy_helper.from_array(np.zeros(2, np.float32), "bc")
    w2 = numpy_helper.from_array(rng.standard_normal((3, 32)).astype(np.float32) * 0.3, "W2")
    b2 = numpy_helper.from_array(np.zeros(3, np.float32), "b2")
    nodes = [helper.make_node("Conv", ["x", "Wc", "bc"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "W2", "b2"], ["y"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [w, b, w2, b2])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


class TrainingToolsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-tools-")
        cls.dir = cls.tmp.name
        cls.model = mlp_model(os.path.join(cls.dir, "mlp.onnx"))
        cls.data = write_data(os.path.join(cls.dir, "data"), n=96)  # 12 steps per epoch at batch 8

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, name, *args, expect=0, resumed_from=None):
        out = os.path.join(self.dir, name)
        lr = [] if "--lr" in args else ["--lr", 0.1]
        common = [a for a in COMMON if a != "--quiet"] if resumed_from is not None else COMMON
        rc, so, se = run(self.model, "--data", self.data, "--out", out, *common, *lr, *map(str, args))
        self.assertEqual(rc, expect, f"{name}: exit {rc}\n{so}\n{se}")
        if resumed_from is not None:
            self.assertIn(f"(step {resumed_from} of ", so, f"{name}: did not resume from step {resumed_from}")
        return out

    def assert_close(self, a, b, rel, what):
        for k in b:
            err = np.abs(a[k] - b[k]).max() / (np.abs(b[k]).max() + 1e-6)
            self.assertLessEqual(err, rel, f"{what}: {k} differs by {err:.3g} relative")

    # --- checkpoints of pipelined runs ----------------------------------------------------
    def test_pipelined_resume_equals_uninterrupted(self):
        configs = {"spectrain3": ["--gpus", 3], "stash2": ["--gpus", 2, "--weights", "stash"],
                   # 4 stages need the MLP's 4 forward nodes: its Relu unfused (not fc1's epilogue)
                   "exact4": ["--gpus", 4, "--spectrain-staleness", "exact", "--no-fusion", "epilogue"],
                   "gpipe3": ["--gpus", 3, "--schedule", "gpipe", "--micro-batches", 2],
                   # optimizer state (moments, the per-parameter step count) travels in checkpoints
                   "adam1": ["--optimizer", "adam", "--lr", 0.01],
                   "adam3": ["--gpus", 3, "--optimizer", "adam", "--lr", 0.01, "--weight-decay", 1e-3],
                   "adamw_gpipe2": ["--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2, "--optimizer", "adamw",
                                    "--lr", 0.01, "--weight-decay", 0.1],
                   "sgd_nesterov3": ["--gpus", 3, "--optimizer", "sgd", "--nesterov", "--momentum", 0.8]}
        for name, cfg in configs.items():
            full = self.train(f"{name}_full", "--steps", 30, "--checkpoint-every", 10, *cfg)
            part = self.train(f"{name}_part", "--steps", 20, "--checkpoint-every", 10, *cfg)
            self.train(f"{name}_part", "--steps", 30, "--checkpoint-every", 10, "--resume", *cfg, resumed_from=20)
            self.assertEqual(read_bytes(os.path.join(full, "mlp.trained.onnx")),
                             read_bytes(os.path.join(part, "mlp.trained.onnx")), f"{name}: resumed weights differ")
            a, b = metrics(full), metrics(part)
            self.assertEqual([r["loss"] for r in a], [r["loss"] for r in b], f"{name}: losses differ")
            self.assertEqual(len(b), 30)

    def test_checkpoint_size_does_not_grow_with_the_step_count(self):
        # metrics.csv holds the metrics rows; a checkpoint keeps their count, a hash
        # and the last row, so its size at step 10N equals that at step N up to the digits of the
        # step numbers. Resuming from step N, or from step 10N (the rows come back from
        # metrics.csv), still gives the uninterrupted run bit for bit, rows included.
        for gpus in ("1", "3"):
            full = self.train(f"flat{gpus}_full", "--gpus", gpus, "--steps", 300, "--checkpoint-every", 30,
                              "--keep-checkpoints", 10, "--eval-every", 60)
            ck = os.path.join(full, "checkpoints")
            small, big = (os.path.getsize(os.path.join(ck, f"step-{s}.ckpt")) for s in (30, 300))
            self.assertLessEqual(abs(big - small), 16, f"--gpus {gpus}: {small} bytes at step 30, {big} at 300")
            part = self.train(f"flat{gpus}_part", "--gpus", gpus, "--steps", 150, "--checkpoint-every", 30,
                              "--eval-every", 60)
            self.train(f"flat{gpus}_part", "--gpus", gpus, "--steps", 300, "--checkpoint-every", 30, "--resume",
                       "--eval-every", 60, resumed_from=150)
            self.assertEqual(read_bytes(os.path.join(full, "mlp.trained.onnx")),
                             read_bytes(os.path.join(part, "mlp.trained.onnx")), f"--gpus {gpus}: resumed weights differ")
            a, b = metrics(full), metrics(part)
            self.assertEqual(len(b), 300)
            for col in ("step", "epoch", "loss", "lr", "val_loss", "val_accuracy"):
                self.assertEqual([r[col] for r in a], [r[col] for r in b], f"--gpus {gpus}: column {col} differs")

    def test_resume_without_the_metrics_file_says_so(self):
        # The rows before the checkpoint live in metrics.csv: without it (and without the
        # checkpoint's own run folder) the resumed run says so and its file starts at the
        # checkpoint's step.
        src = self.train("rows_src", "--steps", 12, "--checkpoint-every", 12)
        ck = os.path.join(self.dir, "rows_moved.ckpt")
        shutil.copy(os.path.join(src, "checkpoints", "step-12.ckpt"), ck)
        os.remove(os.path.join(src, "metrics.csv"))
        out = os.path.join(self.dir, "rows_dst")
        rc, so, se = run(self.model, "--data", self.data, "--out", out, "--batch-size", 8, "--seed", 3, "--lr", 0.1,
                         "--steps", 15, "--resume=" + ck)
        self.assertEqual(rc, 0, se)
        self.assertIn("the metrics of steps 1..11 were not found", so + se)
        self.assertEqual([r["step"] for r in metrics(out)], ["12", "13", "14", "15"])

    def test_resuming_a_finished_run_into_another_folder_writes_its_metrics(self):
        # Nothing left to train: the new folder gets the checkpoint's rows as metrics.csv and its
        # curves (the run names both on its wrote: line), on one stage and on a pipeline.
        src = self.train("done_src", "--steps", 12, "--checkpoint-every", 12)
        for gpus in ("1", "2"):
            out = os.path.join(self.dir, f"done_dst{gpus}")
            rc, so, se = run(self.model, "--data", self.data, "--out", out, "--batch-size", 8, "--seed", 3, "--lr", 0.1,
                             "--steps", 12, "--gpus", gpus, "--resume=" + os.path.join(src, "checkpoints", "step-12.ckpt"))
            self.assertEqual(rc, 0, se)
            self.assertEqual([r["loss"] for r in metrics(out)], [r["loss"] for r in metrics(src)], gpus)
            self.assertTrue(os.path.getsize(os.path.join(out, "curves.svg")) > 0)

    def test_resume_with_another_optimizer_is_refused(self):
        self.train("opt_then", "--steps", 6, "--checkpoint-every", 3, "--optimizer", "adam", "--lr", 0.01)
        rc, so, se = run(self.model, "--data", self.data, "--out", os.path.join(self.dir, "opt_then"), *COMMON,
                         "--lr", "0.01", "--steps", "9", "--resume", "--optimizer", "adamw")
        self.assertEqual(rc, 2, so + se)
        self.assertIn("--optimizer: adam (betas 0.9, 0.999, eps 1e-08) in the checkpoint, adamw", se)

    def test_resume_on_another_pipeline(self):
        # GPipe is sequential training up to rounding: checkpoints move between it and one stage.
        ref = self.train("ref1", "--steps", 24, "--checkpoint-every", 12)
        gp = self.train("gp_then_1", "--steps", 12, "--checkpoint-every", 12, "--gpus", 3, "--schedule", "gpipe",
                        "--micro-batches", 2)
        self.train("gp_then_1", "--steps", 24, "--checkpoint-every", 12, "--resume", resumed_from=12)
        self.assert_close(weights(gp), weights(ref), 1e-5, "GPipe x3 then 1 stage")
        one = self.train("one_then_gp", "--steps", 12, "--checkpoint-every", 12)
        self.train("one_then_gp", "--steps", 24, "--checkpoint-every", 12, "--resume", "--gpus", 2, "--schedule",
                   "gpipe", "--micro-batches", 4, resumed_from=12)
        self.assert_close(weights(one), weights(ref), 1e-5, "1 stage then GPipe x2")
        # 1F1B SpecTrain on 3 stages, re-partitioned onto 2: it resumes and says so.
        sp = self.train("sp3", "--steps", 12, "--checkpoint-every", 12, "--gpus", 3)
        rc, so, se = run(self.model, "--data", self.data, "--out", sp, "--batch-size", 8, "--seed", 3, "--lr", 0.1,
                         "--steps", 24, "--resume", "--gpus", 2)
        self.assertEqual(rc, 0, se)
        self.assertIn("written by a run of 3 stages, 1F1B spectrain (paper), continuing on 2 stages", so)
        rows = metrics(sp)
        self.assertEqual(len(rows), 24)
        self.assertTrue(all(math.isfinite(float(r["loss"])) for r in rows))
        # Another mini-batch size is another run.
        rc, so, se = run(self.model, "--data", self.data, "--out", sp, "--seed", 3, "--lr", 0.1,
                         "--steps", 24, "--resume", "--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2,
                         "--batch-size", 16)
        self.assertEqual(rc, 2, so + se)
        self.assertIn("--batch-size: 8 in the checkpoint, 16 now", se)

    def test_sigint_stops_a_pipelined_run(self):
        out = os.path.join(self.dir, "int")
        p = subprocess.Popen([BIN, self.model, "--data", self.data, "--out", out, *map(str, COMMON), "--lr", "0.1",
                              "--gpus", "3", "--steps", "100000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(600):
            if os.path.exists(os.path.join(out, "metrics.csv.partial")):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        so, se = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 130, se)
        self.assertIn("interrupted at step", se)
        self.assertTrue(os.path.exists(os.path.join(out, "mlp.trained.onnx")))
        cks = sorted(os.listdir(os.path.join(out, "checkpoints")))
        self.assertEqual(len(cks), 1, cks)
        step = int(cks[0][len("step-"):-len(".ckpt")])
        self.assertEqual(len(metrics(out)), step)
        # Resuming continues from there; a run that drains at the same step (and no other before
        # the end: step + 5 < 2 * step) gives the same weights.
        self.train("int", "--gpus", 3, "--steps", step + 5, "--resume", resumed_from=step)
        self.assertEqual(len(metrics(out)), step + 5)
        if step > 5:
            ref = self.train("int_ref", "--gpus", 3, "--steps", step + 5, "--checkpoint-every", step)
            self.assertEqual(read_bytes(os.path.join(out, "mlp.trained.onnx")),
                             read_bytes(os.path.join(ref, "mlp.trained.onnx")))

    def test_sigterm_stops_a_run_like_sigint(self):
        # How Slurm, Kubernetes and docker stop a job: one stage and a pipeline both finish the
        # mini-batches started, checkpoint, write the model and exit 130, and the run resumes.
        for gpus in ("1", "3"):
            out = os.path.join(self.dir, f"term{gpus}")
            p = subprocess.Popen([BIN, self.model, "--data", self.data, "--out", out, *map(str, COMMON), "--lr", "0.1",
                                  "--gpus", gpus, "--steps", "100000000"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(600):
                if os.path.exists(os.path.join(out, "metrics.csv.partial")):
                    break
                time.sleep(0.05)
            time.sleep(0.3)
            p.send_signal(signal.SIGTERM)
            if gpus == "3":  # a second one at once (a launcher signalling the process and its group): the same stop
                time.sleep(0.005)
                p.send_signal(signal.SIGTERM)
            so, se = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 130, f"--gpus {gpus}: {se}")
            self.assertIn("interrupted at step", se)
            self.assertTrue(os.path.exists(os.path.join(out, "mlp.trained.onnx")))
            cks = sorted(os.listdir(os.path.join(out, "checkpoints")))
            self.assertEqual(len(cks), 1, cks)
            step = int(cks[0][len("step-"):-len(".ckpt")])
            self.assertEqual(len(metrics(out)), step)
            self.train(f"term{gpus}", "--gpus", gpus, "--steps", step + 2, "--resume", resumed_from=step)

    def test_a_stop_before_training_exits_130_and_keeps_the_log(self):
        # SIGTERM while the run still calibrates (before any step): nothing to save, exit 130 at
        # once with one line, and what the run printed before is in its log (line-buffered).
        out = os.path.join(self.dir, "early_stop")
        log = os.path.join(self.dir, "early_stop.log")
        with open(log, "w") as f:
            p = subprocess.Popen([BIN, self.model, "--data", self.data, "--out", out, "--batch-size", "8",
                                  "--calibrate", "--steps", "100000000"], stdout=f, stderr=subprocess.PIPE, text=True)
            for _ in range(600):  # the model line is printed before the calibration
                if "model:" in open(log).read():
                    break
                time.sleep(0.05)
            p.send_signal(signal.SIGTERM)
            _, se = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, se)
        self.assertIn("stopped before training started; nothing to save", se)
        self.assertIn("model:", open(log).read())
        self.assertFalse(os.path.exists(os.path.join(out, "metrics.csv")))

    def test_a_failed_report_write_keeps_the_model(self):
        # The reports are rewritten after the model: a report that cannot be written (here a folder
        # in the way of partition.html's temporary file, made once training runs) ends the run with
        # exit 2 (as every file the run cannot write: core/file.h) naming the file and the reason,
        # and the trained model and checkpoint are there.
        out = os.path.join(self.dir, "report_fails")
        p = subprocess.Popen([BIN, self.model, "--data", self.data, "--out", out, *map(str, COMMON), "--lr", "0.1",
                              "--steps", "100000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(600):
            if os.path.exists(os.path.join(out, "metrics.csv.partial")):
                break
            time.sleep(0.05)
        os.makedirs(os.path.join(out, "partition.html.tmp", "blocker"))
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        so, se = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 2, se)
        self.assertIn("partition.html", se)
        self.assertIn("cannot be written", se)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertTrue(os.path.exists(os.path.join(out, "mlp.trained.onnx")))
        self.assertEqual(len(os.listdir(os.path.join(out, "checkpoints"))), 1)

    def test_nan_weights_are_not_exported(self):
        # W1 all NaN: Relu maps the NaN pre-activations to 0, so the loss stays finite while W1
        # stays NaN. The run must end as diverged (exit 3), name the weight, write neither the
        # model nor a checkpoint of that state.
        m = onnx.load(self.model)
        for t in m.graph.initializer:
            if t.name == "W1":
                t.CopyFrom(numpy_helper.from_array(np.full(numpy_helper.to_array(t).shape, np.nan, np.float32), "W1"))
        bad = os.path.join(self.dir, "nan_mlp.onnx")
        onnx.save(m, bad)
        # Such a model file is refused at load (exit 2, naming the initializer); the divergence
        # guard is tested by letting it train (the hidden PIPETRAIN_TEST_NAN_WEIGHTS=1).
        rc, so, se = run(bad, "--data", self.data, "--out", os.path.join(self.dir, "nanw_load"), *COMMON)
        self.assertEqual(rc, 2, so + se)
        self.assertIn("initializer 'W1' holds NaN (element 0 of", se)
        for gpus in ("1", "2"):
            out = os.path.join(self.dir, f"nanw{gpus}")
            args = [BIN, bad, "--data", self.data, "--out", out, *map(str, COMMON), "--lr", "0.1", "--gpus", gpus,
                    "--steps", "4", *(["--checkpoint-every", "2"] if gpus == "2" else [])]
            p = subprocess.run(args, capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, PIPETRAIN_TEST_NAN_WEIGHTS="1"))
            rc, so, se = p.returncode, p.stdout, p.stderr
            self.assertEqual(rc, 3, f"--gpus {gpus}: {so}{se}")
            self.assertIn("'W1' holds NaN", se)
            self.assertEqual(len(se.strip().splitlines()), 1, se)
            self.assertFalse(os.path.exists(os.path.join(out, "nan_mlp.trained.onnx")))
            ck = os.path.join(out, "checkpoints")
            self.assertFalse(os.path.isdir(ck) and os.listdir(ck), "a checkpoint of NaN weights was written")

    def test_metrics_csv_is_published_while_training(self):
        for gpus in ("1", "2"):
            out = os.path.join(self.dir, f"live{gpus}")
            p = subprocess.Popen([BIN, self.model, "--data", self.data, "--out", out, *map(str, COMMON), "--lr", "0.1",
                                  "--gpus", gpus, "--steps", "100000000", "--val-split", "0.25", "--eval-every", "20"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                path = os.path.join(out, "metrics.csv")
                for _ in range(600):
                    if os.path.exists(path):
                        break
                    time.sleep(0.05)
                self.assertIsNone(p.poll(), "the run ended")
                rows = metrics(out)  # a whole file: published by rename
                self.assertGreaterEqual(len(rows), 9)  # the first validation: the end of epoch 1 (9 steps)
                self.assertTrue(any(r["val_loss"] for r in rows))
            finally:
                p.send_signal(signal.SIGINT)
                p.communicate(timeout=120)
            self.assertEqual(p.returncode, 130)

    def test_failed_run_keeps_its_metrics(self):
        for gpus in ("1", "4"):
            out = os.path.join(self.dir, f"diverge{gpus}")
            # 4 stages: one per forward node of the MLP with its Relu unfused (--no-fusion epilogue).
            rc, so, se = run(self.model, "--data", self.data, "--out", out, *COMMON, "--lr", 500, "--momentum", 0,
                             "--gpus", gpus, "--steps", 200, *(["--no-fusion", "epilogue"] if gpus == "4" else []))
            self.assertEqual(rc, 3, so + se)
            self.assertIn("diverged", se)
            rows = metrics(out)
            self.assertGreater(len(rows), 0)
            self.assertFalse(os.path.exists(os.path.join(out, "metrics.csv.partial")))

    def test_resume_of_a_finished_run_changes_nothing(self):
        for gpus in ("1", "3"):
            out = self.train(f"finished{gpus}", "--steps", 12, "--val-split", 0.25, "--checkpoint-every", 6,
                             "--gpus", gpus)
            before = read_bytes(os.path.join(out, "metrics.csv"))
            self.train(f"finished{gpus}", "--steps", 12, "--val-split", 0.25, "--checkpoint-every", 6, "--gpus", gpus,
                       "--resume", resumed_from=12)
            self.assertEqual(read_bytes(os.path.join(out, "metrics.csv")), before)

    # --- learning-rate schedules ----------------------------------------------------------
    @staticmethod
    def expected_lr(kind, t, total, base=0.1, warm=0, every=0, gamma=0.1, power=2.0, lo=0.0):
        if warm and t <= warm:
            return base * t / warm
        after, span = t - warm, max(1, total - warm)
        p = min(max((after - 1) / span, 0.0), 1.0)
        if kind == "step":
            return base * gamma ** ((after - 1) // every)
        if kind == "cosine":
            return lo + (base - lo) * 0.5 * (1 + math.cos(math.pi * p))
        if kind == "poly":
            return lo + (base - lo) * (1 - p) ** power
        return base

    def test_lr_schedules(self):
        cases = [("constant", [], {}),
                 ("step", ["--lr-decay-every", 4, "--lr-gamma", 0.5, "--warmup-steps", 2], dict(every=4, gamma=0.5, warm=2)),
                 ("cosine", ["--warmup-steps", 3, "--lr-min", 0.01], dict(warm=3, lo=0.01)),
                 ("poly", ["--lr-power", 2], dict(power=2.0))]
        for kind, flags, kw in cases:
            for gpus in (1, 2):
                out = self.train(f"lr_{kind}_{gpus}", "--steps", 20, "--lr-schedule", kind, "--gpus", gpus, *flags)
                got = [float(r["lr"]) for r in metrics(out)]
                want = [self.expected_lr(kind, t, 20, **kw) for t in range(1, 21)]
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9, err_msg=f"{kind} on {gpus} stage(s)")

    def test_lr_schedule_is_applied(self):
        # The loss of step t is computed before update t: with a warm-up of 2, step 2 sees one update
        # at lr/2, exactly as a constant run at lr/2 does; step 3 then differs.
        for extra in ([], ["--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2]):
            warm = metrics(self.train("warm", "--steps", 3, "--warmup-steps", 2, "--momentum", 0, *extra))
            half = metrics(self.train("half", "--steps", 3, "--momentum", 0, *extra, "--lr", 0.05))
            self.assertEqual(warm[1]["loss"], half[1]["loss"], extra)
            self.assertNotEqual(warm[2]["loss"], half[2]["loss"], extra)

    def test_lr_schedule_refusals(self):
        for flags, needle in ((["--lr-schedule", "step"], "--lr-decay-every"),
                              (["--warmup-steps", 50], "--warmup-steps 50"),
                              (["--lr-schedule", "cosine", "--lr-min", 0.5], "--lr-min"),
                              (["--lr-schedule", "step", "--lr-decay-every", 2, "--lr-gamma", 2], "--lr-gamma"),
                              # a flag of another schedule would be ignored
                              (["--lr-decay-every", 2], "--lr-decay-every: does not apply to --lr-schedule constant"),
                              (["--lr-schedule", "poly", "--lr-gamma", 0.5], "--lr-gamma: does not apply to --lr-schedule poly"),
                              (["--lr-schedule", "step", "--lr-decay-every", 2, "--lr-power", 3], "--lr-power"),
                              (["--lr-schedule", "step", "--lr-decay-every", 2, "--lr-min", 0.01], "--lr-min")):
            rc, so, se = run(self.model, "--data", self.data, "--out", os.path.join(self.dir, "refused"), *COMMON,
                             "--lr", 0.1, "--steps", 10, *flags)
            self.assertEqual(rc, 2, f"{flags}: {so}{se}")
            self.assertIn(needle, se)
        # A resume with another schedule is another run.
        self.train("sched", "--steps", 10, "--checkpoint-every", 5, "--lr-schedule", "cosine")
        rc, so, se = run(self.model, "--data", self.data, "--out", os.path.join(self.dir, "sched"), *COMMON,
                         "--lr", 0.1, "--steps", 10, "--resume=" + os.path.join(self.dir, "sched", "checkpoints", "step-5.ckpt"),
                         "--lr-schedule", "poly")
        self.assertEqual(rc, 2, so + se)
        self.assertIn("learning-rate schedule", se)

    # --- evaluation -----------------------------------------------------------------------
    def test_eval_every(self):
        for gpus in (1, 3):
            out = self.train(f"eval_{gpus}", "--steps", 14, "--val-split", 0.25, "--eval-every", 4, "--gpus", gpus)
            rows = metrics(out)
            # 72 training samples: 9 steps per epoch; validation at 4, 8, 9 (epoch end), 12 and 14 (the last).
            with_val = [int(r["step"]) for r in rows if r["val_loss"]]
            self.assertEqual(with_val, [4, 8, 9, 12, 14], f"{gpus} stage(s)")

    # --- data: normalisation and pixels ---------------------------------------------------
    def test_mean_std_equal_normalised_data(self):
        rng = np.random.default_rng(8)
        x = rng.uniform(0, 1, (64, 3, 4, 4)).astype(np.float32)
        y = rng.integers(0, 3, 64)
        raw, pre = os.path.join(self.dir, "img_raw"), os.path.join(self.dir, "img_pre")
        mean = np.array([0.25, 0.5, 0.75], np.float32)
        std = np.array([0.5, 2.0, 4.0], np.float32)  # powers of two: the division is exact either way
        for d, xs in ((raw, x), (pre, (x - mean[None, :, None, None]) * (1 / std)[None, :, None, None])):
            os.makedirs(d, exist_ok=True)
            np.save(os.path.join(d, "x.npy"), xs.astype(np.float32))
            np.save(os.path.join(d, "y.npy"), y)
        model = conv_model(os.path.join(self.dir, "convnet.onnx"))
        outs = []
        for name, data, flags in (("norm_flags", raw, ["--mean", "0.25,0.5,0.75", "--std", "0.5,2,4"]),
                                  ("norm_pre", pre, [])):
            out = os.path.join(self.dir, name)
            rc, so, se = run(model, "--data", data, "--out", out, *COMMON, "--lr", 0.1, "--steps", 6, *flags)
            self.assertEqual(rc, 0, se)
            outs.append(out)
        self.assertEqual(read_bytes(os.path.join(outs[0], "convnet.trained.onnx")),
                         read_bytes(os.path.join(outs[1], "convnet.trained.onnx")))
        rc, so, se = run(model, "--data", raw, "--out", os.path.join(self.dir, "nbad"), *COMMON, "--steps", 2,
                         "--mean", "0.1,0.2")
        self.assertEqual(rc, 2, so + se)
        self.assertIn("--mean: 2 values", se)
        self.assertIn("3 channels", se)
        rc, so, se = run(model, "--data", raw, "--out", os.path.join(self.dir, "nbad"), *COMMON, "--steps", 2,
                         "--std", "0")
        self.assertEqual(rc, 2, so + se)
        self.assertIn("--std", se)

    def test_integer_pixels(self):
        rng = np.random.default_rng(9)
        px = rng.integers(0, 256, (64, 8)).astype(np.uint8)
        y = rng.integers(0, 3, 64).astype(np.uint8)  # 8-bit labels are widened
        dirs = {}
        for name, xs in (("u8", px), ("scaled", px.astype(np.float32) * np.float32(1 / 255)),
                         ("raw", px.astype(np.float32))):
            d = dirs[name] = os.path.join(self.dir, "px_" + name)
            os.makedirs(d, exist_ok=True)
            np.save(os.path.join(d, "x.npy"), xs)
            np.save(os.path.join(d, "y.npy"), y)

        def trained(name, data, *flags):
            out = os.path.join(self.dir, name)
            rc, so, se = run(self.model, "--data", data, "--out", out, *COMMON, "--lr", 0.01, "--steps", 4, *flags)
            self.assertEqual(rc, 0, se)
            return read_bytes(os.path.join(out, "mlp.trained.onnx"))

        self.assertEqual(trained("t_u8", dirs["u8"]), trained("t_scaled", dirs["scaled"]))
        self.assertEqual(trained("t_u8raw", dirs["u8"], "--raw-pixels"), trained("t_raw", dirs["raw"]))

    def test_sixteen_bit_npy(self):
        """numpy's '<u2' and '<i2': uint16 pixels are scaled by 1/65535 unless --raw-pixels, int16 ones
        are converted unscaled; 16-bit labels of either sign are widened."""
        rng = np.random.default_rng(10)
        u16 = rng.integers(0, 65536, (64, 8)).astype(np.uint16)
        i16 = rng.integers(-200, 201, (64, 8)).astype(np.int16)
        y = rng.integers(0, 3, 64)
        dirs = {}
        for name, xs, ys in (("u16", u16, y.astype(np.uint16)), ("u16_scaled", u16.astype(np.float32) * np.float32(1 / 65535), y),
                             ("u16_raw", u16.astype(np.float32), y), ("i16", i16, y.astype(np.int16)),
                             ("i16_float", i16.astype(np.float32), y)):
            d = dirs[name] = os.path.join(self.dir, "px16_" + name)
            os.makedirs(d, exist_ok=True)
            np.save(os.path.join(d, "x.npy"), xs)
            np.save(os.path.join(d, "y.npy"), ys)
        self.assertEqual(np.load(os.path.join(dirs["u16"], "x.npy")).dtype.str, "<u2")
        self.assertEqual(np.load(os.path.join(dirs["i16"], "y.npy")).dtype.str, "<i2")

        def trained(name, data, *flags, lr=0.01):
            out = os.path.join(self.dir, name)
            rc, so, se = run(self.model, "--data", data, "--out", out, *COMMON, "--lr", lr, "--steps", 4, *flags)
            self.assertEqual(rc, 0, se)
            return read_bytes(os.path.join(out, "mlp.trained.onnx"))

        self.assertEqual(trained("t_u16", dirs["u16"]), trained("t_u16_scaled", dirs["u16_scaled"]))
        self.assertEqual(trained("t_u16raw", dirs["u16"], "--raw-pixels", lr=1e-7),
                         trained("t_u16_raw", dirs["u16_raw"], lr=1e-7))
        self.assertEqual(trained("t_i16", dirs["i16"], lr=1e-4), trained("t_i16_float", dirs["i16_float"], lr=1e-4))


if __name__ == "__main__":
    unittest.main()
