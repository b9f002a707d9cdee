// The engine thread: continuous batching over a paged KV cache.
//
// Each step is Scheduler::Schedule (what runs: decodes with their drafts, prefill chunks, within
// the token budget; preemption when blocks run out), Executor::Run (one forward pass, sampling
// with draft verification), Scheduler::Update (tokens to streams, finishes, prefix-cache
// commits) and, with speculative decoding, Drafter::Draft (the next step's drafts). This file
// only owns the thread, the submission queue and the published stats.

#include "engine/engine.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "xxhash.h"
#include "spdlog/spdlog.h"
#include "arch/causal_lm.h"
#include "engine/block_manager.h"
#include "engine/executor.h"
#include "engine/prefix_checkpoint.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "util/error_codes.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace deepinfer::engine {
namespace {

class EngineImpl final : public Engine {
 public:
  EngineImpl(const model::Model& model, const EngineOptions& options)
      : model_(model), options_(options) {}

  ~EngineImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Init();
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(GenerateRequest request) override;
  EngineStats Stats() const override {
    absl::MutexLock lock(&stats_mu_);
    return stats_;
  }
  int32_t max_model_len() const override { return max_model_len_; }
  int64_t kv_capacity_tokens() const override { return int64_t{kv_.num_blocks} * kv_.block_size; }
  int64_t kv_bytes_per_token() const override { return kv_.bytes_per_token(); }
  int64_t kv_window_cache_bytes() const override { return window_bytes_; }
  int32_t kv_window_tokens() const override { return window_tokens_; }
  const char* numerics_name() const override { return arch::NumericsName(numerics_); }
  const char* drafter_name() const override {
    return spec_tokens_ == 0 ? "none" : dspark_ ? "dspark" : "mtp";
  }
  int32_t draft_tokens_per_step() const override { return spec_tokens_; }
  bool ready() const override { return ready_.load(std::memory_order_acquire); }
  const model::Model& model() const override { return model_; }
  CheckpointRef CheckpointFor(const std::vector<int32_t>& prompt,
                              uint64_t cache_salt) const override;

 private:
  absl::Status CreateModel();
  // Resolves options_.speculative_method against the model: spec_tokens_, dspark_ (and turns
  // the model's DSpark state on, before the KV layout is read).
  absl::Status ChooseDrafter();
  absl::Status AllocateKv();
  void Loop();
  void Warmup();
  // One scheduling step; false when nothing could run.
  bool Step();
  void PublishStats();
  // Prefix checkpoints (options_.checkpoint_store). The layout and regions are fixed in Init.
  void InitCheckpoints();
  // Caller thread: a verified checkpoint of the longest saved chain `request`'s prompt starts
  // with, unless this rank restored or saved that chain itself; null otherwise.
  std::shared_ptr<const PrefixCheckpoint> FindCheckpoint(const GenerateRequest& request);
  // Restores the store's newest checkpoints until checkpoint_preload_tokens (Init, before the
  // engine thread starts).
  void PreloadCheckpoints();
  // Copies a verified checkpoint's blocks into free blocks of the caches and commits them to
  // the prefix cache, all or none. Returns false when too few blocks are free. Engine thread
  // (or Init before it runs).
  bool InstallBlocks(const PrefixCheckpoint& c, uint64_t salt);
  // Unless this rank holds chain `chain` already, reads and verifies file `name` against the
  // first `num_tokens` tokens of `r`'s prompt and marks the chain resident; a failure is logged
  // (a missing file only with `warn_missing`) and returns null. Caller thread.
  std::shared_ptr<const PrefixCheckpoint> LoadResident(const GenerateRequest& r, uint64_t name,
                                                       uint64_t chain, int32_t num_tokens,
                                                       bool warn_missing);
  // FindCheckpoint for a request naming its checkpoint file (P/D decode side).
  std::shared_ptr<const PrefixCheckpoint> LoadNamedCheckpoint(const GenerateRequest& request);
  // Engine thread: copies `seq.restore`'s blocks into free blocks of both caches and commits
  // them to the prefix cache (all of them or none), so the lookup that follows finds them.
  void InstallCheckpoint(Sequence& seq);
  // Engine thread (the scheduler's prompt-computed hook): copies the prompt's full blocks out
  // and queues them for the store's writer.
  void SaveCheckpoint(const Sequence& seq);
  // Remembers `chain_hash` as restored or saved by this rank (bounded).
  void MarkResident(uint64_t chain_hash);

