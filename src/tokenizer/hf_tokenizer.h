#pragma once

// Tokenizers described by a Hugging Face tokenizer.json (with tokenizer_config.json beside it),
// the format DeepSeek V3 / V3.1 / V3.2 / V4 / V4.1 ship: byte-level BPE, a regex pre-tokenizer
// and added tokens.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

// One entry of tokenizer.json "added_tokens". Added tokens are cut out of the text before
// pre-tokenization: non-normalized ones first over the whole text, then normalized ones over
// the text between them, each pass taking the leftmost, then longest, match.
struct HfAddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // matched only with parse_special; skipped by skip_special
  bool single_word = false;  // matched only with no word character on either side
  bool lstrip = false;       // takes the whitespace before it along
  bool rstrip = false;       // takes the whitespace after it along
  bool normalized = true;    // matched in the second pass
};

// One step of the pre-tokenizer, applied to every piece the previous steps produced.
struct HfPreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  // What happens to a regex match (tokenizers' SplitDelimiterBehavior).
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  Kind kind = Kind::kSplit;
  std::string regex;  // kSplit: the pattern (a "String" pattern arrives regex-escaped)
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;            // kSplit: the text between matches is what the behavior acts on
  bool add_prefix_space = false;  // kByteLevel: prepend " " to a piece that lacks one
  bool use_regex = false;         // kByteLevel: isolate GPT-2 words first
};

// Everything a tokenizer.json + tokenizer_config.json pair says.
struct HfTokenizerSpec {
  // The GGUF-style description (kByteLevelBpe): tokens by id (vocabulary entries in byte-level
  // form, added tokens as their content, "" for unused ids), token types (added special tokens
  // kControl, other added tokens kUserDefined, the rest kNormal, unused ids kUnused), merges as
  // "a b", bos/eos ids, add_bos, chat_template, eog_ids ({eos}). `pre` is "deepseek-v3" when the
  // pre-tokenizer is DeepSeek-V3's, otherwise "hf-tokenizer-json", which CreateTokenizer
  // rejects rather than tokenize differently.
  model::TokenizerData data;
  // id -> the BPE model's own vocabulary entry, "" for ids it lacks. Differs from data.tokens
  // where an added token took a vocabulary id (tokenizers lets "ab" be both).
  std::vector<std::string> model_vocab;
  std::vector<HfPreTokenizerStep> pre_tokenizer;
  std::vector<HfAddedToken> added_tokens;
  bool ignore_merges = false;  // a word that is a vocabulary entry is emitted whole
};

// Parses the two files' contents; `tokenizer_config_json` may be empty (no BOS, no template).
// add_bos is tokenizer_config's add_bos_token (as transformers' LlamaTokenizerFast applies it)
// or, without that key, whether a TemplateProcessing post-processor puts a special token before
// "$A". bos_token / eos_token may be strings or {"content": ...} objects; a chat_template list
// contributes its "default" entry.
//
// Errors: InvalidArgument "bad_tokenizer" (not JSON, missing or mistyped fields, ids that
//   clash); Unimplemented "unsupported_tokenizer" (a model other than BPE, BPE dropout,
//   byte_fallback, subword prefixes or suffixes, a normalizer, a pre-tokenizer other than
//   Sequence/Split/ByteLevel/Digits, ByteLevel before a Split, regexes with \p{..} subcategories
//   or the Unicode-aware \d \w \b, or a decoder other than ByteLevel).
absl::StatusOr<HfTokenizerSpec> ParseHfTokenizer(std::string_view tokenizer_json,
                                                 std::string_view tokenizer_config_json);

// Reads `path`: a folder holding tokenizer.json (and optionally tokenizer_config.json), or the
// tokenizer.json file itself (tokenizer_config.json is then looked up beside it).
//
// Errors: NotFound "file_not_found"; ParseHfTokenizer's.
// Cost: about 1 s for DeepSeek's 7.8 MB tokenizer.json (CreateHfTokenizer adds 0.4 s); encoding
// runs at about 5 MB/s on one core.
absl::StatusOr<HfTokenizerSpec> ReadHfTokenizer(const std::string& path);

// Builds a tokenizer that encodes token for token like Hugging Face `tokenizers` (0.23) does:
// invalid UTF-8 becomes U+FFFD per maximal subpart (Python's errors="replace"), added tokens are
// cut out as described at HfAddedToken (special ones only with parse_special, as
// `encode_special_tokens = False`; non-special ones always), the pre-tokenizer runs with
// Oniguruma's Unicode 16.0 classes, and each piece is merged lowest rank first, leftmost on
// ties. Decoding maps byte-level characters back to bytes; a token with a character outside
// the byte map decodes to its own UTF-8. IsSpecial is true for special added tokens only.
//
// Errors: InvalidArgument "bad_tokenizer" (no tokens, a merge part that is not in the
//   vocabulary, ids out of range); RegexSplitter's.
// Threads: the tokenizer's const methods are safe to call concurrently.
// Source: huggingface/tokenizers tokenizer/added_vocabulary.rs (find_matches, extract_and_
//   normalize), pre_tokenizers/split.rs, normalizer.rs (split), models/bpe/word.rs (merge_all),
//   decoders/byte_level.rs.
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateHfTokenizer(const HfTokenizerSpec& spec);

// ReadHfTokenizer + CreateHfTokenizer.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path);

}  // namespace deepinfer::tokenizer
