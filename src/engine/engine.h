#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "arch/causal_lm.h"
#include "arch/moe.h"
#include "engine/prefix_checkpoint.h"
#include "engine/request.h"
#include "engine/telemetry.h"
#include "model/model.h"
#include "util/histogram.h"

namespace deepinfer::engine {


// Expert parallelism over MPI (engine/expert_parallel.h has how it works): this process's place
// in the EP group and the transport of the experts' collectives.
// One per process; Init once, before any thread of the engine starts.
class ExpertParallelGroup {
 public:
  // Initialises MPI (as launched by mpirun; a plain start is a group of one).
  // Errors: Unimplemented "mpi_unavailable" when this binary was built without MPI; Internal
  //   "mpi_error" when MPI cannot start.
  // A watchdog thread exchanges a heartbeat with the other ranks every second (rank 0 with each
  // follower): a rank silent for `timeout_s` (stopped, hung, its host gone) turns health()
  // into ep_rank_lost on the rank that noticed, which logs the silent rank, waits 3 s (rank 0:
  // /health answers 503 and new requests are refused meanwhile, so a gateway takes the backend
  // out) and ends the job with exit status 3 (MPI_Abort).
  static absl::StatusOr<std::shared_ptr<ExpertParallelGroup>> Init(double timeout_s = 10);
  virtual ~ExpertParallelGroup() = default;

  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // The experts' collectives (arch::ExpertExchange); lives as long as the group.
  virtual arch::ExpertExchange& exchange() = 0;

