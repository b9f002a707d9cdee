#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/moe.h"
#include "arch/mla_attention.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {

// DeepSeek-V3 / V2 forward pass: Multi-head Latent Attention (q LoRA or direct q_proj, latent KV,
// decoupled RoPE on the rope slice with YaRN) and DeepSeek-MoE (dense first layers, then routed
// experts with sigmoid + correction-bias group-limited top-k, or V2's softmax routing, plus
// shared experts). Weight names are the HF checkpoint names ("model.layers.N.self_attn.*").
//
// KV cache and attention: the MLA block's (arch/mla_attention.h): per token and layer the latent
//   [c_kv (kv_lora_rank, after kv_a_layernorm) | k_pe (qk_rope_head_dim, after RoPE)], i.e.
//   kv_floats_per_token() = kv_lora_rank + qk_rope_head_dim; the expanded form for long prefill
//   chunks, the weight-absorbed form for decode and short slices, equal to f32 rounding.
// Routing: ties between equal scores pick the lower expert (group) index.
// Threads / Lifetime: as CausalLm (not thread-safe; borrows the Model).
// Source: DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (MLA, DeepSeekMoE, MTP);
//   transformers modeling_deepseek_v3.py / modeling_deepseek_v2.py (parity reference).
class DeepseekV3Lm : public CausalLm, public DraftHeads {
 public:
  // The attention form (arch/mla_attention.h): expanded, absorbed, or chosen per slice.
  using AttentionMode = MlaAttention::Mode;

  // Forces one attention form for every slice (tests and benchmarks); kAuto is the default.
  virtual void set_attention_mode(AttentionMode mode) = 0;

  // --- Multi-token prediction (MTP / NextN) modules, for speculative drafts (the DraftHeads
  // of kind kMtp, with their full contract here; draft_heads() is null without modules). ---
  Kind kind() const override { return Kind::kMtp; }
  DraftHeads* draft_heads() override { return num_mtp_layers() > 0 ? this : nullptr; }
  int64_t mtp_hidden_size() const override { return config().hidden; }
  //
  // Number of MTP modules whose weights the checkpoint holds ("model.layers.{L + k}.*").
  int num_mtp_layers() const override = 0;

  // Writes the final hidden states (after model.norm) of every token of the last Forward call.
  // Shapes: out [batch.num_tokens of that call, hidden] f32.
  // REQUIRES: Forward was called and nothing else since (the states live in scratch buffers).
  void FinalHidden(float* out) const override = 0;

  // Runs MTP module `k` over a batch laid out like Forward's, continuing each sequence in
  // `mtp_kv` (a KvCache with num_mtp_layers() layers and kv_floats_per_token() floats).
  // Token i of a slice at position p is the next token x_{p+1} and prev_hidden row i is the
  // main model's final hidden state at position p (FinalHidden); the module predicts x_{p+2}:
  //   e = Emb(x_{p+1}) (zero when p == 0), u = eh_proj([enorm(e) ; hnorm(h_p)]),
  //   u = DecoderLayer_{L+k}(u), logits = head(shared_head.norm(u)).
  // Chaining a further draft step feeds `hidden_out` (u before shared_head.norm) back as
  // prev_hidden, as vLLM does.
  // Shapes: prev_hidden [num_tokens, hidden]; logits [num_logit_rows, vocab];
  //   hidden_out [num_tokens, hidden] or null.
  // REQUIRES: 0 <= k < num_mtp_layers().
  // Source: vLLM deepseek_mtp.py (DeepSeekMultiTokenPredictorLayer).
  void ForwardMtp(int k, const ForwardBatch& batch, const float* prev_hidden, KvCache& mtp_kv,
                  float* logits, float* hidden_out, util::ThreadPool& pool) override = 0;
};

// Builds the forward pass for a model with config.deepseek set (architecture "deepseek_v3" or
// "deepseek_v2", loaded by model::LoadHfModel).
// Errors: NotFound "missing_tensor", InvalidArgument "shape_mismatch" / "bad_config".
// Cost: copies every kv_b_proj to f32 for the absorbed form (V3: 64 MiB per layer).
// With `experts` (expert parallelism, arch/moe.h) only this rank's routed experts are read and
// run. Not owned; must outlive the model.
absl::StatusOr<std::unique_ptr<DeepseekV3Lm>> CreateDeepseekV3(const model::Model& model,
                                                               ExpertExchange* experts = nullptr);

}  // namespace deepinfer::arch