  const model::Model& model_;
  EngineOptions options_;
  std::unique_ptr<arch::CausalLm> lm_;
  arch::Numerics numerics_ = arch::Numerics::kFast;  // set once, before the engine thread starts
  std::unique_ptr<util::ThreadPool> pool_;
  arch::KvCache kv_;
  arch::KvCache mtp_kv_;  // MTP modules' KV, same block geometry as kv_ (speculative only)
  arch::KvCache window_kv_;                     // the layout's window cache, if it has one
  std::unique_ptr<BlockManager> window_blocks_;  // its blocks; null without one
  int64_t window_bytes_ = 0;
  int32_t window_tokens_ = 0;
  int32_t spec_tokens_ = 0;
  bool dspark_ = false;  // the drafter is DSpark's (its windows live in window_kv_)
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Drafter> drafter_;  // null without speculative decoding
  std::unique_ptr<Telemetry> telemetry_;  // null unless options_.telemetry is enabled
  int64_t step_number_ = 0;
  int32_t max_model_len_ = 0;
  int32_t vocab_ = 0;

  // Submission queue, shared with client threads. PublishStats takes mu_ inside stats_mu_.
  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // a request was submitted, or stop
  std::deque<std::unique_ptr<Sequence>> submitted_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;

  mutable absl::Mutex stats_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(stats_mu_);

  // One cache layer as a checkpoint stores it: its storage, bytes per token slot, and whether
  // it is addressed by the window cache's blocks.
  struct CheckpointRegion {
    arch::KvCache* cache;
    int layer;
    int64_t bytes_per_token;
    bool window;
  };
  CheckpointLayout checkpoint_layout_;           // set in Init
  // Mixed into every checkpoint's file name with the chain hash: servers of another revision or
  // layout sharing the folder neither find nor block each other's files.
  uint64_t checkpoint_key_ = 0;
  uint64_t CheckpointName(uint64_t chain_hash) const {
    return XXH3_64bits_withSeed(&chain_hash, sizeof(chain_hash), checkpoint_key_);
  }
  std::vector<CheckpointRegion> checkpoint_regions_;  // main layers, MTP layers, window layers
  absl::Mutex resident_mu_;
  absl::flat_hash_set<uint64_t> resident_ ABSL_GUARDED_BY(resident_mu_);

