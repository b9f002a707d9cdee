#include "arch/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "fmt/format.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "util/aligned_vector.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using util::Grow;

// The reference's RMSNorm eps (vision.py RMSNorm(dim, eps=1e-6)); the config does not carry it.
constexpr float kNormEps = 1e-6f;
// A work item of attention is one head of this many query patches (a multiple of every ISA's
// tile of DenseAttend, and enough rows to reuse each packed key block from cache).
constexpr int kQueryChunk = 64;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }


// rows of x [rows, width] += bias [width].
void AddBias(float* x, const float* bias, int64_t rows, int64_t width, util::ThreadPool& pool) {
  pool.ParallelFor(
      rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t r = begin; r < end; ++r) kernels::AddInPlace(x + r * width, bias, width);
      },
      16);
}

// y = x W^T (+ bias when given).
// y = x w^T for a whole image batch. Float weights (BF16 as released) go through the panel GEMM,
// which is faster at the tower's hundreds to thousands of rows and keeps each row's result
// independent of the batch; other types (FP8 where stored) through MatMul.
void Project(const tensor::TensorView& w, const float* x, int64_t rows, float* y,
             util::ThreadPool& pool) {
  if (kernels::MatMulPanelsSupports(w.dtype)) {
    kernels::MatMulPanels(w, x, rows, y, pool);
  } else {
    kernels::MatMul(w, x, rows, y, pool);
  }
}

void Linear(const tensor::TensorView& w, const std::vector<float>* bias, const float* x,
            int64_t rows, float* y, util::ThreadPool& pool) {
  Project(w, x, rows, y, pool);
  if (bias != nullptr) AddBias(y, bias->data(), rows, w.shape[0], pool);
}

void RmsNormRows(const float* x, const std::vector<float>& weight, int64_t rows, int64_t dim,
                 float* out, util::ThreadPool& pool) {
  pool.ParallelFor(
      rows,
      [&](int64_t begin, int64_t end, int) {
        kernels::RmsNorm(x + begin * dim, weight.data(), end - begin, dim, kNormEps,
                         out + begin * dim);
      },
      16);
}

// torch's F.gelu default (approximate="none"): x/2 (1 + erf(x / sqrt 2)).
float GeluErf(float x) { return 0.5f * x * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2))); }

