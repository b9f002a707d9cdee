#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"
#include "util/mapped_file.h"

namespace deepinfer::model {

// The tensor vocabulary (src/tensor, below this layer) under the names the loaders here use.
using tensor::Bf16ToFp32;
using tensor::BlockBytes;
using tensor::BlockQ4_0;
using tensor::BlockQ4_1;
using tensor::BlockQ4_K;
using tensor::BlockQ6_K;
using tensor::BlockQ8_0;
using tensor::BlockQ8_1;
using tensor::BlockQ8_K;
using tensor::BlockSize;
using tensor::DType;
using tensor::DTypeFromGgml;
using tensor::DTypeInfo;
using tensor::DTypeName;
using tensor::E8M0ToFp32;
using tensor::FindDType;
using tensor::Fp16ToFp32;
using tensor::Fp32ToBf16;
using tensor::Fp32ToFp16;
using tensor::Fp32ToFp4E2M1;
using tensor::Fp32ToFp8E4M3;
using tensor::Fp4E2M1ToFp32;
using tensor::Fp8E4M3ToFp32;
using tensor::IsQuantized;
using tensor::PowerOfTwoCeilExponent;
using tensor::RopeStyle;
using tensor::RowBytes;
using tensor::TensorView;
using tensor::kQK_K;

// YaRN rotary scaling as in an HF `rope_scaling` / `rope_parameters` entry of type "yarn".
// Fields the file leaves out keep HF's defaults; 0 marks an absent mscale / mscale_all_dim /
// attention_factor (HF treats those as unset).
//
// Source: Peng et al. 2023, "YaRN"; transformers modeling_rope_utils._compute_yarn_parameters.
struct YarnScaling {
  float factor = 1.0f;
  int original_max_position_embeddings = 0;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 0.0f;
  float mscale_all_dim = 0.0f;
  float attention_factor = 0.0f;
  bool truncate = true;
};

// DeepSeek-V2/V3 hyperparameters (Multi-head Latent Attention + MoE), named as in HF config.json.
//
// Units: dims in elements.
// Source: deepseek-ai/DeepSeek-V3 config.json; transformers DeepseekV3Config / DeepseekV2Config.
struct DeepseekConfig {
  int q_lora_rank = 0;  // 0: direct q_proj (config.json null), as DeepSeek-V2-Lite
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int n_routed_experts = 0;  // 0: every layer is dense
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  int n_group = 1;
  int topk_group = 1;
  float routed_scaling_factor = 1.0f;
  bool norm_topk_prob = false;
  std::string scoring_func = "sigmoid";  // "sigmoid" (V3) | "softmax" (V2)
  std::string topk_method = "noaux_tc";  // "noaux_tc" | "greedy" | "group_limited_greedy"
  bool rope_interleave = true;           // rotary on adjacent pairs of the rope slice
  std::optional<YarnScaling> yarn;       // absent: plain RoPE
  int num_nextn_predict_layers = 0;      // MTP modules stored after the main layers

