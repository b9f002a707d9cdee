#include "http/sse.h"

#include "gtest/gtest.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

TEST(SseTest, FramesOnePayloadAsOneDataEvent) {
  EXPECT_EQ(SseData("{\"a\":1}"), "data: {\"a\":1}\n\n");
}

TEST(SseTest, SplitsLineBreaksIntoDataLines) {
  EXPECT_EQ(SseData("a\nb\r\nc"), "data: a\ndata: b\ndata: c\n\n");
}

TEST(SseTest, DoneMarker) { EXPECT_EQ(SseDone(), "data: [DONE]\n\n"); }

TEST(SseTest, ErrorFrameIsFollowedByDone) {
  std::string s = SseErrorAndDone(ApiErrorFromStatus(InternalError("kv_cache_exhausted", "x")));
  EXPECT_EQ(s.rfind("data: {\"error\":", 0), 0u);
  EXPECT_NE(s.find("\"code\":\"kv_cache_exhausted\""), std::string::npos);
  EXPECT_TRUE(s.size() > 16 && s.substr(s.size() - 16) == "\n\ndata: [DONE]\n\n");
}

TEST(SseTest, HttpChunkUsesHexLength) {
  EXPECT_EQ(HttpChunk(std::string(26, 'x')), "1a\r\n" + std::string(26, 'x') + "\r\n");
  EXPECT_EQ(HttpChunk(""), "");
  EXPECT_EQ(kHttpLastChunk, "0\r\n\r\n");
}

}  // namespace
}  // namespace deepinfer::http
