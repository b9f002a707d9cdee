#include "tools/bench_dataset.h"

#include <map>
#include <sstream>

#include "gtest/gtest.h"
#include "tools/bench_needle.h"

namespace deepinfer::tools {
namespace {

// A stand-in for a server tokenizer: BOS (id 0) first, then one piece per word, with words longer
// than six letters split in two (so a cut can fall inside a word and merge differently when the
// text is counted again). Pieces after the first word carry their leading space.
class FakeTokenizer : public TokenizerApi {
 public:
  explicit FakeTokenizer(bool bos) : bos_(bos) {}

  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text) override {
    ++calls;
    std::vector<int32_t> ids;
    if (bos_) ids.push_back(0);
    std::istringstream in(text);
    std::string word;
    bool first = true;
    while (in >> word) {
      std::string lead = first ? "" : " ";
      first = false;
      if (word.size() > 6) {
        ids.push_back(Id(lead + word.substr(0, 4)));
        ids.push_back(Id(word.substr(4)));
      } else {
        ids.push_back(Id(lead + word));
      }
    }
    return ids;
  }

  absl::StatusOr<std::string> Detokenize(const std::vector<int32_t>& tokens) override {
    std::string text;
    for (int32_t id : tokens) {
      if (id != 0) text += pieces_[id];
    }
    size_t start = text.find_first_not_of(' ');
    return start == std::string::npos ? "" : text.substr(start);
  }

  int calls = 0;

 private:
  int32_t Id(const std::string& piece) {
    auto [it, inserted] = ids_.emplace(piece, static_cast<int32_t>(pieces_.size()));
    if (inserted) pieces_.push_back(piece);
    return it->second;
  }

  bool bos_;
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> pieces_ = {"<s>"};
};

TEST(BuildPromptTest, HitsTheExactTokenCountWithBos) {
  FakeTokenizer tok(/*bos=*/true);
  std::mt19937_64 rng(1);
  for (int64_t n : {2, 3, 17, 256, 1024}) {
    auto p = BuildPrompt(tok, n, /*bos_tokens=*/1, rng);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->num_tokens, n);
    EXPECT_EQ(static_cast<int64_t>(tok.Tokenize(p->text)->size()), n);
  }
}

TEST(BuildPromptTest, HitsTheExactTokenCountWithoutBos) {
  FakeTokenizer tok(/*bos=*/false);
  std::mt19937_64 rng(2);
  auto p = BuildPrompt(tok, 100, 0, rng);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(static_cast<int64_t>(tok.Tokenize(p->text)->size()), 100);
}

TEST(BuildPromptTest, PromptsDifferFromEachOther) {
  FakeTokenizer tok(true);
  std::mt19937_64 rng(3);
  auto a = BuildPrompt(tok, 64, 1, rng);
  auto b = BuildPrompt(tok, 64, 1, rng);
  ASSERT_TRUE(a.ok() && b.ok());
  // Different first words keep the prefix cache out of the random dataset.
  EXPECT_NE(a->text.substr(0, 20), b->text.substr(0, 20));
}

TEST(BuildPromptTest, RejectsLengthsThatLeaveNoRoomForText) {
  FakeTokenizer tok(true);
  std::mt19937_64 rng(4);
  auto p = BuildPrompt(tok, 1, 1, rng);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BuildHaystackTest, FitsTheBudgetAndPlacesNeedlesInOrder) {
  FakeTokenizer tok(true);
  std::mt19937_64 rng(5);
  std::vector<std::string> needles = {"NEEDLE-A", "NEEDLE-B", "NEEDLE-C", "NEEDLE-D"};
  auto h = BuildHaystack(tok, 3000, needles, {0.1, 0.35, 0.6, 0.85}, rng);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_LE(h->num_tokens, 3000);
  EXPECT_GT(h->num_tokens, 2900);
  size_t a = h->text.find("NEEDLE-A"), b = h->text.find("NEEDLE-B");
  size_t c = h->text.find("NEEDLE-C"), d = h->text.find("NEEDLE-D");
  ASSERT_NE(d, std::string::npos);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_LT(c, d);
  // Depths are fractions of the haystack: A near 10%, D near 85%.
  double len = static_cast<double>(h->text.size());
  EXPECT_NEAR(a / len, 0.1, 0.05);
  EXPECT_NEAR(d / len, 0.85, 0.05);
}

TEST(BuildHaystackTest, RejectsMismatchedDepths) {
  FakeTokenizer tok(true);
  std::mt19937_64 rng(6);
  EXPECT_FALSE(BuildHaystack(tok, 100, {"x"}, {0.1, 0.2}, rng).ok());
}

TEST(ContainsCodeTest, MatchesWholeNumbersOnly) {
  EXPECT_TRUE(ContainsCode("A: 48213, B: 1", "48213"));
  EXPECT_TRUE(ContainsCode("48213", "48213"));
  EXPECT_FALSE(ContainsCode("A: 148213", "48213"));
  EXPECT_FALSE(ContainsCode("A: 482130", "48213"));
  EXPECT_TRUE(ContainsCode("x482130 and 48213.", "48213"));
  EXPECT_FALSE(ContainsCode("", "48213"));
}

}  // namespace
}  // namespace deepinfer::tools
