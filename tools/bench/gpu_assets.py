#!/usr/bin/python3
"""The model and data that tools/gpu-check.sh trains on the GPU machine, small enough to carry.

    /usr/bin/python3 tools/bench/gpu_assets.py pack OUTDIR     (here: needs torch, torchvision, onnx)
    python3 tools/bench/gpu_assets.py init SKELETON OUT [--seed S]   (anywhere: numpy + onnx only)

pack writes
  OUTDIR/resnet18.skeleton.onnx  tools/export_models.py's resnet18 (torchvision resnet18, 10 classes,
                                 input x [batch,3,32,32], opset 13, training-mode export: keeps
                                 BatchNormalization) with its conv and fc weights zeroed, so that
                                 xz packs it to a few hundred KB instead of ~41 MB (the weights are
                                 random floats). The zeroed names are listed in the model's
                                 metadata_props "pipetrain.zeroed_weights".
  OUTDIR/fmnist32/{train,val}/{x,y}.npy
                                 Fashion-MNIST (Debian's dataset-fashion-mnist): the first 6,400
                                 training and first 1,000 t10k images, zero-padded to 32x32 and
                                 repeated over 3 channels: x uint8 [N,3,32,32] (onnx-pipetrain scales
                                 it to [0, 1]), y uint8 [N] in 0..9. Real data, so a falling loss
                                 means learning, not memorising noise.
init fills the zeroed weights again, seeded: conv weights [O,I,kh,kw] from N(0, 2/(O*kh*kw))
(torchvision's ResNet init, kaiming normal, fan-out), fc weights from U(+-1/sqrt(fan_in)), and
clears the metadata entry. Works with onnx 1.12 / numpy 1.24 (here) and the GPU machine's newer ones.
"""
import argparse
import gzip
import os
import sys

import numpy as np

ZEROED_KEY = "pipetrain.zeroed_weights"
FMNIST = "/usr/share/datasets/fashion-mnist"
N_TRAIN, N_VAL = 6400, 1000


def read_idx(path, header):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    return np.frombuffer(raw, np.uint8, offset=header)


def fmnist32(prefix, n):
    imgs = read_idx(f"{FMNIST}/{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)[:n]
    labels = read_idx(f"{FMNIST}/{prefix}-labels-idx1-ubyte.gz", 8)[:n].copy()
    x = np.zeros((len(imgs), 3, 32, 32), np.uint8)
    x[:, :, 2:30, 2:30] = imgs[:, None, :, :]
    return x, labels


def pack(outdir):
    import onnx
    from onnx import numpy_helper
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from export_models import build_module, export_torch

    os.makedirs(outdir, exist_ok=True)
    full = os.path.join(outdir, "resnet18.full.onnx")
    export_torch(build_module("resnet18"), "resnet18", 13, "train", full)
    m = onnx.load(full)
    os.remove(full)
    zeroed = []
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32 and a.ndim >= 2:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.zeros_like(a), t.name))
            zeroed.append(t.name)
    m.metadata_props.add(key=ZEROED_KEY, value=",".join(zeroed))
    onnx.save(m, os.path.join(outdir, "resnet18.skeleton.onnx"))
    for split, prefix, n in (("train", "train", N_TRAIN), ("val", "t10k", N_VAL)):
        d = os.path.join(outdir, "fmnist32", split)
        os.makedirs(d, exist_ok=True)
        x, y = fmnist32(prefix, n)
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "y.npy"), y)
    print(f"gpu_assets: resnet18.skeleton.onnx ({len(zeroed)} weights zeroed), fmnist32 train {N_TRAIN}, "
          f"val {N_VAL} in {outdir}")
    return 0


def init(skeleton, out, seed):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(skeleton)
    props = {p.key: p for p in m.metadata_props}
    if ZEROED_KEY not in props:
        print(f"gpu_assets: {skeleton}: no {ZEROED_KEY} entry: not a skeleton", file=sys.stderr)
        return 2
    names = set(filter(None, props[ZEROED_KEY].value.split(",")))
    rng = np.random.default_rng(seed)
    done = 0
    for i, t in enumerate(m.graph.initializer):
        if t.name not in names:
            continue
        shape = tuple(numpy_helper.to_array(t).shape)
        if len(shape) == 4:
            std = np.sqrt(2.0 / (shape[0] * shape[2] * shape[3]))
            a = rng.normal(0.0, std, shape)
        else:
            bound = 1.0 / np.sqrt(shape[-1])
            a = rng.uniform(-bound, bound, shape)
        m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.float32), t.name))
        done += 1
    keep = [p for p in m.metadata_props if p.key != ZEROED_KEY]
    del m.metadata_props[:]
    m.metadata_props.extend(keep)
    onnx.save(m, out)
    print(f"gpu_assets: {out}: {done} weights initialised (seed {seed})")
    return 0 if done == len(names) else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("outdir")
    i = sub.add_parser("init")
    i.add_argument("skeleton")
    i.add_argument("out")
    i.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    return pack(a.outdir) if a.cmd == "pack" else init(a.skeleton, a.out, a.seed)


if __name__ == "__main__":
    sys.exit(main())
