#!/usr/bin/python3
"""Exports the model families that onnx-pipetrain must import, train and export.

Run: /usr/bin/python3 tools/export_models.py OUTDIR [--only NAME ...] [--opsets 11 13 17]
     [--modes train eval] [--list]

torch.onnx.export models (torch.manual_seed(0), random init, weights=None), each at opsets 11, 13
and 17, in training mode (training=TrainingMode.TRAINING, do_constant_folding=False: keeps
BatchNormalization and Dropout) and in evaluation mode (the default: BatchNorm folded into Conv):

  lenet_bn      LeNet-5 with BatchNorm2d after each conv, input float [N,1,28,28] -> 10
  resnet18      torchvision resnet18(num_classes=10), input [N,3,32,32] (its AdaptiveAvgPool2d
                exports as GlobalAveragePool at 32x32: layer4 is already 1x1)
  vgg11_bn      CIFAR VGG-11-BN: torchvision's vgg11_bn feature config ("A", batch_norm=True),
                flatten, Linear(512, 10); input [N,3,32,32] (torchvision's own head has an
                AdaptiveAvgPool2d((7,7)) that does not export from 1x1, and 7x7x512x4096 weights)
  mobilenet_v2  torchvision mobilenet_v2(num_classes=10), input [N,3,32,32] (classifier's
                adaptive_avg_pool2d(x, (1,1)) exports as GlobalAveragePool)
  googlenet     torchvision googlenet(aux_logits=False, init_weights=True, transform_input=False,
                num_classes=10), input [N,3,32,32]
  snn           self-normalizing MLP: 8 x (Linear + SELU + AlphaDropout(0.05)), input [N,64] -> 10.
                torch cannot export aten::alpha_dropout in training mode, so the training-mode
                export uses AlphaDropoutPattern below: the same function written with nn.Dropout
                on a tensor of ones (Shape/ConstantOfShape/Dropout/Mul/Add/Sub in ONNX)
  transformer   Embedding(100, 64) + nn.TransformerEncoder(2 layers, d_model 64, nhead 4,
                dim_feedforward 128, batch_first) with src_key_padding_mask = (tokens == 0)
                computed in forward, mean-pool over the sequence, Linear(64, 5);
                input int64 tokens [N,16]

Every export has a dynamic batch axis on input "x" and output "logits". A training-mode export's
BatchNorm running statistics are those after the exporter's one tracing forward (torch updates
them while tracing in training mode), not the constructor's 0 and 1.

onnx.helper graphs in the style of other converters and old opsets (7 to 9), written once each:

  caffe2_inception_op7   opset 7, IR 3 (initializers repeated as graph inputs): Conv/Relu/LRN/
                         MaxPool stem, a 4-branch inception block (Concat), Dropout (opset 7,
                         ratio), AveragePool, Flatten, Gemm. Input [N,3,32,32] -> 10
  cntk_bn_const_op8      opset 8: weights fed through Constant nodes, BatchNormalization-7 with
                         spatial=1 (test-mode form: one output), Sum of three branches, Concat,
                         MaxPool, Reshape with a Constant shape, MatMul+Add head. [N,3,16,16] -> 10
  shufflenet_op9         opset 9: grouped Conv, BatchNormalization-9 (no spatial), channel shuffle
                         Reshape/Transpose/Reshape, Sum residual, Dropout, GlobalAveragePool,
                         Flatten, Gemm. [N,8,16,16] -> 10

(BatchNormalization-6 had is_test and spatial; opset 7 dropped is_test and kept spatial; opset 9
dropped spatial. Dropout-7 has ratio only; is_test went away in opset 7 as well.)

Writes OUTDIR/<name>.op<opset>.<mode>.onnx (helper graphs: OUTDIR/<name>.onnx) and prints one line
per model: name, opset, mode, op types, size. Models are large (VGG-11-BN ~37 MB): write them to a
temporary folder, never commit them. Importable: build_module(), export_torch(), HELPER_MODELS,
TORCH_MODELS, example_input() are used by tests/python/torch_model_oracle.py and
tests/models/test_models.py.
"""
import argparse
import math
import os
import sys
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import TensorProto, helper, numpy_helper

