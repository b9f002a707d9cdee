// DeepSeek-V4 forward pass (mHC + sliding-window / compressed attention + MoE) over a paged
// per-token cache. One call handles any mix of prefill chunks and decode tokens from many
// sequences; projections run once over all tokens of the step, routed experts once over the
// tokens sent to each expert. Every per-token quantity lives in the token's own cache slot, so a
// sequence's logits do not depend on how its tokens were chunked or batched.

#include "arch/deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "arch/deepseek_v4_blocks.h"
#include "arch/deepseek_v4_ops.h"
#include "arch/moe.h"
#include "arch/tensor_schema.h"
#include "arch/rope.h"
#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/block_scales.h"
#include "model/fp8.h"
#include "model/tensor_values.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using tensor::TensorView;
using Attn = model::DeepseekV4Config::Attention;
using dsv4::FakeQuantFp4;
using dsv4::FakeQuantFp8;
using dsv4::Hadamard;
using dsv4::RopeInterleaved;
using dsv4::UnweightedRmsNorm;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using dsv4::AttentionLayer;
using dsv4::HcSite;
using dsv4::MoeLayer;

// A compressor: a = wkv x, z = wgate x ([coff * dim] each); ape [ratio, coff * dim]; norm [dim].
struct Compressor {
  const TensorView* wkv = nullptr;
  const TensorView* wgate = nullptr;
  std::vector<float> ape, norm;
  int dim = 0;
  int coff = 1;  // 2: overlapping windows (CSA)
};

// A block: the shared attention layer (mHC sites, norms, attention weights), its compressors
// and indexer, and the MoE (hash routed by tid2eid on the config's hash layers).
struct Layer : AttentionLayer {
  Attn kind = Attn::kSliding;
  int ratio = 0;
  Compressor comp, index_comp;
  const TensorView* index_wq_b = nullptr;
  const TensorView* index_weights = nullptr;
  MoeLayer moe;
  // MTP module extras: x0_k = e_proj(enorm(Emb(x))) + h_proj(hnorm(X_k)); its own hc head + norm.
  const TensorView* e_proj = nullptr;
  const TensorView* h_proj = nullptr;
  std::vector<float> enorm, hnorm, head_norm;
  HcSite hc_head;
  // Float offsets inside a token's cache slot.
  int64_t off_a = 0, off_z = 0, off_entry = 0, off_ia = 0, off_iz = 0, off_ikey = 0;
  int64_t slot_floats = 0;
};

class DeepseekV4Impl final : public dsv4::DeepseekV4Base, public DraftHeads {
 public:
  explicit DeepseekV4Impl(const model::Model& m) : DeepseekV4Base(m, /*qat=*/false) {}

