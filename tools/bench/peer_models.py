"""The models of tools/bench/peers.py: torch modules built after torch.manual_seed(0), so that the
ONNX export (the file every side trains) and PyTorch eager start from the same weights.

name -> (builder, batch, input spec, classes); the input spec is a sample shape, or ("tokens", T, V)
for int64 token inputs. Sizes are kept small so that a run takes minutes on 2 cores.
"""
import math
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))   # tools/: export_models


class SmallCNN(nn.Module):
    """Two 3x3 conv + BatchNorm + ReLU layers on 1x8x8 images (sklearn digits' size), a Linear head."""

    def __init__(self, classes=10):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.MaxPool2d(2), nn.Flatten())
        self.head = nn.Linear(32 * 4 * 4, classes)

    def forward(self, x):
        return self.head(self.body(x))


class EncoderNoMask(nn.Module):
    """export_models' TransformerClassifier (2 post-LN layers, d_model 64, 4 heads, ff 128) without
    its padding mask and with dropout 0 (every side then computes the same function)."""

    def __init__(self):
        super().__init__()
        from export_models import build_module
        self.m = build_module("transformer", dropout=0.0)

    def forward(self, tokens):
        m = self.m
        return m.head(m.encoder(m.embed(tokens)).mean(dim=1))


class Block(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads
        pos = torch.arange(seq)
        self.register_buffer("future", pos[None, :] > pos[:, None], persistent=False)   # bool, not trained

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(d // h))
        s = s.masked_fill(self.future, -1e9)
        a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    """GPT-style decoder: token + learned position embeddings, 2 pre-LN blocks (causal attention,
    GELU MLP), a final LayerNorm, classes predicted from the last position."""

    def __init__(self, vocab=100, d=64, heads=4, layers=2, seq=32, classes=10):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads, seq) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.ln(self.blocks(self.tok(tokens) + self.pos))
        return self.head(h[:, -1, :])


def _tv(name):
    import torchvision
    return getattr(torchvision.models, name)(weights=None, num_classes=10)


MODELS = {
    "small_cnn": (SmallCNN, 64, (1, 8, 8), 10),
    "lenet_bn": (lambda: __import__("export_models").LeNet5BN(), 64, (1, 28, 28), 10),
    "resnet18": (lambda: _tv("resnet18"), 32, (3, 32, 32), 10),
    "transformer": (EncoderNoMask, 32, ("tokens", 16, 100), 5),
    "gpt": (TinyGPT, 32, ("tokens", 32, 100), 10),
    "mobilenet_v2": (lambda: _tv("mobilenet_v2"), 32, (3, 32, 32), 10),
}


def build(name):
    torch.manual_seed(0)
    return MODELS[name][0]().float()


def make_batch(name, seed=0):
    _, batch, shape, classes = MODELS[name]
    g = torch.Generator().manual_seed(seed)
    if shape[0] == "tokens":
        x = torch.randint(1, shape[2], (batch, shape[1]), generator=g)
    else:
        x = torch.randn((batch,) + tuple(shape), generator=g)
    return x, torch.randint(0, classes, (batch,), generator=g)


def describe(name):
    _, batch, shape, classes = MODELS[name]
    s = f"{shape[1]} tokens of {shape[2]}" if shape[0] == "tokens" else "x".join(map(str, shape))
    return f"{s}, batch {batch}, {classes} classes"
