#include "tokenizer/unicode.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::tokenizer {
namespace {

std::vector<uint32_t> Decode(const std::string& s) {
  std::vector<uint32_t> out;
  DecodeUtf8Lenient(s, &out);
  return out;
}

TEST(UnicodeTest, LenientDecodeReplacesBadBytesOneByOne) {
  EXPECT_EQ(Decode("a\xC3\xA9"), (std::vector<uint32_t>{'a', 0xE9}));
  EXPECT_EQ(Decode("\x80\xFF"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
  // A truncated sequence: the lead byte is replaced, the rest decoded on its own.
  EXPECT_EQ(Decode("\xE2\x82x"), (std::vector<uint32_t>{0xFFFD, 0xFFFD, 'x'}));
  // llama.cpp lets overlong forms and surrogates through.
  EXPECT_EQ(Decode("\xC0\x80"), (std::vector<uint32_t>{0}));
  EXPECT_EQ(Decode("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));
  // Above U+10FFFF (llama.cpp aborts): one replacement for the 4 bytes.
  EXPECT_EQ(Decode("\xF5\x80\x80\x80"), (std::vector<uint32_t>{0xFFFD}));
}

TEST(UnicodeTest, AppendUtf8RoundTripsEveryScalarValue) {
  for (uint32_t cp = 0; cp < 0x110000; cp += (cp < 0x30000 ? 1 : 97)) {
    std::string s;
    AppendUtf8(cp, &s);
    ASSERT_EQ(Decode(s), std::vector<uint32_t>{cp}) << cp;
  }
}

TEST(UnicodeTest, ClassesFollowUnicode15_1) {
  EXPECT_EQ(ClassOf('a'), CpClass::kLetter);
  EXPECT_EQ(ClassOf('7'), CpClass::kNumber);
  EXPECT_EQ(ClassOf(' '), CpClass::kSeparator);
  EXPECT_EQ(ClassOf('$'), CpClass::kSymbol);
  EXPECT_EQ(ClassOf('!'), CpClass::kPunctuation);
  EXPECT_EQ(ClassOf('\n'), CpClass::kControl);
  EXPECT_EQ(ClassOf(0x0301), CpClass::kMark);
  EXPECT_EQ(ClassOf(0x0663), CpClass::kNumber);   // ARABIC-INDIC DIGIT THREE
  EXPECT_EQ(ClassOf(0x2EBF0), CpClass::kLetter);  // CJK Extension I (15.1)
  EXPECT_EQ(ClassOf(0x31350), CpClass::kLetter);  // CJK Extension H (15.0)
  EXPECT_EQ(ClassOf(0x2FFC), CpClass::kSymbol);   // IDC (15.1)
  EXPECT_EQ(ClassOf(0x0378), CpClass::kUndefined);
  EXPECT_EQ(ClassOf(0xE000), CpClass::kControl);  // private use
  EXPECT_EQ(ClassOf(0xD800), CpClass::kControl);  // surrogate
  EXPECT_EQ(ClassOf(0x110000), CpClass::kUndefined);
}

TEST(UnicodeTest, WhitespaceIsTheWhiteSpaceProperty) {
  for (uint32_t cp :
       {0x09u, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u, 0x202Fu, 0x3000u}) {
    EXPECT_TRUE(IsWhitespace(cp)) << cp;
  }
  for (uint32_t cp : {0x08u, 0x1Cu, 0x180Eu, 0x200Bu, 0xFEFFu, 0x61u}) {
    EXPECT_FALSE(IsWhitespace(cp)) << cp;
  }
}

TEST(UnicodeTest, ByteLevelMapMatchesGpt2) {
  const ByteLevelMap& m = ByteLevelMap::Get();
  EXPECT_EQ(m.byte_to_utf8[' '], "\xC4\xA0");   // Ġ
  EXPECT_EQ(m.byte_to_utf8['\n'], "\xC4\x8A");  // Ċ
  EXPECT_EQ(m.byte_to_utf8['a'], "a");
  EXPECT_EQ(m.byte_to_cp[0xAD], 0x143u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(m.ByteOf(m.byte_to_cp[b]), b);
  EXPECT_EQ(m.ByteOf(0x20), -1);
}

TEST(UnicodeTest, NextUtf8FindsMaximalSubparts) {
  EXPECT_EQ(NextUtf8("\xE2\x82\xAC").kind, Utf8Step::kValid);
  EXPECT_EQ(NextUtf8("\xE2\x82").kind, Utf8Step::kIncomplete);
  EXPECT_EQ(NextUtf8("\xF0\x9F\x98").kind, Utf8Step::kIncomplete);
  const Utf8Step bad = NextUtf8("\xE2\x82x");
  EXPECT_EQ(bad.kind, Utf8Step::kInvalid);
  EXPECT_EQ(bad.length, 2u);
  EXPECT_EQ(NextUtf8("\xED\xA0\x80").length, 1u);  // surrogate: lead byte alone
  EXPECT_EQ(NextUtf8("\xC0\x80").length, 1u);      // overlong
  EXPECT_EQ(NextUtf8("\xF4\x90\x80\x80").length, 1u);
  EXPECT_EQ(NextUtf8("\x80").kind, Utf8Step::kInvalid);
}

}  // namespace
}  // namespace deepinfer::tokenizer