  absl::Status Init();
  void Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
               util::ThreadPool& pool) override;
  // The MTP modules are its draft heads (none: null).
  DraftHeads* draft_heads() override { return mtp_.empty() ? nullptr : this; }
  Kind kind() const override { return Kind::kMtp; }
  int num_mtp_layers() const override { return static_cast<int>(mtp_.size()); }
  Numerics default_numerics() const override {
    return released_formats_ ? Numerics::kDeepseekQat : Numerics::kFast;
  }
  int64_t mtp_hidden_size() const override { return int64_t{ds_.hc_mult} * cfg_.hidden; }
  void FinalHidden(float* out) const override;
  void ForwardMtp(int k, const ForwardBatch& batch, const float* prev_hidden, KvCache& mtp_kv,
                  float* logits, float* hidden_out, util::ThreadPool& pool) override;

 private:
  absl::StatusOr<std::vector<float>> Vec(const std::string& name, std::vector<int64_t> shape) {
    return schema_.Vec(name, std::move(shape));
  }
  absl::StatusOr<const TensorView*> Mat(const std::string& name, int64_t rows, int64_t cols) {
    return schema_.Mat(name, rows, cols);
  }
  absl::StatusOr<Compressor> LoadCompressor(const std::string& prefix, int dim, int coff,
                                            int ratio);
  absl::StatusOr<Layer> LoadLayer(const std::string& prefix, int l);
  absl::StatusOr<HcSite> LoadHead(const std::string& prefix);
  void RunBlock(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                util::ThreadPool& pool);
  void Logits(const ForwardBatch& batch, const HcSite& head, const std::vector<float>& norm,
              float* logits, util::ThreadPool& pool);

  void Prepare(const ForwardBatch& batch);
  void HcPre(const HcSite& site, int64_t T, util::ThreadPool& pool);
  void Attention(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                 util::ThreadPool& pool);
  void EmitEntries(const Layer& L, const Compressor& c, int64_t off_a, int64_t off_z,
                   int64_t off_out, bool index_keys, int kv_layer, const SequenceSlice& s,
                   KvCache& kv);
  void QuantizeKv(float* x, int64_t dim) const;
  void QuantizeIndex(float* x) const;
  void SelectIndexed(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                     util::ThreadPool& pool);

  std::vector<Layer> layers_;
  std::vector<Layer> mtp_;
  int64_t last_tokens_ = 0;  // tokens of the last Forward (FinalHidden)
  const TensorView* embed_ = nullptr;
  const TensorView* head_ = nullptr;
  std::vector<float> final_norm_;
  HcSite hc_head_;  // fn [hc, hc H], base [hc], scale [1]
  bool released_formats_ = false;  // some weights are FP8 / FP4 with E8M0 scales

  // The blocks, each with its scratch.
  dsv4::RopeTables rope_;
  dsv4::SharedKvAttention attn_;
  dsv4::LightningIndexer indexer_;
  dsv4::MoeBlock moe_;
  // Scratch, grown on demand.
  dsv4::MhcStreams mhc_;
  std::vector<float> hc_pre_, hc_mix_, x_, h_;
  std::vector<float> ca_, cz_, ia_, iz_, out_, tmp_, rows_;
  std::vector<int32_t> positions_;
  // Selected compressed entries per token of a CSA layer: [T, index_topk], -1 padded.
  std::vector<int32_t> selected_;
};

using dsv4::Grow;

absl::StatusOr<Compressor> DeepseekV4Impl::LoadCompressor(const std::string& p, int dim, int coff,
                                                          int ratio) {
  Compressor c;
  c.dim = dim;
  c.coff = coff;
  DI_ASSIGN_OR_RETURN(c.wkv, Mat(p + "wkv.weight", int64_t{coff} * dim, cfg_.hidden));
  DI_ASSIGN_OR_RETURN(c.wgate, Mat(p + "wgate.weight", int64_t{coff} * dim, cfg_.hidden));
  DI_ASSIGN_OR_RETURN(c.ape, Vec(p + "ape", {ratio, int64_t{coff} * dim}));
  DI_ASSIGN_OR_RETURN(c.norm, Vec(p + "norm.weight", {dim}));
  return c;
}

