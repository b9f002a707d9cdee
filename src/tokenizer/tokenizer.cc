#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/score_bpe_tokenizer.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::tokenizer {

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special,
                                       bool add_bos) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos && bos_id() >= 0) ids.push_back(bos_id());
  EncodeAppend(text, parse_special, &ids);
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    AppendDecoded(prev, id, skip_special, &out);
    prev = id;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(const model::TokenizerData& data) {
  switch (data.kind) {
    case model::TokenizerData::Kind::kByteLevelBpe: {
      auto t = BpeTokenizer::Create(data);
      if (!t.ok()) return t.status();
      return std::unique_ptr<Tokenizer>(std::move(*t));
    }
    case model::TokenizerData::Kind::kScoreBpe: {
      auto t = ScoreBpeTokenizer::Create(data);
      if (!t.ok()) return t.status();
      return std::unique_ptr<Tokenizer>(std::move(*t));
    }
  }
  return InvalidArgumentError(util::codes::kBadTokenizer, "unknown tokenizer kind");
}

}  // namespace deepinfer::tokenizer