OPSETS = (11, 13, 17)
MODES = ("train", "eval")
TORCH_MODELS = ("lenet_bn", "resnet18", "vgg11_bn", "mobilenet_v2", "googlenet", "snn", "transformer")
NUM_CLASSES = {"lenet_bn": 10, "resnet18": 10, "vgg11_bn": 10, "mobilenet_v2": 10, "googlenet": 10,
               "snn": 10, "transformer": 5}
INPUT_SHAPE = {"lenet_bn": (1, 28, 28), "resnet18": (3, 32, 32), "vgg11_bn": (3, 32, 32),
               "mobilenet_v2": (3, 32, 32), "googlenet": (3, 32, 32), "snn": (64,),
               "transformer": (16,)}
VOCAB, SEQ = 100, 16


# ----------------------------------------------------------------------------------- torch models
class LeNet5BN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


class VGG11BNCifar(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        from torchvision.models.vgg import cfgs, make_layers
        self.features = make_layers(cfgs["A"], batch_norm=True)   # 32x32 -> 512 x 1 x 1
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x):
        return self.classifier(self.flatten(self.features(x)))


class AlphaDropoutPattern(nn.Module):
    """nn.AlphaDropout's function written with ops that export in training mode: keep = the 0/1
    mask of nn.Dropout applied to ones; y = a*(x*keep + alpha'*(1-keep)) + b (alpha' = -scale*alpha
    of SELU, a = ((1-p)(1+p*alpha'^2))^-1/2, b = -a*alpha'*p), identity in evaluation like
    nn.AlphaDropout. With p=0 (the oracle) keep is all ones and y == x."""
    ALPHA_P = -1.7580993408473766

    def __init__(self, p=0.05):
        super().__init__()
        self.p = p
        self.drop = nn.Dropout(p)

    def forward(self, x):
        if not self.training:
            return x
        p = self.p
        keep = self.drop(torch.ones_like(x)) * (1.0 - p)
        a = ((1.0 - p) * (1.0 + p * self.ALPHA_P ** 2)) ** -0.5
        b = -a * self.ALPHA_P * p
        return a * (x * keep + self.ALPHA_P * (1.0 - keep)) + b


class SNN(nn.Module):
    def __init__(self, in_features=64, width=64, depth=8, num_classes=10, p=0.05, pattern=True):
        super().__init__()
        layers = []
        d = in_features
        for _ in range(depth):
            lin = nn.Linear(d, width)
            nn.init.normal_(lin.weight, 0.0, 1.0 / math.sqrt(d))   # LeCun normal, as SNNs use
            layers += [lin, nn.SELU(), AlphaDropoutPattern(p) if pattern else nn.AlphaDropout(p)]
            d = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, num_classes)

    def forward(self, x):
        return self.head(self.body(x))


class TransformerClassifier(nn.Module):
    def __init__(self, vocab=VOCAB, d_model=64, nhead=4, ff=128, layers=2, num_classes=5,
                 dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=ff, dropout=dropout,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens):
        pad = tokens == 0                       # token 0 is padding: masked out of attention
        h = self.encoder(self.embed(tokens), src_key_padding_mask=pad)
        return self.head(h.mean(dim=1))


def build_module(name, dropout=None):
    """The torch module for a model name, built after torch.manual_seed(0). dropout=0 forces every
    dropout ratio (Dropout, AlphaDropout pattern, the Transformer's) to 0."""
    import torchvision
    torch.manual_seed(0)
    if name == "lenet_bn":
        m = LeNet5BN()
    elif name == "resnet18":
        m = torchvision.models.resnet18(weights=None, num_classes=10)
    elif name == "vgg11_bn":
        m = VGG11BNCifar()
    elif name == "mobilenet_v2":
        m = torchvision.models.mobilenet_v2(weights=None, num_classes=10)
    elif name == "googlenet":
        m = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True,
                                         transform_input=False, num_classes=10)
    elif name == "snn":
        m = SNN()
    elif name == "transformer":
        m = TransformerClassifier()
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(TORCH_MODELS)}")
    if dropout is not None:
        for mod in m.modules():
            if isinstance(mod, (nn.Dropout, nn.AlphaDropout)):
                mod.p = float(dropout)
            if isinstance(mod, AlphaDropoutPattern):
                mod.p = float(dropout)
            if isinstance(mod, nn.MultiheadAttention):
                mod.dropout = float(dropout)
    return m.float()


