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
#include "arch/vision_tower.h"
#include "engine/block_manager.h"
#include "engine/checkpointer.h"
#include "engine/executor.h"
#include "engine/expert_parallel.h"
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
  absl::Status health() const override {
    return options_.expert_parallel != nullptr ? options_.expert_parallel->health()
                                               : absl::OkStatus();
  }
  int32_t max_model_len() const override { return max_model_len_; }
  int64_t kv_capacity_tokens() const override { return int64_t{kv_.num_blocks} * kv_.block_size; }
  int64_t kv_bytes_per_token() const override {
    return kv_.bytes_per_token() + mtp_kv_.bytes_per_token();  // the MTP cache shares its blocks
  }
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
                              uint64_t cache_salt) const override {
    return checkpointer_ != nullptr ? checkpointer_->CheckpointFor(prompt, cache_salt)
                                    : CheckpointRef{};
  }

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

  // Prefix checkpoints: null unless options_.checkpoint_store is set (made in Init).
  std::unique_ptr<Checkpointer> checkpointer_;

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
    CheckpointCaches caches;
    caches.kv = &kv_;
    caches.mtp_kv = &mtp_kv_;
    caches.window_kv = &window_kv_;
    caches.blocks = blocks_.get();
    caches.window_blocks = window_blocks_.get();
    caches.window_tokens = window_tokens_;
    caches.numerics = arch::NumericsName(numerics_);
    if (const std::string packing = lm_->kv_packing(); !packing.empty()) {
      caches.numerics += "+" + packing;
    }
    caches.architecture = model_.config.architecture;
    if (options_.expert_parallel != nullptr) {
      caches.restored = [this](arch::KvCache& cache, int layer, size_t offset, size_t bytes) {
        MirrorKvBytes(*lm_, cache, layer, offset, bytes);
      };
    }
    checkpointer_ = std::make_unique<Checkpointer>(options_, caches);
    // A restored chain whose last block is evicted is no longer resident: a later request
    // reads its file again instead of recomputing (sequences free blocks last to first, so the
    // last block goes first).
    blocks_->set_evict_hook([this](uint64_t hash) { checkpointer_->Forget(hash); });
    scheduler_->set_prompt_computed_hook([this](const Sequence& seq) {
      if (options_.checkpoint_save || seq.req.prefill_only) checkpointer_->Save(seq);
    });
    if (options_.checkpoint_preload_tokens > 0) {
      checkpointer_->Preload();  // the engine thread does not run yet: the caches are its own
    }
  }
  executor_ = std::make_unique<Executor>(*lm_, kv_, *pool_, spec_tokens_ > 0 && !dspark_,
                                         model_.tokenizer.eog_ids);
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
  ExpertParallelGroup* ep = options_.expert_parallel.get();
  DI_ASSIGN_OR_RETURN(lm_, arch::CreateCausalLm(model_, ep != nullptr ? &ep->exchange() : nullptr));
  if (ep != nullptr) {
    DI_RETURN_IF_ERROR(ep->CheckSameModel(ModelFingerprint(model_)));
    lm_ = MakeExpertParallelLeader(std::move(lm_), options_.expert_parallel);
  }
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
  // The MTP modules' cache shares the main cache's blocks: its bytes count in each token's.
  const bool mtp = spec_tokens_ > 0 && !dspark_;
  if (mtp) main_floats += lm_->draft_heads()->num_mtp_layers() * lm_->kv_floats_per_token();
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
  if (mtp) {
    // A per-token cache without a window cache (V4's MTP modules keep their window keys in it).
    DI_RETURN_IF_ERROR(mtp_kv_.Allocate(lm_->draft_heads()->num_mtp_layers(), bs, static_cast<int>(num_blocks),
                                        lm_->kv_floats_per_token()));
  }
  blocks_ = std::make_unique<BlockManager>(static_cast<int32_t>(num_blocks), bs,
                                           options_.enable_prefix_caching);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RequestStream>> EngineImpl::Submit(GenerateRequest request) {
  DI_RETURN_IF_ERROR(health());
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
  const arch::VisionTower* tower = lm_->vision_tower();
  DI_ASSIGN_OR_RETURN(std::vector<ImageSpan> spans,
                      PlanImageSpans(request, tower != nullptr ? &tower->config() : nullptr));
  if (!spans.empty() && request.prefill_only) {
    return InvalidArgumentError(util::codes::kUnsupportedOnPd,
                                "prefill/decode disaggregation carries text prompts only");
  }
  // A prompt-logprobs request computes its whole prompt: nothing is restored for it.
  std::shared_ptr<const PrefixCheckpoint> restore =
      request.prompt_logprobs >= 0 || checkpointer_ == nullptr
          ? nullptr
          : checkpointer_->Find(request, spans);
  if (request.constraint != nullptr) request.ignore_eos = false;  // the grammar's end is an end
  std::unique_ptr<Sequence> seq = Sequence::Create(0, std::move(request), Clock::now());
  seq->restore = std::move(restore);
  seq->image_spans = std::move(spans);
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
      if (incoming.front()->restore != nullptr) checkpointer_->Install(*incoming.front());
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
  if (drafter_ != nullptr) {
    drafter_->Draft(plan, executor_->hidden());
    for (const ScheduledSeq& s : plan.seqs) TrimDraftsToConstraint(*s.seq);
  }
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
  if (ExpertParallelGroup* ep = options_.expert_parallel.get(); ep != nullptr) {
    const ExpertParallelGroup::Stats e = ep->stats();
    stats_.ep_ranks = ep->ranks();
    stats_.ep_forward_calls = e.forward_calls;
    stats_.ep_exchange_bytes = e.moe.bytes;
    stats_.ep_exchange_seconds = e.moe.exchange_seconds;
    stats_.ep_expert_seconds = e.moe.expert_seconds;
    stats_.ep_broadcast_bytes = e.broadcast_bytes;
    stats_.ep_broadcast_seconds = e.broadcast_seconds;
  }
  stats_.images_encoded = executor_->encoder_cache().encodes();
  stats_.encoder_cache_hits = executor_->encoder_cache().hits();
  stats_.image_encode_seconds = executor_->encoder_cache().encode_seconds();
  stats_.ttft = c.ttft;
  stats_.tpot = c.tpot;
  stats_.e2e = c.e2e;
  stats_.queue_time = c.queue_time;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const model::Model& model,
                                                       const EngineOptions& options) {
  auto engine = std::make_unique<EngineImpl>(model, options);
  DI_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace deepinfer::engine
