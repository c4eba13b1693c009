#!/usr/bin/env python3
"""Image-folder loading, measured: images/s of read + decode + random resized crop + flip into a
batch, by onnx-pipetrain's loader (tools/bench/loader_bench.cpp) and by torchvision's ImageFolder +
DataLoader on the same files (the peer, same transforms, same worker count), for 3x32x32 and
3x64x64 JPEGs written from Fashion-MNIST; then ResNet-18 trained on the 32x32 folder with --augment
crop,flip, to see whether its stage waits for data.

  /usr/bin/python3 tools/bench/loader_bench.py [--build build] [--count 10000] [--threads 1 2]

Targets (issue #32): at least 10,000 images/s at 32x32 and 4,000 at 64x64 on 2 cores, and the
stages never waiting for data on ResNet-18.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
FASHION = "/usr/share/datasets/fashion-mnist/train"


def make_folder(path, size, count):
    if not os.path.isdir(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/data/idx_to_folder.py"), FASHION, path, "--count",
                        str(count), "--format", "jpg", "--size", str(size), "--rgb"], check=True, capture_output=True)
    return path


def ours(exe, folder, size, threads, seconds):
    p = subprocess.run([exe, folder, "--size", str(size), "--threads", str(threads), "--seconds", str(seconds)],
                       capture_output=True, text=True, check=True)
    return float(re.search(r"([0-9.]+) images/s", p.stdout).group(1))


def torchvision_rate(folder, size, workers, seconds):
    import torch
    from torchvision import datasets, transforms
    t = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.ToTensor()])
    ds = datasets.ImageFolder(folder, transform=t)
    torch.set_num_threads(1)
    dl = torch.utils.data.DataLoader(ds, batch_size=256, shuffle=True, num_workers=workers, drop_last=True,
                                     persistent_workers=workers > 0)
    n, t0 = 0, None
    while True:
        for x, _ in dl:
            if t0 is None:  # the first batch starts the workers
                t0 = time.perf_counter()
                continue
            n += x.shape[0]
            if time.perf_counter() - t0 >= seconds:
                return n / (time.perf_counter() - t0)


def resnet_run(pipetrain, folder, out):
    import torch
    import peer_models
    model = os.path.join(out, "resnet18.onnx")
    if not os.path.exists(model):
        m = peer_models.build("resnet18")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, torch.randn(2, 3, 32, 32), model, opset_version=13,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                              input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    p = subprocess.run([pipetrain, model, "--data", folder, "--augment", "crop,flip", "--batch-size", "64",
                        "--steps", "60", "--log-every", "20", "--out", os.path.join(out, "run"), "--overwrite"],
                       capture_output=True, text=True)
    text = p.stdout + p.stderr
    loader = re.findall(r"loader ([0-9]+)/s", text)
    sps = re.search(r"done: .*\(([0-9.]+) samples/s\)", text)
    return ("stages wait for data" in text or "waited for data" in text), (loader[-1] if loader else "?"), \
        (sps.group(1) if sps else "?"), p.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "pipetrain-loader-bench"))
    a = ap.parse_args()
    exe = os.path.join(a.build, "tools/bench/loader_bench")
    pipetrain = os.path.join(a.build, "tools/onnx-pipetrain")
    os.makedirs(a.work, exist_ok=True)
    print(f"{'images':10} {'threads':>7} {'ours img/s':>11} {'torchvision img/s':>18} {'ratio':>6}")
    for size in (32, 64):
        folder = make_folder(os.path.join(a.work, f"fashion{size}"), size, a.count)
        for t in a.threads:
            mine = ours(exe, folder, size, t, a.seconds)
            peer = torchvision_rate(folder, size, 0 if t == 1 else t, a.seconds)
            print(f"3x{size}x{size:<5} {t:>7} {mine:>11.0f} {peer:>18.0f} {mine / peer:>5.1f}x", flush=True)
    waits, loader, sps, rc = resnet_run(pipetrain, os.path.join(a.work, "fashion32"), a.work)
    print(f"resnet18 3x32x32, --augment crop,flip, batch 64: {sps} samples/s, loader {loader} images/s, "
          f"{'stages WAITED for data' if waits else 'the stage never waited for data'} (exit {rc})")


if __name__ == "__main__":
    main()
