#pragma once

#include <cstdint>
#include <vector>

#include "arch/causal_lm.h"
#include "engine/image_spans.h"
#include "engine/sequence.h"
#include "util/thread_pool.h"

namespace deepinfer::engine {

// Runs StepPlans on a CausalLm: builds the token batch and slice table, calls Forward once, and
// samples every slice that produced logits (verifying its drafts, see speculative.h).
//
// Shapes: logits scratch [rows, vocab] f32; hidden() [plan.num_tokens, lm.draft_heads()->mtp_hidden_size()] f32.
// Threads: engine thread only (it drives the model and the pool).
// Lifetime: borrows the model, KV cache and pool. Reuses its buffers: no allocation per step
//   once they have grown to the largest step.
class Executor {
 public:
  // `keep_hidden`: also fetch the final hidden states after each Forward (for MTP drafts;
  // REQUIRES then lm.draft_heads() non-null).
  // `encoder_cache_bytes`: the span rows of images kept for reuse (engine/image_spans.h).
  // `eog_ids`: the model's end-of-generation tokens, which a request's min_tokens holds back.
  Executor(arch::CausalLm& lm, arch::KvCache& kv, util::ThreadPool& pool, bool keep_hidden,
           std::vector<int32_t> eog_ids, int64_t encoder_cache_bytes = int64_t{1} << 30);

  // Runs `plan` and returns one SeqOutput per planned sequence (valid until the next Run).
  // Each slice's sequence must have a sampler and KV blocks covering the slice.
  StepOutputs& Run(const StepPlan& plan);

  // One forward pass of `token` at position 0 in `block` (and `window_block` of the window
  // cache, -1 without one): touches every weight page and sizes the scratch buffers before the
  // first request.
  void Warmup(int32_t token, int32_t block, int32_t window_block);

  // Final hidden states of the last Run (only with keep_hidden).
  const float* hidden() const { return hidden_.data(); }

  // Token masks applied so far (one per token sampled under a constraint) and the seconds they
  // took, for EngineStats.
  int64_t constraint_masks() const { return constraint_masks_; }
  const EncoderCache& encoder_cache() const { return spans_.cache(); }
  double constraint_mask_seconds() const { return constraint_mask_seconds_; }

 private:
  void BuildBatch(const StepPlan& plan);
  void Sample(const StepPlan& plan);
  // Sets the logits of the tokens `seq`'s constraint does not allow next to -inf (or marks the
  // sequence a dead end when it allows none). Cost: the mask (xgrammar) plus one pass over the
  // banned words of the vocabulary.
  void ApplyConstraint(Sequence& seq, float* logits);
  // ApplyConstraint on a constrained slice's sampling rows: row 0 (`logits`) from the matcher's
  // state, row r <= num_drafts from its state after drafts [0, r). Leaves the matcher as it
  // was. Shapes: logits [num_drafts + 1, vocab].
  void ConstrainDraftRows(Sequence& seq, float* logits, int32_t num_drafts);
  // Sets the logits of the end-of-generation tokens and `seq`'s stop_token_ids to -inf in each
  // of the `rows` verification rows (row r samples generated token num_generated + r) that
  // comes before min_tokens, unless its grammar, if any, is complete.
  // Shapes: logits [rows, vocab].
  void HoldBackEnd(const Sequence& seq, float* logits, int32_t rows) const;
  // Leaves `token` the only one that can be drawn from `logits` (a thinking budget's end).
  void ForceToken(int32_t token, float* logits) const;
  // Appends the prompt logprobs of slice `p`'s first num_prompt_logits rows (`rows`, [rows,
  // vocab]) to its sequence.
  void PromptLogprobs(const ScheduledSeq& p, const float* rows);

  arch::CausalLm& lm_;
  arch::KvCache& kv_;
  util::ThreadPool& pool_;
  const bool keep_hidden_;
  const int32_t vocab_;
  const std::vector<int32_t> eog_ids_;
  arch::ForwardBatch batch_;
  std::vector<int32_t> batch_tokens_;
  std::vector<float> logits_;
  std::vector<float> logprob_scratch_;  // PromptLogprobs: one row's log-softmax
  std::vector<int32_t> top_scratch_;
  std::vector<uint32_t> mask_;  // a constrained sequence's allowed tokens (bitmask)
  std::vector<float> hidden_;
  StepOutputs outputs_;
  SpanRowsBuilder spans_;  // image spans of the step (no-op without a vision tower)
  int64_t constraint_masks_ = 0;
  double constraint_mask_seconds_ = 0;
};

}  // namespace deepinfer::engine
