#include "util/byte_size.h"

#include "gtest/gtest.h"

namespace deepinfer::util {
namespace {

TEST(ByteSizeTest, PlainNumbersAreBytes) {
  EXPECT_EQ(ParseByteSize("0"), 0);
  EXPECT_EQ(ParseByteSize("1024"), 1024);
  EXPECT_EQ(ParseByteSize("7b"), 7);
}

TEST(ByteSizeTest, KAndKiAndKiBAreBinaryAndKBIsDecimal) {
  EXPECT_EQ(ParseByteSize("64KiB"), 64 * 1024);
  EXPECT_EQ(ParseByteSize("64k"), 64 * 1024);
  EXPECT_EQ(ParseByteSize("64Ki"), 64 * 1024);
  EXPECT_EQ(ParseByteSize("500MB"), 500'000'000);
  EXPECT_EQ(ParseByteSize("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(ParseByteSize("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(ParseByteSize("1TB"), 1'000'000'000'000);
  EXPECT_EQ(ParseByteSize("8 MiB"), 8 << 20);
}

TEST(ByteSizeTest, RefusesWhatIsNotASize) {
  for (const char* bad :
       {"", "MiB", "-1", "1.2.3", "12 apples", "3PB", "1e3", "inf", "20000000T"}) {
    EXPECT_EQ(ParseByteSize(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace deepinfer::util
