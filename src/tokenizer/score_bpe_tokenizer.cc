#include "tokenizer/score_bpe_tokenizer.h"

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "tokenizer/scratch.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::tokenizer {
namespace {

// run.c starts its search for the best pair at this score.
constexpr float kMinScore = -1e10f;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xXX>" -> XX, else -1.
int BytePieceValue(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  const int hi = HexValue(piece[3]);
  const int lo = HexValue(piece[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

struct Pair {
  float score;
  int32_t left;  // positions
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};

// Max-heap order: highest score first, then leftmost.
struct PairBefore {
  bool operator()(const Pair& a, const Pair& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

constexpr int32_t kDead = -2;

}  // namespace

absl::StatusOr<std::unique_ptr<ScoreBpeTokenizer>> ScoreBpeTokenizer::Create(
    const model::TokenizerData& data) {
  if (data.kind != model::TokenizerData::Kind::kScoreBpe) {
    return InvalidArgumentError(util::codes::kBadTokenizer, "not a llama2.c tokenizer");
  }
  if (data.scores.size() != data.tokens.size()) {
    return InvalidArgumentError(
        util::codes::kBadTokenizer,
        fmt::format("{} scores for {} tokens", data.scores.size(), data.tokens.size()));
  }
  DI_ASSIGN_OR_RETURN(Vocab vocab, Vocab::Create(data));
  std::unique_ptr<ScoreBpeTokenizer> t(new ScoreBpeTokenizer(std::move(vocab)));
  t->scores_ = data.scores;
  t->bos_id_ = data.bos_id;
  t->eos_id_ = data.eos_id;
  t->add_bos_ = data.add_bos && data.bos_id >= 0;
  t->byte_value_.resize(data.tokens.size());
  const int32_t unk = t->vocab_.Contains(data.unk_id) ? data.unk_id : -1;
  t->byte_id_.fill(unk);
  for (size_t i = data.tokens.size(); i-- > 0;) {  // downwards: the lowest id wins
    const int b = BytePieceValue(data.tokens[i]);
    t->byte_value_[i] = static_cast<int16_t>(b);
    if (b >= 0) t->byte_id_[b] = static_cast<int32_t>(i);
  }
  return t;
}

void ScoreBpeTokenizer::EncodeAppend(std::string_view text, bool /*parse_special*/,
                                     std::vector<int32_t>* out) const {
  if (text.empty()) return;
  thread_local std::vector<int32_t> ids;
  ids.clear();
  const int32_t dummy_prefix = vocab_.Find(" ");
  if (dummy_prefix >= 0) ids.push_back(dummy_prefix);

  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t start = 0;  // first byte of the current code point
  size_t len = 0;
  for (size_t i = 0; i < n; ++i) {
    if ((s[i] & 0xC0) != 0x80) len = 0;
    if (len == 0) start = i;
    ++len;
    const bool next_is_continuation = i + 1 < n && (s[i + 1] & 0xC0) == 0x80;
    if (next_is_continuation && len < 4) continue;
    const int32_t id = vocab_.Find(text.substr(start, len));
    if (id >= 0) {
      ids.push_back(id);
    } else {
      // run.c writes b + 3, which is where every llama2.c vocabulary keeps "<0xXX>"; looking
      // the piece up gives the same ids there and stays inside a vocabulary that lacks them.
      for (size_t j = start; j < start + len; ++j) {
        if (byte_id_[s[j]] >= 0) ids.push_back(byte_id_[s[j]]);
      }
    }
    len = 0;
  }

  const int32_t m = static_cast<int32_t>(ids.size());
  thread_local std::vector<int32_t> next;
  thread_local std::vector<int32_t> prev;
  thread_local std::vector<Pair> heap;
  thread_local std::string joined;
  next.resize(m);
  prev.resize(m);
  heap.clear();
  for (int32_t i = 0; i < m; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < m ? i + 1 : -1;
  }
  auto try_push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    if (!vocab_.Contains(ids[left]) || !vocab_.Contains(ids[right])) return;
    joined = vocab_.text(ids[left]);
    joined += vocab_.text(ids[right]);
    const int32_t id = vocab_.Find(joined);
    if (id < 0 || !(scores_[id] > kMinScore)) return;
    heap.push_back({scores_[id], left, right, ids[left], ids[right], id});
    std::push_heap(heap.begin(), heap.end(), PairBefore());
  };
  for (int32_t i = 0; i + 1 < m; ++i) try_push(i, i + 1);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), PairBefore());
    const Pair p = heap.back();
    heap.pop_back();
    if (ids[p.left] != p.left_id || next[p.left] != p.right || ids[p.right] != p.right_id) {
      continue;
    }
    ids[p.left] = p.result;
    const int32_t after = next[p.right];
    next[p.left] = after;
    if (after >= 0) prev[after] = p.left;
    ids[p.right] = kDead;
    try_push(prev[p.left], p.left);
    try_push(p.left, after);
  }
  for (int32_t i = 0; i >= 0 && m > 0; i = next[i]) out->push_back(ids[i]);
  TrimScratch(ids);
  TrimScratch(next);
  TrimScratch(prev);
  TrimScratch(heap);
}

void ScoreBpeTokenizer::AppendDecoded(int32_t prev_id, int32_t id, bool skip_special,
                                      std::string* out) const {
  if (!vocab_.Contains(id)) return;
  if (skip_special && vocab_.IsSpecial(id)) return;
  if (byte_value_[id] >= 0) {
    out->push_back(static_cast<char>(byte_value_[id]));
    return;
  }
  std::string_view piece = vocab_.text(id);
  if (prev_id >= 0 && prev_id == bos_id_ && !piece.empty() && piece[0] == ' ') {
    piece.remove_prefix(1);
  }
  out->append(piece);
}

std::string ScoreBpeTokenizer::TokenPiece(int32_t id) const {
  std::string out;
  AppendDecoded(-1, id, false, &out);
  return out;
}

}  // namespace deepinfer::tokenizer