def example_input(name, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    if name == "transformer":
        t = torch.randint(1, VOCAB, (batch, SEQ), generator=g)
        t[:, SEQ - 3:] = 0                      # trailing padding
        return t
    return torch.randn((batch,) + INPUT_SHAPE[name], generator=g)


def export_torch(model, name, opset, mode, path_or_file):
    """torch.onnx.export in 'train' (TrainingMode.TRAINING, no constant folding) or 'eval' mode.
    Note: in training mode the exporter's tracing forward (on example_input) updates the module's
    BatchNorm running statistics and num_batches_tracked once, and the ONNX file holds those
    updated values; main() therefore builds a fresh module for every file."""
    model.train(mode == "train")
    kw = dict(opset_version=opset, input_names=["x"], output_names=["logits"],
              dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    if mode == "train":
        kw.update(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example_input(name), path_or_file, **kw)


# ----------------------------------------------------------------------------- onnx.helper graphs
def _rng(seed):
    return np.random.default_rng(seed)


def _w(rng, shape, fan_in=None):
    fan_in = fan_in or int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)


def caffe2_inception_op7():
    """Opset 7, IR 3, initializers also listed as graph inputs (as Caffe2's converter wrote)."""
    r = _rng(11)
    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def conv(x, cin, cout, k, name, stride=1, pad=0):
        w = init(name + "_w", _w(r, (cout, cin, k, k)))
        b = init(name + "_b", (r.standard_normal(cout) * 0.01).astype(np.float32))
        nodes.append(helper.make_node("Conv", [x, w, b], [name], name=name, kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[pad] * 4))
        nodes.append(helper.make_node("Relu", [name], [name + "_relu"], name=name + "_relu"))
        return name + "_relu"

    h = conv("x", 3, 16, 3, "conv1", stride=1, pad=1)                      # 32x32
    nodes.append(helper.make_node("LRN", [h], ["lrn1"], name="lrn1", size=5, alpha=1e-4, beta=0.75,
                                  bias=1.0))
    nodes.append(helper.make_node("MaxPool", ["lrn1"], ["pool1"], name="pool1",
                                  kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]))  # 16x16
    b1 = conv("pool1", 16, 8, 1, "inc_1x1")
    b2 = conv(conv("pool1", 16, 8, 1, "inc_3x3_reduce"), 8, 12, 3, "inc_3x3", pad=1)
    b3 = conv(conv("pool1", 16, 4, 1, "inc_5x5_reduce"), 4, 6, 5, "inc_5x5", pad=2)
    nodes.append(helper.make_node("MaxPool", ["pool1"], ["inc_pool"], name="inc_pool",
                                  kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]))
    b4 = conv("inc_pool", 16, 6, 1, "inc_pool_proj")
    nodes.append(helper.make_node("Concat", [b1, b2, b3, b4], ["inc_out"], name="inc_concat", axis=1))
    nodes.append(helper.make_node("LRN", ["inc_out"], ["lrn2"], name="lrn2", size=3, alpha=2e-4,
                                  beta=0.75, bias=2.0))
    nodes.append(helper.make_node("AveragePool", ["lrn2"], ["pool2"], name="pool2",
                                  kernel_shape=[4, 4], strides=[4, 4]))               # 32 x 4 x 4
    nodes.append(helper.make_node("Dropout", ["pool2"], ["drop"], name="drop", ratio=0.4))
    nodes.append(helper.make_node("Flatten", ["drop"], ["flat"], name="flatten", axis=1))
    w = init("fc_w", _w(r, (10, 32 * 16)))
    b = init("fc_b", np.zeros(10, np.float32))
    nodes.append(helper.make_node("Gemm", ["flat", w, b], ["logits"], name="fc", transB=1))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])]
    inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits]
    g = helper.make_graph(nodes, "caffe2_inception", inputs,
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)], producer_name="caffe2")
    m.ir_version = 3
    return m