  std::atomic<bool> ready_{false};
  std::thread thread_;
};

absl::Status EngineImpl::Init() {
  if (options_.block_size < 1 || options_.block_size > 1024 || options_.prefill_budget < 1 ||
      options_.max_num_seqs < 1) {
    return InvalidArgumentError(util::codes::kBadOption,
                                "block size, prefill budget and max sequences must be positive");
  }
  DI_RETURN_IF_ERROR(CreateModel());
  DI_RETURN_IF_ERROR(AllocateKv());
  max_model_len_ = options_.max_model_len > 0 ? options_.max_model_len : model_.config.max_context;
  if (max_model_len_ <= 0) max_model_len_ = 4096;
  std::vector<bool> is_eog(vocab_, false);
  for (int32_t id : model_.tokenizer.eog_ids) {
    if (id >= 0 && id < vocab_) is_eog[id] = true;
  }
  SchedulerOptions so;
  so.max_num_seqs = options_.max_num_seqs;
  so.prefill_budget = options_.prefill_budget;
  so.max_model_len = max_model_len_;
  so.long_prefill_token_threshold = options_.long_prefill_token_threshold;
  so.long_prefill_chunk = options_.long_prefill_chunk;
  scheduler_ = std::make_unique<Scheduler>(
      so, *blocks_, std::move(is_eog), WindowPool{window_blocks_.get(), window_tokens_});
  if (options_.telemetry.enabled()) {
    DI_ASSIGN_OR_RETURN(telemetry_, Telemetry::Open(options_.telemetry, options_.dp_rank_index));
    scheduler_->set_telemetry(telemetry_.get());
  }
  // Stats() must count a request by the time its client sees it finish (tests and clients read
  // the totals right after a request ends); the end-of-step publish comes too late for that:
  // the client may run between the finish and it.
  scheduler_->set_finish_hook([this] { PublishStats(); });
  if (options_.checkpoint_store != nullptr) {
    InitCheckpoints();
    // A restored chain whose last block is evicted is no longer resident: a later request
    // reads its file again instead of recomputing (sequences free blocks last to first, so the
    // last block goes first).
    blocks_->set_evict_hook([this](uint64_t hash) {
      absl::MutexLock lock(&resident_mu_);
      resident_.erase(hash);
    });
    scheduler_->set_prompt_computed_hook([this](const Sequence& seq) {
      if (options_.checkpoint_save || seq.req.prefill_only) SaveCheckpoint(seq);
    });
  }
  if (options_.checkpoint_store != nullptr && options_.checkpoint_preload_tokens > 0) {
    PreloadCheckpoints();  // the engine thread does not run yet: the caches are this thread's
  }
  executor_ = std::make_unique<Executor>(*lm_, kv_, *pool_, spec_tokens_ > 0 && !dspark_);
  if (spec_tokens_ > 0 && dspark_) {
    drafter_ = std::make_unique<DsparkDrafter>(*lm_, kv_, *pool_, spec_tokens_,
                                               options_.dspark_confidence_threshold);
  } else if (spec_tokens_ > 0) {
    drafter_ = std::make_unique<MtpDrafter>(*lm_, mtp_kv_, *pool_, *blocks_, spec_tokens_,
                                            max_model_len_);
  }
  {
    // No other thread runs yet; the lock is for the analysis, which cannot know that.
    absl::MutexLock lock(&stats_mu_);
    stats_.num_blocks_total = blocks_->num_blocks();
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

absl::Status EngineImpl::CreateModel() {
  DI_ASSIGN_OR_RETURN(lm_, arch::CreateCausalLm(model_));
  const arch::Numerics numerics = options_.numerics.value_or(lm_->default_numerics());
  if (!lm_->SetNumerics(numerics)) {
    return UnimplementedError(
        util::codes::kUnsupportedNumerics,
        fmt::format("--numerics {} is not implemented for the {} architecture (ggml: Llama; "
                    "deepseek-qat: DeepSeek-V4).",
                    arch::NumericsName(numerics), model_.config.architecture));
  }
  numerics_ = numerics;
  const int threads = options_.num_threads > 0
                          ? options_.num_threads
                          : static_cast<int>(std::thread::hardware_concurrency());
  pool_ = std::make_unique<util::ThreadPool>(std::max(1, threads));
  vocab_ = model_.config.vocab;
  return absl::OkStatus();
}

absl::Status EngineImpl::ChooseDrafter() {
  using Method = EngineOptions::SpeculativeMethod;
  Method method = options_.speculative_method;
  const int32_t tokens = options_.speculative_tokens;
  if (tokens < 0) return InvalidArgumentError(util::codes::kBadOption, "negative draft tokens");
  arch::DraftHeads* heads = lm_->draft_heads();
  const int mtp_layers = heads != nullptr ? heads->num_mtp_layers() : 0;
  const int dspark_block = heads != nullptr ? heads->dspark_block_size() : 0;
  if (method == Method::kAuto) {
    method = dspark_block > 0 ? Method::kDspark
             : tokens > 0                   ? Method::kMtp
                                            : Method::kNone;
  } else if (method == Method::kNoDspark) {
    method = mtp_layers > 0 ? Method::kMtp : Method::kNone;
  }
  switch (method) {
    case Method::kDspark:
      if (dspark_block == 0 || !heads->EnableDspark()) {
        return InvalidArgumentError(util::codes::kSpeculativeUnsupported,
                                    "--speculative-method dspark needs a DeepSeek-V4.1 checkpoint "
                                    "with DSpark stages (mtp.*)");
      }
      dspark_ = true;
      spec_tokens_ = std::min({tokens > 0 ? tokens : dspark_block, dspark_block,
                               kMaxSpeculativeTokens});
      break;
    case Method::kMtp:
      if (mtp_layers == 0) {
        return InvalidArgumentError(
            util::codes::kSpeculativeUnsupported,
            dspark_block > 0
                ? "MTP drafts need MTP (NextN) layers; this checkpoint's are DSpark stages: use "
                  "--speculative-method dspark (the default) or none"
                : "MTP drafts (--speculative-tokens, --speculative-method mtp) need a model with "
                  "MTP (NextN) layers");
      }
      spec_tokens_ = std::min(std::max(tokens, 1), kMaxSpeculativeTokens);
      break;
    default:
      spec_tokens_ = 0;
  }
  return absl::OkStatus();
}

absl::Status EngineImpl::AllocateKv() {
  DI_RETURN_IF_ERROR(ChooseDrafter());
  const arch::KvLayout layout = lm_->kv_layout(options_.block_size);
  const int32_t bs = options_.block_size;
  if (!lm_->SupportsKvDtype(options_.kv_cache_dtype)) {
    return UnimplementedError(
        util::codes::kUnsupportedKvCacheDtype,
        fmt::format("--kv-cache-dtype {} is not implemented for the {} architecture with "
                    "--numerics {} (f16 and bf16: Llama-family models with fast numerics)",
                    kernels::KvDtypeName(options_.kv_cache_dtype), model_.config.architecture,
                    arch::NumericsName(numerics_)));
  }
  kv_.dtype = options_.kv_cache_dtype;
  int64_t main_floats = 0;
  for (int64_t f : layout.floats) main_floats += f;
  const int64_t bytes_per_token =
      std::max<int64_t>(1, main_floats * kernels::KvDtypeBytes(options_.kv_cache_dtype));
  int64_t memory = options_.kv_cache_memory_bytes;
  if (layout.has_window()) {
    // The window cache holds, per running sequence, the blocks its window reads plus the blocks
    // of one step's chunk; twice that (when it takes at most half the memory) keeps recently
    // finished windows for prefix-cache hits.
    int64_t window_floats = 0;
    for (int64_t f : layout.window_floats) window_floats += f;
    const int64_t block_bytes = bs * window_floats * int64_t{sizeof(float)};
    const int64_t per_seq = (layout.window_tokens + bs - 1) / bs + 2;
    int64_t window_blocks =
        int64_t{options_.max_num_seqs} * per_seq + (options_.prefill_budget + bs - 1) / bs;
    if (2 * window_blocks * block_bytes <= memory / 2) window_blocks *= 2;
    window_bytes_ = window_blocks * block_bytes;
    window_tokens_ = layout.window_tokens;
    if (options_.kv_cache_tokens == 0 && window_bytes_ >= memory) {
      return InvalidArgumentError(
          util::codes::kBadOption,
          fmt::format("--kv-cache-memory {} MiB is less than the window cache needs ({} MiB for "
                      "{} sequences of {} window tokens and a {}-token step); raise it or lower "
                      "--max-num-seqs",
                      memory >> 20, window_bytes_ >> 20, options_.max_num_seqs,
                      layout.window_tokens, options_.prefill_budget));
    }
    memory -= window_bytes_;
    DI_RETURN_IF_ERROR(window_kv_.AllocateLayers(bs, static_cast<int>(window_blocks),
                                                 layout.window_floats));
    window_blocks_ = std::make_unique<BlockManager>(static_cast<int32_t>(window_blocks), bs,
                                                    options_.enable_prefix_caching);
    kv_.window = &window_kv_;
  }
  const int64_t capacity =
      options_.kv_cache_tokens > 0 ? options_.kv_cache_tokens : memory / bytes_per_token;
  int64_t num_blocks = capacity / bs;
  if (num_blocks < 2) {
    return InvalidArgumentError(util::codes::kBadOption,
                                "the KV cache must hold at least two blocks");
  }
  num_blocks = std::min<int64_t>(num_blocks, int64_t{1} << 30);
  DI_RETURN_IF_ERROR(kv_.AllocateLayers(bs, static_cast<int>(num_blocks), layout.floats));
  if (spec_tokens_ > 0 && !dspark_) {
    if (layout.has_window()) {
      return InvalidArgumentError(util::codes::kSpeculativeUnsupported,
                                  "the MTP drafter does not keep a window cache");
    }
    DI_RETURN_IF_ERROR(mtp_kv_.Allocate(lm_->draft_heads()->num_mtp_layers(), bs, static_cast<int>(num_blocks),
                                        lm_->kv_floats_per_token()));
  }
  blocks_ = std::make_unique<BlockManager>(static_cast<int32_t>(num_blocks), bs,
                                           options_.enable_prefix_caching);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RequestStream>> EngineImpl::Submit(GenerateRequest request) {
  if (request.prompt.empty())
    return InvalidArgumentError(util::codes::kEmptyPrompt, "the prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= vocab_) {
      return InvalidArgumentError(util::codes::kInvalidToken,
                                  "prompt token id out of the vocabulary");
    }
  }
  if (request.dp_rank > 0) {
    return InvalidArgumentError(util::codes::kInvalidDpRank,
                                fmt::format("data-parallel rank {} does not exist: this server "
                                            "has rank 0 only",
                                            request.dp_rank));
  }
  // Prompt logprobs alone (echo with max_tokens 0, as lm-evaluation-harness scores prompts)
  // generate nothing.
  if (request.max_tokens < (request.prompt_logprobs >= 0 ? 0 : 1)) {
    return InvalidArgumentError(util::codes::kInvalidMaxTokens, "max_tokens must be at least 1");
  }
  int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (total > max_model_len_) {
    return InvalidArgumentError(
        util::codes::kContextLengthExceeded,
        "prompt (" + std::to_string(request.prompt.size()) + " tokens) plus max_tokens (" +
            std::to_string(request.max_tokens) + ") exceeds the context window of " +
            std::to_string(max_model_len_) + " tokens");
  }
  if (total > kv_capacity_tokens()) {
    return ResourceExhaustedError(util::codes::kKvCacheTooSmall,
                                  "the request can never fit in the KV cache of " +
                                      std::to_string(kv_capacity_tokens()) + " tokens");
  }
  // A prompt-logprobs request computes its whole prompt: nothing is restored for it.
  std::shared_ptr<const PrefixCheckpoint> restore =
      request.prompt_logprobs >= 0 ? nullptr : FindCheckpoint(request);
  if (request.constraint != nullptr) request.ignore_eos = false;  // the grammar's end is an end
  std::unique_ptr<Sequence> seq = Sequence::Create(0, std::move(request), Clock::now());
  seq->restore = std::move(restore);
  if (seq->req.constraint != nullptr) {
    seq->matcher = std::make_unique<constraint::ConstraintMatcher>(seq->req.constraint);
  }
  auto stream = seq->stream;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return UnavailableError(util::codes::kShuttingDown, "the engine is shutting down");
    seq->id = next_id_++;
    seq->sampler = std::make_unique<Sampler>(seq->req.sampling, seq->req.prompt,
                                             options_.seed + seq->id * 0x9E3779B97F4A7C15ull);
    submitted_.push_back(std::move(seq));
  }
  cv_.Signal();
  return stream;
}

void EngineImpl::Warmup() {
  // One short forward pass touches every weight page and sizes the scratch buffers, so the
  // first real request does not pay for it.
  std::vector<int32_t> blocks, window;
  if (blocks_->Allocate(1, blocks) && (!window_blocks_ || window_blocks_->Allocate(1, window))) {
    const int32_t bos = model_.tokenizer.bos_id;
    executor_->Warmup(bos >= 0 && bos < vocab_ ? bos : 0, blocks[0],
                      window.empty() ? -1 : window[0]);
    if (window_blocks_) window_blocks_->Free(window);
  }
  blocks_->Free(blocks);
  ready_.store(true, std::memory_order_release);
}

void EngineImpl::Loop() {
  Warmup();
  std::deque<std::unique_ptr<Sequence>> incoming;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!scheduler_->has_work()) {
        while (!stop_ && submitted_.empty()) cv_.Wait(&mu_);
      }
      if (stop_) break;
      incoming.swap(submitted_);
    }
    while (!incoming.empty()) {
      if (incoming.front()->restore != nullptr) InstallCheckpoint(*incoming.front());
      scheduler_->Add(std::move(incoming.front()));
      incoming.pop_front();
    }
    if (!Step()) {
      // Nothing could run (all paused on slow clients): yield briefly instead of spinning.
      absl::MutexLock lock(&mu_);
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(2));
    }
    PublishStats();
  }
  scheduler_->FinishAll(FinishReason::kCancelled);
  // Finished outside mu_: the finish hook publishes the stats, which takes mu_. stop_ is set,
  // so Submit adds nothing after this.
  {
    absl::MutexLock lock(&mu_);
    incoming.swap(submitted_);
  }
  for (auto& s : incoming) scheduler_->Finish(*s, FinishReason::kCancelled);
}

