// Image inputs of serve: the fetch policy (data: URIs, allowed hosts, the allowed local folder),
// the checks before fetching, and the span expansion; against DeepSeek's own expansion of the
// goldens' prompt (../shared/goldens/deepseek_v41_vision/v41vis_a; skipped when absent).

#include "api/image_inputs.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "http/errors.h"
#include "util/json.h"

namespace deepinfer::api {
namespace {

namespace fs = std::filesystem;

// A 1x1 RGBA PNG.
constexpr char kPng1x1[] =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

std::string CodeOf(const absl::Status& s) { return http::ApiErrorFromStatus(s).code; }
std::string ParamOf(const absl::Status& s) { return http::ApiErrorFromStatus(s).param; }

ImageRef Ref(std::string url) { return ImageRef{std::move(url), "messages[0].content[0]"}; }

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("image_inputs_test_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_ / "allowed");
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void Write(const fs::path& rel, const std::string& bytes) const {
    std::ofstream(path_ / rel, std::ios::binary) << bytes;
  }

 private:
  fs::path path_;
};

TEST(FetchImageBytesTest, DataUrisAlwaysWork) {
  MediaOptions options;
  auto bytes = FetchImageBytes(Ref("data:image/png;base64,aGk="), options);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "hi");
  auto bad = FetchImageBytes(Ref("data:image/png;base64,%%%"), options);
  EXPECT_EQ(CodeOf(bad.status()), "invalid_image");
  EXPECT_EQ(ParamOf(bad.status()), "messages[0].content[0]");
  options.max_image_bytes = 1;
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref("data:image/png;base64,aGk="), options).status()),
            "image_too_large");
}

TEST(FetchImageBytesTest, RemoteUrlsNeedAnAllowedHost) {
  MediaOptions options;
  for (const char* url : {"http://example.com/a.png", "https://example.com/a.png",
                          "ftp://example.com/a.png", "gopher://x", "example.com/a.png"}) {
    auto r = FetchImageBytes(Ref(url), options);
    EXPECT_EQ(CodeOf(r.status()), "image_url_not_allowed") << url;
    EXPECT_EQ(ParamOf(r.status()), "messages[0].content[0]") << url;
  }
  options.allowed_media_domains = {"Images.Example.com"};
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref("http://example.com/a.png"), options).status()),
            "image_url_not_allowed");
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref("http://evil.com@images.example.com/a.png"), options)
                       .status()),
            "image_url_not_allowed");
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref("http://images.example.com.evil.com/a"), options)
                       .status()),
            "image_url_not_allowed");
  // Allowed, but unreachable: fails to fetch, over http and https alike.
  options.allowed_media_domains = {"127.0.0.1"};
  options.media_fetch_timeout_ms = 500;
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref("http://127.0.0.1:1/a.png?x=1"), options).status()),
            "image_fetch_failed");
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref("https://127.0.0.1:1/a.png"), options).status()),
            "image_fetch_failed");
}

TEST(FetchImageBytesTest, FileUrlsOnlyUnderTheAllowedFolder) {
  TempDir dir;
  dir.Write("allowed/a.png", "png bytes");
  dir.Write("secret.png", "secret");
  fs::create_symlink(dir.path() / "secret.png", dir.path() / "allowed" / "link.png");
  MediaOptions options;
  const std::string base = "file://" + dir.path().string();
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref(base + "/allowed/a.png"), options).status()),
            "image_url_not_allowed");  // off by default
  options.allowed_local_media_path = (dir.path() / "allowed").string();
  auto ok = FetchImageBytes(Ref(base + "/allowed/a.png"), options);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "png bytes");
  EXPECT_EQ(*FetchImageBytes(Ref(base + "/allowed/%61.png"), options), "png bytes");
  for (const std::string& url :
       {base + "/secret.png", base + "/allowed/../secret.png", base + "/allowed/link.png",
        base + "/allowed", std::string("file://relative/a.png"), base + "/nothere/x.png"}) {
    EXPECT_EQ(CodeOf(FetchImageBytes(Ref(url), options).status()), "image_url_not_allowed")
        << url;
  }
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref(base + "/allowed/missing.png"), options).status()),
            "image_fetch_failed");
  options.max_image_bytes = 4;
  EXPECT_EQ(CodeOf(FetchImageBytes(Ref(base + "/allowed/a.png"), options).status()),
            "image_too_large");
  EXPECT_TRUE(CheckMediaOptions(options).ok());
  options.allowed_local_media_path = (dir.path() / "none").string();
  EXPECT_EQ(CodeOf(CheckMediaOptions(options)), "bad_option");
  options.allowed_local_media_path.clear();
  options.limit_images_per_request = 1000;
  EXPECT_EQ(CodeOf(CheckMediaOptions(options)), "bad_option");
}