  // Every rank passes a fingerprint of what it loaded (ModelFingerprint): Internal
  // "ep_mismatch" on every rank, naming the first rank that differs from rank 0, when they
  // are not all equal. A collective.
  virtual absl::Status CheckSameModel(uint64_t fingerprint) = 0;
  // Broadcasts `size` bytes from rank 0 into `data` (resized on the followers). A collective.
  virtual void Broadcast(std::vector<uint8_t>& data) = 0;
  // Data-parallel engines on rank 0 each step on a lane of their own: a communicator of its own,
  // so their calls and collectives never interleave. OpenLanes(n) makes lanes 1..n-1 (a
  // collective: every rank calls it with the same n, before any forward call); lane(0) is the
  // first lane, which the calls of this object use. A lane shares the group's rank, health and
  // watchdog, and keeps the group alive.
  virtual void OpenLanes(int n) = 0;
  virtual int num_lanes() const = 0;
  virtual std::shared_ptr<ExpertParallelGroup> lane(int i) = 0;
  // Telemetry of this rank (rank 0: what the engine publishes as deepinfer_ep_* metrics).
  struct Stats {
    int64_t forward_calls = 0;     // calls replayed on every rank (main, MTP, DSpark)
    int64_t broadcast_bytes = 0;   // the calls' descriptions rank 0 sent
    double broadcast_seconds = 0;  // wall time broadcasting them
    arch::ExpertExchange::Counters moe;  // the MoE layers' collectives and expert time
  };
  // Forward thread only.
  virtual Stats stats() const = 0;
  // OK, or Unavailable "ep_rank_lost" once the watchdog found a rank silent (the job then ends
  // a few seconds later). Any thread.
  virtual absl::Status health() const = 0;
};

// The routed experts of a DeepSeek-V3/V2 checkpoint that other ranks of `group` own, for
// model::LoadModel's `unread`: their FP8 weights are then not converted to BF16 here (V3's
// loader converts FP8 at load; V4 and V4.1 read their FP8 / FP4 as stored and need nothing).
// Null for a group of one. The group must outlive the loading.
model::UnreadTensors ExpertParallelUnread(ExpertParallelGroup* group);

// A follower's life: opens `lanes` lanes (rank 0's data-parallel engines), and on each (a
// thread per lane, `threads` split between them; 0: all cores) builds its model share over the
// lane's exchange (arch::CreateCausalLm) and replays that lane's calls until rank 0 stops it.
// Writes nothing to stdout (mpirun merges every rank's into one).
// Errors: those of CreateCausalLm; Internal "ep_mismatch" (the first lane's error).
absl::Status RunExpertParallelFollower(const model::Model& model, ExpertParallelGroup& group,
                                       int threads, int lanes = 1);

// Engine settings. Defaults follow the seed profile (prefill budget 2,048 tokens per step).
//
// Units: token counts in tokens; memory in bytes; 0 means "derive".
struct EngineOptions {
  int32_t max_num_seqs = 64;      // running sequences at once
  int32_t prefill_budget = 2048;  // tokens per step (prefill chunks + decodes)
  // Fairness (SchedulerOptions): a request with more than long_prefill_token_threshold tokens to
  // prefill computes long_prefill_chunk tokens per step and steps aside for newly admitted ones;
  // 0: off (one request at a time, as `generate` runs, gains nothing from it).
  int32_t long_prefill_token_threshold = 0;
  int32_t long_prefill_chunk = 32;
  int32_t block_size = 16;        // tokens per KV block
  int64_t kv_cache_tokens = 0;    // capacity in tokens; 0: from kv_cache_memory_bytes
  int64_t kv_cache_memory_bytes = int64_t{2} << 30;
  int32_t max_model_len = 0;  // 0: the model's trained context
  int32_t num_threads = 0;    // 0: hardware concurrency
  bool enable_prefix_caching = true;
  uint64_t seed = 0;  // fallback seed for requests without one
  // The drafter (speculative.h). kAuto: DSpark when the checkpoint has its stages, else MTP
  // when speculative_tokens > 0, else none. kNoDspark (--no-dspark): MTP with
  // speculative_tokens (1 when 0) when the model has MTP modules, else none. kDspark and kMtp
  // fail at start without the stages / modules.
  enum class SpeculativeMethod { kAuto, kNone, kMtp, kDspark, kNoDspark };
  SpeculativeMethod speculative_method = SpeculativeMethod::kAuto;
  // Draft tokens per step: MTP's chain length (0: off under kAuto), DSpark's cap on its block
  // (0: the whole block). At most kMaxSpeculativeTokens. Constrained requests (structured outputs,
  // enforced tool choice) draft too, cut at the first draft their grammar refuses; greedy output
  // is identical to non-speculative decoding, sampled output has the same distribution
  // (rejection sampling, speculative.h).
  int32_t speculative_tokens = 0;
  // DSpark: a block's drafts stop before the first whose confidence is below this (0: never).
  float dspark_confidence_threshold = 0.0f;
  // Forward-pass arithmetic; unset: the model's default (arch::CausalLm::default_numerics).
  // kGgml (bit-identical to llama.cpp, Llama models only) is for one sequence at a time, as
  // `generate` runs it: it is not batch invariant (docs/parity.md).
  std::optional<arch::Numerics> numerics;
  // Data-parallel ranks stepping in turn share this lock (engine/data_parallel.h); null: none.
  std::shared_ptr<absl::Mutex> step_lock;
  // This engine's data-parallel rank (set by CreateDataParallelEngine): names its telemetry file.
  int32_t dp_rank_index = 0;
  // Batch telemetry (engine/telemetry.h); off unless telemetry.dir is set.
  TelemetryConfig telemetry;
  // Element type of the main KV cache: f32, or f16 / bf16 (half the memory per token and half
  // the bytes attention reads; Llama with fast numerics; arch::CausalLm::SupportsKvDtype).
  kernels::KvDtype kv_cache_dtype = kernels::KvDtype::kF32;
  // Persistent prefix checkpoints (engine/prefix_checkpoint.h); null: off. Shared by the ranks.
  // A prompt's full blocks are saved once its prefill completes when they hold at least
  // checkpoint_min_tokens tokens; a request whose prompt starts with a saved chain that this
  // rank has not restored or saved itself gets it restored (verified against model_revision and
  // the layout) before its prefix-cache lookup.
  std::shared_ptr<CheckpointStore> checkpoint_store;
  int32_t checkpoint_min_tokens = 1024;
  std::string model_revision;
  // False: never save (the decode side of a P/D pair only reads what its prefill side wrote);
  // prefill_only requests are saved regardless.
  bool checkpoint_save = true;
  // At start (in Create, before the engine thread runs), the newest checkpoints of the store
  // (unsalted, this revision and layout, verified) are restored into the prefix cache until
  // they hold this many tokens; 0: none (restores then happen on a request's cache miss only).
  int64_t checkpoint_preload_tokens = 0;
  // Expert parallelism (engine/expert_parallel.h): this engine is rank 0 of the group and every
  // forward call is replayed by the other ranks, each running its share of the routed experts;
  // null: one process runs every expert. With data-parallel ranks CreateDataParallelEngine gives
  // each engine a lane of its own (ExpertParallelGroup::OpenLanes).
  std::shared_ptr<ExpertParallelGroup> expert_parallel;
};

// A prefix checkpoint of a prompt (Engine::CheckpointFor).
struct CheckpointRef {
  std::string file;        // "<16 hex digits>.dipc"; "" for none
  int32_t num_tokens = 0;  // prompt tokens it covers (whole blocks)
};

// Latency histograms (seconds) use the shared bucket shape.
using Histogram = util::Histogram;

// Counters and gauges for /metrics.
struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0;  // fraction of blocks in use, 0..1
  int64_t num_blocks_total = 0;
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // tokens looked up
  int64_t prefix_cache_hits = 0;     // tokens found
  int64_t prompt_tokens = 0;         // total prompt tokens of finished + running requests
  int64_t prefill_tokens = 0;        // prompt tokens computed so far, chunk by chunk
  int64_t generation_tokens = 0;
  int64_t num_requests_finished[5] = {0, 0, 0, 0, 0};  // by FinishReason
  // Speculative decoding: verification steps that carried drafts, drafted tokens, accepted ones.
  // Acceptance length = 1 + accepted / drafts; acceptance rate = accepted / draft tokens.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  int64_t spec_accepted_per_pos[kMaxSpeculativeTokens] = {};  // SchedulerCounters'
  // Structured outputs: tokens sampled under a constraint, and the engine-thread seconds their
  // token masks took (xgrammar's mask plus setting the banned logits).
  int64_t constraint_masks = 0;
  double constraint_mask_seconds = 0;
  // Images (engine/image_spans.h): images the vision tower encoded, span-row lookups the encoder
  // cache answered, and the engine-thread seconds the encodes took.
  int64_t images_encoded = 0;
  int64_t encoder_cache_hits = 0;
  double image_encode_seconds = 0;
  // Expert parallelism (ExpertParallelGroup::Stats): ranks (0: off) and rank 0's counters.
  int32_t ep_ranks = 0;
  int64_t ep_forward_calls = 0;
  int64_t ep_exchange_bytes = 0;
  double ep_exchange_seconds = 0;
  double ep_expert_seconds = 0;
  int64_t ep_broadcast_bytes = 0;
  double ep_broadcast_seconds = 0;
  Histogram ttft, tpot, e2e, queue_time;
};

