// WebP through libwebp's animation decoder (libwebpdemux), for still files too: that is how
// Pillow reads every WebP, and it defines the first frame of an animation (drawn on a cleared,
// transparent-black canvas, the area outside the frame left at 0). Alpha is then dropped.

#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>

#include "image/decoders.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::image::internal {
namespace {

struct AnimDecoderDeleter {
  void operator()(WebPAnimDecoder* decoder) const { WebPAnimDecoderDelete(decoder); }
};

}  // namespace

absl::StatusOr<RgbImage> DecodeWebp(std::span<const uint8_t> data, const DecodeLimits& limits) {
  // The header first: the canvas size, before the decoder allocates a canvas of that size.
  WebPBitstreamFeatures features;
  VP8StatusCode status = WebPGetFeatures(data.data(), data.size(), &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) return InvalidImage("webp", "truncated header");
  if (status == VP8_STATUS_UNSUPPORTED_FEATURE) {
    return InvalidArgumentError(util::codes::kUnsupportedImageFormat,
                                "webp: a feature libwebp does not decode");
  }
  if (status != VP8_STATUS_OK) return InvalidImage("webp", "corrupt header");
  DI_RETURN_IF_ERROR(CheckDimensions(features.width, features.height, limits, "webp"));

  WebPData webp_data{data.data(), data.size()};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return InvalidImage("webp", "libwebp version mismatch");
  options.color_mode = MODE_RGBA;  // not premultiplied: the colour under alpha stays as stored
  options.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, AnimDecoderDeleter> decoder(
      WebPAnimDecoderNew(&webp_data, &options));
  if (decoder == nullptr) return InvalidImage("webp", "corrupt or truncated container");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(decoder.get(), &info)) return InvalidImage("webp", "corrupt header");
  // The demuxer's canvas must be the one the limit was checked against.
  if (static_cast<int>(info.canvas_width) != features.width ||
      static_cast<int>(info.canvas_height) != features.height) {
    return InvalidImage("webp", "inconsistent canvas size");
  }
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(decoder.get(), &rgba, &timestamp) || rgba == nullptr) {
    return InvalidImage("webp", "corrupt or truncated image data");
  }
  RgbImage out;
  out.width = features.width;
  out.height = features.height;
  size_t n = static_cast<size_t>(out.width) * out.height;
  out.pixels.resize(n * 3);
  for (size_t i = 0; i < n; ++i) std::memcpy(&out.pixels[i * 3], rgba + i * 4, 3);
  return out;
}

}  // namespace deepinfer::image::internal
