#pragma once

// Code point classes, lenient UTF-8 decoding and the GPT-2 byte <-> character map, all with the
// exact behavior the byte-level BPE tokenizer needs to match llama.cpp.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

// The first letter of a code point's Unicode 15.1 general category; Cn is kUndefined.
enum class CpClass : uint8_t {
  kUndefined = 0,
  kNumber,
  kLetter,
  kSeparator,
  kMark,
  kPunctuation,
  kSymbol,
  kControl,
};

// Returns the class of `cp` (kUndefined above U+10FFFF).
//
// Threads: safe; the table is built once on first use.
// Cost: one load from a 1.1 MB table.
// Source: Unicode 15.1 UnicodeData, the version llama.cpp's unicode-data.cpp follows.
CpClass ClassOf(uint32_t cp);

// True for the Unicode White_Space code points (\t..\r, space, U+0085, U+00A0, U+1680,
// U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool IsWhitespace(uint32_t cp);

// The replacement character U+FFFD.
inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Decodes UTF-8 the way llama.cpp's unicode_cpts_from_utf8 does and appends the code points to
// `out`: a byte that does not start a complete sequence becomes U+FFFD and decoding resumes at
// the next byte; continuation bytes are checked, but overlong forms and surrogates pass
// through as their (odd) code points. A 4-byte form above U+10FFFF becomes U+FFFD (llama.cpp
// aborts there).
void DecodeUtf8Lenient(std::string_view text, std::vector<uint32_t>* out);

// Appends the UTF-8 form of `cp`; values above U+10FFFF append U+FFFD. Surrogates are written
// as 3-byte forms, as llama.cpp does.
void AppendUtf8(uint32_t cp, std::string* out);

// Length of the UTF-8 sequence that starts with `lead` (1 for continuation and invalid bytes),
// as llama.cpp's unicode_len_utf8.
inline int Utf8SeqLen(uint8_t lead) {
  static constexpr int kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// GPT-2's reversible map from bytes to printable characters ("Ġ" for a space).
//
// Source: openai/gpt-2 encoder.py bytes_to_unicode.
struct ByteLevelMap {
  std::array<uint32_t, 256> byte_to_cp;       // byte -> code point
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of that code point

  // Returns the byte for code point `cp`, or -1 when `cp` is not in the map.
  int ByteOf(uint32_t cp) const { return cp < 324 ? cp_to_byte_[cp] : -1; }

  static const ByteLevelMap& Get();

 private:
  ByteLevelMap();
  std::array<int16_t, 324> cp_to_byte_;
};

// Strict UTF-8 check of the sequence at the start of `text` (Unicode 15.1 table 3-7: no
// overlong forms, no surrogates, nothing above U+10FFFF).
struct Utf8Step {
  enum Kind { kValid, kIncomplete, kInvalid };
  Kind kind;
  // kValid: the sequence length; kInvalid: the length of the maximal subpart to replace with
  // one U+FFFD (at least 1); kIncomplete: text.size() (all of it is a proper prefix of a
  // valid sequence).
  size_t length;
};
// Requires a non-empty `text`.
Utf8Step NextUtf8(std::string_view text);

}  // namespace deepinfer::tokenizer