// Half-split rotation of a whole head (vision.py apply_rotary): x[i] and x[i + half] rotate by
// angle i, for i < half = head_dim / 2.
void RotateHalfSplit(float* x, const float* cos, const float* sin, int half) {
  for (int i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

// Loads one block's tensors under `p` ("vision.blocks.N.").
absl::StatusOr<VisionBlock> LoadBlock(TensorSchema& s, const std::string& p, int64_t D,
                                      int64_t I) {
  VisionBlock b;
  DI_ASSIGN_OR_RETURN(b.norm1, s.Vec(p + "norm1.weight", {D}));
  DI_ASSIGN_OR_RETURN(b.wqkv, s.Mat(p + "attn.wqkv.weight", 3 * D, D));
  DI_ASSIGN_OR_RETURN(b.wqkv_bias, s.Vec(p + "attn.wqkv.bias", {3 * D}));
  DI_ASSIGN_OR_RETURN(b.wo, s.Mat(p + "attn.wo.weight", D, D));
  DI_ASSIGN_OR_RETURN(b.wo_bias, s.Vec(p + "attn.wo.bias", {D}));
  DI_ASSIGN_OR_RETURN(b.norm2, s.Vec(p + "norm2.weight", {D}));
  DI_ASSIGN_OR_RETURN(b.w1, s.Mat(p + "mlp.w1.weight", 2 * I, D));
  DI_ASSIGN_OR_RETURN(b.w2, s.Mat(p + "mlp.w2.weight", D, I));
  return b;
}

}  // namespace

LlmGrid LlmGridOf(int32_t n_vit_h, int32_t n_vit_w, int ratio) {
  return {static_cast<int32_t>(CeilDiv(n_vit_h, ratio)),
          static_cast<int32_t>(CeilDiv(n_vit_w, ratio))};
}

void ImageSpanTokenTypes(const LlmGrid& grid, ImageTokenType* out) {
  int64_t i = 0;
  out[i++] = ImageTokenType::kStart;
  for (int32_t r = 0; r < grid.n_h; ++r) {
    for (int32_t c = 0; c < grid.n_w; ++c) out[i++] = ImageTokenType::kImage;
    out[i++] = ImageTokenType::kNewline;
  }
  out[i] = ImageTokenType::kEnd;
}

absl::StatusOr<std::unique_ptr<VisionTower>> VisionTower::Load(
    TensorSchema& s, const model::DeepseekV41VisionConfig& cfg, int64_t dim) {
  const int64_t D = cfg.hidden, I = cfg.intermediate, P = cfg.patch_size;
  const int64_t r2 = int64_t{cfg.downsample_ratio} * cfg.downsample_ratio;
  VisionWeights w;
  DI_ASSIGN_OR_RETURN(w.patch_embed, s.Mat("vision.patch_embed.proj.weight", D, 3 * P * P));
  DI_ASSIGN_OR_RETURN(w.patch_embed_bias, s.Vec("vision.patch_embed.proj.bias", {D}));
  for (int l = 0; l < cfg.num_layers; ++l) {
    DI_ASSIGN_OR_RETURN(VisionBlock b, LoadBlock(s, fmt::format("vision.blocks.{}.", l), D, I));
    w.blocks.push_back(std::move(b));
  }
  DI_ASSIGN_OR_RETURN(w.norm, s.Vec("vision.norm.weight", {D}));
  DI_ASSIGN_OR_RETURN(w.aligner_w1, s.Mat("aligner.w1.weight", dim, D * r2));
  DI_ASSIGN_OR_RETURN(w.aligner_b1, s.Vec("aligner.w1.bias", {dim}));
  DI_ASSIGN_OR_RETURN(w.aligner_w2, s.Mat("aligner.w2.weight", dim, dim));
  DI_ASSIGN_OR_RETURN(w.aligner_b2, s.Vec("aligner.w2.bias", {dim}));
  DI_ASSIGN_OR_RETURN(w.image_start, s.Vec("image_start", {dim}));
  DI_ASSIGN_OR_RETURN(w.image_end, s.Vec("image_end", {dim}));
  DI_ASSIGN_OR_RETURN(w.image_newline, s.Vec("image_newline", {dim}));
  return std::unique_ptr<VisionTower>(new VisionTower(cfg, dim, std::move(w)));
}

absl::StatusOr<std::unique_ptr<VisionTower>> CreateVisionTower(const model::Model& m) {
  if (!m.config.deepseek_v4 || !m.config.deepseek_v4->vision) {
    return UnimplementedError(util::codes::kUnsupportedConfig,
                              fmt::format("model '{}' has no vision tower (no vision_config)",
                                          m.config.name));
  }
  TensorSchema schema(m, {.matrices = MatrixTypes::kBlockScaled});
  return VisionTower::Load(schema, *m.config.deepseek_v4->vision, m.config.hidden);
}

// Rotary tables of one image, [n_patches, head_dim / 2]: angle i of patch (h, w) is
// h * inv_freq[i] for i < head_dim / 4, then w * inv_freq[i - head_dim / 4], with inv_freq_j =
// 1 / theta^(2j / rope_dim), rope_dim = head_dim / 2 (vision.py get_vision_cos_sin: "height
// frequencies precede width frequencies in each half of the head"). The frequencies, products
// and the angles are rounded to f32 as torch computes them in f32, so that positions up to ~100
// rotate by the reference's angles, not by more exact ones (a 1e-5 rad difference shows).
void VisionTower::RopeTable(const VisionImage& image) {
  const int half = cfg_.head_dim() / 2, quarter = half / 2;
  std::vector<float> inv(quarter);
  for (int j = 0; j < quarter; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(half);
    inv[j] = 1.0f / static_cast<float>(std::pow(static_cast<double>(cfg_.rope_theta), e));
  }
  const int64_t n = image.num_patches();
  Grow(cos_, n * half);
  Grow(sin_, n * half);
  for (int64_t p = 0; p < n; ++p) {
    const float pos[2] = {static_cast<float>(p / image.n_vit_w),
                          static_cast<float>(p % image.n_vit_w)};
    for (int i = 0; i < half; ++i) {
      const float angle = pos[i / quarter] * inv[i % quarter];
      cos_[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

// Multi-head attention of every image over its own patches, from qkv_ [rows, 3D] into attn_
// [rows, D]: RoPE on q and k in place, each (image, head)'s keys and values packed for the dense
// attention kernel (kernels::PackDenseKv), then each (image, head, 64 query patches) attends all
// of its image's patches: bidirectional, no mask.
void VisionTower::Attention(std::span<const VisionImage> images, util::ThreadPool& pool) {
  const int64_t D = cfg_.hidden, H = cfg_.num_heads, hd = cfg_.head_dim(), half = hd / 2;
  struct Head {
    int64_t token0, packed0;
    int32_t n, h;
  };
  struct Item {
    int32_t head, r0, rows;
  };
  std::vector<Head> heads;
  std::vector<Item> items;
  int64_t token0 = 0, packed0 = 0;
  for (const VisionImage& im : images) {
    const int64_t n = im.num_patches();
    RopeTable(im);
    float* qkv = qkv_.data() + token0 * 3 * D;
    pool.ParallelFor(
        n,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t t = begin; t < end; ++t) {
            for (int64_t h = 0; h < 2 * H; ++h) {  // the q heads, then the k heads
              RotateHalfSplit(qkv + t * 3 * D + h * hd, cos_.data() + t * half,
                              sin_.data() + t * half, static_cast<int>(half));
            }
          }
        },
        16);
    for (int32_t h = 0; h < H; ++h) {
      for (int64_t r0 = 0; r0 < n; r0 += kQueryChunk) {
        items.push_back({static_cast<int32_t>(heads.size()), static_cast<int32_t>(r0),
                         static_cast<int32_t>(std::min<int64_t>(kQueryChunk, n - r0))});
      }
      heads.push_back({token0, packed0, static_cast<int32_t>(n), h});
      packed0 += kernels::DensePackedFloats(static_cast<int>(n), static_cast<int>(hd));
    }
    token0 += n;
  }
  Grow(packed_kv_, packed0);
  pool.ParallelFor(static_cast<int64_t>(heads.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const Head& head = heads[i];
      const float* k = qkv_.data() + head.token0 * 3 * D + D + head.h * hd;
      kernels::PackDenseKv(k, k + D, 3 * D, head.n, static_cast<int>(hd),
                           packed_kv_.data() + head.packed0);
    }
  });
  const int64_t per_thread = kernels::DenseAttendScratchFloats(kQueryChunk, static_cast<int>(hd));
  Grow(thread_scratch_, per_thread * pool.num_threads());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool.ParallelFor(static_cast<int64_t>(items.size()), [&](int64_t begin, int64_t end, int th) {
    float* scratch = thread_scratch_.data() + th * per_thread;
    for (int64_t i = begin; i < end; ++i) {
      const Item& it = items[i];
      const Head& head = heads[it.head];
      const int64_t row = head.token0 + it.r0;
      kernels::DenseAttend(qkv_.data() + row * 3 * D + head.h * hd, 3 * D, it.rows,
                           packed_kv_.data() + head.packed0, head.n, static_cast<int>(hd), scale,
                           scratch, attn_.data() + row * D + head.h * hd, D);
    }
  });
}

// x += wo(attn(norm1(x))); x += w2(silu(gate) * up), gate, up = w1(norm2(x)).
void VisionTower::Block(const VisionBlock& b, std::span<const VisionImage> images, int64_t rows,
                        float* x, util::ThreadPool& pool) {
  const int64_t D = cfg_.hidden, I = cfg_.intermediate;
  Grow(h_, rows * D);
  Grow(qkv_, rows * 3 * D);
  Grow(attn_, rows * D);
  Grow(mlp_, rows * 2 * I);
  Grow(ffn_, rows * I);
  RmsNormRows(x, b.norm1, rows, D, h_.data(), pool);
  Linear(*b.wqkv, &b.wqkv_bias, h_.data(), rows, qkv_.data(), pool);
  Attention(images, pool);
  Linear(*b.wo, &b.wo_bias, attn_.data(), rows, h_.data(), pool);
  kernels::AddInPlace(x, h_.data(), rows * D);
  RmsNormRows(x, b.norm2, rows, D, h_.data(), pool);
  Linear(*b.w1, nullptr, h_.data(), rows, mlp_.data(), pool);
  pool.ParallelFor(
      rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t r = begin; r < end; ++r) {
          const float* g = mlp_.data() + r * 2 * I;
          kernels::SiluMul(g, g + I, I, ffn_.data() + r * I);
        }
      },
      16);
  Linear(*b.w2, nullptr, ffn_.data(), rows, h_.data(), pool);
  kernels::AddInPlace(x, h_.data(), rows * D);
}

