"""References for tests/runtime/data_stream_test.cpp (image folders, runtime/data/image_folder.cpp):
writes a small image folder in torchvision's ImageFolder layout into OUT_DIR/folder and what
torchvision makes of it into OUT_DIR:
  classes.txt  ImageFolder(folder).classes, one a line
  targets.npy  its targets (int64), in its sample order
  x20.npy      ToTensor(loader(path)) of each sample (RGB, [N, 3, 20, 20] float32)
  x20_L.npy    ToTensor(Image.open(path).convert("L")) ([N, 1, 20, 20])
  x32.npy      interpolate(ToTensor(img)[None] * 255, (32, 32), bilinear, align_corners=False,
               antialias=True) / 255 ([N, 3, 32, 32]): the model input of 3x32x32
The folder's class names sort non-trivially ("C" < "a_x" < "b"), one class nests folders whose
names sort differently from a depth-first walk ("sub" < "sub-1" < "sub/inner"), files are .png,
.JPG and .jpeg (RGB, gray, palette, RGBA, and a file named just ".png"), and a .txt is ignored.
Run: /usr/bin/python3 tests/runtime/data_stream_reference.py OUT_DIR (exit 77 when PIL, torch or
torchvision is missing).
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torchvision
    from PIL import Image
    from torchvision import transforms
except ImportError as e:
    print(f"data_stream_reference.py: {e} (needs numpy, PIL, torch and torchvision)")
    sys.exit(77)

OUT = sys.argv[1]
ROOT = os.path.join(OUT, "folder")
rng = np.random.default_rng(81)


def picture(c, k):
    """20x20 gradients plus noise (content like a photograph's, which JPEG keeps)."""
    y, x = np.mgrid[0:20, 0:20].astype(np.float64)
    planes = [128 + 100 * np.sin(x / (3 + j + k) + y / (5 + 2 * j) + k) for j in range(c)]
    a = np.stack(planes, axis=-1) + rng.normal(0, 10, (20, 20, c))
    a = np.clip(np.rint(a), 0, 255).astype(np.uint8)
    return Image.fromarray(a[:, :, 0] if c == 1 else a, "L" if c == 1 else ("RGBA" if c == 4 else "RGB"))


def save(rel, im, **kw):
    p = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    im.save(p, format=kw.pop("format"), **kw)


save("b/z.png", picture(3, 0), format="PNG")
save("b/y.jpeg", picture(1, 1), format="JPEG", quality=90)
save("a_x/k.JPG", picture(3, 2), format="JPEG", quality=85)
save("a_x/.png", picture(3, 3), format="PNG")
save("a_x/sub/m.png", picture(1, 4), format="PNG")
save("a_x/sub-1/q.png", picture(4, 5), format="PNG")
save("a_x/sub/inner/r.jpeg", picture(3, 6), format="JPEG", quality=95, subsampling=0)
save("C/1.png", picture(3, 7).quantize(colors=16), format="PNG")
save("C/2.jpg", picture(3, 8), format="JPEG", quality=90)
save("C/A.png", picture(1, 9), format="PNG")
with open(os.path.join(ROOT, "b", "notes.txt"), "w") as f:
    f.write("not an image\n")

ds = torchvision.datasets.ImageFolder(ROOT)
to_tensor = transforms.ToTensor()
x20, x20_l, x32 = [], [], []
for path, _ in ds.samples:
    img = ds.loader(path)  # PIL's open + convert("RGB")
    t = to_tensor(img)
    x20.append(t.numpy())
    with open(path, "rb") as f:
        x20_l.append(to_tensor(Image.open(f).convert("L")).numpy())
    r = F.interpolate(t[None] * 255, size=(32, 32), mode="bilinear", align_corners=False, antialias=True) / 255
    x32.append(r[0].numpy())

with open(os.path.join(OUT, "classes.txt"), "w") as f:
    f.write("".join(c + "\n" for c in ds.classes))
np.save(os.path.join(OUT, "targets.npy"), np.asarray(ds.targets, dtype=np.int64))
np.save(os.path.join(OUT, "x20.npy"), np.stack(x20).astype(np.float32))
np.save(os.path.join(OUT, "x20_L.npy"), np.stack(x20_l).astype(np.float32))
np.save(os.path.join(OUT, "x32.npy"), np.stack(x32).astype(np.float32))
print(f"{len(ds.samples)} samples in classes {ds.classes}:")
for path, target in ds.samples:
    print(f"  {target} {os.path.relpath(path, ROOT)}")
