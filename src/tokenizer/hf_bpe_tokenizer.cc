// The tokenizer CreateHfTokenizer builds (declared in hf_tokenizer.h).

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/scratch.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode16.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

using Step = HfPreTokenizerStep;
using Range = std::pair<uint32_t, uint32_t>;  // [first, second) code point offsets

// The pattern tokenizers' ByteLevel pre-tokenizer splits with when use_regex is set.
constexpr const char* kGpt2Regex =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

// Rust regex \w (Alphabetic, marks, digits, connector punctuation), approximated with the
// general-category classes: used only for single_word added tokens.
bool IsWordChar(uint32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) || cp == '_';
  const CpClass c = ClassOfUnicode16(cp);
  return c == CpClass::kLetter || c == CpClass::kMark || c == CpClass::kNumber;
}

// The code point that ends just before `end` (text is valid UTF-8).
uint32_t CodePointBefore(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  std::vector<uint32_t> cps;
  DecodeUtf8Lenient(text.substr(start, end - start), &cps);
  return cps.empty() ? 0 : cps[0];
}

uint32_t CodePointAt(std::string_view text, size_t begin) {
  const size_t len =
      std::min<size_t>(Utf8SeqLen(static_cast<uint8_t>(text[begin])), text.size() - begin);
  std::vector<uint32_t> cps;
  DecodeUtf8Lenient(text.substr(begin, len), &cps);
  return cps.empty() ? 0 : cps[0];
}

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct QueuedMerge {
  int32_t rank;
  int32_t pos;
  int32_t result;
};

// Min-heap order: lowest rank first, then leftmost (tokenizers' Merge ordering).
struct MergeAfter {
  bool operator()(const QueuedMerge& a, const QueuedMerge& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
  }
};

class HfBpeTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<HfBpeTokenizer>> Create(const HfTokenizerSpec& spec);

  void EncodeAppend(std::string_view text, bool parse_special,
                    std::vector<int32_t>* out) const override;
  void AppendDecoded(int32_t prev_id, int32_t id, bool skip_special,
                     std::string* out) const override {
    if (id < 0 || id >= vocab_size()) return;
    if (skip_special && special_[id]) return;
    out->append(pieces_[id]);
  }
  std::string TokenPiece(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[id] : std::string();
  }
  std::string TokenEntry(int32_t id) const override {
    return id >= 0 && id < vocab_size() ? entries_[id] : std::string();
  }
  int32_t TokenId(std::string_view piece) const override {
    auto it = ids_.find(absl::string_view(piece.data(), piece.size()));
    return it == ids_.end() ? -1 : it->second;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  bool add_bos() const override { return add_bos_; }
  bool IsEog(int32_t id) const override { return eog_.contains(id); }
  bool IsSpecial(int32_t id) const override { return id >= 0 && id < vocab_size() && special_[id]; }

 private:
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t added = -1;                                 // index into added_
  };
  struct Trie {
    std::vector<TrieNode> nodes{1};
    int32_t Child(int32_t node, uint8_t byte) const {
      const auto& kids = nodes[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1}));
      return (it != kids.end() && it->first == byte) ? it->second : -1;
    }
    void Add(const std::string& text, int32_t added);
  };
  struct Piece {
    int32_t token;  // >= 0: an added token's id; -1: text [offset, offset + length)
    size_t offset;
    size_t length;
  };
  struct CompiledStep {
    Step::Kind kind;
    int32_t regex;  // index in splitter_, -1 for none
    Step::Behavior behavior;
    bool invert;
    bool add_prefix_space;
  };

  HfBpeTokenizer() = default;
  void EncodeValid(std::string_view text, bool parse_special, std::vector<int32_t>* out) const;
  // Cuts the tokens of `trie` out of text[begin, end), appending pieces.
  void CutAddedTokens(const Trie& trie, std::string_view text, size_t begin, size_t end,
                      bool parse_special, std::vector<Piece>* out) const;
  void PreTokenize(std::string_view text, std::vector<uint32_t>* cps,
                   std::vector<Range>* pieces) const;
  void ApplySplit(const CompiledStep& step, const std::vector<uint32_t>& cps,
                  std::vector<Range>* pieces) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;

  std::vector<HfAddedToken> added_;
  Trie raw_trie_;         // non-normalized added tokens
  Trie normalized_trie_;  // normalized added tokens
  std::unique_ptr<RegexSplitter> splitter_;
  std::vector<CompiledStep> steps_;
  bool ignore_merges_ = false;
  absl::flat_hash_map<std::string, int32_t> vocab_;  // byte-level entry -> id
  absl::flat_hash_map<std::string, int32_t> ids_;    // TokenId lookup (added contents win)
  int32_t byte_id_[256];
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // pair -> (rank, result)
  std::vector<std::string> pieces_;                                    // id -> decoded bytes
  std::vector<std::string> entries_;                                   // id -> stored entry
  std::vector<bool> special_;
  absl::flat_hash_set<int32_t> eog_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  bool add_bos_ = false;
};

