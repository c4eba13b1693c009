#!/usr/bin/python3
# Two small models whose weights are shared across pipeline stages, written with onnx.helper (a
# torch export of tied weights may alias them through Identity nodes or fold a transposed copy):
#   shared_mlp.onnx  x [N,16] float: Gemm(W0, bz) Relu Gemm(Ws, bz) Relu Gemm(Ws, bz) Relu Gemm(W3, b3)
#                    (the copied layer Ws and the bias bz are each one initializer read by several
#                    nodes, as PyTorch's export merges equal initializers)
#   tied_lm.onnx     tokens [N] int64: Gather(E) Gemm(W1, b1) Relu Gemm(W2, b2) Relu Gemm(., E, transB=1)
#                    (a tied embedding: the output layer multiplies by the transposed embedding)
#   residual_cnn.onnx x [N,1,6,6] float: Conv Relu (a) Conv Relu Conv Relu Add(., a) Conv Relu
#                    GlobalAveragePool Flatten Gemm; no shared weights, but on 4 stages of
#                    [2, 3, 4, 4] forward nodes the skip `a` crosses from stage 0 into stage 2
#                    (tests/runtime/stage_layout_test.cpp)
# Run: /usr/bin/python3 THIS OUT_DIR
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def gemm(name, a, w, b, out, trans_b=0):
    inputs = [a, w] + ([b] if b else [])
    return helper.make_node("Gemm", inputs, [out], name=name, transB=trans_b)


def save(graph, path):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, path)


def shared_mlp(path, rng):
    d, classes = 16, 10
    init = {
        "W0": rng.normal(0, 0.35, (d, d)),
        "Ws": rng.normal(0, 0.35, (d, d)),
        "bz": rng.normal(0, 0.1, (d,)),
        "W3": rng.normal(0, 0.35, (d, classes)),
        "b3": np.zeros(classes),
    }
    nodes = [
        gemm("fc0", "x", "W0", "bz", "h0"),
        helper.make_node("Relu", ["h0"], ["r0"], name="relu0"),
        gemm("fc1", "r0", "Ws", "bz", "h1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        gemm("fc2", "r1", "Ws", "bz", "h2"),
        helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
        gemm("fc3", "r2", "W3", "b3", "logits"),
    ]
    graph = helper.make_graph(
        nodes, "shared_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in init.items()])
    save(graph, path)


def tied_lm(path, rng):
    vocab, d = 16, 12
    init = {
        "E": rng.normal(0, 0.5, (vocab, d)),
        "W1": rng.normal(0, 0.4, (d, d)),
        "b1": rng.normal(0, 0.1, (d,)),
        "W2": rng.normal(0, 0.4, (d, d)),
        "b2": rng.normal(0, 0.1, (d,)),
    }
    nodes = [
        helper.make_node("Gather", ["E", "tokens"], ["emb"], name="embed", axis=0),
        gemm("fc1", "emb", "W1", "b1", "h1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        gemm("fc2", "r1", "W2", "b2", "h2"),
        helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
        gemm("out", "r2", "E", None, "logits", trans_b=1),
    ]
    graph = helper.make_graph(
        nodes, "tied_lm", [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", vocab])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in init.items()])
    save(graph, path)


def residual_cnn(path, rng):
    c, classes = 3, 5
    init = {"C0": rng.normal(0, 0.5, (c, 1, 3, 3)), "c0": rng.normal(0, 0.1, (c,))}
    for k in (1, 2, 3):
        init[f"C{k}"] = rng.normal(0, 0.3, (c, c, 3, 3))
        init[f"c{k}"] = rng.normal(0, 0.1, (c,))
    init["Wf"] = rng.normal(0, 0.5, (c, classes))
    init["bf"] = np.zeros(classes)
    conv = lambda k, x, y: helper.make_node("Conv", [x, f"C{k}", f"c{k}"], [y], name=f"conv{k}", pads=[1, 1, 1, 1])
    relu = lambda k, x, y: helper.make_node("Relu", [x], [y], name=f"relu{k}")
    nodes = [
        conv(0, "x", "h0"), relu(0, "h0", "a"),
        conv(1, "a", "h1"), relu(1, "h1", "r1"), conv(2, "r1", "h2"), relu(2, "h2", "r2"),
        helper.make_node("Add", ["r2", "a"], ["s"], name="skip_add"),
        conv(3, "s", "h3"), relu(3, "h3", "r3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        gemm("fc", "f", "Wf", "bf", "logits"),
    ]
    graph = helper.make_graph(
        nodes, "residual_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 6, 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in init.items()])
    save(graph, path)


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(11)
    shared_mlp(os.path.join(out, "shared_mlp.onnx"), rng)
    tied_lm(os.path.join(out, "tied_lm.onnx"), rng)
    residual_cnn(os.path.join(out, "residual_cnn.onnx"), np.random.default_rng(12))


if __name__ == "__main__":
    main()
