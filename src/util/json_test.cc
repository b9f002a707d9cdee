#include "util/json.h"

#include "gtest/gtest.h"

namespace deepinfer::util {
namespace {

TEST(IntMemberTest, IntegersAndInRangeFloatsAreIntegers) {
  const Json j = Json::parse(R"({"a": 7, "b": -3.9, "c": 1e18})");
  EXPECT_EQ(IntMember(j, "a"), 7);
  EXPECT_EQ(IntMember(j, "b"), -3);  // truncated
  EXPECT_EQ(IntMember(j, "c"), 1000000000000000000);
}

// The fuzzer's P/D answer with num_tokens 3.9e36: casting it was undefined behaviour.
TEST(IntMemberTest, FloatsBeyondInt64AreNotIntegers) {
  const Json j = Json::parse(R"({"big": 3888888888888888888888888888888888882,
                                 "small": -1e19, "edge": 9223372036854775808.0})");
  EXPECT_EQ(IntMember(j, "big"), std::nullopt);
  EXPECT_EQ(IntMember(j, "small"), std::nullopt);
  EXPECT_EQ(IntMember(j, "edge"), std::nullopt);
  EXPECT_EQ(IntMember(j, "absent"), std::nullopt);
  EXPECT_EQ(IntMember(Json::parse(R"({"s": "1"})"), "s"), std::nullopt);
}

}  // namespace
}  // namespace deepinfer::util