// Block `l` (main layers, then MTP modules) under `p` ("layers.N." or "mtp.K.").
absl::StatusOr<Layer> DeepseekV4Impl::LoadLayer(const std::string& p, int l) {
  const std::string a = p + "attn.", f = p + "ffn.";
  const int64_t H = cfg_.hidden, hd = cfg_.head_dim;
  Layer L;
  DI_ASSIGN_OR_RETURN(static_cast<AttentionLayer&>(L),
                      dsv4::LoadAttentionLayer(schema_, p, cfg_, ds_));
  L.kind = ds_.attention[l];
  L.ratio = ds_.compress_ratio[l];
  int64_t off = hd;
  if (L.kind != Attn::kSliding) {
    const int coff = L.kind == Attn::kCsa ? 2 : 1;
    DI_ASSIGN_OR_RETURN(L.comp, LoadCompressor(a + "compressor.", static_cast<int>(hd), coff,
                                               L.ratio));
    L.off_a = off;
    L.off_z = off + coff * hd;
    L.off_entry = off + 2 * coff * hd;
    off = L.off_entry + hd;
  }
  if (L.kind == Attn::kCsa) {
    const int64_t ih = ds_.index_n_heads, ihd = ds_.index_head_dim;
    DI_ASSIGN_OR_RETURN(L.index_wq_b, Mat(a + "indexer.wq_b.weight", ih * ihd, ds_.q_lora_rank));
    DI_ASSIGN_OR_RETURN(L.index_weights, Mat(a + "indexer.weights_proj.weight", ih, H));
    DI_ASSIGN_OR_RETURN(L.index_comp, LoadCompressor(a + "indexer.compressor.",
                                                     static_cast<int>(ihd), 2, L.ratio));
    L.off_ia = off;
    L.off_iz = off + 2 * ihd;
    L.off_ikey = off + 4 * ihd;
    off = L.off_ikey + ihd;
  }
  L.slot_floats = off;
  const bool hash = l < cfg_.num_layers && ds_.hash_routed[l];
  DI_ASSIGN_OR_RETURN(L.moe, dsv4::LoadMoeLayer(schema_, f, ds_.n_routed_experts,
                                                 ds_.moe_intermediate_size, H,
                                                 ds_.num_experts_per_tok, /*biased=*/!hash,
                                                 ds_.n_shared_experts > 0));
  if (hash) {
    DI_ASSIGN_OR_RETURN(L.moe.tid2eid,
                        dsv4::LoadTid2eid(schema_, model_, f + "gate.tid2eid", cfg_.vocab,
                                          ds_.num_experts_per_tok, ds_.n_routed_experts));
  }
  return L;
}

absl::Status DeepseekV4Impl::Init() {
  const int64_t H = cfg_.hidden;
  if (cfg_.head_dim % 2 != 0 || cfg_.rope_dim > cfg_.head_dim || ds_.n_routed_experts <= 0 ||
      static_cast<int>(ds_.attention.size()) < cfg_.num_layers ||
      static_cast<int>(ds_.hash_routed.size()) < cfg_.num_layers || ds_.index_topk <= 0) {
    return InvalidArgumentError(util::codes::kBadConfig, "inconsistent DeepSeek-V4 dimensions");
  }
  DI_ASSIGN_OR_RETURN(embed_, Mat("embed.weight", cfg_.vocab, H));
  if (!kernels::HasCpuKernel(embed_->dtype)) {  // rows are looked up one by one, unscaled
    return UnimplementedError(
        util::codes::kUnsupportedDtype,
        fmt::format("embed.weight has dtype {}", tensor::DTypeName(embed_->dtype)));
  }
  DI_ASSIGN_OR_RETURN(final_norm_, Vec("norm.weight", {H}));
  if (cfg_.tied_embeddings && model_.Find("head.weight") == nullptr) {
    head_ = embed_;
  } else {
    DI_ASSIGN_OR_RETURN(head_, Mat("head.weight", cfg_.vocab, H));
  }
  DI_ASSIGN_OR_RETURN(hc_head_, LoadHead(""));
  for (int l = 0; l < cfg_.num_layers; ++l) {
    DI_ASSIGN_OR_RETURN(Layer L, LoadLayer(fmt::format("layers.{}.", l), l));
    kv_floats_ = std::max(kv_floats_, L.slot_floats);
    layers_.push_back(std::move(L));
  }
  // MTP modules present in the checkpoint (a checkpoint may leave them out).
  for (int k = 0; k < ds_.num_nextn_predict_layers; ++k) {
    const std::string p = fmt::format("mtp.{}.", k);
    if (model_.Find(p + "e_proj.weight") == nullptr) break;
    DI_ASSIGN_OR_RETURN(Layer L, LoadLayer(p, cfg_.num_layers + k));
    DI_ASSIGN_OR_RETURN(L.e_proj, Mat(p + "e_proj.weight", H, H));
    DI_ASSIGN_OR_RETURN(L.h_proj, Mat(p + "h_proj.weight", H, H));
    DI_ASSIGN_OR_RETURN(L.enorm, Vec(p + "enorm.weight", {H}));
    DI_ASSIGN_OR_RETURN(L.hnorm, Vec(p + "hnorm.weight", {H}));
    DI_ASSIGN_OR_RETURN(L.head_norm, Vec(p + "norm.weight", {H}));
    DI_ASSIGN_OR_RETURN(L.hc_head, LoadHead(p));
    kv_floats_ = std::max(kv_floats_, L.slot_floats);
    mtp_.push_back(std::move(L));
  }
  for (const auto& [name, t] : model_.tensors) released_formats_ |= t.scale != nullptr;
  // Every tensor must have a place.
  DI_RETURN_IF_ERROR(schema_.CheckAllPlaced("DeepSeek-V4"));
  rope_.Init(cfg_, ds_);
  mhc_.Init(ds_.hc_mult, H, cfg_.rms_norm_eps, ds_.hc_eps, ds_.hc_sinkhorn_iters);
  return absl::OkStatus();
}

