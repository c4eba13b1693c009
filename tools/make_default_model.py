#!/usr/bin/python3
# Builds onnx-pipetrain's bundled models: a small dense classifier for sklearn's digits
# (models/digits_mlp.onnx) with its train/val split as x.npy + y.npy folders, and the demo's LeNet-5
# with BatchNorm for Fashion-MNIST (models/fashion_lenet5_bn.onnx; tools/demo.sh trains it).
# Deterministic and idempotent. Run: /usr/bin/python3 tools/make_default_model.py [MODELS_DIR]
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_models import LeNet5BN  # noqa: E402  (the model zoo's lenet_bn, one definition)

DATA_SEED = 20240601   # fixed shuffle of the 1,797 digits
N_TRAIN = 1437         # the remaining 360 are the validation split


def build_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(64, 64), nn.ReLU(),
        nn.Linear(64, 32), nn.ReLU(),
        nn.Linear(32, 10),
    ).eval()


def export(model, path):
    dummy = torch.zeros(1, 64, dtype=torch.float32)
    torch.onnx.export(
        model, dummy, path, opset_version=13, do_constant_folding=True,
        input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


def export_lenet(path):
    """LeNet-5 with BatchNorm2d after each conv, torch.manual_seed(0), exported in training mode so
    that BatchNormalization stays a node (the default evaluation export folds it into Conv). The
    exporter's one tracing forward (on a fixed seeded input) updates the running statistics once."""
    torch.manual_seed(0)
    model = LeNet5BN().train()
    dummy = torch.randn(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():  # the exporter's notes on BatchNorm's in-place statistics
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, dummy, path, opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False, input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})


def write_npy(path, arr):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, arr)
    print(f"wrote {path}  {arr.dtype} {list(arr.shape)}")


def main():
    models_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "models")
    models_dir = os.path.normpath(models_dir)
    os.makedirs(models_dir, exist_ok=True)

    onnx_path = os.path.join(models_dir, "digits_mlp.onnx")
    export(build_model(), onnx_path)
    print(f"wrote {onnx_path}  ({os.path.getsize(onnx_path)} bytes; input 'input' "
          f"float32 [batch,64] -> 'logits' [batch,10])")

    lenet_path = os.path.join(models_dir, "fashion_lenet5_bn.onnx")
    export_lenet(lenet_path)
    print(f"wrote {lenet_path}  ({os.path.getsize(lenet_path)} bytes; input 'input' "
          f"float32 [batch,1,28,28] -> 'logits' [batch,10])")

    digits = load_digits()
    x = (digits.data.astype(np.float32) / np.float32(16.0)).astype(np.float32)
    y = digits.target.astype(np.int64)
    perm = np.random.default_rng(DATA_SEED).permutation(len(x))
    x, y = np.ascontiguousarray(x[perm]), np.ascontiguousarray(y[perm])
    for split, sl in (("train", slice(0, N_TRAIN)), ("val", slice(N_TRAIN, None))):
        write_npy(os.path.join(models_dir, "digits", split, "x.npy"), x[sl])
        write_npy(os.path.join(models_dir, "digits", split, "y.npy"), y[sl])


if __name__ == "__main__":
    main()
