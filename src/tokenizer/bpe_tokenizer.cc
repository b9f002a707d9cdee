#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "tokenizer/scratch.h"
#include "tokenizer/unicode.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::tokenizer {
namespace {

using model::TokenType;

// llama.cpp's llama_decode_text: byte-level characters back to bytes; a character outside the
// map is spelled out.
std::string DecodeByteLevel(const std::string& text) {
  const ByteLevelMap& map = ByteLevelMap::Get();
  std::vector<uint32_t> cps;
  DecodeUtf8Lenient(text, &cps);
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : cps) {
    const int b = map.ByteOf(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
      continue;
    }
    std::string utf8;
    AppendUtf8(cp, &utf8);
    out += "[UNK_BYTE_0x";
    for (unsigned char c : utf8) out += fmt::format("{:02x}", c);
    out += text;
    out += "]";
  }
  return out;
}

struct Bigram {
  int32_t rank;
  int32_t left;  // symbol positions in the word
  int32_t right;
  int32_t left_sym;
  int32_t right_sym;
  int32_t result;
};

// Min-heap order: lowest rank first, then leftmost.
struct BigramAfter {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

struct WordScratch {
  std::vector<int32_t> sym;
  std::vector<int32_t> prev;
  std::vector<int32_t> next;
  std::vector<Bigram> heap;
};

struct EncodeScratch {
  std::vector<uint32_t> cps;
  std::vector<uint32_t> lengths;
  std::string word;
};

constexpr int32_t kDead = -2;

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(
    const model::TokenizerData& data) {
  DI_ASSIGN_OR_RETURN(PreTokenizerSpec spec, PreTokenizerSpecForName(data.pre));
  return Create(data, spec);
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(const model::TokenizerData& data,
                                                                   const PreTokenizerSpec& spec) {
  if (data.kind != model::TokenizerData::Kind::kByteLevelBpe) {
    return InvalidArgumentError(util::codes::kBadTokenizer, "not a byte-level BPE tokenizer");
  }
  DI_ASSIGN_OR_RETURN(Vocab vocab, Vocab::Create(data));
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(vocab)));
  DI_ASSIGN_OR_RETURN(t->splitter_, RegexSplitter::Create(spec.regexes));
  t->ignore_merges_ = spec.ignore_merges;
  t->bos_id_ = data.bos_id;
  t->eos_id_ = data.eos_id;
  t->add_bos_ = data.add_bos && data.bos_id >= 0;

  t->merges_.reserve(data.merges.size());
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const std::string& m = data.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return InvalidArgumentError(util::codes::kBadTokenizer,
                                  fmt::format("merge {} (\"{}\") has no space", rank, m));
    }
    const std::string first = m.substr(0, space);
    const std::string second = m.substr(space + 1);
    const int32_t left = t->SymbolOf(first, true);
    const int32_t right = t->SymbolOf(second, true);
    const int32_t result = t->SymbolOf(first + second, true);
    const uint64_t key = (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
    t->merges_.try_emplace(key, Merge{static_cast<int32_t>(rank), result});  // first rank wins
  }
  const ByteLevelMap& map = ByteLevelMap::Get();
  for (int b = 0; b < 256; ++b) t->byte_symbol_[b] = t->SymbolOf(map.byte_to_utf8[b], true);

  const int32_t n = t->vocab_.size();
  t->pieces_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& text = t->vocab_.text(id);
    switch (t->vocab_.type(id)) {
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        t->pieces_[id] = text;
        break;
      case TokenType::kNormal:
        t->pieces_[id] = DecodeByteLevel(text);
        break;
      case TokenType::kByte: {
        std::vector<uint32_t> cps;
        DecodeUtf8Lenient(text, &cps);
        const int b = cps.size() == 1 ? map.ByteOf(cps[0]) : -1;
        if (b >= 0) t->pieces_[id] = std::string(1, static_cast<char>(b));
        break;
      }
      default:  // undefined and unused tokens render as nothing
        break;
    }
  }
  return t;
}

int32_t BpeTokenizer::SymbolOf(const std::string& text, bool create) {
  const int32_t id = vocab_.Find(text);
  if (id >= 0) return id;
  auto it = extra_symbol_ids_.find(text);
  if (it != extra_symbol_ids_.end()) return it->second;
  if (!create) return -1;
  const int32_t sym = vocab_.size() + static_cast<int32_t>(extra_symbols_.size());
  extra_symbols_.push_back(text);
  extra_symbol_ids_.emplace(text, sym);
  return sym;
}

