// The scheduler on its own: no model, no forward pass. Each "step" is Schedule() followed by an
// Update() with tokens the test chooses.

#include "engine/scheduler.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

constexpr int32_t kVocab = 100;
constexpr int32_t kEog = 99;
constexpr int32_t kBlockSize = 4;

class SchedulerTest : public ::testing::Test {
 protected:
  void Make(int32_t num_blocks, SchedulerOptions options = {}) {
    blocks_ = std::make_unique<BlockManager>(num_blocks, kBlockSize, true);
    std::vector<bool> is_eog(kVocab, false);
    is_eog[kEog] = true;
    scheduler_ = std::make_unique<Scheduler>(options, *blocks_, is_eog);
  }

  // Queues a request for a prompt of `prompt_len` tokens, which differs from other requests'
  // unless `seed` is given (equal seeds, equal prompts); returns its stream.
  std::shared_ptr<RequestStream> Add(int32_t prompt_len, int32_t max_tokens, int32_t seed = -1) {
    GenerateRequest r;
    if (seed < 0) seed = static_cast<int32_t>(next_id_) * 13;
    for (int32_t i = 0; i < prompt_len; ++i) r.prompt.push_back(1 + (seed + i) % 90);
    r.max_tokens = max_tokens;
    auto seq = Sequence::Create(next_id_++, std::move(r), Clock::now());
    auto stream = seq->stream;
    scheduler_->Add(std::move(seq));
    return stream;
  }

  // Applies `plan` as if the model had sampled `token` from every slice with logits, with
  // `num_accepted` drafts taken from the sequence's own drafts.
  void Apply(const StepPlan& plan, int32_t token = 7, int32_t num_accepted = 0) {
    StepOutputs out;
    for (const ScheduledSeq& s : plan.seqs) {
      SeqOutput o;
      o.first = static_cast<int32_t>(out.tokens.size());
      if (s.num_logits > 0) {
        o.num_accepted = std::min(num_accepted, s.num_drafts);
        for (int32_t r = 0; r < o.num_accepted; ++r) {
          out.tokens.push_back({s.seq->drafts[r], 0.0f, {}});
        }
        out.tokens.push_back({token, 0.0f, {}});
        o.num_tokens = o.num_accepted + 1;
      }
      out.seqs.push_back(o);
    }
    scheduler_->Update(plan, out, Clock::now());
  }

  const StepPlan& Schedule() { return scheduler_->Schedule(Clock::now()); }

  // A 64-token step budget; prompts over `threshold` tokens are long prefills of 8-token chunks.
  static SchedulerOptions LongPrefillOptions(int32_t threshold) {
    SchedulerOptions o;
    o.prefill_budget = 64;
    o.long_prefill_token_threshold = threshold;
    o.long_prefill_chunk = 8;
    return o;
  }

  static StreamUpdate Final(RequestStream& stream) {
    StreamUpdate u;
    EXPECT_TRUE(stream.finished());
    while (stream.Wait(u, std::chrono::milliseconds(0)) && u.finish == FinishReason::kNone) {
    }
    return u;
  }

  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  uint64_t next_id_ = 1;
};

TEST_F(SchedulerTest, ALongPrefillIsChunkedAndStepsAsideOnceForNewArrivals) {
  Make(64, LongPrefillOptions(8));
  auto long_stream = Add(40, 2);
  {
    const StepPlan& p = Schedule();
    ASSERT_EQ(p.seqs.size(), 1u);
    EXPECT_EQ(p.seqs[0].num_tokens, 8);  // capped although the budget is 64
    Apply(p);
  }
  EXPECT_EQ(scheduler_->counters().prefill_tokens, 8);  // counted as computed
  // A short request arrives: this step is its alone; the long prefill steps aside once.
  auto short_stream = Add(5, 2);
  {
    const StepPlan& p = Schedule();
    ASSERT_EQ(p.seqs.size(), 1u);
    EXPECT_EQ(p.seqs[0].num_tokens, 5);
    EXPECT_EQ(p.seqs[0].num_logits, 1);
    Apply(p);
  }
  // Another arrival the next step: the long prefill does not step aside twice in a row, and the
  // short one decodes beside both.
  Add(6, 2);
  {
    const StepPlan& p = Schedule();
    ASSERT_EQ(p.seqs.size(), 3u);
    EXPECT_EQ(p.seqs[0].num_tokens, 8);                // the long prefill's next chunk
    EXPECT_EQ(p.seqs[1].phase, Phase::kDecode);         // the short one's decode
    EXPECT_EQ(p.seqs[2].num_tokens, 6);                // the new arrival
    Apply(p);
  }
  EXPECT_EQ(scheduler_->counters().prefill_tokens, 8 + 5 + 8 + 6);
}

