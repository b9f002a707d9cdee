#pragma once

// Image content parts of every chat-shaped API, as protocol values: where an image sits in a
// message and where its bytes come from. Nothing here fetches or decodes pixels (api/ does:
// api/image_inputs.h); this layer parses the parts, decodes data: URIs to bytes, and lays the
// image spans into a rendered prompt.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "util/json.h"

namespace deepinfer::api {

// The text the chat encoders see where an image goes: DeepSeek-V4.1's image token. Rendering
// (RenderChatPrompt) turns each occurrence back into ONE image_token_id, which the server then
// expands to the image's span (ExpandImageSpans).
// Source: DeepSeek-V4.1 encoding (IMAGE_PLACEHOLDER "<｜deepseek_image｜>"), ../shared research
//   notes §7.6.
inline constexpr std::string_view kImagePlaceholder = "<\xef\xbd\x9c" "deepseek_image\xef\xbd\x9c>";

// One image of a message.
struct ImageRef {
  // Where the bytes are: a data: URI (Anthropic base64 sources are rewritten into one), or an
  // http(s):// or file:// URL, as the client sent it.
  std::string url;
  std::string param;  // the request field it came from, e.g. "messages[0].content[1]"
};

// Parses one image content part into an ImageRef:
//   OpenAI chat  {"type": "image_url", "image_url": {"url": URL, "detail": ...}} (or
//                "image_url": URL); `detail` is accepted and ignored, as vLLM does (the model's
//                own preprocessing decides the resolution);
//   Responses    {"type": "input_image", "image_url": URL, "detail": ...}; a `file_id` is
//                refused (no Files API here);
//   Anthropic    {"type": "image", "source": {"type": "base64", "media_type": M, "data": B64}}
//                (-> "data:M;base64,B64") or {"source": {"type": "url", "url": URL}}.
// Errors: InvalidArgument at `param`: "missing_field" / "invalid_type" (no url, wrong types),
//   "unsupported_value" (file_id, another source type).
// Threads: pure function.
absl::StatusOr<ImageRef> ParseImagePart(const util::Json& part, std::string_view param);

// True when `url` starts with "data:" (ASCII case ignored).
bool IsDataUri(std::string_view url);

// The bytes of a base64 data: URI ("data:[<media type>][;params];base64,<data>"). The media type
// is not trusted (the decoder sniffs the bytes); whitespace inside the data is skipped, padding
// is optional.
// Errors: InvalidArgument "invalid_image" (not base64 or malformed), "image_too_large" (more than
//   `max_bytes` decoded bytes, judged from the length before decoding).
// Cost: O(uri size), one allocation of the decoded size.
absl::StatusOr<std::string> DecodeDataUri(std::string_view uri, size_t max_bytes);

// Replaces each image_token_id of `tokens` at `positions` (ascending, one per image) with
// span_lengths[i] copies of it. Returns the expanded prompt; *span_starts receives where each
// span starts in it.
// Preconditions: positions.size() == span_lengths.size(), tokens[positions[i]] is the image
//   token, span lengths >= 1 (DI_CHECK).
std::vector<int32_t> ExpandImageSpans(const std::vector<int32_t>& tokens,
                                      const std::vector<int32_t>& positions,
                                      const std::vector<int32_t>& span_lengths,
                                      std::vector<int32_t>* span_starts);

}  // namespace deepinfer::api
