#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace deepinfer::tokenizer {

// How a byte-level BPE tokenizer cuts text into words before merging.
struct PreTokenizerSpec {
  // Applied in sequence: each regex splits every piece the previous ones produced, and the text
  // between matches stays a piece of its own (llama.cpp's unicode_regex_split).
  std::vector<std::string> regexes;
  // A word that is itself a token is emitted whole, without merging (llama.cpp ignore_merges).
  bool ignore_merges = false;
};

// Returns the spec llama.cpp uses for a GGUF `tokenizer.ggml.pre` value: "smollm" and the other
// StarCoder-family names, "gpt-2" family, "llama3"/"llama-bpe" family, "qwen2", "deepseek-llm",
// "deepseek-coder", "deepseek-v3", "falcon", and "default" (also for an empty name).
//
// Errors: Unimplemented "unsupported_tokenizer" for any other name.
// Source: llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe, llama_vocab::impl::load).
absl::StatusOr<PreTokenizerSpec> PreTokenizerSpecForName(const std::string& pre);

// Splits code points into words with a sequence of PCRE2 regexes (32-bit library, JIT).
//
// Code points are classified with deepinfer's Unicode 15.1 table, not PCRE2's: a regex that
// uses \p{N}, \p{L}, \p{P}, \p{S} or \p{M} (\p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} mean \p{L},
// as in llama.cpp) runs over a copy of the text in which every non-ASCII code point is replaced
// by a stand-in of its class (whitespace by U+000B), so PCRE2's Unicode version never matters.
// Such a regex must otherwise be ASCII. A regex without those properties runs over the code
// points themselves with non-ASCII whitespace replaced by U+000B and ASCII-only \s, as
// llama.cpp's std::wregex path does. `$` matches only at the end of a piece.
//
// Errors: InvalidArgument "bad_regex" (PCRE2 rejects it, or it mixes a Unicode property with
//   non-ASCII characters); Unimplemented "unsupported_tokenizer" (another \p{..} class).
// Threads: Split is const and safe to call concurrently (per-thread PCRE2 match data).
// Cost: Split is linear in the text for these regexes.
// Source: llama.cpp src/unicode.cpp (unicode_regex_split and its "collapsed" text).
class RegexSplitter {
 public:
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(
      const std::vector<std::string>& regexes);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the length (in code points) of each word of `cps[0, n)` to `lengths`; the lengths
  // sum to n and none is zero.
  void Split(const uint32_t* cps, size_t n, std::vector<uint32_t>* lengths) const;

 private:
  struct Regex;
  RegexSplitter() = default;
  std::vector<std::unique_ptr<Regex>> regexes_;
  bool need_collapsed_ = false;
  bool need_raw_ = false;
};

}  // namespace deepinfer::tokenizer
