#pragma once

#include <string>
#include <string_view>

namespace deepinfer::api {

// Splits a model's generated text into reasoning (the "<think>...</think>" part) and content,
// delta by delta, for APIs that return reasoning_content separately.
//
// Generation starts in one of two states. When the prompt already opened the thinking block
// (a DeepSeek V3.1+ thinking prompt ends with "<think>"; see PromptOpensReasoning), everything
// up to the first end tag is reasoning. Otherwise the output is content, unless it begins with
// the start tag itself (R1-style models open the block on their own). Either way a start tag at
// the very beginning is dropped, and after the first end tag everything is content, tags
// included. Delta boundaries are arbitrary: text that could be the start of a tag is held back
// until the next Push or Finish decides it.
//
// Threads: one parser per generation; not thread-safe.
// Cost: linear in the text; holds back at most one tag's length.
class ReasoningParser {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;
  };

  explicit ReasoningParser(bool starts_in_reasoning, std::string start_tag = "<think>",
                           std::string end_tag = "</think>");

  // Feeds the next generated text; returns what it adds to each channel.
  Delta Push(std::string_view text);
  // Ends the generation: held-back text is released as it stands (a partial tag is text).
  Delta Finish();

  // True while generated text counts as reasoning (before the end tag).
  bool in_reasoning() const { return state_ == State::kReasoning || state_ == State::kForcedStart; }

 private:
  enum class State { kStart, kForcedStart, kReasoning, kContent };
  void Process(bool final, Delta* out);

  std::string start_tag_;
  std::string end_tag_;
  State state_;
  std::string pending_;
};

// True when `prompt` ends, but for trailing whitespace, with `start_tag`: generation then starts
// inside the thinking block.
bool PromptOpensReasoning(std::string_view prompt, std::string_view start_tag = "<think>");

}  // namespace deepinfer::api
