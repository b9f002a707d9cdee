#pragma once

// DeepSeek-V4.1 Engram's compressed token map: the token classes its n-gram hashes run over.
//
// Engram looks up embeddings by hashes of the last 2..N tokens, but of token *classes*, not
// ids: tokens whose text normalizes alike (" The", "the", "THE") share a class, so the n-gram
// tables are not split across spellings. The classes are numbered in order of first appearance
// by token id, and their count is the config's `engram_compressed_vocab_size` (99,092 for the
// release's V4-series tokenizer), which every hash multiplier depends on: one class off
// rehashes the whole table. Source: DeepSeek-V4.1's inference/engram.py
// build_compressed_token_map, as transformers' deepseek_v41 and SGLang repeat it; checked
// against Hugging Face `tokenizers` running the same normalizers
// (tests/reference/make_engram_token_map_golden.py).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

// Normalizes `utf8` (valid UTF-8) as the Engram key does, step for step like the `tokenizers`
// normalizer sequence NFKC, NFD, StripAccents (drops every mark: Mn, Mc and Me), Lowercase
// (each code point's full lowercase mapping, with no context: U+0130 gives "i" + U+0307, a final
// sigma stays "σ"), runs of space/tab/CR/LF to one space, Strip (White_Space at both ends), a
// lone space kept (the reference guards it with U+E000 through Strip, and turns every U+E000
// into a space afterwards, including ones the text had).
//
// Threads: safe. Errors: none (invalid UTF-8 is decoded with U+FFFD substitutions by ICU).
// Unicode: ICU's tables (Debian 12: ICU 72, Unicode 15.0); `tokenizers` 0.23 uses Rust's
// (Unicode 15/16); no code point of the DeepSeek vocabularies differs (tested).
std::string NormalizeEngramKey(std::string_view utf8);

// The compressed token map of a tokenizer.
struct EngramTokenMap {
  // class_of[id] for every id below the tokenizer's vocab_size(); classes are 0..num_classes-1.
  std::vector<int32_t> class_of;
  int32_t num_classes = 0;
};

// Builds the map: each token's key is its single-token decode (special tokens included)
// normalized by NormalizeEngramKey; when the decode is not valid UTF-8 or holds U+FFFD (a
// token that is part of a multi-byte character), the key is its vocabulary entry
// (Tokenizer::TokenEntry) instead, and when normalization leaves nothing (a lone mark) the key
// is the decoded text itself.
//
// Errors: InvalidArgument "bad_tokenizer" when the tokenizer has no tokens.
// Cost: about 0.3 s for a 129,280-token vocabulary on one core.
absl::StatusOr<EngramTokenMap> BuildEngramTokenMap(const Tokenizer& tokenizer);

// For a DeepSeek-V4.1 model with Engram layers, fills model->engram_token_classes from
// `tokenizer` (the architecture checks the class count against the config); otherwise does
// nothing. Call after loading the tokenizer, before creating the engine.
// Errors: BuildEngramTokenMap's.
absl::Status AttachEngramTokenClasses(const Tokenizer& tokenizer, model::Model* model);

}  // namespace deepinfer::tokenizer
