#include <cstring>

#include "absl/strings/str_cat.h"
#include "image/decoders.h"
#include "image/image.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::image {

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kWebp:
      return "webp";
    case ImageFormat::kGif:
      return "gif";
  }
  return "unknown";
}

absl::StatusOr<ImageFormat> SniffImageFormat(std::span<const uint8_t> data) {
  if (data.empty()) {
    return InvalidArgumentError(util::codes::kInvalidImage, "the image is empty (0 bytes)");
  }
  auto starts = [&](const char* magic, size_t offset = 0) {
    size_t n = std::strlen(magic);
    return data.size() >= offset + n && std::memcmp(data.data() + offset, magic, n) == 0;
  };
  if (starts("\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  // SOI followed by the first marker's FF: every JPEG (JFIF, Exif, raw) starts so.
  if (starts("\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (starts("RIFF") && starts("WEBP", 8)) return ImageFormat::kWebp;
  if (starts("GIF87a") || starts("GIF89a")) return ImageFormat::kGif;
  return InvalidArgumentError(util::codes::kUnsupportedImageFormat,
                              "the image is not PNG, JPEG, WebP or GIF (unknown magic bytes)");
}

absl::StatusOr<RgbImage> DecodeImage(std::span<const uint8_t> data, const DecodeLimits& limits) {
  if (data.size() > limits.max_bytes) {
    return InvalidArgumentError(util::codes::kImageTooLarge,
                                absl::StrCat("the image is ", data.size(), " bytes, over the limit of ",
                                             limits.max_bytes));
  }
  DI_ASSIGN_OR_RETURN(ImageFormat format, SniffImageFormat(data));
  switch (format) {
    case ImageFormat::kPng:
      return internal::DecodePng(data, limits);
    case ImageFormat::kJpeg:
      return internal::DecodeJpeg(data, limits);
    case ImageFormat::kWebp:
      return internal::DecodeWebp(data, limits);
    case ImageFormat::kGif:
      return internal::DecodeGif(data, limits);
  }
  return InternalError(util::codes::kInternal, "unreachable image format");
}

namespace internal {

absl::Status CheckDimensions(int64_t width, int64_t height, const DecodeLimits& limits,
                             std::string_view format) {
  if (width < 1 || height < 1) {
    return InvalidImage(format, absl::StrCat("zero-size image (", width, "x", height, ")"));
  }
  // Both sides fit in 32 bits in every format, so the product cannot overflow int64.
  if (width * height > limits.max_pixels) {
    return InvalidArgumentError(
        util::codes::kImageTooLarge,
        absl::StrCat(std::string(format), ": ", width, "x", height, " = ", width * height,
                     " pixels, over the limit of ", limits.max_pixels));
  }
  return absl::OkStatus();
}

absl::Status InvalidImage(std::string_view format, std::string_view message) {
  return InvalidArgumentError(util::codes::kInvalidImage, absl::StrCat(std::string(format), ": ", std::string(message)));
}

}  // namespace internal
}  // namespace deepinfer::image
