#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

// Finds stop strings in streamed text without ever emitting a byte of a stop string.
//
// Text is fed in deltas. Push emits everything that can no longer belong to a stop string and
// holds back the longest suffix that is a proper prefix of some stop string. When a stop string
// is complete, the text before it is emitted, the stop string and everything after it are
// dropped, and the matcher is stopped (later pushes are ignored). When several stop strings
// match, the one that starts first wins, and of those the longest. Empty stop strings are
// ignored. Finish emits the held text once the stream ends without a match.
//
// Threads: one instance per sequence; not safe for concurrent use.
// Cost: O((held + delta) * total stop bytes) per Push in the worst case; held text is shorter
//   than the longest stop string.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Consumes `delta`, appends the text that is safe to emit to `out`, and returns true when a
  // stop string has matched (now or earlier).
  bool Push(std::string_view delta, std::string* out);
  // Appends the held text (nothing after a match) and empties it.
  void Finish(std::string* out);

  bool stopped() const { return matched_ >= 0; }
  // Index into the constructor's list of the stop string that matched, or -1.
  int matched_index() const { return matched_; }
  // Bytes held back because they may begin a stop string.
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  int matched_ = -1;
};

}  // namespace deepinfer::tokenizer
