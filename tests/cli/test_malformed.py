"""Malformed-input battery: well over 150 bad models, data folders, flags, checkpoints
and device specs, generated here in a temporary folder. Each case runs onnx-pipetrain with a 10 s
timeout and asserts the documented exit code (2: bad input), no signal or core dump, and a one-line
error on stderr that names the file, node or flag. Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain
/usr/bin/python3 -m unittest tests/cli/test_malformed.py"""
import concurrent.futures
import gzip
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import BIN, mlp_model, run, write_data  # noqa: E402

F32, F64, I64, I32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32
TIMEOUT_S = 10


def vi(name, dtype=F32, dims=None):
    return helper.make_tensor_value_info(name, dtype, dims)


def raw_tensor(name, dtype, dims, data):
    """A tensor whose dims need not match its bytes (helper.make_tensor checks that)."""
    t = TensorProto()
    t.name, t.data_type = name, dtype
    t.dims.extend(dims)
    t.raw_data = data
    return t


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def rnd(*shape, dtype=np.float32):
    return (np.random.default_rng(sum(shape) + len(shape)).standard_normal(shape) * 0.3).astype(dtype)


def write_model(path, nodes, inputs=None, outputs=None, inits=(), opset=13, ir=None, extra_opsets=()):
    """Serialized without onnx.save or the checker: the bytes are as bad as the case wants."""
    g = helper.make_graph(nodes, "bad", inputs if inputs is not None else [vi("x", F32, ["batch", 8])],
                          outputs if outputs is not None else [vi("y", F32, [])], list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=opsets, producer_name="test_malformed")
    if ir is not None:
        m.ir_version = ir
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def fnv1a64(data, h=0xcbf29ce484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def split_checkpoint(raw):
    jb, tb = struct.unpack_from("<QQ", raw, 16)
    return raw[:40], json.loads(raw[40:40 + jb]), raw[40 + jb:40 + jb + tb]


def join_checkpoint(head, text, tensors):
    """A checkpoint whose header sizes and checksum are right for whatever JSON text it carries."""
    text = text.encode() if isinstance(text, str) else text
    return (head[:16] + struct.pack("<QQQ", len(text), len(tensors), fnv1a64(text + tensors)) + text + tensors)


def write_gzip_bomb(path, head, zeros):
    """A gzip file of `head` then `zeros` zero bytes, written a MiB at a time (a MiB of zeros
    deflates to about 1 KiB: 256 MiB make a 250 KiB file)."""
    chunk = bytes(1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(head)
        for _ in range(zeros >> 20):
            f.write(chunk)
        f.write(bytes(zeros & ((1 << 20) - 1)))
    return path


def npy_bytes(header_dict_text, payload=b"", magic=b"\x93NUMPY", version=b"\x01\x00"):
    h = header_dict_text.ljust(118) + "\n"
    return magic + version + len(h).to_bytes(2, "little") + h.encode() + payload


class MalformedInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-malformed-")
        cls.dir = cls.tmp.name
        cls.model = mlp_model(os.path.join(cls.dir, "mlp.onnx"))
        cls.data = write_data(os.path.join(cls.dir, "data"))
        cls.n = 0
        cls.cases = 0

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        print(f"\n{cls.cases} malformed inputs run", file=sys.stderr)

    def path(self, *parts):
        p = os.path.join(self.dir, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def out(self):
        MalformedInputTest.n += 1
        return os.path.join(self.dir, "runs", f"r{MalformedInputTest.n}")

    def run_cases(self, cases):
        """cases: (label, argv, needles, expected code). Run in parallel, each with a 10 s timeout."""
        def one(case):
            label, argv, needles, code = case
            try:
                p = subprocess.run([BIN, *[str(a) for a in argv]], capture_output=True, text=True,
                                   errors="replace", timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
                return case, p.returncode, p.stderr, False
            except subprocess.TimeoutExpired:
                return case, None, "", True
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(one, cases))
        MalformedInputTest.cases += len(results)
        for (label, argv, needles, code), rc, err, hung in results:
            with self.subTest(case=label):
                self.assertFalse(hung, f"{label}: no answer within {TIMEOUT_S} s: {argv}")
                if rc < 0:
                    self.fail(f"{label}: killed by signal {signal.Signals(-rc).name}: {argv}\n{err}")
                lines = [l for l in err.splitlines() if l.strip() and not l.startswith("notice:")]
                if isinstance(code, tuple):  # a mutated input may still be valid: then it must succeed
                    self.assertIn(rc, code, f"{label}: exit code {rc}, expected one of {code}: {argv}\nstderr: {err}")
                    if rc == 0:
                        continue
                    self.assertEqual(len(lines), 1, f"{label}: not a one-line message: {err!r}")
                    if rc == 3:  # the documented divergence, not a refusal of the input
                        self.assertIn("diverged", lines[0], f"{label}: {lines[0]}")
                        continue
                else:
                    self.assertEqual(rc, code, f"{label}: exit code {rc}, expected {code}: {argv}\nstderr: {err}")
                self.assertTrue(lines, f"{label}: no error message")
                self.assertIn("error", lines[0], f"{label}: {lines[0]}")
                self.assertNotIn("internal error", lines[0], f"{label}: {lines[0]}")
                for n in needles:
                    self.assertIn(n, lines[0], f"{label}: the message does not name {n!r}: {lines[0]}")
        return len(results)

    # --- models ---------------------------------------------------------------------------
    def test_models(self):
        cases = []
        good = open(self.model, "rb").read()

        def raw(name, data, *needles):
            p = self.path("models", name)
            with open(p, "wb") as f:
                f.write(data)
            cases.append((name, [p, "--plan-only", "--out", self.out()], (name, *needles), 2))

        raw("empty.onnx", b"")
        raw("one_byte.onnx", b"\x08")
        raw("garbage.onnx", bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)))
        raw("text.onnx", b"this is not a model\n" * 20)
        raw("half.onnx", good[:len(good) // 2])
        raw("minus_one.onnx", good[:-1])
        raw("zeros.onnx", b"\0" * 1000)
        raw("ff.onnx", b"\xff" * 1000)

        def m(name, nodes, *needles, code=2, extra=(), **kw):
            p = write_model(self.path("models", name), nodes, **kw)
            cases.append((name, [p, "--plan-only", "--out", self.out(), *extra], (name, *needles), code))

        W1, b1 = init("W1", rnd(16, 8)), init("b1", np.zeros(16, np.float32))
        fc = lambda **a: helper.make_node("Gemm", ["x", "W1", "b1"], ["y"], name="fc", transB=1, **a)
        m("ir0.onnx", [fc()], inits=[W1, b1], ir=0)
        m("ir99.onnx", [fc()], inits=[W1, b1], ir=99)
        m("opset0.onnx", [fc()], inits=[W1, b1], opset=0)
        m("opset99.onnx", [fc()], inits=[W1, b1], opset=99)
        m("unknown_op.onnx", [helper.make_node("Frobnicate", ["x"], ["y"], name="frob")], "Frobnicate")
        m("unknown_domain.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example")],
          extra_opsets=[("com.example", 1)])
        m("undeclared_domain.onnx", [helper.make_node("Relu", ["x"], ["y"], name="r", domain="ai.unknown")])
        m("no_nodes.onnx", [], inits=[W1, b1])
        w_nan = rnd(16, 8)
        w_nan[2, 3] = np.nan
        m("nan_weight.onnx", [fc()], "initializer 'W1' holds NaN (element 19 of 128)", inits=[init("W1", w_nan), b1])
        m("scalar_output.onnx", [fc(), helper.make_node("ReduceMean", ["y"], ["s"], name="mean", keepdims=0)],
          "output 's' is a scalar", inits=[W1, b1], outputs=[vi("s", F32, [])])
        m("no_outputs.onnx", [fc()], inits=[W1, b1], outputs=[])
        m("no_inputs.onnx", [helper.make_node("Relu", ["W1"], ["y"], name="r")], inits=[W1], inputs=[])
        m("output_not_produced.onnx", [fc()], "nowhere", inits=[W1, b1], outputs=[vi("nowhere", F32, None)])
        m("dangling.onnx", [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")], "ghost")
        m("dup_output.onnx", [helper.make_node("Relu", ["x"], ["t"], name="r1"),
                              helper.make_node("Relu", ["x"], ["t"], name="r2"),
                              helper.make_node("Relu", ["t"], ["y"], name="r3")], "'t'")
        m("dup_initializer.onnx", [fc()], "W1", inits=[W1, b1, init("W1", rnd(16, 8))])
        m("input_is_initializer_output.onnx", [helper.make_node("Relu", ["x"], ["W1"], name="rw"),
                                                fc()], "W1", inits=[W1, b1])
        m("cycle.onnx", [helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
                         helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
                         helper.make_node("Relu", ["a"], ["y"], name="relu_y")], "cycle")
        m("self_loop.onnx", [helper.make_node("Add", ["x", "y"], ["y"], name="self_add")], "self_add")
        # Wrong input counts per op.
        m("gemm_1_input.onnx", [helper.make_node("Gemm", ["x"], ["y"], name="g1")], "g1")
        m("gemm_4_inputs.onnx", [helper.make_node("Gemm", ["x", "W1", "b1", "b1"], ["y"], name="g4", transB=1)],
          "g4", inits=[W1, b1])
        m("relu_2_inputs.onnx", [helper.make_node("Relu", ["x", "x"], ["y"], name="r2")], "r2")
        m("relu_0_inputs.onnx", [helper.make_node("Relu", [], ["y"], name="r0")], "r0")
        m("add_1_input.onnx", [helper.make_node("Add", ["x"], ["y"], name="a1")], "a1")
        m("matmul_3_inputs.onnx", [helper.make_node("MatMul", ["x", "W", "W"], ["y"], name="mm3")], "mm3",
          inits=[init("W", rnd(8, 3))])
        m("relu_2_outputs.onnx", [helper.make_node("Relu", ["x"], ["y", "z"], name="r2o")], "r2o")
        m("softmax_0_outputs.onnx", [helper.make_node("Softmax", ["x"], [], name="sm0"),
                                     helper.make_node("Relu", ["x"], ["y"], name="r")], "sm0")
        # Shape mismatches.
        m("gemm_shape.onnx", [helper.make_node("Gemm", ["x", "W", "b1"], ["y"], name="fc_bad", transB=1)],
          "fc_bad", inits=[init("W", rnd(16, 7)), b1])
        m("gemm_bias_shape.onnx", [helper.make_node("Gemm", ["x", "W1", "b"], ["y"], name="fc_bias", transB=1)],
          "fc_bias", inits=[W1, init("b", np.zeros(5, np.float32))])
        m("matmul_shape.onnx", [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm_bad")], "mm_bad",
          inits=[init("W", rnd(7, 3))])
        m("add_broadcast.onnx", [helper.make_node("Add", ["x", "c"], ["y"], name="add_bad")], "add_bad",
          inits=[init("c", rnd(5))])
        m("concat_shape.onnx", [helper.make_node("Concat", ["x", "c"], ["y"], name="cat_bad", axis=1)], "cat_bad",
          inits=[init("c", rnd(3, 4, 2))])
        m("reshape_bad.onnx", [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs_bad")], "rs_bad",
          inits=[init("s", np.array([-1, 7], np.int64))])
        m("reshape_two_minus1.onnx", [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs_m1")], "rs_m1",
          inits=[init("s", np.array([-1, -1], np.int64))])
        m("reshape_float_shape.onnx", [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs_f")], "rs_f",
          inits=[init("s", np.array([-1, 8], np.float32))])
        m("matmul_scalar.onnx", [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm_s")], "mm_s",
          inits=[init("W", np.float32(2))])
        # Bad attributes.
        W = init("W", rnd(4, 1, 3, 3))
        img = [vi("x", F32, ["batch", 1, 8, 8])]
        conv = lambda nm, **a: [helper.make_node("Conv", ["x", "W"], ["c"], name=nm, **a),
                                helper.make_node("Flatten", ["c"], ["y"], name="flat")]
        m("conv_neg_stride.onnx", conv("conv_s", strides=[-1, 1]), "conv_s", inputs=img, inits=[W])
        m("conv_zero_stride.onnx", conv("conv_z", strides=[0, 1]), "conv_z", inputs=img, inits=[W])
        # Below opset 7, ONNX's shape inference and version converter run before our import: a
        # zero stride (SIGFPE), a rank-0 or rank-1 Gemm operand, LSTM X or ConvTranspose W, a Conv
        # W of another rank than X (SIGSEGV; declared, declared twice, or inferred from the nodes
        # before) must be refused before them. The models are the fuzz regressions'
        # (tests/fuzz/regressions/model/), as are the last three (a Cast of a constant to type 42, an
        # abort; a rank-1 Conv, a read past the end; a float16 scalar output as the loss, an abort).
        reg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "regressions", "model")
        for f, node in (("opset2_conv_stride0_sigfpe.onnx", "strides"), ("opset1_gemm_rank0_sigsegv.onnx", "rank 0"),
                        ("opset6_gemm_output_redeclares_input_segv.onnx", "rank 1"),
                        ("opset6_gemm_inferred_rank1_segv.onnx", "rank 1"),
                        ("opset2_lstm_x_rank1_segv.onnx", "rank 1"),
                        ("opset6_convtranspose_w_rank1_segv.onnx", "rank 1"),
                        ("opset6_conv_w_rank5_beside_x_rank4_segv.onnx", "the same rank"),
                        ("cast_const_to_type42_abort.onnx", "42"),
                        ("conv_rank1_heap_overflow_asan.onnx", "spatial dims"),
                        ("float16_scalar_loss_abort.onnx", "float16")):
            cases.append((f, [os.path.join(reg, f), "--plan-only", "--out", self.out()], (f, node), 2))
        m("conv_zero_kernel.onnx", conv("conv_k", kernel_shape=[0, 0]), "conv_k", inputs=img,
          inits=[init("W", np.zeros((4, 1, 0, 0), np.float32))])
        m("conv_kernel_attr_lies.onnx", conv("conv_kl", kernel_shape=[5, 5]), "conv_kl", inputs=img, inits=[W])
        m("conv_neg_pad.onnx", conv("conv_p", pads=[-2, -2, -2, -2]), "conv_p", inputs=img, inits=[W])
        m("conv_pads_len.onnx", conv("conv_pl", pads=[1, 1]), "conv_pl", inputs=img, inits=[W])
        m("conv_zero_dilation.onnx", conv("conv_d", dilations=[0, 0]), "conv_d", inputs=img, inits=[W])
        m("conv_group.onnx", conv("conv_g", group=3), "conv_g", inputs=img, inits=[W])
        m("conv_group0.onnx", conv("conv_g0", group=0), "conv_g0", inputs=img, inits=[W])
        m("conv_channels.onnx", conv("conv_c"), "conv_c", inputs=img, inits=[init("W", rnd(4, 2, 3, 3))])
        m("conv_kernel_too_big.onnx", conv("conv_big"), "conv_big", inputs=img, inits=[init("W", rnd(4, 1, 9, 9))])
        m("conv_1d_weight.onnx", conv("conv_1d"), "conv_1d", inputs=img, inits=[init("W", rnd(4, 9))])
        m("conv_bias_shape.onnx", [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv_b"),
                                   helper.make_node("Flatten", ["c"], ["y"], name="flat")], "conv_b",
          inputs=img, inits=[W, init("B", np.zeros(3, np.float32))])
        m("conv_auto_pad.onnx", conv("conv_ap", auto_pad="SIDEWAYS"), "conv_ap", inputs=img, inits=[W])
        m("conv_float_strides.onnx", conv("conv_fs", strides=[1.5, 1.5]), "conv_fs", inputs=img, inits=[W])
        pool = lambda op, nm, **a: [helper.make_node(op, ["x"], ["c"], name=nm, **a),
                                    helper.make_node("Flatten", ["c"], ["y"], name="flat")]
        m("maxpool_zero_kernel.onnx", pool("MaxPool", "mp_k", kernel_shape=[0, 0]), "mp_k", inputs=img)
        m("maxpool_neg_stride.onnx", pool("MaxPool", "mp_s", kernel_shape=[2, 2], strides=[-2, -2]), "mp_s",
          inputs=img)
        m("maxpool_no_kernel.onnx", pool("MaxPool", "mp_n"), "mp_n", inputs=img)
        m("maxpool_big_kernel.onnx", pool("MaxPool", "mp_b", kernel_shape=[9, 9]), "mp_b", inputs=img)
        m("avgpool_zero_stride.onnx", pool("AveragePool", "ap_s", kernel_shape=[2, 2], strides=[0, 0]), "ap_s",
          inputs=img)
        m("transpose_dup_perm.onnx", [helper.make_node("Transpose", ["x"], ["y"], name="tr_d", perm=[0, 0])],
          "tr_d")
        m("transpose_perm_range.onnx", [helper.make_node("Transpose", ["x"], ["y"], name="tr_r", perm=[0, 5])],
          "tr_r")
        m("transpose_perm_len.onnx", [helper.make_node("Transpose", ["x"], ["y"], name="tr_l", perm=[1, 0, 2])],
          "tr_l")
        m("softmax_axis.onnx", [helper.make_node("Softmax", ["x"], ["y"], name="sm_a", axis=5)], "sm_a")
        m("logsoftmax_axis.onnx", [helper.make_node("LogSoftmax", ["x"], ["y"], name="lsm_a", axis=-3)], "lsm_a")
        m("concat_axis.onnx", [helper.make_node("Concat", ["x", "x"], ["y"], name="cat_a", axis=4)], "cat_a")
        m("flatten_axis.onnx", [helper.make_node("Flatten", ["x"], ["y"], name="fl_a", axis=7)], "fl_a")
        m("reduce_axes.onnx", [helper.make_node("ReduceMean", ["x"], ["y"], name="rm_a", axes=[3])], "rm_a")
        m("reduce_dup_axes.onnx", [helper.make_node("ReduceSum", ["x", "ax"], ["y"], name="rs_d")], "rs_d",
          inits=[init("ax", np.array([1, 1], np.int64))])
        m("squeeze_axes.onnx", [helper.make_node("Squeeze", ["x", "ax"], ["y"], name="sq_a")], "sq_a",
          inits=[init("ax", np.array([1], np.int64))])
        m("unsqueeze_axes.onnx", [helper.make_node("Unsqueeze", ["x", "ax"], ["y"], name="usq_a")], "usq_a",
          inits=[init("ax", np.array([9], np.int64))])
        m("unsqueeze_dup.onnx", [helper.make_node("Unsqueeze", ["x", "ax"], ["y"], name="usq_d")], "usq_d",
          inits=[init("ax", np.array([1, 1], np.int64))])
        m("gather_axis.onnx", [helper.make_node("Gather", ["x", "i"], ["y"], name="ga_a", axis=3)], "ga_a",
          inits=[init("i", np.array([0], np.int64))])
        m("gather_float_index.onnx", [helper.make_node("MatMul", ["x", "W8"], ["h"], name="mm"),
                                      helper.make_node("Gather", ["h", "i"], ["y"], name="ga_f", axis=1)], "ga_f",
          inits=[init("W8", rnd(8, 8)), init("i", np.array([0.5], np.float32))])
        m("gather_index_range.onnx", [helper.make_node("MatMul", ["x", "W8"], ["h"], name="mm"),
                                      helper.make_node("Gather", ["h", "i"], ["y"], name="ga_r", axis=1)], "ga_r", "99",
          inits=[init("W8", rnd(8, 8)), init("i", np.array([0, 99], np.int64))])
        m("split_sizes.onnx", [helper.make_node("Split", ["x", "s"], ["y", "z"], name="sp_s", axis=1)], "sp_s",
          inits=[init("s", np.array([3, 3], np.int64))])
        m("slice_zero_step.onnx", [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="sl_z")],
          "sl_z", inits=[init("st", np.array([0], np.int64)), init("en", np.array([4], np.int64)),
                         init("ax", np.array([1], np.int64)), init("sp", np.array([0], np.int64))])
        m("slice_axes_range.onnx", [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"], name="sl_a")],
          "sl_a", inits=[init("st", np.array([0], np.int64)), init("en", np.array([4], np.int64)),
                         init("ax", np.array([6], np.int64))])
        m("cast_unknown_type.onnx", [helper.make_node("Cast", ["x"], ["y"], name="cast_u", to=999)], "cast_u")
        # Folded at import (a constant's Cast): reached cast_tensor's invariant and aborted (fuzz_model).
        m("cast_const_unknown_type.onnx", [
            helper.make_node("Constant", [], ["c"], name="const_c",
                             value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])),
            helper.make_node("Cast", ["c"], ["cc"], name="cast_c42", to=42),
            helper.make_node("Add", ["x", "cc"], ["y"], name="add_cc")], "cast_c42", "42")
        m("cast_const_float16.onnx", [
            helper.make_node("Constant", [], ["c"], name="const_c",
                             value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5])),
            helper.make_node("Cast", ["c"], ["cc"], name="cast_c16", to=TensorProto.FLOAT16),
            helper.make_node("Cast", ["cc"], ["cf"], name="cast_back", to=TensorProto.FLOAT),
            helper.make_node("Add", ["x", "cf"], ["y"], name="add_cf")], "cast_c16", "float16")
        m("pad_mode.onnx", [helper.make_node("Pad", ["x", "p"], ["y"], name="pad_m", mode="sideways")], "pad_m",
          inits=[init("p", np.array([0, 1, 0, 1], np.int64))])
        m("pad_len.onnx", [helper.make_node("Pad", ["x", "p"], ["y"], name="pad_l")], "pad_l",
          inits=[init("p", np.array([0, 1, 0], np.int64))])
        m("batchnorm_scale.onnx", [helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["c"],
                                                    name="bn_s"),
                                   helper.make_node("Flatten", ["c"], ["y"], name="flat")], "bn_s", inputs=img,
          inits=[init("s", np.ones(3, np.float32)), init("b", np.zeros(1, np.float32)),
                 init("mu", np.zeros(1, np.float32)), init("var", np.ones(1, np.float32))])
        m("layernorm_axis.onnx", [helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln_a", axis=4)],
          "ln_a", inits=[init("s", np.ones(8, np.float32))], opset=17)
        m("gemm_attr_type.onnx", [helper.make_node("Gemm", ["x", "W1", "b1"], ["y"], name="fc_t", transB="yes")],
          "fc_t", inits=[W1, b1])
        m("expand_shape.onnx", [helper.make_node("Expand", ["x", "s"], ["y"], name="ex_s")], "ex_s",
          inits=[init("s", np.array([3, 5], np.int64))])
        # Mixed element types and integer data where floats are needed.
        m("conv_f64_weight.onnx", conv("conv_64"), "conv_64", inputs=img, inits=[init("W", rnd(4, 1, 3, 3, dtype=np.float64))])
        m("add_f64.onnx", [helper.make_node("Add", ["x", "c"], ["y"], name="add_64")], "add_64",
          inits=[init("c", rnd(8, dtype=np.float64))])
        m("mul_f64.onnx", [helper.make_node("Mul", ["x", "c"], ["y"], name="mul_64")], "mul_64",
          inits=[init("c", rnd(8, dtype=np.float64))])
        m("concat_f64.onnx", [helper.make_node("Concat", ["x", "c"], ["y"], name="cat_64", axis=1)], "cat_64",
          inits=[init("c", rnd(1, 4, dtype=np.float64))])
        m("sub_int.onnx", [helper.make_node("Sub", ["x", "c"], ["y"], name="sub_i")], "sub_i",
          inits=[init("c", np.arange(8, dtype=np.int64))])
        m("gemm_int_weight.onnx", [helper.make_node("Gemm", ["x", "W", "b1"], ["y"], name="fc_i", transB=1)],
          "fc_i", inits=[init("W", np.ones((16, 8), np.int32)), b1])
        m("int_input_gemm.onnx", [fc()], "fc", inputs=[vi("x", I64, ["batch", 8])], inits=[W1, b1])
        m("int_input_relu.onnx", [helper.make_node("Relu", ["x"], ["r"], name="relu_i"),
                                  helper.make_node("Gemm", ["r", "W1", "b1"], ["y"], name="fc", transB=1)],
          inputs=[vi("x", I32, ["batch", 8])], inits=[W1, b1])
        m("string_input.onnx", [fc()], "'x'", inputs=[vi("x", TensorProto.STRING, ["batch", 8])], inits=[W1, b1])
        m("undefined_input_type.onnx", [fc()], "'x'", inputs=[vi("x", TensorProto.UNDEFINED, ["batch", 8])],
          inits=[W1, b1])
        m("batchnorm_f64.onnx", [helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["c"],
                                                  name="bn_64"),
                                 helper.make_node("Flatten", ["c"], ["y"], name="flat")], "bn_64", inputs=img,
          inits=[init("s", np.ones(1, np.float64)), init("b", np.zeros(1, np.float32)),
                 init("mu", np.zeros(1, np.float32)), init("var", np.ones(1, np.float32))])
        # Dimensions and initializer payloads.
        m("huge_input_dim.onnx", [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm_h")], "mm_h",
          inputs=[vi("x", F32, ["batch", 1 << 40])], inits=[init("W", rnd(8, 3))])
        m("negative_input_dim.onnx", [fc()], "'x'", inputs=[vi("x", F32, ["batch", -8])], inits=[W1, b1])
        m("zero_input_dim.onnx", [fc()], "fc", inputs=[vi("x", F32, ["batch", 0])], inits=[W1, b1])
        m("scalar_input.onnx", [fc()], "fc", inputs=[vi("x", F32, [])], inits=[W1, b1])
        m("scalar_data_input.onnx", [helper.make_node("Mul", ["x", "W1"], ["y"], name="scale")],
          "graph input 'x' is a scalar", inits=[W1], inputs=[vi("x", F32, [])])
        m("no_shape_input.onnx", [fc()], "shape", inputs=[vi("x", F32, None)], inits=[W1, b1])
        big = raw_tensor("Wbig", F32, [1 << 40, 8], b"")
        m("huge_initializer.onnx", [helper.make_node("MatMul", ["x", "Wbig"], ["y"], name="mm")], "Wbig",
          inits=[big])
        over = raw_tensor("Wov", F32, [1 << 62, 1 << 62, 16], b"")
        m("overflow_initializer.onnx", [helper.make_node("Add", ["x", "Wov"], ["y"], name="add")], "Wov",
          inits=[over])
        neg = raw_tensor("Wneg", F32, [-16, 8], b"")
        m("negative_initializer.onnx", [helper.make_node("MatMul", ["x", "Wneg"], ["y"], name="mm")], "Wneg",
          inits=[neg])
        short = raw_tensor("Wshort", F32, [8, 3], b"\0" * 40)
        m("short_raw_data.onnx", [helper.make_node("MatMul", ["x", "Wshort"], ["y"], name="mm")], "Wshort",
          inits=[short])
        fewer = raw_tensor("Wfew", F32, [8, 3], b"")
        fewer.ClearField("raw_data")
        fewer.float_data.extend([1.0] * 5)
        m("few_float_data.onnx", [helper.make_node("MatMul", ["x", "Wfew"], ["y"], name="mm")], "Wfew",
          inits=[fewer])
        undef = raw_tensor("Wu", TensorProto.UNDEFINED, [8, 3], b"\0" * 96)
        m("undefined_initializer.onnx", [helper.make_node("MatMul", ["x", "Wu"], ["y"], name="mm")], "Wu",
          inits=[undef])
        # External data that points outside the model's folder, beyond its file's end, or nowhere.
        ext = self.path("models", "ext", "w.bin")
        with open(ext, "wb") as f:
            f.write(rnd(8, 3).tobytes())

        def external(name, **kv):
            t = raw_tensor("Wx", F32, [8, 3], b"")
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            for k, v in kv.items():
                e = t.external_data.add()
                e.key, e.value = k, str(v)
            p = write_model(self.path("models", "ext", name),
                            [helper.make_node("MatMul", ["x", "Wx"], ["y"], name="mm")], inits=[t])
            cases.append((name, [p, "--plan-only", "--out", self.out()], (name,), 2))

        external("ext_absolute.onnx", location="/etc/passwd")
        external("ext_dotdot.onnx", location="../../w.bin")
        external("ext_missing.onnx", location="nothere.bin")
        external("ext_offset_beyond.onnx", location="w.bin", offset=1 << 40)
        external("ext_length_beyond.onnx", location="w.bin", length=1 << 40)
        external("ext_offset_negative.onnx", location="w.bin", offset=-8)
        # A negative length once read as "to the file's end": the 96 bytes fit [8, 3], and the model trained.
        external("ext_length_negative.onnx", location="w.bin", length=-5)
        external("ext_offset_text.onnx", location="w.bin", offset="twelve")
        external("ext_short_file.onnx", location="w.bin", offset=90)
        external("ext_no_location.onnx", offset=0)
        external("ext_directory.onnx", location=".")
        external("ext_empty_location.onnx", location="")
        os.makedirs(self.path("models", "ext", "fifo_dir", "x"), exist_ok=True)
        fifo = self.path("models", "ext", "w.fifo")
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
        external("ext_fifo.onnx", location="w.fifo")
        self.assertGreaterEqual(self.run_cases(cases), 120)

    def test_model_bit_flips(self):
        # "Whatever the bytes": 150 seeded mutations (1 to 3 flipped bits) of a valid model. A flip
        # may leave a valid model (a changed weight): it then plans (exit 0); otherwise exit 2 with
        # one line naming the file. Flips that once failed: a node name that is not UTF-8 (exit 1
        # from the JSON report), a newline in a tensor name or an op type (a two-line message).
        good = open(self.model, "rb").read()
        rng = np.random.default_rng(23)
        cases = []
        for k in range(150):
            b = bytearray(good)
            for _ in range(int(rng.integers(1, 4))):
                b[int(rng.integers(0, len(b)))] ^= 1 << int(rng.integers(0, 8))
            name = f"flip{k}.onnx"
            with open(self.path("flips", name), "wb") as f:
                f.write(b)
            cases.append((name, [self.path("flips", name), "--plan-only", "--out", self.out()], (name,), (0, 2)))
        for k, (name, bad) in enumerate((("node", "\xe6c2"), ("tensor", "W\n"), ("op", "Rel\n"))):
            p = self.path("flips", f"name_{name}.onnx")
            data = good.replace(b"fc2" if name == "node" else b"W2" if name == "tensor" else b"Relu",
                                bad.encode("latin-1"))
            with open(p, "wb") as f:
                f.write(data)
            cases.append((f"name_{name}", [p, "--plan-only", "--out", self.out()], (p, "not printable UTF-8"), 2))
        self.assertEqual(self.run_cases(cases), 153)

    def test_npy_header_bit_flips(self):
        # 100 seeded flips in the headers of x.npy and y.npy: exit 0 (still valid), 2 with one line
        # naming the file, or 3 (a flip in the first values made a NaN or a huge input diverge).
        # Flips that once failed: a newline echoed from a bad shape or dtype (a two-line message).
        rng = np.random.default_rng(5)
        cases = []
        for k in range(100):
            which = "x.npy" if k % 2 == 0 else "y.npy"
            d = self.path("npy_flips", f"f{k}", "x")[:-2]
            for f in ("x.npy", "y.npy"):
                b = bytearray(open(os.path.join(self.data, f), "rb").read())
                if f == which:
                    for _ in range(int(rng.integers(1, 4))):
                        b[int(rng.integers(0, 128))] ^= 1 << int(rng.integers(0, 8))
                with open(os.path.join(d, f), "wb") as out:
                    out.write(b)
            cases.append((f"npy flip {k} ({which})", [self.model, "--data", d, "--steps", 1, "--out", self.out()],
                          (which,), (0, 2, 3)))
        self.assertEqual(self.run_cases(cases), 100)

    # --- data folders -----------------------------------------------------------------------
    def test_data(self):
        cases = []
        rng = np.random.default_rng(7)
        x_good = rng.standard_normal((64, 8)).astype(np.float32)
        y_good = rng.integers(0, 3, 64).astype(np.int64)

        def folder(name, x=None, y=None, x_raw=None, y_raw=None, needles=("x.npy",)):
            d = self.path("data", name, "x")[:-2]
            for fname, arr, rawb in (("x.npy", x, x_raw), ("y.npy", y, y_raw)):
                p = os.path.join(d, fname)
                if rawb is not None:
                    with open(p, "wb") as f:
                        f.write(rawb)
                elif arr is not None:
                    np.save(p, arr)
            cases.append((name, [self.model, "--data", d, "--steps", 1, "--out", self.out()], needles, 2))

        xp = x_good.tobytes()
        folder("x_empty_file", x_raw=b"", y=y_good)
        folder("x_bad_magic", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (64, 8), }", xp,
                                              magic=b"\x93NUMPZ"), y=y_good)
        folder("x_bad_version", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (64, 8), }",
                                                xp, version=b"\x09\x00"), y=y_good)
        folder("x_header_not_dict", x_raw=npy_bytes("[1, 2, 3]", xp), y=y_good)
        folder("x_header_garbage", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': Fa", xp), y=y_good)
        folder("x_header_no_shape", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': False, }", xp), y=y_good)
        folder("x_header_no_descr", x_raw=npy_bytes("{'fortran_order': False, 'shape': (64, 8), }", xp), y=y_good)
        folder("x_fortran", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (64, 8), }", xp),
               y=y_good)
        folder("x_dtype_complex", x=x_good.astype(np.complex64), y=y_good)
        folder("x_dtype_object", x_raw=npy_bytes("{'descr': '|O', 'fortran_order': False, 'shape': (64, 8), }",
                                                 b"\0" * 4096), y=y_good)
        folder("x_dtype_unicode", x_raw=npy_bytes("{'descr': '<U4', 'fortran_order': False, 'shape': (64, 8), }",
                                                  b"\0" * 8192), y=y_good)
        folder("x_dtype_bogus", x_raw=npy_bytes("{'descr': '<q9', 'fortran_order': False, 'shape': (64, 8), }", xp),
               y=y_good)
        folder("x_payload_short", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (64, 8), }",
                                                  xp[:100]), y=y_good)
        folder("x_shape_huge", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': False, "
                                               "'shape': (4611686018427387904, 4), }", xp), y=y_good)
        folder("x_shape_negative", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-64, 8), }",
                                                   xp), y=y_good)
        folder("x_shape_text", x_raw=npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': ('a', 8), }",
                                               xp), y=y_good)
        folder("x_wrong_features", x=rng.standard_normal((64, 5)).astype(np.float32), y=y_good)
        folder("x_1d", x=rng.standard_normal(64).astype(np.float32), y=y_good)
        folder("x_zero_samples", x=np.zeros((0, 8), np.float32), y=np.zeros(0, np.int64))
        folder("x_float64", x=x_good.astype(np.float64), y=y_good)
        folder("x_header_len_lies", x_raw=b"\x93NUMPY\x01\x00" + (60000).to_bytes(2, "little") + b"{'descr'",
               y=y_good)
        x_nan = x_good.copy()
        x_nan[6, 6] = np.nan
        folder("x_nan", x=x_nan, y=y_good, needles=("x.npy", "sample 6", "NaN"))
        folder("y_missing", x=x_good, needles=("y.npy",))
        folder("x_missing", y=y_good, needles=("x.npy",))
        folder("y_count", x=x_good, y=y_good[:10], needles=("y.npy",))
        folder("y_out_of_range", x=x_good, y=np.full(64, 7, np.int64), needles=("y.npy",))
        folder("y_negative", x=x_good, y=np.full(64, -3, np.int64), needles=("y.npy",))
        folder("y_float", x=x_good, y=y_good.astype(np.float32), needles=("y.npy",))
        folder("y_2d", x=x_good, y=np.stack([y_good, y_good], 1), needles=("y.npy",))
        folder("y_empty_file", x=x_good, y_raw=b"", needles=("y.npy",))
        folder("y_truncated", x=x_good, y_raw=npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (64,), }",
                                                        b"\1" * 40), needles=("y.npy",))
        folder("y_bool", x=x_good, y=np.ones(64, bool), needles=("y.npy",))
        # IDX (MNIST-style) and CIFAR binaries.
        def idx(name, img_header, n_bytes, lab_header=struct.pack(">HBBI", 0, 8, 1, 64), gz=False,
                needle="train-images-idx3-ubyte"):
            d = self.path("data", name, "x")[:-2]
            op, ext = (gzip.open, ".gz") if gz else (open, "")
            with op(os.path.join(d, "train-images-idx3-ubyte" + ext), "wb") as f:
                f.write(img_header + b"\x07" * n_bytes)
            with op(os.path.join(d, "train-labels-idx1-ubyte" + ext), "wb") as f:
                f.write(lab_header + b"\x01" * 64)
            cases.append((name, [self.model, "--data", d, "--steps", 1, "--out", self.out()], (needle,), 2))
        idx("idx_bad_magic", struct.pack(">HBBIII", 7, 8, 3, 64, 2, 4), 512)
        idx("idx_bad_type", struct.pack(">HBBIII", 0, 0x42, 3, 64, 2, 4), 512)
        idx("idx_dims_lie", struct.pack(">HBBIII", 0, 8, 3, 64, 2000, 4000), 512)
        idx("idx_huge_count", struct.pack(">HBBIII", 0, 8, 3, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), 512)
        # 64 x 2^64 elements: the product wraps to 0 in 64 bits and used to pass as an empty data set.
        idx("idx_dims_wrap", struct.pack(">HBBIIIII", 0, 8, 5, 64, 65536, 65536, 65536, 65536), 0)
        idx("idx_zero_rank", struct.pack(">HBBI", 0, 8, 0, 64), 512)
        idx("idx_header_only", struct.pack(">HB", 0, 8), 0)
        idx("idx_label_count", struct.pack(">HBBIII", 0, 8, 3, 64, 2, 4), 512,
            lab_header=struct.pack(">HBBI", 0, 8, 1, 63), needle="train-labels-idx1-ubyte")
        idx("idx_trailing", struct.pack(">HBBIII", 0, 8, 3, 64, 2, 4), 600)
        idx("idx_empty_images", b"", 0)
        d = self.path("data", "idx_gz_garbage", "train-images-idx3-ubyte.gz")
        with open(d, "wb") as f:
            f.write(b"\x1f\x8b\x08\x00garbage garbage garbage")
        with gzip.open(self.path("data", "idx_gz_garbage", "train-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">HBBI", 0, 8, 1, 64) + b"\x01" * 64)
        cases.append(("idx_gz_garbage", [self.model, "--data", os.path.dirname(d), "--steps", 1, "--out", self.out()],
                      ("train-images-idx3-ubyte.gz",), 2))
        # gzip bombs: 64 MiB of zeros after a header that promises 512 bytes; a header that promises
        # 2^48 bytes (more than any machine's memory) in a 1 KiB file.
        def gz_idx(name, img_header, zeros, needle):
            d = self.path("data", name, "x")[:-2]
            write_gzip_bomb(os.path.join(d, "train-images-idx3-ubyte.gz"), img_header, zeros)
            with gzip.open(os.path.join(d, "train-labels-idx1-ubyte.gz"), "wb") as f:
                f.write(struct.pack(">HBBI", 0, 8, 1, 64) + b"\x01" * 64)
            cases.append((name, [self.model, "--data", d, "--steps", 1, "--out", self.out()],
                          ("train-images-idx3-ubyte.gz", needle), 2))
        gz_idx("idx_gz_bomb", struct.pack(">HBBIII", 0, 8, 3, 64, 2, 4), 64 << 20,
               "inflates past the 528 bytes its IDX header promises")
        gz_idx("idx_gz_header_past_memory", struct.pack(">HBBIII", 0, 8, 3, 65536, 65536, 65536), 1 << 20,
               "promise 281474976710656 bytes of data, more than the")
        # 64 MiB promised by ~100 bytes of gzip (deflate inflates at most 1032:1): refused before the
        # 64 MiB buffer is reserved (fuzz_data: a 109-byte file made it reserve 6.9 GB).
        gz_idx("idx_gz_promise_past_deflate", struct.pack(">HBBIII", 0, 8, 3, 64, 1024, 1024), 1 << 10,
               "bytes of gzip data can inflate to")
        cifar = self.path("data", "cifar-10-batches-bin", "data_batch_1.bin")
        with open(cifar, "wb") as f:
            f.write(b"\x01" * 3000)
        cases.append(("cifar_short", [self.model, "--data", os.path.dirname(cifar), "--steps", 1, "--out", self.out()],
                      ("data_batch_1.bin",), 2))
        cifar0 = self.path("data", "cifar-10-empty", "data_batch_1.bin")
        open(cifar0, "wb").close()
        cases.append(("cifar_empty", [self.model, "--data", os.path.dirname(cifar0), "--steps", 1, "--out", self.out()],
                      ("data_batch_1.bin",), 2))
        cifar_lab = self.path("data", "cifar-10-labels", "data_batch_1.bin")
        recs = np.concatenate([np.full((4, 1), 200), np.zeros((4, 3072))], axis=1).astype(np.uint8)
        recs.tofile(cifar_lab)
        cases.append(("cifar_label_range", [self.model, "--data", os.path.dirname(cifar_lab), "--steps", 1,
                                            "--out", self.out()], ("data_batch_1.bin",), 2))
        cases.append(("val_data_missing", [self.model, "--data", self.data, "--val-data", self.path("nowhere"),
                                           "--steps", 1, "--out", self.out()], ("nowhere",), 2))
        self.assertGreaterEqual(self.run_cases(cases), 46)

    def test_gzip_bomb_stays_small(self):
        """A 256 KiB gzip file that inflates to 256 MiB behind a header promising 512 bytes: refused
        after inflating 529 bytes, so the process's peak resident set stays far below 256 MiB above
        that of the same run refusing a small corrupt file (before the bound it read the whole
        256 MiB, then refused the trailing bytes). Against a baseline run, not an absolute figure:
        a build with the CUDA backend maps its libraries at start (about 240 MiB resident here)."""
        def peak(d):
            p = subprocess.Popen([BIN, self.model, "--data", d, "--steps", "1", "--out", self.out()],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            with p.stderr:
                err = p.stderr.read().decode(errors="replace")
            _, status, usage = os.wait4(p.pid, 0)
            return os.waitstatus_to_exitcode(status), err, usage.ru_maxrss  # KiB

        header = struct.pack(">HBBIII", 0, 8, 3, 64, 2, 4)
        labels = struct.pack(">HBBI", 0, 8, 1, 64) + b"\x01" * 64
        d = self.path("data", "idx_gz_bomb_rss", "x")[:-2]
        write_gzip_bomb(os.path.join(d, "train-images-idx3-ubyte.gz"), header, 256 << 20)
        with gzip.open(os.path.join(d, "train-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(labels)
        base = self.path("data", "idx_gz_small_rss", "x")[:-2]
        with gzip.open(os.path.join(base, "train-images-idx3-ubyte.gz"), "wb") as f:
            f.write(header + b"\0" * 600)  # 72 bytes past the data: refused the same way, nothing to inflate
        with gzip.open(os.path.join(base, "train-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(labels)
        rc0, err0, rss0 = peak(base)
        self.assertEqual(rc0, 2, err0)
        self.assertIn("train-images-idx3-ubyte.gz: the gzip data inflates past the 528 bytes", err0)
        rc, err, rss = peak(d)
        self.assertEqual(rc, 2, err)
        self.assertIn("train-images-idx3-ubyte.gz: the gzip data inflates past the 528 bytes", err)
        # 128 MiB of room (a sanitizer build's own growth); the unbounded reader needed 256 MiB more
        self.assertLess(rss - rss0, 128 << 10, f"peak resident set {rss} KiB against {rss0} KiB")

    # --- flags ------------------------------------------------------------------------------
    def test_flags(self):
        cases = []
        base = [self.model, "--data", self.data, "--steps", 1]

        def bad(flag, value, *extra, needle=None):
            cases.append((f"{flag} {value}", [*base, "--out", self.out(), *extra, flag, value],
                          (needle or flag,), 2))

        for flag in ("--lr", "--momentum", "--weight-decay", "--dampening", "--beta1", "--beta2", "--eps",
                     "--clip-grad-norm", "--lr-gamma", "--lr-power", "--lr-min", "--val-split", "--mean", "--std"):
            for value in ("nan", "inf", "-inf", "abc"):
                bad(flag, value)
        for flag in ("--lr", "--momentum", "--weight-decay", "--dampening", "--beta1", "--beta2", "--eps",
                     "--clip-grad-norm", "--val-split"):
            bad(flag, "-1")
        for flag in ("--momentum", "--beta1", "--beta2", "--dampening", "--val-split"):
            bad(flag, "1e30")
        # Counts that parse but no machine could hold: named, not an overflowed
        # memory estimate or an allocation failure.
        bad("--gpus", "100000")
        bad("--gpus", "2147483647")
        bad("--gpus", "64")  # more stages than the test model has forward nodes
        bad("--batch-size", "100000000000")
        bad("--batch-size", "9223372036854775807")
        bad("--lr", "0")
        bad("--eps", "0")
        bad("--momentum", "1")
        bad("--val-split", "1")
        bad("--std", "0")
        bad("--std", "1,2")
        bad("--mean", "1,2,3")
        for flag in ("--batch-size", "--steps", "--epochs", "--micro-batches", "--checkpoint-every",
                     "--keep-checkpoints", "--eval-every", "--gpus", "--lr-decay-every", "--ranks-per-node",
                     "--warmup-steps", "--log-every", "--seed", "--ignore-index"):
            for value in ("-1", "abc", "1.5", "99999999999999999999999"):
                if flag in ("--warmup-steps", "--log-every", "--ignore-index") and value == "-1":
                    continue
                extra = ["--epochs", 1] if flag == "--steps" else []
                if flag == "--epochs":
                    cases.append((f"--epochs {value}", [self.model, "--data", self.data, "--out", self.out(),
                                                        "--epochs", value], ("--epochs",), 2))
                    continue
                bad(flag, value)
        for flag in ("--batch-size", "--steps", "--micro-batches", "--checkpoint-every", "--keep-checkpoints",
                     "--eval-every", "--gpus", "--lr-decay-every", "--ranks-per-node"):
            bad(flag, "0")
        # Parses and fits int32, but the 64 samples are fewer than a mini-batch (the allocation that no
        # memory holds is test_memory's out-of-memory case).
        bad("--batch-size", "1000000000", needle="fewer than one mini-batch")
        cases.append(("--epochs overflow", [self.model, "--data", self.data, "--out", self.out(), "--epochs",
                                            "9223372036854775807"], ("--epochs", "overflow"), 2))
        for flag, value in (("--loss", "hinge"), ("--device", "tpu"), ("--optimizer", "lion"),
                            ("--schedule", "zigzag"), ("--weights", "fresh"), ("--spectrain-staleness", "none"),
                            ("--lr-schedule", "sawtooth"), ("--link", "carrier-pigeon"),
                            ("--device-spec", "TPUv9"), ("--loss", ""), ("--optimizer", "")):
            bad(flag, value, needle=value or flag)
        for label, extra, needle in (
                ("steps and epochs", ["--epochs", 2], "--epochs"),
                ("overwrite and resume", ["--overwrite", "--resume"], "--overwrite"),
                ("nesterov without momentum", ["--optimizer", "sgd", "--nesterov", "--momentum", "0"], "--nesterov"),
                ("momentum for adam", ["--optimizer", "adam", "--momentum", "0.5"], "--momentum"),
                ("beta1 for sgd", ["--optimizer", "sgd", "--beta1", "0.5"], "--beta1"),
                ("micro-batches on 1f1b", ["--micro-batches", "2"], "--micro-batches"),
                ("val-split and val-data", ["--val-split", "0.1", "--val-data", self.data], "--val"),
                ("freeze unknown", ["--freeze", "nope*"], "nope*"),
                ("trainable unknown", ["--trainable", "nope"], "nope"),
                ("split-at unknown", ["--gpus", "2", "--split-at", "nope"], "nope"),
                ("balance too short", ["--gpus", "2", "--balance", "1"], "balance"),
                ("balance zero", ["--gpus", "2", "--balance", "0,3"], "balance"),
                ("balance negative", ["--gpus", "2", "--balance", "-1,4"], "balance"),
                ("gpipe indivisible", ["--schedule", "gpipe", "--micro-batches", "3", "--batch-size", "8"], "multiple"),
                ("unknown flag", ["--no-such-flag"], "--no-such-flag"),
                ):
            cases.append((label, [*base, "--out", self.out(), *extra], (needle,), 2))
        cases.append(("data nowhere", [self.model, "--data", self.path("nowhere"), "--steps", 1, "--out", self.out()],
                      ("--data", "nowhere"), 2))
        self.assertGreaterEqual(self.run_cases(cases), 150)

    # --- checkpoints ------------------------------------------------------------------------
    def test_checkpoints(self):
        src = os.path.join(self.dir, "ckpt_src")
        rc, _, err = run(self.model, "--data", self.data, "--steps", 2, "--checkpoint-every", 1, "--out", src,
                         "--quiet")
        self.assertEqual(rc, 0, err)
        good_path = os.path.join(src, "checkpoints", "step-1.ckpt")
        good = open(good_path, "rb").read()
        head, j, tensors = split_checkpoint(good)
        cases = []

        def ck(name, data, *needles):
            p = self.path("ckpt", name + ".ckpt")
            with open(p, "wb") as f:
                f.write(data)
            cases.append((name, [self.model, "--data", self.data, "--steps", 2, "--out", self.out(),
                                 f"--resume={p}"], (name + ".ckpt", *needles), 2))

        def lie(name, edit, *needles):
            jj = json.loads(json.dumps(j))
            edit(jj)
            ck(name, join_checkpoint(head, json.dumps(jj), tensors), *needles)

        def tensor(jj, name):
            return next(t for t in jj["tensors"] if t["name"] == name)

        ck("empty", b"")
        ck("truncated_header", good[:20])
        ck("truncated_json", good[:60])
        ck("truncated_tensors", good[:-7])
        ck("trailing", good + b"\0")
        for at in (50, len(good) // 2, len(good) - 3):
            flipped = bytearray(good)
            flipped[at] ^= 0x10
            ck(f"bitflip_{at}", bytes(flipped), "checksum")
        ck("bad_magic", b"XTCKPT\r\n" + good[8:], "magic")
        ck("version_2", good[:8] + struct.pack("<I", 2) + good[12:], "version 2")
        ck("sizes_lie", good[:16] + struct.pack("<QQ", 1 << 62, 1 << 62) + good[32:])
        ck("json_not_json", join_checkpoint(head, "{not json", tensors), "JSON")
        ck("json_array", join_checkpoint(head, "[1, 2, 3]", tensors), "JSON")
        ck("json_empty", join_checkpoint(head, "", tensors), "JSON")
        lie("offset_beyond", lambda jj: tensor(jj, "W1").update(offset=len(tensors) + 4), "W1")
        lie("offset_huge", lambda jj: tensor(jj, "W1").update(offset=1 << 63), "W1")
        lie("offset_negative", lambda jj: tensor(jj, "W1").update(offset=-4), "W1")
        lie("bytes_lie", lambda jj: tensor(jj, "W1").update(bytes=4), "W1")
        lie("dims_lie", lambda jj: tensor(jj, "W1").update(dims=[16, 9]), "W1")
        lie("dims_minus1", lambda jj: tensor(jj, "W1").update(dims=[-1, 64]), "W1")
        lie("dims_huge", lambda jj: tensor(jj, "W1").update(dims=[1 << 40, 1 << 40]), "W1")
        lie("dims_overflow", lambda jj: tensor(jj, "W1").update(dims=[1 << 62, 1 << 62, 1 << 62]), "W1")
        lie("dims_text", lambda jj: tensor(jj, "W1").update(dims="16x8"), "JSON")
        lie("dims_transposed", lambda jj: tensor(jj, "W1").update(dims=[8, 16]), "W1")
        lie("dtype_unknown", lambda jj: tensor(jj, "W1").update(dtype_code=99), "W1")
        lie("dtype_int32", lambda jj: tensor(jj, "W1").update(dtype_code=6, dtype="int32"), "W1")
        lie("tensor_missing", lambda jj: jj.update(tensors=[t for t in jj["tensors"] if t["name"] != "W1"]), "W1")
        lie("tensor_unknown", lambda jj: tensor(jj, "W1").update(name="W9"), "W1")
        lie("tensors_missing", lambda jj: jj.pop("tensors"), "tensors")
        lie("meta_missing", lambda jj: jj.pop("meta"), "meta")
        lie("model_hash", lambda jj: jj["meta"].update(model_hash="0" * 16), "model")
        lie("batch_size", lambda jj: jj["meta"].update(batch_size=7), "batch")
        lie("batch_size_text", lambda jj: jj["meta"].update(batch_size="many"), "JSON")
        lie("order_out_of_range", lambda jj: jj.update(order=[10 ** 6] * len(jj["order"])), "order")
        lie("order_negative", lambda jj: jj.update(order=[-1] * len(jj["order"])), "order")
        lie("order_short", lambda jj: jj.update(order=jj["order"][:3]), "order")
        lie("order_duplicates", lambda jj: jj.update(order=[0] * len(jj["order"])), "order")
        lie("position_beyond", lambda jj: jj.update(position=10 ** 9), "position")
        lie("position_negative", lambda jj: jj.update(position=-5), "position")
        lie("step_negative", lambda jj: jj.update(step=-3), "step")
        lie("step_beyond", lambda jj: jj.update(step=10 ** 12), "step")
        lie("epoch_negative", lambda jj: jj.update(epoch=-1), "epoch")
        lie("rng_garbage", lambda jj: jj.update(rng="not a generator state"), "rng")
        lie("loss_text", lambda jj: jj.update(last_loss="low"), "JSON")
        lie("metrics_numbers", lambda jj: jj.update(metrics_tail={"rows": 2, "hash": "0" * 16, "last": 3}), "JSON")
        lie("metrics_hash", lambda jj: jj.update(metrics_tail={"rows": 2, "hash": "zz", "last": ""}), "metrics tail")
        lie("metrics_rows_negative", lambda jj: jj.update(metrics_tail={"rows": -1, "hash": "0" * 16, "last": ""}),
            "metrics tail")
        lie("metrics_rows_lie", lambda jj: jj.update(metrics_tail={"rows": 7, "hash": "0" * 16, "last": ""}),
            "metrics tail")
        # Checkpoints from before the metrics tail carry the rows themselves.
        lie("legacy_metrics_numbers", lambda jj: (jj.pop("metrics_tail"), jj.update(metrics=[1, 2])), "JSON")
        # A folder whose every checkpoint is damaged: refused, and the files stay (nothing deleted).
        dmg = self.path("ckpt_dir", "run", "checkpoints", "step-1.ckpt")
        for k in (1, 2):
            with open(os.path.join(os.path.dirname(dmg), f"step-{k}.ckpt"), "wb") as f:
                f.write(good[:-k])
        run_dir = os.path.dirname(os.path.dirname(dmg))
        cases.append(("all_damaged", [self.model, "--data", self.data, "--steps", 2, "--out", run_dir, "--resume"],
                      ("no intact checkpoint",), 2))
        self.assertGreaterEqual(self.run_cases(cases), 45)
        self.assertEqual(sorted(os.listdir(os.path.dirname(dmg))), ["step-1.ckpt", "step-2.ckpt"])
        self.assertEqual(open(good_path, "rb").read(), good)

    # --- device specs -----------------------------------------------------------------------
    def test_device_specs(self):
        cases = []

        def spec(name, text, *needles):
            p = self.path("specs", name + ".json")
            with open(p, "w") as f:
                f.write(text)
            cases.append((name, [self.model, "--gpus", 2, "--plan-only", "--device-spec", p, "--out", self.out()],
                          (name + ".json", *needles), 2))
        ok = {"name": "dev", "peak_tflops": 10, "mem_bandwidth_gbs": 100, "memory_gb": 4}
        spec("empty", "")
        spec("not_json", "peak_tflops = 10")
        spec("array", "[1, 2]")
        spec("string", '"H100"')
        spec("null", "null")
        for field in ("peak_tflops", "mem_bandwidth_gbs", "memory_gb"):
            spec(f"missing_{field}", json.dumps({k: v for k, v in ok.items() if k != field}), field)
            spec(f"string_{field}", json.dumps({**ok, field: "fast"}), field)
            spec(f"negative_{field}", json.dumps({**ok, field: -1}), field)
            spec(f"zero_{field}", json.dumps({**ok, field: 0}), field)
            spec(f"null_{field}", json.dumps({**ok, field: None}), field)
            spec(f"huge_{field}", json.dumps({**ok, field: 1e308}).replace("1e+308", "1e999"), field)
        spec("name_number", json.dumps({**ok, "name": 5}), "name")
        spec("kind_bogus", json.dumps({**ok, "kind": "fpga"}), "kind")
        spec("overhead_negative", json.dumps({**ok, "kernel_overhead_us": -3}), "kernel_overhead_us")
        spec("nan_literal", '{"name": "d", "peak_tflops": NaN, "mem_bandwidth_gbs": 100, "memory_gb": 4}')
        spec("truncated", json.dumps(ok)[:30])
        self.assertGreaterEqual(self.run_cases(cases), 28)


class FullDiskTest(unittest.TestCase):
    """A full disk (a small tmpfs; needs root and mount, skipped otherwise) while the run writes its
    reports, a checkpoint, or the trained model: exit 2 with one line naming the file and the
    reason, no temporary file left, the newest checkpoint intact."""

    def test_full_disk(self):
        model = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "models/fashion_lenet5_bn.onnx")
        with tempfile.TemporaryDirectory(prefix="pipetrain-disk-") as d:
            mnt = os.path.join(d, "m")
            os.makedirs(mnt)
            for size, writing in (("20k", "partition."), ("200k", "fashion_lenet5_bn.trained.onnx"),
                                  ("800k", "checkpoints/step-")):
                if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt],
                                  capture_output=True).returncode != 0:
                    self.skipTest("cannot mount a tmpfs here (not root, or no mount permission)")
                try:
                    out = os.path.join(mnt, "run")
                    extra = ["--checkpoint-every", "1", "--keep-checkpoints", "1"] if "checkpoints" in writing else []
                    # (--no-calibrate: a calibration cache of another build would add a notice line)
                    p = subprocess.run([BIN, model, "--steps", "3", "--out", out, "--no-calibrate", *extra], capture_output=True,
                                       text=True, timeout=120)
                    self.assertEqual(p.returncode, 2, f"{size}: {p.stdout}\n{p.stderr}")
                    lines = p.stderr.strip().splitlines()
                    self.assertEqual(len(lines), 1, p.stderr)
                    self.assertIn(os.path.join(out, writing), lines[0])
                    self.assertIn("No space left on device", lines[0])
                    left = [os.path.join(r, f) for r, _, fs in os.walk(mnt) for f in fs if ".tmp" in f]
                    self.assertEqual(left, [], f"{size}: temporary files left")
                    if extra:  # the checkpoint before the one that did not fit stands, whole
                        self.assertEqual(sorted(os.listdir(os.path.join(out, "checkpoints"))), ["step-1.ckpt"])
                        r = subprocess.run([BIN, model, "--steps", "1", "--out", out, "--resume", "--plan-only"],
                                           capture_output=True, text=True, timeout=120)
                        self.assertNotIn("checksum", r.stderr)
                finally:
                    subprocess.run(["umount", mnt], capture_output=True)


if __name__ == "__main__":
    unittest.main()
