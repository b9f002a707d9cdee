#include "tokenizer/vocab.h"

#include <algorithm>
#include <map>

#include "fmt/format.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::tokenizer {
namespace {

using model::TokenType;

// Entries llama.cpp always treats as control tokens that end generation, whatever the file
// says (llama_vocab::impl::load, "auto-detect special tokens by text").
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<｜end▁of▁sentence｜>",
};

absl::Status BadTokenizer(std::string_view message) {
  return InvalidArgumentError(util::codes::kBadTokenizer, message);
}

}  // namespace

absl::StatusOr<Vocab> Vocab::Create(const model::TokenizerData& data) {
  const size_t n = data.tokens.size();
  if (n == 0) return BadTokenizer("the tokenizer has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) return BadTokenizer("too many tokens");
  if (!data.token_types.empty() && data.token_types.size() != n) {
    return BadTokenizer(fmt::format("{} token types for {} tokens", data.token_types.size(), n));
  }
  const bool byte_level = data.kind == model::TokenizerData::Kind::kByteLevelBpe;
  Vocab v;
  v.texts_ = data.tokens;
  v.types_ = data.token_types;
  if (v.types_.empty()) v.types_.assign(n, TokenType::kNormal);
  v.ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (byte_level && v.texts_[i].empty()) v.texts_[i] = fmt::format("[EMPTY_{}]", i);
    v.ids_[v.texts_[i]] = static_cast<int32_t>(i);
  }
  auto check_id = [&](int32_t id, std::string_view what) -> absl::Status {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      return BadTokenizer(fmt::format("{} id {} is outside the vocabulary of {}", what, id, n));
    }
    return absl::OkStatus();
  };
  DI_RETURN_IF_ERROR(check_id(data.bos_id, "bos"));
  DI_RETURN_IF_ERROR(check_id(data.eos_id, "eos"));
  if (data.eos_id >= 0) v.eog_.insert(data.eos_id);
  for (int32_t id : data.eog_ids) {
    DI_RETURN_IF_ERROR(check_id(id, "eog"));
    if (id >= 0) v.eog_.insert(id);
  }
  if (byte_level) {
    for (std::string_view text : kEogTexts) {
      const int32_t id = v.Find(text);
      if (id < 0) continue;
      v.eog_.insert(id);
      if (v.types_[id] != TokenType::kControl) v.types_[id] = TokenType::kControl;
    }
  }

  v.special_rank_.assign(n, -1);
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = v.types_[i];
    if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) {
      v.specials_.push_back(static_cast<int32_t>(i));
      if (t == TokenType::kUserDefined) v.has_user_defined_ = true;
    }
  }
  std::stable_sort(v.specials_.begin(), v.specials_.end(),
                   [&](int32_t a, int32_t b) { return v.texts_[a].size() > v.texts_[b].size(); });
  v.trie_.emplace_back();
  for (size_t rank = 0; rank < v.specials_.size(); ++rank) {
    const int32_t id = v.specials_[rank];
    v.special_rank_[id] = static_cast<int32_t>(rank);
    const std::string& text = v.texts_[id];
    if (text.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : text) {
      int32_t child = v.Child(node, c);
      if (child < 0) {
        child = static_cast<int32_t>(v.trie_.size());
        v.trie_.emplace_back();
        auto& kids = v.trie_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1})),
                    {c, child});
      }
      node = child;
    }
    // Two special tokens with the same text: the first in priority order claims it.
    if (v.trie_[node].token < 0) v.trie_[node].token = id;
  }
  return v;
}

int32_t Vocab::Find(std::string_view text) const {
  auto it = ids_.find(absl::string_view(text.data(), text.size()));
  return it == ids_.end() ? -1 : it->second;
}

int32_t Vocab::Child(int32_t node, uint8_t byte) const {
  const auto& kids = trie_[node].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1}));
  return (it != kids.end() && it->first == byte) ? it->second : -1;
}

void Vocab::Partition(std::string_view text, bool parse_special, std::vector<Fragment>* out) const {
  if (text.empty()) return;
  if (specials_.empty() || (!parse_special && !has_user_defined_)) {
    out->push_back({-1, 0, text.size()});
    return;
  }
  // Every occurrence of every eligible special token, as (priority, position).
  std::vector<std::pair<int32_t, size_t>> found;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (Child(0, s[pos]) < 0) continue;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = Child(node, s[i]);
      if (node < 0) break;
      const int32_t id = trie_[node].token;
      if (id >= 0 && (parse_special || types_[id] == TokenType::kUserDefined)) {
        found.emplace_back(special_rank_[id], pos);
      }
    }
  }
  if (found.empty()) {
    out->push_back({-1, 0, text.size()});
    return;
  }
  std::sort(found.begin(), found.end());
  std::map<size_t, std::pair<size_t, int32_t>> taken;  // start -> (end, token)
  size_t i = 0;
  while (i < found.size()) {
    const int32_t rank = found[i].first;
    const int32_t id = specials_[rank];
    const size_t len = texts_[id].size();
    size_t last_end = 0;
    for (; i < found.size() && found[i].first == rank; ++i) {
      const size_t start = found[i].second;
      const size_t end = start + len;
      if (start < last_end) continue;  // overlaps this token's previous match
      auto next = taken.upper_bound(start);
      if (next != taken.end() && next->first < end) continue;
      if (next != taken.begin() && std::prev(next)->second.first > start) continue;
      taken.emplace(start, std::make_pair(end, id));
      last_end = end;
    }
  }
  size_t at = 0;
  for (const auto& [start, end_token] : taken) {
    if (start > at) out->push_back({-1, at, start - at});
    out->push_back({end_token.second, start, end_token.first - start});
    at = end_token.first;
  }
  if (at < text.size()) out->push_back({-1, at, text.size() - at});
}

}  // namespace deepinfer::tokenizer
