#!/usr/bin/python3
# Writes node test cases (ONNX's backend-test layout: <case>/model.onnx and
# <case>/test_data_set_0/{input,output}_<k>.pb) for the per-version semantics of opsets 18 to 21,
# with ONNX Runtime's outputs as the reference. Debian's ONNX (1.12) ships test data only up to
# opset 17, and its checker refuses newer models, so models are built with onnx.helper unchecked.
# Run: /usr/bin/python3 THIS OUT_DIR   (tests/importer/node_data_test.cpp runs it)
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(18)


def f32(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


def case(out, name, opset, nodes, inputs, inits=None, attrs_note=""):
    """inputs: {name: array} fed at run time; inits: {name: array} initializers (constants)."""
    inits = inits or {}
    vis = [helper.make_tensor_value_info(k, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[v.dtype], v.shape)
           for k, v in inputs.items()]
    outs = []
    for n in nodes[-1:]:
        outs = [helper.make_empty_tensor_value_info(o) for o in n.output if o]
    g = helper.make_graph(nodes, name, vis, outs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_opset18_cases")
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    results = sess.run(None, inputs)
    # Declare the outputs with their real types (ORT told us), as ONNX's own cases do.
    del m.graph.output[:]
    for o, r in zip([o for o in nodes[-1].output if o], results):
        m.graph.output.append(helper.make_tensor_value_info(o, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[r.dtype], r.shape))
    d = os.path.join(out, "test_" + name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    for k, (n, v) in enumerate(inputs.items()):
        with open(os.path.join(d, "test_data_set_0", f"input_{k}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(v, n).SerializeToString())
    for k, (o, r) in enumerate(zip([o for o in nodes[-1].output if o], results)):
        with open(os.path.join(d, "test_data_set_0", f"output_{k}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(r, o).SerializeToString())


def main(out):
    os.makedirs(out, exist_ok=True)
    n = helper.make_node
    x345 = f32(3, 4, 5)
    # ReduceX at 18: axes as an input (and noop_with_empty_axes), keepdims both ways.
    for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2",
               "ReduceLogSumExp", "ReduceProd"):
        for keep in (0, 1):
            case(out, f"{op.lower()}_axes_input_keepdims{keep}_op18", 18,
                 [n(op, ["x", "axes"], ["y"], keepdims=keep)], {"x": x345}, {"axes": i64(0, -1)})
    case(out, "reducelogsum_axes_input_op18", 18, [n("ReduceLogSum", ["x", "axes"], ["y"])],
         {"x": f32(3, 4, 5, lo=0.5, hi=2.0)}, {"axes": i64(1)})
    case(out, "reducemean_all_axes_op18", 18, [n("ReduceMean", ["x"], ["y"], keepdims=0)], {"x": x345})
    case(out, "reducemax_op20", 20, [n("ReduceMax", ["x", "axes"], ["y"])], {"x": x345}, {"axes": i64(1)})
    # Split at 18: num_outputs, the last chunk smaller.
    case(out, "split_num_outputs_uneven_op18", 18, [n("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)],
         {"x": f32(2, 7)})
    case(out, "split_sizes_input_op18", 18, [n("Split", ["x", "s"], ["a", "b"], axis=0)], {"x": f32(5, 3)},
         {"s": i64(2, 3)})
    # Pad at 18: the axes input; at 19 and 21 the same op (wrap mode is refused).
    # (the pad value is a float initializer: a setting, not a trainable parameter)
    case(out, "pad_axes_input_op18", 18, [n("Pad", ["x", "pads", "v", "axes"], ["y"], mode="constant")],
         {"x": f32(2, 3, 4)}, {"pads": i64(1, 2, 0, 3), "v": np.array(0.5, np.float32), "axes": i64(1, -1)})
    case(out, "pad_constant_node_op18", 18,
         [n("Constant", [], ["v"], value=helper.make_tensor("v", TensorProto.FLOAT, [], [0.25])),
          n("Pad", ["x", "pads", "v"], ["y"], mode="constant")],
         {"x": f32(2, 3)}, {"pads": i64(1, 0, 0, 2)})
    case(out, "pad_edge_op19", 19, [n("Pad", ["x", "pads"], ["y"], mode="edge")], {"x": f32(2, 3)},
         {"pads": i64(0, 1, 1, 2)})
    case(out, "pad_reflect_axes_op21", 21, [n("Pad", ["x", "pads", "", "axes"], ["y"], mode="reflect")],
         {"x": f32(2, 4)}, {"pads": i64(2, 1), "axes": i64(1)})
    # New ops: Gelu (20), Mish (18), GroupNormalization (18: per group; 21: per channel).
    case(out, "gelu_op20", 20, [n("Gelu", ["x"], ["y"])], {"x": f32(3, 7, lo=-4, hi=4)})
    case(out, "gelu_tanh_op20", 20, [n("Gelu", ["x"], ["y"], approximate="tanh")], {"x": f32(3, 7, lo=-4, hi=4)})
    case(out, "mish_op18", 18, [n("Mish", ["x"], ["y"])], {"x": f32(3, 7, lo=-4, hi=4)})
    case(out, "groupnorm_per_group_op18", 18, [n("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2,
                                                 epsilon=1e-3)],
         {"x": f32(2, 6, 3, 3)}, {"s": f32(2, lo=0.5, hi=1.5), "b": f32(2)})
    case(out, "groupnorm_per_channel_op21", 21, [n("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)],
         {"x": f32(2, 6, 4)}, {"s": f32(6, lo=0.5, hi=1.5), "b": f32(6)})
    # Ops whose definitions changed in 19 to 21 only in types or attributes we keep at defaults.
    case(out, "reshape_transpose_op21", 21,
         [n("Reshape", ["x", "shape"], ["r"]), n("Transpose", ["r"], ["y"], perm=[1, 0, 2])],
         {"x": f32(2, 3, 4)}, {"shape": i64(3, 2, 4)})
    case(out, "squeeze_unsqueeze_flatten_op21", 21,
         [n("Unsqueeze", ["x", "a1"], ["u"]), n("Squeeze", ["u", "a1"], ["s"]), n("Flatten", ["s"], ["y"], axis=2)],
         {"x": f32(2, 3, 4)}, {"a1": i64(1)})
    case(out, "shape_cast_constantofshape_op21", 21,
         [n("Shape", ["x"], ["sh"], start=1), n("ConstantOfShape", ["sh"], ["c"],
                                                  value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
          n("Cast", ["x"], ["xd"], to=TensorProto.FLOAT), n("Add", ["xd", "c"], ["y"])],
         {"x": f32(2, 3, 4)})
    case(out, "identity_equal_where_op19", 19,
         [n("Identity", ["x"], ["i"]), n("Equal", ["i", "z"], ["e"]), n("Where", ["e", "x", "i"], ["y"])],
         {"x": np.round(f32(3, 4))}, {"z": np.zeros((1,), np.float32)})
    case(out, "averagepool_op19", 19, [n("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                         pads=[1, 1, 1, 1], count_include_pad=0)], {"x": f32(1, 2, 7, 7)})
    # Resize: the modes PyTorch exports (nearest asymmetric floor, linear pytorch_half_pixel,
    # align_corners), axes and keep_aspect_ratio_policy (18), half_pixel_symmetric (19).
    x4 = f32(1, 2, 4, 5)
    case(out, "resize_nearest_asymmetric_floor_op18", 18,
         [n("Resize", ["x", "", "s"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
            nearest_mode="floor")], {"x": x4}, {"s": np.array([1, 1, 2, 2], np.float32)})
    case(out, "resize_linear_pytorch_half_pixel_op18", 18,
         [n("Resize", ["x", "", "s"], ["y"], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")],
         {"x": x4}, {"s": np.array([1, 1, 2, 1.5], np.float32)})
    case(out, "resize_linear_align_corners_sizes_op19", 19,
         [n("Resize", ["x", "", "", "sz"], ["y"], mode="linear", coordinate_transformation_mode="align_corners")],
         {"x": x4}, {"sz": i64(1, 2, 7, 3)})
    case(out, "resize_linear_axes_not_larger_op18", 18,
         [n("Resize", ["x", "", "", "sz"], ["y"], mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_larger")],
         {"x": x4}, {"sz": i64(8, 20)})
    case(out, "resize_linear_half_pixel_symmetric_op19", 19,
         [n("Resize", ["x", "", "s"], ["y"], mode="linear", coordinate_transformation_mode="half_pixel_symmetric")],
         {"x": x4}, {"s": np.array([1, 1, 1.7, 0.6], np.float32)})
    case(out, "averagepool_dilations_op19", 19, [n("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1, 1],
                                                   dilations=[2, 2])], {"x": f32(1, 2, 6, 6)})
    case(out, "mlp_op21", 21, [n("Gemm", ["x", "w", "b"], ["h"], transB=1), n("Relu", ["h"], ["r"]),
                               n("Gelu", ["r"], ["y"])],
         {"x": f32(4, 5)}, {"w": f32(3, 5), "b": f32(3)})
    # Scatters with reduction none at 18 (which added max / min), GatherND, LSTM and GRU at 21.
    case(out, "scatternd_rows_op18", 18, [n("ScatterND", ["x", "i", "u"], ["y"], reduction="none")],
         {"x": f32(4, 3), "u": f32(2, 3)}, {"i": np.array([[3], [0]], np.int64)})
    case(out, "scatter_elements_axis1_op18", 18, [n("ScatterElements", ["x", "i", "u"], ["y"], axis=1)],
         {"x": f32(3, 5), "u": f32(3, 2)}, {"i": np.array([[4, 0], [1, 3], [-1, 2]], np.int64)})
    case(out, "gathernd_batch_dims1_op21", 21, [n("GatherND", ["x", "i"], ["y"], batch_dims=1)],
         {"x": f32(2, 3, 4)}, {"i": np.array([[[2], [0]], [[1], [1]]], np.int64)})
    T, B, I, H = 4, 2, 3, 5
    case(out, "lstm_bidirectional_states_op21", 21,
         [n("LSTM", ["x", "w", "r", "b", "len", "h0", "c0"], ["y", "yh", "yc"], hidden_size=H,
            direction="bidirectional")],
         {"x": f32(T, B, I)},
         {"w": f32(2, 4 * H, I, lo=-0.5, hi=0.5), "r": f32(2, 4 * H, H, lo=-0.5, hi=0.5), "b": f32(2, 8 * H, lo=-0.5, hi=0.5),
          "len": np.full(B, T, np.int32), "h0": f32(2, B, H), "c0": f32(2, B, H)})
    case(out, "gru_reverse_linear_before_reset0_op21", 21,
         [n("GRU", ["x", "w", "r", "b", "", "h0"], ["y", "yh"], hidden_size=H, direction="reverse")],
         {"x": f32(T, B, I)},
         {"w": f32(1, 3 * H, I, lo=-0.5, hi=0.5), "r": f32(1, 3 * H, H, lo=-0.5, hi=0.5), "b": f32(1, 6 * H, lo=-0.5, hi=0.5),
          "h0": f32(1, B, H)})
    case(out, "gru_bidirectional_linear_before_reset1_op21", 21,
         [n("GRU", ["x", "w", "r", "b"], ["y"], hidden_size=H, direction="bidirectional", linear_before_reset=1)],
         {"x": f32(T, B, I)},
         {"w": f32(2, 3 * H, I, lo=-0.5, hi=0.5), "r": f32(2, 3 * H, H, lo=-0.5, hi=0.5), "b": f32(2, 6 * H, lo=-0.5, hi=0.5)})


if __name__ == "__main__":
    main(sys.argv[1])
