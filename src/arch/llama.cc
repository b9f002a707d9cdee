// Llama-architecture forward pass (llama2.c checkpoints and GGUF "llama" models) over a paged
// KV cache. One call handles any mix of prefill chunks and decode tokens from many sequences;
// every matmul runs once over all tokens of the step.

#include "arch/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "arch/tensor_schema.h"
#include "fmt/format.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ggml_numerics.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/tensor_values.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using tensor::TensorView;

// Query tokens per attention work item: K/V rows are read once per tile.
constexpr int kAttentionTile = 16;
// Attention over a long context is split into parts of this many positions (whole KV blocks),
// computed in parallel and merged. The split depends only on the positions, never on what else
// is in the batch, so a sequence gets the same logits alone or batched, in one prefill chunk or
// several (batch invariance).
constexpr int kPositionsPerPart = 256;

class LlamaLm final : public CausalLm {
 public:
  struct Layer {
    const float* attn_norm;
    const TensorView* wq;
    const TensorView* wk;
    const TensorView* wv;
    const TensorView* wo;
    const float* ffn_norm;
    const TensorView* w_gate;
    const TensorView* w_up;
    const TensorView* w_down;
  };

  LlamaLm(const model::Model& m)
      : model_(m),
        cfg_(m.config),
        schema_(m, {.matrices = MatrixTypes::kGguf, .check_finite = false, .implied = "expected"}) {
    // Debug aid for numerics work: DEEPINFER_DUMP_DIR=dir writes every intermediate tensor of
    // Forward call number DEEPINFER_DUMP_STEP (default 0) to dir/NNN_name.bin (raw f32), to
    // compare op by op with llama.cpp's eval callback. Off: one branch per op.
    if (const char* dir = std::getenv("DEEPINFER_DUMP_DIR")) {
      dump_dir_ = dir;
      const char* step = std::getenv("DEEPINFER_DUMP_STEP");
      dump_step_ = step ? std::atoi(step) : 0;
    }
  }

  absl::Status Init();

  const model::ModelConfig& config() const override { return cfg_; }
  int64_t kv_floats_per_token() const override {
    return 2 * int64_t{cfg_.num_kv_heads} * cfg_.head_dim;
  }

  void Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
               util::ThreadPool& pool) override;
  bool SetNumerics(Numerics numerics) override {
    numerics_ = numerics;
    return true;
  }
  // The ggml-order attention reads f32 rows (llama.cpp's own f16 cache is emulated there).
  bool SupportsKvDtype(kernels::KvDtype dtype) const override {
    return dtype == kernels::KvDtype::kF32 || numerics_ == Numerics::kFast;
  }

 private:
  // The Llama tensor schema (every statement of it is a Norm or Mat call in Init): GGUF's weight
  // types, F32 norms, aligned data; values are not scanned for NaN, as llama.cpp does not.
  absl::StatusOr<const float*> Norm(const std::string& name) {
    DI_ASSIGN_OR_RETURN(const TensorView* t, schema_.Tensor(name, {cfg_.hidden}));
    return reinterpret_cast<const float*>(t->data);
  }
  absl::StatusOr<const TensorView*> Mat(const std::string& name, int64_t rows, int64_t cols) {
    return schema_.Mat(name, rows, cols);
  }
  void Attention(const ForwardBatch& batch, int layer, KvCache& kv, util::ThreadPool& pool);
  void AttentionGgml(const ForwardBatch& batch, int layer, KvCache& kv, util::ThreadPool& pool);
  void Dump(const char* name, int layer, const float* data, int64_t count) {
    if (!dump_dir_.empty() && forward_calls_ == dump_step_) WriteDump(name, layer, data, count);
  }
  void WriteDump(const char* name, int layer, const float* data, int64_t count);
  bool ggml() const { return numerics_ == Numerics::kGgml; }
  void Reserve(int64_t num_tokens, int num_threads);
  kernels::GqaKvLayout KvLayout(const KvCache& kv) const {
    return {kv.block_size, cfg_.num_kv_heads, cfg_.head_dim, kv.dtype};
  }

  const model::Model& model_;
  model::ModelConfig cfg_;
  TensorSchema schema_;
  Numerics numerics_ = Numerics::kFast;
  std::string dump_dir_;  // empty: no dumps
  int dump_step_ = 0, forward_calls_ = 0, dump_seq_ = 0;
  std::vector<Layer> layers_;
  const float* output_norm_ = nullptr;
  const TensorView* embed_ = nullptr;
  const TensorView* output_ = nullptr;

  // Scratch, grown on demand and reused across steps.
  std::vector<float> x_, h_, q_, k_, v_, attn_, tmp_, gate_, up_, cos_, sin_, rows_;
  std::vector<int32_t> positions_, token_seq_;

  // Attention work: one item per (query tile, KV head, part of the positions).
  struct AttentionItem {
    int32_t slice, first, num_tokens;
    int32_t kv_head;
    int32_t pos_begin, pos_end;
    int32_t num_parts;
    int64_t partial;  // first slot of the item's (tile, head) in partial_*_, or -1: direct
  };
  std::vector<AttentionItem> items_;
  std::vector<int64_t> merges_;  // index in items_ of part 0 of every split (tile, head)
  std::vector<float> attn_scratch_, partial_o_, partial_ml_;
};

