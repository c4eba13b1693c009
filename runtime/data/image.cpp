// JPEG and PNG decoding behind setjmp guards (each guarded frame holds no C++ object, so a jump from
// libjpeg or libpng skips no destructor), header-only sizes, torchvision's crop box, and torch's
// antialiased bilinear resize of a crop into planar float.
#include "runtime/data/image.h"
#include "core/file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jerror.h>   // JWRN_JPEG_EOF
#include <jpeglib.h>  // after <cstdio>: it uses FILE and size_t without including them
#include <png.h>

namespace pt {

namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr int64_t kMaxFileBytes = int64_t{1} << 30;

bool is_jpeg(const uint8_t* b, size_t n) { return n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff; }
bool is_png(const uint8_t* b, size_t n) { return n >= 8 && std::memcmp(b, kPngSignature, 8) == 0; }

Status not_an_image(const std::string& name, const uint8_t* b, size_t n) {
  if (n == 0) return invalid_input(name + ": empty file (expected a JPEG or PNG image)");
  std::string hex;
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    char byte[4];
    std::snprintf(byte, sizeof byte, " %02x", b[i]);
    hex += byte;
  }
  return invalid_input(name + ": neither a JPEG nor a PNG image (it starts with bytes" + hex + ")");
}

Status check_size(const std::string& name, const char* format, int64_t width, int64_t height) {
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  if (width <= 0 || height <= 0) return invalid_input(name + ": " + format + " header gives an empty image (" + size + ")");
  if (width * height > kMaxImagePixels)
    return invalid_input(name + ": " + format + " of " + size + " pixels, more than the " + std::to_string(kMaxImagePixels) +
                         " an image may have (PIL's decompression-bomb limit)");
  return Status::ok();
}

// PIL's RGB -> L (Convert.c, L24): ITU-R 601-2 luma in 16-bit fixed point, rounded.
inline uint8_t pil_luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

// An image decoded as RGB made gray in its own buffer (the write position never passes the read one).
void rgb_to_gray_in_place(Image* im) {
  const size_t n = size_t(im->width) * im->height;
  uint8_t* p = im->pixels.data();
  for (size_t i = 0; i < n; ++i) p[i] = pil_luma(p + 3 * i);
  im->pixels.resize(n);
  im->pixels.shrink_to_fit();
}

// What PIL does with a 4-component JPEG: unpack it as Adobe-inverted CMYK ("CMYK;I", assumed for
// every CMYK JPEG), then Convert.c's cmyk2rgb. With the inversion folded in: nk = 255 - k = stored k.
void cmyk_to_rgb(uint8_t* out, const uint8_t* in, int n) {
  for (int x = 0; x < n; ++x, in += 4, out += 3) {
    const int nk = in[3];
    for (int c = 0; c < 3; ++c) {
      const int t = (255 - in[c]) * nk + 128;  // MULDIV255(255 - stored, nk)
      out[c] = static_cast<uint8_t>(std::clamp(nk - (((t >> 8) + t) >> 8), 0, 255));
    }
  }
}

// ---- JPEG ----

struct JpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg sees only this part
  std::jmp_buf jump;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {};
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings about corrupt data are tolerated (PIL decodes such files too); running out of data, which
// libjpeg would paper over with gray, is the truncation PIL refuses. Nothing is printed.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) {
    e->truncated = true;
    std::longjmp(e->jump, 1);
  }
  ++cinfo->err->num_warnings;
}

void jpeg_silent(j_common_ptr) {}

// Everything that must survive a longjmp lives here, in decode_jpeg's frame.
struct JpegJob {
  jpeg_decompress_struct cinfo = {};
  JpegErrors errors;
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  int channels = 0;
  std::string name;
  Image image;
  std::vector<uint8_t> cmyk_rows;
  Status refusal;  // a refusal of ours (size, colour space), as opposed to libjpeg's
};

