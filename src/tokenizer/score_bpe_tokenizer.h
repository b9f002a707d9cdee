#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace deepinfer::tokenizer {

// llama2.c's tokenizer: pieces are raw bytes with a score; encoding merges the adjacent pair
// whose concatenation is a piece with the highest score (leftmost on ties) until none is left.
//
// Encode: for a non-empty text, the piece " " first (the dummy prefix); then each UTF-8 code
// point (at most 4 bytes; a stray continuation byte stands alone) becomes its piece, or, when
// it has none, each of its bytes b becomes the piece "<0xXX>" (id b + 3 in llama2.c's
// vocabularies, which run.c assumes), or the unknown token where the vocabulary lacks that
// piece (nothing without one), so every id is in range; then the merges. parse_special is ignored:
// llama2.c never matches special tokens in text. Pairs whose piece scores -1e10 or less never
// merge, as in run.c.
// Decode: a piece that follows BOS loses its leading space; "<0xXX>" pieces are the byte 0xXX.
// Threads: const methods are safe to call concurrently.
// Cost: Encode is O(n log n) in the text (a priority queue instead of run.c's rescans).
// Source: karpathy/llama2.c run.c (encode, decode); /work/shared/models/README.md.
class ScoreBpeTokenizer final : public Tokenizer {
 public:
  // Errors: Vocab::Create's; InvalidArgument "bad_tokenizer" (scores missing or of the wrong
  //   length).
  static absl::StatusOr<std::unique_ptr<ScoreBpeTokenizer>> Create(
      const model::TokenizerData& data);

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
  explicit ScoreBpeTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}

  Vocab vocab_;
  std::vector<float> scores_;
  std::vector<int16_t> byte_value_;   // id -> byte of a "<0xXX>" piece, or -1
  std::array<int32_t, 256> byte_id_;  // byte -> its "<0xXX>" piece, else unk, else -1
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = false;
};

}  // namespace deepinfer::tokenizer
