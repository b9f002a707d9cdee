// PNG through libpng. libpng reports errors by longjmp; the only frame that calls setjmp
// (RunPng) holds no object with a destructor, and everything it allocates (the libpng structs) is
// freed on both paths, so a corrupt file leaks nothing. The pixel buffers are owned by the
// caller's frame (DecodePng), which a longjmp never crosses.

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "image/decoders.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::image::internal {
namespace {

enum class PngOutcome { kOk, kInvalid, kTooLarge };

// Everything RunPng reads and writes; plain data, so that a longjmp skips no destructor.
struct PngJob {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  const DecodeLimits* limits = nullptr;
  std::vector<uint8_t>* samples = nullptr;  // libpng's output rows (caller's frame)
  int width = 0;
  int height = 0;
  int channels = 0;          // after the transforms: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  png_bytepp row_table = nullptr;  // png_malloc'ed; freed on both paths
  bool gray16 = false;       // 16-bit grayscale, kept at 16 bits (Pillow clips it, see below)
  PngOutcome outcome = PngOutcome::kOk;
  char message[160] = {};
};

void ReadFromMemory(png_structp png, png_bytep out, size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->size - job->pos) png_error(png, "truncated (the data ends early)");
  std::memcpy(out, job->data + job->pos, n);
  job->pos += n;
}

[[noreturn]] void OnPngError(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof(job->message), "%s", message);
  png_longjmp(png, 1);
}

void OnPngWarning(png_structp, png_const_charp) {}  // benign chunk problems; Pillow ignores too

// Sets the transforms that give 8-bit samples as Pillow's modes hold them: palette expanded (its
// tRNS too, dropped later with every alpha), low bit depths scaled to 8 bits (Pillow's "L;2",
// "1" modes scale the same way), 16-bit colour to its high byte ("RGB;16B"). 16-bit grayscale is
// Pillow mode "I;16", whose convert("RGB") clips the value at 255 instead: it stays 16-bit here.
void SetTransforms(png_structp png, png_infop info, PngJob* job) {
  int color_type = png_get_color_type(png, info);
  int bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  job->gray16 = color_type == PNG_COLOR_TYPE_GRAY && bit_depth == 16;
  if (bit_depth == 16 && !job->gray16) png_set_strip_16(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  job->channels = png_get_channels(png, info);
}

// Decodes job->data into job->samples; false on failure (job->outcome, job->message say why).
bool RunPng(PngJob* job) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, OnPngError, OnPngWarning);
  if (png == nullptr) {
    std::snprintf(job->message, sizeof(job->message), "libpng could not start");
    job->outcome = PngOutcome::kInvalid;
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    if (job->row_table != nullptr) png_free(png, job->row_table);
    job->row_table = nullptr;
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    if (job->outcome == PngOutcome::kOk) job->outcome = PngOutcome::kInvalid;
    return false;
  }
  png_set_read_fn(png, job, ReadFromMemory);
  // The pixel limit is ours (checked below, to say image_too_large); libpng's own default cap of
  // 1,000,000 per side would call the same files corrupt.
  png_set_user_limits(png, PNG_USER_WIDTH_MAX, PNG_USER_HEIGHT_MAX);
  png_read_info(png, info);
  png_uint_32 width = png_get_image_width(png, info);
  png_uint_32 height = png_get_image_height(png, info);
  if (!CheckDimensions(width, height, *job->limits, "png").ok()) {
    job->outcome = PngOutcome::kTooLarge;  // DecodePng re-derives the exact status
    job->width = static_cast<int>(width);
    job->height = static_cast<int>(height);
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  job->width = static_cast<int>(width);
  job->height = static_cast<int>(height);
  SetTransforms(png, info, job);
  size_t row_bytes = png_get_rowbytes(png, info);
  job->samples->resize(row_bytes * height);
  // png_read_image needs every row pointer at once (interlaced files revisit rows). The table
  // is allocated by libpng and kept in the job, so the error path frees it too.
  job->row_table = static_cast<png_bytepp>(png_malloc(png, sizeof(png_bytep) * height));
  png_bytepp row_table = job->row_table;
  for (png_uint_32 y = 0; y < height; ++y) row_table[y] = job->samples->data() + y * row_bytes;
  png_read_image(png, row_table);
  // No png_read_end: the chunks after the image data are not needed, and Pillow accepts a file
  // whose IEND is missing as well.
  png_free(png, row_table);
  job->row_table = nullptr;
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

absl::StatusOr<RgbImage> DecodePng(std::span<const uint8_t> data, const DecodeLimits& limits) {
  std::vector<uint8_t> samples;
  PngJob job;
  job.data = data.data();
  job.size = data.size();
  job.limits = &limits;
  job.samples = &samples;
  if (!RunPng(&job)) {
    if (job.outcome == PngOutcome::kTooLarge) {
      return CheckDimensions(job.width, job.height, limits, "png");
    }
    return InvalidImage("png", job.message);
  }
  RgbImage out;
  out.width = job.width;
  out.height = job.height;
  out.pixels.resize(static_cast<size_t>(job.width) * job.height * 3);
  size_t n = static_cast<size_t>(job.width) * job.height;
  const uint8_t* in = samples.data();
  uint8_t* px = out.pixels.data();
  for (size_t i = 0; i < n; ++i, px += 3) {
    if (job.gray16) {
      // Pillow "I;16" -> "RGB" clips at 255 rather than keeping the high byte.
      int v = (in[2 * i] << 8) | in[2 * i + 1];
      px[0] = px[1] = px[2] = static_cast<uint8_t>(v > 255 ? 255 : v);
    } else if (job.channels <= 2) {  // gray (+ alpha, dropped)
      px[0] = px[1] = px[2] = in[i * job.channels];
    } else {  // RGB (+ alpha, dropped without compositing)
      std::memcpy(px, in + i * job.channels, 3);
    }
  }
  return out;
}

}  // namespace deepinfer::image::internal
