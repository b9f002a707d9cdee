#pragma once

// The blocks DeepSeek-V4 (deepseek_v4.cc) and DeepSeek-V4.1 (deepseek_v41.cc) are built from:
// a layer's shared-KV attention weights with its two mHC sites, the queries and window
// key/values, the shared-KV attention with its sink and grouped output, the lightning indexer's
// scoring, the rotary tables, and the MoE (sqrt-softplus router with a selection bias or hash
// routing, SwiGLU experts, one shared expert). Each block owns its scratch; an architecture says
// only how the blocks connect (its mHC variant, which layers compress and select, its cache).
// Float32 activations; weights as the TensorSchema reads them (F32 / BF16 / FP8 / FP4).
// Threads: a block is not thread-safe (scratch); its Run-style calls use the pool passed in.
// Source: transformers models/deepseek_v4 (5.24) and deepseek_v41 (commit 0a2080b4).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/deepseek_v4_ops.h"
#include "arch/moe.h"
#include "arch/tensor_schema.h"
#include "kernels/cpu/index_score.h"
#include "kernels/cpu/matmul.h"
#include "model/model.h"
#include "util/aligned_vector.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace deepinfer::arch::dsv4 {

// Whether the cache keeps index keys packed (kernels::PackFp4IndexKey, in place of their
// index_head_dim floats) and the indexer scores them in integers (kernels::IndexScoresFp4): under
// QAT numerics, where keys and queries are FP4 per 32 (FakeQuantFp4), when whole blocks of 32
// tile them. Same scores as the float kernel wherever its sums are exact (index_score.h), at a
// third of the bytes read and about a third of the instructions.
inline bool PackedIndexKeys(bool qat, int64_t index_head_dim) {
  return qat && index_head_dim % 32 == 0 && index_head_dim <= 1024;
}

// What the V4 and V4.1 forward passes share as a CausalLm: the model and its config, the tensor
// schema (block-scaled FP8 / FP4 matrices allowed), the main cache's slot size, and the switch
// between fast and QAT numerics (Numerics::kDeepseekQat: the reference's fake quantization).
class DeepseekV4Base : public CausalLm {
 public:
  DeepseekV4Base(const model::Model& m, bool qat)
      : model_(m),
        cfg_(m.config),
        ds_(*m.config.deepseek_v4),
        schema_(m, {.matrices = MatrixTypes::kBlockScaled}),
        qat_(qat) {}
  const model::ModelConfig& config() const override { return cfg_; }
  int64_t kv_floats_per_token() const override { return kv_floats_; }
  bool SetNumerics(Numerics numerics) override {
    if (numerics != Numerics::kFast && numerics != Numerics::kDeepseekQat) return false;
    qat_ = numerics == Numerics::kDeepseekQat;
    return true;
  }
  // Under QAT the index keys are FP4 and kept packed (PackedIndexKeys).
  std::string kv_packing() const override {
    return PackedIndexKeys(qat_, ds_.index_head_dim) ? "fp4-index-keys" : "";
  }

 protected:
  const model::Model& model_;
  model::ModelConfig cfg_;
  model::DeepseekV4Config ds_;
  TensorSchema schema_;
  int64_t kv_floats_ = 0;  // the largest main-cache slot
  bool qat_;               // Numerics::kDeepseekQat
};

using util::Grow;

// One mHC site: fn [(2 + hc) hc, hc H] f32, base [(2 + hc) hc], scale [3].
struct HcSite {
  const tensor::TensorView* fn = nullptr;
  std::vector<float> base, scale;
};

// The site under `prefix` ("layers.N.hc_attn_"), its mixing matrix checked whole for NaN/Inf.
absl::StatusOr<HcSite> LoadHcSite(TensorSchema& schema, const std::string& prefix, int64_t hc,
                                  int64_t hidden);

