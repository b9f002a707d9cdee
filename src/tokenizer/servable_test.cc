#include "tokenizer/servable.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/synthetic_checkpoint.h"
#include "nlohmann/json.hpp"
#include "tokenizer/test_util.h"

namespace deepinfer::tokenizer {
namespace {

using testing::SmolLm2Path;
using testing::SourcePath;

TEST(ServableTest, GgufModelComesWithItsTokenizerAndChatEncoder) {
  if (!std::filesystem::exists(SmolLm2Path())) GTEST_SKIP() << "SmolLM2 is not downloaded";
  auto s = LoadServable({.model_path = SmolLm2Path()});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(s->tokenizer, nullptr);
  ASSERT_NE(s->chat_template, nullptr);
  EXPECT_TRUE(s->text_status.ok());
  EXPECT_LE(s->tokenizer->vocab_size(), s->model->config.vocab);
  EXPECT_TRUE(s->model->engram_token_classes.empty());  // no Engram layers
}

TEST(ServableTest, ChatTemplateFlagPicksTheEncoderByName) {
  if (!std::filesystem::exists(SmolLm2Path())) GTEST_SKIP() << "SmolLM2 is not downloaded";
  auto s = LoadServable({.model_path = SmolLm2Path(), .chat_template = "chatml"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->chat_template->name(), "chatml");
  EXPECT_FALSE(LoadServable({.model_path = SmolLm2Path(), .chat_template = "no-such"}).ok());
}

TEST(ServableTest, MissingModelIsAnErrorWhateverTheTextOption) {
  for (bool optional : {false, true}) {
    auto s = LoadServable({.model_path = "/nonexistent/model.gguf", .text_optional = optional});
    EXPECT_FALSE(s.ok());
  }
}

// A checkpoint with no tokenizer (the synthetic DeepSeek-V3 parity checkpoints): an error, unless
// the caller runs on token ids only.
TEST(ServableTest, CheckpointWithoutTokenizerLoadsOnlyWhenTextIsOptional) {
  auto dir = model::SyntheticCheckpoint(SourcePath("tests/golden/deepseek_v3/v3_qlora"),
                                        std::string(DI_TESTDATA_DIR) + "/deepseek_v3");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_FALSE(LoadServable({.model_path = *dir}).ok());
  auto s = LoadServable({.model_path = *dir, .text_optional = true});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokenizer, nullptr);
  EXPECT_EQ(s->chat_template, nullptr);
  EXPECT_FALSE(s->text_status.ok());
  EXPECT_GT(s->model->config.vocab, 0);
}

// DeepSeek-V4.1 with Engram layers: the token classes are in the model when LoadServable returns,
// equal to those DeepSeek's reference built from the same tokenizer.
TEST(ServableTest, EngramClassesAreAttachedAtLoad) {
  const std::string golden = SourcePath("../shared/goldens/deepseek_v41/v41_full");
  if (!std::filesystem::exists(golden)) {
    GTEST_SKIP() << "../shared/goldens/deepseek_v41 is absent (a user's clone has none)";
  }
  auto dir = model::SyntheticCheckpoint(golden, std::string(DI_TESTDATA_DIR) + "/deepseek_v41");
  ASSERT_TRUE(dir.ok()) << dir.status();
  auto s = LoadServable({.model_path = *dir});
  ASSERT_TRUE(s.ok()) << s.status();
  std::ifstream in(golden + "/golden.json");
  const auto json = nlohmann::json::parse(in);
  EXPECT_EQ(s->model->engram_token_classes,
            json["engram"]["token_map"].get<std::vector<int32_t>>());
}

}  // namespace
}  // namespace deepinfer::tokenizer