TEST_F(SchedulerTest, PromptsUpToTheThresholdPrefillAsTheBudgetAllows) {
  Make(64, LongPrefillOptions(24));
  Add(24, 2);
  Add(25, 2);
  const StepPlan& p = Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].num_tokens, 24);  // not long: whole
  EXPECT_EQ(p.seqs[1].num_tokens, 8);   // long: a chunk
}

TEST_F(SchedulerTest, ALongPrefillDoesNotStepAsideForRequestsWithoutASeat) {
  SchedulerOptions o = LongPrefillOptions(8);
  o.max_num_seqs = 1;
  Make(64, o);
  Add(40, 2);
  Apply(Schedule());
  Add(4, 2);  // waits for the seat whatever the long prefill does
  for (int32_t step = 1; step < 5; ++step) {
    const StepPlan& p = Schedule();
    ASSERT_EQ(p.seqs.size(), 1u);
    EXPECT_EQ(p.seqs[0].start_pos, 8 * step);
    EXPECT_EQ(p.seqs[0].num_tokens, 8);
    Apply(p);
  }
}

TEST_F(SchedulerTest, AnEmptySchedulerPlansNothing) {
  Make(8);
  EXPECT_TRUE(Schedule().empty());
  EXPECT_FALSE(scheduler_->has_work());
}

TEST_F(SchedulerTest, PrefillChunksStayWithinTheBudget) {
  SchedulerOptions o;
  o.prefill_budget = 8;
  Make(64, o);
  Add(20, 4);
  const int32_t want_start[] = {0, 8, 16};
  const int32_t want_len[] = {8, 8, 4};
  for (int step = 0; step < 3; ++step) {
    const StepPlan& plan = Schedule();
    ASSERT_EQ(plan.seqs.size(), 1u);
    const ScheduledSeq& s = plan.seqs[0];
    EXPECT_EQ(s.phase, Phase::kPrefill);
    EXPECT_EQ(s.start_pos, want_start[step]);
    EXPECT_EQ(s.num_tokens, want_len[step]);
    EXPECT_EQ(s.num_logits, step == 2 ? 1 : 0);  // only the last chunk is sampled
    EXPECT_LE(plan.num_tokens, o.prefill_budget);
    Apply(plan);
  }
  const StepPlan& plan = Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].phase, Phase::kDecode);
  EXPECT_EQ(plan.seqs[0].start_pos, 20);
  EXPECT_EQ(plan.seqs[0].num_tokens, 1);
}

TEST_F(SchedulerTest, DecodesGoFirstAndPrefillsTakeTheRestOfTheBudget) {
  SchedulerOptions o;
  o.prefill_budget = 8;
  Make(64, o);
  Add(3, 10);
  Apply(Schedule());  // its prefill; now it decodes
  Add(20, 10);
  const StepPlan& plan = Schedule();
  ASSERT_EQ(plan.seqs.size(), 2u);
  EXPECT_EQ(plan.seqs[0].phase, Phase::kDecode);
  EXPECT_EQ(plan.seqs[0].num_tokens, 1);
  EXPECT_EQ(plan.seqs[1].phase, Phase::kPrefill);
  EXPECT_EQ(plan.seqs[1].num_tokens, 7);
  EXPECT_EQ(plan.seqs[1].token_offset, 1);
  EXPECT_EQ(plan.num_tokens, 8);
}

TEST_F(SchedulerTest, WaitingSequencesAreAdmittedInArrivalOrder) {
  SchedulerOptions o;
  o.max_num_seqs = 2;
  Make(64, o);
  auto a = Add(5, 1);
  Add(6, 2);
  Add(7, 2);
  const StepPlan& first = Schedule();
  ASSERT_EQ(first.seqs.size(), 2u);  // max_num_seqs: the third waits
  EXPECT_EQ(first.seqs[0].seq->id, 1u);
  EXPECT_EQ(first.seqs[1].seq->id, 2u);
  EXPECT_EQ(scheduler_->num_waiting(), 1);
  Apply(first);  // the first finishes (max_tokens 1) and frees its slot
  EXPECT_EQ(Final(*a).finish, FinishReason::kLength);
  const StepPlan& second = Schedule();
  ASSERT_EQ(second.seqs.size(), 2u);
  EXPECT_EQ(second.seqs[0].seq->id, 2u);  // still running comes first
  EXPECT_EQ(second.seqs[1].seq->id, 3u);
  EXPECT_EQ(scheduler_->num_waiting(), 0);
}