// mHC's residual streams X [T, hc, H] and the coefficients of the site last mixed. V4 collapses a
// site's input with that site's pre; V4.1 with the previous site's (its Mixes output is kept for
// the next collapse), so the two call Mixes / Collapse in their own order.
// Threads: not thread-safe (owns X and scratch); Mixes uses the pool passed in.
// Source: transformers deepseek_v4 DeepseekV4HyperConnection (5.24), deepseek_v41 (0a2080b4).
class MhcStreams {
 public:
  void Init(int64_t hc, int64_t hidden, float rms_eps, float hc_eps, int sinkhorn_iters) {
    hc_ = hc;
    hidden_ = hidden;
    rms_eps_ = rms_eps;
    hc_eps_ = hc_eps;
    iters_ = sinkhorn_iters;
  }
  // X [T, hc, H], grown to T rows (contents kept).
  float* Reserve(int64_t T) {
    Grow(x_, T * hc_ * hidden_);
    return x_.data();
  }
  float* data() { return x_.data(); }
  const float* data() const { return x_.data(); }
  // X_k = h for every stream k. Shapes: h [T, H].
  void Start(const float* h, int64_t T);
  // The site's coefficients from X: pre [T, hc] into `pre`, post [T, hc] and comb [T, hc, hc]
  // kept for Expand: mix = fn(rmsnorm(X flattened)), then HcCoefficients (Sinkhorn for comb).
  void Mixes(const HcSite& site, int64_t T, float* pre, util::ThreadPool& pool);
  // x [T, H] = sum_j pre_j X_j.
  void Collapse(const float* pre, int64_t T, float* x) const;
  // X'_k = post_k y + sum_j comb[j][k] X_j with the sublayer output y [T, H].
  void Expand(const float* y, int64_t T);

 private:
  int64_t hc_ = 0, hidden_ = 0;
  float rms_eps_ = 0, hc_eps_ = 0;
  int iters_ = 0;
  util::AlignedVector<float> x_, next_, flat_, mix_, post_, comb_;
};

// What every V4 / V4.1 layer holds besides its compressor, indexer and FFN: the two mHC sites,
// the pre-norms, and the shared-KV attention (q LoRA wq_a -> q_norm -> wq_b [heads head_dim],
// one key/value row wkv -> kv_norm, a sink per head, the grouped low-rank output wo_a / wo_b).
struct AttentionLayer {
  HcSite hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm, q_norm, kv_norm, sink;
  const tensor::TensorView* wq_a = nullptr;
  const tensor::TensorView* wq_b = nullptr;
  const tensor::TensorView* wkv = nullptr;
  const tensor::TensorView* wo_a = nullptr;
  const tensor::TensorView* wo_b = nullptr;
  // wo_a's rows of each output group [o_groups] (o_lora_rank rows each), block scales included.
  std::vector<tensor::TensorView> wo_a_groups;
};

// wo_a [groups olr, in]'s rows of each output group as a weight of its own, [olr, in], block
// scales included (AttentionLayer::wo_a_groups). Errors: kShapeMismatch when a group of a
// block-scaled wo_a straddles scale blocks without starting on one.
absl::StatusOr<std::vector<tensor::TensorView>> OutputGroups(const tensor::TensorView& wo_a,
                                                             int64_t groups, int64_t olr);

// The layer under `prefix` ("layers.N." or "mtp.K."): hc_{attn,ffn}_*, {attn,ffn}_norm.weight and
// attn.{attn_sink, wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b}, shaped by the config.
absl::StatusOr<AttentionLayer> LoadAttentionLayer(TensorSchema& schema, const std::string& prefix,
                                                  const model::ModelConfig& cfg,
                                                  const model::DeepseekV4Config& ds);

// The two rotary tables: the main one (rope_theta, plain RoPE) for window-only layers, and the
// compressed branch's (compress_rope_theta, YaRN, times compress_rope_mscale), with cos/sin of
// every row's position. Shapes: cos_* / sin_* [T, rope_dim / 2].
struct RopeTables {
  void Init(const model::ModelConfig& cfg, const model::DeepseekV4Config& ds);
  // The tables of positions[0, T).
  void Compute(const int32_t* positions, int64_t T);
  // cos/sin of the compressed table at one position. Shapes: cos, sin [rope_dim / 2].
  void CompressedAt(int32_t position, float* cos, float* sin) const {
    RopeAt(inv_freq_comp, comp_mscale, position, cos, sin);
  }

  std::vector<float> cos_main, sin_main, cos_comp, sin_comp;
  std::vector<float> inv_freq_main, inv_freq_comp;
  float comp_mscale = 1.0f;
  int rope_dim = 0;
};

