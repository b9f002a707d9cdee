#include "tokenizer/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace deepinfer::tokenizer {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

bool StopMatcher::Push(std::string_view delta, std::string* out) {
  if (matched_ >= 0) return true;
  held_.append(delta);
  // The earliest complete match, longest on ties.
  size_t best_pos = std::string::npos;
  size_t best_len = 0;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& stop = stops_[i];
    if (stop.empty()) continue;
    const size_t pos = held_.find(stop);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && stop.size() > best_len)) {
      best_pos = pos;
      best_len = stop.size();
      matched_ = static_cast<int>(i);
    }
  }
  if (matched_ >= 0) {
    out->append(held_, 0, best_pos);
    held_.clear();
    return true;
  }
  // Hold the longest suffix that is a proper prefix of a stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - (stop.empty() ? 0 : 1), held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  out->append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

void StopMatcher::Finish(std::string* out) {
  if (matched_ < 0) out->append(held_);
  held_.clear();
}

}  // namespace deepinfer::tokenizer
