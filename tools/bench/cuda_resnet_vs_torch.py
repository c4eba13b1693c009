#!/usr/bin/env python3
"""The convolution + BatchNormalization work of one ResNet-18 training step (32x32, batch B) in
PyTorch, shape by shape as cuda_resnet_bench times it through our CUDA kernels, and the ratio.

    python3 tools/bench/cuda_resnet_vs_torch.py BENCH_BINARY [--batch 64] [--iters 20]

Both sides run FP32 without TF32 (our default; --precision tf32 and
torch.backends.cudnn.allow_tf32 change both) and without cudnn.benchmark (we use cuDNN's
heuristics, not trial runs). Prints one table; exit 0 when both ran, 1 on failure, 77 without a
GPU or without torch.
"""
import argparse
import json
import subprocess
import sys

SHAPES = [  # name, cin, cout, hw, k, stride, count: as cuda_resnet_bench.cpp
    ("stem", 3, 64, 32, 3, 1, 1), ("l1", 64, 64, 32, 3, 1, 4),
    ("l2_first", 64, 128, 32, 3, 2, 1), ("l2_down", 64, 128, 32, 1, 2, 1), ("l2", 128, 128, 16, 3, 1, 3),
    ("l3_first", 128, 256, 16, 3, 2, 1), ("l3_down", 128, 256, 16, 1, 2, 1), ("l3", 256, 256, 8, 3, 1, 3),
    ("l4_first", 256, 512, 8, 3, 2, 1), ("l4_down", 256, 512, 8, 1, 2, 1), ("l4", 512, 512, 4, 3, 1, 3),
]


def torch_times(batch, iters):
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    out = {}
    for name, cin, cout, hw, k, stride, _ in SHAPES:
        p = k // 2
        oh = (hw + 2 * p - k) // stride + 1
        x = torch.randn(batch, cin, hw, hw, device=dev)
        w = torch.randn(cout, cin, k, k, device=dev)
        dy = torch.randn(batch, cout, oh, oh, device=dev)
        y = torch.randn(batch, cout, oh, oh, device=dev)
        s, b = torch.randn(cout, device=dev), torch.randn(cout, device=dev)
        rm, rv = torch.zeros(cout, device=dev), torch.ones(cout, device=dev)

        def fwd():
            F.conv2d(x, w, stride=stride, padding=p)

        def bwd_data():
            torch.nn.grad.conv2d_input(x.shape, w, dy, stride=stride, padding=p)

        def bwd_filter():
            torch.nn.grad.conv2d_weight(x, w.shape, dy, stride=stride, padding=p)

        yb = y.clone().requires_grad_(True)
        sb = s.clone().requires_grad_(True)
        bb = b.clone().requires_grad_(True)

        def bn_fwd():
            F.batch_norm(y, rm, rv, s, b, training=True, momentum=0.1)

        def bn_bwd():
            z = F.batch_norm(yb, rm, rv, sb, bb, training=True, momentum=0.1)
            torch.autograd.grad(z, (yb, sb, bb), dy)

        total = 0.0
        for fn in (fwd, bwd_data, bwd_filter, bn_fwd):
            total += time_ms(torch, fn, iters)
        # bn_bwd includes one forward: count only the backward part.
        total += max(time_ms(torch, bn_bwd, iters) - time_ms(torch, bn_fwd, iters), 0.0)
        out[name] = total
    return out


def time_ms(torch, fn, iters):
    for _ in range(3):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    r = subprocess.run([args.bench, "--batch", str(args.batch), "--iters", str(args.iters), "--json"],
                       capture_output=True, text=True)
    sys.stdout.write("".join(l + "\n" for l in r.stdout.splitlines() if l.startswith("validate")))
    if r.returncode == 77:
        print(r.stdout.strip())
        return 77
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        print("FAIL: cuda_resnet_bench exit %d" % r.returncode)
        return 1
    ours = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no GPU")
        theirs = torch_times(args.batch, args.iters)
    except Exception as e:  # noqa: BLE001 - report and skip the comparison
        print("ours: %.3f ms (no PyTorch comparison: %s)" % (ours["total_ms"], e))
        return 77
    print("%-9s %5s %10s %10s %7s" % ("shape", "count", "ours_ms", "torch_ms", "ratio"))
    t_total = 0.0
    for row in ours["shapes"]:
        t = theirs[row["name"]]
        t_total += row["count"] * t
        print("%-9s %5d %10.3f %10.3f %7.2f" % (row["name"], row["count"], row["ms"], t, row["ms"] / t if t else 0))
    print("conv+bn of a ResNet-18 step, batch %d: ours %.3f ms, PyTorch %.3f ms, ratio %.2f (lower is better)"
          % (args.batch, ours["total_ms"], t_total, ours["total_ms"] / t_total if t_total else 0))
    print("allocator: " + ours["allocator"])
    print("RESULT ours_ms=%.3f torch_ms=%.3f ratio=%.2f" % (ours["total_ms"], t_total,
                                                              ours["total_ms"] / t_total if t_total else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
