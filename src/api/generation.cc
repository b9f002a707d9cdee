#include "api/generation.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "api/metrics.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/stop_matcher.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

using Clock = std::chrono::steady_clock;

// After a stop-string cancel the engine drops the sequence at its next step; wait this long
// for its final counts (cached tokens) before reporting without them.
constexpr auto kCancelGrace = std::chrono::seconds(2);

absl::Status EngineError(const engine::StreamUpdate& update) {
  std::string code = update.error_code.empty() ? "engine_error" : update.error_code;
  std::string message =
      update.error.empty() ? "The engine could not run the request." : update.error;
  if (code == util::codes::kKvCacheExhausted || code == util::codes::kShuttingDown) {
    return UnavailableError(code, message);
  }
  return InternalError(code, message);
}

}  // namespace

struct Generation::Choice {
  Choice(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop_strings)
      : detokenizer(tokenizer), stops(stop_strings), stop_matcher(std::move(stop_strings)) {}

  std::string MatchedStop() const {
    const int i = stop_matcher.matched_index();
    return i >= 0 && i < static_cast<int>(stops.size()) ? stops[i] : std::string();
  }

  int32_t index = 0;
  int32_t prompt_index = 0;
  int32_t prompt_tokens = 0;
  std::shared_ptr<engine::RequestStream> stream;
  tokenizer::IncrementalDetokenizer detokenizer;
  std::vector<std::string> stops;
  tokenizer::StopMatcher stop_matcher;
  absl::flat_hash_set<int32_t> stop_token_ids;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  int32_t reasoning_end_token = -1;  // ChoiceSpec::reasoning_end_token
  bool wants_prompt_logprobs = false;
  bool got_prompt_logprobs = false;
  bool in_reasoning = false;         // no reasoning end token seen yet
  int64_t reasoning_tokens = 0;
  int64_t draft_tokens = 0, draft_steps = 0;
  int64_t accepted_tokens = 0;
  bool reported_finish = false;  // the client has its finish_reason
  bool engine_done = false;      // the engine delivered its final update
  bool stop_string_cancel = false;
  Clock::time_point cancel_time;
};

Generation::Generation(const tokenizer::Tokenizer& tokenizer, HttpMetrics* metrics)
    : tokenizer_(tokenizer), metrics_(metrics) {}

Generation::~Generation() { Cancel(); }

absl::StatusOr<std::unique_ptr<Generation>> Generation::Start(engine::Engine& engine,
                                                              const tokenizer::Tokenizer& tokenizer,
                                                              std::vector<ChoiceSpec> choices,
                                                              HttpMetrics* metrics) {
  std::unique_ptr<Generation> g(new Generation(tokenizer, metrics));
  for (size_t i = 0; i < choices.size(); ++i) {
    ChoiceSpec& spec = choices[i];
    auto choice = std::make_unique<Choice>(tokenizer, std::move(spec.stops));
    choice->index = static_cast<int32_t>(i);
    choice->prompt_index = spec.prompt_index;
    choice->reasoning_end_token = spec.reasoning_end_token;
    choice->wants_prompt_logprobs = spec.request.prompt_logprobs >= 0;
    choice->in_reasoning = spec.reasoning_end_token >= 0;
    choice->prompt_tokens = static_cast<int32_t>(spec.request.prompt.size());
    for (int32_t id : spec.request.stop_token_ids) choice->stop_token_ids.insert(id);
    auto stream = engine.Submit(std::move(spec.request));
    if (!stream.ok()) return stream.status();  // ~Generation cancels the earlier ones
    choice->stream = std::move(*stream);
    g->choices_.push_back(std::move(choice));
  }
  return g;
}

