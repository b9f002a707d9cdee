#include "protocol/image_parts.h"

#include <array>
#include <utility>

#include "absl/strings/escaping.h"
#include "fmt/format.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

absl::Status Missing(std::string_view param, std::string_view what) {
  return http::RequestError(param, util::codes::kMissingField, what);
}

// The url of an OpenAI "image_url" value: a string, or {"url": string, "detail": ...}.
absl::StatusOr<std::string> ImageUrlValue(const util::Json& value, const std::string& param) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_object()) {
    return http::RequestError(param, util::codes::kInvalidType,
                              "'image_url' must be an object {\"url\": ...} or a string.");
  }
  auto url = value.find("url");
  if (url == value.end() || url->is_null()) return Missing(param + ".url", "'url' is required.");
  if (!url->is_string())
    return http::RequestError(param + ".url", util::codes::kInvalidType, "'url' must be a string.");
  return url->get<std::string>();  // "detail" is ignored, as vLLM ignores it
}

// Anthropic's source: base64 (made a data: URI) or url.
absl::StatusOr<std::string> AnthropicSource(const util::Json& part, const std::string& param) {
  auto source = part.find("source");
  if (source == part.end() || source->is_null())
    return Missing(param + ".source", "An image block needs a 'source'.");
  if (!source->is_object()) {
    return http::RequestError(param + ".source", util::codes::kInvalidType,
                              "'source' must be an object.");
  }
  const std::string type = util::StringMember(*source, "type").value_or("");
  if (type == "base64") {
    std::optional<std::string> data = util::StringMember(*source, "data");
    if (!data) return Missing(param + ".source.data", "A base64 source needs a string 'data'.");
    const std::string media = util::StringMember(*source, "media_type").value_or("image/*");
    return fmt::format("data:{};base64,{}", media, *data);
  }
  if (type == "url") {
    std::optional<std::string> url = util::StringMember(*source, "url");
    if (!url) return Missing(param + ".source.url", "A url source needs a string 'url'.");
    return *std::move(url);
  }
  return http::RequestError(param + ".source.type", util::codes::kUnsupportedValue,
                            fmt::format("Image source type '{}' is not supported; send 'base64' "
                                        "or 'url'.",
                                        type));
}


}  // namespace

absl::StatusOr<ImageRef> ParseImagePart(const util::Json& part, std::string_view param_view) {
  const std::string param(param_view);
  ImageRef ref;
  ref.param = param;
  const std::string type = util::StringMember(part, "type").value_or("");
  if (type == "image_url") {
    auto value = part.find("image_url");
    if (value == part.end() || value->is_null())
      return Missing(param + ".image_url", "An image_url part needs 'image_url'.");
    DI_ASSIGN_OR_RETURN(ref.url, ImageUrlValue(*value, param + ".image_url"));
  } else if (type == "input_image") {
    auto value = part.find("image_url");
    if (value == part.end() || value->is_null()) {
      if (part.contains("file_id")) {
        return http::RequestError(param + ".file_id", util::codes::kUnsupportedValue,
                                  "Images by file_id are not supported (this server has no "
                                  "Files API); send 'image_url' with a data: URI or a URL.");
      }
      return Missing(param + ".image_url", "An input_image part needs 'image_url'.");
    }
    DI_ASSIGN_OR_RETURN(ref.url, ImageUrlValue(*value, param + ".image_url"));
  } else if (type == "image") {
    DI_ASSIGN_OR_RETURN(ref.url, AnthropicSource(part, param));
  } else {
    return http::RequestError(param, util::codes::kUnsupportedValue,
                              fmt::format("'{}' is not an image part.", type));
  }
  if (ref.url.empty()) return Missing(param, "The image's URL is empty.");
  return ref;
}

bool IsDataUri(std::string_view url) {
  static constexpr std::string_view kData = "data:";
  if (url.size() < kData.size()) return false;
  for (size_t i = 0; i < kData.size(); ++i) {
    char c = url[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kData[i]) return false;
  }
  return true;
}

absl::StatusOr<std::string> DecodeDataUri(std::string_view uri, size_t max_bytes) {
  if (!IsDataUri(uri)) {
    return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kInvalidImage,
                     "Not a data: URI.");
  }
  const size_t comma = uri.find(',');
  if (comma == std::string_view::npos) {
    return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kInvalidImage,
                     "A data: URI needs a ',' before its data.");
  }
  std::string_view meta = uri.substr(5, comma - 5);
  const std::string_view data = uri.substr(comma + 1);
  if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64") {
    return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kInvalidImage,
                     "An image data: URI must be base64 (\"data:image/png;base64,...\").");
  }
  if (data.size() / 4 * 3 > max_bytes + 3) {
    return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kImageTooLarge,
                     fmt::format("The image is larger than {} bytes (--max-image-bytes).",
                                 max_bytes));
  }
  // absl's decoders skip whitespace and take the padding as optional; clients send the
  // standard alphabet, a few the URL-safe one.
  std::string out;
  const absl::string_view b64(data.data(), data.size());  // Debian's absl has its own string_view
  if (!absl::Base64Unescape(b64, &out) && !absl::WebSafeBase64Unescape(b64, &out)) {
    return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kInvalidImage,
                     "The image's data: URI is not valid base64.");
  }
  if (out.size() > max_bytes) {
    return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kImageTooLarge,
                     fmt::format("The image is larger than {} bytes (--max-image-bytes).",
                                 max_bytes));
  }
  return out;
}

std::vector<int32_t> ExpandImageSpans(const std::vector<int32_t>& tokens,
                                      const std::vector<int32_t>& positions,
                                      const std::vector<int32_t>& span_lengths,
                                      std::vector<int32_t>* span_starts) {
  DI_CHECK(positions.size() == span_lengths.size());
  size_t total = tokens.size();
  for (int32_t n : span_lengths) {
    DI_CHECK(n >= 1);
    total += static_cast<size_t>(n) - 1;
  }
  std::vector<int32_t> out;
  out.reserve(total);
  span_starts->clear();
  size_t next = 0;
  for (size_t i = 0; i < positions.size(); ++i) {
    const size_t pos = static_cast<size_t>(positions[i]);
    DI_CHECK(pos >= next && pos < tokens.size());
    out.insert(out.end(), tokens.begin() + static_cast<std::ptrdiff_t>(next),
               tokens.begin() + static_cast<std::ptrdiff_t>(pos));
    span_starts->push_back(static_cast<int32_t>(out.size()));
    out.insert(out.end(), static_cast<size_t>(span_lengths[i]), tokens[pos]);
    next = pos + 1;
  }
  out.insert(out.end(), tokens.begin() + static_cast<std::ptrdiff_t>(next), tokens.end());
  return out;
}

}  // namespace deepinfer::api
