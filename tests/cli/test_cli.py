"""End-to-end tests of the onnx-pipetrain command line: every refusal (exit code 2 and a one-line
message naming the file, node or flag), opset handling, shape folding, --freeze, and the
whole-training-step oracle against PyTorch. Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain
/usr/bin/python3 -m unittest tests/cli/test_cli.py"""
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
BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
PY = "/usr/bin/python3"


def reuse_ok(args):
    """`args` with --overwrite added where it names a run folder (--out) and does not resume: the
    tests train into the same folder several times, which onnx-pipetrain refuses without it."""
    args = [str(a) for a in args]
    if "--out" in args and "--overwrite" not in args and not any(a.startswith("--resume") for a in args):
        args.append("--overwrite")
    return args


def run(*args, cwd=None):
    p = subprocess.run([BIN, *reuse_ok(args)], capture_output=True, text=True, cwd=cwd, timeout=300)
    return p.returncode, p.stdout, p.stderr


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def mlp_model(path, opset=13, in_dims=("batch", 8), n_out=3, ends_in_softmax=False, ir=None):
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32) * 0.3, "W1")
    b1 = numpy_helper.from_array(np.zeros(16, np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((n_out, 16)).astype(np.float32) * 0.3, "W2")
    b2 = numpy_helper.from_array(np.zeros(n_out, np.float32), "b2")
    out = "probs" if ends_in_softmax else "y"
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("Gemm", ["hr", "W2", "b2"], ["y" if not ends_in_softmax else "z"], name="fc2", transB=1)]
    if ends_in_softmax:
        nodes.append(helper.make_node("Softmax", ["z"], ["probs"], name="softmax", axis=1))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_dims))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [in_dims[0], n_out])],
                          [w1, b1, w2, b2])
    if ir is not None and ir < 4:  # old IR: initializers must also be graph inputs
        for t in (w1, b1, w2, b2):
            g.input.append(helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="test_cli")
    if ir:
        m.ir_version = ir
    onnx.save(m, path)
    return path