// Shared-KV multi-query attention of one layer: the queries, the window key/value rows, and the
// attention of each row over the keys it sees, with the sink, the inverse rotation and the
// grouped output projection.
class SharedKvAttention {
 public:
  // qr [T, q_lora_rank] = q_norm(wq_a h); q [T, heads, head_dim] = wq_b qr, each head weightless-
  // RMS-normed when `head_norm` (V4; V4.1 has no such norm), RoPE'd on its last rope_dim values.
  void Queries(const AttentionLayer& w, const float* h, int64_t T, int64_t heads, int64_t head_dim,
               int rope_dim, float eps, bool head_norm, const float* cos, const float* sin,
               util::ThreadPool& pool);
  const float* qr() const { return qr_.data(); }
  // kv [T, head_dim] = RoPE(kv_norm(wkv in)), then quantize(row) (the QAT fake quantizer, or a
  // no-op).
  void WindowKv(const tensor::TensorView& wkv, const std::vector<float>& kv_norm, const float* in,
                int64_t T, int rope_dim, float eps, const float* cos, const float* sin,
                absl::FunctionRef<void(float*)> quantize, util::ThreadPool& pool);
  const float* kv() const { return kv_.data(); }
  // out [T, H] = wo_b(wo_a(attn)) where attn row t, head h is the softmax over the n keys
  // gather(t, keys) lists (at most max_keys; keys[i] -> head_dim floats, K = V) of q . k /
  // sqrt(head_dim), with exp(sink_h) in the denominator only, rotated back by the inverse RoPE.
  // kHeadGroup heads share one walk over the keys; the per-head arithmetic is the same whatever
  // the batch.
  template <typename Gather>
  void Attend(const AttentionLayer& w, int64_t T, int64_t heads, int64_t head_dim, int rope_dim,
              int64_t groups, int64_t olr, int64_t max_keys, const float* cos, const float* sin,
              float* out, util::ThreadPool& pool, Gather&& gather);

 private:
  util::AlignedVector<float> qr_, q_, kv_, attn_, thread_scratch_;
  std::vector<const float*> thread_keys_;
  Scratch out_scratch_;
};

// Where Score reads index keys: `count` (>= 1) keys from `key` on, key n at key + n * stride
// floats (for a paged cache, the rest of one block's entries).
struct IndexKeyRun {
  const float* key = nullptr;
  int64_t stride = 0;
  int64_t count = 1;
};

// Where a compressed KV source keeps its entries in the main cache. Entry j (ratio r; `floats`
// floats: the compressed key/value, then its index key) covers positions r j .. r (j + 1) - 1 and
// is stored over the last `slots` of them, entry_floats / slots floats per position, contiguous
// because those positions lie in one block: slots = min(r, block_size) when one of the two
// divides the other and slots divides `floats`, else 1 (whole in the group's last slot). So a
// layer of ratio r costs floats / r per token when the block size allows (V4's ratio-128 HCA
// layers: floats / block_size), and every position's slot exists as paging expects.
// Threads: immutable after Bind; Entry / IndexKeys only read the cache's addresses.
struct EntryCache {
  int layer = -1;
  int ratio = 0;
  int shift = 0;  // ratio - slots: from a group's first position to where its entry starts