bool EngineImpl::Step() {
  // Ranks stepping in turn (data_parallel.h) hold the shared lock for the whole step.
  std::optional<absl::MutexLock> turn;
  if (options_.step_lock) turn.emplace(options_.step_lock.get());
  const Clock::time_point start = Clock::now();
  const int64_t preemptions = scheduler_->counters().num_preemptions;
  const int64_t accepted = scheduler_->counters().spec_num_accepted_tokens;
  const StepPlan& plan = scheduler_->Schedule(start);
  if (plan.empty()) return false;
  StepOutputs& outputs = executor_->Run(plan);
  scheduler_->Update(plan, outputs, Clock::now());
  if (drafter_ != nullptr) drafter_->Draft(plan, executor_->hidden());
  ++step_number_;
  if (telemetry_ != nullptr) {
    StepRecord r;
    r.step = step_number_;
    r.start_unix = telemetry_->ToUnix(start);
    r.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    for (const ScheduledSeq& s : plan.seqs) {
      if (s.phase == Phase::kDecode) {
        ++r.decode_seqs;
        r.draft_tokens += s.num_drafts;
      } else {
        ++r.prefill_seqs;
        r.prefill_tokens += s.num_real_tokens();
      }
    }
    r.accepted_tokens =
        static_cast<int32_t>(scheduler_->counters().spec_num_accepted_tokens - accepted);
    r.preemptions = scheduler_->counters().num_preemptions - preemptions;
    r.running = scheduler_->num_running();
    r.waiting = scheduler_->num_waiting();
    telemetry_->Step(r);
  }
  return true;
}

