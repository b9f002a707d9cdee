// The scheduler: what runs in each step, and what a step's sampled tokens do to the sequences.
//
// Budget order: running sequences first (in admission order, so the oldest requests keep
// decoding under load), then waiting ones in arrival order. A decode costs 1 + its drafts; a
// prefill chunk costs its length. Preemption is by recompute: nothing is swapped out, the victim
// keeps its tokens and its full blocks stay findable in the prefix cache, so a re-admission
// usually recomputes only its unfinished tail.

#include "engine/scheduler.h"
#include "util/error_codes.h"

#include <algorithm>
#include <utility>

namespace deepinfer::engine {

std::vector<double> LatencyBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,  0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, BlockManager& blocks,
                     std::vector<bool> is_eog, WindowPool window)
    : options_(options), blocks_(blocks), window_(window), is_eog_(std::move(is_eog)) {
  running_.reserve(options_.max_num_seqs);
  retired_.reserve(options_.max_num_seqs);
  plan_.seqs.reserve(options_.max_num_seqs);
}

void Scheduler::Add(std::unique_ptr<Sequence> seq) {
  if (telemetry_ != nullptr) {
    Event(*seq, RequestEvent::kArrived, seq->arrival);
    Event(*seq, RequestEvent::kQueued, Clock::now());
  }
  waiting_.push_back(std::move(seq));
}

void Scheduler::Event(const Sequence& seq, RequestEvent event, Clock::time_point t) const {
  if (telemetry_ == nullptr) return;
  RequestRecord r;
  r.event = event;
  r.seq = seq.id;
  r.request_id = seq.req.request_id;
  if (event == RequestEvent::kArrived) r.x_request_id = seq.req.x_request_id;
  r.t_unix = telemetry_->ToUnix(t);
  if (event == RequestEvent::kFinished) {
    r.reason = seq.finish;
    r.prompt_tokens = seq.prompt_len;
    r.completion_tokens = seq.num_generated;
  }
  telemetry_->Request(std::move(r));
}

const StepPlan& Scheduler::Schedule(Clock::time_point now) {
  retired_.clear();
  DropCancelled();
  plan_.seqs.clear();
  plan_.num_tokens = 0;
  int32_t budget = options_.prefill_budget;
  deferred_.clear();
  ScheduleRunning(budget);
  const size_t before = plan_.seqs.size();
  ScheduleWaiting(budget, now);
  ScheduleDeferred(budget, plan_.seqs.size() > before);
  return plan_;
}

void Scheduler::DropCancelled() {
  // Before spending compute on them.
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->stream->cancelled()) {
      Finish(**it, FinishReason::kCancelled);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->stream->cancelled()) {
      Finish(**it, FinishReason::kCancelled);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

int32_t Scheduler::PrefillCap(const Sequence& seq, int32_t budget) const {
  return seq.long_prefill ? std::min(budget, std::max(1, options_.long_prefill_chunk)) : budget;
}

void Scheduler::ScheduleRunning(int32_t& budget) {
  const bool admitting =
      !waiting_.empty() && static_cast<int32_t>(running_.size()) < options_.max_num_seqs;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& seq = *running_[i];
    if (seq.stream->Full()) continue;  // slow client: pause this sequence
    if (seq.long_prefill && admitting && seq.num_uncomputed() > 1 && !seq.stepped_aside) {
      deferred_.push_back(&seq);  // a long prefill: the waiting go first this step
      continue;
    }
    seq.stepped_aside = false;
    int32_t num_drafts = 0;
    const int32_t chunk = RunningSlice(seq, budget, num_drafts);
    if (chunk == 0) break;  // it was preempted itself: nothing newer is left to run
    AddToPlan(seq, chunk, num_drafts);
    budget -= chunk;
  }
}