absl::Status LlamaLm::Init() {
  const int64_t h = cfg_.hidden, qd = int64_t{cfg_.num_heads} * cfg_.head_dim,
                kvd = int64_t{cfg_.num_kv_heads} * cfg_.head_dim, f = cfg_.ffn_hidden;
  // The embedding first, with the one check that involves the tokenizer.
  DI_ASSIGN_OR_RETURN(const TensorView* embd, model_.Get("token_embd.weight"));
  if (embd->shape.size() != 2 || embd->shape[1] != h) {
    return InvalidArgumentError(util::codes::kShapeMismatch,
                                fmt::format("token_embd.weight has shape {}, expected [vocab, {}]",
                                            model::ShapeString(embd->shape), h));
  }
  const size_t num_tokens = model_.tokenizer.tokens.size();
  if (embd->shape[0] != static_cast<int64_t>(num_tokens) || embd->shape[0] != cfg_.vocab) {
    return InvalidArgumentError(util::codes::kVocabMismatch,
                                fmt::format("token_embd.weight has {} rows; the tokenizer has {} "
                                            "tokens and the config says {}",
                                            embd->shape[0], num_tokens, cfg_.vocab));
  }
  DI_ASSIGN_OR_RETURN(embed_, Mat("token_embd.weight", cfg_.vocab, h));
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    Layer L;
    DI_ASSIGN_OR_RETURN(L.attn_norm, Norm(p + "attn_norm.weight"));
    DI_ASSIGN_OR_RETURN(L.wq, Mat(p + "attn_q.weight", qd, h));
    DI_ASSIGN_OR_RETURN(L.wk, Mat(p + "attn_k.weight", kvd, h));
    DI_ASSIGN_OR_RETURN(L.wv, Mat(p + "attn_v.weight", kvd, h));
    DI_ASSIGN_OR_RETURN(L.wo, Mat(p + "attn_output.weight", h, qd));
    DI_ASSIGN_OR_RETURN(L.ffn_norm, Norm(p + "ffn_norm.weight"));
    DI_ASSIGN_OR_RETURN(L.w_gate, Mat(p + "ffn_gate.weight", f, h));
    DI_ASSIGN_OR_RETURN(L.w_up, Mat(p + "ffn_up.weight", f, h));
    DI_ASSIGN_OR_RETURN(L.w_down, Mat(p + "ffn_down.weight", h, f));
    layers_.push_back(L);
  }
  DI_ASSIGN_OR_RETURN(output_norm_, Norm("output_norm.weight"));
  if (cfg_.tied_embeddings) {
    output_ = embed_;
  } else {
    DI_ASSIGN_OR_RETURN(output_, Mat("output.weight", cfg_.vocab, h));
  }
  if (cfg_.num_heads % cfg_.num_kv_heads != 0 || cfg_.rope_dim > cfg_.head_dim ||
      cfg_.rope_dim % 2 != 0) {
    return InvalidArgumentError(util::codes::kBadConfig, "inconsistent head or rope dimensions");
  }
  return absl::OkStatus();
}