// An hc head (fn [hc, hc H], base [hc], scale [1]) under `p` ("" or "mtp.K.").
absl::StatusOr<HcSite> DeepseekV4Impl::LoadHead(const std::string& p) {
  const int64_t hc = ds_.hc_mult;
  HcSite h;
  DI_ASSIGN_OR_RETURN(h.fn, Mat(p + "hc_head_fn", hc, hc * cfg_.hidden));
  DI_RETURN_IF_ERROR(model::CheckFinite(*h.fn, /*full=*/true));
  DI_ASSIGN_OR_RETURN(h.base, Vec(p + "hc_head_base", {hc}));
  DI_ASSIGN_OR_RETURN(h.scale, Vec(p + "hc_head_scale", {1}));
  return h;
}

void DeepseekV4Impl::Prepare(const ForwardBatch& batch) {
  const int64_t T = batch.num_tokens;
  Grow(positions_, T);
  BatchPositions(batch, positions_.data());
  rope_.Compute(positions_.data(), T);
}

// A cached key/value (window or compressed entry) under kDeepseekQat: its non-rotary part as FP8
// per 64 values (the rotary tail stays float, as DeepSeek stores it).
void DeepseekV4Impl::QuantizeKv(float* x, int64_t dim) const {
  if (qat_) FakeQuantFp8(x, dim - cfg_.rope_dim, 64, 1e-4f);
}

// An indexer query head or key under kDeepseekQat: Hadamard-rotated (when index_head_dim is a
// power of two), then FP4 per 32.
void DeepseekV4Impl::QuantizeIndex(float* x) const {
  if (!qat_) return;
  const int64_t n = ds_.index_head_dim;
  if ((n & (n - 1)) == 0) Hadamard(x, n);
  FakeQuantFp4(x, n, 32);
}

// mHC at one site: post and comb (kept in mhc_ for the Expand after the sublayer) and the
// collapsed input x_ [T, H] = sum_j pre_j X_j with this site's own pre.
void DeepseekV4Impl::HcPre(const HcSite& site, int64_t T, util::ThreadPool& pool) {
  Grow(hc_pre_, T * ds_.hc_mult);
  mhc_.Mixes(site, T, hc_pre_.data(), pool);
  Grow(x_, T * cfg_.hidden);
  mhc_.Collapse(hc_pre_.data(), T, x_.data());
}