void HfBpeTokenizer::Trie::Add(const std::string& text, int32_t added) {
  int32_t node = 0;
  for (unsigned char c : text) {
    int32_t child = Child(node, c);
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes.emplace_back();
      auto& kids = nodes[node].children;
      kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1})),
                  {c, child});
    }
    node = child;
  }
  // Same content twice: the automaton reports the first pattern; tokenizers maps it to the id
  // the content was given last.
  if (nodes[node].added < 0) nodes[node].added = added;
}

// tokenizers' ByteLevel decoder: a token whose characters are all in the byte map becomes those
// bytes; any other token stays as its UTF-8.
std::string DecodeByteLevelToken(const std::string& text) {
  const ByteLevelMap& map = ByteLevelMap::Get();
  std::vector<uint32_t> cps;
  DecodeUtf8Lenient(text, &cps);
  std::string out;
  for (uint32_t cp : cps) {
    const int b = map.ByteOf(cp);
    if (b < 0) return text;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HfBpeTokenizer>> HfBpeTokenizer::Create(
    const HfTokenizerSpec& spec) {
  const model::TokenizerData& data = spec.data;
  const int32_t n = static_cast<int32_t>(data.tokens.size());
  if (n == 0)
    return InvalidArgumentError(util::codes::kBadTokenizer, "the tokenizer has no tokens");
  if (data.token_types.size() != data.tokens.size() ||
      spec.model_vocab.size() != data.tokens.size()) {
    return InvalidArgumentError(util::codes::kBadTokenizer, "token types do not match tokens");
  }
  std::unique_ptr<HfBpeTokenizer> t(new HfBpeTokenizer());
  t->added_ = spec.added_tokens;
  t->special_.assign(n, false);
  for (size_t i = 0; i < t->added_.size(); ++i) {
    const HfAddedToken& a = t->added_[i];
    if (a.id < 0 || a.id >= n) {
      return InvalidArgumentError(util::codes::kBadTokenizer,
                                  fmt::format("added token id {}", a.id));
    }
    (a.normalized ? t->normalized_trie_ : t->raw_trie_).Add(a.content, static_cast<int32_t>(i));
    if (a.special) t->special_[a.id] = true;
  }
  // Later entries with the same content win the id, as in tokenizers' added_tokens_map.
  absl::flat_hash_map<std::string, int32_t> last_id;
  for (const HfAddedToken& a : t->added_) last_id[a.content] = a.id;
  for (HfAddedToken& a : t->added_) a.id = last_id[a.content];

  t->vocab_.reserve(n);
  t->ids_.reserve(n);
  t->pieces_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& text = data.tokens[id];
    if (!spec.model_vocab[id].empty()) {
      t->vocab_[spec.model_vocab[id]] = id;
      t->ids_[spec.model_vocab[id]] = id;
    }
    if (data.token_types[id] == model::TokenType::kUnused) continue;
    t->pieces_[id] = DecodeByteLevelToken(text);
  }
  for (const HfAddedToken& a : t->added_) t->ids_[a.content] = a.id;
  t->entries_ = data.tokens;

  const ByteLevelMap& map = ByteLevelMap::Get();
  for (int b = 0; b < 256; ++b) {
    auto it = t->vocab_.find(map.byte_to_utf8[b]);
    t->byte_id_[b] = it == t->vocab_.end() ? -1 : it->second;
  }
  t->merges_.reserve(data.merges.size());
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const std::string& m = data.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return InvalidArgumentError(util::codes::kBadTokenizer,
                                  fmt::format("merge {} has no space", rank));
    }
    const std::string a = m.substr(0, space);
    const std::string b = m.substr(space + 1);
    auto ia = t->vocab_.find(a);
    auto ib = t->vocab_.find(b);
    auto ir = t->vocab_.find(a + b);
    if (ia == t->vocab_.end() || ib == t->vocab_.end() || ir == t->vocab_.end()) {
      return InvalidArgumentError(
          util::codes::kBadTokenizer,
          fmt::format("merge {} (\"{}\") is not in the vocabulary", rank, m));
    }
    const uint64_t key =
        (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    // A repeated pair keeps its last rank, as tokenizers' merge map does.
    t->merges_[key] = {static_cast<int32_t>(rank), ir->second};
  }

  std::vector<std::string> regexes;
  for (const Step& s : spec.pre_tokenizer) {
    CompiledStep c{s.kind, -1, s.behavior, s.invert, s.add_prefix_space};
    if (s.kind == Step::Kind::kSplit) {
      c.regex = static_cast<int32_t>(regexes.size());
      regexes.push_back(s.regex);
    } else if (s.use_regex) {
      c.regex = static_cast<int32_t>(regexes.size());
      regexes.push_back(kGpt2Regex);
    }
    t->steps_.push_back(c);
  }
  DI_ASSIGN_OR_RETURN(t->splitter_, RegexSplitter::Create(regexes, &ClassOfUnicode16));
  t->ignore_merges_ = spec.ignore_merges;
  auto check = [n](int32_t id) { return id >= -1 && id < n; };
  if (!check(data.bos_id) || !check(data.eos_id)) {
    return InvalidArgumentError(util::codes::kBadTokenizer, "bos or eos id out of range");
  }
  t->bos_id_ = data.bos_id;
  t->eos_id_ = data.eos_id;
  t->add_bos_ = data.add_bos && data.bos_id >= 0;
  if (data.eos_id >= 0) t->eog_.insert(data.eos_id);
  for (int32_t id : data.eog_ids) {
    if (id >= 0 && id < n) t->eog_.insert(id);
  }
  return t;
}