bool jpeg_decode_guarded(JpegJob* job) {
  if (setjmp(job->errors.jump)) return false;
  jpeg_decompress_struct* ci = &job->cinfo;
  jpeg_create_decompress(ci);
  jpeg_mem_src(ci, job->bytes, static_cast<unsigned long>(job->size));
  jpeg_read_header(ci, TRUE);
  job->refusal = check_size(job->name, "JPEG", ci->image_width, ci->image_height);
  if (!job->refusal.is_ok()) return false;
  int decoded;  // channels libjpeg writes
  if (ci->jpeg_color_space == JCS_GRAYSCALE) {
    ci->out_color_space = job->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    decoded = job->channels;
  } else if (ci->num_components == 3) {
    ci->out_color_space = JCS_RGB;
    decoded = 3;
  } else if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK) {
    ci->out_color_space = JCS_CMYK;
    decoded = 4;
  } else {
    job->refusal = invalid_input(job->name + ": JPEG with " + std::to_string(ci->num_components) +
                                 " colour components (only gray, RGB/YCbCr and CMYK/YCCK are read)");
    return false;
  }
  ci->dct_method = JDCT_ISLOW;  // libjpeg's default and PIL's: the pixels are PIL's
  jpeg_start_decompress(ci);
  const size_t w = ci->output_width, h = ci->output_height;
  Image& im = job->image;
  im.width = static_cast<int>(w);
  im.height = static_cast<int>(h);
  im.channels = job->channels;
  im.pixels.resize(w * h * std::min(decoded, 3));
  const size_t stride = w * decoded;
  if (decoded == 4) job->cmyk_rows.resize(stride * ci->rec_outbuf_height);
  JSAMPROW rows[16];
  while (ci->output_scanline < h) {
    const size_t y = ci->output_scanline;
    const int want = static_cast<int>(std::min<size_t>({h - y, 16, size_t(ci->rec_outbuf_height)}));
    for (int r = 0; r < want; ++r)
      rows[r] = decoded == 4 ? job->cmyk_rows.data() + r * stride : im.pixels.data() + (y + r) * stride;
    const int got = static_cast<int>(jpeg_read_scanlines(ci, rows, want));
    if (decoded == 4)
      for (int r = 0; r < got; ++r) cmyk_to_rgb(im.pixels.data() + (y + r) * w * 3, rows[r], static_cast<int>(w));
  }
  // No jpeg_finish_decompress: the pixels are all here (a missing EOI was already refused, as PIL
  // refuses it, when libjpeg read ahead for it).
  return true;
}

Expected<Image> decode_jpeg(const uint8_t* bytes, size_t size, int channels, const std::string& name) {
  JpegJob job;
  job.cinfo.err = jpeg_std_error(&job.errors.pub);
  job.errors.pub.error_exit = jpeg_fail;
  job.errors.pub.emit_message = jpeg_message;
  job.errors.pub.output_message = jpeg_silent;
  job.bytes = bytes;
  job.size = size;
  job.channels = channels;
  job.name = name;
  const bool ok = jpeg_decode_guarded(&job);
  jpeg_destroy_decompress(&job.cinfo);  // safe on a half-created struct (it was zeroed)
  if (!ok) {
    if (!job.refusal.is_ok()) return job.refusal;
    if (job.errors.truncated) return invalid_input(name + ": truncated JPEG (the data ends before the image does)");
    return invalid_input(name + ": corrupt JPEG (libjpeg: " + job.errors.message + ")");
  }
  Image& im = job.image;
  if (channels == 1 && im.pixels.size() != size_t(im.width) * im.height) rgb_to_gray_in_place(&im);
  return std::move(job.image);
}

// ---- PNG ----

struct PngJob {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* bytes = nullptr;
  size_t size = 0, pos = 0;
  int channels = 0;
  std::string name;
  Image image;
  std::vector<png_bytep> rows;
  Status refusal;
  bool truncated = false;
  char message[256] = {};
};

void png_fail(png_structp png, png_const_charp msg) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof job->message, "%s", msg);
  png_longjmp(png, 1);
}

void png_quiet(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->size - job->pos) {
    job->truncated = true;
    png_error(png, "truncated");
  }
  std::memcpy(out, job->bytes + job->pos, n);
  job->pos += n;
}

bool png_decode_guarded(PngJob* job) {
  if (setjmp(png_jmpbuf(job->png))) return false;
  png_structp png = job->png;
  png_infop info = job->info;
  png_set_read_fn(png, job, png_read_bytes);
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, nullptr, nullptr, nullptr);
  job->refusal = check_size(job->name, "PNG", w, h);
  if (!job->refusal.is_ok()) return false;
  // To 8-bit gray or RGB, as PIL's convert: high byte of 16-bit samples, alpha and tRNS dropped
  // (not composited), palette and low-depth gray expanded; gAMA, sBIT, iCCP ignored.
  const bool gray = (color & PNG_COLOR_MASK_COLOR) == 0;
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (gray && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (gray && job->channels == 3) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int decoded = gray ? job->channels : 3;
  if (png_get_channels(png, info) != decoded || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != size_t(w) * decoded) {
    job->refusal = internal_error(job->name + ": libpng did not convert the PNG (colour type " + std::to_string(color) +
                                  ", depth " + std::to_string(depth) + ") to 8-bit " + (decoded == 1 ? "gray" : "RGB"));
    return false;
  }
  Image& im = job->image;
  im.width = static_cast<int>(w);
  im.height = static_cast<int>(h);
  im.channels = job->channels;
  im.pixels.resize(size_t(w) * h * decoded);
  job->rows.resize(h);
  for (size_t y = 0; y < h; ++y) job->rows[y] = im.pixels.data() + y * w * decoded;
  png_read_image(png, job->rows.data());
  // No png_read_end: the pixels are all here; chunks after the image data are not needed.
  return true;
}

