// The engine thread: continuous batching over a paged KV cache.
//
// Each step: take new submissions, drop cancelled sequences, give every decoding sequence one
// token, then spend the rest of the per-step token budget on prefill chunks (running sequences
// first, then waiting ones in arrival order), run one forward pass over all of it, and sample.
// When blocks run out, the most recently admitted running sequence is preempted: its blocks are
// freed (full ones stay in the prefix cache) and it is recomputed later from its tokens.

#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

#include "arch/causal_lm.h"
#include "engine/block_manager.h"
#include "engine/metrics_histogram.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace deepinfer::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Sequence {
  uint64_t id = 0;
  GenerateRequest req;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int32_t prompt_len = 0;
  int32_t num_computed = 0;     // tokens whose KV is in the cache
  int32_t num_generated = 0;
  int32_t cached_tokens = -1;   // prefix-cache hit at first admission; -1 until admitted
  std::vector<int32_t> blocks;
  std::vector<uint64_t> block_hashes;  // one per committed full block, in order
  Clock::time_point arrival, first_scheduled, first_token, last_token;
  bool scheduled_once = false;
  // Speculative decoding: drafts for the next step, how many of them ride in the current step.
  std::vector<int32_t> drafts;
  int32_t num_step_drafts = 0;
  int32_t num_drafted = 0, num_accepted = 0;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(const model::Model& model, const EngineOptions& options)
      : model_(model), options_(options) {}

  ~EngineImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Init();
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(GenerateRequest request) override;
  EngineStats Stats() const override {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }
  int32_t max_model_len() const override { return max_model_len_; }
  int64_t kv_capacity_tokens() const override {
    return int64_t{kv_.num_blocks} * kv_.block_size;
  }
  bool ready() const override { return ready_.load(std::memory_order_acquire); }
  const model::Model& model() const override { return model_; }

 private:
  void Loop();
  void Warmup();
  bool Step();
  void Admit(std::deque<std::unique_ptr<Sequence>>& incoming);
  bool EnsureBlocks(Sequence& seq, int32_t num_tokens_after);
  void Preempt(Sequence& seq);
  void FinishSeq(Sequence& seq, FinishReason reason, const char* error_code = nullptr);
  void CommitFullBlocks(Sequence& seq);
  void PublishStats();
  // Runs the MTP module over the positions this step verified and drafts the next tokens.
  void Draft(const std::vector<int32_t>& verified_from);
  // Appends the sampled token to `seq`, streams it, and returns why the sequence must finish
  // (kNone to go on). The caller finishes it after committing its KV blocks.
  FinishReason Emit(Sequence& seq, SampledToken tok, Clock::time_point now);

  const model::Model& model_;
  EngineOptions options_;
  std::unique_ptr<arch::CausalLm> lm_;
  std::unique_ptr<util::ThreadPool> pool_;
  arch::KvCache kv_;
  arch::KvCache mtp_kv_;  // MTP modules' KV, same block geometry as kv_ (speculative only)
  int32_t spec_tokens_ = 0;
  std::unique_ptr<BlockManager> blocks_;
  int32_t max_model_len_ = 0;
  int32_t vocab_ = 0;
  std::vector<bool> is_eog_;

  // Submission queue, shared with client threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> submitted_;
  bool stop_ = false;
  uint64_t next_id_ = 1;

  // Engine-thread state.
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::vector<int32_t> batch_tokens_;
  std::vector<float> logits_;
  std::vector<Sequence*> batch_seqs_;
  std::vector<int32_t> chunk_sizes_;
  std::vector<Sequence*> done_;
  std::vector<int32_t> verified_from_;  // per batch slice: num_computed before the step
  std::vector<float> hidden_, mtp_hidden_, mtp_logits_, mtp_hidden_out_;
  std::vector<int32_t> mtp_tokens_;
  std::vector<Sequence*> drafting_;
  arch::ForwardBatch mtp_batch_;
  int64_t spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_ = 0;
  arch::ForwardBatch batch_;
  uint64_t seed_counter_ = 0;

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  HistogramAccumulator ttft_, tpot_, e2e_, queue_;
  int64_t preemptions_ = 0, prefix_queries_ = 0, prefix_hits_ = 0, prompt_tokens_ = 0,
          generation_tokens_ = 0;
  int64_t finished_[5] = {0, 0, 0, 0, 0};

  std::atomic<bool> ready_{false};
  std::thread thread_;
};