  // True when layer `l` (main or MTP) has a routed MoE instead of the dense SwiGLU.
  bool IsMoeLayer(int l) const {
    return n_routed_experts > 0 && l >= first_k_dense_replace && l % moe_layer_freq == 0;
  }
};

// DeepSeek-V4.1's vision tower, aligner and image preprocessing knobs: the composite
// config.json's `vision_config` plus its top-level `image_token_id`.
//
// Units: hidden / intermediate in elements, patch_size and min_pixels in pixels, max_image_tokens
//   in text tokens (an image's whole span, delimiters included).
// Source: DeepSeek-V4.1-Flash config.json vision_config (model_type deepseek_v41_vision); the
//   reference's ModelArgs vision_* fields (inference/model.py).
struct DeepseekV41VisionConfig {
  int num_layers = 0;
  int hidden = 0;  // vision width D
  int num_heads = 0;
  int intermediate = 0;  // SwiGLU inner width
  int patch_size = 14;
  float rope_theta = 10000.0f;
  int downsample_ratio = 3;  // the aligner merges ratio x ratio patches into one text token
  int max_image_tokens = 1024;
  int min_pixels = 0;
  std::optional<float> max_wh_ratio;  // null in the release
  int image_token_id = -1;            // the id every span position carries in input_ids
  int head_dim() const { return num_heads > 0 ? hidden / num_heads : 0; }
};

// DeepSeek-V4 hyperparameters (mHC residual streams, shared-KV attention with a sliding window
// plus compressed branches, sqrt-softplus / hash-routed MoE), named as in HF config.json.
//
// Per layer (main layers, then MTP modules, which are always window-only): `attention` and
// `compress_ratio` (0 for kSliding). CSA layers pool overlapping windows of 2 x ratio tokens and
// select entries with the lightning indexer; HCA layers pool disjoint windows of `ratio` tokens
// and attend to every visible entry.
// Units: dims in elements; sliding_window and ratios in tokens.
// Source: transformers 5.24 DeepseekV4Config (layer_types / compress_rates / mlp_layer_types,
//   and the release's legacy compress_ratios / num_hash_layers / qk_rope_head_dim it folds in).
struct DeepseekV4Config {
  enum class Attention { kSliding, kCsa, kHca };
  int q_lora_rank = 0;
  int o_lora_rank = 0;
  int o_groups = 1;
  int sliding_window = 128;
  std::vector<Attention> attention;  // [num_layers + num_nextn_predict_layers]
  std::vector<int> compress_ratio;   // same length; 0 for kSliding
  std::vector<bool> hash_routed;     // [num_layers]: expert choice from tid2eid[token]
  float compress_rope_theta = 160000.0f;
  std::optional<YarnScaling> compress_yarn;  // YaRN of the compress rope (absent: plain)
  float compress_rope_mscale = 1.0f;         // YaRN attention_factor on the compress cos/sin
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  int n_routed_experts = 0;
  int n_shared_experts = 1;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  float routed_scaling_factor = 1.0f;
  float swiglu_limit = 10.0f;  // gate <= limit, |up| <= limit (applied as configured)
  int num_nextn_predict_layers = 0;