void HfBpeTokenizer::EncodeAppend(std::string_view text, bool parse_special,
                                  std::vector<int32_t>* out) const {
  // tokenizers takes a Rust String: make the text valid UTF-8 first, one U+FFFD per maximal
  // invalid subpart (what Python's errors="replace" does).
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Step step = NextUtf8(text.substr(i));
    if (step.kind != Utf8Step::kValid) break;
    i += step.length;
  }
  if (i == text.size()) {
    EncodeValid(text, parse_special, out);
    return;
  }
  std::string fixed(text.substr(0, i));
  while (i < text.size()) {
    const Utf8Step step = NextUtf8(text.substr(i));
    if (step.kind == Utf8Step::kValid) {
      fixed.append(text.substr(i, step.length));
    } else {
      AppendUtf8(kReplacementChar, &fixed);
    }
    i += step.length;
  }
  EncodeValid(fixed, parse_special, out);
}

void HfBpeTokenizer::CutAddedTokens(const Trie& trie, std::string_view text, size_t begin,
                                    size_t end, bool parse_special, std::vector<Piece>* out) const {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  size_t start_offset = begin;
  size_t pos = begin;
  while (pos < end) {
    // Leftmost, then longest, match at or after pos (aho-corasick LeftmostLongest).
    size_t m_start = 0;
    size_t m_end = 0;
    int32_t added = -1;
    for (; pos < end && added < 0; ++pos) {
      int32_t node = trie.Child(0, s[pos]);
      for (size_t k = pos; node >= 0;) {
        if (trie.nodes[node].added >= 0) {
          added = trie.nodes[node].added;
          m_start = pos;
          m_end = k + 1;
        }
        if (++k >= end) break;
        node = trie.Child(node, s[k]);
      }
    }
    if (added < 0) break;
    pos = m_end;  // the search resumes after the match even when it is skipped below
    const HfAddedToken& t = added_[added];
    if (t.special && !parse_special) continue;
    if (t.single_word) {
      const bool start_ok = m_start == begin || !IsWordChar(CodePointBefore(text, m_start));
      const bool stop_ok = m_end == end || !IsWordChar(CodePointAt(text, m_end));
      if (!start_ok || !stop_ok) continue;
    }
    size_t first = m_start;
    size_t last = m_end;
    if (t.lstrip) {
      size_t ws = m_start;
      while (ws > begin) {
        size_t prev = ws - 1;
        while (prev > begin && (s[prev] & 0xC0) == 0x80) --prev;
        if (!IsWhitespace(CodePointAt(text, prev))) break;
        ws = prev;
      }
      first = std::max(ws, start_offset);
    }
    if (t.rstrip) {
      while (last < end) {
        const uint32_t cp = CodePointAt(text, last);
        if (!IsWhitespace(cp)) break;
        last += Utf8SeqLen(s[last]);
      }
    }
    if (start_offset < first) out->push_back({-1, start_offset, first - start_offset});
    out->push_back({t.id, first, last - first});
    start_offset = last;
  }
  if (start_offset < end) out->push_back({-1, start_offset, end - start_offset});
}

