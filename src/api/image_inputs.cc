#include "api/image_inputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <span>
#include <system_error>
#include <utility>

#include "fmt/format.h"
#include "http/client.h"
#include "http/errors.h"
#include "http/url.h"
#include "util/error_codes.h"
#include "util/status.h"
#include "xxhash.h"

namespace deepinfer::api {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

absl::Status NotAllowed(const ImageRef& ref, std::string_view why) {
  return http::RequestError(ref.param, util::codes::kImageUrlNotAllowed, why);
}

absl::Status FetchFailed(const ImageRef& ref, std::string_view why) {
  return http::RequestError(ref.param, util::codes::kImageFetchFailed, why);
}

absl::Status TooLarge(const ImageRef& ref, int64_t max_bytes) {
  return http::RequestError(
      ref.param, util::codes::kImageTooLarge,
      fmt::format("The image is larger than {} bytes (--max-image-bytes).", max_bytes));
}

// "%2F" -> "/"; other bytes kept. False for a malformed escape.
bool PercentDecode(std::string_view in, std::string* out) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

// Reads `file` (resolved under `root`) through one descriptor: the path the descriptor really
// opened is checked under `root` again, so a link swapped in after the first check cannot lead
// outside; size and bytes come from that descriptor.
absl::StatusOr<std::string> ReadOpenedUnder(const ImageRef& ref,
                                            const std::filesystem::path& file,
                                            const std::filesystem::path& root,
                                            int64_t max_bytes) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return FetchFailed(ref, "The image file cannot be read.");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::error_code ec;
  const std::filesystem::path opened =
      std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  if (ec || !opened.string().starts_with(root.string() + "/")) {
    return NotAllowed(ref, "The file is outside --allowed-local-media-path.");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return FetchFailed(ref, "The image path is not a regular file.");
  }
  if (st.st_size > max_bytes) return TooLarge(ref, max_bytes);
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return FetchFailed(ref, "The image file cannot be read.");
    done += static_cast<size_t>(n);
  }
  return bytes;
}

absl::StatusOr<std::string> ReadLocalFile(const ImageRef& ref, std::string_view rest,
                                          const MediaOptions& options) {
  if (options.allowed_local_media_path.empty()) {
    return NotAllowed(ref, "file:// image URLs are off on this server (serve "
                           "--allowed-local-media-path enables a folder).");
  }
  // file:///abs/path or file://localhost/abs/path.
  if (rest.starts_with("localhost/")) rest.remove_prefix(9);
  std::string path;
  if (!rest.starts_with("/") || !PercentDecode(rest, &path) ||
      path.find('\0') != std::string::npos) {
    return NotAllowed(ref, "A file:// image URL must name an absolute local path.");
  }
  std::error_code ec;
  const std::filesystem::path root =
      std::filesystem::canonical(options.allowed_local_media_path, ec);
  if (ec) return FetchFailed(ref, "The allowed local media folder cannot be read.");
  const std::filesystem::path file = std::filesystem::canonical(path, ec);
  if (ec) {
    // Say "not allowed" for paths outside the folder, so that probing learns nothing.
    const std::string lexical = std::filesystem::path(path).lexically_normal().string();
    if (!lexical.starts_with(root.string() + "/"))
      return NotAllowed(ref, "The file is outside --allowed-local-media-path.");
    return FetchFailed(ref, "The image file does not exist or cannot be read.");
  }
  const std::string resolved = file.string();
  if (!resolved.starts_with(root.string() + "/")) {
    return NotAllowed(ref, "The file is outside --allowed-local-media-path.");
  }
  return ReadOpenedUnder(ref, file, root, options.max_image_bytes);
}

// The host of "host[:port][/...]" (lower case), "" when malformed or with user info.
std::string HostOf(std::string_view authority_and_path) {
  const size_t end = authority_and_path.find_first_of("/?#");
  std::string_view authority = authority_and_path.substr(0, end);
  if (authority.find('@') != std::string_view::npos) return "";
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    return close == std::string_view::npos ? "" : Lower(authority.substr(1, close - 1));
  }
  return Lower(authority.substr(0, authority.find(':')));
}