absl::Status EngineImpl::Init() {
  const auto& cfg = model_.config;
  if (options_.block_size < 1 || options_.block_size > 1024 || options_.prefill_budget < 1 ||
      options_.max_num_seqs < 1) {
    return InvalidArgumentError("bad_option",
                                "block size, prefill budget and max sequences must be positive");
  }
  DI_ASSIGN_OR_RETURN(lm_, arch::CreateCausalLm(model_));
  int threads = options_.num_threads > 0 ? options_.num_threads
                                         : static_cast<int>(std::thread::hardware_concurrency());
  pool_ = std::make_unique<util::ThreadPool>(std::max(1, threads));
  vocab_ = cfg.vocab;
  is_eog_.assign(vocab_, false);
  for (int32_t id : model_.tokenizer.eog_ids) {
    if (id >= 0 && id < vocab_) is_eog_[id] = true;
  }

  const int64_t per_token = lm_->kv_floats_per_token();
  const int64_t bytes_per_token = per_token * cfg.num_layers * int64_t{sizeof(float)};
  int64_t capacity = options_.kv_cache_tokens > 0
                         ? options_.kv_cache_tokens
                         : options_.kv_cache_memory_bytes / std::max<int64_t>(1, bytes_per_token);
  int64_t num_blocks = capacity / options_.block_size;
  if (num_blocks < 2) {
    return InvalidArgumentError("bad_option", "the KV cache must hold at least two blocks");
  }
  num_blocks = std::min<int64_t>(num_blocks, int64_t{1} << 30);
  DI_RETURN_IF_ERROR(kv_.Allocate(cfg.num_layers, options_.block_size,
                                  static_cast<int>(num_blocks), per_token));
  if (options_.speculative_tokens > 0) {
    if (lm_->num_mtp_layers() == 0) {
      return InvalidArgumentError("speculative_unsupported",
                                  "--speculative-tokens needs a model with MTP (NextN) layers");
    }
    spec_tokens_ = std::min(options_.speculative_tokens, 8);
    DI_RETURN_IF_ERROR(mtp_kv_.Allocate(lm_->num_mtp_layers(), options_.block_size,
                                        static_cast<int>(num_blocks), per_token));
  }
  blocks_ = std::make_unique<BlockManager>(static_cast<int32_t>(num_blocks), options_.block_size,
                                           options_.enable_prefix_caching);
  max_model_len_ = options_.max_model_len > 0 ? options_.max_model_len : cfg.max_context;
  if (max_model_len_ <= 0) max_model_len_ = 4096;
  stats_.num_blocks_total = num_blocks;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RequestStream>> EngineImpl::Submit(GenerateRequest request) {
  if (request.prompt.empty()) return InvalidArgumentError("empty_prompt", "the prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= vocab_) {
      return InvalidArgumentError("invalid_token", "prompt token id out of the vocabulary");
    }
  }
  if (request.max_tokens < 1) {
    return InvalidArgumentError("invalid_max_tokens", "max_tokens must be at least 1");
  }
  int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (total > max_model_len_) {
    return InvalidArgumentError(
        "context_length_exceeded",
        "prompt (" + std::to_string(request.prompt.size()) + " tokens) plus max_tokens (" +
            std::to_string(request.max_tokens) + ") exceeds the context window of " +
            std::to_string(max_model_len_) + " tokens");
  }
  if (total > kv_capacity_tokens()) {
    return ResourceExhaustedError("kv_cache_too_small",
                                  "the request can never fit in the KV cache of " +
                                      std::to_string(kv_capacity_tokens()) + " tokens");
  }
  auto seq = std::make_unique<Sequence>();
  seq->stream = std::make_shared<RequestStream>();
  seq->arrival = Clock::now();
  seq->prompt_len = static_cast<int32_t>(request.prompt.size());
  seq->tokens = request.prompt;
  seq->tokens.reserve(total);
  seq->req = std::move(request);
  auto stream = seq->stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return UnavailableError("shutting_down", "the engine is shutting down");
    seq->id = next_id_++;
    seq->sampler = std::make_unique<Sampler>(seq->req.sampling, seq->req.prompt,
                                             options_.seed + seq->id * 0x9E3779B97F4A7C15ull);
    submitted_.push_back(std::move(seq));
  }
  cv_.notify_one();
  return stream;
}

