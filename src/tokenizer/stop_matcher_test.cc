#include "tokenizer/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::tokenizer {
namespace {

struct FeedResult {
  std::vector<std::string> emitted;  // per Push, then Finish
  bool stopped = false;
};

FeedResult Feed(StopMatcher& m, const std::vector<std::string>& deltas) {
  FeedResult r;
  for (const std::string& d : deltas) {
    std::string out;
    r.stopped = m.Push(d, &out);
    r.emitted.push_back(out);
  }
  std::string out;
  m.Finish(&out);
  r.emitted.push_back(out);
  return r;
}

using Out = std::vector<std::string>;

TEST(StopMatcherTest, PassesTextWithoutStopStringsThrough) {
  StopMatcher m({"STOP"});
  const FeedResult r = Feed(m, {"hello ", "world"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emitted, (Out{"hello ", "world", ""}));
}

TEST(StopMatcherTest, FindsAStopStringSplitAcrossDeltas) {
  StopMatcher m({"STOP"});
  const FeedResult r = Feed(m, {"abc S", "T", "OP and more"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, (Out{"abc ", "", "", ""}));
  EXPECT_EQ(m.matched_index(), 0);
}

TEST(StopMatcherTest, ReleasesHeldTextOnceItCannotMatch) {
  StopMatcher m({"STOP"});
  const FeedResult r = Feed(m, {"ST", "OX", "S"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emitted, (Out{"", "STOX", "", "S"}));
}

TEST(StopMatcherTest, HandlesOverlappingPrefixes) {
  // "aab" contains "ab" starting at the second "a": the held "aa" must not hide it.
  StopMatcher m({"ab"});
  const FeedResult r = Feed(m, {"a", "a", "b"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, (Out{"", "a", "", ""}));
}

TEST(StopMatcherTest, HoldsTheLongestSuffixThatCouldStartAnyStop) {
  StopMatcher m({"<|im_end|>", "\n\nUser:"});
  std::string out;
  EXPECT_FALSE(m.Push("text\n\nUs", &out));
  EXPECT_EQ(out, "text");
  EXPECT_EQ(m.held_bytes(), 4u);
  out.clear();
  EXPECT_FALSE(m.Push("e", &out));
  EXPECT_EQ(out, "");
  EXPECT_EQ(m.held_bytes(), 5u);
  EXPECT_FALSE(m.Push("x", &out));
  EXPECT_EQ(out, "\n\nUsex");
  out.clear();
  EXPECT_FALSE(m.Push("<|im", &out));
  EXPECT_EQ(out, "");
  EXPECT_TRUE(m.Push("_end|>tail", &out));
  EXPECT_EQ(out, "");
  EXPECT_EQ(m.matched_index(), 0);
}

TEST(StopMatcherTest, EarliestStopWinsAmongSeveral) {
  StopMatcher m({"world", "lo w", "o"});
  std::string out;
  EXPECT_TRUE(m.Push("hello world", &out));
  EXPECT_EQ(out, "hel");
  EXPECT_EQ(m.matched_index(), 1);
}

TEST(StopMatcherTest, LongestStopWinsAtTheSamePosition) {
  StopMatcher m({"ab", "abc"});
  std::string out;
  EXPECT_TRUE(m.Push("xabcd", &out));
  EXPECT_EQ(out, "x");
  EXPECT_EQ(m.matched_index(), 1);
}

TEST(StopMatcherTest, MatchesAStopAtTheVeryStart) {
  StopMatcher m({"###"});
  const FeedResult r = Feed(m, {"###", "more"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emitted, (Out{"", "", ""}));
}

TEST(StopMatcherTest, FlushesHeldTextAtFinish) {
  StopMatcher m({"STOP"});
  const FeedResult r = Feed(m, {"the end ST"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emitted, (Out{"the end ", "ST"}));
}

TEST(StopMatcherTest, IgnoresEmptyStopStringsAndWorksWithoutAny) {
  StopMatcher none({});
  StopMatcher empty({""});
  for (StopMatcher* m : {&none, &empty}) {
    std::string out;
    EXPECT_FALSE(m->Push("abc", &out));
    EXPECT_EQ(out, "abc");
  }
}

TEST(StopMatcherTest, KeepsMultiByteCharactersWhole) {
  StopMatcher m({"é!"});
  std::string out;
  EXPECT_FALSE(m.Push("caf\xC3\xA9", &out));
  EXPECT_EQ(out, "caf");
  out.clear();
  EXPECT_FALSE(m.Push("?", &out));
  EXPECT_EQ(out, "\xC3\xA9?");
}

}  // namespace
}  // namespace deepinfer::tokenizer