void HfBpeTokenizer::EncodeValid(std::string_view text, bool parse_special,
                                 std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::vector<Piece> first;
  CutAddedTokens(raw_trie_, text, 0, text.size(), parse_special, &first);
  std::vector<Piece> second;
  for (const Piece& p : first) {
    if (p.token >= 0) {
      second.push_back(p);
    } else {
      CutAddedTokens(normalized_trie_, text, p.offset, p.offset + p.length, parse_special, &second);
    }
  }
  std::vector<uint32_t> cps;
  std::vector<Range> words;
  std::string word;
  for (const Piece& p : second) {
    if (p.token >= 0) {
      out->push_back(p.token);
      continue;
    }
    cps.clear();
    words.clear();
    PreTokenize(text.substr(p.offset, p.length), &cps, &words);
    for (const Range& w : words) {
      word.clear();
      for (uint32_t i = w.first; i < w.second; ++i) AppendUtf8(cps[i], &word);
      EncodeWord(word, out);
    }
  }
}

void HfBpeTokenizer::PreTokenize(std::string_view text, std::vector<uint32_t>* cps,
                                 std::vector<Range>* pieces) const {
  DecodeUtf8Lenient(text, cps);
  pieces->assign(1, {0, static_cast<uint32_t>(cps->size())});
  for (const CompiledStep& step : steps_) {
    if (step.kind == Step::Kind::kByteLevel && step.add_prefix_space) {
      // Every piece that does not start with a space gets one.
      std::vector<uint32_t> grown;
      std::vector<Range> moved;
      for (const Range& r : *pieces) {
        const uint32_t start = static_cast<uint32_t>(grown.size());
        if ((*cps)[r.first] != ' ') grown.push_back(' ');
        grown.insert(grown.end(), cps->begin() + r.first, cps->begin() + r.second);
        moved.emplace_back(start, static_cast<uint32_t>(grown.size()));
      }
      cps->swap(grown);
      pieces->swap(moved);
    }
    if (step.regex >= 0) ApplySplit(step, *cps, pieces);
  }
}

