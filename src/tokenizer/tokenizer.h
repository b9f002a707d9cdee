#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace deepinfer::tokenizer {

// Text <-> token ids for one model.
//
// Implementations: byte-level BPE (GGUF tokenizer.ggml.model "gpt2"; bpe_tokenizer.h) and
// llama2.c's score-ordered BPE (score_bpe_tokenizer.h).
// Threads: every method is const and safe to call from many threads at once.
// Lifetime: independent of the TokenizerData it was built from.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to `out`, with no BOS.
  //
  // With `parse_special`, the text of a control token (such as "<|im_start|>") becomes that
  // token; without it such text is tokenized as plain text. User-defined tokens are always
  // matched, as in llama.cpp. Bytes that are not valid UTF-8 are encoded as U+FFFD by the
  // byte-level tokenizer (llama.cpp does the same).
  // Cost: linear in the text; about 10-20 MB/s on one core for the byte-level tokenizer.
  virtual void EncodeAppend(std::string_view text, bool parse_special,
                            std::vector<int32_t>* out) const = 0;

  // Returns the ids of `text`, prefixed with BOS when `add_bos` is set and the model has one.
  std::vector<int32_t> Encode(std::string_view text, bool parse_special, bool add_bos) const;
  // As above, with BOS exactly when the model asks for it (add_bos()).
  std::vector<int32_t> Encode(std::string_view text, bool parse_special) const {
    return Encode(text, parse_special, add_bos());
  }

  // Appends the bytes token `id` contributes when it follows `prev_id` (-1 at the start of a
  // text). The previous token matters only for llama2.c, which drops the leading space of the
  // token after BOS. With `skip_special`, control and unknown tokens contribute nothing. An
  // out-of-range id contributes nothing.
  virtual void AppendDecoded(int32_t prev_id, int32_t id, bool skip_special,
                             std::string* out) const = 0;

  // Returns the bytes of `ids` (which need not be valid UTF-8). For byte-level BPE,
  // Decode(Encode(x, p, false)) == x for every valid UTF-8 x; llama2.c's encoder adds a leading
  // space that Decode drops only after BOS.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // Returns the bytes token `id` stands for, without context (control tokens give their text);
  // empty for an out-of-range id.
  virtual std::string TokenPiece(int32_t id) const = 0;

  // Returns token `id`'s vocabulary entry as the tokenizer file stores it (byte-level BPE:
  // "Ġthe"; an added token: its content), as Hugging Face's id_to_token; empty for an
  // out-of-range id.
  virtual std::string TokenEntry(int32_t id) const = 0;

  // Returns the id whose vocabulary entry is exactly `piece` (for byte-level BPE, the entry as
  // stored, e.g. "<|im_end|>" or "Ġthe"), or -1.
  virtual int32_t TokenId(std::string_view piece) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the model has none
  virtual int32_t eos_id() const = 0;  // -1 when the model has none
  // Whether the model wants BOS in front of every encoded prompt.
  virtual bool add_bos() const = 0;
  // True for every token that ends generation (EOS, <|im_end|>, <|endoftext|>, ...).
  virtual bool IsEog(int32_t id) const = 0;
  // True for control and unknown tokens: the ones Decode skips with skip_special.
  virtual bool IsSpecial(int32_t id) const = 0;
};

// Builds the tokenizer a model file describes.
//
// Errors: Unimplemented "unsupported_tokenizer" (an unknown pre-tokenizer name);
//   InvalidArgument "bad_tokenizer" (no tokens, scores or types of the wrong length, special
//   ids out of range, a merge without a space).
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(const model::TokenizerData& data);

}  // namespace deepinfer::tokenizer