std::vector<ChatMessage> UserWithImages(int n, const std::string& url) {
  ChatMessage m;
  m.role = "user";
  int32_t parts = 0;
  AppendTextPart("look", &parts, &m.content);
  for (int i = 0; i < n; ++i) {
    AppendTextPart(kImagePlaceholder, &parts, &m.content);
    m.images.push_back(ImageRef{url, "messages[0].content[" + std::to_string(i + 1) + "]"});
  }
  return {m};
}

TEST(CheckImagesAllowedTest, RefusesBeforeFetching) {
  model::DeepseekV41VisionConfig vision;
  MediaOptions options;
  options.limit_images_per_request = 2;
  const auto two = UserWithImages(2, "http://not.allowed/x.png");
  EXPECT_TRUE(CheckImagesAllowed(two, &vision, options, false).ok());
  EXPECT_TRUE(CheckImagesAllowed(UserWithImages(0, ""), nullptr, options, true).ok());
  absl::Status s = CheckImagesAllowed(two, nullptr, options, false);
  EXPECT_EQ(CodeOf(s), "unsupported_content");
  EXPECT_EQ(ParamOf(s), "messages[0].content[1]");
  EXPECT_EQ(CodeOf(CheckImagesAllowed(two, &vision, options, true)), "unsupported_on_pd");
  EXPECT_EQ(CodeOf(CheckImagesAllowed(UserWithImages(3, "data:,"), &vision, options, false)),
            "too_many_images");
}