  // The slots per entry for a layout of `block_size` (KvLayout: per-token floats = floats / it).
  static int Slots(int ratio, int64_t floats, int32_t block_size);
  // Layer `layer` of `kv`, whose per-token floats must be floats / Slots(...) (DI_CHECK).
  static EntryCache Bind(const KvCache& kv, int layer, int ratio, int64_t floats);
  // Entry j of slice s (its first float).
  float* Entry(KvCache& kv, const SequenceSlice& s, int64_t j) const {
    const int32_t pos = static_cast<int32_t>(ratio * j) + shift;
    return kv.Slot(layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
  }
  // Entry j's index key (`key_offset` floats into the entry) and those of the later entries in
  // its block, ratio positions apart.
  IndexKeyRun IndexKeys(KvCache& kv, const SequenceSlice& s, int64_t j, int64_t key_offset) const {
    const int32_t pos = static_cast<int32_t>(ratio * j) + shift;
    const int32_t off = pos % kv.block_size;
    return {kv.Slot(layer, s.block_table[pos / kv.block_size], off) + key_offset,
            ratio * kv.layer_floats[layer], (kv.block_size - 1 - off) / ratio + 1};
  }
};

// The lightning indexer: per token, scores of the compressed entries it sees,
// score_j = sum_h w_h relu(q_h . k_j) / sqrt(index_head_dim), with w = weights_proj(h) / sqrt(ih).
class LightningIndexer {
 public:
  // iq [T, ih, ihd] = wq_b qr, RoPE'd on the last rope_dim values, then quantize(head);
  // iw [T, ih] = weights_proj h / sqrt(ih).
  void Queries(const tensor::TensorView& wq_b, const tensor::TensorView& weights_proj,
               const float* qr, const float* h, int64_t T, int64_t ih, int64_t ihd, int rope_dim,
               const float* cos, const float* sin, absl::FunctionRef<void(float*)> quantize,
               util::ThreadPool& pool);
  // For slice s with V entries, each token i >= first whose visible count
  // (positions[t] + 1) / ratio exceeds min_visible gets score[0, visible) and a call
  // select(t, visible, score, order) with `scratch` floats of score (its own; select may write
  // past visible) and `scratch` int32s of order (its thread's).
  // keys(j) -> IndexKeyRun: entry j's index key (ihd floats, or with fp4 its packed bytes in
  // their place: PackedIndexKeys) and how many entries from j on follow it at a constant stride;
  // Score reads them where they are (no copy), kTokens tokens at a time sharing each key read,
  // the keys split over the pool's threads. fp4: the queries are FP4 too (quantize in Queries)
  // and both are scored in integers (kernels::IndexScoresFp4).
  // want(t, j) -> bool (asked for any j < V): whether token t's select reads score[j]; a key no
  // token of a tile wants is not read (a later V4.1 index source scores only inside its candidate
  // blocks), and its scores are left undefined.
  // A score depends only on its token's queries and the key (kernels::IndexScores): not on the
  // batch, the chunking, the runs keys() returns or which keys other tokens want.
  // Cost: per kTokens tokens, one pass over the wanted visible keys (ih x ihd multiply-adds per
  //   key and token); select runs per token on the pool.
  template <typename Keys, typename Want, typename Select>
  void Score(const SequenceSlice& s, int64_t V, int64_t ih, int64_t ihd, bool fp4, int ratio,
             int32_t first, int32_t min_visible, int64_t scratch, const int32_t* positions,
             Keys&& keys, Want&& want, Select&& select, util::ThreadPool& pool);