absl::StatusOr<std::string> FetchRemote(const ImageRef& ref, bool https, std::string_view rest,
                                        const MediaOptions& options) {
  const std::string host = HostOf(rest);
  const bool allowed =
      !host.empty() && std::any_of(options.allowed_media_domains.begin(),
                                   options.allowed_media_domains.end(),
                                   [&](const std::string& d) { return Lower(d) == host; });
  if (!allowed) {
    return NotAllowed(ref, options.allowed_media_domains.empty()
                               ? "Image URLs are off on this server; send the image as a data: "
                                 "URI (serve --allowed-media-domains enables hosts)."
                               : "The image's host is not in --allowed-media-domains.");
  }
  const size_t query = rest.find_first_of("?#");
  absl::StatusOr<http::Url> url =
      http::ParseUrl(fmt::format("{}://{}", https ? "https" : "http", rest.substr(0, query)),
                     http::UrlSchemes::kHttpOrHttps);
  if (!url.ok()) return FetchFailed(ref, "The image URL is malformed.");
  http::ClientRequest request;
  request.target = url->path().empty() ? "/" : url->path();
  if (query != std::string_view::npos && rest[query] == '?') {
    const std::string_view q = rest.substr(query);
    request.target += q.substr(0, q.find('#'));
  }
  http::FetchOptions fetch;
  fetch.idle_timeout_ms = options.media_fetch_timeout_ms;
  fetch.total_timeout_ms = options.media_fetch_timeout_ms;
  fetch.max_body_bytes = options.max_image_bytes;
  absl::StatusOr<http::ClientResponse> response = http::Fetch(*url, request, fetch);
  if (!response.ok()) {
    if (response.status().code() == absl::StatusCode::kResourceExhausted) {
      return TooLarge(ref, options.max_image_bytes);
    }
    return FetchFailed(ref, fmt::format("Fetching the image failed: {}",
                                        std::string(response.status().message())));
  }
  if (response->status != 200) {
    return FetchFailed(ref, fmt::format("Fetching the image answered HTTP {}.", response->status));
  }
  return std::move(response->body);
}

}  // namespace

