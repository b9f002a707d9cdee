#pragma once

// DeepSeek-V4.1's vision tower (a ViT over 14 x 14 patches with 2-D rotary attention), its aligner
// (3 x 3 patch merge + GELU MLP into the text width) and the rows of an image's span in the text
// model's input. A shared block: the text builder (deepseek_v41.cc) loads it through its own
// TensorSchema and overwrites the span positions' token embeddings with EmbedImages' rows.
//
// Source: DeepSeek-V4.1-Flash inference/vision.py (ViT, Aligner) and model.py
//   (merge_image_embeddings), as the goldens in ../shared/goldens/deepseek_v41_vision were made
//   (their README, "Vision tower as the reference computes it"); cross-checked against
//   alibaba/rtp-llm rtp_llm/models/multimodal/deepseek_vision.py.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/tensor_schema.h"
#include "model/model.h"
#include "util/aligned_vector.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {

// One preprocessed image: its patches in row-major grid order.
//
// Shapes: pixel_values [n_vit_h * n_vit_w, 3, patch, patch] f32 (the reference's bf16-rounded
//   values; patch p covers grid row p / n_vit_w, column p % n_vit_w).
// Lifetime: borrowed for the duration of a call.
struct VisionImage {
  const float* pixel_values = nullptr;
  int32_t n_vit_h = 0;
  int32_t n_vit_w = 0;

  int64_t num_patches() const { return int64_t{n_vit_h} * n_vit_w; }
};

// The text-model grid of an image with a ViT grid of n_vit_h x n_vit_w patches: the aligner
// merges ratio x ratio patches (zero-padding the bottom / right edge) into one token.
struct LlmGrid {
  int32_t n_h = 0;
  int32_t n_w = 0;

  int64_t num_cells() const { return int64_t{n_h} * n_w; }
  // [image_start] + (n_w cells + image_newline) per row + [image_end].
  int64_t span_rows() const { return int64_t{n_h} * (n_w + 1) + 2; }
};
LlmGrid LlmGridOf(int32_t n_vit_h, int32_t n_vit_w, int ratio);

// The role of each position of an image span, as the reference's token_types (TEXT is -1).
enum class ImageTokenType : int8_t { kStart = 0, kImage = 1, kNewline = 2, kEnd = 3 };
// The span's token types in order. Shapes: out [grid.span_rows()].
void ImageSpanTokenTypes(const LlmGrid& grid, ImageTokenType* out);

// The weights of one ViT block. Linear weights [out, in] in any type the matmul kernels read
// (BF16 in the release, FP8 with its scales where stored so); vectors dequantized to f32.
struct VisionBlock {
  std::vector<float> norm1, norm2;  // [D] (F32 in the release)
  const tensor::TensorView* wqkv = nullptr;  // [3D, D]: q rows, then k, then v
  std::vector<float> wqkv_bias;             // [3D]
  const tensor::TensorView* wo = nullptr;    // [D, D]
  std::vector<float> wo_bias;               // [D]
  const tensor::TensorView* w1 = nullptr;    // [2I, D]: gate rows, then up rows
  const tensor::TensorView* w2 = nullptr;    // [D, I]
};

struct VisionWeights {
  const tensor::TensorView* patch_embed = nullptr;  // [D, 3 * patch^2]
  std::vector<float> patch_embed_bias;             // [D]
  std::vector<VisionBlock> blocks;
  std::vector<float> norm;  // [D]
  const tensor::TensorView* aligner_w1 = nullptr;  // [dim, D * ratio^2]
  std::vector<float> aligner_b1;                   // [dim]
  const tensor::TensorView* aligner_w2 = nullptr;  // [dim, dim]
  std::vector<float> aligner_b2;                   // [dim]
  std::vector<float> image_start, image_end, image_newline;  // [dim] each
};

