#!/usr/bin/python3
"""Model-zoo benchmark: the architectures users export, through every path.

Run: /usr/bin/python3 tools/bench/zoo.py [--models resnet18 vit_b_16 ...] [--opsets 13 17 18 21]
         [--modes train eval] [--bin build/tools/onnx-pipetrain] [--out /tmp/zoo] [--big]
         [--markdown docs/models.md-table.md]

For every model x opset x mode it exports the model with torch.onnx.export (torch 1.13 writes
opsets up to 17; opsets 18 and newer are made from the opset-17 export by `upgrade()` below, which
rewrites what changed between versions, and ONNX Runtime checks that the upgraded file computes
the same outputs as the opset-17 one) and records:

  plan4   `--gpus 4 --plan-only`: a balanced, feasible 4-stage plan (exit 0)
  step1   one training step on one stage (synthetic data, batch 2): exit 0 and a finite loss
  pipe4   three steps on 4 stages (1F1B with SpecTrain, batch 16): exit 0 and finite losses
  ort     the model trained on 4 stages runs in ONNX Runtime: finite outputs of the right shape
  torch   (training-mode exports) one SGD step against PyTorch autograd in float64, on the same
          weights and data: the largest relative error of the loss and of every weight update
          (tests/python/torch_model_oracle.py's comparison and tolerances)

Each cell is `ok`, `FAIL: <first line of the error>` or `n/a (<why>)`. Results go to OUT/zoo.json
as they come (a rerun skips what is there unless --fresh) and a markdown table to stdout (and to
--markdown). Models are small-input variants (32x32 unless stated) to keep the run in minutes; the
inputs are listed in MODELS. --big adds AlexNet and VGG-11 at 224x224 (their adaptive pools need it).
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import export_models as em  # noqa: E402
import torch_model_oracle as tmo  # noqa: E402

VOCAB, SEQ = 100, 16


class TinyGPT(nn.Module):
    """GPT-style decoder: token + learned position embeddings, 2 pre-norm causal layers, final
    LayerNorm, output projection tied to the token embedding. Logits [N, T, vocab]."""

    def __init__(self, vocab=VOCAB, d=64, heads=4, layers=2, seq=SEQ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(0.02 * torch.randn(seq, d))
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0,
                                           batch_first=True, norm_first=True, activation="gelu")
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.register_buffer("causal", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, tokens):
        h = self.tok(tokens) + self.pos
        h = self.body(h, mask=self.causal)
        return self.norm(h) @ self.tok.weight.t()


class SmallUNet(nn.Module):
    """A U-Net in the common shapes: two Conv + GroupNorm + ReLU levels down (MaxPool), up once by
    ConvTranspose and once by bilinear Resize, skips joined by Concat, a nearest-Resize side branch;
    global average pool and a linear head (classification, so the usual labels apply)."""

    def __init__(self, c=8, num_classes=10):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(2, o), nn.ReLU())
        self.d1, self.d2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.u2 = block(4 * c, 2 * c)
        self.u1 = block(3 * c, c)
        self.side = nn.Conv2d(4 * c, c, 1)
        self.head = nn.Linear(2 * c, num_classes)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        u2 = self.u2(torch.cat([self.up2(m), b], 1))
        u1 = self.u1(torch.cat([F.interpolate(u2, scale_factor=2.0, mode="bilinear", align_corners=False), a], 1))
        side = F.interpolate(self.side(m), scale_factor=4.0, mode="nearest")
        h = torch.cat([u1, side], 1).mean(dim=(2, 3))
        return self.head(h)


class RotaryBlock(nn.Module):
    """One attention block with rotary position embeddings (cos/sin of positions computed in the
    forward: Range, Sin, Cos in ONNX), a causal-free softmax attention, an MLP, mean pool, head."""

    def __init__(self, vocab=VOCAB, d=32, heads=2, num_classes=5):
        super().__init__()
        self.d, self.h = d, heads
        self.tok = nn.Embedding(vocab, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, num_classes)

    def rotate(self, x, cos, sin):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)

    def forward(self, tokens):
        n, t = tokens.shape
        dh = self.d // self.h
        x = self.tok(tokens)
        q, k, v = self.qkv(self.norm1(x)).reshape(n, t, 3, self.h, dh).permute(2, 0, 3, 1, 4)
        pos = torch.arange(t, dtype=torch.float32)
        inv = 1.0 / (10000.0 ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh))
        ang = pos[:, None] * inv[None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        att = torch.softmax(q @ k.transpose(-1, -2) / dh ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(n, t, self.d))
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(dim=1))


class TinyBERT(nn.Module):
    """BERT-style encoder: token + learned position + segment embeddings (segment 0 for the first
    half of the sequence, 1 for the second: BERT's sentence pair), LayerNorm, 2 post-norm encoder
    layers (GELU FFN) with BERT's padding mask (token 0; the "tokens-lm" inputs have none, the mask
    is computed all the same), and the MLM head: dense + GELU + LayerNorm, then the decoder tied to
    the token embedding with its own bias (as BERT's). Logits [N, T, vocab], token labels."""

    def __init__(self, vocab=VOCAB, d=64, heads=4, layers=2, seq=SEQ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.seg = nn.Embedding(2, d)
        self.register_buffer("positions", torch.arange(seq))
        self.register_buffer("segments", (torch.arange(seq) >= seq // 2).long())
        self.norm = nn.LayerNorm(d, eps=1e-12)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0,
                                           batch_first=True, norm_first=False, activation="gelu")
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.dense = nn.Linear(d, d)
        self.head_norm = nn.LayerNorm(d, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, tokens):
        h = self.norm(self.tok(tokens) + self.pos(self.positions) + self.seg(self.segments))
        h = self.body(h, src_key_padding_mask=tokens == 0)
        h = self.head_norm(F.gelu(self.dense(h)))
        return h @ self.tok.weight.t() + self.bias


class TinyRNN(nn.Module):
    """Embedding, a 2-layer nn.LSTM or nn.GRU (batch_first, zero initial state: ONNX LSTM / GRU,
    which the importer unrolls over the 16 steps), then either an LM head on every step (logits
    [N, T, vocab], token labels) or a classifier on the last step's output (logits [N, classes])."""

    def __init__(self, cell, lm, vocab=VOCAB, d=32, hidden=64, layers=2, num_classes=5):
        super().__init__()
        self.lm = lm
        self.tok = nn.Embedding(vocab, d)
        self.rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[cell](d, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab if lm else num_classes)

    def forward(self, tokens):
        h, _ = self.rnn(self.tok(tokens))
        return self.head(h if self.lm else h[:, -1])


def unet():
    torch.manual_seed(0)
    return SmallUNet()


def rotary():
    torch.manual_seed(0)
    return RotaryBlock()


def tv(name, **kw):
    import torchvision

    def build():
        torch.manual_seed(0)
        return getattr(torchvision.models, name)(weights=None, **kw)
    return build


def em_model(name):
    def build():
        return em.build_module(name)
    return build


def gpt():
    torch.manual_seed(0)
    return TinyGPT()


def bert():
    torch.manual_seed(0)
    return TinyBERT()


def lstm():
    torch.manual_seed(0)
    return TinyRNN("lstm", lm=True)


def gru():
    torch.manual_seed(0)
    return TinyRNN("gru", lm=False)


# name: (builder, input shape without batch, input kind, note)
MODELS = {
    "resnet18": (tv("resnet18", num_classes=10), (3, 32, 32), "image", ""),
    "resnet50": (tv("resnet50", num_classes=10), (3, 64, 64), "image", ""),
    "resnext50_32x4d": (tv("resnext50_32x4d", num_classes=10), (3, 64, 64), "image", ""),
    "wide_resnet50_2": (tv("wide_resnet50_2", num_classes=10), (3, 64, 64), "image", ""),
    "mobilenet_v2": (tv("mobilenet_v2", num_classes=10), (3, 32, 32), "image", ""),
    "mobilenet_v3_small": (tv("mobilenet_v3_small", num_classes=10), (3, 32, 32), "image", ""),
    "efficientnet_b0": (tv("efficientnet_b0", num_classes=10), (3, 32, 32), "image", ""),
    "regnet_y_400mf": (tv("regnet_y_400mf", num_classes=10), (3, 32, 32), "image", ""),
    "mnasnet0_5": (tv("mnasnet0_5", num_classes=10), (3, 32, 32), "image", ""),
    "shufflenet_v2_x0_5": (tv("shufflenet_v2_x0_5", num_classes=10), (3, 32, 32), "image", ""),
    "squeezenet1_1": (tv("squeezenet1_1", num_classes=10), (3, 64, 64), "image", ""),
    "densenet121": (tv("densenet121", num_classes=10), (3, 32, 32), "image", ""),
    "googlenet": (tv("googlenet", num_classes=10, aux_logits=False, init_weights=True), (3, 32, 32),
                  "image", ""),
    "inception_v3": (tv("inception_v3", num_classes=10, aux_logits=False, init_weights=True),
                     (3, 96, 96), "image", "needs >= 75x75"),
    "convnext_tiny": (tv("convnext_tiny", num_classes=10), (3, 32, 32), "image", ""),
    "vit_b_16": (tv("vit_b_16", num_classes=10, image_size=32), (3, 32, 32), "image",
                 "image_size=32: 4 patches + class token"),
    "swin_t": (tv("swin_t", num_classes=10), (3, 32, 32), "image", ""),
    "transformer": (em_model("transformer"), (SEQ,), "tokens",
                    "Embedding + 2 post-norm encoder layers with a padding mask, mean pool, head"),
    "unet": (unet, (3, 32, 32), "image",
             "GroupNorm, ConvTranspose, bilinear and nearest Resize, skip Concats; pooled head"),
    "rotary": (rotary, (SEQ,), "tokens-nopad",
               "rotary position embeddings (Range, Sin, Cos, strided Slice), attention, GELU MLP"),
    "gpt": (gpt, (SEQ,), "tokens-lm",
            "2 pre-norm causal layers, Gelu, output tied to the embedding; token labels [N,16]"),
    "bert": (bert, (SEQ,), "tokens-lm",
             "token + position + segment embeddings, 2 post-norm layers with a padding mask, MLM "
             "head (dense, GELU, LayerNorm, decoder tied to the embedding + bias); token labels [N,16]"),
    "lstm": (lstm, (SEQ,), "tokens-lm",
             "Embedding, 2-layer nn.LSTM (ONNX LSTM, unrolled by the importer), LM head; token labels [N,16]"),
    "gru": (gru, (SEQ,), "tokens-nopad",
            "Embedding, 2-layer nn.GRU (ONNX GRU, unrolled by the importer), classifier on the last step"),
}
BIG = {
    "alexnet": (tv("alexnet", num_classes=10), (3, 224, 224), "image", "224x224"),
    "vgg11_bn": (tv("vgg11_bn", num_classes=10), (3, 224, 224), "image", "224x224, 129M parameters"),
}

REDUCE_AXES_INPUT_AT_18 = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}


def upgrade(model, target):
    """An opset-17 model rewritten for `target` (18..21). Between 17 and 21 the ops torch writes
    change in two ways: Reduce* (but ReduceSum, already at 13) take `axes` as an input from 18, and
    Split needs `num_outputs` when it has no `split` input from 18. Everything else those versions
    changed is new types, new optional inputs/attributes with the old behaviour as the default, or
    ops torch 1.13 does not write (GroupNormalization-21's per-channel scale: torch writes
    InstanceNormalization)."""
    m = copy.deepcopy(model)
    assert all(o.version == 17 for o in m.opset_import if o.domain in ("", "ai.onnx"))
    g = m.graph
    for n in g.node:
        if n.op_type in REDUCE_AXES_INPUT_AT_18:
            axes = [a for a in n.attribute if a.name == "axes"]
            if axes:
                name = f"{n.name or n.output[0]}__axes18"
                g.initializer.append(numpy_helper.from_array(np.array(axes[0].ints, np.int64), name))
                n.attribute.remove(axes[0])
                del n.input[1:]
                n.input.append(name)
        elif n.op_type == "Split" and (len(n.input) < 2 or not n.input[1]):
            n.attribute.append(helper.make_attribute("num_outputs", len(n.output)))
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = target
    m.ir_version = max(m.ir_version, 9 if target < 21 else 10)
    return m


def make_input(kind, shape, batch, seed=0):
    rng = np.random.default_rng(seed)
    if kind.startswith("tokens"):
        x = rng.integers(1, VOCAB, size=(batch,) + shape).astype(np.int64)
        if kind == "tokens":
            x[:, -3:] = 0                           # trailing padding, as em.example_input
        return x
    return rng.standard_normal((batch,) + shape).astype(np.float32)


def make_labels(kind, batch, seed=0):
    rng = np.random.default_rng(seed + 1)
    if kind == "tokens-lm":
        return rng.integers(0, VOCAB, size=(batch, SEQ)).astype(np.int64)
    return rng.integers(0, 5 if kind.startswith("tokens") else 10, size=batch).astype(np.int64)


def zero_dropout(model):
    """Dropout and stochastic depth off, so one step is deterministic on both sides."""
    for mod in model.modules():
        if isinstance(mod, nn.modules.dropout._DropoutNd) or type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
        if isinstance(mod, nn.MultiheadAttention):
            mod.dropout = 0.0


def export(model, kind, shape, opset, mode, path):
    model.train(mode == "train")
    kw = dict(opset_version=opset, input_names=["x"], output_names=["logits"],
              dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    if mode == "train":
        kw.update(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    x = torch.from_numpy(make_input(kind, shape, 2, seed=3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, path, **kw)


def first_line(s, limit=160):
    lines = [ln.strip() for ln in (s or "").strip().splitlines() if ln.strip()]
    msg = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")
    return msg[:limit]


def run_cli(binary, args, timeout=900):
    t0 = time.time()
    p = subprocess.run([binary] + args, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0


def losses(metrics_csv):
    import csv
    with open(metrics_csv, newline="") as f:
        return [float(r["loss"]) for r in csv.DictReader(f) if r.get("loss") not in (None, "")]


def ort_check(path, kind, shape, expect_shape_of):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = make_input(kind, shape, 3, seed=5)
    out = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    if not np.isfinite(out).all():
        return "FAIL: non-finite outputs"
    if out.shape[1:] != expect_shape_of[1:]:
        return f"FAIL: output shape {list(out.shape)}, expected {list(expect_shape_of)}"
    return "ok"


# In float64 what still differs from torch are values ONNX and the command line hold in float32:
# the momentum ((1 - 0.9f) is 2.4e-7 off 0.1), learning rate, BatchNorm's epsilon attribute. Through
# the ill-conditioned BatchNorm steps of tiny batches (see torch_oracle) those reach 2e-6
# (MobileNet-V2); a wrong gradient is off by far more.
FP64_TOL = 1e-5
# BatchNorm's momentum attribute is float32 too: MNASNet's 0.9997 carries a 3e-5 relative error
# into (1 - momentum), the running statistics' update.
FP64_TOL_STATS = 1e-4


def to_float64(m):
    """The same model computing in float64: float initializers, Constant and ConstantOfShape
    tensors, graph inputs/outputs and Cast-to-float become double."""
    m = copy.deepcopy(m)
    g = m.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == onnx.TensorProto.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    for n in g.node:
        for at in n.attribute:
            if n.op_type == "Cast" and at.name == "to" and at.i == onnx.TensorProto.FLOAT:
                at.i = onnx.TensorProto.DOUBLE
            if at.type == onnx.AttributeProto.TENSOR and at.t.data_type == onnx.TensorProto.FLOAT:
                at.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(at.t).astype(np.float64), at.t.name))
    return m


def torch_oracle(model, kind, shape, onnx_path, binary, work, batch=4):
    """One SGD step (the paper's form, the CLI's default) by torch autograd against the CLI.

    First in float64 on both sides (the ONNX file converted by to_float64): the step then
    compares at FP64_TOL, whatever the conditioning. Where the CLI cannot run the model in float64 (an
    op without a double kernel), in float32 against torch's float64 and float32 steps: a tensor
    passes within tolerance of either, the tolerance widened per tensor to 3x torch's own float32
    error, and tensors where that error alone exceeds the tolerance are counted, not judged (tiny
    batches through BatchNorm at 1x1 are ill-conditioned: ResNet-50 at 32x32 and batch 4 moves
    torch's own float32 update 25 % away from its float64 one)."""
    m = onnx.load(onnx_path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    named = list(model.named_parameters())
    named += [(n, b) for n, b in model.named_buffers() if b.dtype.is_floating_point and n != "causal"]
    try:
        name_map = tmo.map_to_initializers(named, inits)
    except RuntimeError as e:
        return f"n/a ({str(e).splitlines()[1].strip()[:80]} ...)"
    has_bn = any(n.op_type == "BatchNormalization" for n in m.graph.node)
    w0 = {name_map[n]: t.detach().numpy().astype(np.float64) for n, t in named}
    x, y = make_input(kind, shape, batch, seed=11), make_labels(kind, batch, seed=11)

    keys = [n for n, _ in named]

    def cli_step(path, dtype, tag):
        data = os.path.join(work, "data" + tag)
        os.makedirs(data, exist_ok=True)
        np.save(os.path.join(data, "x.npy"), x.astype(dtype) if x.dtype.kind == "f" else x)
        np.save(os.path.join(data, "y.npy"), y)
        run = os.path.join(work, "oracle_run" + tag)
        p, _ = run_cli(binary, [path, "--data", data, "--steps", "1", "--batch-size", str(batch),
                                "--lr", str(tmo.LR), "--momentum", str(tmo.GAMMA), "--weight-decay",
                                str(tmo.WD), "--no-shuffle", "--loss", "cross-entropy", "--out", run,
                                "--overwrite", "--quiet"])
        if p.returncode != 0:
            return None, None, f"exit {p.returncode}: {first_line(p.stderr or p.stdout)}"
        stem = os.path.splitext(os.path.basename(path))[0]
        got = {i.name: numpy_helper.to_array(i)
               for i in onnx.load(os.path.join(run, stem + ".trained.onnx")).graph.initializer}
        return got, losses(os.path.join(run, "metrics.csv"))[0], None

    s64, loss = tmo.torch_step(copy.deepcopy(model).double(), keys, x, y)
    params = {n for n, _ in model.named_parameters()}
    path64 = os.path.join(work, "model_fp64.onnx")
    onnx.save(to_float64(m), path64)
    got, our_loss, err64 = cli_step(path64, np.float64, "64")
    if got is not None:
        worst = el = tmo.rel(our_loss, loss)
        bad = []
        for tname, _ in named:
            iname = name_map[tname]
            tol = FP64_TOL if tname in params else FP64_TOL_STATS
            r = tmo.compare(got[iname], s64[tname], w0[iname], tol, tol)
            worst = max(worst, r["ev"], r["eu"])
            if not (r["ev"] <= tol and r["eu"] <= tol):
                bad.append(iname)
        if bad or el > FP64_TOL:
            return f"FAIL fp64: {len(bad)} tensors off (e.g. {bad[:2]}), worst rel err {worst:.1e}"
        return f"ok fp64 ({worst:.0e})"

    tol_v, tol_u = (1e-3, 1e-2) if has_bn else (1e-4, 1e-3)
    s32, _ = tmo.torch_step(copy.deepcopy(model), keys, x, y)
    got, our_loss, err = cli_step(onnx_path, np.float32, "32")
    if got is None:
        return f"FAIL: {err}"
    worst = cond = 0.0
    unjudged = 0
    bad = []
    for tname, _ in named:
        iname = name_map[tname]
        cu = tmo.rel(s32[tname] - w0[iname], s64[tname] - w0[iname])
        cv = tmo.rel(s32[tname], s64[tname])
        r = min((tmo.compare(got[iname], ref[tname], w0[iname], max(tol_v, 3 * cv), max(tol_u, 3 * cu))
                 for ref in (s64, s32)), key=lambda r: r["score"])
        cond = max(cond, cu)
        if cu > tol_u:
            unjudged += 1
            continue
        worst = max(worst, r["ev"], 0.0 if r["floored"] else r["eu"])
        if not r["ok"]:
            bad.append(iname)
    el = tmo.rel(our_loss, loss)
    worst = max(worst, el)
    why64 = f" [fp64: {err64[:60]}]"
    if bad or el > tol_v:
        return (f"FAIL fp32: {len(bad)} tensors off (e.g. {bad[:2]}), loss rel err {el:.1e}, worst {worst:.1e}, "
                f"torch float32 vs float64 {cond:.1e}" + why64)
    note = f"; {unjudged} ill-conditioned not judged" if unjudged else ""
    return f"ok fp32 ({worst:.0e}{note})" + why64


def evaluate(name, spec, opset, mode, binary, work, log):
    builder, shape, kind, _ = spec
    row = {}
    model = builder()
    zero_dropout(model)
    tmo.make_distinct(model)
    fresh = copy.deepcopy(model)         # the exporter's trace updates BatchNorm statistics
    src17 = os.path.join(work, "model17.onnx")
    path = os.path.join(work, "model.onnx")
    try:
        if opset <= 17:
            export(model, kind, shape, opset, mode, path)
        else:
            export(model, kind, shape, 17, mode, src17)
            up = upgrade(onnx.load(src17), opset)
            onnx.save(up, path)
            import onnxruntime as ort
            x = make_input(kind, shape, 2, seed=9)
            a = ort.InferenceSession(src17, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            b = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            if not np.allclose(a, b, rtol=1e-5, atol=1e-6):
                row["export"] = "FAIL: the upgraded model computes other outputs in ONNX Runtime"
                return row
    except Exception as e:  # noqa: BLE001: an export failure is a row, not the end of the run
        row["export"] = f"FAIL: {type(e).__name__}: {str(e).splitlines()[0][:140]}"
        return row
    row["export"] = "ok"
    row["nodes"] = len(onnx.load(path, load_external_data=False).graph.node)
    # A small rate: these runs check the mechanics on random labels. At batch 4 and 32x32 many of
    # these networks are chaotic (BatchNorm over 4 values at 1x1; an eval export has no
    # normalization left): EfficientNet-B0 on 4 stages with stale weights ends in NaN at 0.005 by
    # step 3, while one stage does not, and its step-2 loss moves 12 % between rates 1e-6 and 1e-4.
    lm = ["--loss", "cross-entropy", "--lr", "0.0001"]

    p, _ = run_cli(binary, [path, "--gpus", "4", "--plan-only", "--batch-size", "4",
                            "--out", os.path.join(work, "plan"), "--overwrite", "--quiet"])
    row["plan4"] = "ok" if p.returncode == 0 else f"FAIL: {first_line(p.stderr or p.stdout)}"

    p, t = run_cli(binary, [path, "--steps", "1", "--batch-size", "2", "--out", os.path.join(work, "one"),
                            "--overwrite", "--quiet"] + lm)
    if p.returncode == 0:
        ls = losses(os.path.join(work, "one", "metrics.csv"))
        row["step1"] = "ok" if ls and all(np.isfinite(ls)) else f"FAIL: losses {ls}"
        row["step1_s"] = round(t, 1)
    else:
        row["step1"] = f"FAIL: {first_line(p.stderr or p.stdout)}"

    pipe = os.path.join(work, "pipe")
    # Batch 16: at 4, BatchNorm over 4 values at 1x1 makes the inconsistent weights of stale and
    # predicted 1F1B explode (MNASNet on 2 stages with stale weights at rate 1e-4: a BatchNorm scale
    # of 6e6 after 3 steps; at batch 16 and 32 it stays at 1.3, as on one stage at batch 4).
    p, t = run_cli(binary, [path, "--gpus", "4", "--steps", "3", "--batch-size", "16", "--out", pipe,
                            "--overwrite", "--quiet"] + lm)
    if p.returncode == 0:
        ls = losses(os.path.join(pipe, "metrics.csv"))
        row["pipe4"] = "ok" if len(ls) == 3 and all(np.isfinite(ls)) else f"FAIL: losses {ls}"
        ref_out = fresh.eval()(torch.from_numpy(make_input(kind, shape, 3, seed=5))).detach().numpy()
        try:
            row["ort"] = ort_check(os.path.join(pipe, "model.trained.onnx"), kind, shape, ref_out.shape)
        except Exception as e:  # noqa: BLE001
            row["ort"] = f"FAIL: {type(e).__name__}: {str(e).splitlines()[0][:140]}"
    else:
        row["pipe4"] = f"FAIL: {first_line(p.stderr or p.stdout)}"
        row["ort"] = "n/a (no trained model)"

    # An eval export folds BatchNorm into the convolutions (and ConvNeXt's layer scales): its
    # weights are no longer the module's and the mapping says so (n/a); where nothing was folded
    # (SqueezeNet, ViT, the transformers) the step is the same as in training mode.
    try:
        row["torch"] = torch_oracle(model, kind, shape, path, binary, work)
    except Exception as e:  # noqa: BLE001
        row["torch"] = f"FAIL: {type(e).__name__}: {str(e).splitlines()[0][:140]}"
    if mode == "eval" and row["torch"].startswith("n/a"):
        row["torch"] = "n/a (eval export: folded weights do not map to the module's)"
    return row


def cell(v):
    if v is None:
        return ""
    return v if len(v) <= 60 else v[:57] + "..."


def table(results, models, opsets, modes):
    cols = ["plan4", "step1", "pipe4", "ort", "torch"]
    out = ["| model | opset | mode | export | " + " | ".join(cols) + " |",
           "| --- | --- | --- | --- | " + " | ".join("---" for _ in cols) + " |"]
    for name in models:
        for opset in opsets:
            for mode in modes:
                r = results.get(f"{name}/{opset}/{mode}")
                if r is None:
                    continue
                out.append(f"| {name} | {opset} | {mode} | {cell(r.get('export'))} | "
                           + " | ".join(cell(r.get(c, "")) for c in cols) + " |")
    return "\n".join(out)


def matrix(results, models, opsets, modes):
    """One line per model, one cell per opset x mode: `ok` when every check passed (`ok fp64` when
    the PyTorch step was compared in float64 as well), else the checks that did not pass."""
    cols = [(o, m) for o in opsets for m in modes]
    out = ["| model | " + " | ".join(f"op{o} {m}" for o, m in cols) + " |",
           "| --- | " + " | ".join("---" for _ in cols) + " |"]
    for name in models:
        cells = []
        for o, m in cols:
            r = results.get(f"{name}/{o}/{m}")
            if r is None:
                cells.append("not run")
                continue
            bad = [c for c in ("export", "plan4", "step1", "pipe4", "ort", "torch")
                   if r.get(c) and not (r[c].startswith("ok") or r[c].startswith("n/a"))]
            if bad:
                cells.append("FAIL " + ", ".join(bad))
            else:
                cells.append("ok fp64" if "fp64" in r.get("torch", "") else "ok")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--opsets", nargs="*", type=int, default=[13, 17, 18, 21])
    ap.add_argument("--modes", nargs="*", default=["train", "eval"])
    ap.add_argument("--bin", default=os.environ.get("PIPETRAIN_BIN",
                                                    os.path.join(ROOT, "build", "tools", "onnx-pipetrain")))
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "pipetrain-zoo"))
    ap.add_argument("--big", action="store_true")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    torch.set_num_threads(2)
    zoo = dict(MODELS)
    if a.big:
        zoo.update(BIG)
    models = a.models or list(zoo)
    unknown = [m for m in models if m not in zoo and m not in BIG]
    if unknown:
        sys.exit(f"zoo.py: unknown model(s) {unknown}; known: {sorted(list(MODELS) + list(BIG))}")
    zoo.update(BIG)
    os.makedirs(a.out, exist_ok=True)
    json_path = os.path.join(a.out, "zoo.json")
    results = {}
    if os.path.exists(json_path) and not a.fresh:
        with open(json_path) as f:
            results = json.load(f)
    for name in models:
        for opset in a.opsets:
            for mode in a.modes:
                key = f"{name}/{opset}/{mode}"
                if key in results:
                    continue
                work = os.path.join(a.out, name, f"op{opset}-{mode}")
                os.makedirs(work, exist_ok=True)
                t0 = time.time()
                try:
                    row = evaluate(name, zoo[name], opset, mode, a.bin, work, print)
                except Exception:  # noqa: BLE001
                    row = {"export": "FAIL: " + traceback.format_exc().strip().splitlines()[-1][:140]}
                row["seconds"] = round(time.time() - t0, 1)
                results[key] = row
                print(f"{key}: " + ", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                with open(json_path + ".tmp", "w") as f:
                    json.dump(results, f, indent=1)
                os.replace(json_path + ".tmp", json_path)
    md = matrix(results, models, a.opsets, a.modes) + "\n\n" + table(results, models, a.opsets, a.modes)
    print(md)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md + "\n")


if __name__ == "__main__":
    main()
