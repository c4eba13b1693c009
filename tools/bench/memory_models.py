#!/usr/bin/python3
"""Exports the models of the memory benchmark (tools/bench/memory_bench.py) with torch.

Run: /usr/bin/python3 tools/bench/memory_models.py OUTDIR [--only NAME ...]

  resnet50   torchvision resnet50(num_classes=1000), input [N,3,224,224] (training-mode export:
             BatchNormalization kept)
  vit        a small ViT: torchvision VisionTransformer(image_size=32, patch_size=4, 4 layers,
             4 heads, hidden 192, mlp 768, 10 classes), input [N,3,32,32]
  bert       a BERT-style encoder: Embedding(1000, 256) + learned positions + 4 post-norm
             TransformerEncoder layers (d_model 256, 4 heads, ffn 1024, GELU), mean pool,
             Linear(256, 2); input int64 tokens [N,64]

Random init (torch.manual_seed(0)), dynamic batch axis on "x"; writes OUTDIR/<name>.onnx, and for
bert a token data set OUTDIR/bert_data/{x,y}.npy (64 samples; the CLI's synthetic data is float32,
which a token input cannot take).
"""
import argparse
import os
import warnings

import numpy as np
import torch
import torch.nn as nn
import torchvision


class Bert(nn.Module):
    def __init__(self, vocab=1000, d=256, heads=4, ffn=1024, layers=4, seq=64, classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.enc(self.emb(x) + self.pos)
        return self.head(h.mean(dim=1))


def build(name):
    torch.manual_seed(0)
    if name == "resnet50":
        return torchvision.models.resnet50(num_classes=1000), torch.randn(2, 3, 224, 224)
    if name == "vit":
        m = torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=4, num_heads=4,
                                                 hidden_dim=192, mlp_dim=768, dropout=0.0, num_classes=10)
        return m, torch.randn(2, 3, 32, 32)
    if name == "bert":
        return Bert(), torch.randint(0, 1000, (2, 64))
    raise ValueError(name)


MODELS = ["resnet50", "vit", "bert"]


def export(name, out_dir):
    model, x = build(name)
    model.train()
    path = os.path.join(out_dir, name + ".onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, path, opset_version=13, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--only", nargs="*", default=MODELS)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    for name in a.only:
        p = export(name, a.out_dir)
        if name == "bert":
            d = os.path.join(a.out_dir, "bert_data")
            os.makedirs(d, exist_ok=True)
            rng = np.random.default_rng(0)
            np.save(os.path.join(d, "x.npy"), rng.integers(0, 1000, (64, 64), dtype=np.int64))
            np.save(os.path.join(d, "y.npy"), rng.integers(0, 2, (64,), dtype=np.int64))
        print(f"{name}: {p} ({os.path.getsize(p) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
