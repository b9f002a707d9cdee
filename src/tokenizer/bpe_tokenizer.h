#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace deepinfer::tokenizer {

// Byte-level BPE (GPT-2 style) with ranked merges, token for token identical to llama.cpp's
// llm_tokenizer_bpe: special tokens are cut out first (Vocab::Partition), the rest is decoded
// leniently to code points, split into words by the pre-tokenizer regexes, and each word's
// UTF-8 bytes are merged lowest rank first (leftmost on ties). A final piece that is not in
// the vocabulary falls back to the tokens of its single bytes, and bytes without one are
// dropped, as in llama.cpp.
//
// Errors (Create): Vocab::Create's; InvalidArgument "bad_tokenizer" (a merge without a
//   space); the pre-tokenizer's.
// Threads: const methods are safe to call concurrently.
// Cost: Encode is linear in the text, with a priority-queue merge per word.
// Source: llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe_session::tokenize,
//   token_to_piece), src/unicode.cpp.
class BpeTokenizer final : public Tokenizer {
 public:
  // Uses the pre-tokenizer llama.cpp picks for data.pre.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(const model::TokenizerData& data);
  // Uses `spec` instead (for tokenizers described by a Hugging Face tokenizer.json).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(const model::TokenizerData& data,
                                                              const PreTokenizerSpec& spec);

  void EncodeAppend(std::string_view text, bool parse_special,
                    std::vector<int32_t>* out) const override;
  void AppendDecoded(int32_t prev_id, int32_t id, bool skip_special,
                     std::string* out) const override;
  std::string TokenPiece(int32_t id) const override;
  std::string TokenEntry(int32_t id) const override {
    return vocab_.Contains(id) ? vocab_.text(id) : std::string();
  }
  int32_t TokenId(std::string_view piece) const override { return vocab_.Find(piece); }
  int32_t vocab_size() const override { return vocab_.size(); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  bool IsEog(int32_t id) const override { return vocab_.Contains(id) && vocab_.IsEog(id); }
  bool IsSpecial(int32_t id) const override { return vocab_.Contains(id) && vocab_.IsSpecial(id); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id
  };

  explicit BpeTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  // Returns the symbol id of `text`, adding a symbol when `create` is set and it is new.
  int32_t SymbolOf(const std::string& text, bool create);
  void EncodeText(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  void EmitSymbol(int32_t sym, std::vector<int32_t>* out) const;

  Vocab vocab_;
  std::unique_ptr<RegexSplitter> splitter_;
  bool ignore_merges_ = false;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = false;
  // Symbols are the vocabulary entries (ids 0..n-1, byte-level text) followed by merge parts
  // and results that are not entries.
  std::vector<std::string> extra_symbols_;
  absl::flat_hash_map<std::string, int32_t> extra_symbol_ids_;
  int32_t byte_symbol_[256];
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> merge
  std::vector<std::string> pieces_;              // id -> decoded bytes
};

}  // namespace deepinfer::tokenizer