void Scheduler::ScheduleDeferred(int32_t& budget, bool admitted) {
  for (Sequence* seq : deferred_) {
    seq->stepped_aside = true;
    if (admitted || budget <= 0) continue;
    // Nobody was admitted after all: run it now, without preempting (the plan holds newer
    // sequences than it) — when its blocks do not fit, it waits a step.
    const int32_t chunk = std::min(seq->num_uncomputed(), PrefillCap(*seq, budget));
    if (!EnsureBlocks(blocks_, window_, *seq, seq->num_computed + chunk)) continue;
    seq->stepped_aside = false;
    AddToPlan(*seq, chunk, 0);
    budget -= chunk;
  }
}

int32_t Scheduler::RunningSlice(Sequence& seq, int32_t budget, int32_t& num_drafts) {
  const int32_t remaining = seq.num_uncomputed();
  int32_t chunk = std::min(remaining, remaining > 1 ? PrefillCap(seq, budget) : budget);
  num_drafts = 0;
  if (remaining == 1 && !seq.drafts.empty()) {
    // Verify drafts in this step, but never past max_tokens or the context window.
    int32_t n = static_cast<int32_t>(seq.drafts.size());
    n = std::min(n, seq.req.max_tokens - seq.num_generated - 1);
    n = std::min(n, options_.max_model_len - static_cast<int32_t>(seq.tokens.size()));
    n = std::min(n, budget - 1);
    num_drafts = std::max(0, n);
    chunk = 1 + num_drafts;
  }
  while (!EnsureBlocks(blocks_, window_, seq, seq.num_computed + chunk)) {
    // Out of blocks: preempt the newest running sequence (never one already in the plan, which
    // holds only older ones).
    const bool self = running_.back().get() == &seq;
    PreemptNewest();
    if (self) return 0;
    if (num_drafts > 0) {
      // Under memory pressure, verify without drafts rather than preempt for them.
      num_drafts = 0;
      chunk = 1;
    }
  }
  return chunk;
}

void Scheduler::PreemptNewest() {
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  deferred_.erase(std::remove(deferred_.begin(), deferred_.end(), victim.get()), deferred_.end());
  FreeBlocks(blocks_, window_, *victim);
  victim->num_computed = 0;
  victim->drafts.clear();
  ++counters_.num_preemptions;
  // Only the front of the queue holds blocks while it waits (the prefix LookUpPrefix matched):
  // the one it displaces lets them go, to match them again when it is the front. Otherwise
  // every preemption could leave one more waiting holder, until the pool is full of blocks no
  // running sequence uses and FitWaiting fails a request that fits alone.
  if (!waiting_.empty()) {
    Sequence& front = *waiting_.front();
    FreeBlocks(blocks_, window_, front);
    front.num_computed = 0;
  }
  waiting_.push_front(std::move(victim));
}