absl::Status Generation::Consume(Choice& c, const engine::StreamUpdate& update,
                                 std::vector<ChoiceDelta>* out) {
  if (c.engine_done) return absl::OkStatus();
  ChoiceDelta delta;
  delta.index = c.index;
  if (c.wants_prompt_logprobs && !c.got_prompt_logprobs && !update.prompt_logprobs.empty()) {
    c.got_prompt_logprobs = true;
    delta.prompt_logprobs = update.prompt_logprobs;
    delta.has_prompt_logprobs = true;
  }
  for (const engine::TokenEvent& token : update.tokens) {
    if (c.reported_finish) break;  // tokens generated after a stop string are dropped
    c.completion_tokens++;
    if (c.in_reasoning) {
      if (token.token == c.reasoning_end_token) {
        c.in_reasoning = false;
      } else {
        c.reasoning_tokens++;
      }
    }
    delta.tokens.push_back(token);
    // End-of-generation and stop-token ids end the text; they never appear in it.
    if (tokenizer_.IsEog(token.token) || c.stop_token_ids.contains(token.token)) continue;
    std::string piece;
    c.detokenizer.Push(token.token, &piece);
    if (c.stop_matcher.Push(piece, &delta.text)) {
      c.reported_finish = true;
      c.stop_string_cancel = true;
      c.cancel_time = Clock::now();
      delta.finish_reason = "stop";
      delta.stop_string = c.MatchedStop();
      c.stream->Cancel();
    }
  }
  if (update.finish != engine::FinishReason::kNone) {
    c.engine_done = true;
    c.cached_tokens = std::min<int64_t>(update.cached_tokens, c.prompt_tokens);
    c.draft_tokens = update.num_draft_tokens;
    c.accepted_tokens = update.num_accepted_tokens;
    c.draft_steps = update.num_draft_steps;
    if (c.stop_string_cancel && metrics_ != nullptr) metrics_->RecordStopStringFinish();
    if (!c.reported_finish) {
      switch (update.finish) {
        case engine::FinishReason::kStop:
        case engine::FinishReason::kLength: {
          std::string tail;
          c.detokenizer.Finish(&tail);
          if (c.stop_matcher.Push(tail, &delta.text)) {
            delta.finish_reason = "stop";
            delta.stop_string = c.MatchedStop();
          } else {
            c.stop_matcher.Finish(&delta.text);
            delta.finish_reason = update.finish == engine::FinishReason::kStop ? "stop" : "length";
          }
          c.reported_finish = true;
          break;
        }
        case engine::FinishReason::kError:
          return EngineError(update);
        default:
          // Cancelled, though this request did not cancel it: the engine is shutting down.
          return UnavailableError(util::codes::kCancelled,
                                  "The request was cancelled by the server.");
      }
    }
  }
  if (!delta.text.empty() || !delta.tokens.empty() || !delta.finish_reason.empty() ||
      delta.has_prompt_logprobs) {
    out->push_back(std::move(delta));
  }
  return absl::OkStatus();
}

absl::Status Generation::Poll(std::chrono::milliseconds timeout, std::vector<ChoiceDelta>* out) {
  engine::StreamUpdate update;
  size_t before = out->size();
  Choice* first_waiting = nullptr;
  for (auto& c : choices_) {
    if (c->engine_done) continue;
    if (c->stop_string_cancel && Clock::now() - c->cancel_time > kCancelGrace) {
      c->engine_done = true;  // give up on its counts
      continue;
    }
    if (first_waiting == nullptr) first_waiting = c.get();
    if (c->stream->Wait(update, std::chrono::milliseconds(0))) {
      DI_RETURN_IF_ERROR(Consume(*c, update, out));
    }
  }
  if (out->size() == before && first_waiting != nullptr && !first_waiting->engine_done) {
    if (first_waiting->stream->Wait(update, timeout)) {
      DI_RETURN_IF_ERROR(Consume(*first_waiting, update, out));
    }
  }
  return absl::OkStatus();
}

bool Generation::done() const {
  for (const auto& c : choices_) {
    if (!c->reported_finish || !c->engine_done) return false;
  }
  return true;
}

bool Generation::all_finished() const {
  for (const auto& c : choices_) {
    if (!c->reported_finish) return false;
  }
  return true;
}

void Generation::Cancel() {
  for (auto& c : choices_) {
    if (c->stream && !c->engine_done) c->stream->Cancel();
  }
}

UsageCounts Generation::usage() const {
  UsageCounts u;
  std::vector<int32_t> seen;
  for (const auto& c : choices_) {
    u.completion_tokens += c->completion_tokens;
    u.reasoning_tokens += c->reasoning_tokens;
    u.draft_tokens += c->draft_tokens;
    u.accepted_tokens += c->accepted_tokens;
    u.draft_steps += c->draft_steps;
    if (std::find(seen.begin(), seen.end(), c->prompt_index) != seen.end()) continue;
    seen.push_back(c->prompt_index);
    u.prompt_tokens += c->prompt_tokens;
    u.cached_tokens += c->cached_tokens;
  }
  return u;
}

}  // namespace deepinfer::api