// A 1x1 image plans 546x546 pixels, a 39x39 patch grid and a 13x13 token grid: 184 tokens.
TEST(ExpandChatImagesTest, EachImageTokenBecomesItsSpanWithItsInput) {
  model::DeepseekV41VisionConfig vision;
  vision.min_pixels = 295936;
  vision.image_token_id = 99;
  MediaOptions options;
  const auto messages = UserWithImages(2, std::string("data:image/png;base64,") + kPng1x1);
  ChatPrompt prompt;
  prompt.tokens = {1, 2, 99, 3, 99, 4};
  prompt.image_positions = {2, 4};
  std::vector<std::shared_ptr<const engine::ImageInput>> images;
  ASSERT_TRUE(ExpandChatImages(messages, vision, options, &prompt, &images).ok());
  ASSERT_EQ(prompt.tokens.size(), 6u - 2 + 2 * 184);
  EXPECT_EQ(prompt.image_positions, (std::vector<int32_t>{2, 2 + 184 + 1}));
  ASSERT_EQ(images.size(), 2u);
  EXPECT_EQ(images[0]->position, 2);
  EXPECT_EQ(images[1]->position, 187);
  EXPECT_EQ(images[0]->n_vit_h, 39);
  EXPECT_EQ(images[0]->n_vit_w, 39);
  EXPECT_EQ(images[0]->pixel_values.size(), size_t{39 * 39 * 3 * 14 * 14});
  EXPECT_NE(images[0]->content_hash, 0u);
  EXPECT_EQ(images[0]->content_hash, images[1]->content_hash);
  EXPECT_EQ(prompt.tokens[187 + 184], 4);

  // Counting makes the plan only.
  ChatPrompt count;
  count.tokens = {1, 99, 99};
  count.image_positions = {1, 2};
  ASSERT_TRUE(ExpandChatImages(messages, vision, options, &count, nullptr).ok());
  EXPECT_EQ(count.tokens.size(), 1u + 2 * 184);

  // Bad bytes are the image library's codes, with the part's param.
  ChatPrompt bad;
  bad.tokens = {99};
  bad.image_positions = {0};
  absl::Status s = ExpandChatImages(UserWithImages(1, "data:image/png;base64,AAAA"), vision,
                                    options, &bad, nullptr);
  EXPECT_EQ(CodeOf(s), "unsupported_image_format");
  EXPECT_EQ(ParamOf(s), "messages[0].content[1]");
  // A 1-pixel cap refuses the image from its header.
  options.max_image_pixels = 1;
  options.max_image_bytes = 1 << 20;
  bad.tokens = {99};
  bad.image_positions = {0};
  EXPECT_TRUE(ExpandChatImages(UserWithImages(1, messages[0].images[0].url), vision, options,
                               &bad, nullptr)
                  .ok());
  options.max_image_bytes = 10;
  bad.tokens = {99};
  bad.image_positions = {0};
  EXPECT_EQ(CodeOf(ExpandChatImages(UserWithImages(1, messages[0].images[0].url), vision, options,
                                    &bad, nullptr)),
            "image_too_large");
}

// DeepSeek's prepare_vl_inputs on the goldens' prompt: the same ids, span starts and grids.
TEST(ExpandChatImagesTest, MatchesTheReferenceExpansionOfTheGoldens) {
  const fs::path dir = fs::path(DI_SOURCE_DIR) / "../shared/goldens/deepseek_v41_vision";
  if (!fs::exists(dir / "v41vis_a/golden.json")) {
    GTEST_SKIP() << "../shared/goldens/deepseek_v41_vision is absent (a user's clone has none)";
  }
  std::ifstream in(dir / "v41vis_a/golden.json");
  const util::Json golden = util::Json::parse(in);
  const util::Json& e2e = golden["e2e"];
  model::DeepseekV41VisionConfig vision;
  vision.min_pixels = 295936;
  vision.image_token_id = golden["image_token_id"].get<int>();
  MediaOptions options;
  options.allowed_local_media_path = dir.string();
  ChatMessage m;
  m.role = "user";
  for (const util::Json& span : e2e["spans"]) {
    const fs::path file = (dir / "v41vis_a" / span["image"].get<std::string>()).lexically_normal();
    m.images.push_back(ImageRef{"file://" + file.string(), "img"});
  }
  ChatPrompt prompt;
  prompt.tokens = e2e["prompt_with_placeholders"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < prompt.tokens.size(); ++i) {
    if (prompt.tokens[i] == vision.image_token_id) {
      prompt.image_positions.push_back(static_cast<int32_t>(i));
    }
  }
  std::vector<std::shared_ptr<const engine::ImageInput>> images;
  absl::Status s = ExpandChatImages({m}, vision, options, &prompt, &images);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(prompt.tokens, e2e["input_ids"].get<std::vector<int32_t>>());
  ASSERT_EQ(images.size(), e2e["spans"].size());
  for (size_t i = 0; i < images.size(); ++i) {
    EXPECT_EQ(images[i]->position, e2e["spans"][i]["start"].get<int32_t>());
    EXPECT_EQ(images[i]->n_vit_h, e2e["spans"][i]["n_vit_h"].get<int32_t>());
    EXPECT_EQ(images[i]->n_vit_w, e2e["spans"][i]["n_vit_w"].get<int32_t>());
  }
}

}  // namespace
}  // namespace deepinfer::api
