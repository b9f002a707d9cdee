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

#include "arch/gqa_attention.h"
#include "arch/tensor_schema.h"
#include "fmt/format.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ggml_numerics.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/tensor_values.h"
#include "util/aligned_vector.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using tensor::TensorView;

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
        schema_(m, {.matrices = MatrixTypes::kGguf, .check_finite = false, .implied = "expected"}),
        gqa_(cfg_.num_heads, cfg_.num_kv_heads, cfg_.head_dim) {
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
  int64_t kv_floats_per_token() const override { return gqa_.kv_floats_per_token(); }

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
  void Dump(const char* name, int layer, const float* data, int64_t count) {
    if (!dump_dir_.empty() && forward_calls_ == dump_step_) WriteDump(name, layer, data, count);
  }
  void WriteDump(const char* name, int layer, const float* data, int64_t count);
  bool ggml() const { return numerics_ == Numerics::kGgml; }
  void Reserve(int64_t num_tokens);

  const model::Model& model_;
  model::ModelConfig cfg_;
  TensorSchema schema_;
  GqaAttention gqa_;
  Numerics numerics_ = Numerics::kFast;
  std::string dump_dir_;  // empty: no dumps
  int dump_step_ = 0, forward_calls_ = 0, dump_seq_ = 0;
  std::vector<Layer> layers_;
  const float* output_norm_ = nullptr;
  const TensorView* embed_ = nullptr;
  const TensorView* output_ = nullptr;

  // Scratch, grown on demand and reused across steps.
  util::AlignedVector<float> x_, h_, q_, k_, v_, attn_, tmp_, gate_, up_, cos_, sin_, rows_;
  std::vector<int32_t> positions_, token_seq_;
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

void LlamaLm::Reserve(int64_t t) {
  const int64_t h = cfg_.hidden, qd = int64_t{cfg_.num_heads} * cfg_.head_dim,
                kvd = int64_t{cfg_.num_kv_heads} * cfg_.head_dim;
  util::Grow(x_, t * h);
  util::Grow(h_, t * h);
  util::Grow(q_, t * qd);
  util::Grow(k_, t * kvd);
  util::Grow(v_, t * kvd);
  util::Grow(attn_, t * qd);
  util::Grow(tmp_, t * std::max(h, qd));
  util::Grow(gate_, t * cfg_.ffn_hidden);
  util::Grow(up_, t * cfg_.ffn_hidden);
  util::Grow(cos_, t * (cfg_.rope_dim / 2));
  util::Grow(sin_, t * (cfg_.rope_dim / 2));
  if (static_cast<int64_t>(positions_.size()) < t) {
    positions_.resize(t);
    token_seq_.resize(t);
  }
}

void LlamaLm::Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                      util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens;
  const int64_t H = cfg_.hidden, kvd = int64_t{cfg_.num_kv_heads} * cfg_.head_dim;
  Reserve(T);
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
    gqa_.Store(batch, kv, l, k_.data(), v_.data());
    if (ggml()) {
      gqa_.AttendGgml(batch, kv, l, q_.data(), attn_.data(), pool);
    } else {
      gqa_.Attend(batch, kv, l, q_.data(), attn_.data(), pool);
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