TEST_F(SchedulerTest, PreemptsTheNewestSequenceWhenBlocksRunOut) {
  Make(4);  // 16 token slots
  auto a = Add(7, 10);
  auto b = Add(7, 10);
  Apply(Schedule());  // both prefill: 2 blocks each, 8 tokens each after sampling
  Apply(Schedule());  // both decode position 7, still inside their second block
  EXPECT_EQ(blocks_->num_available(), 0);
  const StepPlan& plan = Schedule();  // position 8 needs a third block: b makes room for a
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].seq->id, 1u);
  EXPECT_EQ(scheduler_->counters().num_preemptions, 1);
  EXPECT_EQ(scheduler_->num_waiting(), 1);
  EXPECT_FALSE(b->finished());
  Apply(plan, kEog);  // a finishes and frees its blocks
  EXPECT_EQ(Final(*a).finish, FinishReason::kStop);
  // b is recomputed from its 9 tokens, minus the block the prefix cache still holds.
  const StepPlan& again = Schedule();
  ASSERT_EQ(again.seqs.size(), 1u);
  EXPECT_EQ(again.seqs[0].seq->id, 2u);
  EXPECT_EQ(again.seqs[0].phase, Phase::kPrefill);
  EXPECT_EQ(again.seqs[0].start_pos, 4);
  EXPECT_EQ(again.seqs[0].num_tokens, 5);
  EXPECT_EQ(again.seqs[0].num_logits, 1);
}

// Preempted sequences go back to the front of the queue, where each looks up its prefix and
// holds the matched blocks while it waits. Only the front may hold them: with several waiting
// holders, the pool could fill with blocks no running sequence uses, and a request that fits
// alone failed with kv_cache_exhausted (found on V4.1: 64 chats in an 800-token cache).
TEST_F(SchedulerTest, ManyPreemptionsWithSharedPrefixesNeverStrandTheQueue) {
  Make(16);  // 64 token slots; each request needs up to 40
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 12; ++i) streams.push_back(Add(12, 28, /*seed=*/i % 3));
  for (int step = 0; step < 5000 && scheduler_->num_waiting() + scheduler_->num_running() > 0;
       ++step) {
    Apply(Schedule());
  }
  EXPECT_GT(scheduler_->counters().num_preemptions, 0);
  for (auto& s : streams) EXPECT_EQ(Final(*s).finish, FinishReason::kLength);
  EXPECT_EQ(blocks_->num_in_use(), 0);
}

TEST_F(SchedulerTest, PrefixCacheHitsReduceScheduledTokens) {
  Make(64);
  auto first = Add(10, 1, /*seed=*/0);
  Apply(Schedule());
  EXPECT_EQ(Final(*first).cached_tokens, 0);
  auto second = Add(10, 1, /*seed=*/0);
  const StepPlan& plan = Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_pos, 8);  // two full blocks found; the last token is recomputed
  EXPECT_EQ(plan.seqs[0].num_tokens, 2);
  Apply(plan);
  StreamUpdate fin = Final(*second);
  EXPECT_EQ(fin.cached_tokens, 8);
  EXPECT_EQ(fin.prompt_tokens, 10);
  EXPECT_EQ(scheduler_->counters().prefix_cache_queries, 20);
  EXPECT_EQ(scheduler_->counters().prefix_cache_hits, 8);
}

TEST_F(SchedulerTest, FinishingFreesBlocks) {
  Make(16);
  auto s = Add(9, 100);
  Apply(Schedule());
  EXPECT_EQ(blocks_->num_in_use(), 3);
  Apply(Schedule(), kEog);
  StreamUpdate fin = Final(*s);
  EXPECT_EQ(fin.finish, FinishReason::kStop);
  EXPECT_EQ(fin.completion_tokens, 2);  // the stop token counts, but is not streamed
  EXPECT_EQ(blocks_->num_in_use(), 0);
  EXPECT_FALSE(scheduler_->has_work());
  EXPECT_EQ(scheduler_->counters().num_finished[static_cast<int>(FinishReason::kStop)], 1);
}

TEST_F(SchedulerTest, StreamsTokensAndReportsTimings) {
  Make(16);
  auto s = Add(3, 3);
  for (int i = 0; i < 3; ++i) Apply(Schedule(), 10 + i);
  StreamUpdate u;
  ASSERT_TRUE(s->Wait(u, std::chrono::milliseconds(0)));
  ASSERT_EQ(u.tokens.size(), 3u);
  EXPECT_EQ(u.tokens[0].token, 10);
  EXPECT_EQ(u.tokens[2].token, 12);
  EXPECT_EQ(u.finish, FinishReason::kLength);
  EXPECT_GE(u.timings.prefill_s, 0.0);
  EXPECT_GE(u.timings.decode_s, 0.0);
  EXPECT_GE(u.timings.queue_s, 0.0);
}

TEST_F(SchedulerTest, CancelledSequencesAreDroppedBeforeScheduling) {
  Make(16);
  auto running = Add(4, 10);
  Apply(Schedule());
  auto waiting = Add(4, 10);
  running->Cancel();
  waiting->Cancel();
  EXPECT_TRUE(Schedule().empty());
  EXPECT_EQ(Final(*running).finish, FinishReason::kCancelled);
  EXPECT_EQ(Final(*waiting).finish, FinishReason::kCancelled);
  EXPECT_EQ(blocks_->num_in_use(), 0);
}