void EngineImpl::PublishStats() {
  const SchedulerCounters& c = scheduler_->counters();
  absl::MutexLock lock(&stats_mu_);
  stats_.num_running = scheduler_->num_running();
  {
    absl::MutexLock l2(&mu_);
    stats_.num_waiting = static_cast<int64_t>(scheduler_->num_waiting() + submitted_.size());
  }
  stats_.kv_cache_usage =
      static_cast<double>(blocks_->num_in_use()) / std::max(1, blocks_->num_blocks());
  stats_.num_preemptions = c.num_preemptions;
  stats_.prefix_cache_queries = c.prefix_cache_queries;
  stats_.prefix_cache_hits = c.prefix_cache_hits;
  stats_.prompt_tokens = c.prompt_tokens;
  stats_.prefill_tokens = c.prefill_tokens;
  stats_.generation_tokens = c.generation_tokens;
  for (int i = 0; i < 5; ++i) stats_.num_requests_finished[i] = c.num_finished[i];
  stats_.spec_num_drafts = c.spec_num_drafts;
  stats_.spec_num_draft_tokens = c.spec_num_draft_tokens;
  stats_.spec_num_accepted_tokens = c.spec_num_accepted_tokens;
  std::copy(std::begin(c.spec_accepted_per_pos), std::end(c.spec_accepted_per_pos),
            std::begin(stats_.spec_accepted_per_pos));
  stats_.constraint_masks = executor_->constraint_masks();
  stats_.constraint_mask_seconds = executor_->constraint_mask_seconds();
  stats_.ttft = c.ttft;
  stats_.tpot = c.tpot;
  stats_.e2e = c.e2e;
  stats_.queue_time = c.queue_time;
}