void LlamaLm::Reserve(int64_t t, int num_threads) {
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  const int64_t h = cfg_.hidden, qd = int64_t{cfg_.num_heads} * cfg_.head_dim,
                kvd = int64_t{cfg_.num_kv_heads} * cfg_.head_dim;
  grow(x_, t * h);
  grow(h_, t * h);
  grow(q_, t * qd);
  grow(k_, t * kvd);
  grow(v_, t * kvd);
  grow(attn_, t * qd);
  grow(tmp_, t * std::max(h, qd));
  grow(gate_, t * cfg_.ffn_hidden);
  grow(up_, t * cfg_.ffn_hidden);
  grow(cos_, t * (cfg_.rope_dim / 2));
  grow(sin_, t * (cfg_.rope_dim / 2));
  if (static_cast<int64_t>(positions_.size()) < t) {
    positions_.resize(t);
    token_seq_.resize(t);
  }
}

void LlamaLm::Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                      util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens;
  const int64_t H = cfg_.hidden, kvd = int64_t{cfg_.num_kv_heads} * cfg_.head_dim;
  Reserve(T, pool.num_threads());
  const kernels::GqaKvLayout layout = KvLayout(kv);
  BatchPositions(batch, positions_.data(), token_seq_.data());
  float* x = x_.data();
  float* h = h_.data();
  const int64_t qd = int64_t{cfg_.num_heads} * cfg_.head_dim, F = cfg_.ffn_hidden;
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, x);
  Dump("embd", -1, x, T * H);
  // RoPE, SwiGLU and RMSNorm use ggml's arithmetic in both modes: it costs nothing there.
  kernels::RopeTablesGgml(positions_.data(), T, cfg_.rope_dim, cfg_.rope_theta, cos_.data(),
                          sin_.data());
  auto matmul = [&](const TensorView& w, const float* in, float* out) {
    if (ggml()) {
      kernels::MatMulGgml(w, in, T, out, pool);
    } else {
      kernels::MatMul(w, in, T, out, pool);
    }
  };
  auto matmul_group = [&](const TensorView* const* ws, float* const* ys, int count,
                          const float* in) {
    if (ggml()) {
      kernels::MatMulGroupGgml(ws, ys, count, in, T, pool);
    } else {
      kernels::MatMulGroup(ws, ys, count, in, T, pool);
    }
  };

  for (int l = 0; l < cfg_.num_layers; ++l) {
    const Layer& L = layers_[l];
    kernels::RmsNorm(x, L.attn_norm, T, H, cfg_.rms_norm_eps, h);
    Dump("attn_norm", l, h, T * H);
    {
      const TensorView* ws[3] = {L.wq, L.wk, L.wv};
      float* ys[3] = {q_.data(), k_.data(), v_.data()};
      matmul_group(ws, ys, 3, h);
    }
    Dump("Qcur_mm", l, q_.data(), T * qd);
    Dump("Kcur_mm", l, k_.data(), T * kvd);
    Dump("Vcur", l, v_.data(), T * kvd);
    kernels::ApplyRopeGgml(q_.data(), T, cfg_.num_heads, cfg_.head_dim, cfg_.rope_dim,
                           cfg_.rope_style, cos_.data(), sin_.data());
    kernels::ApplyRopeGgml(k_.data(), T, cfg_.num_kv_heads, cfg_.head_dim, cfg_.rope_dim,
                           cfg_.rope_style, cos_.data(), sin_.data());
    Dump("Qcur", l, q_.data(), T * qd);
    Dump("Kcur", l, k_.data(), T * kvd);
    // Append this step's K and V to each sequence's blocks before attending, so a token sees
    // itself and the earlier tokens of its own chunk.
    for (const auto& s : batch.seqs) {
      for (int32_t i = 0; i < s.num_tokens; ++i) {
        int32_t pos = s.start_pos + i;
        uint8_t* block =
            kv.layer_bytes(l) + int64_t{s.block_table[pos / kv.block_size]} * layout.block_bytes();
        int64_t t = s.token_offset + i;
        kernels::StoreKv(layout, block, pos % kv.block_size, k_.data() + t * kvd,
                         v_.data() + t * kvd);
      }
    }
    if (ggml()) {
      AttentionGgml(batch, l, kv, pool);
    } else {
      Attention(batch, l, kv, pool);
    }
    Dump("kqv_out", l, attn_.data(), T * qd);
    matmul(*L.wo, attn_.data(), tmp_.data());
    Dump("attn_out", l, tmp_.data(), T * H);
    kernels::AddInPlace(x, tmp_.data(), T * H);
    Dump("ffn_inp", l, x, T * H);

    kernels::RmsNorm(x, L.ffn_norm, T, H, cfg_.rms_norm_eps, h);
    Dump("ffn_norm", l, h, T * H);
    {
      const TensorView* ws[2] = {L.w_gate, L.w_up};
      float* ys[2] = {gate_.data(), up_.data()};
      matmul_group(ws, ys, 2, h);
    }
    Dump("ffn_gate", l, gate_.data(), T * F);
    Dump("ffn_up", l, up_.data(), T * F);
    kernels::SwiGluGgml(gate_.data(), up_.data(), T * F, gate_.data());
    Dump("ffn_swiglu", l, gate_.data(), T * F);
    matmul(*L.w_down, gate_.data(), tmp_.data());
    Dump("ffn_out", l, tmp_.data(), T * H);
    kernels::AddInPlace(x, tmp_.data(), T * H);
    Dump("l_out", l, x, T * H);
  }

  // Only the rows that need logits go through the final norm and the (large) output matmul.
  int32_t num_rows = batch.num_logit_rows();
  if (num_rows == 0) {
    ++forward_calls_;
    return;
  }
  if (static_cast<int64_t>(rows_.size()) < int64_t{num_rows} * H)
    rows_.resize(int64_t{num_rows} * H);
  GatherLogitRows(batch, x, H, rows_.data());
  kernels::RmsNorm(rows_.data(), output_norm_, num_rows, H, cfg_.rms_norm_eps, rows_.data());
  Dump("result_norm", -1, rows_.data(), int64_t{num_rows} * H);
  if (ggml()) {
    kernels::MatMulGgml(*output_, rows_.data(), num_rows, logits, pool);  // num_rows, not T
  } else {
    kernels::MatMul(*output_, rows_.data(), num_rows, logits, pool);
  }
  Dump("result_output", -1, logits, int64_t{num_rows} * cfg_.vocab);
  ++forward_calls_;
}

