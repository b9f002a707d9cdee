// DeepSeek-V4's sliding-window / HCA / CSA attention block (deepseek_v4_attention.h).

#include "arch/deepseek_v4_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "arch/deepseek_v4_ops.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "util/status.h"

namespace deepinfer::arch::dsv4 {
namespace {

using tensor::TensorView;
using Attn = model::DeepseekV4Config::Attention;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

absl::StatusOr<Compressor> LoadCompressor(TensorSchema& schema, const std::string& p, int dim,
                                          int coff, int ratio, int64_t hidden) {
  Compressor c;
  c.dim = dim;
  c.coff = coff;
  DI_ASSIGN_OR_RETURN(c.wkv, schema.Mat(p + "wkv.weight", int64_t{coff} * dim, hidden));
  DI_ASSIGN_OR_RETURN(c.wgate, schema.Mat(p + "wgate.weight", int64_t{coff} * dim, hidden));
  DI_ASSIGN_OR_RETURN(c.ape, schema.Vec(p + "ape", {ratio, int64_t{coff} * dim}));
  DI_ASSIGN_OR_RETURN(c.norm, schema.Vec(p + "norm.weight", {dim}));
  return c;
}

}  // namespace

absl::StatusOr<CompressedAttentionLayer> LoadCompressedAttention(
    TensorSchema& schema, const std::string& prefix, const model::ModelConfig& cfg,
    const model::DeepseekV4Config& ds, Attn kind, int ratio) {
  const std::string a = prefix + "attn.";
  const int64_t H = cfg.hidden, hd = cfg.head_dim;
  CompressedAttentionLayer L;
  L.kind = kind;
  L.ratio = ratio;
  int64_t off = hd;  // the window key/value first
  if (L.kind != Attn::kSliding) {
    const int coff = L.kind == Attn::kCsa ? 2 : 1;
    DI_ASSIGN_OR_RETURN(L.comp, LoadCompressor(schema, a + "compressor.", static_cast<int>(hd),
                                               coff, L.ratio, H));
    L.off_a = off;
    L.off_z = off + coff * hd;
    off = L.off_z + coff * hd;
    L.entry_floats = hd;
  }
  if (L.kind == Attn::kCsa) {
    const int64_t ih = ds.index_n_heads, ihd = ds.index_head_dim;
    DI_ASSIGN_OR_RETURN(L.index_wq_b,
                        schema.Mat(a + "indexer.wq_b.weight", ih * ihd, ds.q_lora_rank));
    DI_ASSIGN_OR_RETURN(L.index_weights, schema.Mat(a + "indexer.weights_proj.weight", ih, H));
    DI_ASSIGN_OR_RETURN(L.index_comp, LoadCompressor(schema, a + "indexer.compressor.",
                                                     static_cast<int>(ihd), 2, L.ratio, H));
    L.off_ia = off;
    L.off_iz = off + 2 * ihd;
    off = L.off_iz + 2 * ihd;
    L.entry_floats += ihd;
  }
  L.window_floats = off;
  return L;
}

// A cached key/value (window or compressed entry) under kDeepseekQat: its non-rotary part as FP8
// per 64 values (the rotary tail stays float, as DeepSeek stores it).
void CompressedAttention::QuantizeKv(float* x, int64_t dim, bool qat) const {
  if (qat) FakeQuantFp8(x, dim - cfg_->rope_dim, 64, 1e-4f);
}

// An indexer query head or key under kDeepseekQat: Hadamard-rotated (when index_head_dim is a
// power of two), then FP4 per 32.
void CompressedAttention::QuantizeIndex(float* x, bool qat) const {
  if (!qat) return;
  const int64_t n = ds_->index_head_dim;
  if ((n & (n - 1)) == 0) Hadamard(x, n);
  FakeQuantFp4(x, n, 32);
}

// Writes the entries that the slice's tokens close: entry j (ratio r) pools the tokens of
// window j (and, overlapping, the first halves of window j - 1) by a per-channel softmax of
// z + ape over those tokens (their a, z at off_a / off_z of the window slots), then kv norm and
// RoPE at position r j; stored as entry j of `entries` (the index key head_dim floats into it).
void CompressedAttention::EmitEntries(const CompressedAttentionLayer& L, const Compressor& c,
                                      int64_t off_a, int64_t off_z, bool index_keys,
                                      const EntryCache& entries, int kv_layer,
                                      const SequenceSlice& s, const RopeTables& rope, bool qat,
                                      KvCache& kv) {
  const int r = L.ratio, dim = c.dim, coff = c.coff;
  const int half = cfg_->rope_dim / 2;
  Grow(rows_, int64_t{4} * dim + 2 * half);
  float* num = rows_.data();
  float* den = num + dim;
  float* mx = den + dim;
  float* cs = mx + dim + dim;
  float* sn = cs + half;
  auto slot = [&](int32_t pos) { return WindowSlot(kv, kv_layer, s, pos); };
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
    float* out = entries.Entry(kv, s, j) + (index_keys ? cfg_->head_dim : 0);
    kernels::RmsNorm(num, c.norm.data(), 1, dim, cfg_->rms_norm_eps, out);
    rope.CompressedAt(first, cs, sn);
    RopeInterleaved(out + dim - cfg_->rope_dim, cs, sn, cfg_->rope_dim / 2, /*inverse=*/false);
    if (index_keys) {
      QuantizeIndex(out, qat);
      if (PackedIndexKeys(qat, dim)) {
        kernels::PackFp4IndexKey(out, static_cast<int>(dim), reinterpret_cast<uint8_t*>(out));
      }
    } else {
      QuantizeKv(out, dim, qat);
    }
  }
}