void BpeTokenizer::EncodeAppend(std::string_view text, bool parse_special,
                                std::vector<int32_t>* out) const {
  thread_local std::vector<Fragment> fragments;
  fragments.clear();
  vocab_.Partition(text, parse_special, &fragments);
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out->push_back(f.token);
    } else {
      EncodeText(text.substr(f.offset, f.length), out);
    }
  }
  TrimScratch(fragments);
}

void BpeTokenizer::EncodeText(std::string_view text, std::vector<int32_t>* out) const {
  thread_local EncodeScratch scratch;
  scratch.cps.clear();
  DecodeUtf8Lenient(text, &scratch.cps);
  scratch.lengths.clear();
  splitter_->Split(scratch.cps.data(), scratch.cps.size(), &scratch.lengths);
  size_t at = 0;
  for (uint32_t len : scratch.lengths) {
    scratch.word.clear();
    for (size_t i = at; i < at + len; ++i) AppendUtf8(scratch.cps[i], &scratch.word);
    at += len;
    EncodeWord(scratch.word, out);
  }
  TrimScratch(scratch.cps);
  TrimScratch(scratch.lengths);
}

void BpeTokenizer::EmitSymbol(int32_t sym, std::vector<int32_t>* out) const {
  if (sym < vocab_.size()) {
    out->push_back(sym);
    return;
  }
  // Not an entry: each byte of its byte-level text that is itself an entry (llama.cpp).
  for (char c : extra_symbols_[sym - vocab_.size()]) {
    const int32_t id = vocab_.Find(std::string_view(&c, 1));
    if (id >= 0) out->push_back(id);
  }
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  const auto* bytes = reinterpret_cast<const uint8_t*>(word.data());
  const int32_t n = static_cast<int32_t>(word.size());
  if (n == 0) return;
  if (ignore_merges_) {
    thread_local std::string encoded;
    encoded.clear();
    const ByteLevelMap& map = ByteLevelMap::Get();
    for (int32_t i = 0; i < n; ++i) encoded += map.byte_to_utf8[bytes[i]];
    const int32_t id = vocab_.Find(encoded);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  if (n == 1) {
    EmitSymbol(byte_symbol_[bytes[0]], out);
    return;
  }
  thread_local WordScratch w;
  w.sym.resize(n);
  w.prev.resize(n);
  w.next.resize(n);
  w.heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    w.sym[i] = byte_symbol_[bytes[i]];
    w.prev[i] = i - 1;
    w.next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto try_push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint64_t key =
        (static_cast<uint64_t>(w.sym[left]) << 32) | static_cast<uint32_t>(w.sym[right]);
    auto it = merges_.find(key);
    if (it == merges_.end()) return;
    w.heap.push_back({it->second.rank, left, right, w.sym[left], w.sym[right], it->second.result});
    std::push_heap(w.heap.begin(), w.heap.end(), BigramAfter());
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_push(i, i + 1);
  while (!w.heap.empty()) {
    std::pop_heap(w.heap.begin(), w.heap.end(), BigramAfter());
    const Bigram b = w.heap.back();
    w.heap.pop_back();
    // Stale when either side has changed since the pair was queued.
    if (w.sym[b.left] != b.left_sym || w.next[b.left] != b.right || w.sym[b.right] != b.right_sym) {
      continue;
    }
    w.sym[b.left] = b.result;
    const int32_t after = w.next[b.right];
    w.next[b.left] = after;
    if (after >= 0) w.prev[after] = b.left;
    w.sym[b.right] = kDead;
    try_push(w.prev[b.left], b.left);
    try_push(b.left, after);
  }
  for (int32_t i = 0; i >= 0; i = w.next[i]) EmitSymbol(w.sym[i], out);
  TrimScratch(w.sym);
  TrimScratch(w.prev);
  TrimScratch(w.next);
  TrimScratch(w.heap);
}

void BpeTokenizer::AppendDecoded(int32_t prev_id, int32_t id, bool skip_special,
                                 std::string* out) const {
  if (!vocab_.Contains(id)) return;
  if (skip_special && vocab_.IsSpecial(id)) return;
  out->append(pieces_[id]);
}

std::string BpeTokenizer::TokenPiece(int32_t id) const {
  return vocab_.Contains(id) ? pieces_[id] : std::string();
}

}  // namespace deepinfer::tokenizer
