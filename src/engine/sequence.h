#pragma once

// The data the engine's three parts hand each other every step: the Scheduler's sequences and
// StepPlan, and the Executor's StepOutputs. Internal to engine/ (the API sees only engine.h).

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "constraint/grammar.h"
#include "engine/block_manager.h"
#include "engine/image_spans.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace deepinfer::engine {

using Clock = std::chrono::steady_clock;

struct PrefixCheckpoint;  // engine/prefix_checkpoint.h

// One request inside the engine: its tokens, KV blocks, timings and speculative drafts.
//
// Units: positions and counts in tokens; times from Clock.
// Threads: engine thread only (after Submit hands it over).
struct Sequence {
  uint64_t id = 0;
  GenerateRequest req;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<Sampler> sampler;  // null in tests that never sample
  // Structured output: the constraint's state over the tokens generated so far (null: free),
  // and whether it left no token to sample (the request then fails).
  std::unique_ptr<constraint::ConstraintMatcher> matcher;
  bool constraint_dead_end = false;
  // Thinking budget (GenerateRequest::reasoning_budget): the reasoning block was closed.
  bool reasoning_closed = false;
  // GenerateRequest::prompt_logprobs: entries computed so far (entry i: prompt token i + 1),
  // and whether they went to the stream.
  std::vector<TokenEvent> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  std::vector<int32_t> tokens;       // prompt followed by generated tokens
  int32_t prompt_len = 0;
  int32_t num_computed = 0;          // tokens whose KV is in the cache
  int32_t num_generated = 0;         // counts a final stop token too
  int32_t cached_tokens = -1;        // prefix-cache hit at first admission; -1 until admitted
  std::vector<int32_t> blocks;
  std::vector<uint64_t> block_hashes;  // one per committed full block, in order
  // Window-cache blocks, indexed as `blocks`; -1 once released behind the window (WindowPool).
  std::vector<int32_t> window_blocks;
  Clock::time_point arrival, first_scheduled, first_token, last_token;
  bool scheduled_once = false;
  bool long_prefill = false;   // admitted with more to prefill than the threshold (Scheduler)
  bool stepped_aside = false;  // a long prefill that yielded the last step
  FinishReason finish = FinishReason::kNone;  // set once, when the stream is finished
  // Speculative decoding: drafts for the next step, and this request's totals.
  std::vector<int32_t> drafts;
  int32_t num_drafted = 0, num_accepted = 0, num_draft_steps = 0;
  // A verified prefix checkpoint for this prompt, installed into the caches by the engine thread
  // before the first prefix-cache lookup (then released); null: none.
  std::shared_ptr<const PrefixCheckpoint> restore;
  // The prompt's image spans (PlanImageSpans at Submit), and each one's encoded span rows while
  // its prefill needs them (SpanRowsBuilder; null before and after).
  std::vector<ImageSpan> image_spans;
  std::vector<std::shared_ptr<const std::vector<float>>> image_rows;
  bool prompt_reported = false;  // the prompt-computed hook ran (Scheduler)

  // A sequence for `request` (moved in) with a fresh stream; no sampler. The token vector is
  // reserved for prompt + max_tokens, so generating never reallocates it.
  static std::unique_ptr<Sequence> Create(uint64_t id, GenerateRequest request,
                                          Clock::time_point arrival);

  // Tokens known but not yet in the KV cache (1 for a sequence ready to decode).
  int32_t num_uncomputed() const {
    return static_cast<int32_t>(tokens.size()) - num_computed;
  }
};

// The window cache's blocks, for architectures whose KvLayout has one: a second pool, addressed
// by Sequence::window_blocks, from which a sequence holds only the blocks its window still reads.
// Full blocks are committed to its prefix cache under the same hashes as the main pool's, so a
// prefix hit can also restore the window in front of it.
struct WindowPool {
  BlockManager* blocks = nullptr;  // null: no window cache
  int32_t window_tokens = 0;       // KvLayout::window_tokens
};

// Grows `seq.blocks` (and `seq.window_blocks` when `window` has a pool) so that its first
// `num_tokens` positions have KV slots; all or nothing. Returns false (nothing allocated) when a
// block manager has too few free blocks.
bool EnsureBlocks(BlockManager& blocks, const WindowPool& window, Sequence& seq,
                  int32_t num_tokens);

// Releases the window blocks that no step of `seq` reads again: those wholly below
// seq.num_computed - window_tokens + 1. Call after committing them.
void ReleaseWindowBlocks(const WindowPool& window, Sequence& seq);

// Frees every block `seq` holds in both pools and forgets its tables and hashes.
void FreeBlocks(BlockManager& blocks, const WindowPool& window, Sequence& seq);

// One sequence's share of a step.
enum class Phase {
  kPrefill,  // a chunk of tokens not yet in the cache (prompt, or recompute after preemption)
  kDecode,   // the one newest token (plus drafts to verify)
};

// Shapes: the slice covers positions [start_pos, start_pos + num_tokens) of seq->tokens, except
//   that its last num_drafts tokens are seq->drafts[0, num_drafts) instead.
struct ScheduledSeq {
  Sequence* seq = nullptr;
  Phase phase = Phase::kPrefill;
  int32_t token_offset = 0;  // first row of this slice in the step's token batch
  int32_t start_pos = 0;     // seq->num_computed when scheduled
  int32_t num_tokens = 0;    // real tokens + drafts
  int32_t num_drafts = 0;
  // Logit rows: the last num_logits tokens of the slice. 1 + num_drafts for a slice that reaches
  // the end of the sequence (it samples), 0 for a prefill chunk short of it; a prompt-logprobs
  // prefill takes every real token's row, the first num_prompt_logits of which give prompt
  // logprobs.
  int32_t num_logits = 0;
  int32_t num_prompt_logits = 0;
  bool samples = false;  // the slice reaches the end of the sequence: its last rows sample

  int32_t num_real_tokens() const { return num_tokens - num_drafts; }
};

// What the Scheduler decided for one step: the sequences to run, in batch order.
//
// Lifetime: the Sequence pointers stay valid until the next Scheduler::Schedule call.
struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  int32_t num_tokens = 0;  // sum of seqs[i].num_tokens; at most the prefill budget
  bool empty() const { return seqs.empty(); }
};

// One sequence's results: the tokens sampled from its logit rows. Row r is the distribution
// after slice position num_real_tokens() - 1 + r; sampling stops at the first draft the model
// rejects, so num_tokens = num_accepted + 1 (0 for a slice without logits).
struct SeqOutput {
  int32_t first = 0;  // index of its first token in StepOutputs::tokens
  int32_t num_tokens = 0;
  int32_t num_accepted = 0;  // leading drafts that equal the sampled tokens
};

// The Executor's results for one StepPlan.
//
// Shapes: seqs parallels StepPlan::seqs.
struct StepOutputs {
  std::vector<SeqOutput> seqs;
  std::vector<SampledToken> tokens;
};

}  // namespace deepinfer::engine