// The vision tower of one model, with the scratch of its forward pass.
//
// Numerics: f32 activations, weights as stored (dequantized exactly inside the matmul); RMSNorm
//   eps 1e-6; attention scale head_dim^-0.5 over all patches of the same image (bidirectional,
//   no mask, computed blockwise with an online softmax: memory O(patches x D), not O(patches^2));
//   rotary tables in f32 as the reference computes them. Matches the reference within ~1e-5.
// Threads: every call runs its matmuls and attention on `pool` and must come from the pool's
//   owner, one call at a time (the scratch is the object's). Results do not depend on the
//   thread count nor on which other images share the call.
// Cost: per layer and image of n patches 2 n (3D^2 + D^2 + 3 D I) flops in matmuls plus
//   4 n^2 D in attention (the release's 93 x 93 image: 222 + 306 GFLOP per layer; one layer
//   14.5 s on 2 AVX-512 cores); scratch about n_total (9D + 3I) floats for the batch's n_total
//   patches, kept and reused (the release's largest image: ~610 MB, most of it the MLP's).
// Lifetime: borrows the Model whose tensors it views.
class VisionTower {
 public:
  // Reads the vision tensors of `vision` (vision.*, aligner.*, image_{start,end,newline}) through
  // `schema`, which marks them used; `text_hidden` is the text model's width (dim).
  // Errors: the schema's ("missing_tensor", "shape_mismatch", "unsupported_dtype",
  //   "nan_in_weights"), naming the tensor.
  static absl::StatusOr<std::unique_ptr<VisionTower>> Load(
      TensorSchema& schema, const model::DeepseekV41VisionConfig& vision, int64_t text_hidden);

  const model::DeepseekV41VisionConfig& config() const { return cfg_; }
  int64_t text_hidden() const { return dim_; }
  LlmGrid GridOf(const VisionImage& image) const {
    return LlmGridOf(image.n_vit_h, image.n_vit_w, cfg_.downsample_ratio);
  }

  // The ViT over a batch of images (patch embedding, blocks, final norm): one matmul per weight
  // for all patches of the batch, attention per image.
  // Shapes: out [sum of num_patches, D] f32, images in order.
  // REQUIRES (checked): every image has a grid of at least 1 x 1 and pixel_values.
  void EncodeVit(std::span<const VisionImage> images, float* out, util::ThreadPool& pool);

  // The aligner over ViT outputs of a batch of images (`vit` as EncodeVit writes it).
  // Shapes: vit [sum of num_patches, D]; out [sum of GridOf(image).num_cells(), dim] f32, each
  //   image's cells in row-major order.
  void Align(std::span<const VisionImage> images, const float* vit, float* out,
             util::ThreadPool& pool);

  // The span rows of a batch of images: EncodeVit, Align, then per image [image_start], each
  // LLM-grid row's cells followed by image_newline, [image_end] — the rows the text model
  // writes over the span positions' token embeddings (ImageSpanTokenTypes gives their roles).
  // Shapes: out [sum of GridOf(image).span_rows(), dim] f32.
  void EmbedImages(std::span<const VisionImage> images, float* out, util::ThreadPool& pool);

  // Writes one image's span rows from its aligner cells. Shapes: cells [grid.num_cells(), dim];
  // out [grid.span_rows(), dim].
  void WriteSpan(const LlmGrid& grid, const float* cells, float* out) const;

 private:
  VisionTower(const model::DeepseekV41VisionConfig& cfg, int64_t dim, VisionWeights w)
      : cfg_(cfg), dim_(dim), w_(std::move(w)) {}
  void Block(const VisionBlock& b, std::span<const VisionImage> images, int64_t rows, float* x,
             util::ThreadPool& pool);
  void Attention(std::span<const VisionImage> images, util::ThreadPool& pool);
  void RopeTable(const VisionImage& image);

  model::DeepseekV41VisionConfig cfg_;
  int64_t dim_;
  VisionWeights w_;
  // Scratch, grown on demand and reused.
  util::AlignedVector<float> h_, qkv_, attn_, mlp_, cos_, sin_, packed_kv_, thread_scratch_, cells_, ffn_,
      vit_, aligned_;
};

// Loads the vision tower of `m` through a schema of its own (every tensor outside the tower is
// ignored): for tests and tools that run the tower without the text model.
// Errors: Unimplemented "unsupported_config" when the config has no vision tower; else Load's.
absl::StatusOr<std::unique_ptr<VisionTower>> CreateVisionTower(const model::Model& m);

}  // namespace deepinfer::arch