void LlamaLm::WriteDump(const char* name, int layer, const float* data, int64_t count) {
  std::string path = dump_dir_ + "/";
  char seq[16];
  std::snprintf(seq, sizeof seq, "%03d_", dump_seq_++);
  path += seq;
  path += name;
  if (layer >= 0) {
    path += '-';
    path += std::to_string(layer);
  }
  path += ".bin";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, sizeof(float), static_cast<size_t>(count), f);
    std::fclose(f);
  }
}

void LlamaLm::AttentionGgml(const ForwardBatch& batch, int layer, KvCache& kv,
                            util::ThreadPool& pool) {
  DI_CHECK(kv.dtype == kernels::KvDtype::kF32);
  const int D = cfg_.head_dim, num_kv_heads = cfg_.num_kv_heads;
  const int group = cfg_.num_heads / num_kv_heads;
  const int64_t token_stride = int64_t{cfg_.num_heads} * D;
  // ggml's kq_scale: 1.0f / sqrtf(float(n_embd_head)).
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const kernels::GqaKvLayout layout = KvLayout(kv);
  const int B = kv.block_size;
  const bool batched = batch.num_tokens >= 2;
  const int64_t items = static_cast<int64_t>(batch.seqs.size()) * num_kv_heads;
  pool.ParallelFor(items, [&](int64_t begin, int64_t end, int) {
    // K rows [ctx, D] and V^T rows [D, ctx rounded up to 64] of one KV head, as ggml's cache
    // holds them (its V cache is transposed when flash attention is off).
    thread_local std::vector<float> k, vt, scratch;
    for (int64_t it = begin; it < end; ++it) {
      const SequenceSlice& s = batch.seqs[it / num_kv_heads];
      const int g = static_cast<int>(it % num_kv_heads);
      const int ctx = s.start_pos + s.num_tokens;
      const int64_t pad = (int64_t{ctx} + 63) / 64 * 64;
      if (static_cast<int64_t>(k.size()) < int64_t{ctx} * D) k.resize(int64_t{ctx} * D);
      if (static_cast<int64_t>(vt.size()) < pad * D) vt.resize(pad * D);
      if (static_cast<int64_t>(scratch.size()) < 2 * pad) scratch.resize(2 * pad);
      for (int j = 0; j < ctx; ++j) {
        const float* block =
            kv.layers[layer] + int64_t{s.block_table[j / B]} * layout.block_values();
        const int slot = j % B;
        const float* kt = block + int64_t{g} * D * B + slot;
        const float* vr = block + layout.v_offset() + (int64_t{slot} * num_kv_heads + g) * D;
        for (int d = 0; d < D; ++d) {
          k[int64_t{j} * D + d] = kt[int64_t{d} * B];
          vt[int64_t{d} * pad + j] = vr[d];
        }
      }
      for (int d = 0; d < D; ++d) {
        std::fill(vt.begin() + int64_t{d} * pad + ctx, vt.begin() + int64_t{d} * pad + pad, 0.0f);
      }
      for (int i = 0; i < s.num_tokens; ++i) {
        const int64_t t = s.token_offset + i;
        for (int hh = 0; hh < group; ++hh) {
          const int64_t off = t * token_stride + (int64_t{g} * group + hh) * D;
          kernels::AttendRowGgml(q_.data() + off, k.data(), vt.data(), pad, s.start_pos + i + 1, D,
                                 scale, batched, scratch.data(), attn_.data() + off);
        }
      }
    }
  });
}

