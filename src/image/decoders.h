#pragma once

// The four decoders behind DecodeImage (image.h); internal to src/image. Each checks
// `limits.max_pixels` against its header before allocating pixels and returns the errors
// DecodeImage documents. `data` is never empty and its magic has been sniffed.

#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "image/image.h"

namespace deepinfer::image::internal {

absl::StatusOr<RgbImage> DecodePng(std::span<const uint8_t> data, const DecodeLimits& limits);
absl::StatusOr<RgbImage> DecodeJpeg(std::span<const uint8_t> data, const DecodeLimits& limits);
absl::StatusOr<RgbImage> DecodeWebp(std::span<const uint8_t> data, const DecodeLimits& limits);
absl::StatusOr<RgbImage> DecodeGif(std::span<const uint8_t> data, const DecodeLimits& limits);

// OK when a width x height image is allowed by `limits`; else invalid_image (a side < 1) or
// image_too_large. `format` names the format in the message.
absl::Status CheckDimensions(int64_t width, int64_t height, const DecodeLimits& limits,
                             std::string_view format);

// invalid_image with "<format>: <message>".
absl::Status InvalidImage(std::string_view format, std::string_view message);

}  // namespace deepinfer::image::internal
