#pragma once

// Helpers for parsers that read markers ("</think>", "<｜tool▁calls▁begin｜>") out of text that
// arrives in pieces: a piece may end inside a marker, and that tail must be held back.

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace deepinfer::api {

// The length (bytes) of the longest suffix of `text` that is a proper prefix of `tag`.
// Thread-safe (pure).
inline size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  if (tag.empty()) return 0;
  const size_t max = std::min(text.size(), tag.size() - 1);
  for (size_t n = max; n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// True when `text` is shorter than `tag` and starts it.
inline bool IsProperPrefix(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

}  // namespace deepinfer::api