void Scheduler::ScheduleWaiting(int32_t& budget, Clock::time_point now) {
  while (budget > 0 && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < options_.max_num_seqs) {
    Sequence& seq = *waiting_.front();
    if (seq.num_computed == 0 && seq.blocks.empty()) LookUpPrefix(seq);
    const int32_t threshold = options_.long_prefill_token_threshold;
    seq.long_prefill = threshold > 0 && seq.num_uncomputed() > threshold;
    int32_t chunk = std::min(seq.num_uncomputed(), PrefillCap(seq, budget));
    const Fit fit = FitWaiting(seq, chunk);
    if (fit == Fit::kWait) break;
    if (fit == Fit::kNever) {
      std::unique_ptr<Sequence> s = std::move(waiting_.front());
      waiting_.pop_front();
      Finish(*s, FinishReason::kError, &util::codes::kKvCacheExhausted);
      continue;
    }
    if (!seq.scheduled_once) {
      seq.scheduled_once = true;
      seq.first_scheduled = now;
      Event(seq, RequestEvent::kFirstScheduled, now);
      counters_.queue_time.Observe(Seconds(now - seq.arrival));
      counters_.prompt_tokens += seq.prompt_len;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    AddToPlan(seq, chunk, 0);
    budget -= chunk;
  }
}

void Scheduler::LookUpPrefix(Sequence& seq) {
  // Never reuse the block holding the last token: its logits must be computed.
  const int32_t bs = blocks_.block_size();
  // A prompt-logprobs request computes every position (none may come from the cache).
  const int32_t max_blocks =
      seq.req.prompt_logprobs >= 0 ? 0 : (static_cast<int32_t>(seq.tokens.size()) - 1) / bs;
  int32_t matched = blocks_.MatchPrefix(
      seq.tokens.data(), max_blocks,
      [&](int32_t b) { return BlockSalt(seq.req.cache_salt, seq.image_spans, b, bs); },
      seq.blocks, seq.block_hashes);
  if (window_.blocks != nullptr && matched > 0) {
    // Resuming at block k also needs the window blocks of positions k*B - window_tokens + 1 ..
    // k*B - 1: keep the longest match whose window is still cached.
    for (; matched > 0; --matched) {
      const int32_t first = std::max(0, matched * bs - window_.window_tokens + 1) / bs;
      seq.window_blocks.assign(first, -1);
      for (int32_t b = first; b < matched; ++b) {
        const int32_t w = window_.blocks->Find(seq.block_hashes[b], seq.tokens.data() + b * bs);
        if (w < 0) break;
        seq.window_blocks.push_back(w);
      }
      if (static_cast<int32_t>(seq.window_blocks.size()) < matched) continue;
      for (int32_t b = first; b < matched; ++b) window_.blocks->Acquire(seq.window_blocks[b]);
      break;
    }
    if (matched == 0) seq.window_blocks.clear();
    for (size_t b = seq.blocks.size(); b-- > static_cast<size_t>(matched);) {
      blocks_.FreeBlock(seq.blocks[b]);
    }
    seq.blocks.resize(matched);
    seq.block_hashes.resize(matched);
  }
  seq.num_computed = matched * bs;
  if (seq.cached_tokens < 0) {  // first admission only; a preempted sequence is not a query
    seq.cached_tokens = seq.num_computed;
    counters_.prefix_cache_queries += seq.prompt_len;
    counters_.prefix_cache_hits += seq.num_computed;
  }
}

Scheduler::Fit Scheduler::FitWaiting(Sequence& seq, int32_t& chunk) {
  if (EnsureBlocks(blocks_, window_, seq, seq.num_computed + chunk)) return Fit::kFits;
  if (!running_.empty() || !plan_.seqs.empty()) return Fit::kWait;  // they will free blocks
  // Nothing else holds blocks, so waiting cannot help; shrink the chunk to what fits.
  int32_t fit =
      (static_cast<int32_t>(seq.blocks.size()) + blocks_.num_available()) * blocks_.block_size() -
      seq.num_computed;
  if (window_.blocks != nullptr) {
    fit = std::min(fit, (static_cast<int32_t>(seq.window_blocks.size()) +
                         window_.blocks->num_available()) *
                                blocks_.block_size() -
                            seq.num_computed);
  }
  chunk = std::min(chunk, fit);
  if (chunk <= 0 || !EnsureBlocks(blocks_, window_, seq, seq.num_computed + chunk)) return Fit::kNever;
  return Fit::kFits;
}

void Scheduler::AddToPlan(Sequence& seq, int32_t num_tokens, int32_t num_drafts) {
  ScheduledSeq s;
  s.seq = &seq;
  s.token_offset = plan_.num_tokens;
  s.start_pos = seq.num_computed;
  s.num_tokens = num_tokens;
  s.num_drafts = num_drafts;
  const int32_t real = num_tokens - num_drafts;
  const bool reaches_end = seq.num_computed + real == static_cast<int32_t>(seq.tokens.size());
  s.samples = reaches_end;
  s.num_logits = reaches_end ? 1 + num_drafts : 0;
  if (seq.req.prompt_logprobs >= 0 && !seq.prompt_logprobs_sent) {
    // Rows at positions start .. prompt_len - 2 predict prompt tokens. The logit rows are the
    // slice's last ones, so a chunk that has any takes all of its rows.
    s.num_prompt_logits = std::clamp(seq.prompt_len - 1 - s.start_pos, 0, real);
    if (s.num_prompt_logits > 0) s.num_logits = real;
  }
  s.phase = real == 1 && reaches_end && seq.num_generated > 0 ? Phase::kDecode : Phase::kPrefill;
  plan_.seqs.push_back(s);
  plan_.num_tokens += num_tokens;
}

void Scheduler::Update(const StepPlan& plan, StepOutputs& outputs, Clock::time_point now) {
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    UpdateOne(plan.seqs[i], outputs.seqs[i], outputs.tokens.data(), now);
  }
  RetireFinished();
}