  // DeepSeek-V4.1 (model_type deepseek_v41; its text_config): lagged mHC, CSA2. A layer with
  // compress_ratio r > 0 attends to the compressed KV of the latest KV source at or before it,
  // through the entries the latest index source selected; KV sources own the compressor (r 2:
  // pooled pairs, r 1: one entry per token) and the index keys. The candidate source's block
  // mask (candidate_topk_blocks blocks of candidate_block_size entries) constrains later index
  // sources. `attention` is kCsa for every r > 0 layer.
  bool v41 = false;
  std::vector<int> kv_source_layer_ids, index_source_layer_ids;
  int candidate_source_layer_id = -1;
  int candidate_topk_blocks = 0;
  int candidate_block_size = 1;
  float gate_temp = 1.0f;
  bool norm_topk_prob = true;
  std::vector<int> engram_layer_ids;
  // Engram (when engram_layer_ids is not empty): n-grams 2..max_ngram_size, heads per n-gram,
  // table row width, the hash vocabulary (primes are drawn above it), the token-class count,
  // each layer's table rows and the pad token.
  int engram_max_ngram_size = 0, engram_n_heads = 0, engram_head_dim = 0;
  int engram_vocab_size = 0, engram_compressed_vocab_size = 0, engram_pad_id = 0;
  std::vector<int> engram_num_embeddings;
  // DSpark block drafter (num_nextn_predict_layers > 0: stages mtp.0 .. mtp.N-1, window-only
  // layers with their own MoE of dspark_n_routed_experts, top dspark_num_experts_per_tok): the
  // stream means at the input of dspark_target_layer_ids feed the stages' windows; a proposal
  // covers dspark_block_size positions (the next token, then dspark_noise_token_id); the Markov
  // head has rank dspark_markov_rank. Research notes 5.5.
  int dspark_block_size = 0, dspark_noise_token_id = 0, dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0, dspark_num_experts_per_tok = 0;
  std::vector<int> dspark_target_layer_ids;
  // The vision tower and aligner (the composite config's vision_config); absent for a text-only
  // config.
  std::optional<DeepseekV41VisionConfig> vision;
};

// Hyperparameters of a decoder-only transformer, filled by a file-format reader.
//
// Units: lengths in tokens; dims in elements.
struct ModelConfig {
  std::string architecture;  // "llama", "deepseek_v3", ...
  std::string name;          // human-readable, for /v1/models and logs
  int num_layers = 0;
  int hidden = 0;  // model width (dim)
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;    // per head; hidden / num_heads for llama
  int ffn_hidden = 0;  // SwiGLU inner width
  int vocab = 0;
  int max_context = 0;  // trained context length
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rope_dim = 0;  // rotated dims per head (== head_dim for llama)
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  bool tied_embeddings = false;                 // output projection reuses token_embd
  std::optional<DeepseekConfig> deepseek;       // set for "deepseek_v3" / "deepseek_v2"
  std::optional<DeepseekV4Config> deepseek_v4;  // set for "deepseek_v4"
};

// Special-token kinds as stored in GGUF `tokenizer.ggml.token_type`.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The tokenizer as described by a model file.
struct TokenizerData {
  enum class Kind {
    kByteLevelBpe,  // GPT-2 style, ranked merges (GGUF tokenizer.ggml.model == "gpt2")
    kScoreBpe,      // llama2.c tok*.bin: merge the highest-scoring pair
  };
  Kind kind = Kind::kByteLevelBpe;
  std::string pre;                     // GGUF tokenizer.ggml.pre ("smollm", "llama-bpe", ...)
  std::vector<std::string> tokens;     // id -> piece (byte-level pieces for kByteLevelBpe)
  std::vector<float> scores;           // kScoreBpe only
  std::vector<TokenType> token_types;  // may be empty
  std::vector<std::string> merges;     // "a b", rank order; kByteLevelBpe only
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  std::string chat_template;     // Jinja source, when the file carries one
  std::vector<int32_t> eog_ids;  // every token that ends generation (eos, <|im_end|>, ...)
};

// A loaded model: config, tokenizer and weight views over one or more mapped files.
//
// Weight names follow GGUF ("token_embd.weight", "blk.3.attn_q.weight", "output_norm.weight",
// "output.weight"); llama2.c files are mapped to these names when loaded. Hugging Face DeepSeek
// checkpoints keep their HF names ("model.layers.3.self_attn.q_a_proj.weight", ...).
// Threads: immutable after loading; safe to share across threads.
// Where a model was loaded from. Loaders fill it; later layers (the tokenizer loader) read it
// instead of classifying the path again by their own rules.
enum class ModelFormat { kInMemory, kGguf, kLlama2c, kHuggingFace };
struct ModelSource {
  ModelFormat format = ModelFormat::kInMemory;
  std::string path;    // as given to LoadModel; "" for models assembled in memory
  std::string folder;  // the checkpoint folder of a Hugging Face model, else ""
};

struct Model {
  ModelConfig config;
  ModelSource source;
  TokenizerData tokenizer;
  absl::flat_hash_map<std::string, TensorView> tensors;
  std::vector<std::unique_ptr<util::MappedFile>> files;
  // Owned storage for tensors that had to be converted at load (e.g. llama2.c's tied layout).
  std::vector<std::vector<uint8_t>> owned;
  // DeepSeek-V4.1 Engram: the token class of every token id (tokenizer/engram_token_map.h), set
  // by whoever holds the tokenizer before arch::CreateCausalLm; empty when not supplied.
  std::vector<int32_t> engram_token_classes;

  // Returns the tensor or NotFound "missing_tensor".
  absl::StatusOr<const TensorView*> Get(const std::string& name) const;
  // Returns the tensor or nullptr when absent.
  const TensorView* Find(const std::string& name) const;
};

// Names the tensors this process maps but never reads (another expert-parallel rank's routed
// experts), given the parsed config. Null: every tensor is read.
using UnreadTensors = std::function<bool(const std::string& name, const ModelConfig& config)>;

// Loads a model from a GGUF file, a llama2.c checkpoint (.bin; the tokenizer is `tok*.bin`
// beside it or `tokenizer_path`), chosen by the file's magic, or a Hugging Face checkpoint
// folder (a directory, its config.json or one of its .safetensors files; see hf_checkpoint.h).
// The loaders check the files; which tensors exist and their shapes and types are checked by
// arch::CreateCausalLm against the architecture's schema.
//
// Errors: every reader error ("file_not_found", "bad_magic", "truncated_file",
//   "out_of_bounds", "unsupported_dtype", "unsupported_architecture", "missing_metadata",
//   "bad_metadata", "vocab_mismatch" (llama2.c); HF folders add "bad_config",
//   "unsupported_config", "missing_shard", "bad_header", and for FP8 weights "missing_tensor",
//   "shape_mismatch", "nan_in_weights" (their scales)).
// `unread`: tensors this process maps but never reads (another expert-parallel rank's routed
// experts), which a loader leaves as stored: no conversion, no value check.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path,
                                                 const std::string& tokenizer_path = "",
                                                 const UnreadTensors& unread = nullptr);

}  // namespace deepinfer::model