// CSA: the lightning indexer's choice of compressed entries for every token of the batch, into
// selected_ [T, index_topk] (-1 padded).
void CompressedAttention::SelectIndexed(const CompressedAttentionLayer& L,
                                        const EntryCache& entries, const ForwardBatch& batch, const int32_t* positions,
                                        const RopeTables& rope, const float* h, bool qat,
                                        KvCache& kv, util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, ih = ds_->index_n_heads, ihd = ds_->index_head_dim;
  const int64_t K = ds_->index_topk;
  indexer_.Queries(*L.index_wq_b, *L.index_weights, attn_.qr(), h, T, ih, ihd, cfg_->rope_dim,
                   rope.cos_comp.data(), rope.sin_comp.data(),
                   [&](float* q) { QuantizeIndex(q, qat); }, pool);
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
        s, V, ih, ihd, PackedIndexKeys(qat, ihd), L.ratio, first, static_cast<int32_t>(K), V,
        positions, [&](int64_t j) { return entries.IndexKeys(kv, s, j, cfg_->head_dim); },
        [](int64_t, int64_t) { return true; },
        [&](int64_t t, int32_t visible, const float* score, int32_t* order) {
          for (int32_t j = 0; j < visible; ++j) order[j] = j;
          SortTopK(score, order, visible, static_cast<int32_t>(K));
          std::copy(order, order + K, selected_.data() + t * K);
        },
        pool);
  }
}