void EngineImpl::Warmup() {
  // One short forward pass touches every weight page and sizes the scratch buffers, so the
  // first real request does not pay for it.
  std::vector<int32_t> blocks;
  if (blocks_->Allocate(1, blocks)) {
    int32_t token = model_.tokenizer.bos_id >= 0 && model_.tokenizer.bos_id < vocab_
                        ? model_.tokenizer.bos_id : 0;
    arch::ForwardBatch b;
    b.tokens = &token;
    b.num_tokens = 1;
    b.seqs.push_back({0, 1, 0, 1, blocks.data(), 1});
    logits_.resize(vocab_);
    lm_->Forward(b, kv_, logits_.data(), *pool_);
    blocks_->Free(blocks);
  }
  ready_.store(true, std::memory_order_release);
}

void EngineImpl::Loop() {
  Warmup();
  std::deque<std::unique_ptr<Sequence>> incoming;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (running_.empty() && waiting_.empty()) {
        cv_.wait(lock, [&] { return stop_ || !submitted_.empty(); });
      }
      if (stop_) break;
      incoming.swap(submitted_);
    }
    Admit(incoming);
    if (!Step()) {
      // Nothing could run (all paused on slow clients): yield briefly instead of spinning.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(2));
    }
    PublishStats();
  }
  for (auto& s : running_) FinishSeq(*s, FinishReason::kCancelled);
  for (auto& s : waiting_) FinishSeq(*s, FinishReason::kCancelled);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : submitted_) FinishSeq(*s, FinishReason::kCancelled);
}

void EngineImpl::Admit(std::deque<std::unique_ptr<Sequence>>& incoming) {
  while (!incoming.empty()) {
    waiting_.push_back(std::move(incoming.front()));
    incoming.pop_front();
  }
}

void EngineImpl::FinishSeq(Sequence& seq, FinishReason reason, const char* error_code) {
  if (!seq.blocks.empty()) {
    blocks_->Free(seq.blocks);
    seq.blocks.clear();
    seq.block_hashes.clear();
  }
  auto now = Clock::now();
  if (reason != FinishReason::kError) {
    e2e_.Add(Seconds(now - seq.arrival));
    if (seq.num_generated > 1) {
      tpot_.Add(Seconds(seq.last_token - seq.first_token) / (seq.num_generated - 1));
    }
  }
  finished_[static_cast<int>(reason)]++;
  if (seq.num_drafted > 0) seq.stream->SetSpeculativeCounts(seq.num_drafted, seq.num_accepted);
  seq.stream->Finish(reason, seq.prompt_len, std::max(0, seq.cached_tokens), seq.num_generated,
                     error_code ? std::string("request failed in the engine") : std::string(),
                     error_code ? std::string(error_code) : std::string());
}

void EngineImpl::Preempt(Sequence& seq) {
  blocks_->Free(seq.blocks);
  seq.blocks.clear();
  seq.block_hashes.clear();
  seq.num_computed = 0;
  seq.drafts.clear();
  ++preemptions_;
}

void EngineImpl::CommitFullBlocks(Sequence& seq) {
  const int32_t bs = kv_.block_size;
  while (static_cast<int32_t>(seq.block_hashes.size()) < seq.num_computed / bs) {
    size_t i = seq.block_hashes.size();
    uint64_t parent = i == 0 ? 0 : seq.block_hashes[i - 1];
    seq.block_hashes.push_back(
        blocks_->Commit(seq.blocks[i], parent, seq.tokens.data() + i * bs, seq.req.cache_salt));
  }
}