 private:
  static constexpr int64_t kTokens = 16;
  // Keys per parallel work item: a few per thread even at a few thousand entries.
  static constexpr int64_t kKeyChunk = 256;
  util::AlignedVector<float> iq_, iw_, packed_, scores_;
  std::vector<int32_t> thread_order_;
};

// The `keep` best of order[0, m) by score (descending, ties to the lower index) to the front.
void SortTopK(const float* score, int32_t* order, int32_t m, int32_t keep);

using Expert = SwiGluWeights;

// A MoE layer: the router gate.weight [E, H] (and its selection bias gate.bias [E] unless the
// layer routes by hash), E experts, and the shared expert when there is one. DeepSeek-V4.1 with
// a vision tower also has gate.bias_vl [E], the selection bias of image-span rows.
struct MoeLayer {
  const tensor::TensorView* router = nullptr;
  std::vector<float> router_bias;     // empty: hash routed (tid2eid)
  std::vector<float> router_bias_vl;  // empty: no image routing (every row uses router_bias)
  std::vector<int32_t> tid2eid;    // hash routing table [vocab, top_k]
  std::vector<Expert> experts;
  Expert shared;
  bool has_shared = false;
  int top_k = 0;
};

// The router, its bias (when `biased`), experts.{0..E-1}.w{1,3,2} and (when `shared`)
// shared_experts.* under `ffn` ("layers.N.ffn."). With `experts` (expert parallelism) the values
// of other ranks' experts are neither checked nor touched (their shapes and types still are).
absl::StatusOr<MoeLayer> LoadMoeLayer(TensorSchema& schema, const std::string& ffn, int64_t E,
                                      int64_t I, int64_t H, int top_k, bool biased, bool shared,
                                      const ExpertExchange* experts = nullptr);

// DeepSeek-V4's hash-routing table (int64 in the release; F32/BF16 with integral values
// accepted), each entry an expert id.
// Errors: InvalidArgument "shape_mismatch", "bad_tensor"; Unimplemented "unsupported_dtype".
absl::StatusOr<std::vector<int32_t>> LoadTid2eid(TensorSchema& schema, const model::Model& model,
                                                 const std::string& name, int64_t vocab, int k,
                                                 int experts);

// How a MoE layer turns router logits into weights and applies them.
struct MoeOptions {
  float gate_temp = 1.0f;         // score = sqrt(softplus(logit / gate_temp))
  bool normalize = true;          // weights divided by their sum (+ 1e-20)
  float routed_scaling = 1.0f;    // then multiplied by this
  bool weight_before_w2 = false;  // V4.1 scales the activation before w2; V4 the output
  float swiglu_limit = 0.0f;
  bool clamp = true;  // gate <= limit, |up| <= limit
};

// The MoE block: routes each row (hash table by token, else the top-k of score + bias), runs
// each expert once over its rows (MoeDispatch: expert order per row whatever the batch), adds
// the shared expert. Shapes: x, out [T, H]; tokens [T] (hash routing only); token_types [T] or
// null (null: every row is text).
// Image spans (DeepSeek-V4.1): a row whose token_types entry is >= 0 selects its experts by
// score + router_bias_vl instead of score + router_bias; its weights still come from the
// unbiased scores. REQUIRES: L.router_bias_vl non-empty when token_types has such a row.
class MoeBlock {
 public:
  // Expert parallelism (arch/moe.h): null runs every expert here. Not owned.
  void set_exchange(ExpertExchange* exchange) { dispatch_.set_exchange(exchange); }
  void Run(const MoeLayer& L, const MoeOptions& opt, const float* x, const int32_t* tokens,
           int64_t T, int64_t H, float* out, util::ThreadPool& pool,
           const int8_t* token_types = nullptr);

 private:
  util::AlignedVector<float> router_logits_, route_w_, moe_out_, shared_out_;
  std::vector<int32_t> route_idx_;
  MoeDispatch dispatch_;
  SwiGluExperts experts_;
  std::vector<ExpertRows> expert_rows_;
  std::vector<SwiGluWeights> expert_weights_;
};

template <typename Gather>
void SharedKvAttention::Attend(const AttentionLayer& w, int64_t T, int64_t heads,
                               int64_t head_dim, int rope_dim, int64_t groups, int64_t olr,
                               int64_t max_keys, const float* cos, const float* sin, float* out,
                               util::ThreadPool& pool, Gather&& gather) {
  const int64_t nh = heads, hd = head_dim, half = rope_dim / 2;
  constexpr int64_t kHeadGroup = 8;  // heads per work item: one key walk serves them all
  const int64_t items = (nh + kHeadGroup - 1) / kHeadGroup;
  Grow(attn_, T * nh * hd);
  Grow(thread_scratch_, int64_t{pool.num_threads()} * kHeadGroup * (max_keys + 1));
  Grow(thread_keys_, int64_t{pool.num_threads()} * (max_keys + 1));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool.ParallelFor(T * items, [&](int64_t begin, int64_t end, int thread) {
    float* scores = thread_scratch_.data() + thread * kHeadGroup * (max_keys + 1);
    const float** keys = thread_keys_.data() + thread * (max_keys + 1);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / items, h0 = (item % items) * kHeadGroup;
      const int64_t n_heads = std::min(kHeadGroup, nh - h0);
      const int64_t n = gather(t, keys);
      float* o = attn_.data() + (t * nh + h0) * hd;
      AttendSharedKv(q_.data() + (t * nh + h0) * hd, n_heads, keys, n, hd, scale,
                     w.sink.data() + h0, scores, o);
      for (int64_t h = 0; h < n_heads; ++h) {
        RopeInterleaved(o + h * hd + hd - rope_dim, cos + t * half, sin + t * half,
                        static_cast<int>(half), /*inverse=*/true);
      }
    }
  });
  GroupedOutput(w.wo_a_groups.data(), *w.wo_b, groups, olr, attn_.data(), T, nh * hd, out_scratch_,
                out, pool);
}