// The inference engine: one thread runs scheduling steps (continuous batching, chunked prefill,
// paged KV cache with prefix caching, preemption by recompute) over a CausalLm.
//
// Threads: Submit, Stats and the streams are thread-safe; everything else runs on the engine's
//   own thread, which never blocks on I/O or on a client.
// Lifetime: borrows the Model; destroy the Engine first. The destructor stops the thread and
//   finishes every open stream with kCancelled.
class Engine {
 public:
  virtual ~Engine() = default;

  // Queues a request and returns its stream; never blocks on the engine.
  // Errors (returned, nothing queued): InvalidArgument "context_length_exceeded" when the prompt
  //   plus max_tokens exceed max_model_len; InvalidArgument "invalid_token" for ids outside the
  //   vocabulary; InvalidArgument "empty_prompt"; ResourceExhausted "kv_cache_too_small" when
  //   the request alone could never fit in the KV cache; Unavailable "shutting_down";
  //   InvalidArgument "invalid_dp_rank" when request.dp_rank names a rank the engine does not
  //   have.
  virtual absl::StatusOr<std::shared_ptr<RequestStream>> Submit(GenerateRequest request) = 0;

  // The totals as of the engine's latest step, and never older than a finish a client has seen:
  // once a request's stream reports its finish, its tokens, drafts and finish are counted.
  virtual EngineStats Stats() const = 0;
  // Data-parallel ranks (engine/data_parallel.h): how many, and each one's stats and readiness.
  // A plain engine is rank 0 of 1. REQUIRES: 0 <= rank < num_ranks().
  virtual int32_t num_ranks() const { return 1; }
  virtual EngineStats RankStats(int32_t rank) const { return Stats(); }
  virtual bool rank_ready(int32_t rank) const { return ready(); }
  virtual int32_t max_model_len() const = 0;
  virtual int64_t kv_capacity_tokens() const = 0;
  // KV cache bytes one token occupies (all layers, the MTP modules' too; not the window cache,
  // whose size does not grow with the context), and the arithmetic the model runs with: what
  // serve prints at start-up.
  virtual int64_t kv_bytes_per_token() const = 0;
  // The window cache (arch::KvLayout): bytes reserved for it, and the positions of each
  // sequence it keeps; 0 for architectures without one.
  virtual int64_t kv_window_cache_bytes() const { return 0; }
  virtual int32_t kv_window_tokens() const { return 0; }
  virtual const char* numerics_name() const = 0;  // arch::NumericsName
  // The drafter in use: "dspark", "mtp" or "none", and the drafts per step it makes (0: none).
  virtual const char* drafter_name() const { return "none"; }
  virtual int32_t draft_tokens_per_step() const { return 0; }
  // True once the model is loaded and a warm-up step has run.
  virtual bool ready() const = 0;
  // OK while the engine can serve; else why not (Unavailable "ep_rank_lost": an expert-parallel
  // rank stopped answering). Any thread.
  virtual absl::Status health() const { return absl::OkStatus(); }
  virtual const model::Model& model() const = 0;
  // The checkpoint that holds, or would hold, the KV of `prompt`'s full blocks under
  // `cache_salt`: its file name ("<16 hex digits>.dipc") and the tokens it covers. Empty without
  // a checkpoint store or a full block. The name depends on the token ids, the model revision
  // and the cache layout only (never on the rank). Threads: any.
  virtual CheckpointRef CheckpointFor(const std::vector<int32_t>& prompt,
                                      uint64_t cache_salt) const {
    return {};
  }

