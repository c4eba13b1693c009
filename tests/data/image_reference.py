"""References for tests/data/image_test.cpp (runtime/data/image.h): writes test images into OUT_DIR
with PIL (and a hand-written PNG encoder for interlaced and 16-bit RGB files, which PIL cannot
write), then what PIL, torch and torchvision make of them, as .npy arrays and text manifests:
  decode.txt   file mode ref.npy          PIL's Image.open(file).convert(mode) as uint8
  crops.txt    file mode top left h w out_h out_w flip ref.npy
                                          F.interpolate(crop.float(), (out_h, out_w), bilinear,
                                          align_corners=False, antialias=True), flipped, / 255
  rrc.txt      stats W H draws mean_area mean_aspect   torchvision's get_params, torch.manual_seed(0)
               fallback W H scale_lo scale_hi top left h w   get_params' central fallback box
Run: /usr/bin/python3 tests/data/image_reference.py OUT_DIR (exit 77 when PIL, torch or
torchvision is missing).
"""
import os
import struct
import sys
import zlib

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torchvision
    from PIL import Image
except ImportError as e:
    print(f"image_reference.py: {e} (needs numpy, PIL, torch and torchvision)")
    sys.exit(77)

OUT = sys.argv[1]
rng = np.random.default_rng(32)


