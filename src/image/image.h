#pragma once

// Image decoding: PNG, JPEG, WebP and GIF (first frame) into 8-bit RGB, exactly what Pillow's
// `Image.open(io.BytesIO(data)).convert("RGB")` gives, which is what DeepSeek's reference image
// processor feeds its resizer.
//
// What "as Pillow" means here (each a deliberate choice of the reference, kept):
//   - no EXIF orientation is applied (a photo stored sideways stays sideways);
//   - alpha (RGBA, LA, WebP alpha) is dropped WITHOUT compositing onto any background;
//   - palette images expand through the palette; tRNS / GIF transparency is ignored;
//   - grayscale replicates into R = G = B; 16-bit samples keep their high byte;
//   - a GIF gives its first frame on a canvas of the logical screen size (grown to the frame when
//     the frame sticks out), the area outside the frame filled with the transparent index (or 0).
// The decoding itself is done by libpng, libjpeg-turbo, libwebp (+ demux) and giflib.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::image {

// An 8-bit RGB image.
// Shapes: `pixels` is [height, width, 3] row-major uint8 (R, G, B), size height * width * 3.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;

  uint8_t* Row(int y) { return pixels.data() + static_cast<size_t>(y) * width * 3; }
  const uint8_t* Row(int y) const { return pixels.data() + static_cast<size_t>(y) * width * 3; }
};

enum class ImageFormat { kPng, kJpeg, kWebp, kGif };

// "png", "jpeg", "webp", "gif".
std::string_view ImageFormatName(ImageFormat format);

// Bounds against decompression bombs. Both are checked before any pixel is decoded: the byte
// size first, then width * height from the file's header (a GIF's canvas, a WebP's canvas).
// Units: bytes; pixels (width * height).
struct DecodeLimits {
  size_t max_bytes = size_t{32} << 20;  // 32 MiB of encoded data
  int64_t max_pixels = 50'000'000;      // 50 MP, 150 MB of RGB (Pillow warns at 89.5 MP)
};

// The format of `data`, from its magic bytes only (PNG signature, JPEG SOI FF D8 FF, RIFF....WEBP,
// GIF87a / GIF89a); the file name or a MIME type are never trusted.
// Errors: invalid_image (empty), unsupported_image_format (no known magic).
absl::StatusOr<ImageFormat> SniffImageFormat(std::span<const uint8_t> data);

// Decodes `data` (any of the four formats, sniffed) into RGB as described above.
// Errors: invalid_image (empty, truncated, corrupt, zero width or height, inconsistent header),
//   unsupported_image_format (unknown magic; a variant the decoder does not read),
//   image_too_large (more than `limits.max_bytes` bytes or `limits.max_pixels` pixels).
// Threads: any; no shared state (each call owns its decoder).
// Cost: the libraries' decoding time, one RGB buffer of width * height * 3 bytes plus the
//   decoder's row buffers (a GIF or WebP: one canvas of width * height * 4 more).
// Source: Pillow 13.0.0's PngImagePlugin / JpegImagePlugin / WebPImagePlugin / GifImagePlugin and
//   Image.convert("RGB"), as the reference preprocessing (DeepSeek-V4.1-Flash
//   inference/image_processor.py, load_image) calls them.
absl::StatusOr<RgbImage> DecodeImage(std::span<const uint8_t> data,
                                     const DecodeLimits& limits = {});

}  // namespace deepinfer::image
