#include "engine/expert_parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "util/aligned_vector.h"
#include "util/error_codes.h"
#include "util/status.h"
#include "util/thread_pool.h"
#include "xxhash.h"

#if DI_HAVE_MPI
// The C API only: OpenMPI's deprecated C++ bindings need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace deepinfer::engine {

uint64_t ModelFingerprint(const model::Model& model) {
  const model::ModelConfig& c = model.config;
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}\n", DEEPINFER_VERSION,
                                c.architecture, c.num_layers, c.hidden, c.vocab, c.ffn_hidden,
                                c.num_heads, c.max_context, c.rms_norm_eps, c.rope_theta);
  std::vector<const tensor::TensorView*> table;
  table.reserve(model.tensors.size());
  for (const auto& [name, t] : model.tensors) table.push_back(&t);
  std::sort(table.begin(), table.end(),
            [](const auto* a, const auto* b) { return a->name < b->name; });
  for (const tensor::TensorView* t : table) {
    // Not the dtype: a rank leaves other ranks' FP8 experts unconverted (ExpertParallelUnread).
    key += fmt::format("{}:{}\n", t->name, fmt::join(t->shape, ","));
  }
  for (const auto& f : model.files) key += fmt::format("file {}\n", f->size());
  return XXH3_64bits(key.data(), key.size());
}

