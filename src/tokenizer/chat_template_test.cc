#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer/test_util.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

nlohmann::json ChatGolden() {
  std::ifstream in(testing::SourcePath("tests/golden/chat/smollm2.json"));
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::vector<ChatMessage> Messages(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j)
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

TEST(ChatTemplateTest, RendersTheSmolLm2TemplateLikeJinja) {
  const auto golden = ChatGolden();
  model::TokenizerData data;
  data.chat_template = golden["template"].get<std::string>();
  auto tmpl = CreateChatTemplate(data);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ((*tmpl)->name(), "chatml");
  ASSERT_GE(golden["cases"].size(), 20u);
  for (const auto& c : golden["cases"]) {
    EXPECT_EQ((*tmpl)->Render(Messages(c["messages"]), c["add_generation_prompt"].get<bool>()),
              c["text"].get<std::string>())
        << c["name"];
  }
}

TEST(ChatTemplateTest, RenderedConversationsTokenizeLikeLlamaCpp) {
  const model::Model* model = testing::SmolLm2Model();
  const Tokenizer* tok = testing::SmolLm2Tokenizer();
  if (model == nullptr) GTEST_SKIP() << "SmolLM2 model not found at " << testing::SmolLm2Path();
  auto tmpl = CreateChatTemplate(model->tokenizer);  // the template from the GGUF itself
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  const auto golden = ChatGolden();
  for (const auto& c : golden["cases"]) {
    const std::string text =
        (*tmpl)->Render(Messages(c["messages"]), c["add_generation_prompt"].get<bool>());
    EXPECT_EQ(tok->Encode(text, /*parse_special=*/true, /*add_bos=*/false),
              c["ids"].get<std::vector<int32_t>>())
        << c["name"];
  }
}

TEST(ChatTemplateTest, SmolLm2DefaultSystemPromptIsExtractedFromTheTemplate) {
  model::TokenizerData data;
  data.chat_template = ChatGolden()["template"].get<std::string>();
  auto tmpl = CreateChatTemplate(data);
  ASSERT_TRUE(tmpl.ok());
  const auto* chatml = dynamic_cast<const ChatMlTemplate*>(tmpl->get());
  ASSERT_NE(chatml, nullptr);
  EXPECT_EQ(chatml->default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

TEST(ChatTemplateTest, PlainChatMlHasNoDefaultSystemPrompt) {
  model::TokenizerData data;
  data.chat_template =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  auto tmpl = CreateChatTemplate(data);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ((*tmpl)->Render({{"user", "hi"}}, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Llama2cModelsConcatenateContents) {
  model::TokenizerData data;
  data.kind = model::TokenizerData::Kind::kScoreBpe;
  auto tmpl = CreateChatTemplate(data);
  ASSERT_TRUE(tmpl.ok());
  EXPECT_EQ((*tmpl)->name(), "plain");
  EXPECT_EQ((*tmpl)->Render({{"system", "Once "}, {"user", "upon a time"}}, true),
            "Once upon a time");
}

TEST(ChatTemplateTest, ContinuedFinalMessageMatchesTransformers) {
  std::ifstream in(testing::SourcePath("tests/golden/chat/smollm2_continue.json"));
  std::stringstream ss;
  ss << in.rdbuf();
  const auto golden = nlohmann::json::parse(ss.str());
  model::TokenizerData data;
  data.chat_template = golden["template"].get<std::string>();
  auto tmpl = CreateChatTemplate(data);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ChatOptions options;
  options.add_generation_prompt = false;
  options.continue_final_message = true;
  ASSERT_GE(golden["cases"].size(), 9u);
  for (const auto& c : golden["cases"]) {
    auto text = RenderChat(**tmpl, Messages(c["messages"]), options);
    ASSERT_TRUE(text.ok()) << c["name"] << ": " << text.status();
    EXPECT_EQ(*text, c["text"].get<std::string>()) << c["name"];
  }
  EXPECT_EQ(ErrorCodeOf(RenderChat(**tmpl, {}, options).status()), "bad_chat_request");
}

// The DeepSeek encoders have no Jinja reference for a continued message: the prompt must be the
// closed conversation's rendering cut right after the final text.
TEST(ChatTemplateTest, DeepseekEncodersContinueTheFinalMessage) {
  for (const char* name :
       {"deepseek-v3", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4", "deepseek-v4.1"}) {
    auto tmpl = CreateChatTemplateByName(name);
    ASSERT_TRUE(tmpl.ok()) << name;
    const std::vector<ChatMessage> messages = {{"user", "What is the capital of France?"},
                                               {"assistant", "The capital of France is"}};
    ChatOptions closed;
    closed.add_generation_prompt = false;
    auto full = (*tmpl)->Render(messages, closed);
    ASSERT_TRUE(full.ok()) << name << ": " << full.status();
    ChatOptions open = closed;
    open.continue_final_message = true;
    auto text = RenderChat(**tmpl, messages, open);
    ASSERT_TRUE(text.ok()) << name << ": " << text.status();
    EXPECT_TRUE(text->ends_with("The capital of France is")) << name << ": " << *text;
    EXPECT_EQ(full->substr(0, text->size()), *text) << name;
    EXPECT_LT(text->size(), full->size()) << name << ": the end of the turn is still there";
  }
}

TEST(ChatTemplateTest, UnknownTemplatesAreRejected) {
  model::TokenizerData data;
  data.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}";
  auto tmpl = CreateChatTemplate(data);
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(ErrorCodeOf(tmpl.status()), "unsupported_chat_template");
  EXPECT_EQ(ErrorCodeOf(CreateChatTemplateByName("nope").status()), "unknown_chat_template");
  EXPECT_TRUE(CreateChatTemplateByName("chatml").ok());
}

}  // namespace
}  // namespace deepinfer::tokenizer
