// Speculative decoding: verification of drafts (greedy, or rejection sampling), and drafts from the MTP module or the
// DSpark stages.

#include "engine/speculative.h"

#include <algorithm>
#include <utility>

#include "kernels/cpu/ops.h"

namespace deepinfer::engine {

int32_t VerifyDrafts(Sampler& sampler, float* logits, int32_t vocab, const int32_t* drafts,
                     int32_t num_drafts, std::vector<SampledToken>& out) {
  // Sampling past a token that finishes the sequence is harmless: the scheduler stops at the
  // finish and the sampler's state is not used again.
  for (int32_t r = 0;; ++r) {
    out.push_back(sampler.Sample(logits + int64_t{r} * vocab, vocab,
                                 r < num_drafts ? drafts[r] : -1));
    if (r == num_drafts || out.back().token != drafts[r]) return r;
  }
}

bool WantsDrafts(const Sequence& seq) {
  // Before min_tokens the verification rows hold the stop tokens back row by row
  // (Executor::HoldBackEnd), so drafts are as good as after it; a constrained request waits, as
  // whether its grammar's end may stop it is known for the first row only.
  const bool held_back = seq.num_generated < seq.req.min_tokens;
  return seq.num_uncomputed() == 1 && seq.req.speculative &&
         (!held_back || seq.matcher == nullptr) && seq.req.reasoning_budget < 0 &&
         seq.req.prompt_logprobs < 0 && seq.num_generated + 1 < seq.req.max_tokens;
}

MtpDrafter::MtpDrafter(arch::CausalLm& lm, arch::KvCache& mtp_kv, util::ThreadPool& pool,
                       BlockManager& blocks, int32_t num_spec_tokens, int32_t max_model_len)
    : heads_(*lm.draft_heads()),
      mtp_kv_(mtp_kv),
      pool_(pool),
      blocks_(blocks),
      num_spec_tokens_(num_spec_tokens),
      max_model_len_(max_model_len),
      vocab_(lm.config().vocab),
      hidden_size_(heads_.mtp_hidden_size()) {}

void MtpDrafter::Draft(const StepPlan& plan, const float* hidden) {
  if (!DraftFirst(plan, hidden)) return;
  for (int32_t k = 1; k < num_spec_tokens_ && !drafting_.empty(); ++k) {
    if (!DraftNext(k)) break;
  }
}

bool MtpDrafter::DraftFirst(const StepPlan& plan, const float* hidden) {
  // Position p of the module takes x_{p+1} and the main model's hidden state at p.
  const int64_t H = hidden_size_;
  tokens_.clear();
  prev_hidden_.clear();
  batch_.seqs.clear();
  drafting_.clear();
  for (const ScheduledSeq& p : plan.seqs) {
    Sequence& seq = *p.seq;
    if (seq.finish != FinishReason::kNone) continue;
    const int32_t from = p.start_pos;
    const int32_t n = seq.num_computed - from;
    if (n <= 0) continue;
    const bool wants = WantsDrafts(seq);
    arch::SequenceSlice s;
    s.token_offset = static_cast<int32_t>(tokens_.size());
    s.num_tokens = n;
    s.start_pos = from;
    s.num_logits = wants ? 1 : 0;
    s.block_table = seq.blocks.data();
    s.num_blocks = static_cast<int32_t>(seq.blocks.size());
    batch_.seqs.push_back(s);
    tokens_.insert(tokens_.end(), seq.tokens.begin() + from + 1, seq.tokens.begin() + from + 1 + n);
    const float* h = hidden + int64_t{p.token_offset} * H;
    prev_hidden_.insert(prev_hidden_.end(), h, h + int64_t{n} * H);
    if (wants) drafting_.push_back(&seq);
  }
  if (batch_.seqs.empty()) return false;
  RunModule(prev_hidden_.data(), std::max<size_t>(1, drafting_.size()));
  // Keep the last hidden row of each drafting slice, for chaining.
  last_.resize(drafting_.size() * H);
  size_t d = 0;
  for (const arch::SequenceSlice& s : batch_.seqs) {
    if (s.num_logits == 0) continue;
    const float* src = hidden_out_.data() + int64_t{s.token_offset + s.num_tokens - 1} * H;
    std::copy(src, src + H, last_.begin() + d * H);
    drafting_[d]->drafts.push_back(kernels::ArgMax(logits_.data() + d * vocab_, vocab_));
    ++d;
  }
  return true;
}

bool MtpDrafter::DraftNext(int32_t k) {
  // The module continues from its own hidden state, one position further.
  const int64_t H = hidden_size_;
  tokens_.clear();
  prev_hidden_.clear();
  batch_.seqs.clear();
  next_.clear();
  for (size_t d = 0; d < drafting_.size(); ++d) {
    Sequence& seq = *drafting_[d];
    const int32_t pos = seq.num_computed + k;  // input x_{pos+1} is draft k
    if (static_cast<int32_t>(seq.drafts.size()) != k || pos + 1 >= max_model_len_ ||
        seq.num_generated + k + 1 >= seq.req.max_tokens || !EnsureBlocks(blocks_, WindowPool{}, seq, pos + 1)) {
      continue;
    }
    arch::SequenceSlice s;
    s.token_offset = static_cast<int32_t>(tokens_.size());
    s.num_tokens = 1;
    s.start_pos = pos;
    s.num_logits = 1;
    s.block_table = seq.blocks.data();
    s.num_blocks = static_cast<int32_t>(seq.blocks.size());
    batch_.seqs.push_back(s);
    tokens_.push_back(seq.drafts.back());
    prev_hidden_.insert(prev_hidden_.end(), last_.begin() + d * H, last_.begin() + (d + 1) * H);
    next_.push_back(&seq);
  }
  if (next_.empty()) return false;
  RunModule(prev_hidden_.data(), next_.size());
  last_.assign(hidden_out_.begin(), hidden_out_.begin() + next_.size() * H);
  for (size_t d = 0; d < next_.size(); ++d) {
    next_[d]->drafts.push_back(kernels::ArgMax(logits_.data() + d * vocab_, vocab_));
  }
  std::swap(drafting_, next_);
  return true;
}

void MtpDrafter::RunModule(const float* prev_hidden, size_t num_logits) {
  batch_.tokens = tokens_.data();
  batch_.num_tokens = static_cast<int32_t>(tokens_.size());
  logits_.resize(num_logits * vocab_);
  hidden_out_.resize(tokens_.size() * hidden_size_);
  heads_.ForwardMtp(0, batch_, prev_hidden, mtp_kv_, logits_.data(), hidden_out_.data(), pool_);
}

DsparkDrafter::DsparkDrafter(arch::CausalLm& lm, arch::KvCache& kv, util::ThreadPool& pool,
                             int32_t num_spec_tokens, float confidence_threshold)
    : heads_(*lm.draft_heads()),
      kv_(kv),
      pool_(pool),
      num_spec_tokens_(num_spec_tokens),
      block_(heads_.dspark_block_size()),
      confidence_threshold_(confidence_threshold) {}

void DsparkDrafter::Draft(const StepPlan& plan, const float* /*hidden*/) {
  tokens_.clear();
  batch_.seqs.clear();
  drafting_.clear();
  for (const ScheduledSeq& p : plan.seqs) {
    Sequence& seq = *p.seq;
    if (seq.finish != FinishReason::kNone || !WantsDrafts(seq)) continue;
    arch::SequenceSlice s;
    s.token_offset = static_cast<int32_t>(tokens_.size());
    s.num_tokens = 1;
    s.start_pos = seq.num_computed;
    s.block_table = seq.blocks.data();
    s.num_blocks = static_cast<int32_t>(seq.blocks.size());
    s.window_block_table = seq.window_blocks.data();
    batch_.seqs.push_back(s);
    tokens_.push_back(seq.tokens[seq.num_computed]);
    drafting_.push_back(&seq);
  }
  if (drafting_.empty()) return;
  batch_.tokens = tokens_.data();
  batch_.num_tokens = static_cast<int32_t>(tokens_.size());
  drafts_.resize(drafting_.size() * block_);
  confidence_.resize(drafting_.size() * block_);
  heads_.DsparkPropose(batch_, kv_, drafts_.data(), confidence_.data(), pool_);
  const int32_t n = std::min(num_spec_tokens_, block_);
  for (size_t d = 0; d < drafting_.size(); ++d) {
    for (int32_t r = 0; r < n; ++r) {
      if (confidence_[d * block_ + r] < confidence_threshold_) break;
      drafting_[d]->drafts.push_back(drafts_[d * block_ + r]);
    }
  }
}

void TrimDraftsToConstraint(Sequence& seq) {
  if (seq.matcher == nullptr || seq.drafts.empty()) return;
  int32_t allowed = 0;
  for (int32_t draft : seq.drafts) {
    // Nothing follows an end of generation; Accept refuses anything once terminated.
    if (!seq.matcher->Accept(draft)) break;
    ++allowed;
  }
  seq.matcher->Rollback(allowed);
  seq.drafts.resize(static_cast<size_t>(allowed));
}

}  // namespace deepinfer::engine