// Writes the entries that the slice's tokens close: entry j (ratio r) pools the tokens of
// window j (and, overlapping, the first halves of window j - 1) by a per-channel softmax of
// z + ape over those tokens, then kv norm and RoPE at position r j; stored in the slot of
// position r (j + 1) - 1 at `off_out`.
void DeepseekV4Impl::EmitEntries(const Layer& L, const Compressor& c, int64_t off_a,
                                 int64_t off_z, int64_t off_out, bool index_keys, int kv_layer,
                                 const SequenceSlice& s, KvCache& kv) {
  const int r = L.ratio, dim = c.dim, coff = c.coff;
  const int half = cfg_.rope_dim / 2;
  std::vector<float>& buf = rows_;
  Grow(buf, int64_t{4} * dim + 2 * half);
  float* num = buf.data();
  float* den = num + dim;
  float* mx = den + dim;
  float* cs = mx + dim + dim;
  float* sn = cs + half;
  auto slot = [&](int32_t pos) {
    return kv.Slot(kv_layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
  };
  for (int32_t i = 0; i < s.num_tokens; ++i) {
    const int32_t p = s.start_pos + i;
    if ((p + 1) % r != 0) continue;
    const int32_t j = (p + 1) / r - 1, first = r * j;
    // Members: (position, channel offset within a/z, ape row offset).
    std::fill(mx, mx + dim, kNegInf);
    auto visit = [&](auto&& fn) {
      if (coff == 2 && j > 0) {
        for (int t = 0; t < r; ++t) fn(first - r + t, 0, t * coff * dim);
      }
      for (int t = 0; t < r; ++t) fn(first + t, coff == 2 ? dim : 0, t * coff * dim + (coff - 1) * dim);
    };
    visit([&](int32_t pos, int64_t ch, int64_t ape) {
      const float* z = slot(pos) + off_z + ch;
      for (int d = 0; d < dim; ++d) mx[d] = std::max(mx[d], z[d] + c.ape[ape + d]);
    });
    std::fill(num, num + dim, 0.0f);
    std::fill(den, den + dim, 0.0f);
    // Softmax weights first (as transformers: normalized, then the weighted sum).
    visit([&](int32_t pos, int64_t ch, int64_t ape) {
      const float* z = slot(pos) + off_z + ch;
      for (int d = 0; d < dim; ++d) den[d] += std::exp(z[d] + c.ape[ape + d] - mx[d]);
    });
    visit([&](int32_t pos, int64_t ch, int64_t ape) {
      const float* z = slot(pos) + off_z + ch;
      const float* a = slot(pos) + off_a + ch;
      for (int d = 0; d < dim; ++d) {
        num[d] += a[d] * (std::exp(z[d] + c.ape[ape + d] - mx[d]) / den[d]);
      }
    });
    float* out = slot(p) + off_out;
    kernels::RmsNorm(num, c.norm.data(), 1, dim, cfg_.rms_norm_eps, out);
    rope_.CompressedAt(first, cs, sn);
    RopeInterleaved(out + dim - cfg_.rope_dim, cs, sn, cfg_.rope_dim / 2, /*inverse=*/false);
    if (index_keys) {
      QuantizeIndex(out);
    } else {
      QuantizeKv(out, dim);
    }
  }
}

// CSA: the lightning indexer's choice of compressed entries for every token of the batch, into
// selected_ [T, index_topk] (-1 padded).
void DeepseekV4Impl::SelectIndexed(const Layer& L, int kv_layer, const ForwardBatch& batch,
                                   KvCache& kv, util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, ih = ds_.index_n_heads, ihd = ds_.index_head_dim;
  const int64_t K = ds_.index_topk;
  indexer_.Queries(*L.index_wq_b, *L.index_weights, attn_.qr(), h_.data(), T, ih, ihd,
                   cfg_.rope_dim, rope_.cos_comp.data(), rope_.sin_comp.data(),
                   [&](float* q) { QuantizeIndex(q); }, pool);
  Grow(selected_, T * K);
  for (const auto& s : batch.seqs) {
    const int64_t V = (s.start_pos + s.num_tokens) / L.ratio;
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      int32_t* sel = selected_.data() + (s.token_offset + i) * K;
      std::fill(sel, sel + K, -1);
      const int32_t visible = (s.start_pos + i + 1) / L.ratio;
      for (int32_t j = 0; j < std::min<int64_t>(visible, K); ++j) sel[j] = j;
    }
    if (V <= K) continue;  // every token keeps all it sees
    // Only tokens that see more than K entries need scores.
    const int32_t first = std::max<int32_t>(0, static_cast<int32_t>((K + 1) * L.ratio - 1) -
                                                    s.start_pos);
    indexer_.Score(
        s, V, ih, ihd, L.ratio, first, static_cast<int32_t>(K), V, positions_.data(),
        [&](int64_t j) {
          const int64_t pos = L.ratio * (j + 1) - 1;
          return kv.Slot(kv_layer, s.block_table[pos / kv.block_size], pos % kv.block_size) +
                 L.off_ikey;
        },
        [&](int64_t t, int32_t visible, const float* score, int32_t* order) {
          for (int32_t j = 0; j < visible; ++j) order[j] = j;
          dsv4::SortTopK(score, order, visible, static_cast<int32_t>(K));
          std::copy(order, order + K, selected_.data() + t * K);
        },
        pool);
  }
}