def smooth_noisy(h, w, c):
    """Gradients plus noise: content like a photograph's, not pure noise (which JPEG mangles)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = [128 + 100 * np.sin(x / (3 + k) + y / (5 + 2 * k) + k) for k in range(c)]
    a = np.stack(base, axis=-1) + rng.normal(0, 12, (h, w, c))
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def write_png(path, arr, color_type, depth, interlace):
    """A PNG with filter 0 on every row, Adam7-interlaced when asked (8- and 16-bit samples)."""
    h, w = arr.shape[:2]
    a = arr.astype(">u2") if depth == 16 else arr.astype(np.uint8)

    def rows(sub):
        return b"".join(b"\x00" + sub[y].tobytes() for y in range(sub.shape[0]))

    if interlace:
        raw = b"".join(rows(a[y0::dy, x0::dx]) for x0, y0, dx, dy in ADAM7 if a[y0::dy, x0::dx].size)
    else:
        raw = rows(a)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 1 if interlace else 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9)) +
                png_chunk(b"IEND", b""))


def make_images():
    """name -> {mode: reference uint8 array}."""
    files = {}

    def pil(name, im, **save):
        im.save(os.path.join(OUT, name), **save)
        files[name] = None

    pil("rgb_q90_37x23.jpg", Image.fromarray(smooth_noisy(23, 37, 3)), quality=90)
    pil("rgb_q90_200x150.jpg", Image.fromarray(smooth_noisy(150, 200, 3)), quality=90)
    pil("rgb_444_32x32.jpg", Image.fromarray(smooth_noisy(32, 32, 3)), quality=90, subsampling=0)
    pil("rgb_422_64x48.jpg", Image.fromarray(smooth_noisy(48, 64, 3)), quality=75, subsampling=1)
    pil("rgb_progressive_61x45.jpg", Image.fromarray(smooth_noisy(45, 61, 3)), quality=90, progressive=True)
    pil("gray_q90_37x23.jpg", Image.fromarray(smooth_noisy(23, 37, 1)[:, :, 0]), quality=90)
    pil("cmyk_40x30.jpg", Image.fromarray(smooth_noisy(30, 40, 4), mode="CMYK"), quality=90)
    pil("rgb_37x23.png", Image.fromarray(smooth_noisy(23, 37, 3)))
    pil("rgb_200x150.png", Image.fromarray(smooth_noisy(150, 200, 3)))
    pil("rgba_32x32.png", Image.fromarray(smooth_noisy(32, 32, 4), mode="RGBA"))
    pil("la_32x32.png", Image.fromarray(smooth_noisy(32, 32, 2), mode="LA"))
    pal = Image.fromarray(smooth_noisy(150, 200, 3)).quantize(200)
    pil("palette_200x150.png", pal, transparency=3)
    pil("palette4_37x23.png", Image.fromarray(smooth_noisy(23, 37, 3)).quantize(16), bits=4)
    pil("gray1_37x23.png", Image.fromarray(smooth_noisy(23, 37, 1)[:, :, 0]).convert("1"))
    gray16 = (smooth_noisy(23, 37, 1)[:, :, 0].astype(np.uint16) * 257 + rng.integers(0, 257, (23, 37))).astype(np.uint16)
    pil("gray16_37x23.png", Image.fromarray(gray16, mode="I;16"))
    for name, arr, color_type in [("rgb_interlaced_37x23.png", smooth_noisy(23, 37, 3), 2),
                                  ("gray_interlaced_9x5.png", smooth_noisy(5, 9, 1)[:, :, 0], 0)]:
        write_png(os.path.join(OUT, name), arr, color_type, 8, True)
        assert np.array_equal(np.array(Image.open(os.path.join(OUT, name))), arr)
    rgb16 = smooth_noisy(32, 32, 3).astype(np.uint16) * 257 + rng.integers(0, 257, (32, 32, 3)).astype(np.uint16)
    write_png(os.path.join(OUT, "rgb16_interlaced_32x32.png"), rgb16, 2, 16, True)
    files["rgb_interlaced_37x23.png"] = files["gray_interlaced_9x5.png"] = files["rgb16_interlaced_32x32.png"] = None
    # The hand-written encoder checked against PIL's decoder (which keeps the high byte of 16-bit RGB).
    assert np.array_equal(np.array(Image.open(os.path.join(OUT, "rgb16_interlaced_32x32.png"))), rgb16 >> 8)
    # Throughput files (image_test.cpp's DISABLED_Throughput): photographs' usual 4:2:0 at quality 90.
    for side in (32, 64):
        Image.fromarray(smooth_noisy(side, side, 3)).save(os.path.join(OUT, f"bench_{side}x{side}.jpg"), quality=90)

    refs = {}
    for name in sorted(files):
        im = Image.open(os.path.join(OUT, name))
        if im.mode in ("I", "I;16"):
            # PIL's convert clips 16-bit gray at 255; image.h keeps the high byte instead.
            high = (np.array(im).astype(np.uint32) >> 8).astype(np.uint8)
            refs[name] = {"L": high, "RGB": np.repeat(high[:, :, None], 3, axis=2)}
        else:
            refs[name] = {m: np.array(im.convert(m), dtype=np.uint8) for m in ("RGB", "L")}
    return refs


def interpolate(arr, top, left, h, w, out_h, out_w, flip):
    crop = arr[top:top + h, left:left + w]
    if crop.ndim == 2:
        crop = crop[:, :, None]
    x = torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1).unsqueeze(0).float().contiguous()
    y = F.interpolate(x, size=(out_h, out_w), mode="bilinear", align_corners=False, antialias=True)
    if flip:
        y = torch.flip(y, dims=[-1])
    return (y[0] / 255).numpy().astype(np.float32)


CROPS = [  # file, mode, top, left, h, w, out_h, out_w, flip
    ("rgb_200x150.png", "RGB", 10, 20, 140, 170, 32, 32, 0),   # down by 4.4 and 5.3: antialiasing
    ("rgb_200x150.png", "RGB", 10, 20, 140, 170, 64, 64, 1),   # down by 2.2 and 2.7, mirrored
    ("rgb_200x150.png", "RGB", 0, 0, 150, 200, 17, 23, 0),     # odd factors, whole image
    ("rgb_37x23.png", "RGB", 0, 0, 23, 37, 64, 96, 0),         # up by 2.8 and 2.6
    ("rgb_37x23.png", "RGB", 3, 2, 12, 30, 40, 10, 1),         # up in h, down in w, mirrored
    ("rgb_37x23.png", "RGB", 0, 0, 23, 37, 23, 37, 0),         # same size: the pixels themselves
    ("rgb_37x23.png", "RGB", 5, 5, 1, 1, 4, 4, 0),             # one pixel
    ("rgba_32x32.png", "RGB", 0, 0, 32, 32, 16, 16, 1),        # down by exactly 2
    ("palette_200x150.png", "L", 7, 11, 131, 177, 32, 48, 0),  # gray, non-square
    ("rgb_q90_200x150.jpg", "RGB", 25, 30, 100, 120, 32, 32, 1),
    ("gray_q90_37x23.jpg", "L", 1, 2, 20, 33, 64, 64, 1),
]


def write_crops(refs):
    with open(os.path.join(OUT, "crops.txt"), "w") as f:
        for i, (name, mode, top, left, h, w, oh, ow, flip) in enumerate(CROPS):
            ref = f"crop{i}.npy"
            np.save(os.path.join(OUT, ref), interpolate(refs[name][mode], top, left, h, w, oh, ow, flip))
            f.write(f"{name} {mode} {top} {left} {h} {w} {oh} {ow} {flip} {ref}\n")


def write_random_crops():
    from torchvision.transforms import RandomResizedCrop
    with open(os.path.join(OUT, "rrc.txt"), "w") as f:
        for w, h in [(200, 150), (32, 32), (37, 23), (500, 60)]:
            torch.manual_seed(0)
            img = torch.zeros(3, h, w)
            draws = 20000
            areas, aspects = [], []
            for _ in range(draws):
                i, j, ch, cw = RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3])
                assert 0 <= i and i + ch <= h and 0 <= j and j + cw <= w
                areas.append(ch * cw / (h * w))
                aspects.append(cw / ch)
            f.write(f"stats {w} {h} {draws} {np.mean(areas):.9f} {np.mean(aspects):.9f}\n")
        for w, h in [(200, 150), (300, 100), (100, 300), (37, 23), (7, 1), (1, 7)]:
            i, j, ch, cw = RandomResizedCrop.get_params(torch.zeros(3, h, w), [2.0, 3.0], [3 / 4, 4 / 3])
            f.write(f"fallback {w} {h} 2 3 {i} {j} {ch} {cw}\n")


def main():
    refs = make_images()
    with open(os.path.join(OUT, "decode.txt"), "w") as f:
        for name, by_mode in refs.items():
            for mode, arr in by_mode.items():
                ref = f"{name}.{mode}.npy"
                np.save(os.path.join(OUT, ref), arr)
                f.write(f"{name} {mode} {ref}\n")
    write_crops(refs)
    write_random_crops()
    print(f"image_reference.py: {len(refs)} images, {len(CROPS)} crops (torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}, PIL {Image.__version__})")


if __name__ == "__main__":
    main()
