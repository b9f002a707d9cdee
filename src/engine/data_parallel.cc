#include "engine/data_parallel.h"

#include <algorithm>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

// Adds `b`'s counters into `a` (histograms bucket by bucket; both have the shared bounds).
void AddHistogram(util::Histogram& a, const util::Histogram& b) {
  if (a.counts.empty()) {
    a = b;
    return;
  }
  for (size_t i = 0; i < a.counts.size() && i < b.counts.size(); ++i) a.counts[i] += b.counts[i];
  a.sum += b.sum;
  a.count += b.count;
}

class DataParallelEngine final : public Engine {
 public:
  DataParallelEngine(std::vector<std::unique_ptr<Engine>> ranks, int32_t block_size,
                     uint64_t seed)
      : ranks_(std::move(ranks)), block_size_(block_size), hash_seed_(seed), inflight_(ranks_.size()) {
    int64_t blocks = 0;
    for (const auto& r : ranks_) blocks += r->kv_capacity_tokens() / std::max(1, block_size_);
    max_entries_ = std::max<int64_t>(1024, blocks);
  }

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(GenerateRequest request) override {
    const int32_t n = num_ranks();
    if (request.dp_rank >= n) {
      return InvalidArgumentError(
          util::codes::kInvalidDpRank,
          fmt::format("data-parallel rank {} does not exist: this server has ranks 0..{}",
                      request.dp_rank, n - 1));
    }
    const std::vector<uint64_t> hashes = BlockHashes(request);
    absl::MutexLock lock(&mu_);
    const std::vector<int64_t> loads = Loads();
    int32_t rank = request.dp_rank;
    if (rank < 0) rank = Route(hashes, loads);
    request.dp_rank = -1;
    absl::StatusOr<std::shared_ptr<RequestStream>> stream =
        ranks_[rank]->Submit(std::move(request));
    if (!stream.ok()) return stream;
    inflight_[rank].push_back(*stream);
    for (uint64_t h : hashes) Remember(h, rank);
    return stream;
  }

  EngineStats Stats() const override {
    std::vector<EngineStats> all;
    for (const auto& r : ranks_) all.push_back(r->Stats());
    EngineStats total = all[0];
    // Usage of the whole cache: each rank's weighted by its blocks.
    double used = all[0].kv_cache_usage * static_cast<double>(all[0].num_blocks_total);
    for (size_t i = 1; i < all.size(); ++i) {
      const EngineStats& s = all[i];
      used += s.kv_cache_usage * static_cast<double>(s.num_blocks_total);
      total.num_running += s.num_running;
      total.num_waiting += s.num_waiting;
      total.num_blocks_total += s.num_blocks_total;
      total.num_preemptions += s.num_preemptions;
      total.prefix_cache_queries += s.prefix_cache_queries;
      total.prefix_cache_hits += s.prefix_cache_hits;
      total.prompt_tokens += s.prompt_tokens;
      total.prefill_tokens += s.prefill_tokens;
      total.generation_tokens += s.generation_tokens;
      for (int k = 0; k < 5; ++k) total.num_requests_finished[k] += s.num_requests_finished[k];
      total.spec_num_drafts += s.spec_num_drafts;
      total.spec_num_draft_tokens += s.spec_num_draft_tokens;
      total.spec_num_accepted_tokens += s.spec_num_accepted_tokens;
      for (int32_t i = 0; i < kMaxSpeculativeTokens; ++i) {
        total.spec_accepted_per_pos[i] += s.spec_accepted_per_pos[i];
      }
      total.constraint_masks += s.constraint_masks;
      total.constraint_mask_seconds += s.constraint_mask_seconds;
      total.images_encoded += s.images_encoded;
      total.encoder_cache_hits += s.encoder_cache_hits;
      total.image_encode_seconds += s.image_encode_seconds;
      AddHistogram(total.ttft, s.ttft);
      AddHistogram(total.tpot, s.tpot);
      AddHistogram(total.e2e, s.e2e);
      AddHistogram(total.queue_time, s.queue_time);
    }
    total.kv_cache_usage =
        total.num_blocks_total > 0 ? used / static_cast<double>(total.num_blocks_total) : 0.0;
    return total;
  }
  int32_t num_ranks() const override { return static_cast<int32_t>(ranks_.size()); }
  EngineStats RankStats(int32_t rank) const override { return ranks_[rank]->Stats(); }
  bool rank_ready(int32_t rank) const override { return ranks_[rank]->ready(); }

