#include "protocol/reasoning_parser.h"

#include <algorithm>
#include <utility>

#include "protocol/partial_tag.h"

namespace deepinfer::api {

ReasoningParser::ReasoningParser(bool starts_in_reasoning, std::string start_tag,
                                 std::string end_tag)
    : start_tag_(std::move(start_tag)),
      end_tag_(std::move(end_tag)),
      state_(starts_in_reasoning ? State::kForcedStart : State::kStart) {}

ReasoningParser::Delta ReasoningParser::Push(std::string_view text) {
  Delta out;
  pending_.append(text);
  Process(/*final=*/false, &out);
  return out;
}

ReasoningParser::Delta ReasoningParser::Finish() {
  Delta out;
  Process(/*final=*/true, &out);
  return out;
}

void ReasoningParser::Process(bool final, Delta* out) {
  while (!pending_.empty()) {
    switch (state_) {
      case State::kStart:
      case State::kForcedStart: {
        // Only the very beginning may hold a start tag.
        if (!final && IsProperPrefix(pending_, start_tag_)) return;
        const bool opens = pending_.compare(0, start_tag_.size(), start_tag_) == 0;
        if (opens) pending_.erase(0, start_tag_.size());
        state_ = opens || state_ == State::kForcedStart ? State::kReasoning : State::kContent;
        break;
      }
      case State::kReasoning: {
        const size_t end = pending_.find(end_tag_);
        if (end != std::string::npos) {
          out->reasoning.append(pending_, 0, end);
          pending_.erase(0, end + end_tag_.size());
          state_ = State::kContent;
          break;
        }
        const size_t keep = final ? 0 : PartialTagSuffix(pending_, end_tag_);
        out->reasoning.append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      case State::kContent:
        out->content += pending_;
        pending_.clear();
        return;
    }
  }
}

bool PromptOpensReasoning(std::string_view prompt, std::string_view start_tag) {
  while (!prompt.empty() && (prompt.back() == ' ' || prompt.back() == '\n' ||
                             prompt.back() == '\t' || prompt.back() == '\r')) {
    prompt.remove_suffix(1);
  }
  return prompt.size() >= start_tag.size() &&
         prompt.substr(prompt.size() - start_tag.size()) == start_tag;
}

}  // namespace deepinfer::api