void HfBpeTokenizer::ApplySplit(const CompiledStep& step, const std::vector<uint32_t>& cps,
                                std::vector<Range>* pieces) const {
  thread_local std::vector<Range> matches;
  thread_local std::vector<std::pair<Range, bool>> marked;  // (range, is_match)
  std::vector<Range> next;
  for (const Range& piece : *pieces) {
    const uint32_t base = piece.first;
    const uint32_t len = piece.second - piece.first;
    matches.clear();
    splitter_->FindMatches(step.regex, cps.data() + base, len, &matches);
    marked.clear();
    uint32_t prev = 0;
    for (const Range& m : matches) {
      if (prev != m.first) marked.push_back({{prev, m.first}, false});
      marked.push_back({m, true});
      prev = m.second;
    }
    if (prev != len) marked.push_back({{prev, len}, false});
    if (step.invert) {
      for (auto& m : marked) m.second = !m.second;
    }
    // normalizer.rs split: fold the marked pieces by behavior; a removed piece keeps its flag.
    std::vector<std::pair<Range, bool>> folded;
    bool previous_match = false;
    switch (step.behavior) {
      case Step::Behavior::kIsolated:
        for (const auto& m : marked) folded.push_back({m.first, false});
        break;
      case Step::Behavior::kRemoved:
        folded = marked;
        break;
      case Step::Behavior::kMergedWithPrevious:
        for (const auto& [range, is_match] : marked) {
          if (is_match && !previous_match && !folded.empty()) {
            folded.back().first.second = range.second;
          } else {
            folded.push_back({range, false});
          }
          previous_match = is_match;
        }
        break;
      case Step::Behavior::kMergedWithNext:
        for (auto it = marked.rbegin(); it != marked.rend(); ++it) {
          if (it->second && !previous_match && !folded.empty()) {
            folded.back().first.first = it->first.first;
          } else {
            folded.push_back({it->first, false});
          }
          previous_match = it->second;
        }
        std::reverse(folded.begin(), folded.end());
        break;
      case Step::Behavior::kContiguous:
        for (const auto& [range, is_match] : marked) {
          if (is_match == previous_match && !folded.empty()) {
            folded.back().first.second = range.second;
          } else {
            folded.push_back({range, false});
          }
          previous_match = is_match;
        }
        break;
    }
    for (const auto& [range, removed] : folded) {
      if (!removed && range.first != range.second) {
        next.emplace_back(base + range.first, base + range.second);
      }
    }
  }
  pieces->swap(next);
  TrimScratch(matches);
  TrimScratch(marked);
}

void HfBpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  const auto* bytes = reinterpret_cast<const uint8_t*>(word.data());
  const ByteLevelMap& map = ByteLevelMap::Get();
  if (ignore_merges_) {
    std::string encoded;
    for (uint8_t b : word) encoded += map.byte_to_utf8[b];
    auto it = vocab_.find(encoded);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<QueuedMerge> heap;
  sym.clear();
  heap.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    const int32_t id = byte_id_[bytes[i]];
    if (id < 0) continue;  // no unk token: tokenizers drops a character outside the vocabulary
    const int32_t pos = static_cast<int32_t>(sym.size());
    sym.push_back({id, pos - 1, -1, true});
    if (pos > 0) sym[pos - 1].next = pos;
  }
  auto find_merge = [&](int32_t left, int32_t right) -> const std::pair<int32_t, int32_t>* {
    const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
    auto it = merges_.find(key);
    return it == merges_.end() ? nullptr : &it->second;
  };
  auto push = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    if (const auto* m = find_merge(sym[pos].id, sym[next].id)) {
      heap.push_back({m->first, pos, m->second});
      std::push_heap(heap.begin(), heap.end(), MergeAfter());
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), MergeAfter());
    const QueuedMerge top = heap.back();
    heap.pop_back();
    Symbol& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    // Stale unless the pair there still merges into the same token (word.rs merge_all).
    const auto* m = find_merge(cur.id, sym[cur.next].id);
    if (m == nullptr || m->second != top.result) continue;
    Symbol& right = sym[cur.next];
    cur.id = top.result;
    right.alive = false;
    cur.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (cur.prev >= 0) push(cur.prev);
    push(top.pos);
  }
  for (const Symbol& s : sym) {
    if (s.alive) out->push_back(s.id);
  }
  TrimScratch(sym);
  TrimScratch(heap);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateHfTokenizer(const HfTokenizerSpec& spec) {
  auto t = HfBpeTokenizer::Create(spec);
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tokenizer>(std::move(*t));
}

}  // namespace deepinfer::tokenizer
