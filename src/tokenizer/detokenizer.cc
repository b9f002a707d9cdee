#include "tokenizer/detokenizer.h"

#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {
namespace {
constexpr char kReplacementUtf8[] = "\xEF\xBF\xBD";
}  // namespace

void IncrementalDetokenizer::Push(int32_t id, std::string* out) {
  tokenizer_.AppendDecoded(prev_id_, id, skip_special_, &pending_);
  prev_id_ = id;
  Drain(out);
}

void IncrementalDetokenizer::Drain(std::string* out) {
  std::string_view rest = pending_;
  while (!rest.empty()) {
    // ASCII fast path.
    size_t ascii = 0;
    while (ascii < rest.size() && static_cast<unsigned char>(rest[ascii]) < 0x80) ++ascii;
    if (ascii > 0) {
      out->append(rest.substr(0, ascii));
      rest.remove_prefix(ascii);
      continue;
    }
    const Utf8Step step = NextUtf8(rest);
    if (step.kind == Utf8Step::kIncomplete) break;
    if (step.kind == Utf8Step::kValid) {
      out->append(rest.substr(0, step.length));
    } else {
      out->append(kReplacementUtf8);
    }
    rest.remove_prefix(step.length);
  }
  pending_.erase(0, pending_.size() - rest.size());
}

void IncrementalDetokenizer::Finish(std::string* out) {
  if (!pending_.empty()) out->append(kReplacementUtf8);
  pending_.clear();
  prev_id_ = -1;
}

}  // namespace deepinfer::tokenizer
