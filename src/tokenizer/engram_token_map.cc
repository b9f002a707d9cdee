#include "tokenizer/engram_token_map.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include "absl/container/flat_hash_map.h"
#include "tokenizer/unicode.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

// The reference's stand-in for a lone space while Strip runs.
constexpr uint32_t kSentinel = 0xE000;

struct Normalizers {
  const icu::Normalizer2* nfkc;
  const icu::Normalizer2* nfd;
};

const Normalizers& GetNormalizers() {
  static const Normalizers n = [] {
    UErrorCode err = U_ZERO_ERROR;
    Normalizers r{icu::Normalizer2::getNFKCInstance(err), icu::Normalizer2::getNFDInstance(err)};
    DI_CHECK(U_SUCCESS(err));  // ICU without its normalization data
    return r;
  }();
  return n;
}

bool IsMark(UChar32 c) {
  const int8_t t = u_charType(c);
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK;
}

// Appends the full lowercase mapping of `c` alone (no neighbours, so no final-sigma context),
// as Rust's char::to_lowercase, which `tokenizers`' Lowercase applies code point by code point.
void AppendLower(UChar32 c, std::vector<uint32_t>* out) {
  UChar in[2];
  int32_t n = 0;
  U16_APPEND_UNSAFE(in, n, c);
  UChar lower[8];
  UErrorCode err = U_ZERO_ERROR;
  const int32_t m = u_strToLower(lower, 8, in, n, "", &err);
  if (U_FAILURE(err)) {  // no mapping is longer than 3 UTF-16 units; keep c as it is
    out->push_back(static_cast<uint32_t>(c));
    return;
  }
  for (int32_t i = 0; i < m;) {
    UChar32 l;
    U16_NEXT_UNSAFE(lower, i, l);
    out->push_back(static_cast<uint32_t>(l));
  }
}

bool IsCollapsedSpace(uint32_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool IsValidUtf8(std::string_view s) {
  while (!s.empty()) {
    const Utf8Step step = NextUtf8(s);
    if (step.kind != Utf8Step::kValid) return false;
    s.remove_prefix(step.length);
  }
  return true;
}

}  // namespace

std::string NormalizeEngramKey(std::string_view utf8) {
  const Normalizers& n = GetNormalizers();
  UErrorCode err = U_ZERO_ERROR;
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
  s = n.nfkc->normalize(s, err);
  s = n.nfd->normalize(s, err);
  DI_CHECK(U_SUCCESS(err));

  // StripAccents, then Lowercase.
  std::vector<uint32_t> cps;
  cps.reserve(static_cast<size_t>(s.length()));
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    if (!IsMark(c)) AppendLower(c, &cps);
  }
  // Runs of [ \t\r\n] to one space.
  std::vector<uint32_t> collapsed;
  collapsed.reserve(cps.size());
  bool in_run = false;
  for (uint32_t c : cps) {
    const bool space = IsCollapsedSpace(c);
    if (!space || !in_run) collapsed.push_back(space ? ' ' : c);
    in_run = space;
  }
  // A lone space survives Strip as the sentinel; then White_Space is stripped at both ends and
  // every sentinel (the text's own U+E000 too) becomes a space.
  if (collapsed.size() == 1 && collapsed[0] == ' ') collapsed[0] = kSentinel;
  size_t begin = 0, end = collapsed.size();
  while (begin < end && u_isUWhiteSpace(static_cast<UChar32>(collapsed[begin]))) ++begin;
  while (end > begin && u_isUWhiteSpace(static_cast<UChar32>(collapsed[end - 1]))) --end;
  std::string out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i)
    AppendUtf8(collapsed[i] == kSentinel ? ' ' : collapsed[i], &out);
  return out;
}

absl::StatusOr<EngramTokenMap> BuildEngramTokenMap(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  if (n <= 0)
    return InvalidArgumentError(util::codes::kBadTokenizer, "the tokenizer has no tokens");
  EngramTokenMap map;
  map.class_of.resize(static_cast<size_t>(n));
  absl::flat_hash_map<std::string, int32_t> class_of_key;
  class_of_key.reserve(static_cast<size_t>(n));
  std::string text;
  for (int32_t id = 0; id < n; ++id) {
    text.clear();
    tokenizer.AppendDecoded(-1, id, /*skip_special=*/false, &text);
    std::string key;
    // `tokenizers` decodes lossily: bytes that are not UTF-8 show up as U+FFFD.
    if (!IsValidUtf8(text) || text.find("\xEF\xBF\xBD") != std::string::npos) {
      key = tokenizer.TokenEntry(id);
    } else {
      key = NormalizeEngramKey(text);
      if (key.empty()) key = text;
    }
    auto [it, inserted] = class_of_key.try_emplace(std::move(key), map.num_classes);
    if (inserted) ++map.num_classes;
    map.class_of[static_cast<size_t>(id)] = it->second;
  }
  return map;
}

absl::Status AttachEngramTokenClasses(const Tokenizer& tokenizer, model::Model* model) {
  const auto& ds = model->config.deepseek_v4;
  if (!ds || !ds->v41 || ds->engram_layer_ids.empty()) return absl::OkStatus();
  DI_ASSIGN_OR_RETURN(EngramTokenMap map, BuildEngramTokenMap(tokenizer));
  model->engram_token_classes = std::move(map.class_of);
  return absl::OkStatus();
}

}  // namespace deepinfer::tokenizer
