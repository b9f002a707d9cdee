#include "engine/request.h"

#include "absl/time/time.h"

namespace deepinfer::engine {

void RequestStream::PushToken(TokenEvent event) {
  {
    absl::MutexLock lock(&mu_);
    pending_.push_back(std::move(event));
  }
  cv_.Signal();
}

void RequestStream::PushPromptLogprobs(std::vector<TokenEvent> entries) {
  {
    absl::MutexLock lock(&mu_);
    prompt_logprobs_ = std::move(entries);
    has_prompt_logprobs_ = true;
  }
  cv_.Signal();
}

void RequestStream::Finish(FinishReason reason, int32_t prompt_tokens, int32_t cached_tokens,
                           int32_t completion_tokens, std::string error, std::string error_code) {
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    done_ = true;
    final_.finish = reason;
    final_.prompt_tokens = prompt_tokens;
    final_.cached_tokens = cached_tokens;
    final_.completion_tokens = completion_tokens;
    final_.error = std::move(error);
    final_.error_code = std::move(error_code);
  }
  cv_.SignalAll();
}

void RequestStream::SetSpeculativeCounts(int32_t drafted, int32_t accepted, int32_t steps) {
  absl::MutexLock lock(&mu_);
  final_.num_draft_tokens = drafted;
  final_.num_accepted_tokens = accepted;
  final_.num_draft_steps = steps;
}

void RequestStream::SetTimings(const RequestTimings& timings) {
  absl::MutexLock lock(&mu_);
  final_.timings = timings;
}

bool RequestStream::Full() const {
  absl::MutexLock lock(&mu_);
  return pending_.size() >= capacity_;
}

bool RequestStream::finished() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

bool RequestStream::Wait(StreamUpdate& out, std::chrono::milliseconds timeout) {
  out.tokens.clear();
  out.prompt_logprobs.clear();
  out.finish = FinishReason::kNone;
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  while (!HasNewsLocked() && !cv_.WaitWithDeadline(&mu_, deadline)) {
  }
  const bool prompt_news = has_prompt_logprobs_;
  if (has_prompt_logprobs_) {
    out.prompt_logprobs = std::move(prompt_logprobs_);
    prompt_logprobs_.clear();
    has_prompt_logprobs_ = false;
  }
  while (!pending_.empty()) {
    out.tokens.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  if (done_ && !delivered_done_) {
    delivered_done_ = true;
    out.finish = final_.finish;
    out.error = final_.error;
    out.error_code = final_.error_code;
    out.prompt_tokens = final_.prompt_tokens;
    out.cached_tokens = final_.cached_tokens;
    out.completion_tokens = final_.completion_tokens;
    out.num_draft_tokens = final_.num_draft_tokens;
    out.num_accepted_tokens = final_.num_accepted_tokens;
    out.num_draft_steps = final_.num_draft_steps;
    out.timings = final_.timings;
  }
  return prompt_news || !out.tokens.empty() || out.finish != FinishReason::kNone;
}

void RequestStream::Cancel() { cancelled_.store(true, std::memory_order_release); }

}  // namespace deepinfer::engine