namespace {

// The leader's calls, as the followers replay them.
enum class Op : int32_t {
  kStop = 1,
  kCache,        // declares a KV cache: the followers allocate one of the same geometry
  kSetNumerics,
  kEnableDspark,
  kForward,
  kForwardMtp,
  kDsparkPropose,
  kKvBytes,      // bytes written into a cache outside a forward call (a checkpoint restore)
};

// A message: plain values appended in order, read back in the same order. Writes into a
// buffer its owner keeps, so a step's messages allocate nothing once the buffer has grown.
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& buffer) : bytes_(buffer) { bytes_.clear(); }
  template <typename T>
  void Put(T v) {
    Raw(&v, sizeof(T));
  }
  template <typename T>
  void PutArray(const T* p, int64_t n) {
    Put<int64_t>(n);
    if (n > 0) Raw(p, n * static_cast<int64_t>(sizeof(T)));
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  void Raw(const void* p, int64_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<uint8_t>& bytes_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : bytes_(b) {}
  template <typename T>
  T Get() {
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  void GetArray(std::vector<T>& out) {
    const auto n = Get<int64_t>();
    out.resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(out.data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += static_cast<size_t>(n) * sizeof(T);
  }

 private:
  const std::vector<uint8_t>& bytes_;
  size_t pos_ = 0;
};

void PutBatch(Writer& w, const arch::ForwardBatch& b, int64_t hidden) {
  w.PutArray(b.tokens, b.num_tokens);
  w.Put<int64_t>(static_cast<int64_t>(b.seqs.size()));
  for (const arch::SequenceSlice& s : b.seqs) {
    w.Put(s.token_offset);
    w.Put(s.num_tokens);
    w.Put(s.start_pos);
    w.Put(s.num_logits);
    w.PutArray(s.block_table, s.num_blocks);
    w.PutArray(s.window_block_table, s.window_block_table != nullptr ? s.num_blocks : 0);
  }
  const int64_t typed = b.token_types != nullptr ? b.num_tokens : 0;
  w.PutArray(b.token_types, typed);
  int64_t span_rows = 0;
  for (int64_t i = 0; i < typed; ++i) span_rows += b.token_types[i] >= 0 ? 1 : 0;
  w.PutArray(b.span_rows, b.span_rows != nullptr ? span_rows * hidden : 0);
}

// A batch read back: the ForwardBatch points into the vectors.
struct BatchCopy {
  std::vector<int32_t> tokens;
  std::vector<std::vector<int32_t>> tables, window_tables;
  std::vector<int8_t> token_types;
  std::vector<float> span_rows;
  arch::ForwardBatch batch;

  void Read(Reader& r) {
    r.GetArray(tokens);
    const auto n = r.Get<int64_t>();
    tables.resize(n);
    window_tables.resize(n);
    batch = {};
    batch.tokens = tokens.data();
    batch.num_tokens = static_cast<int32_t>(tokens.size());
    for (int64_t i = 0; i < n; ++i) {
      arch::SequenceSlice s;
      s.token_offset = r.Get<int32_t>();
      s.num_tokens = r.Get<int32_t>();
      s.start_pos = r.Get<int32_t>();
      s.num_logits = r.Get<int32_t>();
      r.GetArray(tables[i]);
      r.GetArray(window_tables[i]);
      s.block_table = tables[i].data();
      s.num_blocks = static_cast<int32_t>(tables[i].size());
      s.window_block_table = window_tables[i].empty() ? nullptr : window_tables[i].data();
      batch.seqs.push_back(s);
    }
    r.GetArray(token_types);
    r.GetArray(span_rows);
    batch.token_types = token_types.empty() ? nullptr : token_types.data();
    batch.span_rows = span_rows.empty() ? nullptr : span_rows.data();
  }
};

class LeaderLm final : public arch::CausalLm, public arch::DraftHeads {
 public:
  LeaderLm(std::unique_ptr<arch::CausalLm> lm, std::shared_ptr<ExpertParallelGroup> group)
      : lm_(std::move(lm)), heads_(lm_->draft_heads()), group_(std::move(group)) {}
  ~LeaderLm() override {
    Writer w(message_);
    w.Put(Op::kStop);
    Send(w);
  }

  const model::ModelConfig& config() const override { return lm_->config(); }
  int64_t kv_floats_per_token() const override { return lm_->kv_floats_per_token(); }
  arch::KvLayout kv_layout(int32_t block_size) const override {
    return lm_->kv_layout(block_size);
  }
  bool SupportsKvDtype(kernels::KvDtype dtype) const override {
    return lm_->SupportsKvDtype(dtype);
  }
  arch::Numerics default_numerics() const override { return lm_->default_numerics(); }
  std::string kv_packing() const override { return lm_->kv_packing(); }
  arch::VisionTower* vision_tower() override { return lm_->vision_tower(); }
  arch::DraftHeads* draft_heads() override { return heads_ != nullptr ? this : nullptr; }

  bool SetNumerics(arch::Numerics numerics) override {
    if (!lm_->SetNumerics(numerics)) return false;
    Writer w(message_);
    w.Put(Op::kSetNumerics);
    w.Put(numerics);
    Send(w);
    return true;
  }

  void Forward(const arch::ForwardBatch& batch, arch::KvCache& kv, float* logits,
               util::ThreadPool& pool) override {
    const int32_t cache = CacheId(kv);  // may send a declaration first
    Writer w(message_);
    w.Put(Op::kForward);
    w.Put(cache);
    PutBatch(w, batch, config().hidden);
    Send(w);
    lm_->Forward(batch, kv, logits, pool);
  }

  // DraftHeads: what the heads know is the leader's own; the calls that run layers go out.
  Kind kind() const override { return heads_->kind(); }
  int num_mtp_layers() const override { return heads_->num_mtp_layers(); }
  int64_t mtp_hidden_size() const override { return heads_->mtp_hidden_size(); }
  void FinalHidden(float* out) const override { heads_->FinalHidden(out); }
  int dspark_block_size() const override { return heads_->dspark_block_size(); }
  bool EnableDspark() override {
    Writer w(message_);
    w.Put(Op::kEnableDspark);
    Send(w);
    return heads_->EnableDspark();
  }
  void ForwardMtp(int k, const arch::ForwardBatch& batch, const float* prev_hidden,
                  arch::KvCache& mtp_kv, float* logits, float* hidden_out,
                  util::ThreadPool& pool) override {
    const int32_t cache = CacheId(mtp_kv);
    Writer w(message_);
    w.Put(Op::kForwardMtp);
    w.Put(cache);
    w.Put<int32_t>(k);
    w.Put<int8_t>(hidden_out != nullptr ? 1 : 0);
    PutBatch(w, batch, config().hidden);
    w.PutArray(prev_hidden, int64_t{batch.num_tokens} * heads_->mtp_hidden_size());
    Send(w);
    heads_->ForwardMtp(k, batch, prev_hidden, mtp_kv, logits, hidden_out, pool);
  }
  void DsparkPropose(const arch::ForwardBatch& batch, arch::KvCache& kv, int32_t* drafts,
                     float* confidence, util::ThreadPool& pool) override {
    const int32_t cache = CacheId(kv);
    Writer w(message_);
    w.Put(Op::kDsparkPropose);
    w.Put(cache);
    PutBatch(w, batch, config().hidden);
    Send(w);
    heads_->DsparkPropose(batch, kv, drafts, confidence, pool);
  }

  void SendKvBytes(arch::KvCache& kv, int layer, size_t offset, size_t bytes) {
    const int32_t cache = CacheId(kv);
    Writer w(message_);
    w.Put(Op::kKvBytes);
    w.Put(cache);
    w.Put<int32_t>(layer);
    w.Put<int64_t>(static_cast<int64_t>(offset));
    w.PutArray(kv.layer_bytes(layer) + offset, static_cast<int64_t>(bytes));
    Send(w);
  }

 private:
  void Send(Writer& w) { group_->Broadcast(w.bytes()); }

  // The id the followers know `kv` by, declaring it (and its window cache first) on first use.
  // Sends its own message: call it before starting the message that names the id.
  int32_t CacheId(const arch::KvCache& kv) {
    if (auto it = caches_.find(&kv); it != caches_.end()) return it->second;
    const int32_t window = kv.window != nullptr ? CacheId(*kv.window) : -1;
    const auto id = static_cast<int32_t>(caches_.size());
    Writer w(message_);
    w.Put(Op::kCache);
    w.Put(id);
    w.Put(window);
    w.Put(kv.block_size);
    w.Put(kv.num_blocks);
    w.Put(kv.dtype);
    w.PutArray(kv.layer_floats.data(), static_cast<int64_t>(kv.layer_floats.size()));
    Send(w);
    caches_[&kv] = id;
    return id;
  }

  std::unique_ptr<arch::CausalLm> lm_;
  arch::DraftHeads* heads_;  // lm_'s, or null
  std::vector<uint8_t> message_;  // the call being described
  std::shared_ptr<ExpertParallelGroup> group_;
  absl::flat_hash_map<const arch::KvCache*, int32_t> caches_;
};

// A follower's replay of the leader's calls on its own model share and caches.
class Follower {
 public:
  Follower(arch::CausalLm& lm, int threads) : lm_(lm), pool_(threads) {}

  // One message; false after kStop.
  absl::StatusOr<bool> Replay(const std::vector<uint8_t>& message) {
    Reader r(message);
    switch (r.Get<Op>()) {
      case Op::kStop:
        return false;
      case Op::kCache:
        return DeclareCache(r);
      case Op::kSetNumerics:
        if (!lm_.SetNumerics(r.Get<arch::Numerics>())) return Diverged("SetNumerics");
        return true;
      case Op::kEnableDspark:
        if (lm_.draft_heads() == nullptr || !lm_.draft_heads()->EnableDspark()) {
          return Diverged("EnableDspark");
        }
        return true;
      case Op::kForward: {
        arch::KvCache& kv = *caches_.at(r.Get<int32_t>());
        batch_.Read(r);
        util::Grow(logits_, int64_t{batch_.batch.num_logit_rows()} * lm_.config().vocab);
        lm_.Forward(batch_.batch, kv, logits_.data(), pool_);
        return true;
      }
      case Op::kForwardMtp: {
        arch::KvCache& kv = *caches_.at(r.Get<int32_t>());
        const auto k = r.Get<int32_t>();
        const bool hidden_out = r.Get<int8_t>() != 0;
        batch_.Read(r);
        r.GetArray(prev_hidden_);
        arch::DraftHeads& heads = *lm_.draft_heads();
        util::Grow(logits_, int64_t{batch_.batch.num_logit_rows()} * lm_.config().vocab);
        util::Grow(hidden_, int64_t{batch_.batch.num_tokens} * heads.mtp_hidden_size());
        heads.ForwardMtp(k, batch_.batch, prev_hidden_.data(), kv, logits_.data(),
                         hidden_out ? hidden_.data() : nullptr, pool_);
        return true;
      }
      case Op::kDsparkPropose: {
        arch::KvCache& kv = *caches_.at(r.Get<int32_t>());
        batch_.Read(r);
        arch::DraftHeads& heads = *lm_.draft_heads();
        const int64_t n = int64_t{static_cast<int64_t>(batch_.batch.seqs.size())} *
                          heads.dspark_block_size();
        drafts_.resize(n);
        util::Grow(confidence_, n);
        heads.DsparkPropose(batch_.batch, kv, drafts_.data(), confidence_.data(), pool_);
        return true;
      }
      case Op::kKvBytes: {
        arch::KvCache& kv = *caches_.at(r.Get<int32_t>());
        const auto layer = r.Get<int32_t>();
        const auto offset = r.Get<int64_t>();
        r.GetArray(bytes_);
        std::memcpy(kv.layer_bytes(layer) + offset, bytes_.data(), bytes_.size());
        return true;
      }
    }
    return Diverged("an unknown call");
  }

 private:
  static absl::Status Diverged(const char* what) {
    return InternalError(util::codes::kEpMismatch,
                         fmt::format("expert parallelism: this rank's model refused the leader's "
                                     "{}; the ranks do not run the same model and build",
                                     what));
  }

  absl::StatusOr<bool> DeclareCache(Reader& r) {
    const auto id = r.Get<int32_t>();
    const auto window = r.Get<int32_t>();
    const auto block_size = r.Get<int>();
    const auto num_blocks = r.Get<int>();
    auto cache = std::make_unique<arch::KvCache>();
    cache->dtype = r.Get<kernels::KvDtype>();
    std::vector<int64_t> floats;
    r.GetArray(floats);
    DI_RETURN_IF_ERROR(cache->AllocateLayers(block_size, num_blocks, floats));
    if (window >= 0) cache->window = caches_.at(window).get();
    if (static_cast<int32_t>(caches_.size()) != id) return Diverged("cache declaration");
    caches_.push_back(std::move(cache));
    return true;
  }

  arch::CausalLm& lm_;
  util::ThreadPool pool_;
  std::vector<std::unique_ptr<arch::KvCache>> caches_;
  BatchCopy batch_;
  std::vector<float> logits_, hidden_, prev_hidden_, confidence_;
  std::vector<int32_t> drafts_;
  std::vector<uint8_t> bytes_;
};

#if DI_HAVE_MPI

// Ends the job: a failed collective leaves the other ranks waiting in theirs.
void Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  spdlog::critical("expert parallelism: {} failed: {}", what, std::string(text, len));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

class MpiExchange final : public arch::ExpertExchange {
 public:
  MpiExchange(MPI_Comm comm, int rank, int ranks) : comm_(comm), rank_(rank), ranks_(ranks) {}
  // Before MPI_Finalize (the group's destructor calls it).
  void FreeTypes() {
    for (auto& [width, type] : row_types_) MPI_Type_free(&type);
    row_types_.clear();
  }
  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }

  void AllToAllRows(const float* send, const int64_t* send_rows, float* recv,
                    const int64_t* recv_rows, int64_t width) override {
    Counts(send_rows, send_counts_, send_displs_);
    Counts(recv_rows, recv_counts_, recv_displs_);
    const MPI_Datatype row = RowType(width);
    const double start = MPI_Wtime();
    Check(MPI_Alltoallv(send, send_counts_.data(), send_displs_.data(), row, recv,
                        recv_counts_.data(), recv_displs_.data(), row, comm_),
          "MPI_Alltoallv");
    int64_t rows = 0;
    for (int r = 0; r < ranks_; ++r) {
      if (r != rank_) rows += send_rows[r] + recv_rows[r];
    }
    Count(start, rows * width);
  }
  void AllGatherRows(float* data, const int64_t* rows, int64_t width) override {
    Counts(rows, recv_counts_, recv_displs_);
    const double start = MPI_Wtime();
    Check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, recv_counts_.data(),
                         recv_displs_.data(), RowType(width), comm_),
          "MPI_Allgatherv");
    // Received: every other slice; sent (at least once, to each other rank by a ring or
    // directly): this rank's slice once per other rank.
    int64_t moved = 0;
    for (int r = 0; r < ranks_; ++r) moved += r != rank_ ? rows[r] : rows[r] * (ranks_ - 1);
    Count(start, moved * width);
  }

 private:
  void Counts(const int64_t* rows, std::vector<int>& counts, std::vector<int>& displs) const {
    counts.resize(ranks_);
    displs.resize(ranks_);
    int64_t at = 0;
    for (int r = 0; r < ranks_; ++r) {
      counts[r] = static_cast<int>(rows[r]);
      displs[r] = static_cast<int>(at);
      at += rows[r];
    }
  }
  void Count(double start, int64_t floats) {
    Counters& c = counters();
    c.collectives += 1;
    c.bytes += floats * static_cast<int64_t>(sizeof(float));
    c.exchange_seconds += MPI_Wtime() - start;
  }
  // Rows travel as one derived type, so counts stay rows (an int) for any width.
  MPI_Datatype RowType(int64_t width) {
    auto it = row_types_.find(width);
    if (it != row_types_.end()) return it->second;
    MPI_Datatype type;
    Check(MPI_Type_contiguous(static_cast<int>(width), MPI_FLOAT, &type), "MPI_Type_contiguous");
    Check(MPI_Type_commit(&type), "MPI_Type_commit");
    row_types_[width] = type;
    return type;
  }

  MPI_Comm comm_;
  int rank_, ranks_;
  std::vector<int> send_counts_, send_displs_, recv_counts_, recv_displs_;
  absl::flat_hash_map<int64_t, MPI_Datatype> row_types_;
};