def write_data(folder, n=64, feat=8, classes=3, x_dtype=np.float32, y_dtype=np.int64, y_max=None, y_n=None):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(5)
    np.save(os.path.join(folder, "x.npy"), rng.standard_normal((n, feat)).astype(x_dtype))
    y = rng.integers(0, classes if y_max is None else y_max, size=(n if y_n is None else y_n,))
    np.save(os.path.join(folder, "y.npy"), y.astype(y_dtype))
    return folder


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-cli-")
        cls.dir = cls.tmp.name
        subprocess.run([PY, os.path.join(ROOT, "tests", "python", "make_external_data_model.py"), cls.dir],
                       check=True, capture_output=True)
        cls.model = mlp_model(os.path.join(cls.dir, "mlp.onnx"))
        cls.data = write_data(os.path.join(cls.dir, "data"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def refuse(self, args, *needles):
        rc, out, err = run(*args)
        self.assertEqual(rc, 2, f"exit code for {args}: {rc}\nstdout: {out}\nstderr: {err}")
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertTrue(lines, "no error message")
        self.assertIn("error", lines[0])
        for n in needles:
            self.assertIn(n, lines[0], f"message does not name {n!r}: {lines[0]}")
        return lines[0]

    # --- inputs that once crashed or hung the tool -----------------------------------------
    def test_fifos_are_refused_not_waited_on(self):
        # A FIFO nobody writes would block the read forever: model, x.npy, --resume and
        # --device-spec are each refused at once, naming the path (run() times out at 300 s).
        fifo = os.path.join(self.dir, "fifo")
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
        data = os.path.join(self.dir, "fifo_data")
        os.makedirs(data, exist_ok=True)
        np.save(os.path.join(data, "y.npy"), np.zeros(8, np.int64))
        if not os.path.exists(os.path.join(data, "x.npy")):
            os.mkfifo(os.path.join(data, "x.npy"))
        out = os.path.join(self.dir, "fifo_out")
        self.refuse([fifo], fifo, "not a regular file (a FIFO)")
        self.refuse([self.model, "--data", data, "--steps", 1, "--out", out], "x.npy", "a FIFO")
        self.refuse([self.model, "--data", self.data, "--steps", 1, "--out", out, f"--resume={fifo}"], fifo, "a FIFO")
        self.refuse([self.model, "--gpus", 2, "--plan-only", "--device-spec", fifo, "--out", out], fifo, "a FIFO")

    def test_npy_headers_that_claim_too_much(self):
        # Sizes a file claims are checked against the file before anything is allocated.
        d = os.path.join(self.dir, "npy_lies")
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "y.npy"), np.zeros(8, np.int64))
        x = os.path.join(d, "x.npy")
        out = os.path.join(self.dir, "npy_lies_out")
        def header(shape, hlen=None):
            h = ("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape).ljust(118) + "\n"
            n = len(h) if hlen is None else hlen
            return b"\x93NUMPY\x01\x00" + n.to_bytes(2, "little") + h.encode() + b"\0" * 64
        for shape in ("(1099511627776, 64)", "(-1, 64)", "(8, 64, 1099511627776, 1099511627776)"):
            with open(x, "wb") as f:
                f.write(header(shape))
            self.refuse([self.model, "--data", d, "--steps", 1, "--out", out], "x.npy")
        with open(x, "wb") as f:  # a version-2 header claiming 4 GiB in a 27-byte file
            f.write(b"\x93NUMPY\x02\x00" + (0xFFFFFFF0).to_bytes(4, "little") + b"{'descr': '<f")
        self.refuse([self.model, "--data", d, "--steps", 1, "--out", out], "x.npy", "truncated .npy header")

    def test_float64_weight_beside_float32_data(self):
        # Gemm and MatMul take one element type: a float64 initializer is refused naming the node
        # and both tensors (it once aborted in the kernel).
        rng = np.random.default_rng(0)
        cases = {
            "Gemm": ([helper.make_node("Gemm", ["x", "W", "b"], ["y"], name="fc", transB=1)],
                     [numpy_helper.from_array(rng.standard_normal((3, 8)), "W"),
                      numpy_helper.from_array(np.zeros(3, np.float32), "b")]),
            "MatMul": ([helper.make_node("MatMul", ["x", "W"], ["y"], name="fc")],
                       [numpy_helper.from_array(rng.standard_normal((8, 3)), "W")]),
        }
        for op, (nodes, inits) in cases.items():
            g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], inits)
            p = os.path.join(self.dir, f"mixed_{op}.onnx")
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
            self.refuse([p, "--steps", 1, "--out", os.path.join(self.dir, "mixed")], f"mixed_{op}.onnx",
                        f"node 'fc' ({op})", "'W' is float64", "'x' is float32")

    def test_batch_dimension_fixed_at_zero(self):
        p = mlp_model(os.path.join(self.dir, "mlp_batch0.onnx"), in_dims=(0, 8))
        for gpus in ("1", "2"):
            self.refuse([p, "--steps", 1, "--gpus", gpus, "--out", os.path.join(self.dir, "b0")], "mlp_batch0.onnx",
                        "'x' dimension 0 is 0")

    # --- the model file -------------------------------------------------------------------
    def test_missing_file(self):
        self.refuse([os.path.join(self.dir, "nope.onnx")], "nope.onnx", "no such file")

    def test_directory(self):
        self.refuse([self.dir], "is a directory")

    def test_not_onnx(self):
        self.refuse([os.path.join(self.dir, "bad", "not_onnx.onnx")], "not_onnx.onnx", "not an ONNX model")

    def test_unreadable(self):
        if os.geteuid() == 0:
            self.skipTest("running as root: permission bits do not stop reads")
        p = os.path.join(self.dir, "unreadable.onnx")
        mlp_model(p)
        os.chmod(p, 0)
        self.refuse([p], "unreadable.onnx", "cannot be read")

    def test_checker_failure(self):
        self.refuse([os.path.join(self.dir, "bad", "checker_fail.onnx")], "checker_fail.onnx", "onnx checker",
                    "gemm_one_input")

    def test_cycle(self):
        self.refuse([os.path.join(self.dir, "bad", "cycle.onnx")], "cycle.onnx", "cycle", "add_a", "relu_b")

    def test_dangling_input(self):
        self.refuse([os.path.join(self.dir, "bad", "dangling.onnx")], "dangling.onnx", "add_ghost", "ghost")

    def test_duplicate_output(self):
        self.refuse([os.path.join(self.dir, "bad", "dup_output.onnx")], "dup_output.onnx", "'t'", "relu_t",
                    "sigmoid_t")

    def test_unsupported_ops_listed_once(self):
        line = self.refuse([os.path.join(self.dir, "bad", "unsupported_op.onnx")], "unsupported_op.onnx",
                           "'hardmax' (Hardmax, opset 13, domain ai.onnx)", "'det' (Det, opset 13, domain ai.onnx)",
                           "cpu")
        self.assertIn("2 node(s)", line)

    def test_unsupported_domain_listed_with_the_ops(self):
        # Nodes of another domain join the one list, each with its op, its domain's opset and domain.
        g = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("FastGelu", ["r"], ["f"], name="fastgelu", domain="com.microsoft"),
             helper.make_node("Hardmax", ["f"], ["y"], name="hardmax")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
        for opset in (13, 20):
            p = os.path.join(self.dir, f"domains{opset}.onnx")
            onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                                          helper.make_opsetid("com.microsoft", 1)]), p)
            line = self.refuse([p, "--data", self.data, "--steps", 1], f"domains{opset}.onnx", "2 node(s)",
                               "'fastgelu' (FastGelu, opset 1, domain com.microsoft)",
                               f"'hardmax' (Hardmax, opset {opset}, domain ai.onnx)")
            self.assertEqual(line.count("fastgelu"), 1, line)

    # --- external data --------------------------------------------------------------------
    def test_external_absolute(self):
        self.refuse([os.path.join(self.dir, "bad", "abs.onnx")], "abs.onnx", "W1", "absolute path")

    def test_external_dotdot(self):
        self.refuse([os.path.join(self.dir, "bad", "dotdot.onnx")], "dotdot.onnx", "'..'")

    def test_external_symlink(self):
        self.refuse([os.path.join(self.dir, "bad", "symlink.onnx")], "symlink.onnx", "symbolic link", "outside")

    def test_external_overrun(self):
        self.refuse([os.path.join(self.dir, "bad", "overrun.onnx")], "overrun.onnx", "beyond the file's end")

    def test_external_data_trains_and_stays_external(self):
        out = os.path.join(self.dir, "ext_run")
        rc, so, se = run(os.path.join(self.dir, "ext", "model.onnx"), "--steps", 5, "--loss", "mse", "--out", out,
                         "--quiet")
        self.assertEqual(rc, 0, se)
        trained = os.path.join(out, "model.trained.onnx")
        m = onnx.load(trained, load_external_data=False)
        self.assertTrue(all(t.data_location == TensorProto.EXTERNAL for t in m.graph.initializer))
        self.assertTrue(os.path.exists(trained + ".data"))
        onnx.checker.check_model(trained)
        # re-import the trained model: it trains again
        rc, so, se = run(trained, "--steps", 1, "--loss", "mse", "--out", os.path.join(self.dir, "ext_run2"),
                         "--quiet")
        self.assertEqual(rc, 0, se)

    # --- opsets and shapes ----------------------------------------------------------------
    def test_opset_7_to_17(self):
        for opset in (7, 9, 11, 13, 17):
            p = mlp_model(os.path.join(self.dir, f"mlp_op{opset}.onnx"), opset=opset)
            rc, so, se = run(p, "--data", self.data, "--steps", 3, "--out", os.path.join(self.dir, f"op{opset}"),
                             "--quiet")
            self.assertEqual(rc, 0, f"opset {opset}: {se}")

    def test_opset_6_converted(self):
        p = mlp_model(os.path.join(self.dir, "mlp_op6.onnx"), opset=6, ir=3)
        rc, so, se = run(p, "--data", self.data, "--steps", 3, "--out", os.path.join(self.dir, "op6"))
        self.assertEqual(rc, 0, se)
        self.assertIn("converted to", so)

    def test_opset_18_to_21_keep_their_opset(self):
        for opset in (18, 19, 20, 21):
            p = mlp_model(os.path.join(self.dir, f"mlp_op{opset}.onnx"), opset=opset)
            out = os.path.join(self.dir, f"op{opset}")
            rc, so, se = run(p, "--data", self.data, "--steps", 3, "--out", out, "--quiet")
            self.assertEqual(rc, 0, f"opset {opset}: {se}")
            m = onnx.load(os.path.join(out, f"mlp_op{opset}.trained.onnx"))
            self.assertEqual([(o.domain, o.version) for o in m.opset_import], [("", opset)])
        # Stage models keep it too, and chain to the trained model in ONNX Runtime.
        import onnxruntime as ort
        out = os.path.join(self.dir, "op21_stages")
        rc, so, se = run(os.path.join(self.dir, "mlp_op21.onnx"), "--data", self.data, "--steps", 3, "--gpus", 2,
                         "--device", "cpu", "--export-stages", "--out", out, "--quiet")
        self.assertEqual(rc, 0, se)
        x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
        feed = {"x": x}
        for k in range(2):
            sm = onnx.load(os.path.join(out, "stages", f"stage{k}.onnx"))
            self.assertEqual([(o.domain, o.version) for o in sm.opset_import], [("", 21)])
            sess = ort.InferenceSession(sm.SerializeToString(), providers=["CPUExecutionProvider"])
            res = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})
            feed.update({o.name: r for o, r in zip(sess.get_outputs(), res)})
        full = ort.InferenceSession(os.path.join(out, "mlp_op21.trained.onnx"),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(feed["y"], full, rtol=1e-6, atol=1e-6)

    def test_opset_21_new_ops_train_and_export(self):
        # Gemm -> Reshape -> GroupNormalization-21 (per-channel scale) -> Gelu-20 -> ReduceMean-18
        # (axes input) -> Split-18 (num_outputs) -> Add -> Gemm, trained, exported at opset 21 and
        # run by ONNX Runtime.
        rng = np.random.default_rng(21)
        t = lambda a, name: numpy_helper.from_array(np.asarray(a), name)
        inits = [t(rng.standard_normal((32, 8)).astype(np.float32) * 0.3, "W1"), t(np.zeros(32, np.float32), "b1"),
                 t(np.array([-1, 4, 8], np.int64), "shape"), t(np.ones(4, np.float32), "gs"),
                 t(np.zeros(4, np.float32), "gb"), t(np.array([2], np.int64), "axes"),
                 t(rng.standard_normal((3, 2)).astype(np.float32) * 0.3, "W2"), t(np.zeros(3, np.float32), "b2")]
        n = helper.make_node
        nodes = [n("Gemm", ["x", "W1", "b1"], ["h"], name="fc1", transB=1),
                 n("Reshape", ["h", "shape"], ["h3"], name="reshape"),
                 n("GroupNormalization", ["h3", "gs", "gb"], ["g"], name="gn", num_groups=2),
                 n("Gelu", ["g"], ["a"], name="gelu"),
                 n("ReduceMean", ["a", "axes"], ["m"], name="mean", keepdims=0),
                 n("Split", ["m"], ["s0", "s1"], name="split", axis=1, num_outputs=2),
                 n("Add", ["s0", "s1"], ["s"], name="add"),
                 n("Gemm", ["s", "W2", "b2"], ["y"], name="fc2", transB=1)]
        g = helper.make_graph(nodes, "newops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], inits)
        p = os.path.join(self.dir, "newops21.onnx")
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
        m.ir_version = 8
        onnx.save(m, p)
        out = os.path.join(self.dir, "newops21")
        rc, so, se = run(p, "--data", self.data, "--steps", 5, "--lr", 0.1, "--out", out, "--quiet")
        self.assertEqual(rc, 0, se)
        trained = onnx.load(os.path.join(out, "newops21.trained.onnx"))
        self.assertEqual([(o.domain, o.version) for o in trained.opset_import], [("", 21)])
        w = {i.name: numpy_helper.to_array(i) for i in trained.graph.initializer}
        self.assertFalse(np.allclose(w["gs"], 1.0), "GroupNormalization's scale did not train")
        import onnxruntime as ort
        x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
        y = ort.InferenceSession(trained.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        self.assertEqual(y.shape, (4, 3))
        self.assertTrue(np.all(np.isfinite(y)))

    def test_opset_too_new(self):
        p = mlp_model(os.path.join(self.dir, "mlp_op22.onnx"), opset=22)
        self.refuse([p], "mlp_op22.onnx", "opset 22", "7 to 21")

    def test_opset_19_pad_wrap_refused(self):
        g = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["y"], name="padwrap", mode="wrap")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])],
                              [numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads")])
        p = os.path.join(self.dir, "padwrap.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), p)
        self.refuse([p, "--data", self.data, "--steps", 1], "padwrap.onnx", "'padwrap'", "wrap")

    def test_symbolic_non_batch_dim(self):
        p = mlp_model(os.path.join(self.dir, "mlp_sym.onnx"), in_dims=("batch", "features"))
        self.refuse([p], "mlp_sym.onnx", "'x'", "dimension 1", "features")

    def test_shape_subgraph_folding(self):
        # x.view(x.size(0), -1) as torch.onnx.export emits it: Shape, Gather, Unsqueeze, Concat, Reshape.
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(12, 3)

            def forward(self, x):
                return self.fc(torch.relu(x).view(x.size(0), -1))

        torch.manual_seed(0)
        p = os.path.join(self.dir, "view.onnx")
        torch.onnx.export(Net(), torch.zeros(2, 3, 4), p, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=13)
        ops = {n.op_type for n in onnx.load(p).graph.node}
        self.assertTrue({"Shape", "Reshape"} <= ops, ops)
        d = os.path.join(self.dir, "view_data")
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "x.npy"), np.random.default_rng(0).standard_normal((16, 3, 4)).astype(np.float32))
        np.save(os.path.join(d, "y.npy"), np.arange(16, dtype=np.int64) % 3)
        rc, so, se = run(p, "--data", d, "--steps", 4, "--batch-size", 8, "--out", os.path.join(self.dir, "view"))
        self.assertEqual(rc, 0, se)

    def test_softmax_output_uses_logits(self):
        p = mlp_model(os.path.join(self.dir, "mlp_softmax.onnx"), ends_in_softmax=True)
        rc, so, se = run(p, "--data", self.data, "--steps", 2, "--out", os.path.join(self.dir, "sm"))
        self.assertEqual(rc, 0, se)
        self.assertIn("before the final Softmax", so)

    def test_validation_loss_of_softmax_and_log_softmax_outputs(self):
        # The loss reads the logits before a final Softmax or LogSoftmax, so the three variants
        # train alike; validation must score them alike too (a LogSoftmax output once scored
        # -log(1e-30) = 69.0776 for every sample).
        import csv
        plain = mlp_model(os.path.join(self.dir, "mlp_plain.onnx"))
        sm = mlp_model(os.path.join(self.dir, "mlp_sm.onnx"), ends_in_softmax=True)
        m = onnx.load(sm)
        m.graph.node[-1].op_type = "LogSoftmax"
        lsm = os.path.join(self.dir, "mlp_lsm.onnx")
        onnx.save(m, lsm)
        val = {}
        for name, path in (("plain", plain), ("sm", sm), ("lsm", lsm)):
            out = os.path.join(self.dir, "valloss_" + name)
            rc, so, se = run(path, "--data", self.data, "--steps", 6, "--val-split", 0.25, "--seed", 2,
                             "--out", out)
            self.assertEqual(rc, 0, se)
            with open(os.path.join(out, "metrics.csv")) as f:
                rows = [r for r in csv.DictReader(f) if r["val_loss"]]
            val[name] = (float(rows[-1]["val_loss"]), float(rows[-1]["val_accuracy"]))
        self.assertLess(val["plain"][0], 5.0, val)
        for name in ("sm", "lsm"):
            self.assertAlmostEqual(val[name][0], val["plain"][0], delta=1e-4 * val["plain"][0], msg=str(val))
            self.assertEqual(val[name][1], val["plain"][1], val)

    def test_model_with_its_own_loss(self):
        rng = np.random.default_rng(4)
        w = numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32), "W")
        nodes = [helper.make_node("Gemm", ["x", "W"], ["z"], name="fc", transB=1),
                 helper.make_node("SoftmaxCrossEntropyLoss", ["z", "labels"], ["loss"], name="sce",
                                  reduction="mean")]
        g = helper.make_graph(nodes, "own_loss",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8]),
                               helper.make_tensor_value_info("labels", TensorProto.INT64, ["n"])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], [w])
        p = os.path.join(self.dir, "own_loss.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
        rc, so, se = run(p, "--data", self.data, "--steps", 4, "--out", os.path.join(self.dir, "own"))
        self.assertEqual(rc, 0, se)
        self.assertIn("the model's own SoftmaxCrossEntropyLoss 'sce'", so)

    def _dropout_model(self, opset):
        import torch

        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                  torch.nn.Linear(32, 3))
        p = os.path.join(self.dir, f"dropout{opset}.onnx")
        torch.onnx.export(net, torch.zeros(2, 8), p, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        self.assertIn("Dropout", {n.op_type for n in onnx.load(p).graph.node})
        return p

    def test_dropout_training_is_seeded(self):
        for opset in (11, 13):
            p = self._dropout_model(opset)
            weights = []
            for run_i, seed in enumerate((1, 1, 2)):
                out = os.path.join(self.dir, f"drop{opset}_{run_i}")
                rc, so, se = run(p, "--data", self.data, "--val-data", self.data, "--steps", 6, "--seed", seed,
                                 "--out", out, "--quiet")
                self.assertEqual(rc, 0, se)
                m = onnx.load(os.path.join(out, f"dropout{opset}.trained.onnx"))
                weights.append({t.name: numpy_helper.to_array(t) for t in m.graph.initializer})
            for k in weights[0]:
                np.testing.assert_array_equal(weights[0][k], weights[1][k], f"opset {opset}: same seed, {k} differs")
            self.assertTrue(any(not np.array_equal(weights[0][k], weights[2][k]) for k in weights[0]),
                            f"opset {opset}: a different seed gives the same weights")

    # --- flags ----------------------------------------------------------------------------
    def test_help_lists_flags_with_defaults(self):
        rc, so, se = run("--help")
        self.assertEqual(rc, 0)
        for flag in ("--gpus", "--device", "--data", "--epochs", "--steps", "--batch-size", "--lr", "--momentum",
                     "--weight-decay", "--loss", "--freeze", "--seed", "--out", "--quiet"):
            self.assertIn(flag, so)
        self.assertIn("32", so)  # --batch-size default

    def test_more_stages_than_gpus(self):
        import re
        line = self.refuse([self.model, "--device", "cuda", "--gpus", "4", "--steps", "1"], "--gpus 4")
        self.assertRegex(line, r"this machine has \d+ CUDA device")

    def test_unknown_flag(self):
        self.refuse([self.model, "--no-such-flag"], "--no-such-flag")

    def test_bad_values(self):
        self.refuse([self.model, "--batch-size", "0"], "--batch-size")
        self.refuse([self.model, "--loss", "hinge"], "--loss")
        self.refuse([self.model, "--device", "tpu"], "--device")
        self.refuse([self.model, "--lr", "abc"], "--lr")

    def _weights(self, out, stem="mlp"):
        m = onnx.load(os.path.join(out, f"{stem}.trained.onnx"))
        return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}

    def test_pipelined_training(self):
        import json
        common = ["--data", self.data, "--steps", 12, "--batch-size", 8, "--no-shuffle", "--lr", 0.1]
        for weights in ("spectrain", "stash", "stale"):
            out = os.path.join(self.dir, f"pipe_{weights}")
            rc, so, se = run(self.model, "--gpus", 3, "--weights", weights, "--trace", "--out", out, *common)
            self.assertEqual(rc, 0, se)
            self.assertIn("stage 2: busy", so)
            self.assertIn("pipeline efficiency", so)
            self.assertTrue(os.path.exists(os.path.join(out, "curves.svg")), "pipelined run without curves.svg")
            events = json.load(open(os.path.join(out, "trace.json")))["traceEvents"]
            passes = [e for e in events if e.get("ph") == "X" and e["name"][0] in "FB"]
            self.assertEqual(len(passes), 3 * 12 * 2, "one forward and one backward per stage and mini-batch")
            self.assertTrue(all("staleness" in e["args"] and "version" in e["args"] for e in passes))
        # GPipe over 2 stages with 2 micro-batches is sequential training on the whole mini-batch.
        seq = os.path.join(self.dir, "seq")
        rc, so, se = run(self.model, "--out", seq, "--quiet", *common)
        self.assertEqual(rc, 0, se)
        gp = os.path.join(self.dir, "gpipe")
        rc, so, se = run(self.model, "--gpus", 2, "--schedule", "gpipe", "--micro-batches", 2, "--out", gp, "--quiet",
                         *common)
        self.assertEqual(rc, 0, se)
        a, b = self._weights(gp), self._weights(seq)
        for k in b:
            err = np.abs(a[k] - b[k]).max() / (np.abs(b[k]).max() + 1e-6)
            self.assertLess(err, 1e-5, f"GPipe differs from sequential training in {k}: {err}")
        self.refuse([self.model, "--micro-batches", "2"], "--micro-batches", "gpipe")
        self.refuse([self.model, "--schedule", "gpipe", "--micro-batches", "3", "--batch-size", "8"], "multiple")

    def test_freeze_unknown(self):
        self.refuse([self.model, "--freeze", "W9"], "--freeze", "W9")

    def test_freeze_keeps_weights(self):
        out = os.path.join(self.dir, "frozen")
        rc, so, se = run(self.model, "--data", self.data, "--steps", 5, "--freeze", "W1,b2", "--out", out, "--quiet")
        self.assertEqual(rc, 0, se)
        before = {t.name: numpy_helper.to_array(t) for t in onnx.load(self.model).graph.initializer}
        after = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(out, "mlp.trained.onnx")).graph.initializer}
        np.testing.assert_array_equal(before["W1"], after["W1"])
        np.testing.assert_array_equal(before["b2"], after["b2"])
        self.assertFalse(np.array_equal(before["W2"], after["W2"]))

    # --- data -----------------------------------------------------------------------------
    def test_data_wrong_dtype(self):
        d = write_data(os.path.join(self.dir, "d_f64"), x_dtype=np.float64)
        self.refuse([self.model, "--data", d], "x.npy", "float64")

    def test_data_wrong_sample_shape(self):
        d = write_data(os.path.join(self.dir, "d_shape"), feat=7)
        self.refuse([self.model, "--data", d], "x.npy", "[7]", "[8]")

    def test_labels_out_of_range(self):
        d = write_data(os.path.join(self.dir, "d_range"), y_max=9)
        self.refuse([self.model, "--data", d], "y.npy", "outside [0, 3)")

    def test_label_count(self):
        d = write_data(os.path.join(self.dir, "d_count"), y_n=10)
        self.refuse([self.model, "--data", d], "y.npy", "10 labels", "64 samples")

    def test_label_dtype(self):
        d = write_data(os.path.join(self.dir, "d_ydtype"), y_dtype=np.float32)
        self.refuse([self.model, "--data", d], "y.npy", "float32")

    def test_data_missing_folder(self):
        self.refuse([self.model, "--data", os.path.join(self.dir, "nowhere")], "--data", "nowhere")

    def _idx(self, folder, n=64, gz=True, truncate=False):
        import gzip
        import struct
        os.makedirs(folder, exist_ok=True)
        rng = np.random.default_rng(9)
        imgs = rng.integers(0, 256, size=(n, 2, 4), dtype=np.uint8)   # 8 pixels: fits the [N, 8] model
        labels = rng.integers(0, 3, size=(n,), dtype=np.uint8)
        img_bytes = struct.pack(">HBBIII", 0, 8, 3, n, 2, 4) + imgs.tobytes()
        lab_bytes = struct.pack(">HBBI", 0, 8, 1, n) + labels.tobytes()
        if truncate:
            img_bytes = img_bytes[:-20]
        opener = gzip.open if gz else open
        ext = ".gz" if gz else ""
        with opener(os.path.join(folder, "train-images-idx3-ubyte" + ext), "wb") as f:
            f.write(img_bytes)
        with opener(os.path.join(folder, "train-labels-idx1-ubyte" + ext), "wb") as f:
            f.write(lab_bytes)
        return folder

    def test_idx_data(self):
        for gz in (True, False):
            d = self._idx(os.path.join(self.dir, f"idx{int(gz)}"), gz=gz)
            rc, so, se = run(self.model, "--data", os.path.join(d, "train"), "--val-split", "0.25", "--epochs", 2,
                             "--out", os.path.join(self.dir, f"idxrun{int(gz)}"))
            self.assertEqual(rc, 0, se)
            self.assertIn("(IDX)", so)
            self.assertIn("validation: the last 16 samples", so)

    def test_idx_truncated(self):
        d = self._idx(os.path.join(self.dir, "idx_trunc"), truncate=True)
        self.refuse([self.model, "--data", d], "train-images-idx3-ubyte.gz", "truncated", "record 61")

    def test_cifar_data(self):
        # CIFAR-10 records on a model with a [N, 3, 32, 32] input (Flatten + Gemm).
        rng = np.random.default_rng(2)
        w = numpy_helper.from_array(rng.standard_normal((10, 3072)).astype(np.float32) * 0.01, "W")
        g = helper.make_graph([helper.make_node("Flatten", ["x"], ["f"], name="flat"),
                               helper.make_node("Gemm", ["f", "W"], ["y"], name="fc", transB=1)], "cifar",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])], [w])
        p = os.path.join(self.dir, "cifar.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
        d = os.path.join(self.dir, "cifar-10-batches-bin")
        os.makedirs(d, exist_ok=True)
        for b in (1, 2):
            recs = np.concatenate([rng.integers(0, 10, (40, 1)), rng.integers(0, 256, (40, 3072))], axis=1)
            recs.astype(np.uint8).tofile(os.path.join(d, f"data_batch_{b}.bin"))
        rc, so, se = run(p, "--data", d, "--steps", 3, "--out", os.path.join(self.dir, "cifar_run"))
        self.assertEqual(rc, 0, se)
        self.assertIn("CIFAR-10 binary (2 files), 80 samples", so)
        with open(os.path.join(d, "data_batch_2.bin"), "ab") as f:
            f.write(b"\0" * 100)
        self.refuse([p, "--data", d], "data_batch_2.bin", "CIFAR", "record 40")

    def test_run_folder_and_input_untouched(self):
        before = read_bytes(self.model)
        out = os.path.join(self.dir, "runf")
        rc, so, se = run(self.model, "--data", self.data, "--epochs", 2, "--out", out)
        self.assertEqual(rc, 0, se)
        self.assertEqual(read_bytes(self.model), before)
        self.assertEqual(sorted(os.listdir(out)), ["curves.svg", "metrics.csv", "mlp.trained.onnx", "partition.dot",
                                                   "partition.html", "partition.json", "partition.txt",
                                                   "trace.json"])
        for needle in ("loss:", "parameters:", "step ", "done:"):
            self.assertIn(needle, so)
        lines = read_bytes(os.path.join(out, "metrics.csv")).decode().splitlines()
        self.assertTrue(lines[0].startswith("step,epoch,loss"))
        self.assertEqual(len(lines), 1 + 2 * (64 // 32))

    # --- planning and reports -------------------------------------------------------------
    def test_plan_only_reports(self):
        import json
        out = os.path.join(self.dir, "plan4")
        rc, so, se = run(self.model, "--gpus", 3, "--plan-only", "--whatif", "--out", out)
        self.assertEqual(rc, 0, se)
        for f in ("partition.txt", "partition.json", "partition.html", "partition.dot", "trace.json"):
            self.assertTrue(os.path.exists(os.path.join(out, f)), f)
        self.assertFalse(os.path.exists(os.path.join(out, "mlp.trained.onnx")), "--plan-only trained")
        j = json.load(open(os.path.join(out, "partition.json")))
        for k in ("model", "devices", "schedule", "stages", "bottleneck_ms", "predicted_samples_per_s", "imbalance"):
            self.assertIn(k, j)
        self.assertEqual(len(j["stages"]), 3)
        nodes = [n for st in j["stages"] for n in st["nodes"]]
        # fc1's Relu is its epilogue (importer/fuse_epilogue.cpp): one node that keeps the product's name.
        self.assertEqual(nodes, ["fc1", "fc2", "loss/SoftmaxCrossEntropyLoss"])
        for st in j["stages"]:
            for k in ("index", "device", "nodes", "param_count", "param_bytes", "fwd_ms", "bwd_ms", "memory_bytes",
                      "send_bytes", "recv_bytes"):
                self.assertIn(k, st)
        self.assertEqual(sum(st["param_count"] for st in j["stages"]), 16 * 8 + 16 + 3 * 16 + 3)
        self.assertIn("bottleneck", so)
        self.assertIn("data-parallel", so)   # the what-if table
        json.load(open(os.path.join(out, "trace.json")))

    def test_replicas_auto_chooses_a_layout(self):
        # --replicas auto splits the --gpus devices into stages x replicas by the cost model: one
        # "layout:" line, the plan and partition.json with that many stages and replicas, and the
        # layouts it was chosen from in partition.json (the chosen one the fastest that fits).
        import json, re
        out = os.path.join(self.dir, "replicas_auto")
        rc, so, se = run(self.model, "--gpus", 4, "--replicas", "auto", "--plan-only", "--device-spec", "h100",
                         "--whatif", "--out", out)
        self.assertEqual(rc, 0, se)
        lines = [l for l in so.splitlines() if l.startswith("layout:")]
        self.assertEqual(len(lines), 1, so)
        m = re.fullmatch(r"layout: (\d+) stages? x (\d+) replicas? \(chosen from 4x1, 2x2, 1x4 on 4 devices "
                         r"by predicted throughput; --whatif shows the table\)", lines[0])
        self.assertTrue(m, lines[0])
        n, r = int(m.group(1)), int(m.group(2))
        self.assertEqual(n * r, 4)
        j = json.loads(read_bytes(os.path.join(out, "partition.json")))
        self.assertEqual(len(j["stages"]), n)
        self.assertEqual(j["replicas"], r)
        self.assertEqual(j["device_count"], 4)
        self.assertEqual([(l["stages"], l["replicas"]) for l in j["layouts"]], [(4, 1), (2, 2), (1, 4)])
        chosen = [l for l in j["layouts"] if l["chosen"]]
        self.assertEqual(len(chosen), 1)
        self.assertEqual((chosen[0]["stages"], chosen[0]["replicas"]), (n, r))
        self.assertEqual(chosen[0]["samples_per_s"], max(l["samples_per_s"] for l in j["layouts"] if l["fits"]))
        # The what-if table: hybrid and data-parallel rows, the choice marked once.
        self.assertIn("hybrid 2x2", so)
        self.assertIn("data-parallel 1x4", so)
        self.assertEqual(so.count("<- chosen"), 2, so)  # the report's layouts and the what-if table
        self.assertIn("layouts of 4 devices", read_bytes(os.path.join(out, "partition.txt")).decode())
        self.assertIn("Stages x replicas", read_bytes(os.path.join(out, "partition.html")).decode())
        # Given stages x replicas, the what-if marks that layout, fastest or not.
        for n, r in ((2, 2), (1, 4)):  # (this model has 3 nodes: no 4x1)
            rc, so, se = run(self.model, "--gpus", n, "--replicas", r, "--plan-only", "--device-spec", "h100",
                             "--whatif", "--out", out + f"_{n}x{r}")
            self.assertEqual(rc, 0, se)
            marked = [l for l in so.splitlines() if l.endswith("<- chosen")]
            self.assertEqual(len(marked), 2, so)
            name = {1: f"pipeline {n}x1", 4: "data-parallel 1x4"}.get(r, f"hybrid {n}x{r}")
            self.assertTrue(marked[0].strip().startswith(name), (name, marked))
        # One device: the only layout, 1x1, no error.
        rc, so, se = run(self.model, "--gpus", 1, "--replicas", "auto", "--plan-only", "--device-spec", "h100",
                         "--out", out)
        self.assertEqual(rc, 0, se)
        self.assertIn("layout: 1 stage x 1 replica (chosen from 1x1 on 1 device", so)
        # An explicit count: --gpus stages with that many replicas.
        rc, so, se = run(self.model, "--gpus", 2, "--replicas", 4, "--plan-only", "--device-spec", "h100", "--out", out)
        self.assertEqual(rc, 0, se)
        self.assertNotIn("layout:", so)
        self.assertIn("2 stages, 1f1b schedule, spectrain weights, batch 32, 4 replicas (8 devices)", so)
        j = json.loads(read_bytes(os.path.join(out, "partition.json")))
        self.assertEqual((len(j["stages"]), j["replicas"], j["batch_size"], j["graph_replicas"]), (2, 4, 32, 4))

    def test_replicas_refuses_bad_counts(self):
        for bad in ("0", "-2", "two", "1.5", "2x"):
            self.refuse([self.model, "--replicas", bad, "--plan-only", "--out", os.path.join(self.dir, "bad_r")],
                        "--replicas " + bad)
        self.refuse([self.model, "--gpus", 4, "--replicas", 2000, "--plan-only"], "--replicas 2000", "4096")
        # auto chooses the stage count: flags that fix it are refused.
        self.refuse([self.model, "--gpus", 2, "--replicas", "auto", "--split-at", "fc2", "--plan-only",
                     "--out", os.path.join(self.dir, "bad_r")], "--replicas auto", "--split-at")
        self.refuse([self.model, "--gpus", 2, "--replicas", "auto", "--device-spec", "h100,a100", "--plan-only",
                     "--out", os.path.join(self.dir, "bad_r")], "--replicas auto", "--device-spec")

    def test_replica_link(self):
        # --replica-link: the link the plan charges the replicas' all-reduce over (default --link):
        # a slower one costs more all-reduce time per stage; an unknown name is refused.
        import json
        ms = {}
        for link in ("nvlink4", "network"):
            out = os.path.join(self.dir, "replica_link_" + link)
            rc, so, se = run(self.model, "--gpus", 2, "--replicas", 2, "--batch-size", 64, "--plan-only",
                             "--device-spec", "h100", "--link", "nvlink4", "--replica-link", link, "--out", out)
            self.assertEqual(rc, 0, se)
            j = json.loads(read_bytes(os.path.join(out, "partition.json")))
            self.assertEqual(j["replica_link"]["name"], link)
            self.assertEqual(j["link"]["name"], "nvlink4")
            ms[link] = sum(st["allreduce_ms"] for st in j["stages"])
        self.assertGreater(ms["network"], 2 * ms["nvlink4"])
        self.refuse([self.model, "--gpus", 2, "--replicas", 2, "--plan-only", "--replica-link", "warp9",
                     "--out", os.path.join(self.dir, "bad_link")], "--replica-link", "warp9")
        # --network-link is checked in one process too (it prices nothing there, but a typo is a typo),
        # and `measure` needs a job across nodes.
        self.refuse([self.model, "--plan-only", "--network-link", "warp9", "--out", os.path.join(self.dir, "bad_link")],
                    "--network-link", "warp9")
        self.refuse([self.model, "--gpus", 2, "--ranks-per-node", 1, "--plan-only", "--network-link", "measure",
                     "--out", os.path.join(self.dir, "bad_link")], "--network-link measure", "more than one node")
        # Training in one process: one node, so --ranks-per-node would price cuts that do not exist.
        self.refuse([self.model, "--data", self.data, "--gpus", 2, "--ranks-per-node", 1, "--steps", 1,
                     "--out", os.path.join(self.dir, "rpn")], "--ranks-per-node 1", "--plan-only")

    def test_loss_output_picks_the_output_the_loss_reads(self):
        # A model that returns its argmax (int64) first and its logits second: the loss reads the
        # first float output by default, the one --loss-output names otherwise; a name that is no
        # output, or an int64 one, is refused naming it. Both outputs stay in the trained model.
        src = onnx.load(self.model)
        g = src.graph
        g.node.append(helper.make_node("ArgMax", ["y"], ["idx"], name="argmax", axis=1, keepdims=0))
        del g.output[:]
        g.output.extend([helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch"]),
                         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
        path = os.path.join(self.dir, "two_outputs.onnx")
        onnx.save(src, path)
        trained = {}
        for name, extra in (("first_float", []), ("named", ["--loss-output", "y"])):
            out = os.path.join(self.dir, "lo_" + name)
            rc, so, se = run(path, "--data", self.data, "--steps", 3, "--seed", 2, "--out", out, *extra)
            self.assertEqual(rc, 0, se)
            self.assertIn("loss: softmax cross-entropy", so)
            self.assertIn("on output 'y'", so)
            m = onnx.load(os.path.join(out, "two_outputs.trained.onnx"))
            self.assertEqual([o.name for o in m.graph.output], ["idx", "y"])
            trained[name] = read_bytes(os.path.join(out, "two_outputs.trained.onnx"))
        self.assertEqual(trained["first_float"], trained["named"])
        self.refuse([path, "--data", self.data, "--loss-output", "idx", "--out", os.path.join(self.dir, "lo_bad")],
                    "model output 'idx' is int64, not a float tensor")
        self.refuse([path, "--data", self.data, "--loss-output", "logits", "--out", os.path.join(self.dir, "lo_bad")],
                    "--loss-output logits", "'idx', 'y'")

    def test_flag_messages_read_plainly(self):
        out = os.path.join(self.dir, "plain")
        for args, want in (((["--steps", 0]), "--steps: Value 0 must be above 0"),
                           ((["--weight-decay", -1]), "--weight-decay: Value -1 must be at least 0"),
                           ((["--lr", "1e40"]), "--lr: Value 1e40 is beyond float32's range"),
                           ((["--steps", "2.5"]), "--steps: '2.5' is not a value of the flag's type"),
                           ((["--log-every", 0]), "--log-every: Value 0 must be above 0"),
                           ((["--val-split", "0.0001"]), "--val-split 0.0001: of ")):
            line = self.refuse([self.model, "--data", self.data, "--out", out, *args], want)
            self.assertLess(len(line), 160, line)
        line = self.refuse([self.model, "--data", self.data, "--out", ""], "--out", "needs a folder")
        # A run refused after its folder was made (here by the planner) leaves no empty folder.
        gone = os.path.join(self.dir, "refused_by_the_plan")
        self.refuse([self.model, "--data", self.data, "--gpus", 64, "--no-calibrate", "--out", gone], "--gpus 64")
        self.assertFalse(os.path.exists(gone))
        rc, so, se = run(self.model, "--data", self.data, "--steps")  # (no --out: nothing is appended)
        self.assertEqual(rc, 2)
        self.assertIn("--steps: needs a value", se)
        # A flag that would do nothing says so.
        rc, so, se = run(self.model, "--data", self.data, "--out", out, "--steps", 2, "--eval-every", 1)
        self.assertEqual(rc, 0, se)
        self.assertIn("notice: --eval-every: there is no validation set", so + se)

    def test_training_writes_measured_times(self):
        import json
        out = os.path.join(self.dir, "measured")
        rc, so, se = run(self.model, "--data", self.data, "--steps", 3, "--out", out, "--quiet")
        self.assertEqual(rc, 0, se)
        st = json.load(open(os.path.join(out, "partition.json")))["stages"][0]
        self.assertIn("measured", st)
        self.assertGreater(st["measured"]["fwd_ms"], 0)
        # Whole stages on both sides of the error: a stage that updates after its backward (weight
        # stashing, stage 0 of 2) measures its updates apart, one that updates in it inside bwd_ms.
        out = os.path.join(self.dir, "measured2")
        rc, so, se = run(self.model, "--data", self.data, "--steps", 6, "--gpus", 2, "--weights", "stash",
                         "--out", out, "--quiet")
        self.assertEqual(rc, 0, se)
        stages = json.load(open(os.path.join(out, "partition.json")))["stages"]
        self.assertFalse(stages[0]["update_in_backward"])
        self.assertGreater(stages[0]["measured"]["update_ms"], 0)
        for st in stages:
            m = st["measured"]
            if st["update_in_backward"]:
                self.assertEqual(m["update_ms"], 0)
            meas = m["fwd_ms"] + m["bwd_ms"] + m["update_ms"]
            pred = st["fwd_ms"] + st["bwd_ms"] + st["update_ms"]
            self.assertAlmostEqual(m["error"], (pred - meas) / meas, places=9)
        # Micro-batches: the measured times are per pass, as the plan's (a mini-batch of 4
        # micro-batches takes 4 passes), not per mini-batch as the run's stage lines print them.
        out = os.path.join(self.dir, "measured3")
        rc, so, se = run(self.model, "--data", self.data, "--steps", 6, "--gpus", 2, "--schedule", "gpipe",
                         "--micro-batches", 4, "--out", out)
        self.assertEqual(rc, 0, se)
        printed = {int(k): (float(f), float(b)) for k, f, b in
                   re.findall(r"^stage (\d+): busy \d+%, forward ([0-9.]+) ms, backward ([0-9.]+) ms per mini-batch", so, re.M)}
        stages = json.load(open(os.path.join(out, "partition.json")))["stages"]
        self.assertEqual(sorted(printed), [0, 1])
        for st in stages:
            f, b = printed[st["index"]]
            self.assertAlmostEqual(4 * st["measured"]["fwd_ms"], f, delta=0.0006 + 1e-3 * f)
            self.assertAlmostEqual(4 * st["measured"]["bwd_ms"], b, delta=0.0006 + 1e-3 * b)

    def test_manual_plans(self):
        out = os.path.join(self.dir, "manual")
        rc, so, se = run(self.model, "--gpus", 2, "--plan-only", "--split-at", "fc2", "--out", out)
        self.assertEqual(rc, 0, se)
        self.assertIn("automatic", so)
        rc, so, se = run(self.model, "--gpus", 2, "--plan-only", "--balance", "2,1", "--out", out)
        self.assertEqual(rc, 0, se)
        self.refuse([self.model, "--gpus", "2", "--plan-only", "--split-at", "nope", "--out", out], "nope")
        self.refuse([self.model, "--gpus", "2", "--plan-only", "--balance", "1,1", "--out", out], "balance")

    def test_shared_weights_plan_and_refusal(self):
        # Weights shared across stages are planned (charged to their readers) and trained; model
        # state shared across stages is refused by --plan-only as by training: exit 2, one line.
        d = os.path.join(self.dir, "shared")
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "python", "make_shared_weight_models.py"), d],
                       check=True)
        model = os.path.join(d, "shared_mlp.onnx")
        out = os.path.join(d, "plan")
        # The cuts between each Gemm and its Relu are what this test is about: no epilogue fusion.
        rc, so, se = run(model, "--gpus", 4, "--plan-only", "--balance", "2,2,2,2", "--out", out, "--no-fusion", "epilogue")
        self.assertEqual(rc, 0, se)
        self.assertIn("stage 1 reads shared weights bz (stage 0)", so)
        self.assertIn("stage 2 reads shared weights Ws (stage 1), bz (stage 0)", so)
        with open(os.path.join(out, "partition.json")) as f:
            stages = json.load(f)["stages"]
        self.assertEqual([sorted(s["shared"]) for s in stages], [[], ["bz"], ["Ws", "bz"], []])
        self.assertGreater(stages[2]["shared_memory_bytes"], 0)
        rc, so, se = run(model, "--gpus", 4, "--balance", "2,2,2,2", "--steps", 5, "--quiet", "--out", out,
                         "--no-fusion", "epilogue")
        self.assertEqual(rc, 0, se)
        # Two training-mode BatchNormalization nodes reading the same running statistics.
        rng = np.random.default_rng(1)
        init = {"W0": rng.normal(0, .3, (8, 8)), "W1": rng.normal(0, .3, (8, 8)), "W2": rng.normal(0, .3, (8, 4)),
                "scale": np.ones(8), "bias": np.zeros(8), "mean": np.zeros(8), "var": np.ones(8)}
        bn = ["scale", "bias", "mean", "var"]
        nodes = [helper.make_node("MatMul", ["x", "W0"], ["h0"], name="fc0"),
                 helper.make_node("BatchNormalization", ["h0", *bn], ["n0", "m0", "v0"], name="bn0", training_mode=1),
                 helper.make_node("Relu", ["n0"], ["r0"], name="relu0"),
                 helper.make_node("MatMul", ["r0", "W1"], ["h1"], name="fc1"),
                 helper.make_node("BatchNormalization", ["h1", *bn], ["n1", "m1", "v1"], name="bn1", training_mode=1),
                 helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
                 helper.make_node("MatMul", ["r1", "W2"], ["logits"], name="fc2")]
        graph = helper.make_graph(nodes, "bn_shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
                                  [numpy_helper.from_array(v.astype(np.float32), k) for k, v in init.items()])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        bn_model = os.path.join(d, "bn_shared.onnx")
        onnx.save(m, bn_model)
        for extra in (["--plan-only"], ["--steps", "2"]):
            # 6 forward nodes (each BatchNormalization + Relu is one: importer/fuse_epilogue.cpp):
            # fc0, bn0, fc1 | bn1, fc2, loss.
            line = self.refuse([bn_model, "--gpus", "2", "--balance", "3,3", "--out", out, *extra],
                               "model state 'mean'", "stages 0 and 1")
            self.assertNotIn("\n", line)

    def test_plan_flag_refusals(self):
        out = os.path.join(self.dir, "planbad")
        self.refuse([self.model, "--gpus", "2", "--plan-only", "--device-spec", "TPUv9", "--out", out], "TPUv9")
        self.refuse([self.model, "--gpus", "2", "--plan-only", "--link", "carrier-pigeon", "--out", out],
                    "carrier-pigeon")
        self.refuse([self.model, "--gpus", "3", "--plan-only", "--device-spec", "h100,a100", "--out", out],
                    "--device-spec")
        spec = os.path.join(self.dir, "tiny.json")
        with open(spec, "w") as f:
            f.write('{"name": "tiny", "peak_tflops": 1, "mem_bandwidth_gbs": 10, "memory_gb": 0.00001}')
        line = self.refuse([self.model, "--gpus", "2", "--plan-only", "--device-spec", spec, "--batch-size", "4096",
                            "--out", out], "stage", "over")
        self.assertIn("would fit", line)
        with open(spec, "w") as f:
            f.write('{"name": "broken", "peak_tflops": "fast"}')
        self.refuse([self.model, "--gpus", "2", "--plan-only", "--device-spec", spec, "--out", out], "tiny.json")

    def test_profile_is_cached(self):
        out = os.path.join(self.dir, "prof")
        rc, so, se = run(self.model, "--gpus", 2, "--plan-only", "--profile", "--out", out)
        self.assertEqual(rc, 0, se)
        cache = os.path.join(out, "profile.json")
        self.assertTrue(os.path.exists(cache))
        before = read_bytes(cache)
        rc, so, se = run(self.model, "--gpus", 2, "--plan-only", "--profile", "--out", out)
        self.assertEqual(rc, 0, se)
        self.assertEqual(read_bytes(cache), before)
        # Every node of the training graph with its own time; the per-forward-node sums the
        # partitioner reads are those times added up.
        doc = json.loads(before)
        nodes = doc["nodes"]
        phases = {n["phase"] for n in nodes}
        self.assertTrue({"forward", "loss", "backward", "update"} <= phases, phases)
        self.assertTrue(all(n["s"] >= 0 for n in nodes))
        fwd = sum(n["s"] for n in nodes if n["phase"] in ("forward", "loss"))
        self.assertAlmostEqual(fwd, sum(doc["fwd_s"].values()), delta=1e-9 + 1e-6 * fwd)
        bwd = sum(n["s"] for n in nodes if n["phase"] == "backward" and "serves" in n)
        self.assertAlmostEqual(bwd, sum(doc["bwd_s"].values()), delta=1e-9 + 1e-6 * bwd)
        # Another training graph of the same model (here bf16 products) is profiled anew, not
        # served the float32 graph's times.
        rc, so, se = run(self.model, "--gpus", 2, "--plan-only", "--profile", "--precision", "bf16", "--out", out)
        self.assertEqual(rc, 0, se)
        doc16 = json.loads(read_bytes(cache))
        self.assertNotEqual(doc16["key"], doc["key"])
        self.assertIn("Cast", {n["op"] for n in doc16["nodes"]})

    # --- the whole training step against PyTorch ------------------------------------------
    def test_pytorch_oracle(self):
        o = os.path.join(self.dir, "oracle")
        subprocess.run([PY, os.path.join(ROOT, "tests", "python", "torch_mlp_oracle.py"), o], check=True,
                       capture_output=True)
        rc, so, se = run(os.path.join(o, "mlp.onnx"), "--data", os.path.join(o, "data"), "--steps", 20,
                         "--batch-size", 8, "--lr", 0.1, "--momentum", 0.9, "--weight-decay", 1e-4,
                         "--loss", "cross-entropy", "--no-shuffle", "--out", os.path.join(o, "run"), "--quiet")
        self.assertEqual(rc, 0, se)
        p = subprocess.run([PY, os.path.join(ROOT, "tests", "python", "check_training_oracle.py"), o,
                            os.path.join(o, "run", "mlp.trained.onnx"), os.path.join(o, "run", "metrics.csv")],
                           capture_output=True, text=True)
        sys.stdout.write(p.stdout)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


    def test_pytorch_oracle_new_ops(self):
        # GroupNorm (InstanceNormalization), GELU, Mish, Sin, Max, softsign, CumSum, Trilu as
        # PyTorch 1.13 exports them at opset 17: 20 steps equal PyTorch autograd's.
        o = os.path.join(self.dir, "oracle_newops")
        subprocess.run([PY, os.path.join(ROOT, "tests", "python", "torch_mlp_oracle.py"), o, "newops"], check=True,
                       capture_output=True)
        with open(os.path.join(o, "freeze.txt")) as fh:
            freeze = fh.read().strip()
        rc, so, se = run(os.path.join(o, "mlp.onnx"), "--data", os.path.join(o, "data"), "--steps", 20,
                         "--batch-size", 8, "--lr", 0.1, "--momentum", 0.9, "--weight-decay", 1e-4,
                         "--loss", "cross-entropy", "--no-shuffle", "--freeze", freeze,
                         "--out", os.path.join(o, "run"), "--quiet")
        self.assertEqual(rc, 0, se)
        p = subprocess.run([PY, os.path.join(ROOT, "tests", "python", "check_training_oracle.py"), o,
                            os.path.join(o, "run", "mlp.trained.onnx"), os.path.join(o, "run", "metrics.csv")],
                           capture_output=True, text=True)
        sys.stdout.write(p.stdout)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

if __name__ == "__main__":
    unittest.main()