void DeepseekV4Impl::Attention(const Layer& L, int kv_layer, const ForwardBatch& batch,
                               KvCache& kv, util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, nh = cfg_.num_heads, hd = cfg_.head_dim;
  const bool compressed = L.kind != Attn::kSliding;
  const float* cosv = compressed ? rope_.cos_comp.data() : rope_.cos_main.data();
  const float* sinv = compressed ? rope_.sin_comp.data() : rope_.sin_main.data();
  // Queries: q LoRA, per-head weightless RMS norm, RoPE; this step's key/values (and compressor
  // projections) into the tokens' slots.
  attn_.Queries(L, h_.data(), T, nh, hd, cfg_.rope_dim, cfg_.rms_norm_eps, /*head_norm=*/true,
                cosv, sinv, pool);
  attn_.WindowKv(*L.wkv, L.kv_norm, h_.data(), T, cfg_.rope_dim, cfg_.rms_norm_eps, cosv, sinv,
                 [&](float* k) { QuantizeKv(k, hd); }, pool);
  const float* kvrow = attn_.kv();
  const int64_t ca_width = compressed ? int64_t{L.comp.coff} * hd : 0;
  const int64_t ia_width = L.kind == Attn::kCsa ? 2 * int64_t{ds_.index_head_dim} : 0;
  if (compressed) {
    Grow(ca_, T * ca_width);
    Grow(cz_, T * ca_width);
    const TensorView* ws[2] = {L.comp.wkv, L.comp.wgate};
    float* ys[2] = {ca_.data(), cz_.data()};
    kernels::MatMulGroup(ws, ys, 2, h_.data(), T, pool);
  }
  if (ia_width > 0) {
    Grow(ia_, T * ia_width);
    Grow(iz_, T * ia_width);
    const TensorView* ws[2] = {L.index_comp.wkv, L.index_comp.wgate};
    float* ys[2] = {ia_.data(), iz_.data()};
    kernels::MatMulGroup(ws, ys, 2, h_.data(), T, pool);
  }
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int32_t pos = s.start_pos + i;
      const int64_t t = s.token_offset + i;
      float* slot = kv.Slot(kv_layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
      std::memcpy(slot, kvrow + t * hd, hd * sizeof(float));
      if (compressed) {
        std::memcpy(slot + L.off_a, ca_.data() + t * ca_width, ca_width * sizeof(float));
        std::memcpy(slot + L.off_z, cz_.data() + t * ca_width, ca_width * sizeof(float));
      }
      if (ia_width > 0) {
        std::memcpy(slot + L.off_ia, ia_.data() + t * ia_width, ia_width * sizeof(float));
        std::memcpy(slot + L.off_iz, iz_.data() + t * ia_width, ia_width * sizeof(float));
      }
    }
  }
  if (compressed) {
    for (const auto& s : batch.seqs) {
      EmitEntries(L, L.comp, L.off_a, L.off_z, L.off_entry, false, kv_layer, s, kv);
      if (L.kind == Attn::kCsa) {
        EmitEntries(L, L.index_comp, L.off_ia, L.off_iz, L.off_ikey, true, kv_layer, s, kv);
      }
    }
  }
  if (L.kind == Attn::kCsa) SelectIndexed(L, kv_layer, batch, kv, pool);

  // Attention of every token over its window and compressed entries.
  std::vector<int32_t> token_seq(static_cast<size_t>(T));
  int64_t max_keys = 0;
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const auto& s = batch.seqs[si];
    for (int32_t i = 0; i < s.num_tokens; ++i) token_seq[s.token_offset + i] = static_cast<int32_t>(si);
    const int64_t ctx = s.start_pos + s.num_tokens;
    max_keys = std::max<int64_t>(max_keys, ds_.sliding_window + (compressed ? ctx / L.ratio : 0));
  }
  const int64_t K = ds_.index_topk;
  Grow(out_, T * cfg_.hidden);
  attn_.Attend(L, T, nh, hd, cfg_.rope_dim, ds_.o_groups, ds_.o_lora_rank, max_keys, cosv, sinv,
               out_.data(), pool, [&](int64_t t, const float** keys) {
                 const SequenceSlice& s = batch.seqs[token_seq[t]];
                 const int32_t p = positions_[t];
                 auto slot = [&](int32_t pos) {
                   return kv.Slot(kv_layer, s.block_table[pos / kv.block_size],
                                  pos % kv.block_size);
                 };
                 int64_t n = 0;
                 for (int32_t j = std::max(0, p - ds_.sliding_window + 1); j <= p; ++j) {
                   keys[n++] = slot(j);
                 }
                 if (L.kind == Attn::kHca) {
                   const int32_t visible = (p + 1) / L.ratio;
                   for (int32_t j = 0; j < visible; ++j) {
                     keys[n++] = slot(L.ratio * (j + 1) - 1) + L.off_entry;
                   }
                 } else if (L.kind == Attn::kCsa) {
                   const int32_t* sel = selected_.data() + t * K;
                   for (int64_t k = 0; k < K && sel[k] >= 0; ++k) {
                     keys[n++] = slot(L.ratio * (sel[k] + 1) - 1) + L.off_entry;
                   }
                 }
                 return n;
               });
}