TEST_F(SchedulerTest, AClientThatDoesNotReadPausesItsSequence) {
  Make(256);
  auto s = Add(2, 1000);
  for (int steps = 0;; ++steps) {
    ASSERT_LT(steps, 1000);
    const StepPlan& plan = Schedule();
    if (plan.empty()) break;
    Apply(plan);
  }
  EXPECT_TRUE(s->Full());
  EXPECT_FALSE(s->finished());
  StreamUpdate u;
  s->Wait(u, std::chrono::milliseconds(0));  // the client catches up
  EXPECT_FALSE(Schedule().empty());
}

TEST_F(SchedulerTest, DraftsAreVerifiedButNeverPastMaxTokens) {
  Make(16);
  auto s = Add(3, 3);
  const StepPlan& prefill = Schedule();
  Sequence* seq = prefill.seqs[0].seq;
  Apply(prefill);
  seq->drafts = {5, 6, 7};
  const StepPlan& plan = Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].num_drafts, 1);  // one generated, one to sample: one draft fits
  EXPECT_EQ(plan.seqs[0].num_tokens, 2);
  EXPECT_EQ(plan.seqs[0].num_logits, 2);
  Apply(plan, 8, /*num_accepted=*/1);
  StreamUpdate fin = Final(*s);
  EXPECT_EQ(fin.finish, FinishReason::kLength);
  EXPECT_EQ(fin.completion_tokens, 3);
  EXPECT_EQ(fin.num_draft_tokens, 1);
  EXPECT_EQ(fin.num_accepted_tokens, 1);
  EXPECT_EQ(scheduler_->counters().spec_num_accepted_tokens, 1);
}

// The engine publishes its stats from the finish hook, so a client that wakes on the finish
// reads totals that count its request (DsparkEngineTest.AConfidenceThreshold... once read them
// a step stale): the hook must see the request counted and its stream still open.
TEST_F(SchedulerTest, TheFinishHookSeesTheRequestCountedBeforeItsStreamFinishes) {
  Make(16);
  auto s = Add(3, 3);
  int calls = 0;
  scheduler_->set_finish_hook([&] {
    ++calls;
    EXPECT_FALSE(s->finished());
    const SchedulerCounters& c = scheduler_->counters();
    EXPECT_EQ(c.num_finished[static_cast<int>(FinishReason::kLength)], 1);
    EXPECT_EQ(c.generation_tokens, 3);
    EXPECT_EQ(c.spec_num_draft_tokens, 1);
    EXPECT_EQ(c.spec_num_accepted_tokens, 1);
  });
  const StepPlan& prefill = Schedule();
  Sequence* seq = prefill.seqs[0].seq;
  Apply(prefill);
  seq->drafts = {5, 6, 7};
  Apply(Schedule(), 8, /*num_accepted=*/1);  // the draft and 8: max_tokens
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(Final(*s).finish, FinishReason::kLength);
}

TEST_F(SchedulerTest, RejectedDraftsLeaveOnlyVerifiedKv) {
  Make(16);
  Add(3, 20);
  const StepPlan& prefill = Schedule();
  Sequence* seq = prefill.seqs[0].seq;
  Apply(prefill);
  seq->drafts = {5, 6, 7};
  const StepPlan& plan = Schedule();
  ASSERT_EQ(plan.seqs[0].num_drafts, 3);
  Apply(plan, 9, /*num_accepted=*/1);  // draft 5 accepted, then 9 instead of 6
  EXPECT_EQ(seq->num_computed, 5);     // 3 prompt tokens, the first sample, draft 5
  EXPECT_EQ(seq->tokens.size(), 6u);   // ... plus the correction 9
  EXPECT_EQ(seq->tokens[4], 5);
  EXPECT_EQ(seq->tokens[5], 9);
  EXPECT_TRUE(seq->drafts.empty());
}

TEST_F(SchedulerTest, ARequestThatCanNeverFitFailsWithKvCacheExhausted) {
  Make(2);  // 8 token slots
  auto s = Add(12, 1);
  Apply(Schedule());  // the 8 tokens that fit
  EXPECT_TRUE(Schedule().empty());  // it must preempt itself for the rest...
  EXPECT_TRUE(Schedule().empty());  // ... and, alone, still cannot fit
  StreamUpdate fin = Final(*s);
  EXPECT_EQ(fin.finish, FinishReason::kError);
  EXPECT_EQ(fin.error_code, "kv_cache_exhausted");
  EXPECT_EQ(blocks_->num_in_use(), 0);
}

}  // namespace
}  // namespace deepinfer::engine
