#include "tokenizer/unicode.h"

#include <algorithm>
#include <memory>

namespace deepinfer::tokenizer {
namespace {

struct ClassRange {
  uint32_t first;
  uint8_t cls;
};

constexpr ClassRange kClassRanges[] = {
#include "tokenizer/unicode_data.inc"
};

constexpr uint32_t kNumCodePoints = 0x110000;

// A flat table: one byte per code point keeps ClassOf a single load on the hot path.
const uint8_t* ClassTable() {
  static const uint8_t* table = [] {
    auto* t = new uint8_t[kNumCodePoints];
    constexpr size_t n = sizeof(kClassRanges) / sizeof(kClassRanges[0]);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t end = i + 1 < n ? kClassRanges[i + 1].first : kNumCodePoints;
      std::fill(t + kClassRanges[i].first, t + end, kClassRanges[i].cls);
    }
    return t;
  }();
  return table;
}

inline bool IsCont(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

CpClass ClassOf(uint32_t cp) {
  if (cp >= kNumCodePoints) return CpClass::kUndefined;
  return static_cast<CpClass>(ClassTable()[cp]);
}

bool IsWhitespace(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

void DecodeUtf8Lenient(std::string_view text, std::vector<uint32_t>* out) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  out->reserve(out->size() + n);
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      out->push_back(b);
      i += 1;
    } else if ((b & 0x40) == 0) {
      out->push_back(kReplacementChar);
      i += 1;
    } else if ((b & 0x20) == 0) {
      if (i + 1 < n && IsCont(s[i + 1])) {
        out->push_back(((b & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu));
        i += 2;
      } else {
        out->push_back(kReplacementChar);
        i += 1;
      }
    } else if ((b & 0x10) == 0) {
      if (i + 2 < n && IsCont(s[i + 1]) && IsCont(s[i + 2])) {
        out->push_back(((b & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu));
        i += 3;
      } else {
        out->push_back(kReplacementChar);
        i += 1;
      }
    } else if ((b & 0x08) == 0) {
      if (i + 3 < n && IsCont(s[i + 1]) && IsCont(s[i + 2]) && IsCont(s[i + 3])) {
        const uint32_t cp = ((b & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) |
                            ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
        out->push_back(cp < kNumCodePoints ? cp : kReplacementChar);
        i += 4;
      } else {
        out->push_back(kReplacementChar);
        i += 1;
      }
    } else {
      out->push_back(kReplacementChar);
      i += 1;
    }
  }
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < kNumCodePoints) {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    AppendUtf8(kReplacementChar, out);
  }
}

ByteLevelMap::ByteLevelMap() {
  cp_to_byte_.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next++;
    byte_to_cp[b] = cp;
    cp_to_byte_[cp] = static_cast<int16_t>(b);
    byte_to_utf8[b].clear();
    AppendUtf8(cp, &byte_to_utf8[b]);
  }
}

const ByteLevelMap& ByteLevelMap::Get() {
  static const ByteLevelMap* map = new ByteLevelMap();
  return *map;
}

Utf8Step NextUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t b = s[0];
  if (b < 0x80) return {Utf8Step::kValid, 1};
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1};
  }
  for (size_t i = 1; i < len; ++i) {
    if (i >= text.size()) return {Utf8Step::kIncomplete, text.size()};
    const uint8_t c = s[i];
    const bool ok = i == 1 ? (c >= lo && c <= hi) : IsCont(c);
    if (!ok) return {Utf8Step::kInvalid, i};
  }
  return {Utf8Step::kValid, len};
}

}  // namespace deepinfer::tokenizer