template <typename Keys, typename Want, typename Select>
void LightningIndexer::Score(const SequenceSlice& s, int64_t V, int64_t ih, int64_t ihd, bool fp4,
                             int ratio, int32_t first, int32_t min_visible, int64_t scratch,
                             const int32_t* positions, Keys&& keys, Want&& want, Select&& select,
                             util::ThreadPool& pool) {
  // The indexer is quadratic in the context and reads every visible key per step: at decode
  // that read is the cost, so keys are scored in place, block run by block run, each read once
  // for kTokens tokens (a gathered copy first moved every key twice more).
  const int hn = static_cast<int>(ih), dim = static_cast<int>(ihd);
  const int64_t qf =
      fp4 ? kernels::IndexQueryFp4Floats(hn, dim) : kernels::IndexQueryFloats(hn, dim);
  Grow(packed_, kTokens * qf);
  Grow(scores_, kTokens * scratch);
  Grow(thread_order_, int64_t{pool.num_threads()} * scratch);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(ihd));
  for (int32_t i0 = first; i0 < s.num_tokens; i0 += kTokens) {
    const int32_t n = std::min<int32_t>(kTokens, s.num_tokens - i0);
    const int64_t t0 = s.token_offset + i0;
    int64_t seen = 0;  // keys any of the n tokens sees
    for (int32_t i = 0; i < n; ++i) seen = std::max<int64_t>(seen, (positions[t0 + i] + 1) / ratio);
    if (seen <= min_visible) continue;
    DI_CHECK(seen <= V);
    for (int32_t i = 0; i < n; ++i) {
      const float* q = iq_.data() + (t0 + i) * ih * ihd;
      const float* w = iw_.data() + (t0 + i) * ih;
      if (fp4) {
        kernels::PackIndexQueryFp4(q, w, qscale, hn, dim, packed_.data() + i * qf);
      } else {
        kernels::PackIndexQuery(q, w, qscale, hn, dim, packed_.data() + i * qf);
      }
    }
    auto wanted = [&](int64_t j) {
      for (int32_t i = 0; i < n; ++i) {
        if (want(t0 + i, j)) return true;
      }
      return false;
    };
    pool.ParallelFor((seen + kKeyChunk - 1) / kKeyChunk, [&](int64_t begin, int64_t end, int) {
      const int64_t stop = std::min(seen, end * kKeyChunk);
      // The next span of wanted keys at or after j within one run: its first index in span_first.
      auto next_span = [&](int64_t j, int64_t& span_first) {
        while (j < stop && !wanted(j)) ++j;
        if (j == stop) return IndexKeyRun{};
        IndexKeyRun run = keys(j);
        const int64_t limit = std::min(stop, j + run.count);
        int64_t e = j + 1;
        while (e < limit && wanted(e)) ++e;
        run.count = e - j;
        span_first = j;
        return run;
      };
      int64_t j = 0, next_j = 0;
      IndexKeyRun run = next_span(begin * kKeyChunk, j);
      while (run.key != nullptr) {
        // The next span (usually the next cache block) is prefetched while this one is scored.
        const IndexKeyRun next = next_span(j + run.count, next_j);
        const bool same = next.key != nullptr && next.stride == run.stride;
        const float* ahead = same ? next.key : nullptr;
        const int64_t num_ahead = same ? next.count : 0;
        if (fp4) {
          auto bytes = [](const float* p) { return reinterpret_cast<const uint8_t*>(p); };
          kernels::IndexScoresFp4(packed_.data(), n, hn, dim, bytes(run.key),
                                  run.stride * int64_t{sizeof(float)}, run.count,
                                  scores_.data() + j, scratch, bytes(ahead), num_ahead);
        } else {
          kernels::IndexScores(packed_.data(), n, hn, dim, run.key, run.stride, run.count,
                               scores_.data() + j, scratch, ahead, num_ahead);
        }
        run = next;
        j = next_j;
      }
    });
    pool.ParallelFor(n, [&](int64_t begin, int64_t end, int thread) {
      int32_t* order = thread_order_.data() + thread * scratch;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t t = t0 + i;
        const int32_t visible = (positions[t] + 1) / ratio;
        if (visible <= min_visible) continue;
        select(t, visible, scores_.data() + i * scratch, order);
      }
    });
  }
}

}  // namespace deepinfer::arch::dsv4
