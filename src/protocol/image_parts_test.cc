#include "protocol/image_parts.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "http/errors.h"
#include "protocol/chat_prompt.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::api {
namespace {

std::string CodeOf(const absl::Status& status) { return http::ApiErrorFromStatus(status).code; }

TEST(DecodeDataUriTest, DecodesBase64WithOrWithoutPaddingAndWhitespace) {
  EXPECT_EQ(*DecodeDataUri("data:image/png;base64,aGVsbG8=", 100), "hello");
  EXPECT_EQ(*DecodeDataUri("DATA:image/png;base64,aGVsbG8", 100), "hello");
  EXPECT_EQ(*DecodeDataUri("data:;base64,aGVs\nbG8h", 100), "hello!");
  EXPECT_EQ(*DecodeDataUri("data:image/jpeg;base64,", 100), "");
  EXPECT_EQ(*DecodeDataUri("data:image/png;base64,_-8=", 100), std::string("\xff\xef", 2));
}

TEST(DecodeDataUriTest, MalformedOrOversizedUrisAreImageErrors) {
  EXPECT_EQ(CodeOf(DecodeDataUri("data:image/png,rawbytes", 100).status()), "invalid_image");
  EXPECT_EQ(CodeOf(DecodeDataUri("data:image/png;base64", 100).status()), "invalid_image");
  EXPECT_EQ(CodeOf(DecodeDataUri("data:image/png;base64,a$b=", 100).status()), "invalid_image");
  EXPECT_EQ(CodeOf(DecodeDataUri("data:image/png;base64,aGVsbG8=x", 100).status()),
            "invalid_image");
  EXPECT_EQ(CodeOf(DecodeDataUri("data:image/png;base64,a", 100).status()), "invalid_image");
  EXPECT_EQ(CodeOf(DecodeDataUri("http://x/y.png", 100).status()), "invalid_image");
  EXPECT_EQ(CodeOf(DecodeDataUri("data:image/png;base64,aGVsbG8=", 4).status()),
            "image_too_large");
  EXPECT_EQ(CodeOf(DecodeDataUri("data:;base64," + std::string(4000, 'A'), 100).status()),
            "image_too_large");
  EXPECT_TRUE(IsDataUri("Data:x"));
  EXPECT_FALSE(IsDataUri("dat"));
}

TEST(ExpandImageSpansTest, EachPlaceholderBecomesItsSpan) {
  std::vector<int32_t> starts;
  const std::vector<int32_t> out = ExpandImageSpans({1, 9, 2, 3, 9}, {1, 4}, {3, 2}, &starts);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 9, 9, 9, 2, 3, 9, 9}));
  EXPECT_EQ(starts, (std::vector<int32_t>{1, 6}));
  EXPECT_EQ(ExpandImageSpans({5, 6}, {}, {}, &starts), (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(starts.empty());
}

// A tokenizer of bytes (id = byte value), vocabulary 300: enough to see where images land.
class ByteTokenizer final : public tokenizer::Tokenizer {
 public:
  void EncodeAppend(std::string_view text, bool, std::vector<int32_t>* out) const override {
    for (unsigned char c : text) out->push_back(c);
  }
  void AppendDecoded(int32_t, int32_t id, bool, std::string* out) const override {
    out->push_back(static_cast<char>(id));
  }
  std::string TokenPiece(int32_t id) const override { return std::string(1, char(id)); }
  std::string TokenEntry(int32_t id) const override { return TokenPiece(id); }
  int32_t TokenId(std::string_view) const override { return -1; }
  int32_t vocab_size() const override { return 300; }
  int32_t bos_id() const override { return 0; }
  int32_t eos_id() const override { return 1; }
  bool add_bos() const override { return false; }
  bool IsEog(int32_t id) const override { return id == 1; }
  bool IsSpecial(int32_t id) const override { return id < 2; }
};

// The deepseek-v4.1 encoder renders each image as one image token where it stood in the
// message; a text part that spells the placeholder is refused.
TEST(RenderChatPromptTest, ImagesBecomeOneImageTokenInPlace) {
  ByteTokenizer tok;
  auto tmpl = tokenizer::CreateChatTemplateByName("deepseek-v4.1");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatMessage m;
  m.role = "user";
  m.content = "a\n" + std::string(kImagePlaceholder) + "\nb";
  m.images.push_back(ImageRef{"data:,", "messages[0].content[1]"});
  tokenizer::ChatOptions options;
  auto prompt = RenderChatPrompt(tok, **tmpl, {m}, options, /*image_token_id=*/299);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  ASSERT_EQ(prompt->image_positions.size(), 1u);
  const int32_t at = prompt->image_positions[0];
  EXPECT_EQ(prompt->tokens[static_cast<size_t>(at)], 299);
  EXPECT_EQ(prompt->tokens[static_cast<size_t>(at) - 1], '\n');
  EXPECT_EQ(prompt->tokens[static_cast<size_t>(at) - 2], 'a');
  EXPECT_EQ(prompt->tokens[static_cast<size_t>(at) + 2], 'b');
  EXPECT_EQ(std::count(prompt->tokens.begin(), prompt->tokens.end(), 299), 1);

  // Without a vision model the images are unsupported_content.
  EXPECT_EQ(CodeOf(RenderChatPrompt(tok, **tmpl, {m}, options).status()), "unsupported_content");
  // A placeholder typed into the text breaks the count.
  m.content += std::string(kImagePlaceholder);
  EXPECT_EQ(CodeOf(RenderChatPrompt(tok, **tmpl, {m}, options, 299).status()), "invalid_value");
}

}  // namespace
}  // namespace deepinfer::api