void LlamaLm::Attention(const ForwardBatch& batch, int layer, KvCache& kv, util::ThreadPool& pool) {
  const int num_heads = cfg_.num_heads, head_dim = cfg_.head_dim;
  const int num_kv_heads = cfg_.num_kv_heads, group = num_heads / num_kv_heads;
  const int64_t token_stride = int64_t{num_heads} * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const kernels::GqaKvLayout layout = KvLayout(kv);
  const int block_size = kv.block_size;
  const int threads = pool.num_threads();
  const int rows_max = kAttentionTile * group;

  // Items: every (query tile, KV head, part of the positions).
  items_.clear();
  merges_.clear();
  int64_t num_partials = 0;
  for (int32_t si = 0; si < static_cast<int32_t>(batch.seqs.size()); ++si) {
    const SequenceSlice& s = batch.seqs[si];
    for (int32_t first = 0; first < s.num_tokens; first += kAttentionTile) {
      const int32_t n = std::min(kAttentionTile, s.num_tokens - first);
      const int32_t ctx = s.start_pos + first + n;
      const int32_t blocks = (ctx + block_size - 1) / block_size;
      const int32_t per_part = std::max(1, kPositionsPerPart / block_size);  // in blocks
      const int32_t parts = (blocks + per_part - 1) / per_part;              // none of them empty
      for (int32_t g = 0; g < num_kv_heads; ++g) {
        if (parts > 1) merges_.push_back(static_cast<int64_t>(items_.size()));
        for (int32_t p = 0; p < parts; ++p) {
          const int32_t begin = p * per_part * block_size;
          const int32_t end = std::min(ctx, (p + 1) * per_part * block_size);
          items_.push_back({si, first, n, g, begin, end, parts, parts > 1 ? num_partials++ : -1});
        }
      }
    }
  }
  const int64_t scratch_floats =
      kernels::AttentionScratchFloats(layout, rows_max) + int64_t{rows_max} * (head_dim + 2);
  if (static_cast<int64_t>(attn_scratch_.size()) < threads * scratch_floats) {
    attn_scratch_.resize(threads * scratch_floats);
  }
  if (static_cast<int64_t>(partial_ml_.size()) < num_partials * rows_max * 2) {
    partial_ml_.resize(num_partials * rows_max * 2);
    partial_o_.resize(num_partials * rows_max * head_dim);
  }
  auto query_of = [&](const AttentionItem& it) {
    const SequenceSlice& s = batch.seqs[it.slice];
    kernels::AttentionQuery q;
    const int64_t offset = (int64_t{s.token_offset} + it.first) * token_stride +
                           int64_t{it.kv_head} * group * head_dim;
    q.q = q_.data() + offset;
    q.token_stride = token_stride;
    q.num_tokens = it.num_tokens;
    q.first_pos = s.start_pos + it.first;
    q.group = group;
    q.kv_head = it.kv_head;
    q.scale = scale;
    return std::make_pair(q, offset);
  };
  auto partial_at = [&](int64_t slot) {
    return kernels::AttentionPartial{partial_o_.data() + slot * rows_max * head_dim,
                                     partial_ml_.data() + slot * rows_max,
                                     partial_ml_.data() + (num_partials + slot) * rows_max};
  };
  pool.ParallelFor(
      static_cast<int64_t>(items_.size()), [&](int64_t begin, int64_t end, int thread) {
        float* scratch = attn_scratch_.data() + thread * scratch_floats;
        float* direct = scratch + kernels::AttentionScratchFloats(layout, rows_max);
        for (int64_t i = begin; i < end; ++i) {
          const AttentionItem& it = items_[i];
          const auto [q, offset] = query_of(it);
          const SequenceSlice& s = batch.seqs[it.slice];
          if (it.partial >= 0) {
            kernels::AttendRange(layout, kv.layers[layer], s.block_table, q, it.pos_begin,
                                 it.pos_end, scratch, partial_at(it.partial));
          } else {
            kernels::AttentionPartial part{direct, direct + int64_t{rows_max} * head_dim,
                                           direct + int64_t{rows_max} * (head_dim + 1)};
            kernels::AttendRange(layout, kv.layers[layer], s.block_table, q, it.pos_begin,
                                 it.pos_end, scratch, part);
            kernels::FinishAttention(q, head_dim, part, 1, rows_max, attn_.data() + offset);
          }
        }
      });
  if (merges_.empty()) return;
  pool.ParallelFor(static_cast<int64_t>(merges_.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const AttentionItem& it = items_[merges_[i]];
      const auto [q, offset] = query_of(it);
      kernels::FinishAttention(q, head_dim, partial_at(it.partial), it.num_parts, rows_max,
                               attn_.data() + offset);
    }
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<CausalLm>> CreateLlama(const model::Model& model) {
  auto lm = std::make_unique<LlamaLm>(model);
  absl::Status s = lm->Init();
  // The message names the file, as the loaders' own errors do.
  if (!model.source.path.empty()) s = WithContext(s, model.source.path);
  DI_RETURN_IF_ERROR(s);
  return std::unique_ptr<CausalLm>(std::move(lm));
}

}  // namespace deepinfer::arch