def cntk_bn_const_op8():
    """Opset 8: every weight is a Constant node's value; BatchNormalization-7 (spatial=1)."""
    r = _rng(12)
    nodes = []

    def const(name, arr):
        nodes.append(helper.make_node("Constant", [], [name], name=name + "_const",
                                      value=numpy_helper.from_array(arr, name + "_value")))
        return name

    def conv_bn_relu(x, cin, cout, k, name, pad):
        w = const(name + "_W", _w(r, (cout, cin, k, k)))
        nodes.append(helper.make_node("Conv", [x, w], [name + "_conv"], name=name,
                                      kernel_shape=[k, k], pads=[pad] * 4))
        sc = const(name + "_scale", (1.0 + 0.1 * r.standard_normal(cout)).astype(np.float32))
        bi = const(name + "_bias", (0.1 * r.standard_normal(cout)).astype(np.float32))
        mu = const(name + "_mean", (0.1 * r.standard_normal(cout)).astype(np.float32))
        va = const(name + "_var", r.uniform(0.5, 1.5, cout).astype(np.float32))
        nodes.append(helper.make_node("BatchNormalization", [name + "_conv", sc, bi, mu, va],
                                      [name + "_bn"], name=name + "_bn", epsilon=1e-5,
                                      momentum=0.9, spatial=1))
        nodes.append(helper.make_node("Relu", [name + "_bn"], [name + "_out"], name=name + "_relu"))
        return name + "_out"

    h = conv_bn_relu("x", 3, 12, 3, "c1", 1)                                  # 12 x 16 x 16
    a = conv_bn_relu(h, 12, 12, 3, "c2a", 1)
    b = conv_bn_relu(h, 12, 12, 1, "c2b", 0)
    nodes.append(helper.make_node("Sum", [h, a, b], ["sum3"], name="sum3"))
    nodes.append(helper.make_node("MaxPool", ["sum3"], ["pool1"], name="pool1", kernel_shape=[2, 2],
                                  strides=[2, 2]))                                   # 12 x 8 x 8
    c = conv_bn_relu("pool1", 12, 4, 1, "c3a", 0)
    d = conv_bn_relu("pool1", 12, 4, 3, "c3b", 1)
    nodes.append(helper.make_node("Concat", ["pool1", c, d], ["cat"], name="cat", axis=1))  # 20
    nodes.append(helper.make_node("MaxPool", ["cat"], ["pool2"], name="pool2", kernel_shape=[2, 2],
                                  strides=[2, 2]))                                   # 20 x 4 x 4
    shape = const("flat_shape", np.array([0, -1], np.int64))
    nodes.append(helper.make_node("Reshape", ["pool2", shape], ["flat"], name="flatten"))
    nodes.append(helper.make_node("Dropout", ["flat"], ["drop"], name="drop", ratio=0.25))
    w = const("fc_W", _w(r, (320, 10), fan_in=320))
    bb = const("fc_b", np.zeros(10, np.float32))
    nodes.append(helper.make_node("MatMul", ["drop", w], ["mm"], name="fc_matmul"))
    nodes.append(helper.make_node("Add", ["mm", bb], ["logits"], name="fc_add"))
    g = helper.make_graph(nodes, "cntk_bn_const",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 8)], producer_name="CNTK")
    m.ir_version = 4
    return m


