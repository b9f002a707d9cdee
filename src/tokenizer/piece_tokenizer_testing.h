#pragma once

// Test-only: a tokenizer over a fixed list of pieces, for tests and fuzz targets that need a
// vocabulary but no encoder. Not part of the library.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer::testing {

// Id i stands for pieces[i]. `special` is a control token (and BOS), `eog` ends generation (-1:
// none). EncodeAppend adds nothing and TokenId finds nothing.
class PieceTokenizer final : public Tokenizer {
 public:
  PieceTokenizer(std::vector<std::string> pieces, int32_t special, int32_t eog)
      : pieces_(std::move(pieces)), special_(special), eog_(eog) {}
  void EncodeAppend(std::string_view, bool, std::vector<int32_t>*) const override {}
  void AppendDecoded(int32_t, int32_t id, bool skip_special, std::string* out) const override {
    if (id < 0 || id >= vocab_size()) return;
    if (skip_special && IsSpecial(id)) return;
    out->append(pieces_[static_cast<size_t>(id)]);
  }
  std::string TokenPiece(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[static_cast<size_t>(id)] : std::string();
  }
  std::string TokenEntry(int32_t id) const override { return TokenPiece(id); }
  int32_t TokenId(std::string_view) const override { return -1; }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return special_; }
  int32_t eos_id() const override { return eog_; }
  bool add_bos() const override { return false; }
  bool IsEog(int32_t id) const override { return id >= 0 && id == eog_; }
  bool IsSpecial(int32_t id) const override { return id == special_ || (id >= 0 && id == eog_); }

 private:
  std::vector<std::string> pieces_;
  int32_t special_;
  int32_t eog_;
};

}  // namespace deepinfer::tokenizer::testing
