#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/unicode.h"

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
// Code points are classified with deepinfer's Unicode 15.1 table (or the classifier given to
// Create), not PCRE2's: a regex that uses \p{N}, \p{L}, \p{P}, \p{S} or \p{M} (\p{Lu}, \p{Ll},
// \p{Lt}, \p{Lm} and \p{Lo} mean \p{L}, as in llama.cpp) runs over a copy of the text in which
// every non-ASCII code point is replaced by a stand-in of its class (whitespace by U+000B), so
// PCRE2's Unicode version never matters.
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
  // Classifies a code point for \p{..}; ClassOf (Unicode 15.1, as llama.cpp) by default.
  using CpClassifier = CpClass (*)(uint32_t cp);

  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(
      const std::vector<std::string>& regexes);
  // As above, classifying with `classify` (ClassOfUnicode16 for Hugging Face tokenizers).
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(
      const std::vector<std::string>& regexes, CpClassifier classify);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the length (in code points) of each word of `cps[0, n)` to `lengths`; the lengths
  // sum to n and none is zero.
  void Split(const uint32_t* cps, size_t n, std::vector<uint32_t>* lengths) const;

  // Appends the code point ranges [first, second) of the successive non-overlapping, non-empty
  // matches of regex `index` alone in `cps[0, n)`, leftmost first: the building block of
  // pre-tokenizers whose split behavior is not "isolate every match" (Hugging Face Split).
  // Requires index < num_regexes().
  void FindMatches(size_t index, const uint32_t* cps, size_t n,
                   std::vector<std::pair<uint32_t, uint32_t>>* matches) const;
  size_t num_regexes() const { return regexes_.size(); }

 private:
  struct Regex;
  RegexSplitter() = default;
  // Fills the scratch copies of cps[0, n) that the regexes in use match over.
  void PrepareSubjects(const uint32_t* cps, size_t n, bool collapsed, bool raw) const;
  std::vector<std::unique_ptr<Regex>> regexes_;
  CpClassifier classify_ = &ClassOf;
  bool need_collapsed_ = false;
  bool need_raw_ = false;
};

}  // namespace deepinfer::tokenizer