void VisionTower::EncodeVit(std::span<const VisionImage> images, float* out,
                            util::ThreadPool& pool) {
  if (images.empty()) return;
  const int64_t D = cfg_.hidden;
  int64_t rows = 0;
  for (const VisionImage& im : images) {
    DI_CHECK(im.n_vit_h >= 1 && im.n_vit_w >= 1 && im.pixel_values != nullptr);
    // The patches of one image are contiguous already ([n, 3, P, P] is [n, 3 P^2]).
    Project(*w_.patch_embed, im.pixel_values, im.num_patches(), out + rows * D, pool);
    rows += im.num_patches();
  }
  AddBias(out, w_.patch_embed_bias.data(), rows, D, pool);
  for (const VisionBlock& b : w_.blocks) Block(b, images, rows, out, pool);
  RmsNormRows(out, w_.norm, rows, D, out, pool);
}

// Unfolds each image's [n_h, n_w, D] features into ratio x ratio cells (zero past the bottom /
// right edge; feature c * ratio^2 + kh * ratio + kw, F.unfold's order), then w2(gelu(w1(cell))).
void VisionTower::Align(std::span<const VisionImage> images, const float* vit, float* out,
                        util::ThreadPool& pool) {
  if (images.empty()) return;
  const int64_t D = cfg_.hidden, r = cfg_.downsample_ratio, width = D * r * r;
  int64_t cells = 0;
  for (const VisionImage& im : images) cells += GridOf(im).num_cells();
  Grow(cells_, cells * width);
  Grow(ffn_, cells * dim_);
  int64_t cell0 = 0, patch0 = 0;
  for (const VisionImage& im : images) {
    const LlmGrid g = GridOf(im);
    const float* src = vit + patch0 * D;
    pool.ParallelFor(g.num_cells(), [&](int64_t begin, int64_t end, int) {
      for (int64_t c = begin; c < end; ++c) {
        float* dst = cells_.data() + (cell0 + c) * width;
        const int64_t ch = c / g.n_w, cw = c % g.n_w;
        for (int64_t kh = 0; kh < r; ++kh) {
          for (int64_t kw = 0; kw < r; ++kw) {
            const int64_t ph = ch * r + kh, pw = cw * r + kw;
            const bool inside = ph < im.n_vit_h && pw < im.n_vit_w;
            const float* f = src + (ph * im.n_vit_w + pw) * D;
            for (int64_t d = 0; d < D; ++d) dst[d * r * r + kh * r + kw] = inside ? f[d] : 0.0f;
          }
        }
      }
    });
    cell0 += g.num_cells();
    patch0 += im.num_patches();
  }
  Linear(*w_.aligner_w1, &w_.aligner_b1, cells_.data(), cells, ffn_.data(), pool);
  pool.ParallelFor(
      cells * dim_,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) ffn_[i] = GeluErf(ffn_[i]);
      },
      1024);
  Linear(*w_.aligner_w2, &w_.aligner_b2, ffn_.data(), cells, out, pool);
}

