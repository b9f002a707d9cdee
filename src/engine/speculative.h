#pragma once

#include <cstdint>
#include <vector>

#include "arch/causal_lm.h"
#include "engine/block_manager.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "util/thread_pool.h"

namespace deepinfer::engine {

// Samples one slice's logit rows against its drafts and appends the tokens to `out`: row r is
// the target model's distribution after draft r - 1 (row 0: after the slice's last real
// token); row r < num_drafts is sampled with draft r to verify (Sampler::Sample: a greedy
// request accepts it when it is the argmax, a sampled one with probability p(draft), else
// draws from p without it), and sampling stops at the first rejection. Greedy output is
// therefore the output without drafts, token for token, and sampled output has the model's
// distribution (not the same draws: a seeded request's tokens depend on its drafts). With no
// drafts this is one Sample(). Returns the number of accepted drafts (tokens appended - 1).
//
// Shapes: logits [num_drafts + 1, vocab] f32, modified in place (penalties); drafts
//   [num_drafts].
// Source: Leviathan et al. 2023, Chen et al. 2023 (speculative sampling; drafts as point
//   masses).
int32_t VerifyDrafts(Sampler& sampler, float* logits, int32_t vocab, const int32_t* drafts,
                     int32_t num_drafts, std::vector<SampledToken>& out);

// Whether `seq` gets drafts for its next step, from either drafter: ready to decode (one
// uncomputed token), not opted out ("speculative": false), past min_tokens (the end tokens are
// held back on the first sampling row only), without a thinking budget (its end token is forced
// on the first row only, Executor::Sample) or prompt logprobs (docs/api.md), and with room for
// one more token than the one it samples anyway.
bool WantsDrafts(const Sequence& seq);

// Cuts a constrained sequence's drafts before the first one its grammar does not allow after
// the drafts before it (and after one that ends the grammar): such a draft would be rejected
// anyway, and the tokens after it wasted. The drafters draft without the grammar, as the
// sequence's model would write without its mask. Leaves the matcher as it was; unconstrained
// sequences are unchanged. Cost: one xgrammar Accept per draft and one Rollback.
// Threads: engine thread only.
void TrimDraftsToConstraint(Sequence& seq);

// Makes the next step's drafts after each step.
//
// Threads: engine thread only.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Fills seq->drafts for the unfinished sequences of `plan`, which has just been executed and
  // applied (Scheduler::Update).
  // Shapes: hidden: Executor::hidden(), [plan.num_tokens, lm.draft_heads()->mtp_hidden_size()] f32 (the main
  //   model's final hidden states; the residual streams for DeepSeek-V4), for MtpDrafter only.
  virtual void Draft(const StepPlan& plan, const float* hidden) = 0;
};

// Drafts tokens for the next step with the model's MTP module 0.
//
// After each step, the module sees every position the step verified (so its own KV cache stays
// complete, prefix-cache hits included) with the main model's final hidden state there, and a
// sequence that WantsDrafts gets its first draft for the position after its last
// token; further drafts chain the module on its own hidden state, one position at a time, up to
// num_spec_tokens. Drafts stop short of max_tokens and the context window, and a chained draft
// that needs a KV block when none is free is not made.
//
// Threads: engine thread only.
// Lifetime: borrows everything it is given. Reuses its buffers across steps.
// Source: DeepSeek-V3 technical report (multi-token prediction modules, used here as the draft
//   model).
class MtpDrafter final : public Drafter {
 public:
  // REQUIRES: lm.draft_heads() is non-null, of kind kMtp.
  MtpDrafter(arch::CausalLm& lm, arch::KvCache& mtp_kv, util::ThreadPool& pool,
             BlockManager& blocks, int32_t num_spec_tokens, int32_t max_model_len);

  void Draft(const StepPlan& plan, const float* hidden) override;

 private:
  // Module 0 over each slice's newly verified positions; first drafts. Returns false when no
  // sequence drafts.
  bool DraftFirst(const StepPlan& plan, const float* hidden);
  // Draft k (k >= 1) for the sequences that drafted k - 1 tokens so far.
  bool DraftNext(int32_t k);
  void RunModule(const float* prev_hidden, size_t num_logits);

  arch::DraftHeads& heads_;  // lm.draft_heads()
  arch::KvCache& mtp_kv_;
  util::ThreadPool& pool_;
  BlockManager& blocks_;
  const int32_t num_spec_tokens_;
  const int32_t max_model_len_;
  const int32_t vocab_;
  const int64_t hidden_size_;
  arch::ForwardBatch batch_;
  std::vector<int32_t> tokens_;
  std::vector<float> prev_hidden_;  // module input [tokens, hidden]
  std::vector<float> logits_;       // [drafting, vocab]
  std::vector<float> hidden_out_;   // module output [tokens, hidden]
  std::vector<float> last_;         // per drafting sequence, its last module hidden state
  std::vector<Sequence*> drafting_, next_;
};

// Drafts with DeepSeek-V4.1's DSpark stages (arch::DraftHeads::DsparkPropose): one block per
// sequence that WantsDrafts and was in the step; its first num_spec_tokens guesses become the
// drafts, cut before the first whose confidence is below confidence_threshold (0: never). The
// stages' windows are written by the main forward pass itself (EnableDspark), so rejected drafts
// leave nothing to undo here.
//
// Threads: engine thread only.
// Lifetime: borrows everything it is given. Reuses its buffers across steps.
// Source: research notes 5.5 (DSpark propose / absorb).
class DsparkDrafter final : public Drafter {
 public:
  // REQUIRES: lm.draft_heads() is non-null, of kind kDspark, and enabled (EnableDspark).
  DsparkDrafter(arch::CausalLm& lm, arch::KvCache& kv, util::ThreadPool& pool,
                int32_t num_spec_tokens, float confidence_threshold);

  void Draft(const StepPlan& plan, const float* hidden) override;

 private:
  arch::DraftHeads& heads_;  // lm.draft_heads()
  arch::KvCache& kv_;
  util::ThreadPool& pool_;
  const int32_t num_spec_tokens_;
  const int32_t block_;
  const float confidence_threshold_;
  arch::ForwardBatch batch_;
  std::vector<int32_t> tokens_, drafts_;
  std::vector<float> confidence_;
  std::vector<Sequence*> drafting_;
};

}  // namespace deepinfer::engine