// The prefix cache's hash of the chain of the first `num_blocks` full blocks of `tokens`
// (BlockManager::HashBlock chained from 0): what names a prefix's checkpoint.
uint64_t ChainHash(const int32_t* tokens, int32_t num_blocks, int32_t block_size, uint64_t salt) {
  uint64_t chain = 0;
  for (int32_t i = 0; i < num_blocks; ++i) {
    chain = BlockManager::HashBlock(chain, tokens + static_cast<size_t>(i) * block_size,
                                    block_size, salt);
  }
  return chain;
}

void EngineImpl::InitCheckpoints() {
  CheckpointLayout& l = checkpoint_layout_;
  l.architecture = model_.config.architecture;
  l.kv_dtype = kernels::KvDtypeName(kv_.dtype);
  l.numerics = arch::NumericsName(numerics_);
  l.block_size = kv_.block_size;
  l.window_tokens = window_tokens_;
  auto add = [&](arch::KvCache& cache, bool window) {
    for (int i = 0; i < cache.num_layers; ++i) {
      const int64_t bytes = cache.layer_floats[i] * kernels::KvDtypeBytes(cache.dtype);
      checkpoint_regions_.push_back({&cache, i, bytes, window});
      (window ? l.window_layer_bytes : l.layer_bytes).push_back(bytes);
    }
  };
  add(kv_, false);
  if (mtp_kv_.num_layers > 0) add(mtp_kv_, false);  // the MTP drafter reads the prefix's too
  if (window_blocks_ != nullptr) add(window_kv_, true);
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|", options_.model_revision, l.architecture,
                                l.kv_dtype, l.numerics, l.block_size, l.window_tokens,
                                l.window_layer_bytes.size());
  for (int64_t b : l.layer_bytes) key += fmt::format("{},", b);
  for (int64_t b : l.window_layer_bytes) key += fmt::format("{},", b);
  checkpoint_key_ = XXH3_64bits(key.data(), key.size());
}

void EngineImpl::MarkResident(uint64_t chain_hash) {
  absl::MutexLock lock(&resident_mu_);
  if (resident_.size() >= 65536) resident_.clear();  // a hint only: forgetting costs a reload
  resident_.insert(chain_hash);
}

CheckpointRef EngineImpl::CheckpointFor(const std::vector<int32_t>& prompt,
                                       uint64_t cache_salt) const {
  const int32_t bs = kv_.block_size;
  const size_t k = prompt.size() / static_cast<size_t>(bs);
  if (options_.checkpoint_store == nullptr || k == 0) return {};
  const uint64_t chain = ChainHash(prompt.data(), static_cast<int32_t>(k), bs, cache_salt);
  return {CheckpointFileName(CheckpointName(chain)), static_cast<int32_t>(k) * bs};
}

std::shared_ptr<const PrefixCheckpoint> EngineImpl::LoadNamedCheckpoint(const GenerateRequest& r) {
  const int32_t bs = kv_.block_size;
  const int32_t n = r.checkpoint_tokens;
  std::optional<uint64_t> name = ParseCheckpointFileName(r.checkpoint_file);
  if (!name || n <= 0 || n % bs != 0 || n > static_cast<int32_t>(r.prompt.size())) {
    spdlog::warn("request {}: '{}' ({} tokens) is not a checkpoint file of whole blocks within "
                 "its {}-token prompt; the prompt is computed here",
                 r.request_id, r.checkpoint_file.substr(0, 64), n, r.prompt.size());
    return nullptr;
  }
  return LoadResident(r, *name, ChainHash(r.prompt.data(), n / bs, bs, r.cache_salt), n,
                      /*warn_missing=*/true);
}

std::shared_ptr<const PrefixCheckpoint> EngineImpl::LoadResident(const GenerateRequest& r,
                                                                  uint64_t name, uint64_t chain,
                                                                  int32_t num_tokens,
                                                                  bool warn_missing) {
  {
    absl::MutexLock lock(&resident_mu_);
    if (resident_.contains(chain)) return nullptr;
  }
  CheckpointStore& store = *options_.checkpoint_store;
  CheckpointExpect expect;
  expect.model_revision = options_.model_revision;
  expect.layout = checkpoint_layout_;
  expect.cache_salt = r.cache_salt;
  expect.tokens_sha256 = TokensSha256(r.prompt.data(), static_cast<size_t>(num_tokens));
  absl::StatusOr<PrefixCheckpoint> c = store.Load(name, expect);
  if (!c.ok()) {
    if (warn_missing || !absl::IsNotFound(c.status())) {
      spdlog::warn("request {}: prefix checkpoint {} ignored, the prefix is computed here: {}",
                   r.request_id, store.PathOf(name), OneLineError(c.status()));
    }
    return nullptr;
  }
  MarkResident(chain);
  return std::make_shared<const PrefixCheckpoint>(*std::move(c));
}