void CompressedAttention::Run(const AttentionLayer& w, const CompressedAttentionLayer& L,
                              int kv_layer, const ForwardBatch& batch, const int32_t* positions,
                              const RopeTables& rope, const float* h, bool qat, KvCache& kv,
                              float* out, util::ThreadPool& pool) {
  const model::ModelConfig& cfg = *cfg_;
  const model::DeepseekV4Config& ds = *ds_;
  const int64_t T = batch.num_tokens, nh = cfg.num_heads, hd = cfg.head_dim;
  const bool compressed = L.kind != Attn::kSliding;
  const float* cosv = compressed ? rope.cos_comp.data() : rope.cos_main.data();
  const float* sinv = compressed ? rope.sin_comp.data() : rope.sin_main.data();
  // Queries: q LoRA, per-head weightless RMS norm, RoPE; this step's key/values (and compressor
  // projections) into the tokens' slots.
  attn_.Queries(w, h, T, nh, hd, cfg.rope_dim, cfg.rms_norm_eps, /*head_norm=*/true, cosv, sinv,
                pool);
  attn_.WindowKv(*w.wkv, w.kv_norm, h, T, cfg.rope_dim, cfg.rms_norm_eps, cosv, sinv,
                 [&](float* k) { QuantizeKv(k, hd, qat); }, pool);
  const float* kvrow = attn_.kv();
  const int64_t ca_width = compressed ? int64_t{L.comp.coff} * hd : 0;
  const int64_t ia_width = L.kind == Attn::kCsa ? 2 * int64_t{ds.index_head_dim} : 0;
  if (compressed) {
    Grow(ca_, T * ca_width);
    Grow(cz_, T * ca_width);
    const TensorView* ws[2] = {L.comp.wkv, L.comp.wgate};
    float* ys[2] = {ca_.data(), cz_.data()};
    kernels::MatMulGroup(ws, ys, 2, h, T, pool);
  }
  if (ia_width > 0) {
    Grow(ia_, T * ia_width);
    Grow(iz_, T * ia_width);
    const TensorView* ws[2] = {L.index_comp.wkv, L.index_comp.wgate};
    float* ys[2] = {ia_.data(), iz_.data()};
    kernels::MatMulGroup(ws, ys, 2, h, T, pool);
  }
  DI_CHECK(kv.window != nullptr || !compressed);
  const EntryCache entries =
      compressed ? EntryCache::Bind(kv, kv_layer, L.ratio, L.entry_floats) : EntryCache{};
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int32_t pos = s.start_pos + i;
      const int64_t t = s.token_offset + i;
      float* slot = WindowSlot(kv, kv_layer, s, pos);
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
      EmitEntries(L, L.comp, L.off_a, L.off_z, false, entries, kv_layer, s, rope, qat, kv);
      if (L.kind == Attn::kCsa) {
        EmitEntries(L, L.index_comp, L.off_ia, L.off_iz, true, entries, kv_layer, s, rope, qat,
                    kv);
      }
    }
  }
  if (L.kind == Attn::kCsa) SelectIndexed(L, entries, batch, positions, rope, h, qat, kv, pool);

  // Attention of every token over its window and compressed entries.
  Grow(token_seq_, T);
  int64_t max_keys = 0;
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const auto& s = batch.seqs[si];
    for (int32_t i = 0; i < s.num_tokens; ++i) token_seq_[s.token_offset + i] = static_cast<int32_t>(si);
    const int64_t ctx = s.start_pos + s.num_tokens;
    max_keys = std::max<int64_t>(max_keys, ds.sliding_window + (compressed ? ctx / L.ratio : 0));
  }
  const int64_t K = ds.index_topk;
  attn_.Attend(w, T, nh, hd, cfg.rope_dim, ds.o_groups, ds.o_lora_rank, max_keys, cosv, sinv, out,
               pool, [&](int64_t t, const float** keys) {
                 const SequenceSlice& s = batch.seqs[token_seq_[t]];
                 const int32_t p = positions[t];
                 int64_t n = 0;
                 for (int32_t j = std::max(0, p - ds.sliding_window + 1); j <= p; ++j) {
                   keys[n++] = WindowSlot(kv, kv_layer, s, j);
                 }
                 if (L.kind == Attn::kHca) {
                   const int32_t visible = (p + 1) / L.ratio;
                   for (int32_t j = 0; j < visible; ++j) keys[n++] = entries.Entry(kv, s, j);
                 } else if (L.kind == Attn::kCsa) {
                   const int32_t* sel = selected_.data() + t * K;
                   for (int64_t k = 0; k < K && sel[k] >= 0; ++k) {
                     keys[n++] = entries.Entry(kv, s, sel[k]);
                   }
                 }
                 return n;
               });
}

}  // namespace deepinfer::arch::dsv4
