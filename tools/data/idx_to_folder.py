#!/usr/bin/env python3
"""Writes an IDX image set (MNIST-style, such as Debian's dataset-fashion-mnist) as an image folder:
OUT/<class>/<index>.png|jpg, the layout torchvision's ImageFolder reads and --data takes.

  tools/data/idx_to_folder.py /usr/share/datasets/fashion-mnist/train OUT --count 2000 --format png
  --size 32 resizes (bilinear), --rgb writes 3 channels; --format mixed alternates PNG and JPEG.
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np
from PIL import Image

FASHION = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle-boot"]


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: not a uint8 IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(prefix, needle):
    folder, stem = os.path.split(prefix)
    hits = sorted(n for n in os.listdir(folder or ".") if n.startswith(stem) and needle in n)
    if len(hits) != 1:
        sys.exit(f"{prefix}: expected one *{needle}* file, found {hits}")
    return os.path.join(folder, hits[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix", help="IDX prefix, such as /usr/share/datasets/fashion-mnist/train")
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=0, help="the first N images (0: all)")
    ap.add_argument("--format", choices=["png", "jpg", "mixed"], default="png")
    ap.add_argument("--size", type=int, default=0, help="resize to SIZE x SIZE (0: as they are)")
    ap.add_argument("--rgb", action="store_true", help="write RGB images (the gray value in every channel)")
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality")
    a = ap.parse_args()
    x = read_idx(find(a.prefix, "images"))
    y = read_idx(find(a.prefix, "labels"))
    n = len(x) if a.count <= 0 else min(a.count, len(x))
    names = FASHION if int(y.max()) < len(FASHION) else [str(c) for c in range(int(y.max()) + 1)]
    for c in sorted(set(int(v) for v in y[:n])):
        os.makedirs(os.path.join(a.out, f"{c}-{names[c]}"), exist_ok=True)
    for i in range(n):
        im = Image.fromarray(x[i], "L")
        if a.size:
            im = im.resize((a.size, a.size), Image.BILINEAR)
        if a.rgb:
            im = im.convert("RGB")
        ext = a.format if a.format != "mixed" else ("png" if i % 2 == 0 else "jpg")
        c = int(y[i])
        path = os.path.join(a.out, f"{c}-{names[c]}", f"{i:06d}.{ext}")
        if ext == "jpg":
            im.save(path, quality=a.quality)
        else:
            im.save(path)
    print(f"{a.out}: {n} images in {len(set(int(v) for v in y[:n]))} class folders")


if __name__ == "__main__":
    main()