absl::Status CheckMediaOptions(const MediaOptions& options) {
  auto bad = [](std::string message) {
    return MakeError(absl::StatusCode::kInvalidArgument, util::codes::kBadOption, message);
  };
  if (options.limit_images_per_request < 0 ||
      options.limit_images_per_request > kMaxImagesPerRequestLimit) {
    return bad(fmt::format("--limit-images-per-request must be 0-{}", kMaxImagesPerRequestLimit));
  }
  if (options.max_image_bytes < 1) return bad("--max-image-bytes must be at least 1");
  if (options.max_image_pixels < 1) return bad("--max-image-pixels must be at least 1");
  if (options.media_fetch_timeout_ms < 1) return bad("--media-fetch-timeout must be positive");
  if (!options.allowed_local_media_path.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(options.allowed_local_media_path, ec)) {
      return bad(fmt::format("--allowed-local-media-path '{}' is not a folder",
                             options.allowed_local_media_path));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FetchImageBytes(const ImageRef& ref, const MediaOptions& options) {
  if (IsDataUri(ref.url)) {
    absl::StatusOr<std::string> bytes =
        DecodeDataUri(ref.url, static_cast<size_t>(options.max_image_bytes));
    if (!bytes.ok()) return http::WithParam(bytes.status(), ref.param);
    return bytes;
  }
  const std::string scheme = Lower(ref.url.substr(0, ref.url.find("://") + 3));
  const std::string_view rest = std::string_view(ref.url).substr(scheme.size());
  if (scheme == "http://" || scheme == "https://") {
    return FetchRemote(ref, scheme == "https://", rest, options);
  }
  if (scheme == "file://") return ReadLocalFile(ref, rest, options);
  return NotAllowed(ref, "An image URL must be a data: URI, or an http(s):// or file:// URL the "
                         "server allows.");
}

image::VisionKnobs VisionKnobsOf(const model::DeepseekV41VisionConfig& vision) {
  image::VisionKnobs knobs;
  knobs.patch_size = vision.patch_size;
  knobs.downsample_ratio = vision.downsample_ratio;
  knobs.max_image_tokens = vision.max_image_tokens;
  knobs.min_pixels = vision.min_pixels;
  if (vision.max_wh_ratio.has_value()) knobs.max_wh_ratio = *vision.max_wh_ratio;
  return knobs;
}

absl::Status CheckImagesAllowed(const std::vector<ChatMessage>& messages,
                                const model::DeepseekV41VisionConfig* vision,
                                const MediaOptions& options, bool pd_decode) {
  const int32_t num_images = CountImages(messages);
  if (num_images == 0) return absl::OkStatus();
  std::string first;
  for (const ChatMessage& m : messages) {
    if (!m.images.empty()) {
      first = m.images.front().param;
      break;
    }
  }
  if (pd_decode) {
    return http::RequestError(first, util::codes::kUnsupportedOnPd,
                              "This server is the decode side of a prefill/decode pair, which "
                              "serves text prompts only; send images to a combined server.");
  }
  if (vision == nullptr) return ImageUnsupportedError(first);
  if (num_images > options.limit_images_per_request) {
    return http::RequestError(
        "messages", util::codes::kTooManyImages,
        fmt::format("The request has {} images; this server takes at most {} per request "
                    "(--limit-images-per-request).",
                    num_images, options.limit_images_per_request));
  }
  return absl::OkStatus();
}

absl::Status ExpandChatImages(const std::vector<ChatMessage>& messages,
                              const model::DeepseekV41VisionConfig& vision,
                              const MediaOptions& options, ChatPrompt* prompt,
                              std::vector<std::shared_ptr<const engine::ImageInput>>* images) {
  std::vector<const ImageRef*> refs;
  for (const ChatMessage& m : messages) {
    for (const ImageRef& r : m.images) refs.push_back(&r);
  }
  if (refs.size() != prompt->image_positions.size()) {
    return http::RequestError("messages", util::codes::kInvalidValue,
                              "The prompt's image tokens do not match its images.");
  }
  const image::VisionKnobs knobs = VisionKnobsOf(vision);
  image::DecodeLimits limits;
  limits.max_bytes = static_cast<size_t>(options.max_image_bytes);
  limits.max_pixels = options.max_image_pixels;
  std::vector<int32_t> span_lengths;
  std::vector<std::shared_ptr<engine::ImageInput>> inputs;
  for (const ImageRef* ref : refs) {
    DI_ASSIGN_OR_RETURN(std::string bytes, FetchImageBytes(*ref, options));
    const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.data()),
                                        bytes.size());
    absl::StatusOr<image::RgbImage> decoded = image::DecodeImage(data, limits);
    if (!decoded.ok()) return http::WithParam(decoded.status(), ref->param);
    image::ImageGridPlan plan;
    auto input = std::make_shared<engine::ImageInput>();
    if (images != nullptr) {
      absl::StatusOr<image::PreprocessedImage> pre = image::PreprocessImage(*decoded, knobs);
      if (!pre.ok()) return http::WithParam(pre.status(), ref->param);
      plan = pre->plan;
      input->pixel_values = std::move(pre->pixel_values);
      input->content_hash = XXH3_64bits(bytes.data(), bytes.size());
    } else {
      absl::StatusOr<image::ImageGridPlan> planned =
          image::PlanImageGrid(decoded->width, decoded->height, knobs);
      if (!planned.ok()) return http::WithParam(planned.status(), ref->param);
      plan = *planned;
    }
    input->n_vit_h = plan.n_vit_h;
    input->n_vit_w = plan.n_vit_w;
    span_lengths.push_back(plan.num_image_tokens());
    inputs.push_back(std::move(input));
  }
  std::vector<int32_t> starts;
  prompt->tokens =
      ExpandImageSpans(prompt->tokens, prompt->image_positions, span_lengths, &starts);
  prompt->image_positions = starts;
  if (images != nullptr) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      inputs[i]->position = starts[i];
      images->push_back(std::move(inputs[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::api