std::shared_ptr<const PrefixCheckpoint> EngineImpl::FindCheckpoint(const GenerateRequest& r) {
  CheckpointStore* store = options_.checkpoint_store.get();
  if (store == nullptr || !options_.enable_prefix_caching) return nullptr;
  if (!r.checkpoint_file.empty()) return LoadNamedCheckpoint(r);
  const int32_t bs = kv_.block_size;
  // Every full block of the prompt: a checkpoint is saved with them all, and one that ends with
  // the prompt's last token still serves the blocks before it (the lookup recomputes the last).
  const int32_t max_blocks = static_cast<int32_t>(r.prompt.size()) / bs;
  const int32_t min_blocks = std::max(1, (options_.checkpoint_min_tokens + bs - 1) / bs);
  if (max_blocks < min_blocks) return nullptr;
  std::vector<uint64_t> hashes(static_cast<size_t>(max_blocks));
  uint64_t parent = 0;
  for (int32_t i = 0; i < max_blocks; ++i) {
    parent = BlockManager::HashBlock(parent, r.prompt.data() + static_cast<size_t>(i) * bs, bs,
                                     r.cache_salt);
    hashes[static_cast<size_t>(i)] = parent;
  }
  std::vector<uint64_t> names(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) names[i] = CheckpointName(hashes[i]);
  const int32_t k = store->Longest(names, min_blocks);
  if (k == 0) return nullptr;
  // A file that vanished since the listing is forgotten quietly (another process evicted it).
  return LoadResident(r, names[static_cast<size_t>(k - 1)], hashes[static_cast<size_t>(k - 1)],
                      k * bs, /*warn_missing=*/false);
}

void EngineImpl::InstallCheckpoint(Sequence& seq) {
  const std::shared_ptr<const PrefixCheckpoint> c = std::move(seq.restore);
  if (InstallBlocks(*c, seq.req.cache_salt)) return;
  // Not restored after all: forget it, so that a later request reads the file again.
  const uint64_t chain =
      ChainHash(c->tokens.data(), c->header.num_blocks(), kv_.block_size, seq.req.cache_salt);
  absl::MutexLock lock(&resident_mu_);
  resident_.erase(chain);
}

bool EngineImpl::InstallBlocks(const PrefixCheckpoint& checkpoint, uint64_t salt) {
  const PrefixCheckpoint* c = &checkpoint;
  const int32_t bs = kv_.block_size;
  const int32_t k = c->header.num_blocks();
  const int32_t window_first = c->header.window_first_block;
  // Room for every block at once: a prefix is restored whole or not at all (then recomputed).
  if (blocks_->num_available() < k ||
      (window_blocks_ != nullptr && window_blocks_->num_available() < k - window_first)) {
    return false;
  }
  const char* payload = c->payload.data();
  std::vector<int32_t> main(static_cast<size_t>(k)), window(static_cast<size_t>(k), -1);
  std::vector<int32_t> fresh;
  uint64_t parent = 0;
  for (int32_t i = 0; i < k; ++i) {
    const int32_t* t = c->tokens.data() + static_cast<size_t>(i) * bs;
    const uint64_t h = BlockManager::HashBlock(parent, t, bs, salt);
    // Hold every block until the end, so that allocating one never evicts another of the chain.
    auto take = [&](BlockManager& pool, int32_t& slot) {
      slot = pool.Find(h, t);
      if (slot >= 0) {
        pool.Acquire(slot);
        return false;
      }
      fresh.clear();
      pool.Allocate(1, fresh);  // room checked above
      slot = fresh[0];
      return true;
    };
    const bool copy_main = take(*blocks_, main[static_cast<size_t>(i)]);
    const bool copy_window =
        window_blocks_ != nullptr && i >= window_first && take(*window_blocks_, window[static_cast<size_t>(i)]);
    size_t offset = 0;
    for (const CheckpointRegion& r : checkpoint_regions_) {
      const int64_t block_bytes = r.bytes_per_token * bs;
      const int32_t first = r.window ? window_first : 0;
      const bool copy = r.window ? copy_window : copy_main;
      if (copy) {
        const int32_t b = r.window ? window[static_cast<size_t>(i)] : main[static_cast<size_t>(i)];
        std::memcpy(r.cache->layer_bytes(r.layer) + static_cast<size_t>(b) * block_bytes,
                    payload + offset + static_cast<size_t>(i - first) * block_bytes,
                    static_cast<size_t>(block_bytes));
      }
      offset += static_cast<size_t>(block_bytes) * static_cast<size_t>(k - first);
    }
    if (copy_main) blocks_->Commit(main[static_cast<size_t>(i)], parent, t, salt);
    if (copy_window) window_blocks_->Commit(window[static_cast<size_t>(i)], parent, t, salt);
    parent = h;
  }
  blocks_->Free(main);
  if (window_blocks_ != nullptr) window_blocks_->Free(window);
  return true;
}