class MpiGroup;

// One lane of the group: a communicator of its own with its experts' exchange, the calls
// broadcast on it and whether rank 0 stopped it. Lane 0 serves rank 0's engine (or its first
// data-parallel engine), lane i its engine i.
class MpiLane final : public ExpertParallelGroup {
 public:
  MpiLane(MpiGroup& group, MPI_Comm comm, int rank, int ranks)
      : group_(group), comm_(comm), rank_(rank), ranks_(ranks), exchange_(comm, rank, ranks) {}
  // Before MPI_Finalize.
  void Close() {
    exchange_.FreeTypes();
    MPI_Comm_free(&comm_);
  }
  bool stopped() const { return stopped_.load(); }
  MPI_Comm comm() const { return comm_; }

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  arch::ExpertExchange& exchange() override { return exchange_; }
  absl::Status health() const override;
  void OpenLanes(int n) override;
  int num_lanes() const override;
  std::shared_ptr<ExpertParallelGroup> lane(int i) override;

  absl::Status CheckSameModel(uint64_t fingerprint) override {
    std::vector<uint64_t> all(ranks_);
    Check(MPI_Allgather(&fingerprint, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_),
          "MPI_Allgather");
    for (int r = 1; r < ranks_; ++r) {
      if (all[r] != all[0]) {
        stopped_.store(true);  // every rank returns this error and exits on its own
        return InternalError(
            util::codes::kEpMismatch,
            fmt::format("expert parallelism: rank {} loaded a different model, layout or build "
                        "than rank 0 (fingerprints {:016x} and {:016x}); every rank must map the "
                        "same checkpoint with the same deepinfer",
                        r, all[r], all[0]));
      }
    }
    return absl::OkStatus();
  }

