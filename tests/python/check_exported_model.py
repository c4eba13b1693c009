#!/usr/bin/python3
# Checks onnx-pipetrain's exported (trained) model: onnx.checker passes, everything but the
# initializers' values is unchanged from the original, and its forward on INPUT_NPY matches
# EXPECTED_OUTPUT_NPY (ONNX Runtime if importable, else a tiny numpy evaluator).
# Run: /usr/bin/python3 THIS ORIGINAL_ONNX TRAINED_ONNX INPUT_NPY EXPECTED_OUTPUT_NPY
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TOL = 1e-4
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-6)) if b.size else 0.0


def compare_structure(orig, trained):
    """List of differences outside the initializers' values."""
    diffs = []
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version",
                  "doc_string"):
        if getattr(orig, field) != getattr(trained, field):
            diffs.append(f"model.{field}: {getattr(orig, field)!r} -> "
                         f"{getattr(trained, field)!r}")
    if list(orig.opset_import) != list(trained.opset_import):
        diffs.append(f"opset_import: {[(o.domain, o.version) for o in orig.opset_import]} -> "
                     f"{[(o.domain, o.version) for o in trained.opset_import]}")
    if list(orig.metadata_props) != list(trained.metadata_props):
        diffs.append("metadata_props differ")
    go, gt = orig.graph, trained.graph
    if len(go.node) != len(gt.node):
        diffs.append(f"graph has {len(gt.node)} nodes, original {len(go.node)}")
    for k, (a, b) in enumerate(zip(go.node, gt.node)):
        if a != b:
            diffs.append(f"node {k} ({a.op_type} '{a.name}') changed: "
                         f"{b.op_type} '{b.name}' inputs {list(b.input)} outputs {list(b.output)}")
    for field in ("input", "output", "value_info"):
        if list(getattr(go, field)) != list(getattr(gt, field)):
            diffs.append(f"graph.{field} differ")
    for field in ("name", "doc_string"):
        if getattr(go, field) != getattr(gt, field):
            diffs.append(f"graph.{field}: {getattr(go, field)!r} -> {getattr(gt, field)!r}")

    def by_name(g, which):
        d = {}
        for t in g.initializer:
            if t.name in d:
                diffs.append(f"{which} model: initializer '{t.name}' appears twice")
            d[t.name] = t
        return d
    io, it = by_name(go, "original"), by_name(gt, "trained")
    if set(io) != set(it):
        diffs.append(f"initializer names differ: missing {sorted(set(io) - set(it))}, "
                     f"added {sorted(set(it) - set(io))}")
    for name, t in it.items():   # every trained value must decode to its declared size
        try:
            ok = numpy_helper.to_array(t).size == int(np.prod(t.dims, dtype=np.int64))
        except Exception:
            ok = False
        if not ok:
            diffs.append(f"initializer '{name}': data does not decode to dims {list(t.dims)}")
    for name in sorted(set(io) & set(it)):
        a, b = io[name], it[name]
        if a.data_type != b.data_type or list(a.dims) != list(b.dims):
            diffs.append(f"initializer '{name}': {TensorProto.DataType.Name(a.data_type)}"
                         f"{list(a.dims)} -> {TensorProto.DataType.Name(b.data_type)}"
                         f"{list(b.dims)}")
        elif a.data_type not in FLOAT_TYPES:
            va, vb = numpy_helper.to_array(a), numpy_helper.to_array(b)
            if va.dtype != vb.dtype or va.tobytes() != vb.tobytes():
                diffs.append(f"non-float initializer '{name}' changed value")

    # Catch-all: with initializers removed, the two protos must be identical.
    rest_o, rest_t = onnx.ModelProto(), onnx.ModelProto()
    rest_o.CopyFrom(orig)
    rest_t.CopyFrom(trained)
    del rest_o.graph.initializer[:]
    del rest_t.graph.initializer[:]
    if not diffs and rest_o != rest_t:
        fields = [f.name for f in onnx.ModelProto.DESCRIPTOR.fields
                  if getattr(rest_o, f.name) != getattr(rest_t, f.name)]
        gfields = [f.name for f in onnx.GraphProto.DESCRIPTOR.fields
                   if getattr(rest_o.graph, f.name) != getattr(rest_t.graph, f.name)]
        diffs.append(f"model differs outside the initializers in fields {fields} "
                     f"(graph fields {gfields})")
    return diffs


# ---- tiny numpy reference evaluator (float64) -------------------------------------------------
def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _flatten(x, axis):
    axis = axis if axis >= 0 else axis + x.ndim
    return x.reshape(int(np.prod(x.shape[:axis])), -1)