void DeepseekV4Impl::RunBlock(const Layer& L, int kv_layer, const ForwardBatch& batch,
                              KvCache& kv, util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, H = cfg_.hidden;
  HcPre(L.hc_attn, T, pool);
  kernels::RmsNorm(x_.data(), L.attn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  Attention(L, kv_layer, batch, kv, pool);
  mhc_.Expand(out_.data(), T);
  HcPre(L.hc_ffn, T, pool);
  kernels::RmsNorm(x_.data(), L.ffn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  // transformers clamps with the configured limit whatever it is, and applies the routing
  // weight after w2.
  const dsv4::MoeOptions moe{.routed_scaling = ds_.routed_scaling_factor,
                             .swiglu_limit = ds_.swiglu_limit};
  Grow(out_, T * H);
  moe_.Run(L.moe, moe, h_.data(), batch.tokens, T, H, out_.data(), pool);
  mhc_.Expand(out_.data(), T);
}

void DeepseekV4Impl::Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                             util::ThreadPool& pool) {
  DI_CHECK(kv.floats_per_token == kv_floats_ && kv.num_layers >= cfg_.num_layers);
  const int64_t T = batch.num_tokens, H = cfg_.hidden;
  Prepare(batch);
  Grow(h_, T * H);
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, h_.data());
  mhc_.Start(h_.data(), T);
  for (int l = 0; l < cfg_.num_layers; ++l) RunBlock(layers_[l], l, batch, kv, pool);
  last_tokens_ = T;
  Logits(batch, hc_head_, final_norm_, logits, pool);
}

void DeepseekV4Impl::FinalHidden(float* out) const {
  std::memcpy(out, mhc_.data(), last_tokens_ * mtp_hidden_size() * sizeof(float));
}