Expected<Image> decode_png(const uint8_t* bytes, size_t size, int channels, const std::string& name) {
  PngJob job;
  job.bytes = bytes;
  job.size = size;
  job.channels = channels;
  job.name = name;
  job.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_fail, png_quiet);
  if (job.png) job.info = png_create_info_struct(job.png);
  if (!job.png || !job.info) {
    png_destroy_read_struct(job.png ? &job.png : nullptr, nullptr, nullptr);
    return internal_error(name + ": libpng could not start (out of memory?)");
  }
  const bool ok = png_decode_guarded(&job);
  png_destroy_read_struct(&job.png, &job.info, nullptr);
  if (!ok) {
    if (!job.refusal.is_ok()) return job.refusal;
    if (job.truncated) return invalid_input(name + ": truncated PNG (the data ends before the image does)");
    return invalid_input(name + ": corrupt PNG (libpng: " + job.message + ")");
  }
  Image& im = job.image;
  if (channels == 1 && im.pixels.size() != size_t(im.width) * im.height) rgb_to_gray_in_place(&im);
  return std::move(job.image);
}

// ---- files ----

// A regular file opened for reading, closed on scope exit; fd < 0 with `error` set otherwise.
struct InputFile {
  int fd = -1;
  int64_t size = 0;
  Status error;
  explicit InputFile(const std::string& path) {
    // O_NONBLOCK: opening a FIFO nobody writes must not hang; fstat then refuses it.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      size = st.st_size;
      return;
    }
    const int err = errno;
    if (fd >= 0) ::close(fd);
    fd = -1;
    error = check_regular_file(path);
    if (error.is_ok()) error = invalid_input(path + ": cannot be opened: " + std::strerror(err));
  }
  ~InputFile() {
    if (fd >= 0) ::close(fd);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Reads n bytes at offset; false at the end of the file or on an error.
  bool read_at(int64_t offset, void* out, size_t n) const {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd, p, n, offset);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      p += got;
      offset += got;
      n -= size_t(got);
    }
    return true;
  }
};

uint32_t big_endian(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// The frame header (SOF) of a JPEG, found by walking the marker segments from SOI.
Expected<std::pair<int, int>> jpeg_size(const InputFile& f, const std::string& path) {
  int64_t pos = 2;
  uint8_t b[9];
  for (;;) {
    if (!f.read_at(pos, b, 2)) return invalid_input(path + ": truncated JPEG header (no frame header before the end)");
    if (b[0] != 0xff) return invalid_input(path + ": malformed JPEG header (no marker at byte " + std::to_string(pos) + ")");
    if (b[1] == 0xff) {  // fill byte
      ++pos;
      continue;
    }
    const uint8_t m = b[1];
    pos += 2;
    if (m == 0x01 || (m >= 0xd0 && m <= 0xd8)) continue;  // TEM, RSTn, SOI: no length
    if (m == 0xd9 || m == 0xda) return invalid_input(path + ": malformed JPEG header (image data before any frame header)");
    if (!f.read_at(pos, b, 2)) return invalid_input(path + ": truncated JPEG header");
    const uint32_t length = big_endian(b, 2);
    if (length < 2) return invalid_input(path + ": malformed JPEG header (segment length " + std::to_string(length) + ")");
    const bool sof = m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc;
    if (sof) {
      if (length < 8 || !f.read_at(pos, b, 7)) return invalid_input(path + ": truncated JPEG frame header");
      const int height = static_cast<int>(big_endian(b + 3, 2)), width = static_cast<int>(big_endian(b + 5, 2));
      RETURN_IF_ERROR(check_size(path, "JPEG", width, height));
      return std::pair<int, int>(width, height);
    }
    pos += length;
  }
}

Expected<std::pair<int, int>> png_size(const InputFile& f, const std::string& path) {
  uint8_t b[24];
  if (!f.read_at(0, b, sizeof b)) return invalid_input(path + ": truncated PNG header");
  if (big_endian(b + 8, 4) != 13 || std::memcmp(b + 12, "IHDR", 4) != 0)
    return invalid_input(path + ": malformed PNG header (IHDR is not the first chunk)");
  const uint32_t width = big_endian(b + 16, 4), height = big_endian(b + 20, 4);
  if (width > 0x7fffffffu || height > 0x7fffffffu) return invalid_input(path + ": malformed PNG header (size out of range)");
  RETURN_IF_ERROR(check_size(path, "PNG", width, height));
  return std::pair<int, int>(int(width), int(height));
}

// ---- resize ----

// One axis of torch 1.13's antialiased linear resize (UpSampleKernel.cpp, _compute_indices_weights_aa
// with scalar_t = float): for output i, the taps first[i] .. first[i] + count[i] - 1 and their
// normalised weights. The float/double mix of torch's expressions is kept, as it decides where a
// tap range starts and ends.
struct AxisFilter {
  int taps = 0;
  std::vector<int> first, count;
  std::vector<float> weights;  // (out, taps)
};

float triangle(float x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return static_cast<float>(1.0 - x);
  return 0.0f;
}

void axis_filter(AxisFilter* f, int in_size, int out_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float support = scale >= 1.0 ? static_cast<float>(1.0 * scale) : 1.0f;  // (interp_size / 2) * scale
  const float invscale = scale >= 1.0 ? 1.0f / scale : 1.0f;
  f->taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  f->first.resize(out_size);
  f->count.resize(out_size);
  f->weights.assign(size_t(out_size) * f->taps, 0.0f);
  for (int i = 0; i < out_size; ++i) {
    const float center = static_cast<float>(scale * (i + 0.5));
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xsize = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
    float* w = f->weights.data() + size_t(i) * f->taps;
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = triangle(static_cast<float>((j + xmin - center + 0.5) * invscale));
      total += w[j];
    }
    if (total != 0.0f)
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    f->first[i] = static_cast<int>(xmin);
    f->count[i] = static_cast<int>(xsize);
  }
}