bool EngineImpl::EnsureBlocks(Sequence& seq, int32_t num_tokens_after) {
  int32_t need = (num_tokens_after + kv_.block_size - 1) / kv_.block_size -
                 static_cast<int32_t>(seq.blocks.size());
  if (need <= 0) return true;
  return blocks_->Allocate(need, seq.blocks);
}

bool EngineImpl::Step() {
  // 1. Drop cancelled sequences (running and waiting) before spending compute on them.
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->stream->cancelled()) {
      FinishSeq(**it, FinishReason::kCancelled);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->stream->cancelled()) {
      FinishSeq(**it, FinishReason::kCancelled);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }

  int32_t budget = options_.prefill_budget;
  batch_tokens_.clear();
  batch_seqs_.clear();
  batch_.seqs.clear();
  std::vector<int32_t>& chunk_sizes = chunk_sizes_;  // parallel to batch_seqs_
  chunk_sizes.clear();

  // 2. Running sequences, in admission order: decodes and unfinished prefills.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& seq = *running_[i];
    if (seq.stream->Full()) continue;  // slow client: pause this sequence
    int32_t remaining = static_cast<int32_t>(seq.tokens.size()) - seq.num_computed;
    int32_t chunk = std::min(remaining, budget);
    seq.num_step_drafts = 0;
    if (remaining == 1 && !seq.drafts.empty()) {
      // Verify drafts in this step, but never past max_tokens or the context window.
      int32_t n = static_cast<int32_t>(seq.drafts.size());
      n = std::min(n, seq.req.max_tokens - seq.num_generated - 1);
      n = std::min(n, max_model_len_ - static_cast<int32_t>(seq.tokens.size()));
      n = std::min(n, budget - 1);
      seq.num_step_drafts = std::max(0, n);
      chunk = 1 + seq.num_step_drafts;
    }
    while (!EnsureBlocks(seq, seq.num_computed + chunk)) {
      // Out of blocks: preempt the newest running sequence that is not already in this batch.
      Sequence& victim = *running_.back();
      Preempt(victim);
      std::unique_ptr<Sequence> v = std::move(running_.back());
      running_.pop_back();
      waiting_.push_front(std::move(v));
      if (&victim == &seq) {
        chunk = 0;
        break;
      }
      if (seq.num_step_drafts > 0) {
        // Under memory pressure, verify without drafts rather than preempt for them.
        seq.num_step_drafts = 0;
        chunk = 1;
      }
    }
    if (chunk == 0) break;
    batch_seqs_.push_back(&seq);
    chunk_sizes.push_back(chunk);
    budget -= chunk;
  }

  // 3. Waiting sequences, first come first served, while budget, slots and blocks allow.
  while (budget > 0 && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < options_.max_num_seqs) {
    Sequence& seq = *waiting_.front();
    if (seq.num_computed == 0 && seq.blocks.empty()) {
      // Never reuse the block holding the last token: its logits must be computed.
      int32_t max_blocks = (static_cast<int32_t>(seq.tokens.size()) - 1) / kv_.block_size;
      int32_t matched = blocks_->MatchPrefix(seq.tokens.data(), max_blocks, seq.req.cache_salt,
                                             seq.blocks, seq.block_hashes);
      seq.num_computed = matched * kv_.block_size;
      if (seq.cached_tokens < 0) {
        seq.cached_tokens = seq.num_computed;
        prefix_queries_ += seq.prompt_len;
        prefix_hits_ += seq.num_computed;
      }
    }
    int32_t remaining = static_cast<int32_t>(seq.tokens.size()) - seq.num_computed;
    int32_t chunk = std::min(remaining, budget);
    if (!EnsureBlocks(seq, seq.num_computed + chunk)) {
      if (running_.empty() && batch_seqs_.empty()) {
        // Nothing else holds blocks, so waiting cannot help; shrink the chunk to what fits.
        int32_t fit = (static_cast<int32_t>(seq.blocks.size()) + blocks_->num_available()) *
                          kv_.block_size - seq.num_computed;
        chunk = std::min(chunk, fit);
        if (chunk <= 0 || !EnsureBlocks(seq, seq.num_computed + chunk)) {
          std::unique_ptr<Sequence> s = std::move(waiting_.front());
          waiting_.pop_front();
          FinishSeq(*s, FinishReason::kError, "kv_cache_exhausted");
          continue;
        }
      } else {
        break;
      }
    }
    seq.num_step_drafts = 0;
    if (!seq.scheduled_once) {
      seq.scheduled_once = true;
      seq.first_scheduled = Clock::now();
      queue_.Add(Seconds(seq.first_scheduled - seq.arrival));
      prompt_tokens_ += seq.prompt_len;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    batch_seqs_.push_back(running_.back().get());
    chunk_sizes.push_back(chunk);
    budget -= chunk;
  }

  if (batch_seqs_.empty()) return false;

  // 4. One forward pass over every scheduled token.
  int32_t num_logits = 0;
  for (size_t i = 0; i < batch_seqs_.size(); ++i) {
    Sequence& seq = *batch_seqs_[i];
    arch::SequenceSlice s;
    s.token_offset = static_cast<int32_t>(batch_tokens_.size());
    s.num_tokens = chunk_sizes[i];
    s.start_pos = seq.num_computed;
    const int32_t real = chunk_sizes[i] - seq.num_step_drafts;
    s.num_logits = seq.num_computed + real == static_cast<int32_t>(seq.tokens.size())
                       ? 1 + seq.num_step_drafts : 0;
    s.block_table = seq.blocks.data();
    s.num_blocks = static_cast<int32_t>(seq.blocks.size());
    batch_tokens_.insert(batch_tokens_.end(), seq.tokens.begin() + seq.num_computed,
                         seq.tokens.begin() + seq.num_computed + real);
    batch_tokens_.insert(batch_tokens_.end(), seq.drafts.begin(),
                         seq.drafts.begin() + seq.num_step_drafts);
    num_logits += s.num_logits;
    batch_.seqs.push_back(s);
  }
  batch_.tokens = batch_tokens_.data();
  batch_.num_tokens = static_cast<int32_t>(batch_tokens_.size());
  if (static_cast<int64_t>(logits_.size()) < int64_t{num_logits} * vocab_) {
    logits_.resize(int64_t{num_logits} * vocab_);
  }
  lm_->Forward(batch_, kv_, logits_.data(), *pool_);

  if (spec_tokens_ > 0) {
    hidden_.resize(static_cast<size_t>(batch_.num_tokens) * lm_->config().hidden);
    lm_->FinalHidden(hidden_.data());
  }

  // 5. Advance, sample (verifying drafts) and finish.
  int32_t row = 0;
  auto now = Clock::now();
  std::vector<Sequence*>& done = done_;
  done.clear();
  verified_from_.assign(batch_seqs_.size(), 0);
  for (size_t i = 0; i < batch_seqs_.size(); ++i) {
    Sequence& seq = *batch_seqs_[i];
    verified_from_[i] = seq.num_computed;
    const int32_t drafts = seq.num_step_drafts;
    if (batch_.seqs[i].num_logits == 0) {
      seq.num_computed += chunk_sizes[i];
      CommitFullBlocks(seq);
      continue;
    }
    // Row r holds the distribution after the token at slice position r; draft r is accepted
    // when the target model picks it there. Greedy verification keeps the output identical to
    // decoding without drafts.
    int32_t accepted = 0;
    FinishReason finish = FinishReason::kNone;
    for (int32_t r = 0; r <= drafts; ++r) {
      float* logits = logits_.data() + int64_t{row + r} * vocab_;
      SampledToken tok = seq.sampler->Sample(logits, vocab_);
      const bool match = r < drafts && tok.token == seq.drafts[r];
      finish = Emit(seq, std::move(tok), now);
      if (match) ++accepted;
      if (finish != FinishReason::kNone || !match) break;
    }
    row += 1 + drafts;
    // KV is valid for the slice's real tokens and the accepted drafts; commit full blocks
    // before a finish releases them, so finished sequences still feed the prefix cache.
    seq.num_computed += chunk_sizes[i] - drafts + accepted;
    CommitFullBlocks(seq);
    if (drafts > 0) {
      seq.num_drafted += drafts;
      seq.num_accepted += accepted;
      ++spec_drafts_;
      spec_draft_tokens_ += drafts;
      spec_accepted_ += accepted;
    }
    seq.drafts.clear();
    if (finish != FinishReason::kNone) {
      FinishSeq(seq, finish);
      done.push_back(&seq);
    }
  }
  if (spec_tokens_ > 0) Draft(verified_from_);
  if (!done.empty()) {
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](const std::unique_ptr<Sequence>& s) {
                                    return std::find(done.begin(), done.end(), s.get()) !=
                                           done.end();
                                  }),
                   running_.end());
  }
  return true;
}

