// The executor: a StepPlan in, sampled tokens out. All model math of a step happens here (the
// drafter's MTP passes aside), so the scheduler stays testable without a model.

#include "engine/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "engine/speculative.h"

namespace deepinfer::engine {

Executor::Executor(arch::CausalLm& lm, arch::KvCache& kv, util::ThreadPool& pool,
                   bool keep_hidden, std::vector<int32_t> eog_ids,
                   int64_t encoder_cache_bytes)
    : lm_(lm),
      kv_(kv),
      pool_(pool),
      keep_hidden_(keep_hidden),
      vocab_(lm.config().vocab),
      eog_ids_(std::move(eog_ids)),
      spans_(lm.vision_tower(), encoder_cache_bytes) {}

void Executor::Warmup(int32_t token, int32_t block, int32_t window_block) {
  arch::ForwardBatch b;
  b.tokens = &token;
  b.num_tokens = 1;
  b.seqs.push_back({0, 1, 0, 1, &block, 1, window_block >= 0 ? &window_block : nullptr});
  logits_.resize(vocab_);
  lm_.Forward(b, kv_, logits_.data(), pool_);
}

StepOutputs& Executor::Run(const StepPlan& plan) {
  BuildBatch(plan);
  const int64_t rows = batch_.num_logit_rows();
  if (static_cast<int64_t>(logits_.size()) < rows * vocab_) logits_.resize(rows * vocab_);
  lm_.Forward(batch_, kv_, logits_.data(), pool_);
  if (keep_hidden_) {
    const arch::DraftHeads& heads = *lm_.draft_heads();
    hidden_.resize(static_cast<size_t>(batch_.num_tokens) * heads.mtp_hidden_size());
    heads.FinalHidden(hidden_.data());
  }
  Sample(plan);
  return outputs_;
}

void Executor::BuildBatch(const StepPlan& plan) {
  batch_tokens_.clear();
  batch_.seqs.clear();
  for (const ScheduledSeq& p : plan.seqs) {
    const Sequence& seq = *p.seq;
    arch::SequenceSlice s;
    s.token_offset = p.token_offset;
    s.num_tokens = p.num_tokens;
    s.start_pos = p.start_pos;
    s.num_logits = p.num_logits;
    s.block_table = seq.blocks.data();
    s.num_blocks = static_cast<int32_t>(seq.blocks.size());
    if (kv_.window != nullptr) s.window_block_table = seq.window_blocks.data();
    const auto first = seq.tokens.begin() + p.start_pos;
    batch_tokens_.insert(batch_tokens_.end(), first, first + p.num_real_tokens());
    batch_tokens_.insert(batch_tokens_.end(), seq.drafts.begin(),
                         seq.drafts.begin() + p.num_drafts);
    batch_.seqs.push_back(s);
  }
  batch_.tokens = batch_tokens_.data();
  batch_.num_tokens = static_cast<int32_t>(batch_tokens_.size());
  spans_.Build(plan, batch_, pool_);
}

void Executor::ApplyConstraint(Sequence& seq, float* logits) {
  const auto start = std::chrono::steady_clock::now();
  ++constraint_masks_;
  mask_.resize(static_cast<size_t>(seq.matcher->MaskWords()));
  if (seq.matcher->FillMask(mask_.data()) == 0) {
    seq.constraint_dead_end = true;
    return;
  }
  // -inf outside the mask: every sampling path (greedy, top-k/p, min-p) then skips them.
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  for (int32_t w = 0; w < static_cast<int32_t>(mask_.size()); ++w) {
    const uint32_t bits = mask_[static_cast<size_t>(w)];
    if (bits == ~0u) continue;
    const int32_t end = std::min(vocab_, (w + 1) * 32);
    for (int32_t t = w * 32; t < end; ++t) {
      if (((bits >> (t - w * 32)) & 1u) == 0) logits[t] = kBanned;
    }
  }
  constraint_mask_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Executor::ConstrainDraftRows(Sequence& seq, float* logits, int32_t num_drafts) {
  ApplyConstraint(seq, logits);
  // Row r is the distribution after draft r - 1: the matcher takes the drafts one by one to
  // mask the rows after them, then is rolled back to where it was (TrimDraftsToConstraint left
  // only drafts it accepts, none after an end of generation).
  int32_t advanced = 0;
  while (!seq.constraint_dead_end && advanced < num_drafts &&
         seq.matcher->Accept(seq.drafts[static_cast<size_t>(advanced)]) &&
         !seq.matcher->IsTerminated()) {
    ++advanced;
    ApplyConstraint(seq, logits + int64_t{advanced} * vocab_);
  }
  // An end-of-generation draft that was accepted above and ended the grammar is undone too;
  // the row after it stays unmasked (what is sampled there follows the end and is dropped).
  seq.matcher->Rollback(advanced + (seq.matcher->IsTerminated() ? 1 : 0));
}

void Executor::HoldBackEnd(const Sequence& seq, float* logits, int32_t rows) const {
  if (seq.req.ignore_eos) return;
  if (seq.matcher != nullptr && seq.matcher->IsCompleted()) return;  // the grammar's end
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  // Row r samples the generated token number num_generated + r.
  for (int32_t r = 0; r < rows && seq.num_generated + r < seq.req.min_tokens; ++r) {
    float* row = logits + int64_t{r} * vocab_;
    for (int32_t id : eog_ids_) {
      if (id >= 0 && id < vocab_) row[id] = kBanned;
    }
    for (int32_t id : seq.req.stop_token_ids) {
      if (id >= 0 && id < vocab_) row[id] = kBanned;
    }
  }
}

void Executor::ForceToken(int32_t token, float* logits) const {
  if (token < 0 || token >= vocab_) return;
  // -inf everywhere else: every sampling path then draws `token` (and reports its logprob as 0).
  const float kept = logits[token];
  std::fill(logits, logits + vocab_, -std::numeric_limits<float>::infinity());
  logits[token] = std::isfinite(kept) ? kept : 0.0f;
}

void Executor::PromptLogprobs(const ScheduledSeq& p, const float* rows) {
  Sequence& seq = *p.seq;
  const int32_t num_top = seq.req.prompt_logprobs;
  for (int32_t i = 0; i < p.num_prompt_logits; ++i) {
    // Row i is the distribution after position start_pos + i, over the prompt token after it.
    // A recomputed position (after preemption) already has its entry.
    const int32_t pos = p.start_pos + i;
    if (pos != static_cast<int32_t>(seq.prompt_logprobs.size())) continue;
    RawLogSoftmax(rows + static_cast<int64_t>(i) * vocab_, vocab_, &logprob_scratch_);
    TokenEvent e;
    e.token = seq.tokens[static_cast<size_t>(pos) + 1];
    e.logprob = logprob_scratch_[static_cast<size_t>(e.token)];
    TopLogprobs(logprob_scratch_, num_top, &top_scratch_, &e.top_logprobs);
    seq.prompt_logprobs.push_back(std::move(e));
  }
}

void Executor::Sample(const StepPlan& plan) {
  outputs_.seqs.resize(plan.seqs.size());
  outputs_.tokens.clear();
  int64_t row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& p = plan.seqs[i];
    SeqOutput& out = outputs_.seqs[i];
    out.first = static_cast<int32_t>(outputs_.tokens.size());
    out.num_tokens = 0;
    out.num_accepted = 0;
    if (p.num_prompt_logits > 0) PromptLogprobs(p, logits_.data() + row * vocab_);
    if (!p.samples) {
      row += p.num_logits;
      continue;
    }
    // The sampling rows are the slice's last 1 + num_drafts.
    float* logits = logits_.data() + (row + p.num_logits - 1 - p.num_drafts) * vocab_;
    constraint::ConstraintMatcher* matcher = p.seq->matcher.get();
    if (matcher != nullptr) ConstrainDraftRows(*p.seq, logits, p.num_drafts);
    HoldBackEnd(*p.seq, logits, 1 + p.num_drafts);
    const bool budgeted = p.seq->req.reasoning_budget >= 0 && !p.seq->reasoning_closed;
    if (budgeted && p.seq->num_generated >= p.seq->req.reasoning_budget) {
      ForceToken(p.seq->req.reasoning_end_token, logits);
    }
    out.num_accepted = VerifyDrafts(*p.seq->sampler, logits, vocab_, p.seq->drafts.data(),
                                    p.num_drafts, outputs_.tokens);
    out.num_tokens = out.num_accepted + 1;
    if (budgeted && outputs_.tokens.back().token == p.seq->req.reasoning_end_token) {
      p.seq->reasoning_closed = true;
    }
    // The matcher advances past the accepted drafts and the token sampled after them; tokens
    // after an end of generation are dropped by Scheduler::Update's stop check.
    for (int32_t t = out.first; matcher != nullptr && !p.seq->constraint_dead_end &&
                                !matcher->IsTerminated() && t < out.first + out.num_tokens;
         ++t) {
      if (!matcher->Accept(outputs_.tokens[static_cast<size_t>(t)].token)) {
        p.seq->constraint_dead_end = true;  // every allowed token had -inf logits: nothing left
      }
    }
    row += p.num_logits;
  }
}

}  // namespace deepinfer::engine