// The MTP module (DeepSeek's MTPBlock): stream k of token x_{p+1} at position p starts as
// e_proj(enorm(Emb(x_{p+1}))) + h_proj(hnorm(X_k)) with X the main model's final streams at p,
// runs one window-only block, and predicts x_{p+2} through its own hc head and norm and the
// shared output head. hidden_out is the block's output streams (for chaining drafts).
void DeepseekV4Impl::ForwardMtp(int k, const ForwardBatch& batch, const float* prev_hidden,
                                KvCache& mtp_kv, float* logits, float* hidden_out,
                                util::ThreadPool& pool) {
  DI_CHECK(k >= 0 && k < num_mtp_layers());
  DI_CHECK(mtp_kv.floats_per_token == kv_floats_ && mtp_kv.num_layers > k);
  const Layer& L = mtp_[k];
  const int64_t T = batch.num_tokens, H = cfg_.hidden, hc = ds_.hc_mult, D = hc * H;
  Prepare(batch);
  Grow(h_, T * H);
  Grow(tmp_, T * D);
  Grow(x_, T * H);
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, h_.data());
  kernels::RmsNorm(h_.data(), L.enorm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  kernels::MatMul(*L.e_proj, h_.data(), T, x_.data(), pool);
  kernels::RmsNorm(prev_hidden, L.hnorm.data(), T * hc, H, cfg_.rms_norm_eps, tmp_.data());
  kernels::MatMul(*L.h_proj, tmp_.data(), T * hc, mhc_.Reserve(T), pool);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < hc; ++j) {
      kernels::AddInPlace(mhc_.data() + t * D + j * H, x_.data() + t * H, H);
    }
  }
  RunBlock(L, k, batch, mtp_kv, pool);
  if (hidden_out != nullptr) std::memcpy(hidden_out, mhc_.data(), T * D * sizeof(float));
  Logits(batch, L.hc_head, L.head_norm, logits, pool);
}

// The hc head on the rows that need logits (pre_j = sigmoid(m_j scale + base_j) + eps, collapse),
// the final norm and the output head.
void DeepseekV4Impl::Logits(const ForwardBatch& batch, const HcSite& head,
                            const std::vector<float>& norm, float* logits,
                            util::ThreadPool& pool) {
  const int64_t H = cfg_.hidden, hc = ds_.hc_mult, D = hc * H;
  const int32_t num_rows = batch.num_logit_rows();
  if (num_rows == 0 || logits == nullptr) return;
  Grow(rows_, int64_t{num_rows} * D);
  GatherLogitRows(batch, mhc_.data(), D, rows_.data());
  Grow(tmp_, int64_t{num_rows} * D);
  UnweightedRmsNorm(rows_.data(), num_rows, D, cfg_.rms_norm_eps, tmp_.data());
  Grow(hc_mix_, int64_t{num_rows} * hc);
  kernels::MatMul(*head.fn, tmp_.data(), num_rows, hc_mix_.data(), pool);
  Grow(x_, int64_t{num_rows} * H);
  for (int64_t t = 0; t < num_rows; ++t) {
    float pre[64];
    for (int64_t j = 0; j < hc; ++j) {
      pre[j] = 1.0f / (1.0f + std::exp(-(hc_mix_[t * hc + j] * head.scale[0] + head.base[j]))) +
               ds_.hc_eps;
    }
    const float* xs = rows_.data() + t * D;
    for (int64_t i = 0; i < H; ++i) {
      float acc = 0;
      for (int64_t j = 0; j < hc; ++j) acc += pre[j] * xs[j * H + i];
      x_[t * H + i] = acc;
    }
  }
  kernels::RmsNorm(x_.data(), norm.data(), num_rows, H, cfg_.rms_norm_eps, x_.data());
  kernels::MatMul(*head_, x_.data(), num_rows, logits, pool);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CausalLm>> CreateDeepseekV4(const model::Model& model) {
  if (!model.config.deepseek_v4) {
    return InvalidArgumentError(util::codes::kBadConfig,
                                "model has no DeepSeek-V4 hyperparameters");
  }
  if (model.config.deepseek_v4->hc_mult > 64) {
    return InvalidArgumentError(util::codes::kBadConfig, "hc_mult above 64");
  }
  auto lm = std::make_unique<DeepseekV4Impl>(model);
  DI_RETURN_IF_ERROR(lm->Init());
  return std::unique_ptr<CausalLm>(std::move(lm));
}

}  // namespace deepinfer::arch