FinishReason EngineImpl::Emit(Sequence& seq, SampledToken tok, Clock::time_point now) {
  seq.tokens.push_back(tok.token);
  seq.num_generated++;
  generation_tokens_++;
  if (seq.num_generated == 1) {
    seq.first_token = now;
    ttft_.Add(Seconds(now - seq.arrival));
  }
  seq.last_token = now;
  bool stop_token = !seq.req.ignore_eos && is_eog_[tok.token];
  for (int32_t s : seq.req.stop_token_ids) stop_token |= (s == tok.token);
  if (stop_token) return FinishReason::kStop;
  seq.stream->PushToken(TokenEvent{tok.token, tok.logprob, std::move(tok.top)});
  if (seq.num_generated >= seq.req.max_tokens ||
      static_cast<int32_t>(seq.tokens.size()) >= max_model_len_) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

void EngineImpl::Draft(const std::vector<int32_t>& verified_from) {
  // MTP module 0 sees every newly verified position p with input x_{p+1} and the main model's
  // hidden state at p, so its own KV stays complete (prefix-cache hits included); sequences
  // ready to decode greedily also get a draft for the position after their last token.
  const int64_t H = lm_->config().hidden;
  mtp_tokens_.clear();
  mtp_hidden_.clear();
  mtp_batch_.seqs.clear();
  drafting_.clear();
  for (size_t i = 0; i < batch_seqs_.size(); ++i) {
    Sequence& seq = *batch_seqs_[i];
    if (seq.stream->finished()) continue;
    const int32_t from = verified_from[i];
    const int32_t n = seq.num_computed - from;
    if (n <= 0) continue;
    const bool decode_ready = seq.num_computed + 1 == static_cast<int32_t>(seq.tokens.size());
    const bool wants = decode_ready && seq.sampler->params().greedy() &&
                       seq.num_generated + 1 < seq.req.max_tokens;
    arch::SequenceSlice s;
    s.token_offset = static_cast<int32_t>(mtp_tokens_.size());
    s.num_tokens = n;
    s.start_pos = from;
    s.num_logits = wants ? 1 : 0;
    s.block_table = seq.blocks.data();
    s.num_blocks = static_cast<int32_t>(seq.blocks.size());
    mtp_batch_.seqs.push_back(s);
    mtp_tokens_.insert(mtp_tokens_.end(), seq.tokens.begin() + from + 1,
                       seq.tokens.begin() + from + 1 + n);
    const float* h = hidden_.data() + int64_t{batch_.seqs[i].token_offset} * H;
    mtp_hidden_.insert(mtp_hidden_.end(), h, h + int64_t{n} * H);
    if (wants) drafting_.push_back(&seq);
  }
  if (mtp_batch_.seqs.empty()) return;
  mtp_batch_.tokens = mtp_tokens_.data();
  mtp_batch_.num_tokens = static_cast<int32_t>(mtp_tokens_.size());
  mtp_logits_.resize(std::max<size_t>(1, drafting_.size()) * vocab_);
  mtp_hidden_out_.resize(mtp_tokens_.size() * H);
  lm_->ForwardMtp(0, mtp_batch_, mtp_hidden_.data(), mtp_kv_, mtp_logits_.data(),
                  mtp_hidden_out_.data(), *pool_);
  // Last hidden row of each drafting slice, for chaining.
  std::vector<float>& chain_hidden = mtp_hidden_;
  std::vector<float> last(drafting_.size() * H);
  {
    size_t d = 0;
    for (const auto& s : mtp_batch_.seqs) {
      if (s.num_logits == 0) continue;
      const float* src = mtp_hidden_out_.data() + int64_t{s.token_offset + s.num_tokens - 1} * H;
      std::copy(src, src + H, last.begin() + d * H);
      ++d;
    }
  }
  for (size_t d = 0; d < drafting_.size(); ++d) {
    drafting_[d]->drafts.push_back(
        ArgMax(mtp_logits_.data() + static_cast<int64_t>(d) * vocab_, vocab_));
  }
  // Chained drafts: the module continues from its own hidden state, one position further.
  for (int32_t k = 1; k < spec_tokens_ && !drafting_.empty(); ++k) {
    mtp_tokens_.clear();
    mtp_batch_.seqs.clear();
    chain_hidden.clear();
    std::vector<Sequence*> next;
    for (size_t d = 0; d < drafting_.size(); ++d) {
      Sequence& seq = *drafting_[d];
      const int32_t pos = seq.num_computed + k;  // input x_{pos+1} is draft k
      if (static_cast<int32_t>(seq.drafts.size()) != k || pos + 1 >= max_model_len_ ||
          seq.num_generated + k + 1 >= seq.req.max_tokens || !EnsureBlocks(seq, pos + 1)) {
        continue;
      }
      arch::SequenceSlice s;
      s.token_offset = static_cast<int32_t>(mtp_tokens_.size());
      s.num_tokens = 1;
      s.start_pos = pos;
      s.num_logits = 1;
      s.block_table = seq.blocks.data();
      s.num_blocks = static_cast<int32_t>(seq.blocks.size());
      mtp_batch_.seqs.push_back(s);
      mtp_tokens_.push_back(seq.drafts.back());
      chain_hidden.insert(chain_hidden.end(), last.begin() + d * H, last.begin() + (d + 1) * H);
      next.push_back(&seq);
    }
    if (next.empty()) break;
    mtp_batch_.tokens = mtp_tokens_.data();
    mtp_batch_.num_tokens = static_cast<int32_t>(mtp_tokens_.size());
    mtp_logits_.resize(next.size() * vocab_);
    mtp_hidden_out_.resize(next.size() * H);
    lm_->ForwardMtp(0, mtp_batch_, chain_hidden.data(), mtp_kv_, mtp_logits_.data(),
                    mtp_hidden_out_.data(), *pool_);
    last.assign(mtp_hidden_out_.begin(), mtp_hidden_out_.begin() + next.size() * H);
    for (size_t d = 0; d < next.size(); ++d) {
      next[d]->drafts.push_back(
          ArgMax(mtp_logits_.data() + static_cast<int64_t>(d) * vocab_, vocab_));
    }
    drafting_ = std::move(next);
  }
}

void EngineImpl::PublishStats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.num_running = static_cast<int64_t>(running_.size());
  {
    std::lock_guard<std::mutex> l2(mu_);
    stats_.num_waiting = static_cast<int64_t>(waiting_.size() + submitted_.size());
  }
  stats_.kv_cache_usage =
      static_cast<double>(blocks_->num_in_use()) / std::max(1, blocks_->num_blocks());
  stats_.num_preemptions = preemptions_;
  stats_.prefix_cache_queries = prefix_queries_;
  stats_.prefix_cache_hits = prefix_hits_;
  stats_.prompt_tokens = prompt_tokens_;
  stats_.generation_tokens = generation_tokens_;
  for (int i = 0; i < 5; ++i) stats_.num_requests_finished[i] = finished_[i];
  stats_.spec_num_drafts = spec_drafts_;
  stats_.spec_num_draft_tokens = spec_draft_tokens_;
  stats_.spec_num_accepted_tokens = spec_accepted_;
  ttft_.CopyTo(stats_.ttft);
  tpot_.CopyTo(stats_.tpot);
  e2e_.CopyTo(stats_.e2e);
  queue_.CopyTo(stats_.queue_time);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const model::Model& model,
                                                       const EngineOptions& options) {
  auto engine = std::make_unique<EngineImpl>(model, options);
  DI_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace deepinfer::engine