void EngineImpl::PreloadCheckpoints() {
  CheckpointStore& store = *options_.checkpoint_store;
  const int32_t bs = kv_.block_size;
  // At most half the cache, whatever was asked: requests need room too.
  const int64_t budget = std::min<int64_t>(options_.checkpoint_preload_tokens,
                                           int64_t{kv_.num_blocks} * bs / 2);
  int64_t restored = 0;
  int32_t files = 0;
  // A file's tokens from its size, before reading it: at most size / (4 bytes of token id + the
  // main cache's bytes per token), since the header and window blocks only add bytes.
  int64_t per_token = 4;
  for (int64_t b : checkpoint_layout_.layer_bytes) per_token += b;
  for (const auto& [name, size] : store.NewestFirst()) {
    if (restored + size / per_token > budget) break;
    CheckpointExpect expect;  // no fingerprint: whatever prefix the file holds
    expect.model_revision = options_.model_revision;
    expect.layout = checkpoint_layout_;
    absl::StatusOr<PrefixCheckpoint> c = store.Load(name, expect);
    if (!c.ok()) continue;  // another revision or layout, salted, or damaged: counted by Load
    if (restored + c->header.num_tokens > budget) break;
    if (!InstallBlocks(*c, 0)) break;
    MarkResident(ChainHash(c->tokens.data(), c->header.num_blocks(), bs, 0));
    restored += c->header.num_tokens;
    ++files;
  }
  if (files > 0) {
    spdlog::info("prefix checkpoints: {} restored at start ({} tokens)", files, restored);
  }
}

void EngineImpl::SaveCheckpoint(const Sequence& seq) {
  const int32_t bs = kv_.block_size;
  const int32_t k = seq.prompt_len / bs;
  // A P/D prefill is saved whatever its length, and whenever its file is missing now: the
  // decode side reads the file, and the one this process saved may have been evicted since.
  const bool prefill_only = seq.req.prefill_only;
  if (k == 0 || (!prefill_only && int64_t{k} * bs < options_.checkpoint_min_tokens) ||
      static_cast<int32_t>(seq.block_hashes.size()) < k) {
    return;
  }
  const uint64_t chain = seq.block_hashes[static_cast<size_t>(k - 1)];
  if (!prefill_only) {
    absl::MutexLock lock(&resident_mu_);
    if (resident_.contains(chain)) return;
  }
  CheckpointStore& store = *options_.checkpoint_store;
  const uint64_t name = CheckpointName(chain);
  if (prefill_only ? store.Exists(name) : store.Known(name)) {  // saved before (here or not)
    MarkResident(chain);
    return;
  }
  // The window blocks that a resume at block k reads; released ones are still findable in the
  // window cache's prefix cache unless evicted (then no checkpoint: it would be incomplete).
  const int32_t window_first =
      window_blocks_ != nullptr ? std::max(0, k * bs - window_tokens_ + 1) / bs : k;
  std::vector<int32_t> window(static_cast<size_t>(k), -1);
  for (int32_t b = window_first; b < k; ++b) {
    int32_t w = b < static_cast<int32_t>(seq.window_blocks.size()) ? seq.window_blocks[b] : -1;
    if (w < 0) {
      w = window_blocks_->Find(seq.block_hashes[static_cast<size_t>(b)],
                               seq.tokens.data() + static_cast<size_t>(b) * bs);
    }
    if (w < 0) return;
    window[static_cast<size_t>(b)] = w;
  }
  PrefixCheckpoint c;
  c.header.model_revision = options_.model_revision;
  c.header.layout = checkpoint_layout_;
  c.header.cache_salt = seq.req.cache_salt;
  c.header.window_first_block = window_blocks_ != nullptr ? window_first : k;
  c.tokens.assign(seq.tokens.begin(), seq.tokens.begin() + static_cast<ptrdiff_t>(k) * bs);
  size_t total = 0;
  for (const CheckpointRegion& r : checkpoint_regions_) {
    total += static_cast<size_t>(r.bytes_per_token * bs) * (r.window ? k - window_first : k);
  }
  c.payload.resize(total);
  char* out = c.payload.data();
  for (const CheckpointRegion& r : checkpoint_regions_) {
    const size_t block_bytes = static_cast<size_t>(r.bytes_per_token) * bs;
    for (int32_t b = r.window ? window_first : 0; b < k; ++b) {
      const int32_t slot = r.window ? window[static_cast<size_t>(b)] : seq.blocks[static_cast<size_t>(b)];
      std::memcpy(out, r.cache->layer_bytes(r.layer) + static_cast<size_t>(slot) * block_bytes,
                  block_bytes);
      out += block_bytes;
    }
  }
  if (store.Save(name, std::move(c))) MarkResident(chain);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const model::Model& model,
                                                       const EngineOptions& options) {
  auto engine = std::make_unique<EngineImpl>(model, options);
  DI_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace deepinfer::engine
