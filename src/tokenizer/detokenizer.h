#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

// Turns a stream of token ids into a stream of valid UTF-8 text.
//
// A token may end inside a multi-byte character (byte-fallback tokens, partial emoji); those
// bytes are held until the character is complete. Bytes that can never become valid UTF-8 are
// replaced right away, one U+FFFD per maximal ill-formed subsequence (Unicode 15.1, 3.9); an
// incomplete character still held at Finish becomes one U+FFFD. llama2.c's rule that the
// token after BOS drops its leading space is applied through Tokenizer::AppendDecoded.
//
// Threads: one instance per sequence; not safe for concurrent use.
// Lifetime: keeps a reference to `tokenizer`, which must outlive it.
// Cost: O(bytes of the token) per Push; holds at most 3 bytes between calls.
class IncrementalDetokenizer {
 public:
  // With `skip_special`, control and unknown tokens (BOS, EOS, <|im_end|>) produce no text.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = true)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Feeds one token and appends the text that became complete to `out`.
  void Push(int32_t id, std::string* out);
  // As above, returning the new text.
  std::string Push(int32_t id) {
    std::string out;
    Push(id, &out);
    return out;
  }

  // Appends U+FFFD for held bytes of an unfinished character; the object can then be reused
  // for a new text (the previous token is forgotten).
  void Finish(std::string* out);
  std::string Finish() {
    std::string out;
    Finish(&out);
    return out;
  }

  // Bytes held back, waiting for the rest of a character.
  size_t held_bytes() const { return pending_.size(); }

 private:
  // Moves every complete (or hopeless) sequence from pending_ to `out`.
  void Drain(std::string* out);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  int32_t prev_id_ = -1;
  std::string pending_;
};

}  // namespace deepinfer::tokenizer
