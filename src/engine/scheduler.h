#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"
#include "engine/telemetry.h"
#include "util/histogram.h"
#include "util/error_codes.h"

namespace deepinfer::engine {

// Scheduler limits.
//
// Units: token counts in tokens.
struct SchedulerOptions {
  int32_t max_num_seqs = 64;      // running sequences at once
  int32_t prefill_budget = 2048;  // tokens per step: decodes, drafts and prefill chunks together
  int32_t max_model_len = 4096;   // a sequence finishes with kLength when it reaches this
  // Fairness under long prompts (0: off): a sequence admitted with more than this many tokens to
  // prefill is a long prefill: it computes at most long_prefill_chunk tokens per step and steps
  // aside for one step (never two in a row) while requests wait for a seat, so a short request
  // waits for at most one such chunk. Shorter prompts prefill as the budget allows.
  // Anchor: vLLM's long_prefill_token_threshold; Sarathi-Serve's bounded step time.
  int32_t long_prefill_token_threshold = 0;
  int32_t long_prefill_chunk = 32;
};

// vLLM's TTFT buckets (seconds, 1 ms to 640 s), used by every latency histogram of the engine.
std::vector<double> LatencyBounds();

// What the scheduler has counted since it was made; the engine copies it into EngineStats.
//
// Units: tokens; histograms in seconds.
struct SchedulerCounters {
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up at first admission
  int64_t prefix_cache_hits = 0;     // of which found in the cache
  int64_t prompt_tokens = 0;         // of sequences scheduled at least once
  int64_t prefill_tokens = 0;        // prompt (and recomputed) tokens computed, chunk by chunk
  int64_t generation_tokens = 0;
  int64_t num_finished[5] = {0, 0, 0, 0, 0};  // by FinishReason
  int64_t spec_num_drafts = 0;                // verification slices that carried drafts
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  // Accepted drafts by position in the draft block (vLLM's per-position acceptance): drafts are
  // accepted as a prefix, so position i counts the slices that accepted more than i drafts.
  int64_t spec_accepted_per_pos[kMaxSpeculativeTokens] = {};
  util::Histogram ttft{LatencyBounds()}, tpot{LatencyBounds()}, e2e{LatencyBounds()},
      queue_time{LatencyBounds()};
};

// Continuous batching over a paged KV cache, with no model in sight: decides what each step
// runs, and applies what it produced.
//
// Schedule(): drops cancelled sequences; gives every running sequence (in admission order) its
// next slice — one decode token plus the drafts it may verify, or a prefill chunk — then admits
// waiting sequences first come first served, each after a prefix-cache lookup, while the
// per-step token budget, max_num_seqs and free blocks allow. With a long-prefill threshold, a
// long prefill's chunks are capped and it steps aside one step while requests wait to be
// admitted: it runs after them only if none was admitted. A sequence whose stream is Full()
// is paused. When blocks run out, the newest running sequence not yet in the plan is preempted:
// its blocks are freed (full ones stay in the prefix cache) and it goes back to the front of the
// waiting queue, to be recomputed from its tokens. Update(): appends the sampled tokens,
// streams them, finishes sequences (end-of-generation or stop token, max_tokens, the context
// window), commits newly full blocks to the prefix cache and frees a finished sequence's blocks.
//
// Threads: engine thread only.
// Lifetime: borrows the BlockManager. Finished sequences stay alive until the next Schedule()
//   (so the drafter can skip them).
// Source: vLLM v1 Scheduler (schedule() / update_from_output()); Agrawal et al. 2024
//   (Sarathi-Serve, chunked prefill under a token budget).
class Scheduler {
 public:
  // `is_eog` [vocab]: the model's end-of-generation tokens.
  // `window`: the window cache's pool, for architectures that have one (sequence.h).
  Scheduler(const SchedulerOptions& options, BlockManager& blocks, std::vector<bool> is_eog,
            WindowPool window = {});

  // Queues a sequence behind those already waiting.
  void Add(std::unique_ptr<Sequence> seq);