def shufflenet_op9():
    """Opset 9: grouped convs, BatchNormalization-9, channel shuffle from Reshape/Transpose/Reshape."""
    r = _rng(13)
    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def bn(x, c, name):
        ins = [x, init(name + "_scale", (1.0 + 0.1 * r.standard_normal(c)).astype(np.float32)),
               init(name + "_B", (0.1 * r.standard_normal(c)).astype(np.float32)),
               init(name + "_mean", (0.1 * r.standard_normal(c)).astype(np.float32)),
               init(name + "_var", r.uniform(0.5, 1.5, c).astype(np.float32))]
        nodes.append(helper.make_node("BatchNormalization", ins, [name], name=name, epsilon=1e-5,
                                      momentum=0.9))
        return name

    def gconv(x, cin, cout, k, group, name, pad=0, stride=1):
        w = init(name + "_W", _w(r, (cout, cin // group, k, k)))
        nodes.append(helper.make_node("Conv", [x, w], [name], name=name, kernel_shape=[k, k],
                                      group=group, pads=[pad] * 4, strides=[stride] * 2))
        return name

    def shuffle(x, c, groups, hw, name):
        s1 = init(name + "_s1", np.array([0, groups, c // groups, hw, hw], np.int64))
        s2 = init(name + "_s2", np.array([0, c, hw, hw], np.int64))
        nodes.append(helper.make_node("Reshape", [x, s1], [name + "_r1"], name=name + "_reshape1"))
        nodes.append(helper.make_node("Transpose", [name + "_r1"], [name + "_t"],
                                      name=name + "_transpose", perm=[0, 2, 1, 3, 4]))
        nodes.append(helper.make_node("Reshape", [name + "_t", s2], [name], name=name + "_reshape2"))
        return name

    C, G, HW = 8, 2, 16
    for i in range(2):
        x = "x" if i == 0 else f"u{i - 1}_out"
        h = gconv(x, C, C, 1, G, f"u{i}_g1")
        h = bn(h, C, f"u{i}_bn1")
        nodes.append(helper.make_node("Relu", [h], [f"u{i}_relu1"], name=f"u{i}_relu1"))
        h = shuffle(f"u{i}_relu1", C, G, HW, f"u{i}_shuffle")
        h = gconv(h, C, C, 3, C, f"u{i}_dw", pad=1)                     # depthwise
        h = bn(h, C, f"u{i}_bn2")
        h = gconv(h, C, C, 1, G, f"u{i}_g2")
        h = bn(h, C, f"u{i}_bn3")
        nodes.append(helper.make_node("Sum", [x, h], [f"u{i}_sum"], name=f"u{i}_sum"))
        nodes.append(helper.make_node("Relu", [f"u{i}_sum"], [f"u{i}_out"], name=f"u{i}_relu2"))
    nodes.append(helper.make_node("Dropout", ["u1_out"], ["drop"], name="drop", ratio=0.2))
    nodes.append(helper.make_node("GlobalAveragePool", ["drop"], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    w = init("fc_W", _w(r, (10, C)))
    b = init("fc_B", np.zeros(10, np.float32))
    nodes.append(helper.make_node("Gemm", ["flat", w, b], ["logits"], name="fc", transB=1))
    g = helper.make_graph(nodes, "shufflenet_unit",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C, HW, HW])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)], producer_name="onnx-caffe2")
    m.ir_version = 4
    return m


HELPER_MODELS = {
    "caffe2_inception_op7": (caffe2_inception_op7, (3, 32, 32), 10),
    "cntk_bn_const_op8": (cntk_bn_const_op8, (3, 16, 16), 10),
    "shufflenet_op9": (shufflenet_op9, (8, 16, 16), 10),
}


# ---------------------------------------------------------------------------------------- main
def describe(path_or_model):
    m = onnx.load(path_or_model) if isinstance(path_or_model, str) else path_or_model
    return sorted({n.op_type for n in m.graph.node})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help="model names (" + ", ".join(TORCH_MODELS + tuple(HELPER_MODELS)) + ")")
    ap.add_argument("--opsets", nargs="+", type=int, default=list(OPSETS))
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    a = ap.parse_args(argv)
    names = list(TORCH_MODELS) + list(HELPER_MODELS)
    if a.list:
        print("\n".join(names))
        return 0
    if a.only:
        bad = [n for n in a.only if n not in names]
        if bad:
            ap.error(f"unknown model(s) {bad}; known: {', '.join(names)}")
        names = [n for n in names if n in a.only]
    os.makedirs(a.outdir, exist_ok=True)
    failed = 0
    for name in names:
        if name in HELPER_MODELS:
            m = HELPER_MODELS[name][0]()
            onnx.checker.check_model(m)
            path = os.path.join(a.outdir, name + ".onnx")
            onnx.save(m, path)
            print(f"{name:22s} opset {m.opset_import[0].version:2d} helper {os.path.getsize(path):>10d} B "
                  f"{path}  ops: {' '.join(describe(m))}")
            continue
        for opset in a.opsets:
            for mode in a.modes:
                model = build_module(name)   # fresh: a training-mode export mutates BN buffers
                path = os.path.join(a.outdir, f"{name}.op{opset}.{mode}.onnx")
                try:
                    export_torch(model, name, opset, mode, path)
                except Exception as e:   # report the exporter's refusal, go on with the rest
                    failed += 1
                    print(f"{name:22s} opset {opset:2d} {mode:6s} EXPORT FAILED: "
                          f"{str(e).splitlines()[0][:200]}")
                    continue
                print(f"{name:22s} opset {opset:2d} {mode:6s} {os.path.getsize(path):>10d} B {path}  "
                      f"ops: {' '.join(describe(path))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