  int32_t max_model_len() const override { return ranks_[0]->max_model_len(); }
  int64_t kv_capacity_tokens() const override {
    int64_t t = 0;
    for (const auto& r : ranks_) t += r->kv_capacity_tokens();
    return t;
  }
  int64_t kv_bytes_per_token() const override { return ranks_[0]->kv_bytes_per_token(); }
  int64_t kv_window_cache_bytes() const override {
    int64_t b = 0;
    for (const auto& r : ranks_) b += r->kv_window_cache_bytes();
    return b;
  }
  int32_t kv_window_tokens() const override { return ranks_[0]->kv_window_tokens(); }
  const char* numerics_name() const override { return ranks_[0]->numerics_name(); }
  const char* drafter_name() const override { return ranks_[0]->drafter_name(); }
  int32_t draft_tokens_per_step() const override { return ranks_[0]->draft_tokens_per_step(); }
  bool ready() const override {
    return std::all_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->ready(); });
  }
  const model::Model& model() const override { return ranks_[0]->model(); }
  CheckpointRef CheckpointFor(const std::vector<int32_t>& prompt,
                              uint64_t cache_salt) const override {
    return ranks_[0]->CheckpointFor(prompt, cache_salt);
  }

 private:
  // Chain hashes of the prompt's full blocks (block i's hash covers tokens [0, (i+1) * B)),
  // salted like the prefix cache so salted requests never share.
  std::vector<uint64_t> BlockHashes(const GenerateRequest& r) const {
    std::vector<uint64_t> out;
    const size_t B = static_cast<size_t>(block_size_);
    uint64_t h = hash_seed_ ^ (r.cache_salt * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i + B <= r.prompt.size(); i += B) {
      for (size_t j = i; j < i + B; ++j) {
        // splitmix64 over (running hash, token): cheap and well mixed.
        uint64_t z = h + 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(r.prompt[j]);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        h = z ^ (z >> 31);
      }
      out.push_back(h);
    }
    return out;
  }

  // Drops finished streams from every rank's list; returns each rank's unfinished count.
  std::vector<int64_t> Loads() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<int64_t> loads(ranks_.size());
    for (size_t r = 0; r < ranks_.size(); ++r) {
      auto& streams = inflight_[r];
      streams.erase(std::remove_if(streams.begin(), streams.end(),
                                   [](const std::weak_ptr<RequestStream>& w) {
                                     auto s = w.lock();
                                     return s == nullptr || s->finished();
                                   }),
                    streams.end());
      loads[r] = static_cast<int64_t>(streams.size());
    }
    return loads;
  }

  // The rank for an unpinned request. Candidates are the ranks whose load is within
  // AffinitySlack of the least loaded; among them the one holding the longest run of the
  // prompt's blocks wins, then the less loaded, then the next in turn after the last choice.
  // A prefix many prompts share (a system prompt) therefore ends up cached on every rank and
  // stops deciding anything once the ranks' loads differ; the round-robin tie-break spreads
  // requests that arrive while every rank is idle.
  int32_t Route(const std::vector<uint64_t>& hashes, const std::vector<int64_t>& loads)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int32_t n = num_ranks();
    const int64_t least = *std::min_element(loads.begin(), loads.end());
    const int64_t bound = least + AffinitySlack(least);
    // matched[r]: leading blocks rank r took.
    std::vector<int32_t> matched(n, 0);
    uint64_t alive = ~0ull;  // ranks whose run has not broken yet
    for (size_t i = 0; i < hashes.size() && alive != 0; ++i) {
      auto it = owner_.find(hashes[i]);
      alive &= it == owner_.end() ? 0 : it->second.ranks;
      for (int32_t r = 0; r < n; ++r) {
        if (alive >> r & 1) matched[r] = static_cast<int32_t>(i + 1);
      }
    }
    int32_t best = -1;
    for (int32_t k = 0; k < n; ++k) {
      const int32_t r = (next_ + k) % n;
      if (loads[r] > bound) continue;
      if (best < 0 || matched[r] > matched[best] ||
          (matched[r] == matched[best] && loads[r] < loads[best])) {
        best = r;
      }
    }
    next_ = (best + 1) % n;
    return best;
  }

  // How many more unfinished requests than the least loaded rank a rank may hold and still be
  // chosen for its cached prefix: a recompute of the prefix is cheaper than queueing behind a
  // few sequences, not behind many (SGLang's balance thresholds play the same part).
  static int64_t AffinitySlack(int64_t least) { return 2 + least / 2; }

  void Remember(uint64_t hash, int32_t rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Entry& e = owner_[hash];
    e.ranks |= 1ull << rank;
    e.stamp = ++clock_;
    order_.push_back({hash, e.stamp});
    // Forget the oldest entries past the bound (skipping queue records a later use replaced).
    while (static_cast<int64_t>(owner_.size()) > max_entries_ && !order_.empty()) {
      auto [h, stamp] = order_.front();
      order_.pop_front();
      auto it = owner_.find(h);
      if (it != owner_.end() && it->second.stamp == stamp) owner_.erase(it);
    }
    // Records of entries used again pile up in the queue; rebuild it when it is mostly stale.
    if (static_cast<int64_t>(order_.size()) > 4 * max_entries_) {
      std::deque<std::pair<uint64_t, uint64_t>> fresh;
      for (const auto& rec : order_) {
        auto it = owner_.find(rec.first);
        if (it != owner_.end() && it->second.stamp == rec.second) fresh.push_back(rec);
      }
      order_.swap(fresh);
    }
  }

  struct Entry {
    uint64_t ranks = 0;  // bit r: rank r took this block (ranks <= 64)
    uint64_t stamp = 0;
  };

  const std::vector<std::unique_ptr<Engine>> ranks_;
  const int32_t block_size_;
  const uint64_t hash_seed_;
  int64_t max_entries_ = 1024;

  absl::Mutex mu_;
  // Unfinished streams per rank (their count is the rank's load).
  std::vector<std::vector<std::weak_ptr<RequestStream>>> inflight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Entry> owner_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<uint64_t, uint64_t>> order_ ABSL_GUARDED_BY(mu_);  // (hash, stamp)
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t next_ ABSL_GUARDED_BY(mu_) = 0;  // where the round-robin tie-break starts
};

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> CreateDataParallelEngine(const model::Model& model,
                                                                 const EngineOptions& options,
                                                                 int32_t ranks,
                                                                 DataParallelCores cores) {
  if (ranks < 1 || ranks > 64) {
    return InvalidArgumentError(util::codes::kBadOption,
                                "--data-parallel-size must be between 1 and 64");
  }
  if (ranks == 1) return Engine::Create(model, options);
  // Expert parallelism: a lane (communicator) per engine, opened on every EP rank alike.
  if (options.expert_parallel != nullptr) options.expert_parallel->OpenLanes(ranks);
  const int threads = options.num_threads > 0
                          ? options.num_threads
                          : static_cast<int>(std::thread::hardware_concurrency());
  EngineOptions per_rank = options;
  per_rank.kv_cache_memory_bytes = options.kv_cache_memory_bytes / ranks;
  per_rank.kv_cache_tokens = options.kv_cache_tokens / ranks;
  if (options.kv_cache_tokens > 0 && per_rank.kv_cache_tokens < 1) per_rank.kv_cache_tokens = 1;
  if (cores == DataParallelCores::kSplit) {
    per_rank.num_threads = std::max(1, threads / ranks);
  } else {
    per_rank.num_threads = std::max(1, threads);
    per_rank.step_lock = std::make_shared<absl::Mutex>();
  }
  std::vector<std::unique_ptr<Engine>> engines;
  for (int32_t r = 0; r < ranks; ++r) {
    EngineOptions o = per_rank;
    o.seed = options.seed + static_cast<uint64_t>(r) * 0x632BE59BD9B4E019ull;
    o.dp_rank_index = r;
    if (options.expert_parallel != nullptr) o.expert_parallel = options.expert_parallel->lane(r);
    DI_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(model, o));
    engines.push_back(std::move(e));
  }
  return std::unique_ptr<Engine>(
      new DataParallelEngine(std::move(engines), options.block_size, options.seed ^ 0xD1B54A32D192ED03ull));
}

}  // namespace deepinfer::engine
