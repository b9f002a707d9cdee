#include "http/sse_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::http {
namespace {

std::vector<SseEvent> FeedInPieces(std::string_view stream, const std::vector<size_t>& cuts,
                                   SseParser* parser) {
  std::vector<SseEvent> events;
  size_t from = 0;
  for (size_t cut : cuts) {
    parser->Feed(stream.substr(from, cut - from), &events);
    from = cut;
  }
  parser->Feed(stream.substr(from), &events);
  return events;
}

// Every line-end style, comments, an ignored field, an event name, several data lines and an
// empty data line.
constexpr std::string_view kStream =
    "data: {\"a\":1}\r\n\r\n"
    ": ping - 2024\r\n\r\n"
    "event: message_start\nid: 7\ndata:x\ndata: y\n\n"
    "retry: 10\rdata: \r\r"
    "event: only-a-name\n\n"
    "data: [DONE]\n\n";

const std::vector<SseEvent> kEvents = {
    {"", "{\"a\":1}"}, {"message_start", "x\ny"}, {"", ""}, {"", "[DONE]"}};

TEST(SseParserTest, ParsesEveryLineEndCommentsAndFields) {
  SseParser parser;
  EXPECT_EQ(parser.Feed(kStream), kEvents);
  EXPECT_FALSE(parser.has_partial());
}

TEST(SseParserTest, EverySplitIntoTwoPiecesGivesTheSameEvents) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    SseParser parser;
    EXPECT_EQ(FeedInPieces(kStream, {cut}, &parser), kEvents) << "cut at " << cut;
  }
}

TEST(SseParserTest, ByteByByteGivesTheSameEvents) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < kStream.size(); ++i) cuts.push_back(i);
  SseParser parser;
  EXPECT_EQ(FeedInPieces(kStream, cuts, &parser), kEvents);
  EXPECT_FALSE(parser.has_partial());
}

// Moved from tools/bench_http_test.cc and tools/smoke_test.cc (the bench's and smoke's parsers
// before this one).
TEST(SseParserTest, SplitsEventsAcrossPiecesAndLineEndings) {
  SseParser p;
  EXPECT_TRUE(p.Feed("data: {\"a\"").empty());
  auto events = p.Feed(":1}\r\n\r\n: ping - 2024\r\n\r\ndata: [DONE]\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "{\"a\":1}");
  events = p.Feed("\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "[DONE]");
}

TEST(SseParserTest, JoinsDataLinesAndKeepsTheEventName) {
  SseParser p;
  auto events = p.Feed("event: message\rid: 7\rdata:x\rdata: y\r\r");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x\ny");
  EXPECT_EQ(events[0].event, "message");
}

TEST(SseParserTest, CrLfSplitBetweenPiecesIsOneLineEnd) {
  SseParser p;
  EXPECT_TRUE(p.Feed("data: a\r").empty());
  auto events = p.Feed("\n\r\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "a");
}

TEST(SseParserTest, JoinsEventsAcrossPiecesAndLineEnds) {
  SseParser s;
  std::vector<std::string> events;
  for (const char* piece :
       {"data: a\r", "\n\r\ndata:b\n", ": comment\ndata: c\n\n", "data: [DO", "NE]\n\n"}) {
    for (auto& e : s.Feed(piece)) events.push_back(e.data);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"a", "b\nc", "[DONE]"}));
  EXPECT_FALSE(s.has_partial());
}

TEST(SseParserTest, AnUnfinishedEventIsPartialAndNotDispatched) {
  SseParser p;
  EXPECT_TRUE(p.Feed("data: [DO").empty());
  EXPECT_TRUE(p.has_partial());
  EXPECT_TRUE(p.Feed("NE]\n").empty());
  EXPECT_TRUE(p.has_partial());
  auto events = p.Feed("\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "[DONE]");
  EXPECT_FALSE(p.has_partial());
}

TEST(SseParserTest, AnOverLongLineStopsTheParser) {
  SseParser p(64);
  EXPECT_EQ(p.Feed("data: short\n\n").size(), 1u);
  EXPECT_TRUE(p.Feed("data: " + std::string(40, 'x')).empty());
  EXPECT_FALSE(p.overflowed());
  EXPECT_TRUE(p.Feed(std::string(40, 'x')).empty());
  EXPECT_TRUE(p.overflowed());
  EXPECT_TRUE(p.Feed("\n\ndata: more\n\n").empty());
}

TEST(SseParserTest, AnOverLongEventOfShortLinesStopsTheParser) {
  SseParser p(64);
  std::vector<SseEvent> events;
  for (int i = 0; i < 10 && !p.overflowed(); ++i) p.Feed("data: 0123456789\n", &events);
  EXPECT_TRUE(p.overflowed());
  EXPECT_TRUE(events.empty());
}

}  // namespace
}  // namespace deepinfer::http