def run_numpy(model, feeds):
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env.update(feeds)
    for n in model.graph.node:
        at, ins = _attrs(n), [env[i] if i else None for i in n.input]
        op = n.op_type
        if op == "Gemm":
            a, b = ins[0].astype(np.float64), ins[1].astype(np.float64)
            a, b = (a.T if at.get("transA", 0) else a), (b.T if at.get("transB", 0) else b)
            y = at.get("alpha", 1.0) * (a @ b)
            if len(ins) > 2 and ins[2] is not None:
                y = y + at.get("beta", 1.0) * ins[2]
            out = [y]
        elif op == "MatMul":
            out = [np.matmul(ins[0].astype(np.float64), ins[1])]
        elif op in ("Add", "Sub", "Mul", "Div"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
            out = [f(ins[0], ins[1])]
        elif op == "Relu":
            out = [np.maximum(ins[0], 0)]
        elif op == "Sigmoid":
            out = [1.0 / (1.0 + np.exp(-ins[0].astype(np.float64)))]
        elif op == "Tanh":
            out = [np.tanh(ins[0])]
        elif op == "Softmax":
            x = ins[0].astype(np.float64)
            if opset >= 13:
                out = [_softmax(x, at.get("axis", -1))]
            else:   # opset < 13: coerce to 2D at axis (default 1)
                out = [_softmax(_flatten(x, at.get("axis", 1)), 1).reshape(x.shape)]
        elif op == "Flatten":
            out = [_flatten(ins[0], at.get("axis", 1))]
        elif op == "Reshape":
            x, shape = ins[0], [int(s) for s in ins[1]]
            if not at.get("allowzero", 0):
                shape = [x.shape[k] if s == 0 else s for k, s in enumerate(shape)]
            out = [x.reshape(shape)]
        elif op == "Identity":
            out = [ins[0]]
        elif op == "Constant":
            out = [numpy_helper.to_array(at["value"])]
        else:
            raise NotImplementedError(f"numpy evaluator: op {op} (node '{n.name}')")
        for name, v in zip(n.output, out):
            env[name] = v
    return [env[o.name] for o in model.graph.output]


def run_model(path, model, feeds):
    # ONNX Runtime when installed (tools/setup.sh installs it); PIPETRAIN_REQUIRE_ORT=1 makes it
    # mandatory, so that CI cannot silently fall back to the numpy evaluator.
    import os
    try:
        import onnxruntime as ort
    except ImportError:
        if os.environ.get("PIPETRAIN_REQUIRE_ORT") == "1":
            raise SystemExit("FAIL: onnxruntime is required (PIPETRAIN_REQUIRE_ORT=1) but not importable")
        return run_numpy(model, feeds), "numpy reference evaluator"
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds), f"onnxruntime {ort.__version__}"


def main():
    if len(sys.argv) != 5:
        print(f"usage: {sys.argv[0]} ORIGINAL_ONNX TRAINED_ONNX INPUT_NPY EXPECTED_OUTPUT_NPY",
              file=sys.stderr)
        return 1
    orig_path, trained_path, input_path, expected_path = sys.argv[1:]
    try:
        onnx.checker.check_model(trained_path)   # path form: also checks external data
    except Exception as ex:   # onnx.checker.ValidationError and loader errors
        print(f"FAIL: onnx.checker rejects {trained_path}: {ex}")
        return 1
    print(f"onnx.checker: {trained_path} ok")

    try:
        orig, trained = onnx.load(orig_path), onnx.load(trained_path)  # external data loaded
    except Exception as ex:
        print(f"FAIL: cannot load {orig_path} / {trained_path}: {ex}")
        return 1
    diffs = compare_structure(orig, trained)
    if diffs:
        print(f"FAIL: {trained_path} differs from {orig_path} outside the initializer values:")
        for d in diffs:
            print(f"  - {d}")
        return 1
    print(f"structure: identical to {orig_path} apart from initializer values "
          f"({len(trained.graph.initializer)} initializers, {len(trained.graph.node)} nodes)")

    init_names = {t.name for t in trained.graph.initializer}
    inputs = [i.name for i in trained.graph.input if i.name not in init_names]
    if len(inputs) != 1:
        print(f"FAIL: expected one data input, model has {inputs}")
        return 1
    x, expected = np.load(input_path), np.load(expected_path)
    try:
        outs, how = run_model(trained_path, trained, {inputs[0]: x})
    except NotImplementedError as ex:
        print(f"FAIL: cannot evaluate {trained_path}: {ex}")
        return 1
    got = np.asarray(outs[0])
    if got.shape != expected.shape:
        print(f"FAIL: output '{trained.graph.output[0].name}' shape {list(got.shape)} != "
              f"expected {list(expected.shape)}")
        return 1
    e = rel_err(got, expected)
    print(f"forward ({how}): output '{trained.graph.output[0].name}' {list(got.shape)} "
          f"rel err {e:.3e} (tolerance {TOL:g})")
    if not (np.isfinite(got).all() and e <= TOL):
        print(f"FAIL: {trained_path} output differs from {expected_path}")
        return 1
    print("PASS: exported model is valid, structurally unchanged, and computes the expected output")
    return 0


if __name__ == "__main__":
    sys.exit(main())
