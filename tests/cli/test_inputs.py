"""Models with several data inputs: a BERT-style encoder reading token ids
[N, T] int64 and an attention mask [N, T] int64 (1: a token, 0: padding) through one masked
self-attention layer and a masked mean pool, trained from x0.npy / x1.npy against PyTorch
(float64, plain SGD, the same batches) within 1e-4; by-name folders (<input name>.npy) give
bit-identical weights; 2 GPipe stages (the ids read by stage 0, the mask by stage 1) equal 1 stage
within 1e-5; the data hash of a checkpoint covers the mask; refusals exit 2 naming the
files; synthetic data fills the mask with ones; mpirun -np 2 equals the same pipeline in one process bit for bit.
Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_inputs.py"""
import csv
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The --balance counts below are of the graph without the epilogue fusion (MatMul + Add of a bias).
UNFUSED = ("--no-fusion", "epilogue")
BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))

V, T, D, C = 13, 6, 8, 3  # vocabulary, tokens, width, classes
NAMES = ("input_ids", "attention_mask")


def run(*args):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def metrics(out):
    with open(os.path.join(out, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def encoder_model(path):
    """E[ids] -> Q, K, V -> softmax(Q K^T / sqrt(D) + (1 - mask) * -1e4) V -> tanh -> mean over
    the unmasked tokens -> W2, b2: logits [N, C]."""
    rng = np.random.default_rng(7)
    w = {"E": rng.standard_normal((V, D)) * 0.5, "Wq": rng.standard_normal((D, D)) * 0.4,
         "Wk": rng.standard_normal((D, D)) * 0.4, "Wv": rng.standard_normal((D, D)) * 0.4,
         "W2": rng.standard_normal((D, C)) * 0.5, "b2": rng.standard_normal(C) * 0.1}
    w = {k: np.asarray(v, np.float32) for k, v in w.items()}
    consts = {"scale": np.array(1.0 / np.sqrt(D), np.float32), "one": np.array(1.0, np.float32),
              "big": np.array(-1e4, np.float32), "ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64)}
    N = helper.make_node
    nodes = [N("Gather", ["E", "input_ids"], ["emb"]),
             N("MatMul", ["emb", "Wq"], ["q"]), N("MatMul", ["emb", "Wk"], ["k"]), N("MatMul", ["emb", "Wv"], ["v"]),
             N("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), N("MatMul", ["q", "kt"], ["s0"]),
             N("Mul", ["s0", "scale"], ["s1"]),
             N("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
             N("Sub", ["one", "mf"], ["pad"]), N("Mul", ["pad", "big"], ["bias2"]),
             N("Unsqueeze", ["bias2", "ax1"], ["bias"]),           # [N, 1, T]
             N("Add", ["s1", "bias"], ["s"]), N("Softmax", ["s"], ["a"], axis=-1),
             N("MatMul", ["a", "v"], ["ctx"]), N("Tanh", ["ctx"], ["h"]),
             N("Unsqueeze", ["mf", "ax2"], ["m3"]),                # [N, T, 1]
             N("Mul", ["h", "m3"], ["hm"]), N("ReduceSum", ["hm", "ax1"], ["sum"], keepdims=0),
             N("ReduceSum", ["mf", "ax1"], ["cnt"], keepdims=1), N("Div", ["sum", "cnt"], ["pooled"]),
             N("MatMul", ["pooled", "W2"], ["z"]), N("Add", ["z", "b2"], ["logits"])]
    inits = [numpy_helper.from_array(v, k) for k, v in {**w, **consts}.items()]
    g = helper.make_graph(nodes, "enc", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", T]),
                                         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", T])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", C])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return w


def torch_run(w, ids, mask, y, idv, maskv, yv, steps, batch, lr):
    """PyTorch (float64): per-step losses, the trained weights and the validation loss."""
    import torch
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w.items()}

    def logits(i, m):
        m = torch.tensor(m, dtype=torch.float64)
        e = p["E"][torch.tensor(i)]
        s = (e @ p["Wq"]) @ (e @ p["Wk"]).transpose(1, 2) / np.sqrt(D) + ((1 - m) * -1e4)[:, None, :]
        h = torch.tanh(torch.softmax(s, -1) @ (e @ p["Wv"]))
        pooled = (h * m[:, :, None]).sum(1) / m.sum(1, keepdim=True)
        return pooled @ p["W2"] + p["b2"]
    losses = []
    for s in range(steps):
        sl = slice(s * batch, (s + 1) * batch)
        loss = torch.nn.functional.cross_entropy(logits(ids[sl], mask[sl]), torch.tensor(y[sl]))
        for t in p.values():
            t.grad = None
        loss.backward()
        with torch.no_grad():
            for t in p.values():
                t -= lr * t.grad
        losses.append(loss.item())
    with torch.no_grad():
        val = torch.nn.functional.cross_entropy(logits(idv, maskv), torch.tensor(yv)).item()
    return losses, {k: v.detach().numpy() for k, v in p.items()}, val


def save_folder(folder, arrays, files):
    os.makedirs(folder, exist_ok=True)
    for a, f in zip(arrays, files):
        np.save(os.path.join(folder, f), a)


class SeveralInputsTest(unittest.TestCase):
    STEPS, BATCH, LR = 5, 4, 0.5

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-inputs-")
        cls.dir = cls.tmp.name
        cls.model = os.path.join(cls.dir, "enc.onnx")
        cls.w = encoder_model(cls.model)
        rng = np.random.default_rng(3)

        def sample(n):
            ids = rng.integers(0, V, size=(n, T)).astype(np.int64)
            lengths = rng.integers(2, T + 1, size=n)
            mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
            return ids, mask, rng.integers(0, C, size=n).astype(np.int64)
        cls.ids, cls.mask, cls.y = sample(cls.STEPS * cls.BATCH)
        cls.idv, cls.maskv, cls.yv = sample(7)
        cls.numbered = os.path.join(cls.dir, "numbered")
        save_folder(cls.numbered, (cls.ids, cls.mask, cls.y), ("x0.npy", "x1.npy", "y.npy"))
        cls.named = os.path.join(cls.dir, "named")
        save_folder(cls.named, (cls.ids, cls.mask, cls.y), ("input_ids.npy", "attention_mask.npy", "y.npy"))
        cls.val = os.path.join(cls.dir, "val")
        save_folder(cls.val, (cls.idv, cls.maskv, cls.yv), ("x0.npy", "x1.npy", "y.npy"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, data, out, *extra):
        rc, so, se = run(self.model, "--data", data, "--val-data", self.val, "--steps", self.STEPS,
                         "--batch-size", self.BATCH, "--lr", self.LR, "--momentum", 0, "--no-shuffle",
                         "--out", out, *extra)
        self.assertEqual(rc, 0, f"exit {rc}: {se or so}")
        trained = {t.name: numpy_helper.to_array(t)
                   for t in onnx.load(os.path.join(out, "enc.trained.onnx")).graph.initializer}
        return so, trained

    def test_one_stage_matches_pytorch(self):
        out = os.path.join(self.dir, "one")
        so, trained = self.train(self.numbered, out)
        self.assertIn("x0.npy + x1.npy + y.npy", so)
        losses, ref, val = torch_run(self.w, self.ids, self.mask, self.y, self.idv, self.maskv, self.yv,
                                     self.STEPS, self.BATCH, self.LR)
        rows = metrics(out)
        np.testing.assert_allclose([float(r["loss"]) for r in rows], losses, rtol=1e-4)
        self.assertAlmostEqual(float(rows[-1]["val_loss"]), val, delta=1e-4 * val)
        for k, v in ref.items():
            np.testing.assert_allclose(trained[k], v, rtol=1e-4, atol=1e-5, err_msg=k)
            self.assertFalse(np.array_equal(trained[k], self.w[k]), f"'{k}' did not train")
        # The mask matters: all ones gives other losses.
        ones = os.path.join(self.dir, "ones")
        save_folder(ones, (self.ids, np.ones_like(self.mask), self.y), ("x0.npy", "x1.npy", "y.npy"))
        out1 = os.path.join(self.dir, "ones_run")
        self.train(ones, out1)
        self.assertNotEqual([r["loss"] for r in metrics(out1)], [r["loss"] for r in rows])

    def test_by_name_folder_is_bit_identical(self):
        _, a = self.train(self.numbered, os.path.join(self.dir, "bynum"))
        so, b = self.train(self.named, os.path.join(self.dir, "byname"))
        self.assertIn("input_ids.npy + attention_mask.npy + y.npy", so)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], k)

    def test_resume_with_another_mask_is_refused(self):
        out = os.path.join(self.dir, "ck")
        rc, so, se = run(self.model, "--data", self.numbered, "--steps", 2, "--batch-size", self.BATCH,
                         "--checkpoint-every", 1, "--out", out)
        self.assertEqual(rc, 0, se or so)
        other = os.path.join(self.dir, "other_mask")
        mask = self.mask.copy()
        mask[0, 1] = 1 - mask[0, 1]
        save_folder(other, (self.ids, mask, self.y), ("x0.npy", "x1.npy", "y.npy"))
        rc, so, se = run(self.model, "--data", other, "--steps", 4, "--batch-size", self.BATCH, "--resume",
                         "--out", out)
        self.assertEqual(rc, 2, se or so)
        self.assertIn("this checkpoint is of another run", se)
        self.assertIn("the training set (contents hash)", se)
        rc, so, se = run(self.model, "--data", self.numbered, "--steps", 4, "--batch-size", self.BATCH, "--resume",
                         "--out", out)
        self.assertEqual(rc, 0, se or so)

    def test_refusals_name_the_files(self):
        cases = {
            "count": ((self.ids, self.mask[:-3], self.y), ("x0.npy", "x1.npy", "y.npy"),
                      "x0.npy holds 20 samples, x1.npy holds 17"),
            "missing": ((self.ids, self.y), ("x0.npy", "y.npy"), "x1.npy is missing"),
            "missing_named": ((self.ids, self.y), ("input_ids.npy", "y.npy"), "attention_mask.npy is missing"),
            "one_input_form": ((self.ids, self.y), ("x.npy", "y.npy"),
                               "the model has 2 data inputs (input_ids, attention_mask): expected x0.npy, x1.npy, ..."),
            "labels": ((self.ids, self.mask, self.y[:-1]), ("x0.npy", "x1.npy", "y.npy"),
                       "y.npy: holds 19 labels for 20 samples in x0.npy"),
            "dims": ((self.ids, self.mask[:, :-1], self.y), ("x0.npy", "x1.npy", "y.npy"),
                     "x1.npy: samples are [5] (5 values), the model input wants [6] (6)"),
        }
        for name, (arrays, files, message) in cases.items():
            d = os.path.join(self.dir, "bad_" + name)
            save_folder(d, arrays, files)
            rc, so, se = run(self.model, "--data", d, "--steps", 1, "--batch-size", self.BATCH,
                             "--out", os.path.join(self.dir, "out_" + name))
            self.assertEqual(rc, 2, f"{name}: {se or so}")
            self.assertIn(message, se, name)
            self.assertEqual(len(se.strip().splitlines()), 1, se)

    def test_synthetic_mask_is_ones(self):
        # Ids within the vocabulary (an id outside it fails in Gather); a mask of ones: a mask of
        # zeros would divide by zero in the pool and diverge (exit 3).
        rc, so, se = run(self.model, "--steps", 3, "--batch-size", 4, "--out", os.path.join(self.dir, "syn"))
        self.assertEqual(rc, 0, se or so)
        self.assertIn("synthetic", so.splitlines()[0])

    def test_two_gpipe_stages_equal_one_stage(self):
        # --balance 5,14: stage 0 reads the token ids, stage 1 (from the mask's Cast on) the mask; the
        # attention (MatMul, Mul, Add, Softmax, MatMul) is one FusedAttention node (importer/fuse.h).
        # The counts are those of the graph without the epilogue pass (UNFUSED).
        _, one = self.train(self.numbered, os.path.join(self.dir, "gp1"))
        out = os.path.join(self.dir, "gp2")
        so, two = self.train(self.numbered, out, "--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2,
                             "--balance", "5,14", *UNFUSED)
        self.assertIn("2 stages", so)
        np.testing.assert_allclose([float(r["loss"]) for r in metrics(out)],
                                   [float(r["loss"]) for r in metrics(os.path.join(self.dir, "gp1"))], rtol=1e-5)
        for k in self.w:
            np.testing.assert_allclose(two[k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)
        # 1F1B with SpecTrain runs too (stale weights: not equal, but finite and trained).
        so, spec = self.train(self.numbered, os.path.join(self.dir, "spec"), "--gpus", 2, "--balance", "5,14", *UNFUSED)
        self.assertTrue(all(np.isfinite(v).all() for v in spec.values()))
        self.assertFalse(np.array_equal(spec["Wq"], self.w["Wq"]))


    def test_mpi_ranks_equal_one_process(self):
        """mpirun -np 2 (rank 0 reads the data and sends stage 1 the mask and the labels) trains the
        weights and losses of the same pipeline in one process, bit for bit, GPipe and 1F1B."""
        mpirun = os.environ.get("PIPETRAIN_MPIRUN") or shutil.which("mpirun")
        if not mpirun:
            self.skipTest("no mpirun")
        flags = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", BIN, self.model, "--gpus", "2"]
        env = None
        if os.environ.get("PIPETRAIN_SANITIZER") == "asan":
            # As in tests/mpi/test_mpi.py: full unwinding lets tools/sanitizers/lsan.supp match what
            # OpenMPI keeps for the process's life (its components are unloaded before the leak check).
            env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":fast_unwind_on_malloc=0")
        probe = subprocess.run(flags + ["--plan-only", "--quiet", "--out", os.path.join(self.dir, "mpi_probe")],
                               capture_output=True, text=True, timeout=120, env=env)
        if probe.returncode != 0:
            out = probe.stdout + probe.stderr
            if "this build has no MPI" in out:
                self.skipTest("built without MPI")
            self.fail("mpirun -np 2 --plan-only failed:\n" + out)
        for name, extra in (("gpipe", ["--schedule", "gpipe", "--micro-batches", "2"]), ("1f1b", [])):
            args = ["--data", self.numbered, "--val-data", self.val, "--steps", str(self.STEPS), "--batch-size",
                    str(self.BATCH), "--lr", str(self.LR), "--momentum", "0", "--no-shuffle", "--balance", "5,14", *UNFUSED,
                    *extra]
            local = os.path.join(self.dir, "local_" + name)
            _, one = self.train(self.numbered, local, "--gpus", 2, "--balance", "5,14", *UNFUSED, *extra)
            out = os.path.join(self.dir, "mpi_" + name)
            p = subprocess.run(flags + args + ["--out", out], capture_output=True, text=True, timeout=300, env=env)
            self.assertEqual(p.returncode, 0, p.stderr or p.stdout)
            two = {t.name: numpy_helper.to_array(t)
                   for t in onnx.load(os.path.join(out, "enc.trained.onnx")).graph.initializer}
            for k in self.w:
                np.testing.assert_array_equal(two[k], one[k], f"{name}: {k}")
            self.assertEqual([(r["loss"], r["val_loss"]) for r in metrics(out)],
                             [(r["loss"], r["val_loss"]) for r in metrics(local)], name)


if __name__ == "__main__":
    unittest.main()