  // Creates the engine and starts its thread (which runs a warm-up step).
  // Errors: those of arch::CreateCausalLm; Unimplemented "unsupported_kv_cache_dtype" when the
  //   architecture's attention does not read options.kv_cache_dtype under the numerics chosen;
  //   Unimplemented "unsupported_numerics" when the
  //   architecture lacks options.numerics; InvalidArgument "bad_option" for nonsensical options;
  //   InvalidArgument "speculative_unsupported" when the drafter asked for (MTP, or DSpark) is not
  //   in the checkpoint; those of Telemetry::Open (InvalidArgument "bad_telemetry" for a used run id).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const model::Model& model,
                                                        const EngineOptions& options);
};

// Data-parallel ranks in one process (how requests are routed between them: data_parallel.h).
//
// How the ranks share the cores.
enum class DataParallelCores {
  // Each rank gets num_threads / ranks worker threads (at least one) and steps on its own.
  kSplit,
  // Every rank gets all num_threads threads and the ranks step one at a time (a shared lock
  // around each step).
  kTurns,
};

// Creates `ranks` engines from `options`, which apply per rank except:
//   kv_cache_memory_bytes / kv_cache_tokens: the total, split evenly between the ranks;
//   num_threads: the process's threads (0: hardware concurrency), shared as `cores` says.
// ranks == 1 gives a plain engine with pinning to rank 0 accepted.
// Errors: those of Engine::Create; InvalidArgument "bad_option" for ranks < 1 or > 64.
// Threads: as Engine; Submit may be called from any thread.
absl::StatusOr<std::unique_ptr<Engine>> CreateDataParallelEngine(
    const model::Model& model, const EngineOptions& options, int32_t ranks,
    DataParallelCores cores = DataParallelCores::kSplit);

// The matmul kernels `model` runs with, for serve's start-up log: the ISA in use (and the CPU's,
// when DEEPINFER_ISA lowered it) and, per weight type among its matrices, the ISA whose kernels
// multiply it (kernels::MatMulKernelsByType), e.g.
// "ISA avx2 (the CPU has avx512; DEEPINFER_ISA); by weight type: BF16 avx2, F8_E4M3 avx2".
std::string MatMulKernelsSummary(const model::Model& model);

}  // namespace deepinfer::engine