void Scheduler::UpdateOne(const ScheduledSeq& s, const SeqOutput& out, SampledToken* tokens,
                          Clock::time_point now) {
  Sequence& seq = *s.seq;
  if (s.phase == Phase::kPrefill) counters_.prefill_tokens += s.num_real_tokens();
  if (!s.samples) {
    seq.num_computed += s.num_tokens;
    CommitFullBlocks(seq);
    return;
  }
  if (seq.req.prompt_logprobs >= 0 && !seq.prompt_logprobs_sent) {
    // Before the first token, so that a client reads them first.
    seq.prompt_logprobs_sent = true;
    seq.stream->PushPromptLogprobs(std::move(seq.prompt_logprobs));
    seq.prompt_logprobs.clear();
  }
  if (seq.constraint_dead_end) {
    // The constraint allowed no token (or the sampler drew none it allowed): fail the request
    // rather than emit text outside it.
    seq.num_computed += s.num_real_tokens();
    CommitFullBlocks(seq);
    Finish(seq, FinishReason::kError, &util::codes::kConstraintDeadEnd);
    return;
  }
  if (seq.req.prefill_only || seq.req.max_tokens == 0) {
    // P/D prefill side, or prompt logprobs alone: the prompt's KV cache (and its logprobs) is
    // all it wants; the token sampled at its end is dropped unseen.
    seq.num_computed += s.num_real_tokens();
    CommitFullBlocks(seq);
    seq.prompt_reported = true;
    if (prompt_computed_) prompt_computed_(seq);
    Finish(seq, FinishReason::kLength);
    return;
  }
  FinishReason finish = FinishReason::kNone;
  int32_t emitted = 0;
  while (emitted < out.num_tokens && finish == FinishReason::kNone) {
    finish = Emit(seq, tokens[out.first + emitted], now);
    ++emitted;
  }
  // KV is valid for the slice's real tokens and the accepted drafts (a draft that equals the
  // finishing token counts). Commit full blocks before a finish releases them, so finished
  // sequences still feed the prefix cache.
  const int32_t accepted = std::min(emitted, out.num_accepted);
  seq.num_computed += s.num_real_tokens() + accepted;
  CommitFullBlocks(seq);
  if (!seq.prompt_reported && seq.num_computed >= seq.prompt_len) {
    seq.prompt_reported = true;
    if (prompt_computed_) prompt_computed_(seq);
  }
  if (s.num_drafts > 0) {
    seq.num_drafted += s.num_drafts;
    ++seq.num_draft_steps;
    seq.num_accepted += accepted;
    ++counters_.spec_num_drafts;
    counters_.spec_num_draft_tokens += s.num_drafts;
    counters_.spec_num_accepted_tokens += accepted;
    for (int32_t i = 0; i < std::min(accepted, kMaxSpeculativeTokens); ++i) {
      ++counters_.spec_accepted_per_pos[i];
    }
  }
  seq.drafts.clear();
  if (finish != FinishReason::kNone) Finish(seq, finish);
}