  // Plans the next step at time `now`. An empty plan means nothing can run now (no work, or
  // every sequence is paused on its client).
  // Lifetime: the plan is valid until the next Schedule() call.
  const StepPlan& Schedule(Clock::time_point now);

  // Applies `outputs` (from running `plan`) at time `now`; moves the tokens' top-logprob lists
  // out of `outputs` into the streams.
  // REQUIRES: `plan` is the latest Schedule() result; outputs.seqs parallels plan.seqs.
  void Update(const StepPlan& plan, StepOutputs& outputs, Clock::time_point now);

  // Finishes every sequence it holds with `reason` (engine shutdown).
  void FinishAll(FinishReason reason);

  // Finishes `seq` with `reason`: frees its blocks, counts it, reports its usage, timings and
  // speculative counts, calls the finish hook and finishes its stream (with `error`'s code for
  // kError). The scheduler
  // calls it for the sequences it holds; the engine calls it for submissions it never handed
  // over (at shutdown).
  void Finish(Sequence& seq, FinishReason reason, const util::ErrorCode* error = nullptr);

  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  const SchedulerCounters& counters() const { return counters_; }
  // Request lifecycle events go here (engine/telemetry.h); null: none. Borrowed.
  void set_telemetry(Telemetry* telemetry) { telemetry_ = telemetry; }
  // Called on the engine thread once per sequence, in Update, when its whole prompt is in the
  // KV cache and its full blocks are committed (before a finish can free them). Prefix
  // checkpoints are taken here.
  void set_prompt_computed_hook(std::function<void(const Sequence&)> hook) {
    prompt_computed_ = std::move(hook);
  }
  // Called on the engine thread in Finish, once the sequence is counted in counters() and just
  // before its stream is finished: a client wakes on that finish and may read the engine's
  // stats at once, so the engine publishes them here, lest they lag behind what it has seen.
  void set_finish_hook(std::function<void()> hook) { finishing_ = std::move(hook); }

 private:
  // Records a lifecycle event of `seq` at `t` when telemetry is on.
  void Event(const Sequence& seq, RequestEvent event, Clock::time_point t) const;
  void DropCancelled();
  void ScheduleRunning(int32_t& budget);
  // The long prefills that stepped aside in ScheduleRunning, if nothing was admitted after them.
  void ScheduleDeferred(int32_t& budget, bool admitted);
  // The most prompt tokens `seq` may compute this step out of `budget`.
  int32_t PrefillCap(const Sequence& seq, int32_t budget) const;
  void ScheduleWaiting(int32_t& budget, Clock::time_point now);
  // The decode or prefill slice for a running sequence; 0 tokens when it was preempted itself.
  int32_t RunningSlice(Sequence& seq, int32_t budget, int32_t& num_drafts);
  enum class Fit { kFits, kWait, kNever };
  // Allocates blocks for a waiting sequence's chunk, shrinking it when nothing else holds
  // blocks. kWait: stop admitting this step; kNever: it cannot run even alone.
  Fit FitWaiting(Sequence& seq, int32_t& chunk);
  void LookUpPrefix(Sequence& seq);
  void PreemptNewest();
  void AddToPlan(Sequence& seq, int32_t num_tokens, int32_t num_drafts);
  // Appends one sampled token; returns why the sequence must finish (kNone to go on).
  FinishReason Emit(Sequence& seq, SampledToken& token, Clock::time_point now);
  void UpdateOne(const ScheduledSeq& s, const SeqOutput& out, SampledToken* tokens,
                 Clock::time_point now);
  void CommitFullBlocks(Sequence& seq);
  void RetireFinished();

  const SchedulerOptions options_;
  BlockManager& blocks_;
  const WindowPool window_;
  const std::vector<bool> is_eog_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::vector<std::unique_ptr<Sequence>> retired_;  // finished in the last Update()
  std::vector<Sequence*> deferred_;  // long prefills stepping aside this step
  StepPlan plan_;
  SchedulerCounters counters_;
  Telemetry* telemetry_ = nullptr;
  std::function<void(const Sequence&)> prompt_computed_;
  std::function<void()> finishing_;
};

}  // namespace deepinfer::engine
