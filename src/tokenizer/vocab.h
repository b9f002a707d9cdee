#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "model/model.h"

namespace deepinfer::tokenizer {

// One piece of a text after special tokens are cut out: either a special token or a byte range
// of raw text.
struct Fragment {
  int32_t token = -1;  // >= 0: a special token; -1: raw text [offset, offset + length)
  size_t offset = 0;
  size_t length = 0;
};

// The vocabulary shared by both tokenizers: entries, types, lookup by entry, special tokens and
// end-of-generation ids.
//
// Threads: immutable after Create; safe to share.
class Vocab {
 public:
  // Errors: InvalidArgument "bad_tokenizer" (no tokens, token types or scores of the wrong
  //   length, bos/eos/eog ids out of range).
  static absl::StatusOr<Vocab> Create(const model::TokenizerData& data);

  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool Contains(int32_t id) const { return id >= 0 && id < size(); }
  // The entry as stored (llama.cpp renames an empty GGUF entry to "[EMPTY_<id>]").
  const std::string& text(int32_t id) const { return texts_[id]; }
  model::TokenType type(int32_t id) const { return types_[id]; }
  // Control or unknown: rendered only on request, matched in text only with parse_special.
  bool IsSpecial(int32_t id) const {
    return types_[id] == model::TokenType::kControl || types_[id] == model::TokenType::kUnknown;
  }
  bool IsEog(int32_t id) const { return eog_.contains(id); }
  // The id of the entry `text` (the last one when entries repeat), or -1.
  int32_t Find(std::string_view text) const;

  // Cuts `text` at the special tokens it contains, exactly as llama.cpp's
  // tokenizer_st_partition: tokens are tried longest first, each taking its leftmost
  // non-overlapping occurrences that lie wholly inside text no longer token has claimed.
  // Control and unknown tokens take part only with `parse_special`; user-defined tokens always.
  // Cost: one pass over the text through a trie of the special tokens, plus work per match.
  void Partition(std::string_view text, bool parse_special, std::vector<Fragment>* out) const;

 private:
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;
  };
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<std::string> texts_;
  std::vector<model::TokenType> types_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  absl::flat_hash_set<int32_t> eog_;
  // Special tokens (control, user-defined, unknown), longest first; ties by id.
  std::vector<int32_t> specials_;
  std::vector<int32_t> special_rank_;  // id -> index in specials_, or -1
  std::vector<TrieNode> trie_;         // node 0 is the root
  bool has_user_defined_ = false;
};

}  // namespace deepinfer::tokenizer
