#!/usr/bin/python3
# Test inputs for the importer: a small MLP whose weights live in an external file (ext/), and
# malformed or malicious models (bad/) that the importer must refuse with exit code 2.
# Deterministic and idempotent. Run: /usr/bin/python3 THIS OUTDIR
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT


def mlp_model():
    """x [batch,8] -> Gemm(W1 [16,8], transB) -> Relu -> Gemm(W2 [3,16], transB) -> y [batch,3]."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("W1", rng.standard_normal((16, 8)) * 0.3), ("b1", rng.standard_normal(16) * 0.1),
        ("W2", rng.standard_normal((3, 16)) * 0.3), ("b2", rng.standard_normal(3) * 0.1))]
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["r"], name="relu1"),
             helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], name="fc2", transB=1)]
    graph = helper.make_graph(nodes, "ext_mlp",
                              [helper.make_tensor_value_info("x", F32, ["batch", 8])],
                              [helper.make_tensor_value_info("y", F32, ["batch", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             producer_name="onnx-pipetrain-tests")


def forward(model, x):
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    h = np.maximum(x @ w["W1"].T + w["b1"], 0)
    return (h @ w["W2"].T + w["b2"]).astype(np.float32)


def simple_model(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "bad", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="onnx-pipetrain-tests")


def write_raw(path, proto):
    """Serialize without onnx.save (no checker, no external-data rewriting)."""
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def relocated(ext_model, location):
    """Copy of the external-data model with every tensor's location replaced."""
    m = onnx.ModelProto()
    m.CopyFrom(ext_model)
    for t in m.graph.initializer:
        for kv in t.external_data:
            if kv.key == "location":
                kv.value = location
    return m


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTDIR")
    out = sys.argv[1]
    ext, bad = os.path.join(out, "ext"), os.path.join(out, "bad")
    os.makedirs(ext, exist_ok=True)
    os.makedirs(bad, exist_ok=True)
    written = []

    # --- the good external-data model ---------------------------------------------------------
    model = mlp_model()
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(12).standard_normal((4, 8)).astype(np.float32)
    np.save(os.path.join(ext, "x.npy"), x)
    np.save(os.path.join(ext, "y_expected.npy"), forward(model, x))
    for stale in ("weights.bin",):   # onnx appends to an existing data file: start fresh
        if os.path.exists(os.path.join(ext, stale)):
            os.remove(os.path.join(ext, stale))
    onnx.save_model(model, os.path.join(ext, "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    onnx.checker.check_model(os.path.join(ext, "model.onnx"))
    reloaded = onnx.load(os.path.join(ext, "model.onnx"))
    assert np.array_equal(forward(reloaded, x), np.load(os.path.join(ext, "y_expected.npy")))
    written += ["ext/model.onnx", "ext/weights.bin", "ext/x.npy", "ext/y_expected.npy"]

    ext_model = onnx.load(os.path.join(ext, "model.onnx"), load_external_data=False)
    data_size = os.path.getsize(os.path.join(ext, "weights.bin"))

    # --- malicious external-data locations -----------------------------------------------------
    write_raw(os.path.join(bad, "abs.onnx"), relocated(ext_model, "/etc/passwd"))
    write_raw(os.path.join(bad, "dotdot.onnx"), relocated(ext_model, "../ext/weights.bin"))
    link = os.path.join(bad, "link.bin")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink("../ext/weights.bin", link)   # a real file with valid data, but outside bad/
    write_raw(os.path.join(bad, "symlink.onnx"), relocated(ext_model, "link.bin"))
    with open(os.path.join(ext, "weights.bin"), "rb") as f:
        short = f.read(data_size // 2)         # later tensors' offset+length run past the end
    with open(os.path.join(bad, "weights_short.bin"), "wb") as f:
        f.write(short)
    write_raw(os.path.join(bad, "overrun.onnx"), relocated(ext_model, "weights_short.bin"))
    written += ["bad/abs.onnx (location /etc/passwd)",
                "bad/dotdot.onnx (location ../ext/weights.bin)",
                "bad/symlink.onnx (location link.bin; bad/link.bin -> ../ext/weights.bin)",
                f"bad/overrun.onnx (location weights_short.bin: {len(short)} of {data_size} bytes)"]

    # --- malformed graphs ---------------------------------------------------------------------
    junk = np.random.default_rng(13).bytes(256)
    junk = b"\xff\xff\xff\xff" + junk           # invalid protobuf tag: never parses
    with open(os.path.join(bad, "not_onnx.onnx"), "wb") as f:
        f.write(junk)
    try:
        onnx.load_model_from_string(junk)
        parsed = True
    except Exception:   # google.protobuf.message.DecodeError
        parsed = False
    assert not parsed, "not_onnx.onnx parsed as a ModelProto"

    xi = [helper.make_tensor_value_info("x", F32, ["batch", 4])]
    yo = [helper.make_tensor_value_info("y", F32, ["batch", 4])]
    write_raw(os.path.join(bad, "cycle.onnx"), simple_model(
        [helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),      # a needs b ...
         helper.make_node("Relu", ["a"], ["b"], name="relu_b"),         # ... and b needs a
         helper.make_node("Identity", ["b"], ["y"], name="out")], xi, yo))
    write_raw(os.path.join(bad, "dangling.onnx"), simple_model(
        [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")], xi, yo))
    write_raw(os.path.join(bad, "dup_output.onnx"), simple_model(
        [helper.make_node("Relu", ["x"], ["t"], name="relu_t"),
         helper.make_node("Sigmoid", ["x"], ["t"], name="sigmoid_t"),   # same output name
         helper.make_node("Identity", ["t"], ["y"], name="out")], xi, yo))
    write_raw(os.path.join(bad, "checker_fail.onnx"), simple_model(
        [helper.make_node("Gemm", ["x"], ["y"], name="gemm_one_input")], xi, yo))  # needs A, B
    written += ["bad/not_onnx.onnx (random bytes)", "bad/cycle.onnx (add_a <-> relu_b)",
                "bad/dangling.onnx (input 'ghost' produced by nothing)",
                "bad/dup_output.onnx (two nodes output 't')",
                "bad/checker_fail.onnx (Gemm with one input)"]
    for name in ("cycle", "dangling", "dup_output", "checker_fail"):   # all must be rejected
        try:
            onnx.checker.check_model(os.path.join(bad, name + ".onnx"))
            raise AssertionError(f"onnx.checker accepted bad/{name}.onnx")
        except onnx.checker.ValidationError:
            pass

    # --- a valid model with unsupported ops (Hardmax, Det) ------------------------------------
    w = numpy_helper.from_array(
        np.random.default_rng(14).standard_normal((4, 4)).astype(np.float32), "w")
    unsupported = simple_model(
        [helper.make_node("Mul", ["x", "w"], ["m"], name="scale"),
         helper.make_node("Hardmax", ["m"], ["h"], name="hardmax", axis=-1),
         helper.make_node("Det", ["h"], ["y"], name="det")],
        [helper.make_tensor_value_info("x", F32, ["batch", 4, 4])],
        [helper.make_tensor_value_info("y", F32, ["batch"])], [w])
    onnx.checker.check_model(unsupported, full_check=True)
    onnx.save(unsupported, os.path.join(bad, "unsupported_op.onnx"))
    written.append("bad/unsupported_op.onnx (valid; ops Hardmax, Det)")

    print(f"wrote under {out}:")
    for w_ in written:
        print(f"  {w_}")


if __name__ == "__main__":
    main()
