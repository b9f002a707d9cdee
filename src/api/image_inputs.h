#pragma once

// Image inputs of serve's chat routes: where the bytes may come from (data: URIs always; http://
// and https:// only from allowed domains; file:// only under an allowed folder, as vLLM's
// --allowed-media-domains and --allowed-local-media-path), decoding with limits, DeepSeek-V4.1's
// preprocessing, and the image spans laid into the rendered prompt for the engine
// (engine::ImageInput) or for counting.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "image/deepseek_vision.h"
#include "image/image.h"
#include "model/model.h"
#include "protocol/chat_prompt.h"
#include "protocol/image_parts.h"
#include "protocol/openai_types.h"

namespace deepinfer::api {

// The most --limit-images-per-request may be (the operator documents' bound).
inline constexpr int32_t kMaxImagesPerRequestLimit = 999;

// What an image request may read and how much (serve's flags).
// Units: bytes, pixels (width * height), milliseconds.
struct MediaOptions {
  // Hosts whose http:// and https:// URLs may be fetched (exact names, ASCII case ignored);
  // empty: none.
  std::vector<std::string> allowed_media_domains;
  // The folder file:// URLs must resolve under (symlinks resolved); "": none.
  std::string allowed_local_media_path;
  int media_fetch_timeout_ms = 5000;
  int64_t max_image_bytes = int64_t{20} << 20;
  int64_t max_image_pixels = 50'000'000;
  int32_t limit_images_per_request = 640;
};

// OK when the options are usable: limit_images_per_request in [0, 999], byte and pixel caps
// >= 1, timeout >= 1 ms, an allowed local path that is an existing folder.
// Errors: InvalidArgument "bad_option".
absl::Status CheckMediaOptions(const MediaOptions& options);

// The bytes of one image, under `options`: a data: URI is decoded (DecodeDataUri); an http:// or
// https:// URL is fetched when its host is allowed (https: the certificate verified against the
// system's CA store, http::Fetch); a file:// URL is read when its resolved path lies under
// allowed_local_media_path. Every error carries ref.param.
// Errors: InvalidArgument "image_url_not_allowed" (host or path not allowed, another scheme),
//   "image_fetch_failed" (connect, TLS handshake or certificate, timeout, a non-200 answer, a
//   missing file), "image_too_large"
//   (over max_image_bytes), "invalid_image" (a malformed data: URI).
// Threads: any. Cost: at most one fetch bounded by media_fetch_timeout_ms.
absl::StatusOr<std::string> FetchImageBytes(const ImageRef& ref, const MediaOptions& options);

// The preprocessing knobs of a model's vision config.
image::VisionKnobs VisionKnobsOf(const model::DeepseekV41VisionConfig& vision);

// Refuses images a server cannot take, before anything is fetched: on the decode side of a P/D
// pair ("unsupported_on_pd"), for a model without a vision tower ("unsupported_content"), more
// than limit_images_per_request ("too_many_images"). OK without images.
absl::Status CheckImagesAllowed(const std::vector<ChatMessage>& messages,
                                const model::DeepseekV41VisionConfig* vision,
                                const MediaOptions& options, bool pd_decode);

// Reads, decodes and preprocesses every image of `messages` (in prompt order) and expands
// prompt->tokens in place: the one image token at each image_positions[i] becomes the image's
// span (n_h (n_w + 1) + 2 copies of image_token_id; image_positions then hold the span starts).
// With `images`, each image's engine::ImageInput (position, ViT grid, pixel values, XXH3-64 of
// its file bytes) is appended to it; without, only the plan is made (counting).
// Errors: those of FetchImageBytes, image::DecodeImage and image::PreprocessImage with the
//   image's param; InvalidArgument "invalid_value" when the prompt's image tokens do not match
//   the images.
absl::Status ExpandChatImages(const std::vector<ChatMessage>& messages,
                              const model::DeepseekV41VisionConfig& vision,
                              const MediaOptions& options, ChatPrompt* prompt,
                              std::vector<std::shared_ptr<const engine::ImageInput>>* images);

}  // namespace deepinfer::api