  Stats stats() const override {
    Stats s = stats_;
    s.moe = exchange_.counters();
    return s;
  }

  void Broadcast(std::vector<uint8_t>& data) override {
    const double start = MPI_Wtime();
    int64_t size = static_cast<int64_t>(data.size());
    Check(MPI_Bcast(&size, 1, MPI_INT64_T, 0, comm_), "MPI_Bcast");
    data.resize(static_cast<size_t>(size));
    Check(MPI_Bcast(data.data(), static_cast<int>(size), MPI_BYTE, 0, comm_), "MPI_Bcast");
    stats_.broadcast_bytes += size;
    stats_.broadcast_seconds += MPI_Wtime() - start;
    if (size >= static_cast<int64_t>(sizeof(Op))) {
      Op op;
      std::memcpy(&op, data.data(), sizeof(op));
      if (op == Op::kStop) stopped_.store(true);
      if (op == Op::kForward || op == Op::kForwardMtp || op == Op::kDsparkPropose) {
        ++stats_.forward_calls;
      }
    }
  }

 private:
  MpiGroup& group_;
  MPI_Comm comm_;
  int rank_, ranks_;
  MpiExchange exchange_;
  std::atomic<bool> stopped_{false};
  Stats stats_;  // the forward thread's
};

// The process's membership: its lanes, the heartbeat communicator and the watchdog. The
// ExpertParallelGroup calls go to lane 0.
class MpiGroup final : public ExpertParallelGroup,
                       public std::enable_shared_from_this<MpiGroup> {
 public:
  MpiGroup(MPI_Comm comm, MPI_Comm heartbeat, int rank, int ranks, double timeout_s)
      : heartbeat_(heartbeat), rank_(rank), ranks_(ranks), timeout_s_(timeout_s) {
    {
      absl::MutexLock lock(&lanes_mu_);
      lanes_.push_back(std::make_unique<MpiLane>(*this, comm, rank, ranks));
      first_ = lanes_[0].get();
    }
    if (ranks_ > 1) watchdog_ = std::thread([this] { Watch(); });
  }
  ~MpiGroup() override {
    // A rank that ends before the group finished (an error at start) would leave the others
    // waiting in a collective: end the whole job instead.
    if (!AllStopped() && ranks_ > 1) {
      spdlog::error("expert parallelism: rank {} ends before the group finished; ending every "
                    "rank",
                    rank_);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    quit_.store(true);
    if (watchdog_.joinable()) watchdog_.join();
    absl::MutexLock lock(&lanes_mu_);
    for (auto& l : lanes_) l->Close();
    MPI_Comm_free(&heartbeat_);
    MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  arch::ExpertExchange& exchange() override { return First().exchange(); }
  absl::Status health() const override {
    absl::MutexLock lock(&mu_);
    return health_;
  }
  absl::Status CheckSameModel(uint64_t fingerprint) override {
    return First().CheckSameModel(fingerprint);
  }
  Stats stats() const override { return First().stats(); }
  void Broadcast(std::vector<uint8_t>& data) override { First().Broadcast(data); }

  void OpenLanes(int n) override {
    absl::MutexLock lock(&lanes_mu_);
    DI_CHECK(lanes_.size() == 1);
    for (int i = 1; i < n; ++i) {
      MPI_Comm comm;
      Check(MPI_Comm_dup(lanes_[0]->comm(), &comm), "MPI_Comm_dup");
      lanes_.push_back(std::make_unique<MpiLane>(*this, comm, rank_, ranks_));
    }
  }
  int num_lanes() const override {
    absl::MutexLock lock(&lanes_mu_);
    return static_cast<int>(lanes_.size());
  }
  std::shared_ptr<ExpertParallelGroup> lane(int i) override {
    absl::MutexLock lock(&lanes_mu_);
    // Aliasing: the lane keeps the group (MPI itself) alive.
    return std::shared_ptr<ExpertParallelGroup>(shared_from_this(), lanes_.at(i).get());
  }

 private:
  using Clock = std::chrono::steady_clock;

  // The watchdog: rank 0 and each follower send each other a heartbeat every second on their
  // own communicator (MPI_THREAD_MULTIPLE: the engine thread may sit in a collective
  // meanwhile) and watch for the other side's. Independent of the steps, so a long prefill
  // never looks like silence; a stopped or vanished rank does.
  void Watch() {
    std::vector<int> peers;
    if (rank_ == 0) {
      for (int r = 1; r < ranks_; ++r) peers.push_back(r);
    } else {
      peers.push_back(0);
    }
    static const int kBeat = 1;
    const int n = static_cast<int>(peers.size());
    std::vector<MPI_Request> inbox(n);
    std::vector<int> received(n);
    std::vector<Clock::time_point> heard(n, Clock::now());
    for (int i = 0; i < n; ++i) {
      MPI_Irecv(&received[i], 1, MPI_INT, peers[i], kHeartbeatTag, heartbeat_, &inbox[i]);
    }
    Clock::time_point next_beat = Clock::now();
    while (!quit_.load()) {
      const Clock::time_point now = Clock::now();
      if (now >= next_beat) {
        for (int peer : peers) {
          MPI_Request sent;
          MPI_Isend(&kBeat, 1, MPI_INT, peer, kHeartbeatTag, heartbeat_, &sent);
          MPI_Request_free(&sent);
        }
        next_beat = now + std::chrono::seconds(1);
      }
      for (int i = 0; i < n; ++i) {
        int done = 0;
        MPI_Test(&inbox[i], &done, MPI_STATUS_IGNORE);
        if (done) {
          heard[i] = now;
          MPI_Irecv(&received[i], 1, MPI_INT, peers[i], kHeartbeatTag, heartbeat_, &inbox[i]);
        }
      }
      for (int i = 0; i < n && !AllStopped(); ++i) {
        const double silent = std::chrono::duration<double>(now - heard[i]).count();
        if (silent > timeout_s_) Lost(peers[i], silent);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (MPI_Request& r : inbox) {
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  }

  // Never returns: the job ends.
  [[noreturn]] void Lost(int peer, double silent) {
    const std::string message = fmt::format(
        "expert parallelism: rank {} has not answered for {:.1f} s (stopped, hung or its host "
        "gone); ending every rank",
        peer, silent);
    {
      absl::MutexLock lock(&mu_);
      health_ = UnavailableError(util::codes::kEpRankLost, message);
    }
    spdlog::error("{}", message);
    // Rank 0 answers /health with 503 and refuses new requests for a moment first.
    if (rank_ == 0) std::this_thread::sleep_for(std::chrono::seconds(3));
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();  // not reached
  }

  MpiLane& First() const { return *first_; }
  // Every lane stopped by rank 0 (or refused at start): silence is then expected.
  bool AllStopped() const {
    absl::MutexLock lock(&lanes_mu_);
    return std::all_of(lanes_.begin(), lanes_.end(), [](const auto& l) { return l->stopped(); });
  }

  static constexpr int kHeartbeatTag = 7;
  MPI_Comm heartbeat_;
  int rank_, ranks_;
  double timeout_s_;
  mutable absl::Mutex lanes_mu_;
  // Lane 0 from the start, the others from OpenLanes; never shrinks, so the lanes' addresses
  // (and references to them) stay valid.
  std::vector<std::unique_ptr<MpiLane>> lanes_ ABSL_GUARDED_BY(lanes_mu_);
  MpiLane* first_ = nullptr;  // lanes_[0], set once
  std::atomic<bool> quit_{false};
  mutable absl::Mutex mu_;
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  std::thread watchdog_;
};

absl::Status MpiLane::health() const { return group_.health(); }
void MpiLane::OpenLanes(int n) { group_.OpenLanes(n); }
int MpiLane::num_lanes() const { return group_.num_lanes(); }
std::shared_ptr<ExpertParallelGroup> MpiLane::lane(int i) { return group_.lane(i); }

#endif  // DI_HAVE_MPI

}  // namespace

absl::StatusOr<std::shared_ptr<ExpertParallelGroup>> ExpertParallelGroup::Init(
    double timeout_s) {
#if DI_HAVE_MPI
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    return InternalError(util::codes::kMpiError, "expert parallelism: MPI_Init_thread failed");
  }
  // The collectives run on the engine thread, not the one that initialised MPI, while the
  // watchdog thread exchanges heartbeats.
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    return InternalError(util::codes::kMpiError,
                         "expert parallelism: this MPI library does not allow calls from several "
                         "threads at once (MPI_THREAD_MULTIPLE)");
  }
  MPI_Comm comm, heartbeat;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &heartbeat);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  return std::make_shared<MpiGroup>(comm, heartbeat, rank, ranks, timeout_s);
#else
  (void)timeout_s;
  return UnimplementedError(util::codes::kMpiUnavailable,
                            "--expert-parallel needs a deepinfer built with MPI (Debian "
                            "libopenmpi-dev; scripts/setup.sh installs it)");
#endif
}

std::unique_ptr<arch::CausalLm> MakeExpertParallelLeader(
    std::unique_ptr<arch::CausalLm> lm, std::shared_ptr<ExpertParallelGroup> group) {
  return std::make_unique<LeaderLm>(std::move(lm), std::move(group));
}

model::UnreadTensors ExpertParallelUnread(ExpertParallelGroup* group) {
  if (group == nullptr || group->ranks() < 2) return nullptr;
  const arch::ExpertExchange* experts = &group->exchange();
  return [experts](const std::string& name, const model::ModelConfig& config) {
    if (!config.deepseek) return false;
    // "model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight"
    static constexpr std::string_view kExperts = ".mlp.experts.";
    const size_t at = name.find(kExperts);
    if (at == std::string::npos) return false;
    const int e = std::atoi(name.c_str() + at + kExperts.size());
    return !experts->Owns(e, config.deepseek->n_routed_experts);
  };
}

void MirrorKvBytes(arch::CausalLm& leader, arch::KvCache& kv, int layer, size_t offset,
                   size_t bytes) {
  auto* lm = dynamic_cast<LeaderLm*>(&leader);
  DI_CHECK(lm != nullptr);
  lm->SendKvBytes(kv, layer, offset, bytes);
}

namespace {

// One lane's replay loop, until rank 0 stops the lane.
absl::Status FollowLane(ExpertParallelGroup& lane, arch::CausalLm& lm, uint64_t fingerprint,
                        int threads) {
  DI_RETURN_IF_ERROR(lane.CheckSameModel(fingerprint));
  Follower follower(lm, threads);
  std::vector<uint8_t> message;
  for (;;) {
    lane.Broadcast(message);
    DI_ASSIGN_OR_RETURN(const bool more, follower.Replay(message));
    if (!more) return absl::OkStatus();
  }
}

}  // namespace

absl::Status RunExpertParallelFollower(const model::Model& model, ExpertParallelGroup& group,
                                       int threads, int lanes) {
  if (lanes > 1) group.OpenLanes(lanes);
  // The models first, one after another (rank 0's data-parallel engines are built in turn too);
  // then a thread per lane.
  std::vector<std::shared_ptr<ExpertParallelGroup>> lane(lanes);
  std::vector<std::unique_ptr<arch::CausalLm>> lm(lanes);
  for (int i = 0; i < lanes; ++i) {
    lane[i] = group.lane(i);
    DI_ASSIGN_OR_RETURN(lm[i], arch::CreateCausalLm(model, &lane[i]->exchange()));
  }
  const uint64_t fingerprint = ModelFingerprint(model);
  const int all = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  const int per_lane = std::max(1, all / lanes);
  std::vector<absl::Status> status(lanes);
  std::vector<std::thread> workers;
  for (int i = 1; i < lanes; ++i) {
    workers.emplace_back(
        [&, i] { status[i] = FollowLane(*lane[i], *lm[i], fingerprint, per_lane); });
  }
  status[0] = FollowLane(*lane[0], *lm[0], fingerprint, per_lane);
  for (std::thread& t : workers) t.join();
  for (const absl::Status& s : status) DI_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

}  // namespace deepinfer::engine
