// Images for image-folder data sets (issue #32): JPEG (libjpeg-turbo) and PNG (libpng) decoded into
// 8-bit interleaved pixels as PIL's Image.convert does, torchvision's RandomResizedCrop box, and the
// crop's antialiased bilinear resize into planar float as torchvision's tensor pipeline computes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pt {

// Decoded pixels, interleaved: pixels[(y * width + x) * channels + c], channels 1 (gray) or 3 (RGB).
struct Image {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;  // (height, width, channels)
};

// Images with more pixels than this are refused before any pixel memory is allocated: PIL's
// DecompressionBombError threshold (2 * Image.MAX_IMAGE_PIXELS).
inline constexpr int64_t kMaxImagePixels = 178956970;

// Decodes a JPEG or PNG held in memory (told apart by signature, never by name) into `channels`
// 1 or 3 channels, with the pixels PIL gives for Image.open(f).convert("L" or "RGB"):
// - JPEG: libjpeg-turbo's defaults (islow DCT, fancy upsampling), as PIL's decoder, so with the same
//   libjpeg-turbo (Debian's PIL 9.4 links it) the pixels are PIL's exactly; CMYK/YCCK JPEGs are converted as PIL does
//   (Adobe-inverted CMYK, then PIL's cmyk2rgb); gray to RGB replicates; RGB to gray is PIL's L = (19595 R + 38470 G + 7471 B +
//   0x8000) >> 16.
// - PNG: palette and 1/2/4-bit gray expanded, alpha (and tRNS) dropped without compositing, gAMA
//   ignored; 16-bit samples keep their high byte, as PIL does for 16-bit RGB(A) and gray+alpha. One
//   deliberate difference: PIL opens 16-bit gray as mode "I" and its convert clips values above 255
//   (nearly every pixel white); here 16-bit gray keeps its high byte like the other 16-bit modes.
// Data that ends early is an error, as in PIL ("image file is truncated"): for a JPEG that includes
// a missing EOI marker (libjpeg reads ahead for it); a PNG needs its data up to the image's last
// IDAT, not IEND. Warnings about corrupt but complete JPEG data are tolerated, as PIL tolerates
// them. Errors are invalid-input statuses, one line that starts with `name` (used for nothing
// else). Never calls exit() and prints nothing. Thread-safe. `channels` must be 1 or 3.
Expected<Image> decode_image(const uint8_t* bytes, size_t size, int channels, const std::string& name);

// Reads the whole file (which must be a regular file of at most 1 GiB) and decodes it; errors start
// with the path. JPEGs are decoded at full size (no libjpeg DCT scaling, which would change pixels).
// Measured with crop_resize_chw (tests/data/image_test.cpp, DISABLED_Throughput: read + decode +
// random_resized_crop + resize with a flip, one thread of a 2-core Xeon with a build running beside
// it, Release): 32x32 JPEG (quality 90, 4:2:0) to 32x32, 25,000 images/s (decode alone from memory
// 31,500/s); 64x64 to 64x64, 11,100 images/s (decode alone 15,100/s).
Expected<Image> read_image(const std::string& path, int channels);

// (width, height) from the file's header alone (JPEG: the markers up to the frame header, skipped
// by length; PNG: IHDR), for scanning a folder; an error naming the file when it is neither a JPEG
// nor a PNG or its header is cut short or malformed. Agrees with read_image's size for any file
// read_image accepts.
Expected<std::pair<int, int>> image_size(const std::string& path);

// A crop box in pixels: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};

// torchvision.transforms.RandomResizedCrop.get_params (torchvision 0.14) for a width x height image:
// up to 10 tries of area fraction ~ U(scale_lo, scale_hi) and log aspect ~ U(log ratio_lo, log
// ratio_hi), w = round(sqrt(area * aspect)), h = round(sqrt(area / aspect)) (round half to even, as
// Python's round), accepted when 0 < w <= width and 0 < h <= height, with top and left uniform
// integers; otherwise the central crop of the ratio bound nearest the image's (the whole image when
// its ratio is within bounds). The draws come from `rng` (64-bit words to doubles in [0, 1) with 53
// bits, integers by rejection), so a seed gives the same boxes on every platform; torch's RNG is
// not reproduced, only the algorithm and its distribution. The box always lies inside the image and
// is never empty (for extreme ratio bounds the fallback keeps a side of 1 where torchvision gives 0).
CropBox random_resized_crop(int width, int height, std::mt19937_64& rng, double scale_lo = 0.08, double scale_hi = 1.0,
                            double ratio_lo = 3.0 / 4, double ratio_hi = 4.0 / 3);

// Resizes the `box` region of `im` to out_h x out_w and writes it planar (channels, out_h, out_w)
// into `out`, each value divided by 255, mirrored left-right when `flip` (after the resize, as
// RandomHorizontalFlip follows RandomResizedCrop). The values are those of
// torch.nn.functional.interpolate(crop.float(), size=(out_h, out_w), mode="bilinear",
// align_corners=False, antialias=True) / 255 in torch 1.13: a separable triangle filter whose support
// grows with the downscale factor (PIL's), the horizontal pass first, both in float with torch's
// weights and tap ranges; no rounding to uint8 anywhere. The box must lie inside the image (a
// programming error otherwise). Thread-safe; it allocates nothing once a thread has seen its
// largest sizes.
void crop_resize_chw(float* out, const Image& im, CropBox box, int out_h, int out_w, bool flip);  // out: (C, out_h, out_w)

}  // namespace pt