FinishReason Scheduler::Emit(Sequence& seq, SampledToken& tok, Clock::time_point now) {
  seq.tokens.push_back(tok.token);
  seq.num_generated++;
  counters_.generation_tokens++;
  if (seq.num_generated == 1) {
    seq.first_token = now;
    Event(seq, RequestEvent::kFirstToken, now);
    counters_.ttft.Observe(Seconds(now - seq.arrival));
  }
  seq.last_token = now;
  bool stop_token = !seq.req.ignore_eos && is_eog_[tok.token];
  for (int32_t s : seq.req.stop_token_ids) stop_token |= (s == tok.token);
  if (stop_token) return FinishReason::kStop;
  seq.stream->PushToken(TokenEvent{tok.token, tok.logprob, std::move(tok.top)});
  if (seq.num_generated >= seq.req.max_tokens ||
      static_cast<int32_t>(seq.tokens.size()) >= options_.max_model_len) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

void Scheduler::CommitFullBlocks(Sequence& seq) {
  const int32_t bs = blocks_.block_size();
  while (static_cast<int32_t>(seq.block_hashes.size()) < seq.num_computed / bs) {
    const size_t i = seq.block_hashes.size();
    const uint64_t parent = i == 0 ? 0 : seq.block_hashes[i - 1];
    const int32_t* tokens = seq.tokens.data() + i * bs;
    const uint64_t salt =
        BlockSalt(seq.req.cache_salt, seq.image_spans, static_cast<int32_t>(i), bs);
    seq.block_hashes.push_back(blocks_.Commit(seq.blocks[i], parent, tokens, salt));
    if (window_.blocks != nullptr && seq.window_blocks[i] >= 0) {
      window_.blocks->Commit(seq.window_blocks[i], parent, tokens, salt);
    }
  }
  ReleaseWindowBlocks(window_, seq);
}

void Scheduler::RetireFinished() {
  // Keeps admission order; the finished stay alive in retired_ until the next Schedule().
  size_t kept = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i]->finish != FinishReason::kNone) {
      retired_.push_back(std::move(running_[i]));
    } else {
      if (kept != i) running_[kept] = std::move(running_[i]);
      ++kept;
    }
  }
  running_.resize(kept);
}

void Scheduler::Finish(Sequence& seq, FinishReason reason, const util::ErrorCode* error) {
  FreeBlocks(blocks_, window_, seq);
  const Clock::time_point now = Clock::now();
  if (reason != FinishReason::kError) {
    counters_.e2e.Observe(Seconds(now - seq.arrival));
    if (seq.num_generated > 1) {
      counters_.tpot.Observe(Seconds(seq.last_token - seq.first_token) / (seq.num_generated - 1));
    }
  }
  counters_.num_finished[static_cast<int>(reason)]++;
  seq.finish = reason;
  Event(seq, RequestEvent::kFinished, now);
  RequestTimings t;
  t.queue_s = Seconds((seq.scheduled_once ? seq.first_scheduled : now) - seq.arrival);
  if (seq.num_generated > 0) {
    t.prefill_s = Seconds(seq.first_token - seq.first_scheduled);
    t.decode_s = Seconds(seq.last_token - seq.first_token);
  } else if (seq.scheduled_once) {
    t.prefill_s = Seconds(now - seq.first_scheduled);
  }
  seq.stream->SetTimings(t);
  if (seq.num_drafted > 0) {
    seq.stream->SetSpeculativeCounts(seq.num_drafted, seq.num_accepted, seq.num_draft_steps);
  }
  if (finishing_) finishing_();
  seq.stream->Finish(reason, seq.prompt_len, std::max(0, seq.cached_tokens), seq.num_generated,
                     error ? std::string("request failed in the engine") : std::string(),
                     error ? std::string(error->name) : std::string());
}

void Scheduler::FinishAll(FinishReason reason) {
  for (auto& s : running_) Finish(*s, reason);
  for (auto& s : waiting_) Finish(*s, reason);
  running_.clear();
  waiting_.clear();
}

}  // namespace deepinfer::engine
