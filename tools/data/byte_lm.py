#!/usr/bin/env python3
"""Exports a small byte-level GPT (a causal language model over the 256 byte values) to ONNX, for
training on text with --data FILE.txt --tokenizer bytes: token + learned position embeddings,
pre-LN decoder blocks (causal attention, GELU MLP), a final LayerNorm and a head predicting the
next byte at every position: input `tokens` int64 [batch, T], output `logits` [batch, T, 256].

  /usr/bin/python3 tools/data/byte_lm.py OUT.onnx [--seq 64] [--width 64] [--layers 2] [--heads 4]
"""
import argparse
import os
import sys
import warnings

import torch
from torch import nn

# The decoder block of the zoo's GPT (tools/bench/peer_models.py): pre-LN, causal attention, GELU MLP.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from peer_models import Block  # noqa: E402


class ByteLM(nn.Module):
    def __init__(self, seq=64, d=64, layers=2, heads=4, vocab=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.blocks = nn.Sequential(*[Block(d, heads, seq) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.ln(self.blocks(self.tok(tokens) + self.pos)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    a = ap.parse_args()
    torch.manual_seed(0)
    m = ByteLM(a.seq, a.width, a.layers, a.heads, a.vocab).eval()
    x = torch.randint(0, a.vocab, (2, a.seq))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on constant Python floats
        torch.onnx.export(m, (x,), a.out, input_names=["tokens"], output_names=["logits"], opset_version=17,
                          dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}})
    print(f"{a.out}: byte-level GPT, {sum(p.numel() for p in m.parameters())} parameters, {a.seq} tokens")


if __name__ == "__main__":
    main()