// Per-thread buffers of crop_resize_chw, kept between calls.
struct ResizeScratch {
  AxisFilter fx, fy;
  std::vector<float> rows;  // (box height, out_w, C): after the horizontal pass
  std::vector<float> acc;   // (out_w, C): one output row
};

// Horizontal pass over the box's rows: uint8 (in_h, box width, C) to float (in_h, out_w, C).
template <int C>
void resize_rows(float* dst, const Image& im, CropBox box, const AxisFilter& fx, int out_w) {
  for (int y = 0; y < box.height; ++y) {
    const uint8_t* src = im.pixels.data() + (size_t(box.top + y) * im.width + box.left) * C;
    float* d = dst + size_t(y) * out_w * C;
    for (int ox = 0; ox < out_w; ++ox) {
      const uint8_t* s = src + size_t(fx.first[ox]) * C;
      const float* w = fx.weights.data() + size_t(ox) * fx.taps;
      float a[C];
      for (int c = 0; c < C; ++c) a[c] = float(s[c]) * w[0];
      for (int j = 1; j < fx.count[ox]; ++j)
        for (int c = 0; c < C; ++c) a[c] += float(s[j * C + c]) * w[j];
      for (int c = 0; c < C; ++c) d[ox * C + c] = a[c];
    }
  }
}

// Vertical pass, one output row at a time, then /255 into planar (C, out_h, out_w), mirrored if asked.
template <int C>
void resize_columns(float* out, ResizeScratch& s, int out_h, int out_w, bool flip) {
  const size_t row = size_t(out_w) * C, plane = size_t(out_h) * out_w;
  float* acc = s.acc.data();
  for (int oy = 0; oy < out_h; ++oy) {
    const float* w = s.fy.weights.data() + size_t(oy) * s.fy.taps;
    const float* src = s.rows.data() + size_t(s.fy.first[oy]) * row;
    for (size_t k = 0; k < row; ++k) acc[k] = src[k] * w[0];
    for (int j = 1; j < s.fy.count[oy]; ++j) {
      const float* r = src + size_t(j) * row;
      const float wj = w[j];
      for (size_t k = 0; k < row; ++k) acc[k] += r[k] * wj;
    }
    for (int c = 0; c < C; ++c) {
      float* o = out + c * plane + size_t(oy) * out_w;
      if (flip) {
        for (int ox = 0; ox < out_w; ++ox) o[out_w - 1 - ox] = acc[ox * C + c] / 255.0f;
      } else {
        for (int ox = 0; ox < out_w; ++ox) o[ox] = acc[ox * C + c] / 255.0f;
      }
    }
  }
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Uniform in [0, n), by rejection (no modulo bias, the same on every standard library).
int uniform_below(std::mt19937_64& rng, int n) {
  const uint64_t bound = static_cast<uint64_t>(n);
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod n: draws below it are rejected
  for (;;) {
    const uint64_t r = rng();
    if (r >= threshold) return static_cast<int>(r % bound);
  }
}

}  // namespace

