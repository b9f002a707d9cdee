// Image content parts as a client sends them (src/protocol/image_parts.h): the part JSON of every
// API (OpenAI image_url, Responses input_image, Anthropic image with base64 or url sources), the
// data: URI decoding, and what the server does with the bytes (image::DecodeImage under small
// limits, the DeepSeek-V4.1 plan) and with the prompt (ExpandImageSpans). Nothing may crash, and
// what succeeds keeps its documented bounds.
//
// Input: the bytes are a JSON content part; when they are not JSON, they are taken as the text
// of a data: URI (so the base64 decoder sees raw bytes too).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/errors.h"
#include "image/deepseek_vision.h"
#include "image/image.h"
#include "protocol/image_parts.h"
#include "util/json.h"

namespace {

constexpr size_t kMaxBytes = size_t{1} << 20;

void DecodeAndPlan(std::string_view uri) {
  absl::StatusOr<std::string> bytes = deepinfer::api::DecodeDataUri(uri, kMaxBytes);
  if (!bytes.ok()) {
    if (deepinfer::http::ApiErrorFromStatus(bytes.status()).http_status != 400) __builtin_trap();
    return;
  }
  if (bytes->size() > kMaxBytes) __builtin_trap();
  deepinfer::image::DecodeLimits limits;
  limits.max_bytes = kMaxBytes;
  limits.max_pixels = 1'000'000;
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes->data()),
                                      bytes->size());
  absl::StatusOr<deepinfer::image::RgbImage> image = deepinfer::image::DecodeImage(data, limits);
  if (!image.ok()) return;
  if (int64_t{image->width} * image->height > limits.max_pixels) __builtin_trap();
  const deepinfer::image::VisionKnobs knobs;  // the release's
  auto plan = deepinfer::image::PlanImageGrid(image->width, image->height, knobs);
  if (!plan.ok()) return;
  const int span = plan->num_image_tokens();
  if (span < 4 || span > knobs.max_image_tokens) __builtin_trap();
  // The span laid into a small prompt: [1, image, 2].
  std::vector<int32_t> starts;
  std::vector<int32_t> out =
      deepinfer::api::ExpandImageSpans({1, 9, 2}, {1}, {span}, &starts);
  if (out.size() != static_cast<size_t>(span) + 2 || starts != std::vector<int32_t>{1} ||
      out.back() != 2) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  deepinfer::util::Json part =
      deepinfer::util::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (part.is_discarded()) {
    DecodeAndPlan(std::string("data:image/png;base64,") + std::string(text));
    return 0;
  }
  auto ref = deepinfer::api::ParseImagePart(part, "messages[0].content[0]");
  if (!ref.ok()) {
    const auto error = deepinfer::http::ApiErrorFromStatus(ref.status());
    if (error.http_status != 400 || error.param.empty()) __builtin_trap();
    return 0;
  }
  if (ref->url.empty() || ref->param != "messages[0].content[0]") __builtin_trap();
  if (deepinfer::api::IsDataUri(ref->url)) DecodeAndPlan(ref->url);
  return 0;
}