void VisionTower::WriteSpan(const LlmGrid& grid, const float* cells, float* out) const {
  auto put = [&](const float* row) {
    std::copy(row, row + dim_, out);
    out += dim_;
  };
  put(w_.image_start.data());
  for (int32_t h = 0; h < grid.n_h; ++h) {
    for (int32_t c = 0; c < grid.n_w; ++c) put(cells + (int64_t{h} * grid.n_w + c) * dim_);
    put(w_.image_newline.data());
  }
  put(w_.image_end.data());
}

void VisionTower::EmbedImages(std::span<const VisionImage> images, float* out,
                              util::ThreadPool& pool) {
  int64_t patches = 0, cells = 0;
  for (const VisionImage& im : images) {
    patches += im.num_patches();
    cells += GridOf(im).num_cells();
  }
  Grow(vit_, patches * cfg_.hidden);
  Grow(aligned_, cells * dim_);
  EncodeVit(images, vit_.data(), pool);
  Align(images, vit_.data(), aligned_.data(), pool);
  int64_t cell0 = 0;
  for (const VisionImage& im : images) {
    const LlmGrid g = GridOf(im);
    WriteSpan(g, aligned_.data() + cell0 * dim_, out);
    out += g.span_rows() * dim_;
    cell0 += g.num_cells();
  }
}

}  // namespace deepinfer::arch