Expected<Image> decode_image(const uint8_t* bytes, size_t size, int channels, const std::string& name) {
  PT_CHECK(channels == 1 || channels == 3) << "decode_image: channels " << channels << " (1 or 3)";
  if (is_jpeg(bytes, size)) return decode_jpeg(bytes, size, channels, name);
  if (is_png(bytes, size)) return decode_png(bytes, size, channels, name);
  return not_an_image(name, bytes, size);
}

Expected<Image> read_image(const std::string& path, int channels) {
  const InputFile f(path);
  if (f.fd < 0) return f.error;
  if (f.size > kMaxFileBytes)
    return invalid_input(path + ": " + std::to_string(f.size) + " bytes, larger than the 1 GiB an image file may have");
  std::vector<uint8_t> bytes(static_cast<size_t>(f.size));
  errno = 0;
  if (!f.read_at(0, bytes.data(), bytes.size()))
    return invalid_input(path + ": cannot be read: " + (errno ? std::strerror(errno) : "it ended early (changed while read?)"));
  return decode_image(bytes.data(), bytes.size(), channels, path);
}

Expected<std::pair<int, int>> image_size(const std::string& path) {
  const InputFile f(path);
  if (f.fd < 0) return f.error;
  uint8_t head[8] = {};
  const size_t n = static_cast<size_t>(std::min<int64_t>(f.size, sizeof head));
  if (!f.read_at(0, head, n)) return invalid_input(path + ": cannot be read");
  if (is_jpeg(head, n)) return jpeg_size(f, path);
  if (is_png(head, n)) return png_size(f, path);
  return not_an_image(path, head, n);
}

CropBox random_resized_crop(int width, int height, std::mt19937_64& rng, double scale_lo, double scale_hi, double ratio_lo,
                            double ratio_hi) {
  PT_CHECK(width > 0 && height > 0) << "random_resized_crop of a " << width << "x" << height << " image";
  const double area = double(width) * height;
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (scale_lo + (scale_hi - scale_lo) * uniform01(rng));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * uniform01(rng));
    const double w = std::nearbyint(std::sqrt(target_area * aspect));  // Python's round: half to even
    const double h = std::nearbyint(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box;
      box.height = int(h);
      box.width = int(w);
      box.top = uniform_below(rng, height - box.height + 1);
      box.left = uniform_below(rng, width - box.width + 1);
      return box;
    }
  }
  // torchvision's fallback: the central crop at the nearest ratio bound (never empty: a side of at
  // least 1 pixel even for extreme ratio bounds, where torchvision would give 0).
  const double in_ratio = double(width) / height, rmin = std::min(ratio_lo, ratio_hi), rmax = std::max(ratio_lo, ratio_hi);
  CropBox box;
  box.width = width;
  box.height = height;
  if (in_ratio < rmin) {
    box.height = std::clamp(int(std::nearbyint(width / rmin)), 1, height);
  } else if (in_ratio > rmax) {
    box.width = std::clamp(int(std::nearbyint(height * rmax)), 1, width);
  }
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

void crop_resize_chw(float* out, const Image& im, CropBox box, int out_h, int out_w, bool flip) {
  PT_CHECK(im.channels == 1 || im.channels == 3) << "crop_resize_chw: image with " << im.channels << " channels";
  PT_CHECK(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0 && box.top + box.height <= im.height &&
           box.left + box.width <= im.width)
      << "crop box (top " << box.top << ", left " << box.left << ", " << box.height << "x" << box.width << ") outside a "
      << im.height << "x" << im.width << " image";
  PT_CHECK(out_h > 0 && out_w > 0) << "crop_resize_chw to " << out_h << "x" << out_w;
  thread_local ResizeScratch s;
  axis_filter(&s.fx, box.width, out_w);
  axis_filter(&s.fy, box.height, out_h);
  s.rows.resize(size_t(box.height) * out_w * im.channels);
  s.acc.resize(size_t(out_w) * im.channels);
  if (im.channels == 3) {
    resize_rows<3>(s.rows.data(), im, box, s.fx, out_w);
    resize_columns<3>(out, s, out_h, out_w, flip);
  } else {
    resize_rows<1>(s.rows.data(), im, box, s.fx, out_w);
    resize_columns<1>(out, s, out_h, out_w, flip);
  }
}

}  // namespace pt
